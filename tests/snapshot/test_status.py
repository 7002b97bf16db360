"""``pgbridge status`` shows the snapshot's progress per table from the state file."""

from __future__ import annotations

from pathlib import Path

from bridge.config import load_config
from bridge.ops.status import BridgeStatus, SlotStatus, _snapshot_status
from bridge.snapshot.plan import Chunk, TablePlan, key_chunks
from bridge.snapshot.state import SnapshotState, TableProgress, save_state


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


def test_metrics_export_the_snapshot_progress() -> None:
    from prometheus_client import generate_latest

    from bridge.ops.metrics import BridgeMetrics
    from bridge.snapshot import progress

    metrics = BridgeMetrics()
    assert b"pgbridge_snapshot_running 0.0" in generate_latest(metrics.registry)
    current = progress.SnapshotProgress()
    current.add("public.big", estimated_rows=1000, chunks=4)
    current.copied("public.big", 250, 4096, now=0.0)
    current.chunk_done("public.big", now=0.0)
    current.running = True
    progress.CURRENT = current
    try:
        text = generate_latest(metrics.registry).decode()
    finally:
        progress.CURRENT = None
    assert "pgbridge_snapshot_running 1.0" in text
    assert 'pgbridge_snapshot_rows{table="public.big"} 250.0' in text
    assert 'pgbridge_snapshot_rows_estimated{table="public.big"} 1000.0' in text
    assert 'pgbridge_snapshot_chunks_done{table="public.big"} 1.0' in text
    assert 'pgbridge_snapshot_bytes{table="public.big"} 4096.0' in text
