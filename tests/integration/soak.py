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

``test_fault_cycle.py`` runs each fault once (``make test-long``), and the exactly-once cycle
on a 3-broker cluster (``brokers=3, exactly_once=True``: the leader of the counter's partition
killed instead of the only broker, then frozen with SIGSTOP as a stalled disk freezes it, a
rolling restart, the bridge killed several times); ``make soak`` runs random
faults for 30 minutes (``python -m tests.integration.soak --minutes 30``). All print the table.
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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from bridge.devstack.kafka import KafkaBroker
from bridge.devstack.kafka_cluster import KafkaCluster
from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.devstack.stack import LocalStack, StackInfo
from bridge.pgoutput.lsn import Lsn
from tests.integration.bridge_harness import (
    BridgeProcess,
    bridge_settings,
    read_topic,
    slot_confirmed,
)
from tests.integration.faults import TcpProxy

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
    ("rolling restart", 2.0),
    ("postgres fast restart", 6.0),
]
DELIVERY_TIMEOUT_MS = 8000
SOAK_PAUSE_S = 20.0  # steady writing between two faults of the soak


@dataclass(slots=True)
class FaultResult:
    fault: str
    injected_at: float  # wall clock, comparable with the rows' commit times
    outage_s: float
    recovered: bool = False
    recover_s: float | None = None  # from the end of the fault until the slot caught up
    duplicates: int = 0
    lost: int = 0


class FaultRig:
    """The writer, ``pgbridge run`` and the services it depends on, ready to be hurt."""

    def __init__(
        self, stack: StackInfo, workdir: Path, *, brokers: int = 1, exactly_once: bool = False
    ) -> None:
        """``brokers`` > 1: a KRaft cluster (replication factor 3, ``min.insync.replicas =
        2``); ``exactly_once``: ``exactly.once.support = required``."""
        self.workdir = workdir
        self.exactly_once = exactly_once
        self.stack = stack
        # Its own temporary directory: PostgreSQL runs as another account, which must reach it.
        self.pg_dir = Path(tempfile.mkdtemp(prefix="pgbridge-soak-pg-"))
        self.cluster = PostgresCluster(
            ensure_postgres_binaries(stack.postgres_major), base_dir=self.pg_dir
        )
        self.broker: KafkaBroker | KafkaCluster = (
            KafkaBroker(workdir / "kafka", heap="384m")
            if brokers == 1
            else KafkaCluster(workdir / "kafka", brokers=brokers, heap="384m")
        )
        registry = urlsplit(stack.registry_url)
        assert registry.hostname is not None and registry.port is not None
        self.proxy = TcpProxy(registry.hostname, registry.port)
        self.prefix = f"soak{uuid.uuid4().hex[:8]}"
        self.spill_dir = workdir / "spill"
        self.writer_stop = threading.Event()
        self.writer_errors = 0
        self.new_tables = 0
        self.bridge: BridgeProcess | None = None
        self.committed = self.delivered = 0
        self.unattributed = Counter[str]()  # duplicates/losses after the last fault
        self.final_log = ""  # the bridge's log, kept when the rig's directory is removed

    # -- set-up and tear-down -------------------------------------------------------------------

    def start(self) -> None:
        self.cluster.start()  # errors, never skips, if it cannot start
        self.broker.start()
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE counter (n bigint PRIMARY KEY, at timestamptz NOT NULL "
                "DEFAULT clock_timestamp())"
            )
            conn.execute("CREATE TABLE mixed (id int PRIMARY KEY, v int)")
            conn.execute("CREATE TABLE bulk (id int PRIMARY KEY, pad text)")
            if self.cluster.major_version >= 14:  # streamed transactions (and spilling)
                conn.execute("ALTER DATABASE postgres SET logical_decoding_work_mem = '64kB'")
        registry = urlsplit(self.stack.registry_url)
        self.settings = bridge_settings(
            self.stack,
            self.dsn,
            self.prefix,
            **{
                "kafka.bootstrap.servers": self.broker.bootstrap_servers,
                "schema.registry.url": urlunsplit(
                    registry._replace(netloc=f"127.0.0.1:{self.proxy.port}")
                ),
                "kafka.delivery.timeout.ms": str(DELIVERY_TIMEOUT_MS),
                "errors.retry.delay.max.ms": "2000",
                "streaming.spill.threshold.bytes": "65536",
                "streaming.spill.dir": str(self.spill_dir),
                "exactly.once.support": "required" if self.exactly_once else "disabled",
            },
        )
        self.bridge = BridgeProcess(self.settings, str(self.workdir / "bridge.log"))
        self.writer = threading.Thread(target=self._write, name="soak-writer", daemon=True)
        self.writer.start()
        self.caught_up(timeout=120)

    def close(self) -> None:
        self.writer_stop.set()
        if self.bridge is not None and self.bridge.proc.poll() is None:
            self.bridge.kill()
        self.proxy.close()
        self.broker.stop()
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
                        time.sleep(0.005)
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

    def caught_up(self, timeout: float) -> float | None:
        """Seconds until the slot confirmed a marker committed now; ``None`` past ``timeout``
        or when the bridge process ended."""
        start = time.monotonic()
        target = self.mark()
        while time.monotonic() - start < timeout:
            assert self.bridge is not None
            if self.bridge.proc.poll() is not None:
                return None
            try:
                if slot_confirmed(self.dsn, self.settings["slot.name"]) >= target:
                    return time.monotonic() - start
            except psycopg.OperationalError:
                pass
            time.sleep(0.2)
        return None

    # -- the faults -----------------------------------------------------------------------------

    def inject(self, fault: str, outage: float) -> FaultResult:
        result = FaultResult(fault, time.time(), outage)
        FAULTS[fault](self, outage)
        assert self.bridge is not None
        alive = self.bridge.proc.poll() is None
        result.recover_s = self.caught_up(timeout=180)
        result.recovered = alive and result.recover_s is not None
        return result

    def _kill_bridge(self, outage: float) -> None:
        assert self.bridge is not None
        self.bridge.kill()
        time.sleep(outage)
        self.bridge = BridgeProcess(self.settings, self.bridge.log_path)

    def _terminate_walsender(self, outage: float) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = %s AND active_pid IS NOT NULL",
                (self.settings["slot.name"],),
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
            return kafka.broker(kafka.leader_of(f"{self.prefix}.public.counter"))
        return kafka

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
        pid = broker.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # reaped: a zombie would look alive to the next start
        time.sleep(outage)
        broker.start()

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
        self.spill_dir.mkdir()

    # -- the verdict ----------------------------------------------------------------------------

    def finish(self, results: list[FaultResult]) -> None:
        """Stop the writer, let the bridge catch up, and charge duplicates and losses."""
        self.writer_stop.set()
        self.writer.join(30)
        if self.caught_up(timeout=180) is None:
            raise AssertionError(f"pgbridge did not catch up at the end:\n{self.log()[-3000:]}")
        assert self.bridge is not None and self.bridge.terminate() == 0, self.log()[-3000:]
        with psycopg.connect(self.dsn) as conn:
            committed = {
                int(n): at.timestamp()
                for n, at in conn.execute("SELECT n, at FROM counter").fetchall()
            }
        records = read_topic(
            self.broker.bootstrap_servers,
            self.stack.registry_url,
            f"{self.prefix}.public.counter",
        )
        seen = Counter(int(v["after"]["n"]) for _, v in records if v is not None and v["after"])
        starts = [r.injected_at for r in results]

        def charged(at: float) -> FaultResult | None:
            later = [i for i, start in enumerate(starts) if start >= at]
            return results[later[0]] if later else None

        for n, at in committed.items():
            result = charged(at)
            copies = seen.get(n, 0)
            if copies == 0:
                if result is None:
                    self.unattributed["lost"] += 1
                else:
                    result.lost += 1
            elif copies > 1:
                if result is None:
                    self.unattributed["duplicates"] += copies - 1
                else:
                    result.duplicates += copies - 1
        self.committed = len(committed)
        self.delivered = sum(seen.values())

    def log(self) -> str:
        return self.bridge.log() if self.bridge is not None else ""


FAULTS: dict[str, Callable[[FaultRig, float], None]] = {
    "walsender terminated": FaultRig._terminate_walsender,
    "bridge SIGKILL": FaultRig._kill_bridge,
    "registry down, new table": FaultRig._registry_down,
    "broker SIGKILL": FaultRig._kill_broker,
    "leader SIGKILL": FaultRig._kill_broker,
    "leader stalled": FaultRig._stall_broker,
    "rolling restart": FaultRig._rolling_restart,
    "postgres fast restart": FaultRig._restart_postgres,
    "spill directory gone": FaultRig._spill_gone,
}


def report(results: list[FaultResult], rig: FaultRig) -> str:
    """The table: fault x recovered / time to recover / duplicates / lost."""
    lines = [
        f"{'fault':<26} {'outage':>7} {'recovered':>9} {'time to recover':>15} "
        f"{'duplicates':>10} {'lost':>5}"
    ]
    for r in results:
        recover = f"{r.recover_s:.1f} s" if r.recover_s is not None else "never"
        lines.append(
            f"{r.fault:<26} {r.outage_s:>5.0f} s {'yes' if r.recovered else 'NO':>9} "
            f"{recover:>15} {r.duplicates:>10} {r.lost:>5}"
        )
    lines.append(
        f"{rig.committed:,} counter values committed, {rig.delivered:,} records in Kafka; "
        f"after the last fault: {rig.unattributed['duplicates']} duplicates, "
        f"{rig.unattributed['lost']} lost"
    )
    return "\n".join(lines)


def run_cycle(
    stack: StackInfo,
    schedule: list[tuple[str, float]],
    pause: float,
    *,
    brokers: int = 1,
    exactly_once: bool = False,
) -> tuple[list[FaultResult], FaultRig]:
    """Each (fault, outage) in turn, ``pause`` seconds of steady writing between them."""
    rig = FaultRig(
        stack,
        Path(tempfile.mkdtemp(prefix="pgbridge-soak-")),
        brokers=brokers,
        exactly_once=exactly_once,
    )
    results: list[FaultResult] = []
    try:
        rig.start()
        for fault, outage in schedule:
            time.sleep(pause)
            results.append(rig.inject(fault, outage))
        time.sleep(pause)
        rig.finish(results)
        return results, rig
    except BaseException:
        print(rig.log()[-4000:])
        raise
    finally:
        rig.final_log = rig.log()
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
    results, rig = run_cycle(stack, schedule, pause=SOAK_PAUSE_S)
    print(report(results, rig))
    bad = [r for r in results if not r.recovered or r.lost]
    if bad or rig.unattributed["lost"]:
        raise SystemExit(f"soak failed: {len(bad)} fault(s) not recovered or with losses")


if __name__ == "__main__":
    main()
