"""pgbridge: PostgreSQL change data capture (pgoutput) to Kafka, applied to Delta Lake."""

__version__ = "0.1.0"
