"""The benches that need no running stack still run: the README's and docs/measurements.md's
figures are quoted with the command that produced them, and a bench that no longer runs makes
them irreproducible (bench/dv_merge_bench.py handed ``dv_merge`` a delta-rs table after the
driver's writers took a ``LoggedTable``, and failed with AttributeError until 2026-12-07).
Each runs here at a toy size: this checks that it runs and prints its figures, not what they
are."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: (bench, toy-sized arguments, a line of its figures).
STACK_FREE = [
    (
        "dv_merge_bench.py",
        ["--tables", "2", "--rows", "2000", "--changes", "100", "--batches", "2", "--files", "2",
         "--keys", "uuid4"],
        r"batch 2: \d+ changes MERGEd in [\d.]+ s, .* files read \d+ of \d+",
    ),
    (
        "small_table_merge_bench.py",
        ["--tables", "2", "--rows", "50", "--changes", "5", "--batches", "2"],
        r"the job / delta-rs MERGE: [\d.]+x wall, [\d.]+x CPU",
    ),
    (
        "log_length_bench.py",
        ["--lengths", "2,4", "--rows", "100", "--changes", "10", "--rounds", "1"],
        r"log of +4 commits: deletion-vector MERGE +median +[\d.]+ ms",
    ),
    (
        "hotpath_bench.py",
        ["--rows", "2000", "--rounds", "1"],
        r"COPY row scan, python: +[\d,]+ rows/s +CPU +[\d.]+ us/row",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("bench", "arguments", "figures"), STACK_FREE, ids=[bench for bench, _, _ in STACK_FREE]
)
def test_a_bench_without_a_stack_runs_and_prints_its_figures(
    bench: str, arguments: list[str], figures: str
) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / bench), *arguments],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{bench} failed:\n{done.stderr[-3000:]}"
    assert re.search(figures, done.stdout), f"{bench} printed no figures:\n{done.stdout}"
