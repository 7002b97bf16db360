"""Kafka offset ranges read in C into Arrow buffers (``bridge/native/_kafkaread.c``), bound to
the librdkafka confluent-kafka loaded: for the apply job's task lane
(:func:`bridge.spark.kafka_ranges.read_ranges`)."""

from __future__ import annotations

import functools
import logging
from types import ModuleType

from bridge.native.librdkafka import wheel_librdkafka_paths
from bridge.native.switches import NATIVE_READS, enabled

logger = logging.getLogger(__name__)


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
    candidates = wheel_librdkafka_paths()
    for path in candidates:
        try:
            _kafkaread.bind_library(path)
        except OSError as exc:
            logger.debug("librdkafka at %s not usable for reading ranges: %s", path, exc)
            continue
        return _kafkaread
    logger.info("confluent-kafka's librdkafka not found among %s: its Consumer reads", candidates)
    return None
