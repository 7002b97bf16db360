"""Which implementation runs, decided in one place (as psycopg's ``PSYCOPG_IMPL`` is).

pgbridge has one streaming path and optional C parts under it (``bridge.native``). Three
environment switches turn parts off, to compare paths or to step around a fault; nothing else
in the package reads them:

- ``PGBRIDGE_NATIVE=0``: no C part at all (the pure-Python path a machine without a compiler
  runs; ``make test`` runs the unit tests and an end-to-end slice on it);
- ``PGBRIDGE_READER_THREAD=0``: the pipeline's own thread reads the WAL (no reader thread);
- ``PGBRIDGE_NATIVE_BATCHES=0``: records reach librdkafka through confluent-kafka's
  ``produce_batch`` instead of the C batch call;
- ``PGBRIDGE_NATIVE_READS=0``: the apply job's tasks read Kafka through confluent-kafka's
  ``Consumer`` instead of the C reader (``bridge/native/_kafkaread.c``).

Each is read when asked (tests set them per process), and is on unless set to ``0``.
"""

from __future__ import annotations

import os

__all__ = ["NATIVE", "NATIVE_BATCHES", "NATIVE_READS", "READER_THREAD", "SWITCHES", "enabled"]

NATIVE = "PGBRIDGE_NATIVE"
READER_THREAD = "PGBRIDGE_READER_THREAD"
NATIVE_BATCHES = "PGBRIDGE_NATIVE_BATCHES"
NATIVE_READS = "PGBRIDGE_NATIVE_READS"
#: Every switch, with what ``0`` does (the environment check lists them as known).
SWITCHES = {
    NATIVE: "the pure-Python path (no C part)",
    READER_THREAD: "the pipeline's thread reads the WAL",
    NATIVE_BATCHES: "records go through produce_batch",
    NATIVE_READS: "the apply job's tasks read Kafka through confluent-kafka's Consumer",
}


def enabled(switch: str) -> bool:
    """Whether ``switch`` leaves its part on; a C part also needs ``PGBRIDGE_NATIVE``."""
    if switch not in SWITCHES:
        raise ValueError(f"unknown implementation switch {switch!r}")
    if os.environ.get(switch, "1") == "0":
        return False
    return switch == NATIVE or os.environ.get(NATIVE, "1") != "0"
