"""``pgbridge_apply_topic_lag_records``: per topic, the Kafka records the apply query has not
read yet, kept from each query progress report.

The report reaches Python as its JSON, one py4j call. PySpark's own listener wrapper turns
every report into Python objects field by field first, a py4j call per field and per map
entry: about 120 ms of the driver's and JVM's time a micro-batch, beside the next batch, on
the 4-table bench (docs/measurements.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from prometheus_client import Gauge

__all__ = ["TOPIC_LAG_RECORDS", "topic_lag", "unwatch_topic_lag", "watch_topic_lag"]

TOPIC_LAG_RECORDS = Gauge(
    "pgbridge_apply_topic_lag_records",
    "Per topic: Kafka records not yet read by the apply query (latest offsets minus the last "
    "batch's end offsets, summed over its partitions)",
    ["topic"],
)


def _offsets(value: Any) -> Any:
    """A source's offsets as the report holds them: parsed JSON, or JSON text."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def topic_lag(progress_sources: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Per topic, records behind: each Kafka source's latest offsets minus its batch's end
    (``sources`` of a progress report's JSON)."""
    lag: dict[str, int] = {}
    for source in progress_sources:
        latest, end = _offsets(source.get("latestOffset")), _offsets(source.get("endOffset"))
        if not isinstance(latest, dict) or not isinstance(end, dict):
            continue
        for topic, partitions in latest.items():  # Kafka: {topic: {partition: offset}}
            done: Any = end.get(topic)
            if not isinstance(partitions, dict) or not isinstance(done, dict):
                continue  # a Delta source's offset (the changelog's): no topics
            behind = 0
            for partition, offset in partitions.items():
                read_to: Any = done.get(partition, offset)
                behind += max(0, int(offset) - int(read_to))
            lag[topic] = behind
    return lag


def record_lag(progress_json: str) -> None:
    """Set the gauge from one progress report's JSON."""
    sources = json.loads(progress_json).get("sources") or []
    for topic, behind in topic_lag(sources).items():
        TOPIC_LAG_RECORDS.labels(topic).set(behind)


class _ProgressJson:
    """Implements ``PythonStreamingQueryListener`` (the interface PySpark's listeners reach
    the JVM through) taking only each progress report's JSON (the method names are the
    interface's)."""

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        record_lag(event.progress().json())

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    class Java:
        implements: ClassVar = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


_WATCHED: dict[int, Any] = {}  # id(session) -> its lag listener


def watch_topic_lag(spark: Any) -> None:
    """Keep ``pgbridge_apply_topic_lag_records`` from every query's progress (once per
    session)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    if id(spark) in _WATCHED:
        return

    class _LagListener(StreamingQueryListener):
        # PySpark registers ``_jlistener``: here it wraps _ProgressJson, not PySpark's
        # converting wrapper, so the on* methods below are never called.
        @property
        def _jlistener(self) -> Any:
            if not hasattr(self, "_wrapped"):
                jvm = spark.sparkContext._jvm
                self._wrapped = jvm.PythonStreamingQueryListenerWrapper(_ProgressJson())
            return self._wrapped

        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = _LagListener()
    spark.streams.addListener(listener)
    _WATCHED[id(spark)] = listener


def unwatch_topic_lag(spark: Any) -> None:
    """Remove the session's lag listener: Spark posts a query's last progress event
    asynchronously, and one that reaches a Python process on its way out prints a py4j
    traceback at every clean shutdown."""
    listener = _WATCHED.pop(id(spark), None)
    if listener is not None:
        spark.streams.removeListener(listener)
