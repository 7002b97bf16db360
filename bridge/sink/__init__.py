"""I/O toward Kafka and the schema registry."""
