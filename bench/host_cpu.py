"""CPU time of the host's processes by role, from ``/proc``: who used the cores during a run.

The benches run PostgreSQL, Kafka and the registry on the same host as pgbridge; when every
core is busy, the ratio to a baseline says as much about them as about pgbridge. A
:class:`HostCpu` sample taken before and after a run tells, per row, how much CPU each role
took: this process, PostgreSQL (every backend, the walsender included: a backend that ended is
counted in its postmaster's children's time), the Kafka broker, the registry, and everything
else (the rest of the machine's busy time in ``/proc/stat``).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HostCpu", "ThreadCpu", "per_row", "sample"]

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


@dataclass(frozen=True)
class HostCpu:
    """CPU seconds (user + system) by role at one moment; processes that ended are not seen,
    so take samples around a run of long-lived servers (their CPU is what this is for)."""

    seconds: dict[str, float]

    def since(self, before: HostCpu) -> dict[str, float]:
        return {r: self.seconds.get(r, 0.0) - before.seconds.get(r, 0.0) for r in ROLES}


def sample() -> HostCpu:
    totals = dict.fromkeys(ROLES, 0.0)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # ended meanwhile
        fields = stat[stat.rindex(b")") + 2 :].split()
        role = _role(int(entry.name), cmdline)
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        if role == "postgres":
            ticks += int(fields[13]) + int(fields[14])  # cutime, cstime: ended backends
        totals[role] += ticks / _TICK
    totals["other"] = _machine_busy() - sum(totals.values())
    return HostCpu(totals)


def _machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (every core, every process)."""
    with open("/proc/stat") as stat:
        fields = [int(f) for f in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / _TICK


def per_row(used: dict[str, float], rows: int) -> str:
    """``pgbridge 1.94 postgres 1.20 kafka 0.80 …`` µs of CPU per row by role."""
    return " ".join(f"{role} {used[role] / rows * 1e6:.2f}" for role in ROLES) + " us/row"


class ThreadCpu:
    """CPU seconds of this process's threads by name while it runs, sampled from
    ``/proc/self/task`` every ``interval`` s (a thread that ended keeps its last sample, so a
    thread's last ``interval`` may be missed). Threads are named after their Python name
    with a trailing ``-N`` dropped; threads Python did not start (librdkafka's) are "native"."""

    def __init__(self, interval: float = 0.05) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._last: dict[int, tuple[str, float]] = {}
        self._names: dict[int, str] = {}
        self._thread = threading.Thread(target=self._run, name="bench-thread-cpu", daemon=True)

    def __enter__(self) -> ThreadCpu:
        self._base = self._read()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def _read(self) -> dict[int, float]:
        ticks: dict[int, float] = {}
        for entry in Path("/proc/self/task").iterdir():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()
            ticks[int(entry.name)] = (int(fields[11]) + int(fields[12])) / _TICK
        return ticks

    def _sample(self) -> None:
        for running in threading.enumerate():
            if running.native_id is not None:
                self._names[running.native_id] = re.sub(r"-\d+$", "", running.name)
        for tid, seconds in self._read().items():
            if tid != self._thread.native_id:
                self._last[tid] = (self._names.get(tid, "native"), seconds)

    def by_name(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for tid, (name, seconds) in self._last.items():
            totals[name] = totals.get(name, 0.0) + seconds - self._base.get(tid, 0.0)
        return dict(sorted(totals.items(), key=lambda item: -item[1]))
