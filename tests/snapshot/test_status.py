"""``pgbridge status`` shows the snapshot's progress per table from the state file."""

from __future__ import annotations

from pathlib import Path

from bridge.config import load_config
from bridge.snapshot.plan import Chunk, TablePlan, key_chunks
from bridge.snapshot.state import SnapshotState, TableProgress, save_state
from bridge.status import BridgeStatus, SlotStatus, _snapshot_status


def test_status_renders_snapshot_state_per_table(tmp_path: Path) -> None:
    config = load_config(
        None,
        {},
        {
            "database.dbname": "shop",
            "topic.prefix": "shop",
            "kafka.bootstrap.servers": "k:9092",
            "schema.registry.url": "http://r",
            "state.dir": str(tmp_path),
        },
    )
    big = TablePlan("public.big", "public", "big", 1, "key", ("id",), key_chunks([("5",)]),
                    ("id",), ("integer",), estimated_rows=10)  # fmt: skip
    log = TablePlan("public.log", "public", "log", 2, "whole", ("m",), (Chunk(0),), keyed=False)
    state = SnapshotState(
        "pgbridge", "0/10", 1, "copying", [TableProgress(big, {0}, 5, 50), TableProgress(log)]
    )
    save_state(tmp_path / "snapshot-pgbridge.json", state)
    status = BridgeStatus(SlotStatus("pgbridge", False), "pub", False)
    _snapshot_status(config, status)
    text = status.render()
    assert "snapshot at 0/10: copying (attempt 1" in text
    assert "  public.big: copying, 5/10 rows, chunks 1/2 (by key)" in text
    assert "  public.log: pending, 0/0 rows, chunks 0/1 (by whole)" in text
    assert status.as_dict()["snapshot"]["tables"][0]["chunks_done"] == 1
