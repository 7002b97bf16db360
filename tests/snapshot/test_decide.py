"""When a snapshot is due (bridge.snapshot.run.decide) and the progress lines."""

from __future__ import annotations

import pytest

from bridge.pgoutput.lsn import Lsn
from bridge.snapshot.progress import SnapshotProgress, format_duration
from bridge.snapshot.run import decide
from bridge.snapshot.state import SnapshotState
from bridge.source.slots import SlotInfo


def _slot(confirmed: str = "0/100", wal_status: str = "reserved") -> SlotInfo:
    return SlotInfo("s", "pgoutput", "logical", "db", None, Lsn.parse(confirmed), None,
                    wal_status, False, None)  # fmt: skip


COPYING = SnapshotState("s", "0/100", 0, "copying")
DONE = SnapshotState("s", "0/100", 0, "done")


@pytest.mark.parametrize(
    ("mode", "slot", "state", "action", "stream"),
    [
        ("initial", None, None, "fresh", True),
        ("initial", _slot(), None, "none", True),
        ("initial", _slot(), DONE, "none", True),
        ("initial", _slot(), COPYING, "resume", True),
        ("initial", _slot("0/200"), COPYING, "mismatch", True),
        ("initial_only", None, None, "fresh", False),
        ("initial_only", _slot(), COPYING, "resume", False),
        ("initial_only", _slot(), DONE, "none", False),
        ("no_data", None, None, "none", True),
        ("no_data", _slot(), COPYING, "none", True),
        ("when_needed", None, None, "fresh", True),
        ("when_needed", _slot(wal_status="lost"), DONE, "fresh", True),
        ("when_needed", _slot(), DONE, "none", True),
        ("always", _slot(), DONE, "again", True),
        ("always", _slot(), COPYING, "resume", True),
        ("always", None, DONE, "fresh", True),
    ],
)
def test_decide_snapshot_modes(
    mode: str, slot: SlotInfo | None, state: SnapshotState | None, action: str, stream: bool
) -> None:
    decision = decide(mode, slot, state)
    assert (decision.action, decision.stream) == (action, stream)
    assert decision.reason


def test_progress_lines_rate_percent_eta() -> None:
    progress = SnapshotProgress(interval=5)
    progress.add("public.big", estimated_rows=1000, chunks=4)
    progress.add("public.small", estimated_rows=10, chunks=1)
    progress.copied("public.big", 250, 2_000_000, now=100.0)
    progress.copied("public.big", 250, 2_000_000, now=105.0)
    (line,) = progress.lines(now=110.0)  # small has not started
    assert line == (
        "snapshot public.big: 500/1000 rows (50%), 4.0 MB, chunks 0/4, 50 rows/s, 0.4 MB/s, ETA 10s"
    )
    assert progress.due(0.0) and not progress.due(4.9) and progress.due(5.0)
    for _ in range(4):
        progress.chunk_done("public.big", now=111.0)
    assert progress.lines(now=112.0) == []
    assert [format_duration(s) for s in (5, 65, 3725)] == ["5s", "1m05s", "1h02m"]


def test_progress_rate_of_a_resumed_table_counts_this_run_only() -> None:
    progress = SnapshotProgress()
    progress.add("t", estimated_rows=100, chunks=10, rows=50, nbytes=5_000_000, chunks_done=5)
    progress.copied("t", 10, 1_000_000, now=0.0)
    progress.copied("t", 10, 1_000_000, now=2.0)
    (line,) = progress.lines(now=2.0)
    assert "70/100 rows (70%)" in line and "10 rows/s, 1.0 MB/s" in line and "ETA 3s" in line
