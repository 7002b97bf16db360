"""Which write a keyed table's batch takes: an append (no join against the table), an
insert-only MERGE, or a full MERGE, decided from the batch's summary (bridge.spark.summary) and
the table's fences (bridge.spark.fences), without reading the table."""

from __future__ import annotations

from typing import Any

from bridge.snapshot.plan import position as snapshot_position
from bridge.spark.fences import Fences

__all__ = ["first_snapshot_attempt", "inserts_only", "new_keys_only"]


def new_keys_only(
    summary: dict[str, Any], count: int, fences: Fences, pgbridge_positions: bool
) -> bool:
    """Every change of a keyed table's batch inserts a key the table does not hold, so the
    batch can be appended, with no join against the table (whose cost grows with it). Only for
    a table whose fences go back to its first load (it has a floor, bridge.spark.fences), and
    batches of one kind:

    * **Inserts** (``c``) only (no truncate either). An insert of key K means the source held
      no K just before it; every earlier change of K is in the same Kafka partition, before
      it: at or below the partition's fence (applied, so Delta holds no K either), or in this
      batch (then a delete of K would be too: not inserts only). Resends of the insert are at
      or below the fence and filtered out; a record delivered twice in one batch is folded by
      ``last_change_per_key``. Where the order across partitions breaks this (a truncate in
      partition 0 applied after an insert of another partition; keys moved by added
      partitions), the append leaves the older row beside the new one for the later truncate
      or delete to remove (both only remove rows older than themselves), where a MERGE would
      drop the insert.
    * **A snapshot's first attempt** (see :func:`first_snapshot_attempt`).
    """
    if fences.floor is None:
        return False
    if int(summary["creates"]) == count:
        return True
    return pgbridge_positions and first_snapshot_attempt(summary, count, fences)


#: The ``seq`` of a snapshot's first row of its second attempt (bridge.snapshot.plan: ``run``
#: is the top field); a first attempt's rows are below it.
_SECOND_ATTEMPT = snapshot_position(1, 0, 0)


def first_snapshot_attempt(summary: dict[str, Any], count: int, fences: Fences) -> bool:
    """The batch holds snapshot reads (``r``) of the first attempt of the snapshot that loaded
    the table (all at its LSN, the table's floor), and the table holds nothing else: every
    partition's fence is at that LSN in the first attempt (no streamed change, no resumed
    attempt applied yet), no truncate. A snapshot's first attempt copies every row once, in
    chunks of disjoint keys (bridge.snapshot.plan), so none of these keys is in the table.
    An incremental snapshot's rows published at its high watermark are never published at
    that LSN again either (a crashed chunk is copied at a later one). The initial snapshot of a
    topic longer than a batch is thus appended batch after batch; a resumed attempt's rows,
    which may repeat rows an interrupted chunk delivered, take the insert-only MERGE."""
    floor = fences.floor
    last = summary["last"]
    if fences.truncate is not None or int(summary["reads"]) != count or last is None:
        return False
    if summary["lowest_lsn"] != floor or summary["reads_lsn"] != floor:
        return False
    if int(last[1]) >= _SECOND_ATTEMPT:
        return False
    return all(lsn == floor and seq < _SECOND_ATTEMPT for lsn, seq in fences.partitions.values())


def inserts_only(summary: dict[str, Any], count: int, fences: Fences) -> bool:
    """Every change of a keyed table's batch can only add rows: inserts (``c``), and snapshot
    reads (``r``) at or below the table's floor (bridge.spark.fences: no row it holds is older,
    so a read finds a resend of itself or a newer row, which a MERGE would keep)."""
    reads = int(summary["reads"])
    if int(summary["creates"]) + reads != count:
        return False
    return reads == 0 or (fences.floor is not None and int(summary["reads_lsn"]) <= fences.floor)
