"""Fences of a keyed table: which arriving changes are already reflected, or erased, in Delta.

The MERGE guard (a change applies only when newer than the row it meets) cannot see a row that
is *not there*. Two kinds of late records would then write a row the source never had at that
point of its commit order:

* **Resends.** An at-least-once producer resends after a crash: an insert of key K, then its
  delete, both applied already. When a micro-batch ends between the resent insert and the
  resent delete, the insert meets no row (the delete removed it) and is applied: K is back,
  visible until the next batch applies the delete again. Within one Kafka partition records
  arrive in commit order, so a resend is exactly a record at or below the highest position
  this partition already delivered: its **partition fence**.
* **Truncates overtaken.** A table's truncate (null key: partition 0) and an earlier change
  of key K in another partition are not ordered across partitions: the change can arrive in a
  later micro-batch than the truncate, meet no row, and be inserted after the truncate erased
  it. Every change before the table's last applied truncate is moot: its **truncate fence**.

Snapshot rows (op ``r``) are exempt from partition fences: a resumed snapshot copies its
interrupted chunks again at the same positions, with rows that were never delivered among
them, and ``snapshot.mode = always`` copies at the slot's confirmed position, below rows
streamed before. The MERGE guard handles them as before; the truncate fence applies to them
too (a row copied before a truncate is erased by it).

Where fences live. In the table's own Delta log: every MERGE commit carries the fences after it
as its ``userMetadata`` (``{"pgbridge_fences": …}``), so they are committed atomically with the
rows they describe, skipped with them when Delta's idempotent DML skips a replayed batch, and
read back (:func:`read_fences`) from the newest commit that has them when the job starts. A
batch replayed after a crash is recognised by them too (its offsets are covered,
:meth:`Fences.cover`), and a record a commit covered is never applied again: the appends of
``bridge.spark.applier`` rely on that instead of Delta's transaction-id check, which costs
three Spark jobs per table and batch.

Each commit also records the table's **floor**: the lowest commit LSN of any change ever
applied to it (its first load's, then lowered by every batch), so no row the table holds was
written by an older change. Snapshot rows at or below the floor can then only find a resend of
themselves or a newer row, which the MERGE guard would keep: they need no update clause
(bridge.spark.merge, ``MergePlan.inserts_only``). With a floor, the partition fences cover
every change the table ever applied, which lets a batch of inserts, or of a snapshot's first
attempt, be appended without a join (``bridge.spark.write_choice.new_keys_only``). Tables whose
commits predate the floor have none (no shortcut).

Beside them each commit records, per Kafka partition, the highest offset of the table's
records it covered (``offsets``): the exact line between what the table holds and what it does
not yet, which the current-state views of the changelog mode (:mod:`bridge.spark.changelog`)
fold on top of it. Positions cannot draw that line, because snapshot rows are exempt from them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bridge.spark import transforms as tf

__all__ = ["Fences", "Position", "logged_fences", "read_fences"]

logger = logging.getLogger(__name__)

Position = tuple[int, int]  # (commit_lsn, seq)

METADATA_KEY = "pgbridge_fences"
#: Commits looked back through for the newest fences (OPTIMIZE, VACUUM or schema changes made
#: since carry none); past that the table is treated as having none (no filtering: safe).
_HISTORY_DEPTH = 100


@dataclass(frozen=True, slots=True)
class Fences:
    """Per Kafka partition, the highest position delivered (and the highest offset covered);
    the last truncate's position.

    The rule of which changes a table admits has three renderings, kept side by side here
    and checked against each other by tests/spark/test_fences.py: Spark columns
    (:meth:`admits`, :meth:`not_covered`), one change in Python (:meth:`admits_change`) and
    Arrow (:meth:`admitted_rows`)."""

    partitions: Mapping[int, Position] = field(default_factory=dict)
    truncate: Position | None = None
    offsets: Mapping[int, int] = field(default_factory=dict)
    #: The lowest commit LSN of any change applied to the table (None: not known).
    floor: int | None = None

    def admits(self) -> Column | None:
        """The condition a change must meet to be applied (None: every change is)."""
        conditions: list[Column] = []
        if self.truncate is not None:
            conditions.append(_after(*self.truncate))
        if self.partitions:
            partition = F.col(tf.PARTITION)
            fresh: Any = None
            for number, position in sorted(self.partitions.items()):
                test = _after(*position)
                fresh = (
                    F.when(partition == number, test)
                    if fresh is None
                    else fresh.when(partition == number, test)
                )
            conditions.append((F.col(tf.OP) == "r") | fresh.otherwise(F.lit(True)))
        if not conditions:
            return None
        admitted = conditions[0]
        for other in conditions[1:]:
            admitted = admitted & other
        return admitted

    def filter(self, changes: DataFrame) -> DataFrame:
        """``changes`` without the resends and the changes a truncate erased."""
        admitted = self.admits()
        return changes if admitted is None else changes.where(admitted)

    def not_covered(self, partition: Column, offset: Column) -> Column | None:
        """Records (by Kafka partition and offset) this table's commits have not covered yet
        (None: every record, the table has covered none)."""
        if not self.offsets:
            return None
        covered: Any = None
        for number, last in sorted(self.offsets.items()):
            covered = (
                F.when(partition == number, offset > last)
                if covered is None
                else covered.when(partition == number, offset > last)
            )
        result: Column = covered.otherwise(F.lit(True))
        return result

    def admits_change(self, partition: int, offset: int, op: str, position: Position) -> bool:
        """:meth:`not_covered` and :meth:`admits` for one change, in Python (the driver's
        writes: ``bridge.spark.driver_changes``)."""
        covered = self.offsets.get(partition)
        if covered is not None and offset <= covered:
            return False
        if self.truncate is not None and position <= self.truncate:
            return False
        fence = self.partitions.get(partition)
        return fence is None or op == "r" or position > fence

    def admitted_rows(self, rows: Any, op: str) -> Any:
        """:meth:`not_covered` and :meth:`admits` over an Arrow table (the task lane's
        decoded records; ``op`` names its change kind column): the rows admitted."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self.offsets and self.truncate is None and not self.partitions:
            return rows
        partitions, offsets = rows.column(tf.PARTITION), rows.column(tf.OFFSET)
        lsn, seq = rows.column(tf.COMMIT_LSN), rows.column(tf.SEQ)

        def after(position: Position) -> Any:
            return pc.or_(
                pc.greater(lsn, position[0]),
                pc.and_(pc.equal(lsn, position[0]), pc.greater(seq, position[1])),
            )

        keep = pa.array([True] * rows.num_rows, pa.bool_())
        for number, last in self.offsets.items():
            keep = pc.and_(
                keep, pc.or_(pc.not_equal(partitions, number), pc.greater(offsets, last))
            )
        if self.truncate is not None:
            keep = pc.and_(keep, after(self.truncate))
        reads = pc.equal(rows.column(op), "r")
        for number, position in self.partitions.items():
            fresh = pc.or_(pc.not_equal(partitions, number), after(position))
            keep = pc.and_(keep, pc.or_(reads, fresh))
        return rows if pc.all(keep).as_py() else rows.filter(keep)

    def cover(self, offsets: Mapping[int, int]) -> bool:
        """Whether this table's commits covered every record of a batch whose highest offset
        per Kafka partition is ``offsets``: a batch replayed after a crash, applied already."""
        return bool(offsets) and all(
            number in self.offsets and offset <= self.offsets[number]
            for number, offset in offsets.items()
        )

    def advanced(
        self,
        partitions: Mapping[int, Position],
        truncate: Position | None,
        offsets: Mapping[int, int] | None = None,
        lowest: int | None = None,
        *,
        first_load: bool = False,
    ) -> Fences:
        """These fences moved up to a batch's highest positions (they never move back), the
        floor down to its ``lowest`` commit LSN (set by a table's ``first_load``; unknown
        stays unknown)."""
        merged = dict(self.partitions)
        for number, position in partitions.items():
            merged[number] = max(merged.get(number, position), position)
        last = self.truncate
        if truncate is not None:
            last = truncate if last is None else max(last, truncate)
        covered = dict(self.offsets)
        for number, offset in (offsets or {}).items():
            covered[number] = max(covered.get(number, offset), offset)
        floor = lowest if first_load else self.floor
        if floor is not None and lowest is not None:
            floor = min(floor, lowest)
        return Fences(merged, last, covered, floor)

    def to_metadata(self) -> str:
        return json.dumps(
            {
                METADATA_KEY: {
                    "partitions": {str(p): list(pos) for p, pos in sorted(self.partitions.items())},
                    "truncate": list(self.truncate) if self.truncate is not None else None,
                    "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
                    **({"floor": self.floor} if self.floor is not None else {}),
                }
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_metadata(cls, text: str | None) -> Fences | None:
        """The fences in a commit's ``userMetadata``; None if it holds none (or not ours)."""
        if not text:
            return None
        try:
            data = json.loads(text)[METADATA_KEY]
            partitions = {int(p): (int(v[0]), int(v[1])) for p, v in data["partitions"].items()}
            truncate = data["truncate"]
            # Absent in commits written before offsets were recorded: nothing known covered.
            offsets = {int(p): int(o) for p, o in data.get("offsets", {}).items()}
            floor = data.get("floor")
            return cls(
                partitions,
                (int(truncate[0]), int(truncate[1])) if truncate else None,
                offsets,
                None if floor is None else int(floor),
            )
        except (ValueError, KeyError, TypeError, IndexError):
            return None


def _after(commit_lsn: int, seq: int) -> Column:
    return (F.col(tf.COMMIT_LSN) > commit_lsn) | (
        (F.col(tf.COMMIT_LSN) == commit_lsn) & (F.col(tf.SEQ) > seq)
    )


def logged_fences(table: Any) -> Fences:
    """:func:`read_fences` of a table delta-rs opened (``table``): the same commits looked
    through, read from the log by delta-rs instead of a Spark job."""
    for info in table.history(_HISTORY_DEPTH):  # newest first
        metadata = info.get("userMetadata")
        if isinstance(metadata, str) and METADATA_KEY in metadata:
            return Fences.from_metadata(metadata) or Fences()
    return Fences()


def read_fences(spark: Any, path: str, version: int | None = None) -> Fences:
    """The fences of the newest commit of the table at ``path`` (up to ``version``) that has
    them (none: empty)."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history(_HISTORY_DEPTH)
    if version is not None:
        history = history.where(F.col("version") <= version)
    rows = (
        history.where(F.col("userMetadata").contains(METADATA_KEY))
        .orderBy(F.col("version").desc())
        .select("userMetadata")
        .limit(1)
        .collect()
    )
    fences = Fences.from_metadata(rows[0]["userMetadata"]) if rows else None
    return fences if fences is not None else Fences()
