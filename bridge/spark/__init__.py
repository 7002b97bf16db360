"""The apply job: pgbridge's change topics to Delta Lake tables with Spark Structured Streaming."""
