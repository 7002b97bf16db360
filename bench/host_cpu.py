"""CPU time of the host's processes by role, and of this process's threads, while a run goes.

The benches run PostgreSQL, Kafka and the registry on the same host as pgbridge; when every
core is busy, the ratio to a baseline says as much about them as about pgbridge.
:class:`CpuSampler` reads ``/proc`` every ``interval`` seconds during a run and tells, per
row, how much CPU each role took: this process, PostgreSQL (every backend: one that ends
during the run keeps its last sample), the Kafka broker, the registry, and everything else
(the rest of the machine's busy time in ``/proc/stat``); and, within this process, each
thread by its Python name (librdkafka's threads, which Python did not start, are "native").
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

__all__ = ["CpuSampler", "per_row"]

_TICK = os.sysconf("SC_CLK_TCK")
ROLES = ("pgbridge", "postgres", "kafka", "registry", "other")


def _role(pid: int, cmdline: bytes) -> str:
    if pid == os.getpid():
        return "pgbridge"
    if b"postgres" in cmdline.split(b"\0", 1)[0]:
        return "postgres"
    if b"\0kafka.Kafka\0" in cmdline:
        return "kafka"
    if b"apicurio" in cmdline or b"quarkus" in cmdline:
        return "registry"
    return "other"


def _cpu_seconds(stat_path: Path) -> float | None:
    try:
        stat = stat_path.read_bytes()
    except OSError:
        return None  # ended meanwhile
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def _machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (every core, every process)."""
    with open("/proc/stat") as stat:
        fields = [int(f) for f in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / _TICK


class CpuSampler:
    """``with CpuSampler() as cpu: <run>``, then :meth:`by_role` and :meth:`by_thread` (CPU
    seconds used during the run); a process or thread's last ``interval`` may be missed."""

    def __init__(self, interval: float = 0.05) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cpu-sampler", daemon=True)
        self._processes: dict[int, tuple[str, float, float]] = {}  # pid: role, first, last
        self._threads: dict[int, tuple[str, float, float]] = {}  # tid: name, first, last
        self._names: dict[int, str] = {}
        self._busy = 0.0

    def __enter__(self) -> CpuSampler:
        self._busy = -_machine_busy()
        self._sample(first=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self._busy += _machine_busy()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def _sample(self, first: bool = False) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            seconds = _cpu_seconds(entry / "stat")
            if seconds is None:
                continue
            known = self._processes.get(pid)
            if known is None:
                try:
                    role = _role(pid, (entry / "cmdline").read_bytes())
                except OSError:
                    continue
                # A process started during the run used all its CPU in it.
                known = (role, seconds if first else 0.0, seconds)
            self._processes[pid] = (known[0], known[1], seconds)
        for running in threading.enumerate():
            if running.native_id is not None:
                self._names[running.native_id] = re.sub(r"-\d+$", "", running.name)
        for entry in Path("/proc/self/task").iterdir():
            tid = int(entry.name)
            seconds = _cpu_seconds(entry / "stat")
            if seconds is None or tid == self._thread.native_id:
                continue
            name = self._names.get(tid, "native")
            start = self._threads[tid][1] if tid in self._threads else (seconds if first else 0.0)
            self._threads[tid] = (name, start, seconds)

    def by_role(self) -> dict[str, float]:
        totals = dict.fromkeys(ROLES, 0.0)
        for role, start, last in self._processes.values():
            totals[role] += last - start
        totals["other"] = self._busy - sum(totals.values())
        return totals

    def by_thread(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for name, start, last in self._threads.values():
            totals[name] = totals.get(name, 0.0) + last - start
        return dict(sorted(totals.items(), key=lambda item: -item[1]))


def per_row(used: dict[str, float], rows: int) -> str:
    """``pgbridge 1.94 postgres 1.20 kafka 0.80 …`` µs of CPU per row by name."""
    return " ".join(f"{name} {used[name] / rows * 1e6:.2f}" for name in used) + " us/row"
