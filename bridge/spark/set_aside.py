"""Tables set aside: a table whose batch cannot be applied is held back, in order, until replayed.

When a table's batch fails twice (bridge.spark.applier) or cannot be decoded as a table
(bridge.spark.decode), its records of the batch go to the dead-letter table so that the other
tables go on. Applying the table's *later* records meanwhile would be wrong: a key inserted in
the failed batch and deleted in a later one would come back when the failed batch is applied
again, and the table's fences (bridge.spark.fences) would skip the failed batch's records as
resends once a later batch moved them. So the table is **held**: every later record of it goes
to the dead-letter table too, in Kafka order, until the records are applied again from there
(:mod:`bridge.spark.replay`, at the job's every start). Nothing of the table is lost and
nothing is applied out of order; the table is late, not wrong.

The dead-letter table is the only record of which tables are held: a held table is one with
rows whose reason starts with :data:`SET_ASIDE`. A replay deletes the rows it applied;
deleting a table's rows by hand gives its set-aside changes up and releases it at the next
start. Keeping it there makes holding atomic with the records themselves (one Delta append, as
idempotent as the batch) and leaves the operator one place to look.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from bridge.spark.apply_metrics import TABLES_HELD
from bridge.spark.errors import first_line
from bridge.spark.graceful_stop import interrupted
from bridge.spark.resources import is_resource_failure

__all__ = [
    "SET_ASIDE",
    "HeldTables",
    "held_batches",
    "held_per_topic",
    "held_reason",
    "held_topics",
    "is_set_aside",
    "read_set_aside",
    "set_aside_reason",
]

logger = logging.getLogger(__name__)

#: How every dead-letter reason of a held table's records begins.
SET_ASIDE = "table set aside"


def set_aside_reason(error: BaseException | str) -> str:
    """The reason of the records of the batch that failed."""
    if isinstance(error, str):
        return f"{SET_ASIDE}: {error}"
    return f"{SET_ASIDE}: {type(error).__name__}: {first_line(error)}"


def held_reason(since_batch: int) -> str:
    """The reason of a held table's records in the batches after the one that failed."""
    return (
        f"{SET_ASIDE}: held back behind batch {since_batch}, whose records of the table "
        "failed; applied in order when the job tries the table again"
    )


def is_set_aside(reason: Column) -> Column:
    """Whether a dead-letter row is a held table's record (not a single bad record's)."""
    return reason.startswith(SET_ASIDE)


def held_topics(spark: Any, dead_letter_location: str) -> dict[str, int]:
    """The held tables' topics, each with the first batch that set it aside (none without a
    dead-letter table: no Spark job then)."""
    rows = set_aside_rows(dead_letter_location)
    if rows is not None:
        return {topic: since for topic, (since, _) in held_per_topic(rows).items()}
    from bridge.spark.merge import is_delta_table

    if not is_delta_table(spark, dead_letter_location):
        return {}
    rows = (
        spark.read.format("delta")
        .load(dead_letter_location)
        .where(is_set_aside(F.col("reason")))
        .groupBy("topic")
        .agg(F.min("batch_id").alias("since"))
        .collect()
    )
    return {str(r["topic"]): int(r["since"]) for r in rows}


def held_batches(spark: Any, dead_letter_location: str, topic: str) -> list[tuple[int, int]]:
    """``(batch id, records)`` of a held table's set-aside records, in batch order."""
    rows = set_aside_rows(dead_letter_location)
    if rows is not None:
        import pyarrow.compute as pc

        mine = rows.filter(pc.equal(rows["topic"], topic))
        counts = mine.group_by("batch_id").aggregate([("batch_id", "count")])
        return sorted(
            zip(counts["batch_id"].to_pylist(), counts["batch_id_count"].to_pylist(), strict=True)
        )
    held = (F.col("topic") == topic) & is_set_aside(F.col("reason"))
    grouped = spark.read.format("delta").load(dead_letter_location).where(held)
    return [
        (int(r["batch_id"]), int(r["count"]))
        for r in grouped.groupBy("batch_id").count().orderBy("batch_id").collect()
    ]


def set_aside_rows(dead_letter_location: str) -> Any:
    """The held tables' records in the dead-letter table, their ``topic`` and ``batch_id``
    (pyarrow), read by delta-rs in milliseconds; None where it is Spark's to read (a remote
    path, whose credentials Spark holds; a table delta-rs cannot read). A Spark read of it
    costs seconds (2.8-3.5 s at a replay, docs/measurements.md), at every start and every
    ``held_retry_interval``. An empty table where there is none yet."""
    import pyarrow as pa

    from bridge.spark.delta_log import local_root

    if "://" in dead_letter_location and not dead_letter_location.startswith("file:"):
        return None
    if not local_root(dead_letter_location).exists():
        return pa.table({"topic": pa.array([], pa.string()), "batch_id": pa.array([], pa.int64())})
    try:
        rows = read_set_aside(dead_letter_location)
    except Exception as exc:  # not a Delta table, or one delta-rs does not read: Spark's
        logger.debug("%s: read by Spark (%s: %s)", dead_letter_location,
                     type(exc).__name__, first_line(exc))  # fmt: skip
        return None
    return rows.select(["topic", "batch_id"])


def read_set_aside(dead_letter_location: str) -> Any:
    """The dead-letter table's rows of held tables (``topic``, ``reason``, ``batch_id``), by
    delta-rs; raises what delta-rs raises where it cannot read the table."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    rows = DeltaTable(dead_letter_location).to_pyarrow_table(
        columns=["topic", "reason", "batch_id"]
    )
    return rows.filter(pc.starts_with(rows["reason"], SET_ASIDE))


def held_per_topic(rows: Any) -> dict[str, tuple[int, int]]:
    """Held records (pyarrow: ``topic``, ``batch_id``) -> topic: (first batch, records)."""
    if rows.num_rows == 0:
        return {}
    per_topic = rows.group_by("topic").aggregate([("batch_id", "min"), ("batch_id", "count")])
    return {
        str(topic): (int(since), int(count))
        for topic, since, count in zip(
            per_topic["topic"].to_pylist(),
            per_topic["batch_id_min"].to_pylist(),
            per_topic["batch_id_count"].to_pylist(),
            strict=True,
        )
    }


class HeldTables:
    """A running job's held tables (topic -> the batch that first set it aside), and when to
    apply their set-aside records again.

    ``replay`` (bridge.spark.replay, given by the job) applies every held table's records and
    returns the tables still held; a job tries it every ``retry_seconds`` at a batch's start,
    so a table whose failure has passed catches up without a restart. Without ``replay``, only
    a new start applies them.
    """

    def __init__(
        self,
        dead_letter_location: str,
        retry_seconds: float,
        replay: Callable[[Any], dict[str, int]] | None = None,
    ) -> None:
        self.location = dead_letter_location
        self.retry_seconds = retry_seconds
        self.replay = replay
        self._lock = threading.Lock()
        self._held: dict[str, int] | None = None  # read at the first batch, unless assumed
        self._retry_at = time.monotonic() + retry_seconds

    def current(self, spark: Any) -> dict[str, int]:
        """The held tables; read from the dead-letter table the first time."""
        with self._lock:
            if self._held is None:
                self._set(held_topics(spark, self.location))
            assert self._held is not None
            return dict(self._held)

    def assume(self, held: dict[str, int]) -> None:
        """The held tables as the caller just found them (a replay at the job's start)."""
        with self._lock:
            self._set(dict(held))

    def hold(self, topic: str, batch_id: int) -> None:
        with self._lock:
            held = self._held if self._held is not None else {}
            held.setdefault(topic, batch_id)
            self._set(held)

    def retry(self, spark: Any) -> set[str]:
        """Apply the held tables' records again if it is time to; the tables released."""
        held = self.current(spark)
        if not held or self.replay is None or time.monotonic() < self._retry_at:
            return set()
        self._retry_at = time.monotonic() + self.retry_seconds
        try:
            still = self.replay(spark)
        except Exception as exc:  # the dead-letter table unreadable, say: held, tried later
            if is_resource_failure(exc) or interrupted(exc):
                raise
            logger.warning("trying the held tables again failed (%s: %s); they stay held",
                           type(exc).__name__, first_line(exc))  # fmt: skip
            return set()
        with self._lock:
            assert self._held is not None
            # Tables held by other threads meanwhile stay held (none: a batch's start).
            released = held.keys() - still.keys()
            self._set({t: b for t, b in self._held.items() if t not in released})
        return released

    def _set(self, held: dict[str, int]) -> None:
        self._held = held
        TABLES_HELD.set(len(held))
