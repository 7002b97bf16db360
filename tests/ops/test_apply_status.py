"""The apply job's per-table lag, from a Spark streaming checkpoint (bridge.ops.apply_status)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.ops.apply_status import (
    ApplyCheckpointError,
    ApplyPosition,
    apply_lag,
    read_apply_position,
)


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
