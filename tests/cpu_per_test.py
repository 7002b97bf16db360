"""A pytest plugin printing nothing and writing, per test, the CPU-seconds it cost: its own
process's and those of every process it started (live, or ended and waited for), setup to
teardown. The suite is CPU-bound on 2 cores, so this, not a test's wall time (stretched by
whatever ran beside it), says where `make test`'s time goes. The stack's services (Kafka, the
registry, PostgreSQL) are shared and not counted.

    PYTHONPATH=. make integration PYTEST_ARGS="-p tests.cpu_per_test"  # .cpu-per-test/<worker>.tsv

Each line: CPU-seconds, wall seconds, the test's id (docs/measurements.md sums them by module).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

_TICKS = os.sysconf("SC_CLK_TCK")
_out: IO[str] | None = None


def _process_tree_cpu(root: int) -> float:
    """utime + stime + cutime + cstime of ``root`` and its live descendants: a child that ended
    and was waited for is in its parent's cutime/cstime."""
    parents: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command, which may hold spaces
        parents[int(entry)] = int(fields[1])
        seconds[int(entry)] = sum(int(f) for f in fields[11:15]) / _TICKS
    total = 0.0
    for pid, cpu in seconds.items():
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            total += cpu
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _out
    if _out is None:
        directory = Path(os.environ.get("PGBRIDGE_CPU_PER_TEST_DIR", ".cpu-per-test"))
        directory.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _out = (directory / f"{worker}.tsv").open("a", buffering=1)
    cpu, started = _process_tree_cpu(os.getpid()), time.monotonic()
    yield
    cpu = _process_tree_cpu(os.getpid()) - cpu
    _out.write(f"{cpu:.1f}\t{time.monotonic() - started:.1f}\t{item.nodeid}\n")
