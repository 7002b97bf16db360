"""Faults injected one after another under a steady writer, with a report per fault.

The rig is the test's own (a throwaway PostgreSQL cluster and Kafka broker, the stack's
registry behind a :class:`~tests.integration.faults.TcpProxy`), so nothing shared is harmed.
``pgbridge run`` streams a ``counter`` table (one row per committed value, with its commit
time) and a ``mixed`` table (inserts, updates, deletes) while faults are injected: SIGKILL of
the bridge, the walsender terminated, the registry down while a new table appears, the broker
SIGKILLed past the delivery timeout, PostgreSQL fast-restarted, the spill directory gone during
a large streamed transaction. After each fault the time to recover is measured (until the slot
confirms a marker committed once the fault is over); at the end every counter value committed
in PostgreSQL is looked for in Kafka. Duplicates (the at-least-once resend) and losses are
charged to the first fault injected after the value's commit.

Several bridges can stream the same database under the same faults, one per delivery mode
(``modes``: at-least-once and exactly once side by side, each with its own slot and topics),
so what each mode does with one fault is compared on the same workload.

``test_fault_cycle.py`` runs each fault once (``make test-long``), and the exactly-once cycle
on a 3-broker cluster (``brokers=3``: the leader of the counter's partition killed instead of
the only broker, then frozen with SIGSTOP as a stalled disk freezes it, then its disk full
(writes failing with ENOSPC, tests/integration/full_disk.py), a rolling restart, the bridges
killed several times), a short one in ``make test`` and the whole one in ``make
test-long``; ``make soak`` runs random faults for 30 minutes (``python -m
tests.integration.soak --minutes 30``). All print the table.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bridge.devstack.kafka import SHORT_LIVED_JVM_OPTIONS, KafkaBroker
from bridge.devstack.kafka_cluster import KafkaCluster
from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.devstack.stack import LocalStack, StackInfo
from bridge.pgoutput.lsn import Lsn
from tests.integration import full_disk
from tests.integration.bridge_harness import (
    BridgeProcess,
    bridge_settings,
    placed_values,
    slot_confirmed,
)
from tests.integration.faults import TcpProxy, sigkill_broker

#: How long a fault lasts in the CI cycle; longer than the delivery timeout for the broker.
CYCLE_OUTAGES = {
    "walsender terminated": 0.0,
    "bridge SIGKILL": 0.0,
    "registry down, new table": 15.0,
    "broker SIGKILL": 12.0,
    "postgres fast restart": 6.0,
    "spill directory gone": 6.0,
}
#: The exactly-once cycle on 3 brokers: the bridge killed at three points of the stream (its
#: Kafka commits every 100 ms: some kills fall between a commit and the slot's confirmation).
EXACTLY_ONCE_CYCLE = [
    ("walsender terminated", 0.0),
    ("bridge SIGKILL", 0.0),
    ("registry down, new table", 15.0),
    ("bridge SIGKILL", 0.0),
    ("leader SIGKILL", 12.0),
    ("bridge SIGKILL", 0.0),
    ("leader stalled", 10.0),
    ("leader disk full", 10.0),
    ("rolling restart", 2.0),
    ("postgres fast restart", 6.0),
]
#: make test's share of it (about two and a half minutes): each kind of fault once, the
#: bridges killed twice, the leader killed and then every broker, each past the delivery timeout
#: (KRaft fences a silent broker after 9 s).
SHORT_EXACTLY_ONCE_CYCLE = [
    ("walsender terminated", 0.0),
    ("bridge SIGKILL", 0.0),
    ("registry down, new table", 6.0),
    ("leader SIGKILL", 10.0),
    ("bridge SIGKILL", 0.0),
    ("Kafka down", 10.0),
    ("postgres fast restart", 2.0),
]
DELIVERY_TIMEOUT_MS = 8000
SOAK_PAUSE_S = 20.0  # steady writing between two faults of the soak


AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly once"


@dataclass(slots=True)
class FaultResult:
    fault: str
    injected_at: float  # wall clock, comparable with the rows' commit times
    outage_s: float
    recovered: bool = False
    recover_s: float | None = None  # from the end of the fault until the slot caught up
    duplicates: int = 0
    lost: int = 0


@dataclass(slots=True)
class Capture:
    """One ``pgbridge run`` of the rig: its delivery mode, slot and topics, and its verdict."""

    mode: str  # AT_LEAST_ONCE or EXACTLY_ONCE
    prefix: str
    settings: dict[str, str] = field(default_factory=dict)
    bridge: BridgeProcess | None = None
    results: list[FaultResult] = field(default_factory=list)
    delivered: int = 0
    unattributed: Counter[str] = field(default_factory=Counter)  # after the last fault
    # Each lost value with what Kafka holds beside it: where to look when one is missing.
    lost_values: list[str] = field(default_factory=list)
    final_log: str = ""  # the bridge's log, kept when the rig's directory is removed

    @property
    def slot(self) -> str:
        return self.settings["slot.name"]

    def log(self) -> str:
        if self.final_log or self.bridge is None:
            return self.final_log
        return self.bridge.log()

    def log_after(self, started: float, seconds: float = 40) -> str:
        """The bridge's log lines from ``started`` (wall clock) on, for ``seconds``, with the
        tracebacks they carry: what a fault that was not recovered did."""
        first = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started - 1))
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started + seconds))
        kept, keeping = [], False
        for line in self.log().splitlines():
            stamped = line[:4].isdigit() and line[4:5] == "-"
            if stamped:
                keeping = first <= line[:19] <= last
            if keeping:
                kept.append(line)
        return "\n".join(kept)


class FaultRig:
    """The writer, ``pgbridge run`` and the services it depends on, ready to be hurt."""

    def __init__(
        self,
        stack: StackInfo,
        workdir: Path,
        *,
        brokers: int = 1,
        modes: tuple[str, ...] = (AT_LEAST_ONCE,),
        write_interval: float = 0.005,
    ) -> None:
        """``brokers`` > 1: a KRaft cluster (replication factor 3, ``min.insync.replicas =
        2``); ``modes``: a bridge per delivery mode, each on its own slot and topics;
        ``write_interval``: the writer's pause between two values."""
        self.workdir = workdir
        self.write_interval = write_interval
        self.stack = stack
        # Its own temporary directory: PostgreSQL runs as another account, which must reach it.
        self.pg_dir = Path(tempfile.mkdtemp(prefix="pgbridge-soak-pg-"))
        self.cluster = PostgresCluster(
            ensure_postgres_binaries(stack.postgres_major), base_dir=self.pg_dir
        )
        self.broker: KafkaBroker | KafkaCluster = (
            KafkaBroker(workdir / "kafka", heap="384m", jvm_options=SHORT_LIVED_JVM_OPTIONS)
            if brokers == 1
            else KafkaCluster(
                workdir / "kafka",
                brokers=brokers,
                heap="384m",
                jvm_options=SHORT_LIVED_JVM_OPTIONS,
            )
        )
        shim = full_disk.build_shim(workdir)
        for broker in self._brokers():
            full_disk.prepare(broker, shim)  # the shim only acts on "broker disk full"
        registry = urlsplit(stack.registry_url)
        assert registry.hostname is not None and registry.port is not None
        self.proxy = TcpProxy(registry.hostname, registry.port)
        run = uuid.uuid4().hex[:8]
        self.captures = [
            Capture(mode, f"soak{run}{'eos' if mode == EXACTLY_ONCE else ''}") for mode in modes
        ]
        self.spill_dir = workdir / "spill"
        self.writer_stop = threading.Event()
        self.writer_errors = 0
        self.new_tables = 0
        self.committed = 0
        self.insert_lsns: dict[int, str] = {}  # counter value -> where its insert went in the WAL
        self.postgres_log = ""  # kept when the cluster is destroyed

    # -- set-up and tear-down -------------------------------------------------------------------

    def start(self) -> None:
        self.cluster.start()  # errors, never skips, if it cannot start
        self.broker.start()
        for capture in self.captures:
            (self.spill_dir / capture.prefix).mkdir(parents=True)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE counter (n bigint PRIMARY KEY, at timestamptz NOT NULL "
                # Where the insert went in the WAL: what a lost value's report compares with
                # the positions the bridge confirmed (its log) and its neighbours in Kafka.
                "DEFAULT clock_timestamp(), "
                "lsn pg_lsn NOT NULL DEFAULT pg_current_wal_insert_lsn())"
            )
            conn.execute("CREATE TABLE mixed (id int PRIMARY KEY, v int)")
            conn.execute("CREATE TABLE bulk (id int PRIMARY KEY, pad text)")
            if self.cluster.major_version >= 14:  # streamed transactions (and spilling)
                conn.execute("ALTER DATABASE postgres SET logical_decoding_work_mem = '64kB'")
        registry = urlsplit(self.stack.registry_url)
        for capture in self.captures:
            capture.settings = bridge_settings(
                self.stack,
                self.dsn,
                capture.prefix,
                **{
                    "kafka.bootstrap.servers": self.broker.bootstrap_servers,
                    "schema.registry.url": urlunsplit(
                        registry._replace(netloc=f"127.0.0.1:{self.proxy.port}")
                    ),
                    "kafka.delivery.timeout.ms": str(DELIVERY_TIMEOUT_MS),
                    "errors.retry.delay.max.ms": "2000",
                    "streaming.spill.threshold.bytes": "65536",
                    "streaming.spill.dir": str(self.spill_dir / capture.prefix),
                    "exactly.once.support": (
                        "required" if capture.mode == EXACTLY_ONCE else "disabled"
                    ),
                },
            )
            log = str(self.workdir / f"bridge-{capture.prefix}.log")
            capture.bridge = BridgeProcess(capture.settings, log)
        for capture in self.captures:  # each slot made before the writer starts
            self._wait_for_slot(capture, timeout=120)
        self.writer = threading.Thread(target=self._write, name="soak-writer", daemon=True)
        self.writer.start()
        for mode, seconds in self.caught_up(timeout=120).items():
            if seconds is None:  # before any fault: a failure of the start itself
                capture = next(c for c in self.captures if c.mode == mode)
                raise AssertionError(f"{mode}: pgbridge did not start:\n{capture.log()[-8000:]}")

    def _wait_for_slot(self, capture: Capture, timeout: float) -> None:
        assert capture.bridge is not None
        deadline = time.monotonic() + timeout
        while slot_confirmed(self.dsn, capture.slot) == Lsn(0):
            if capture.bridge.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{capture.mode}: no slot\n{capture.log()[-3000:]}")
            time.sleep(0.2)

    def close(self) -> None:
        self.writer_stop.set()
        for capture in self.captures:
            capture.final_log = capture.log()
            if capture.bridge is not None and capture.bridge.proc.poll() is None:
                capture.bridge.kill()
        self.proxy.close()
        self.broker.stop()
        if self.cluster.log_path.exists():
            self.postgres_log = self.cluster.log_path.read_text(errors="replace")
        self.cluster.destroy()
        shutil.rmtree(self.pg_dir, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def dsn(self) -> str:
        return self.cluster.dsn()

    # -- the workload ---------------------------------------------------------------------------

    def _write(self) -> None:
        """Counter values (committed or not: PostgreSQL is the judge), and mixed changes."""
        n = 0
        rng = random.Random(7)
        while not self.writer_stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
                    while not self.writer_stop.is_set():
                        n += 1
                        conn.execute("INSERT INTO counter (n) VALUES (%s)", (n,))
                        key = rng.randrange(500)
                        if n % 3 == 0:
                            conn.execute(
                                "INSERT INTO mixed VALUES (%s, %s) ON CONFLICT (id) "
                                "DO UPDATE SET v = excluded.v",
                                (key, n),
                            )
                        elif n % 7 == 0:
                            conn.execute("DELETE FROM mixed WHERE id = %s", (key,))
                        time.sleep(self.write_interval)
            except psycopg.Error:
                self.writer_errors += 1
                time.sleep(0.2)

    def mark(self, timeout: float = 60) -> Lsn:
        """A marker committed now (waiting for a server that is down)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with (
                    psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn,
                    conn.transaction(),
                ):
                    row = conn.execute(
                        "SELECT pg_logical_emit_message(true, 'pgbridge-soak', 'mark')::text"
                    ).fetchone()
                assert row is not None
                return Lsn.parse(row[0])
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def caught_up(self, timeout: float) -> dict[str, float | None]:
        """Per capture, seconds until its slot confirmed a marker committed now; ``None``
        past ``timeout`` or when its bridge process ended."""
        start = time.monotonic()
        target = self.mark()
        waiting = {c.mode: c for c in self.captures}
        recovered: dict[str, float | None] = dict.fromkeys(waiting)
        while waiting and time.monotonic() - start < timeout:
            for mode, capture in list(waiting.items()):
                assert capture.bridge is not None
                if capture.bridge.proc.poll() is not None:
                    del waiting[mode]
                    continue
                try:
                    if slot_confirmed(self.dsn, capture.slot) >= target:
                        recovered[mode] = time.monotonic() - start
                        del waiting[mode]
                except psycopg.OperationalError:
                    pass
            time.sleep(0.2)
        return recovered

    # -- the faults -----------------------------------------------------------------------------

    def inject(self, fault: str, outage: float) -> None:
        """The fault, then each capture's result (recovered: alive, and caught up)."""
        injected_at = time.time()
        FAULTS[fault](self, outage)
        alive = {
            c.mode: c.bridge is not None and c.bridge.proc.poll() is None for c in self.captures
        }
        recovered = self.caught_up(timeout=180)
        for capture in self.captures:
            seconds = recovered[capture.mode]
            capture.results.append(
                FaultResult(
                    fault,
                    injected_at,
                    outage,
                    recovered=alive[capture.mode] and seconds is not None,
                    recover_s=seconds,
                )
            )

    def _kill_bridge(self, outage: float) -> None:
        for capture in self.captures:
            assert capture.bridge is not None
            capture.bridge.kill()
        time.sleep(outage)
        for capture in self.captures:
            assert capture.bridge is not None
            capture.bridge = BridgeProcess(capture.settings, capture.bridge.log_path)

    def _terminate_walsender(self, outage: float) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = ANY(%s) AND active_pid IS NOT NULL",
                ([c.slot for c in self.captures],),
            )
        time.sleep(outage)

    def _registry_down(self, outage: float) -> None:
        self.proxy.down()
        self.new_tables += 1
        with psycopg.connect(self.dsn, autocommit=True) as conn:  # needs the registry
            conn.execute(f"CREATE TABLE fresh_{self.new_tables} (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO fresh_{self.new_tables} VALUES (1, 'during the outage')")
        time.sleep(outage)
        self.proxy.up()

    def _hot_broker(self) -> KafkaBroker:
        """The broker, or on a cluster the leader of the counter's partition (the hot one)."""
        kafka = self.broker
        if isinstance(kafka, KafkaCluster):
            return kafka.broker(kafka.leader_of(f"{self.captures[0].prefix}.public.counter"))
        return kafka

    def _brokers(self) -> list[KafkaBroker]:
        kafka = self.broker
        return kafka.brokers if isinstance(kafka, KafkaCluster) else [kafka]

    def _disk_full(self, outage: float) -> None:
        """The hot broker's disk full for ``outage`` seconds (its writes to its log directory
        fail with ENOSPC: tests/integration/full_disk.py), then space again. Kafka takes a log
        directory whose writes fail offline, and a broker whose only log directory is offline
        stops itself; it is started again once there is space, as an operator would."""
        broker = self._hot_broker()
        pid = broker.pid
        assert pid is not None
        full_disk.fill(broker)
        try:
            time.sleep(outage)
        finally:
            full_disk.free(broker)
        exited, _ = os.waitpid(pid, os.WNOHANG)
        if not exited:  # the writer writes to this broker all the time: the shim did nothing
            raise AssertionError(
                f"broker {broker.node_id} kept running on a full disk:\n"
                f"{broker.log_path.read_text(errors='replace')[-3000:]}"
            )
        broker.start()

    def _stall_broker(self, outage: float) -> None:
        """The hot broker frozen (SIGSTOP), its connections open: what a stalled disk does to
        a broker (every fsync and read waits), then thawed."""
        pid = self._hot_broker().pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(outage)
        finally:
            os.kill(pid, signal.SIGCONT)

    def _rolling_restart(self, outage: float) -> None:
        """Each broker in turn stopped (SIGTERM: a controlled shutdown that moves its
        leaderships away), ``outage`` seconds down, started and answering before the next."""
        kafka = self.broker
        brokers = kafka.brokers if isinstance(kafka, KafkaCluster) else [kafka]
        for broker in brokers:
            broker.stop()
            time.sleep(outage)
            broker.start()

    def _kill_broker(self, outage: float) -> None:
        broker = self._hot_broker()
        sigkill_broker(broker)
        time.sleep(outage)
        broker.start()

    def _kafka_down(self, outage: float) -> None:
        """Every broker SIGKILLed at once (a power cut, a cluster-wide crash): Kafka answers
        nothing, past the delivery timeout, and the bridges' restarts meet it down."""
        kafka = self.broker
        brokers = kafka.brokers if isinstance(kafka, KafkaCluster) else [kafka]
        for broker in brokers:
            sigkill_broker(broker)
        time.sleep(outage)
        kafka.start()

    def _restart_postgres(self, outage: float) -> None:
        self.cluster.stop()
        time.sleep(outage)
        self.cluster.start()

    def _spill_gone(self, outage: float) -> None:
        """The spill directory disappears while a large transaction is streamed in progress."""
        shutil.rmtree(self.spill_dir)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO bulk SELECT i, repeat('p', 200) "
                "FROM generate_series(%s::int, %s::int) i",
                (self.new_tables * 10_000 + 1, self.new_tables * 10_000 + 5_000),
            )
        self.new_tables += 1
        time.sleep(outage)
        for capture in self.captures:
            (self.spill_dir / capture.prefix).mkdir(parents=True)

    # -- the verdict ----------------------------------------------------------------------------

    def finish(self) -> None:
        """Stop the writer, let the bridges catch up, and charge each one's duplicates and
        losses to the faults."""
        self.writer_stop.set()
        self.writer.join(30)
        late = [mode for mode, s in self.caught_up(timeout=180).items() if s is None]
        for capture in self.captures:
            assert capture.bridge is not None
            if capture.mode in late:
                raise AssertionError(
                    f"{capture.mode}: pgbridge did not catch up at the end:\n"
                    f"{capture.log()[-3000:]}"
                )
            assert capture.bridge.terminate() == 0, capture.log()[-3000:]
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute("SELECT n, at, lsn::text FROM counter").fetchall()
        committed = {int(n): at.timestamp() for n, at, _ in rows}
        self.insert_lsns = {int(n): lsn for n, _, lsn in rows}
        self.committed = len(committed)
        for capture in self.captures:
            self._charge(capture, committed)

    def _charge(self, capture: Capture, committed: dict[int, float]) -> None:
        """A value missing from the capture's topic is lost, one there twice a duplicate,
        charged to the first fault injected after the value's commit."""
        records = placed_values(
            self.broker.bootstrap_servers,
            self.stack.registry_url,
            f"{capture.prefix}.public.counter",
        )
        seen = Counter(int(v["after"]["n"]) for _, v in records if v is not None and v["after"])
        sources = {
            int(v["after"]["n"]): (v["source"]["lsn"], v["source"]["txId"], placed)
            for placed, v in records
            if v is not None and v["after"]
        }
        starts = [r.injected_at for r in capture.results]

        def charged(at: float) -> FaultResult | None:
            later = [i for i, start in enumerate(starts) if start >= at]
            return capture.results[later[0]] if later else None

        for n, at in committed.items():
            result = charged(at)
            copies = seen.get(n, 0)
            if copies == 0:
                committed_at = time.strftime("%H:%M:%S", time.localtime(at)) + f"{at % 1:.3f}"[1:]
                beside = ", ".join(
                    f"{m} at lsn {Lsn(sources[m][0])} tx {sources[m][1]}, {sources[m][2]}"
                    for m in (n - 1, n + 1)
                    if m in sources
                )
                capture.lost_values.append(
                    f"{n} (inserted at lsn {self.insert_lsns[n]}, committed {committed_at}; "
                    f"in Kafka: {beside})"
                )
                if result is None:
                    capture.unattributed["lost"] += 1
                else:
                    result.lost += 1
            elif copies > 1:
                if result is None:
                    capture.unattributed["duplicates"] += copies - 1
                else:
                    result.duplicates += copies - 1
        capture.delivered = sum(seen.values())

    def log(self) -> str:
        return "\n".join(f"== {c.mode}:\n{c.log()[-4000:]}" for c in self.captures)

    def decoding_starts(self, capture: Capture, started: float, seconds: float) -> str:
        """PostgreSQL's own account of each decoding session of ``capture``'s slot from
        ``started`` on, for ``seconds``: where it streamed from, and from which snapshot (a
        session that builds its snapshot afresh skips the transactions committed meanwhile)."""
        first = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started - 1))
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started + seconds))
        kept, keeping = [], False
        for line in self.postgres_log.splitlines():
            if line[:4].isdigit() and "DETAIL:" not in line:  # a DETAIL goes with its line
                keeping = first <= line[:19] <= last and (
                    f'slot "{capture.slot}"' in line or "consistent point" in line
                )
            if keeping:
                kept.append(line)
        return "\n".join(kept)


FAULTS: dict[str, Callable[[FaultRig, float], None]] = {
    "walsender terminated": FaultRig._terminate_walsender,
    "bridge SIGKILL": FaultRig._kill_bridge,
    "registry down, new table": FaultRig._registry_down,
    "broker SIGKILL": FaultRig._kill_broker,
    "leader SIGKILL": FaultRig._kill_broker,
    "leader stalled": FaultRig._stall_broker,
    "leader disk full": FaultRig._disk_full,
    "Kafka down": FaultRig._kafka_down,
    "rolling restart": FaultRig._rolling_restart,
    "postgres fast restart": FaultRig._restart_postgres,
    "spill directory gone": FaultRig._spill_gone,
}


def report(rig: FaultRig) -> str:
    """The table: fault x recovered / time to recover / duplicates / lost, per capture."""
    tables = []
    for capture in rig.captures:
        lines = [
            f"{capture.mode}:",
            f"{'fault':<26} {'outage':>7} {'recovered':>9} {'time to recover':>15} "
            f"{'duplicates':>10} {'lost':>5}",
        ]
        for r in capture.results:
            recover = f"{r.recover_s:.1f} s" if r.recover_s is not None else "never"
            lines.append(
                f"{r.fault:<26} {r.outage_s:>5.0f} s {'yes' if r.recovered else 'NO':>9} "
                f"{recover:>15} {r.duplicates:>10} {r.lost:>5}"
            )
        lines.append(
            f"{rig.committed:,} counter values committed, {capture.delivered:,} records in "
            f"Kafka; after the last fault: {capture.unattributed['duplicates']} duplicates, "
            f"{capture.unattributed['lost']} lost"
        )
        lines.extend(f"lost: {value}" for value in capture.lost_values[:20])
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def run_cycle(
    stack: StackInfo,
    schedule: list[tuple[str, float]],
    pause: float,
    *,
    brokers: int = 1,
    modes: tuple[str, ...] = (AT_LEAST_ONCE,),
    write_interval: float = 0.005,
) -> FaultRig:
    """Each (fault, outage) in turn, ``pause`` seconds of steady writing between them; the
    rig holds each capture's results."""
    rig = FaultRig(
        stack,
        Path(tempfile.mkdtemp(prefix="pgbridge-soak-")),
        brokers=brokers,
        modes=modes,
        write_interval=write_interval,
    )
    try:
        rig.start()
        for fault, outage in schedule:
            time.sleep(pause)
            rig.inject(fault, outage)
        time.sleep(pause)
        rig.finish()
        return rig
    except BaseException:
        print(rig.log())
        raise
    finally:
        rig.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="random faults under a writer (make soak)")
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    schedule: list[tuple[str, float]] = []
    budget = args.minutes * 60
    while budget > 0:
        fault = rng.choice(sorted(CYCLE_OUTAGES))
        outage = 0.0 if CYCLE_OUTAGES[fault] == 0 else rng.uniform(5, 25)
        schedule.append((fault, outage))
        budget -= outage + SOAK_PAUSE_S + 10  # about 10 s to recover
    print(f"soak: {len(schedule)} faults over about {args.minutes:.0f} minutes (seed {seed})")
    stack = LocalStack().up()
    rig = run_cycle(stack, schedule, pause=SOAK_PAUSE_S)
    print(report(rig))
    capture = rig.captures[0]
    bad = [r for r in capture.results if not r.recovered or r.lost]
    if bad or capture.unattributed["lost"]:
        raise SystemExit(f"soak failed: {len(bad)} fault(s) not recovered or with losses")


if __name__ == "__main__":
    main()
