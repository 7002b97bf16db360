"""Kafka offset ranges read in C into Arrow buffers (``bridge/native/_kafkaread.c``), bound to
the librdkafka confluent-kafka loaded: for the apply job's task lane
(:func:`bridge.spark.kafka_ranges.read_ranges`)."""

from __future__ import annotations

import functools
from types import ModuleType

from bridge.native.librdkafka import bind_to_wheel_librdkafka
from bridge.native.switches import NATIVE_READS, enabled


@functools.cache  # bound once per process
def range_reader() -> ModuleType | None:
    """The bound ``bridge.native._kafkaread`` module (its ``Reader``), or ``None``: not built,
    ``PGBRIDGE_NATIVE=0`` or ``PGBRIDGE_NATIVE_READS=0``, or confluent-kafka's librdkafka not
    found (then confluent-kafka's ``Consumer`` reads)."""
    if not enabled(NATIVE_READS):
        return None
    try:
        from bridge.native import _kafkaread
    except ImportError:  # not built (no C compiler at install time)
        return None
    fallback = "the apply job's tasks read Kafka through its Consumer"
    return _kafkaread if bind_to_wheel_librdkafka(_kafkaread, fallback) else None
