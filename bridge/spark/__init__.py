"""The apply job: pgbridge's change topics to Delta Lake tables with Spark Structured Streaming."""

from bridge.dependency_warnings import quiet_dependency_warnings

# Also in Spark's Python workers, which import this package before any module of it.
quiet_dependency_warnings()
