"""The apply job's per-table lag, from a Spark streaming checkpoint (bridge.ops.apply_status)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.ops.apply_status import (
    ApplyCheckpointError,
    ApplyDeadLetterError,
    ApplyPosition,
    HeldTable,
    apply_lag,
    read_apply_position,
    read_held_tables,
)
from bridge.spark.set_aside import held_reason, set_aside_reason


def _checkpoint(root: Path, batches: dict[int, dict[str, dict[str, int]]], committed: int) -> str:
    """A checkpoint as Spark writes it: offsets/<n> (version, metadata, one line per source)
    for every batch planned, commits/<n> for those applied."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, offsets in batches.items():
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_795_000_000_000 + batch, "conf": {}}
        (root / "offsets" / str(batch)).write_text(
            f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}\n-\n"
        )
        if batch <= committed:
            (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return str(root)


def test_position_is_the_last_committed_batch_not_the_last_planned(tmp_path: Path) -> None:
    path = _checkpoint(
        tmp_path,
        {
            0: {"pg.public.a": {"0": 5}},
            1: {"pg.public.a": {"0": 9, "1": 3}},
            2: {"pg.public.a": {"0": 20}},
        },
        committed=1,
    )
    position = read_apply_position(path)
    assert position == ApplyPosition(1, 1_795_000_000_001, {"pg.public.a": {0: 9, 1: 3}})


def test_lag_counts_unapplied_records_per_table_from_the_earliest_offset_kept() -> None:
    position = ApplyPosition(4, None, {"pg.public.a": {0: 9, 1: 3}, "pg.public.b": {0: 2}})
    watermarks = {
        "pg.public.a": {0: (0, 12), 1: (0, 3), 2: (0, 4)},  # 3 + 0 + a partition never read: 4
        "pg.public.b": {0: (5, 7)},  # retention removed what the job had read to: from 5
        "pg.public.new": {0: (0, 6)},  # a table created since the last batch
    }
    assert apply_lag(position, watermarks) == {
        "pg.public.a": 7,
        "pg.public.b": 2,
        "pg.public.new": 6,
    }


def test_a_checkpoint_without_committed_batch_has_no_position(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, {0: {"pg.public.a": {"0": 5}}}, committed=-1)
    assert read_apply_position(path) == ApplyPosition(None)


@pytest.mark.parametrize("where", ["missing", "s3a://lake/_chk"])
def test_not_a_local_checkpoint_is_a_typed_error(tmp_path: Path, where: str) -> None:
    path = str(tmp_path / "nothing") if where == "missing" else where
    with pytest.raises(ApplyCheckpointError, match="apply checkpoint"):
        read_apply_position(path)


def _dead_letters(path: Path, rows: list[tuple[str, str, int]]) -> str:
    """A dead-letter table as the job leaves it (the columns status reads, and one more)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    topics, reasons, batches = zip(*rows, strict=True) if rows else ((), (), ())
    table = pa.table(
        {
            "topic": pa.array(topics, pa.string()),
            "offset": pa.array(range(len(rows)), pa.int64()),
            "reason": pa.array(reasons, pa.string()),
            "batch_id": pa.array(batches, pa.int64()),
        }
    )
    write_deltalake(str(path), table)
    return str(path)


def test_held_tables_are_those_with_set_aside_records_not_single_bad_ones(tmp_path: Path) -> None:
    path = _dead_letters(
        tmp_path / "dead",
        [
            ("p.public.a", set_aside_reason(RuntimeError("disk full")), 7),
            ("p.public.a", held_reason(7), 8),
            ("p.public.a", held_reason(7), 9),
            ("p.public.b", "unknown schema id 42", 3),  # a bad record: b is not held
            ("p.public.c", set_aside_reason("columns 'A' and 'a' differ only in case"), 2),
        ],
    )
    assert read_held_tables(path) == {
        "p.public.a": HeldTable(since_batch=7, records=3),
        "p.public.c": HeldTable(since_batch=2, records=1),
    }


def test_no_dead_letter_table_holds_nothing_and_another_path_is_a_typed_error(
    tmp_path: Path,
) -> None:
    assert read_held_tables(str(tmp_path / "never-written")) == {}
    (tmp_path / "not-delta").mkdir()
    with pytest.raises(ApplyDeadLetterError, match="not-delta: not a Delta table"):
        read_held_tables(str(tmp_path / "not-delta"))


def test_status_names_each_held_table_as_a_problem(tmp_path: Path) -> None:
    from bridge.ops.status import BridgeStatus, SlotStatus, _held_tables

    path = _dead_letters(
        tmp_path / "dead",
        [("p.public.a", set_aside_reason("disk full"), 4), ("p.public.a", held_reason(4), 5)],
    )
    status = BridgeStatus(SlotStatus("s", True), "p", True)
    _held_tables(path, status)
    assert status.held_tables == {"p.public.a": {"since_batch": 4, "records": 2}}
    assert status.problems == [
        f"apply: p.public.a held since batch 4, which failed: its 2 records wait in {path}, "
        "applied when the job tries the table again (docs/configuration.md)"
    ]
    assert "problem: apply: p.public.a held since batch 4" in status.render()
