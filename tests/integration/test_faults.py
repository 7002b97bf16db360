"""Faults of a dependency while ``pgbridge run`` streams, injected on the real stack.

The registry is reached through a TCP proxy (tests/integration/faults.py) that the test takes
down and brings back: the real registry behind it is untouched, so other tests sharing the
stack are not disturbed, and pgbridge sees exactly what an outage looks like (connections
refused, open ones cut). Kafka is a throwaway broker of the test's own, killed and started
again, since the stack's broker serves the other tests.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from bridge.devstack.kafka import SHORT_LIVED_JVM_OPTIONS, KafkaBroker
from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.devstack.stack import StackInfo
from bridge.retry import WAITING_FOR
from tests.integration.bridge_harness import (
    BridgeProcess,
    RunningBridge,
    bridge_config,
    bridge_settings,
    mark,
    normalized,
    rebuild_tables,
    scratch_database,
    source_rows,
    wait_slot_confirmed,
    wait_streaming,
)
from tests.integration.faults import TcpProxy, broker_outage

pytestmark = pytest.mark.integration

#: A registry outage while a schema change needs it: a dozen refused attempts at the retry
#: delay's cap (2 s here) and long past every client timeout of a refused connection. The
#: soak (make soak) draws outages of 5-25 s among its faults; nothing in the bridge changes
#: with a longer one.
OUTAGE_S = 30


# make test: this fault in the short cycle on 3 brokers (test_fault_cycle.py), at-least-once
# and exactly once side by side; here on its own, in make test-long.
@pytest.mark.long
def test_faults_registry_outage_during_a_schema_change_waits_and_continues(
    local_stack: StackInfo,
) -> None:
    registry = urlsplit(local_stack.registry_url)
    assert registry.hostname is not None and registry.port is not None
    proxy = TcpProxy(registry.hostname, registry.port)
    via_proxy = urlunsplit(registry._replace(netloc=f"127.0.0.1:{proxy.port}"))
    prefix = f"fault{uuid.uuid4().hex[:8]}"
    try:
        with scratch_database(local_stack) as dsn:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE before_outage (id int PRIMARY KEY, v text)")
            config = bridge_config(
                local_stack,
                dsn,
                prefix,
                **{"schema.registry.url": via_proxy, "errors.retry.delay.max.ms": "2000"},
            )
            bridge = RunningBridge(config)
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("INSERT INTO before_outage VALUES (1, 'a')")
                    bridge.wait_confirmed(mark(dsn))
                    proxy.down()
                    # A new table and a changed one need the registry; rows of both and of a
                    # known table go on being written during the outage.
                    conn.execute("CREATE TABLE during_outage (id int PRIMARY KEY, n numeric(10,3))")
                    conn.execute("INSERT INTO during_outage SELECT i, i / 3.0 FROM "
                                 "generate_series(1, 100) i")  # fmt: skip
                    conn.execute("ALTER TABLE before_outage ADD COLUMN extra int")
                    conn.execute("INSERT INTO before_outage VALUES (2, 'b', 2)")
                    conn.execute("UPDATE before_outage SET v = 'changed' WHERE id = 1")
                    target = mark(dsn)
                    deadline = time.monotonic() + OUTAGE_S
                    waited = False
                    while time.monotonic() < deadline:
                        assert bridge.error is None, f"the bridge stopped: {bridge.error!r}"
                        waited = waited or "schema registry" in WAITING_FOR
                        time.sleep(0.5)
                    assert waited, "the bridge never said it was waiting for the registry"
                    assert bridge.pipeline.tracker.flush_lsn < target  # nothing confirmed past
                    proxy.up()
                    bridge.wait_confirmed(target, timeout=120)
            finally:
                bridge.stop()
            rebuilt = rebuild_tables(
                local_stack.bootstrap_servers, local_stack.registry_url, prefix
            )
            for table in ("public.before_outage", "public.during_outage"):
                assert normalized(rebuilt[table]) == source_rows(dsn, table, ("id",)), table
    finally:
        proxy.close()


#: Longer than the test's delivery timeout, so deliveries fail and the bridge must restart.
BROKER_OUTAGE_S = 15


# make test: this fault in the short cycle on 3 brokers (test_fault_cycle.py), at-least-once
# and exactly once side by side; here on its own, in make test-long.
@pytest.mark.long
def test_faults_kafka_broker_down_past_the_delivery_timeout_restarts_streaming_without_loss(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """A broker killed (SIGKILL) under a steady writer, for longer than
    ``kafka.delivery.timeout.ms``: ``pgbridge run`` does not exit; it streams again from the
    slot's confirmed position until the broker is back, and every row arrives."""
    broker = KafkaBroker(
        Path(tempfile.mkdtemp(prefix="pgbridge-fault-kafka-")),
        heap="384m",
        jvm_options=SHORT_LIVED_JVM_OPTIONS,
    )
    broker.start()  # errors, never skips, if it cannot start
    prefix = f"kfault{uuid.uuid4().hex[:8]}"
    writer_stop = threading.Event()
    try:
        with scratch_database(local_stack) as dsn:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE steady (id bigserial PRIMARY KEY, v text)")
            settings = bridge_settings(
                local_stack,
                dsn,
                prefix,
                **{
                    "kafka.bootstrap.servers": broker.bootstrap_servers,
                    "kafka.delivery.timeout.ms": "8000",
                    "errors.retry.delay.max.ms": "2000",
                    # The at-least-once producer, whose records time out: by default this
                    # broker grants transactions, and an exactly-once bridge may instead wait
                    # in its transaction's commit and go on without a restart (the fault
                    # cycle's "Kafka down" checks that path: test_fault_cycle.py).
                    "exactly.once.support": "disabled",
                },
            )
            bridge = BridgeProcess(settings, str(tmp_path / "bridge.log"))

            def write() -> None:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    while not writer_stop.is_set():
                        conn.execute("INSERT INTO steady (v) VALUES (repeat('x', 20))")
                        time.sleep(0.01)

            writer = threading.Thread(target=write, daemon=True)
            try:
                writer.start()
                wait_streaming(dsn, settings["slot.name"], bridge)

                def running() -> None:
                    assert bridge.proc.poll() is None, (
                        f"pgbridge run exited:\n{bridge.log()[-3000:]}"
                    )

                broker_outage(broker, BROKER_OUTAGE_S, running)
                time.sleep(3)  # the writer goes on after the broker is back
                writer_stop.set()
                writer.join(10)
                wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), bridge, timeout=180)
                assert "streaming again from the slot's confirmed position" in bridge.log()
                assert bridge.terminate() == 0
            finally:
                writer_stop.set()
                if bridge.proc.poll() is None:
                    bridge.kill()
            rebuilt = rebuild_tables(broker.bootstrap_servers, local_stack.registry_url, prefix)
            expected = source_rows(dsn, "public.steady", ("id",))
            assert len(expected) > 1000
            assert normalized(rebuilt["public.steady"]) == expected
    finally:
        broker.stop()
        shutil.rmtree(broker.base_dir, ignore_errors=True)


#: How long the source database stays down (fast shutdown, then started again).
DATABASE_OUTAGE_S = 10


# make test: this fault in the short cycle on 3 brokers (test_fault_cycle.py), at-least-once
# and exactly once side by side; here on its own, in make test-long.
@pytest.mark.long
def test_faults_database_fast_restart_under_a_writer_resumes_without_loss(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """The source PostgreSQL (a throwaway cluster, the stack's major) shut down fast and started
    again while a writer runs: ``pgbridge run`` reconnects from its flush position and every row
    committed before and after arrives."""
    cluster = PostgresCluster(
        ensure_postgres_binaries(local_stack.postgres_major),
        base_dir=Path(tempfile.mkdtemp(prefix="pgbridge-fault-pg-")),
    )
    cluster.start()  # errors, never skips, if it cannot start
    dsn = cluster.dsn()
    prefix = f"pgfault{uuid.uuid4().hex[:8]}"
    writer_stop = threading.Event()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE steady (id bigserial PRIMARY KEY, v text)")
        settings = bridge_settings(local_stack, dsn, prefix)
        bridge = BridgeProcess(settings, str(tmp_path / "bridge.log"))

        def write() -> None:  # reconnects through the outage; only committed rows count
            while not writer_stop.is_set():
                try:
                    with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                        while not writer_stop.is_set():
                            conn.execute("INSERT INTO steady (v) VALUES ('x')")
                            time.sleep(0.01)
                except psycopg.OperationalError:
                    time.sleep(0.2)

        writer = threading.Thread(target=write, daemon=True)
        try:
            writer.start()
            wait_streaming(dsn, settings["slot.name"], bridge)
            cluster.stop()
            deadline = time.monotonic() + DATABASE_OUTAGE_S
            while time.monotonic() < deadline:
                assert bridge.proc.poll() is None, f"pgbridge run exited:\n{bridge.log()[-3000:]}"
                time.sleep(0.5)
            cluster.start()
            time.sleep(3)
            writer_stop.set()
            writer.join(10)
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), bridge, timeout=180)
            assert bridge.terminate() == 0
        finally:
            writer_stop.set()
            if bridge.proc.poll() is None:
                bridge.kill()
        rebuilt = rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)
        expected = source_rows(dsn, "public.steady", ("id",))
        assert len(expected) > 300
        assert normalized(rebuilt["public.steady"]) == expected
    finally:
        cluster.destroy()


def test_faults_spill_directory_gone_during_a_streamed_transaction_waits_and_delivers(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """The spill directory is missing (deleted, an unmounted volume) when a large transaction
    is streamed in progress and must be spilled, while a writer goes on: ``pgbridge run`` does
    not exit; it waits (log, metric), streams again from the slot's confirmed position, and
    once the directory is back every row, the large transaction's and the writer's, arrives."""
    prefix = f"spill{uuid.uuid4().hex[:8]}"
    spill_dir = tmp_path / "spill"  # not there yet
    writer_stop = threading.Event()
    with scratch_database(local_stack) as dsn:
        dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            # The server streams a transaction in progress past 64 kB of changes (14+).
            conn.execute(f"ALTER DATABASE \"{dbname}\" SET logical_decoding_work_mem = '64kB'")
            conn.execute("CREATE TABLE steady (id bigserial PRIMARY KEY, n int)")
            conn.execute("CREATE TABLE bulk (id int PRIMARY KEY, pad text)")
        settings = bridge_settings(
            local_stack,
            dsn,
            prefix,
            **{
                "streaming.spill.threshold.bytes": "65536",
                "streaming.spill.dir": str(spill_dir),
                "errors.retry.delay.max.ms": "1000",
            },
        )
        bridge = BridgeProcess(settings, str(tmp_path / "bridge.log"))

        def write() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                n = 0
                while not writer_stop.is_set():
                    n += 1
                    conn.execute("INSERT INTO steady (n) VALUES (%s)", (n,))
                    time.sleep(0.01)

        writer = threading.Thread(target=write, daemon=True)
        try:
            writer.start()
            wait_streaming(dsn, settings["slot.name"], bridge)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO bulk SELECT i, repeat('p', 200) FROM generate_series(1, 5000) i"
                )
            deadline = time.monotonic() + 60
            while "spill directory" not in bridge.log():
                assert bridge.proc.poll() is None, f"pgbridge run exited:\n{bridge.log()[-3000:]}"
                assert time.monotonic() < deadline, "the spill fault was never met"
                time.sleep(0.2)
            time.sleep(5)  # a few restarts meet the same missing directory
            assert bridge.proc.poll() is None, f"pgbridge run exited:\n{bridge.log()[-3000:]}"
            spill_dir.mkdir()
            time.sleep(2)
            writer_stop.set()
            writer.join(10)
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), bridge, timeout=180)
            assert bridge.terminate() == 0
        finally:
            writer_stop.set()
            if bridge.proc.poll() is None:
                bridge.kill()
        log = bridge.log()
        assert "(transient); streaming again from the slot's confirmed position" in log
        assert "No such file or directory" in log
        rebuilt = rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)
        for table in ("public.steady", "public.bulk"):
            expected = source_rows(dsn, table, ("id",))
            assert normalized(rebuilt[table]) == expected, table
        assert len(rebuilt["public.bulk"]) == 5000
