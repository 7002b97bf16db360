"""A primary's failover to its standby while ``pgbridge run`` streams, on real PostgreSQL 17+.

The setup is the one the README asks of users: a primary with ``wal_level = logical`` and
``synchronized_standby_slots`` naming the physical slot of a standby that streams from it with
``sync_replication_slots = on``, ``hot_standby_feedback = on``, ``primary_slot_name`` and a
``primary_conninfo`` with a dbname; pgbridge with ``slot.failover = true`` and a DSN listing
both hosts. A writer inserts counter values; once the bridge's slot is synchronised to the
standby the primary is killed (SIGKILL of the postmaster, nothing flushed or said to anyone),
the standby promoted, and the writer goes on against the new primary. Every row a commit was
acknowledged for (the primary commits synchronously to the standby, so an acknowledged row
survives the failover) must arrive in Kafka, the bridge must never exit, and nothing may be
in Kafka that the surviving database does not hold.

The standby is cloned with the low-level backup API (``pg_backup_start`` / copy /
``pg_backup_stop``, the procedure of the PostgreSQL manual), since the dev stack's server
binaries (zonky's) ship without ``pg_basebackup``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from bridge.config import load_config
from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.devstack.process import chown_tree, free_port, port_open
from bridge.devstack.stack import StackInfo
from bridge.ops.status import collect
from bridge.pgoutput.lsn import Lsn
from tests.integration.bridge_harness import (
    BridgeProcess,
    bridge_settings,
    mark,
    normalized,
    read_topic,
    rebuild_tables,
    source_rows,
    wait_slot_confirmed,
)

pytestmark = pytest.mark.integration

PHYSICAL_SLOT = "failover_standby"
#: How long the bridge is left without a primary before the standby is promoted.
NO_PRIMARY_S = 8


def failover_major(stack: StackInfo) -> str:
    """The stack's major when it has failover slots (17+), else 18."""
    return stack.postgres_major if int(stack.postgres_major) >= 17 else "18"


class Postmaster:
    """A cluster's postmaster run as this process's child, so that the test can SIGKILL it and
    reap it (``os.kill`` + ``os.waitpid``), as a crashed machine would leave it."""

    def __init__(self, cluster: PostgresCluster) -> None:
        self.cluster = cluster
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        env["LD_LIBRARY_PATH"] = str(cluster.bindir.parent / "lib")
        with open(cluster.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(cluster.bindir / "postgres"), "-D", str(cluster.data_dir)],
                user=cluster.user,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cluster.base_dir,
            )
        deadline = time.monotonic() + 60
        while not self._accepts():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start:\n{cluster.log_path.read_text()}")
            time.sleep(0.2)

    def _accepts(self) -> bool:
        if not port_open(self.cluster.port):
            return False
        try:
            psycopg.connect(self.cluster.dsn(), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        os.waitpid(self.proc.pid, 0)
        self.proc.returncode = -signal.SIGKILL  # reaped here, not by Popen


def clone_standby(primary: PostgresCluster, standby: PostgresCluster) -> None:
    """A base backup of ``primary`` into ``standby``'s data directory, set up to stream from
    the primary through :data:`PHYSICAL_SLOT` (created first, reserving WAL at once)."""
    with psycopg.connect(primary.dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (PHYSICAL_SLOT,))
        conn.execute("SELECT pg_backup_start('pgbridge-failover-test', true)")
        shutil.copytree(
            primary.data_dir,
            standby.data_dir,
            ignore=shutil.ignore_patterns("postmaster.pid", "postmaster.opts"),
        )
        row = conn.execute("SELECT labelfile FROM pg_backup_stop(false)").fetchone()
    assert row is not None
    for sub in ("pg_wal", "pg_replslot"):  # streamed from the primary / the standby's own
        for child in (standby.data_dir / sub).iterdir():
            if child.is_file():
                child.unlink()
            elif sub == "pg_replslot":
                shutil.rmtree(child)
    (standby.data_dir / "backup_label").write_text(str(row[0]))
    (standby.data_dir / "standby.signal").touch()
    chown_tree(standby.base_dir, standby.user)


def wait_streaming_standby(primary: PostgresCluster) -> None:
    deadline = time.monotonic() + 60
    while True:
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
            ).fetchone()
        if row == (1,):
            return
        assert time.monotonic() < deadline, "the standby never streamed from the primary"
        time.sleep(0.3)


def standby_slot(standby_dsn: str, slot: str) -> tuple[bool, bool, Lsn]:
    """(synced, persistent, confirmed_flush_lsn) of ``slot`` on the standby."""
    with psycopg.connect(standby_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT synced, NOT temporary, confirmed_flush_lsn::text FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    if row is None:
        return False, False, Lsn(0)
    return bool(row[0]), bool(row[1]), Lsn.parse(str(row[2] or "0/0"))


def wait_synced(standby_dsn: str, slot: str, past: Lsn, bridge: BridgeProcess) -> float:
    """Until the standby holds ``slot`` synchronised at or past ``past``; the seconds it took."""
    started = time.monotonic()
    while True:
        synced, persistent, confirmed = standby_slot(standby_dsn, slot)
        if synced and persistent and confirmed >= past:
            return time.monotonic() - started
        assert bridge.proc.poll() is None, f"pgbridge run exited:\n{bridge.log()[-3000:]}"
        assert time.monotonic() - started < 120, (
            f"slot {slot} not synced on the standby: synced={synced} persistent={persistent} "
            f"confirmed={confirmed}, waited for {past}"
        )
        time.sleep(0.5)


class Writer:
    """Inserts counter values into ``steady`` through a DSN naming both hosts (read-write: the
    current primary), reconnecting through the failover. ``acknowledged`` holds the values
    whose COMMIT returned; ``in_doubt`` those whose COMMIT was cut off by the crash."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.acknowledged: list[int] = []
        self.in_doubt: list[int] = []
        self.stop = threading.Event()
        self._next = 1
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
                    while not self.stop.is_set():
                        value = self._next
                        self._next += 1
                        try:
                            conn.execute("INSERT INTO steady VALUES (%s, 'x')", (value,))
                        except psycopg.OperationalError:
                            self.in_doubt.append(value)
                            raise
                        self.acknowledged.append(value)
                        time.sleep(0.01)
            except psycopg.OperationalError:
                time.sleep(0.2)

    def count(self) -> int:
        return len(self.acknowledged)

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(30)


@dataclass
class Pair:
    """A primary (run as this process's child) and its streaming standby."""

    primary: PostgresCluster
    postmaster: Postmaster
    standby: PostgresCluster

    def hosts(self) -> str:
        """A DSN naming both hosts, primary first, for the database ``shop``."""
        return (
            f"host=127.0.0.1,127.0.0.1 port={self.primary.port},{self.standby.port} "
            "user=postgres dbname=shop connect_timeout=2"
        )


@contextmanager
def primary_and_standby(stack: StackInfo) -> Iterator[Pair]:
    """The failover setup of docs/guarantees.md on two throwaway clusters, with the database
    ``shop`` and its table ``steady`` (id bigint PRIMARY KEY, v text); errors, never skips, if
    either cannot start."""
    bindir = ensure_postgres_binaries(failover_major(stack))
    base = Path(tempfile.mkdtemp(prefix="pgbridge-failover-"))
    base.chmod(0o755)
    primary = PostgresCluster(bindir, base / "primary")
    primary.start()  # initdb and settings; then run again as a child of ours
    primary.stop()
    postmaster = Postmaster(primary)
    standby = PostgresCluster(
        bindir,
        base / "standby",
        port=free_port(),
        settings={
            "primary_conninfo": (
                f"'host=127.0.0.1 port={primary.port} user=postgres dbname=postgres "
                "application_name=standby'"
            ),
            "primary_slot_name": f"'{PHYSICAL_SLOT}'",
            "hot_standby_feedback": "on",
            "sync_replication_slots": "on",
        },
    )
    try:
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE shop")
        with psycopg.connect(primary.dsn("shop"), autocommit=True) as conn:
            conn.execute("CREATE TABLE steady (id bigint PRIMARY KEY, v text)")
        clone_standby(primary, standby)
        standby.start()
        wait_streaming_standby(primary)
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            # Logical walsenders send nothing the standby has not flushed: the synced slot
            # never lags behind what pgbridge received.
            conn.execute(f"ALTER SYSTEM SET synchronized_standby_slots = '{PHYSICAL_SLOT}'")
            # An acknowledged commit is on the standby, so it survives the failover and every
            # acknowledged row is owed to Kafka. (Set once the standby streams: commits would
            # wait for it before.)
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
        yield Pair(primary, postmaster, standby)
    finally:
        if postmaster.proc.returncode is None:
            postmaster.kill()
        standby.stop()
        shutil.rmtree(base, ignore_errors=True)


def promote(standby: PostgresCluster) -> None:
    with psycopg.connect(standby.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT pg_promote(true, 60)").fetchone() == (True,)


def wait_log(bridge: BridgeProcess, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in bridge.log():
        assert bridge.proc.poll() is None, f"pgbridge run exited:\n{bridge.log()[-3000:]}"
        assert time.monotonic() < deadline, f"never logged {text!r}:\n{bridge.log()[-3000:]}"
        time.sleep(0.2)


# make test runs the harder case (the bridge lands on the standby and must wait by itself);
# the recommended DSN, where libpq skips the standby, the same failover otherwise, in test-long.
@pytest.mark.parametrize(
    "session_attrs",
    [pytest.param("read-write", marks=pytest.mark.long), None],
    ids=["target_session_attrs=read-write", "no_target_session_attrs"],
)
def test_failover_primary_killed_standby_promoted_bridge_resumes_on_synced_slot_without_loss(
    local_stack: StackInfo, tmp_path: Path, session_attrs: str | None
) -> None:
    """With ``target_session_attrs=read-write`` libpq skips the standby until it is promoted;
    without it the bridge reaches the standby while it is still in recovery, must not create
    or stream a slot there, and waits (its own ``pg_is_in_recovery()`` check)."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    prefix = f"failover{uuid.uuid4().hex[:8]}"
    with primary_and_standby(local_stack) as pair:
        primary, standby = pair.primary, pair.standby
        timings["clusters up"] = time.monotonic() - started
        writer = Writer(pair.hosts() + " target_session_attrs=read-write")
        bridge_dsn = pair.hosts() + (
            f" target_session_attrs={session_attrs}" if session_attrs else ""
        )
        settings = bridge_settings(
            local_stack,
            bridge_dsn,
            prefix,
            **{"slot.failover": "true", "errors.retry.delay.max.ms": "2000"},
        )
        slot = settings["slot.name"]
        bridge = BridgeProcess(settings, str(tmp_path / "bridge.log"))
        try:
            wait_log(bridge, "streaming slot")
            confirmed_mark = mark(primary.dsn("shop"))
            wait_slot_confirmed(primary.dsn("shop"), slot, confirmed_mark, bridge)
            timings["bridge streaming"] = time.monotonic() - started
            status = collect(load_config(None, {}, settings)).slot
            assert (status.failover, status.synced, status.in_recovery) == (True, False, False)
            timings["slot synced after"] = wait_synced(
                standby.dsn("shop"), slot, confirmed_mark, bridge
            )
            time.sleep(2)  # the writer and the bridge keep going past the synced position

            before_kill = writer.count()
            pair.postmaster.kill()
            deadline = time.monotonic() + NO_PRIMARY_S
            while time.monotonic() < deadline:
                assert bridge.proc.poll() is None, f"pgbridge run exited:\n{bridge.log()[-3000:]}"
                time.sleep(0.5)
            promote(standby)
            promoted_at = time.monotonic()
            deadline = promoted_at + 60
            while writer.count() < before_kill + 300:  # the writer goes on on the new primary
                assert bridge.proc.poll() is None, f"pgbridge run exited:\n{bridge.log()[-3000:]}"
                assert time.monotonic() < deadline, "the writer made no progress on the new primary"
                time.sleep(0.2)
            writer.finish()
            new_dsn = standby.dsn("shop")
            wait_slot_confirmed(new_dsn, slot, mark(new_dsn), bridge, timeout=180)
            timings["caught up after promotion"] = time.monotonic() - promoted_at
            log = bridge.log()
            if session_attrs is None:
                assert "is a standby (in recovery); waiting for a primary" in log, log[-3000:]
            assert bridge.proc.poll() is None, f"pgbridge run exited:\n{log[-3000:]}"
            status = collect(load_config(None, {}, settings)).slot
            assert (status.failover, status.synced, status.in_recovery) == (True, True, False)
            assert bridge.terminate() == 0
        finally:
            writer.finish()
            if bridge.proc.poll() is None:
                bridge.kill()
        with psycopg.connect(new_dsn, autocommit=True) as conn:
            stray = conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'"
                " AND slot_name <> %s",
                (slot,),
            ).fetchone()
        assert stray == (0,), "a slot was created on the standby"

        topic = f"{prefix}.public.steady"
        rebuilt = rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)
        in_kafka = normalized(rebuilt["public.steady"])
        expected = source_rows(new_dsn, "public.steady", ("id",))
        acknowledged = set(writer.acknowledged)
        lost = sorted(acknowledged - {k[0] for k in in_kafka})
        assert lost == [], f"{len(lost)} acknowledged rows missing from Kafka: {lost[:20]}"
        assert acknowledged <= {k[0] for k in expected}, "the database lost acknowledged rows"
        assert in_kafka == expected
        creates = Counter(
            value["after"]["id"]
            for _, value in read_topic(
                local_stack.bootstrap_servers, local_stack.registry_url, topic
            )
            if value is not None and value["op"] == "c"
        )
        duplicates = sum(n - 1 for n in creates.values())
        print(
            f"\nfailover ({session_attrs or 'no target_session_attrs'}): "
            f"{len(acknowledged)} rows acknowledged ({before_kill} before the kill), "
            f"{len(writer.in_doubt)} in doubt at the crash, {len(expected)} in the new primary, "
            f"0 lost, {duplicates} duplicates; "
            + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
        )


def test_failover_bridge_started_on_a_standby_waits_and_creates_nothing_until_promoted(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """``pgbridge run`` pointed at a standby only: it creates no publication or slot there,
    says that it waits (log line, ``pgbridge status``), and once the standby is promoted it
    creates its slot there and streams."""
    prefix = f"onstandby{uuid.uuid4().hex[:8]}"
    with primary_and_standby(local_stack) as pair:
        standby = pair.standby
        dsn = standby.dsn("shop")
        settings = bridge_settings(
            local_stack,
            dsn,
            prefix,
            **{
                "slot.failover": "true",
                "errors.retry.delay.max.ms": "1000",
                "metrics.port": str(free_port()),
            },
        )
        slot = settings["slot.name"]
        bridge = BridgeProcess(settings, str(tmp_path / "bridge.log"))
        try:
            wait_log(bridge, "is a standby (in recovery); waiting for a primary", timeout=60)
            time.sleep(3)
            assert bridge.proc.poll() is None, f"pgbridge run exited:\n{bridge.log()[-3000:]}"
            with psycopg.connect(dsn, autocommit=True) as conn:
                slots = conn.execute(
                    "SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'logical'"
                ).fetchall()
            assert slots == [], f"slots created on the standby: {slots}"
            assert collect(load_config(None, {}, settings)).waiting_for == ["postgres"]
            # The standby's row count is what the bridge must deliver once it is the primary.
            pair.postmaster.kill()
            promote(standby)
            wait_log(bridge, "streaming slot")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO steady SELECT i, 'after' FROM generate_series(1, 50) i")
            wait_slot_confirmed(dsn, slot, mark(dsn), bridge)
            assert bridge.terminate() == 0
        finally:
            if bridge.proc.poll() is None:
                bridge.kill()
        rebuilt = rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)
        assert normalized(rebuilt["public.steady"]) == source_rows(dsn, "public.steady", ("id",))
