"""Incremental snapshots steered and kept right without Spark: Kafka signals pausing and resuming
them with `pgbridge status` showing progress, a table created while running, rows DDL
rewrote and a type changed while the bridge was down copied again. A module apart from
test_incremental_snapshot.py (whose tests apply to Delta) so that the integration run's
worker without a Spark session takes it (tests/scheduling.py)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from bridge.devstack.stack import StackInfo
from tests.integration.bridge_harness import (
    BridgeProcess,
    bridge_settings,
    mark,
    read_topic,
    scratch_database,
    wait_for,
    wait_slot_confirmed,
)
from tests.integration.test_incremental_snapshot import (
    SCHEMA,
    assert_rebuild_equals_source,
    cli,
    settings_for,
    state,
    tables_done,
)

pytestmark = pytest.mark.integration


def status_json(settings: dict[str, str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "bridge.cli", "status", "--json"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_kafka_signals_pause_and_resume_and_status_shows_progress(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    prefix = f"incrs{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)
        settings = settings_for(local_stack, dsn, prefix, tmp_path)
        settings["signal.enabled.channels"] = "source,kafka"
        settings["incremental.snapshot.chunk.size"] = "100"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        settings.update({"metrics.port": str(port), "metrics.host": "127.0.0.1"})
        producer = Producer({"bootstrap.servers": local_stack.bootstrap_servers})

        def kafka_signal(key: str, signal_type: str, data: dict[str, Any]) -> None:
            value = json.dumps({"type": signal_type, "data": data})
            producer.produce(f"{prefix}-signal", key=key, value=value)
            producer.flush(30)

        process = BridgeProcess(settings, str(tmp_path / "bridge.log"))
        try:
            wait_for(lambda: "to topics" in process.log(), process, "streaming")
            assert "created Kafka signal topic" in process.log()
            # Another connector's signal on the shared topic: not for this bridge.
            kafka_signal(
                "someone-else", "execute-snapshot", {"data-collections": ["public.subset"]}
            )
            kafka_signal(prefix, "execute-snapshot", {"data-collections": ["public.items"]})

            def copying() -> bool:
                current = state(tmp_path, settings)
                return current is not None and current.tables[0].chunks >= 3

            wait_for(copying, process, "the Kafka-signalled snapshot", timeout=120)
            cli(settings, "--pause")
            wait_for(lambda: bool((s := state(tmp_path, settings)) and s.paused), process, "pause")
            paused_at = state(tmp_path, settings)
            assert paused_at is not None
            time.sleep(2)
            still = state(tmp_path, settings)
            assert still is not None and still.tables[0].chunks <= paused_at.tables[0].chunks + 1
            shown = status_json(settings)["incremental"]
            assert shown["paused"] and shown["tables"][0]["table"] == "public.items"
            assert shown["tables"][0]["status"] == "copying" and shown["tables"][0]["rows"] > 0
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                metrics = r.read().decode()
            assert "pgbridge_incremental_snapshot_paused 1.0" in metrics
            rows = re.search(
                r'pgbridge_incremental_snapshot_rows\{table="public.items"\} (\S+)', metrics
            )
            assert rows is not None and float(rows.group(1)) > 0
            kafka_signal(prefix, "resume-snapshot", {})
            wait_for(
                lambda: tables_done(tmp_path, settings, "public.items"),
                process,
                "the resumed snapshot",
                timeout=300,
            )
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            assert process.terminate() == 0, process.log()[-3000:]
        finally:
            if process.proc.poll() is None:
                process.kill()
        final = state(tmp_path, settings)
        assert final is not None and [t.table for t in final.tables] == ["public.items"]
        assert_rebuild_equals_source(local_stack, dsn, prefix, {"public.items": ("id",)})


def test_a_table_created_while_running_arrives_complete_without_a_restart(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """Filtered publication over schema app: a table created there while the bridge runs, with
    rows committed before it was published, is published by the bridge and snapshotted
    incrementally (snapshot.new.tables = parallel) while a writer changes it."""
    prefix = f"incrn{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE SCHEMA app; CREATE TABLE app.first (id int PRIMARY KEY)")
        settings = settings_for(local_stack, dsn, prefix, tmp_path)
        settings.update(
            {
                "publication.autocreate.mode": "filtered",
                "schema.include.list": "app",
                "signal.data.collection": "app.signals",
                "snapshot.new.tables": "parallel",
                "publication.refresh.interval.ms": "300",
            }
        )
        process = BridgeProcess(settings, str(tmp_path / "bridge.log"))
        stop = threading.Event()

        def write_later() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                r = 0
                while not stop.is_set():
                    r += 1
                    conn.execute(
                        "UPDATE app.later SET v = %s WHERE id %% 50 = %s", (f"w{r}", r % 50)
                    )
                    conn.execute("DELETE FROM app.later WHERE id = %s", (r * 7 % 6000,))
                    conn.execute("INSERT INTO app.later VALUES (%s, 'new')", (10_000 + r,))
                    time.sleep(0.01)

        write = threading.Thread(target=write_later)
        try:
            wait_for(lambda: "to topics" in process.log(), process, "streaming")
            time.sleep(1)  # the watch's first look: the baseline
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "CREATE TABLE app.later (id int PRIMARY KEY, v text);"
                    "INSERT INTO app.later SELECT i, 'old' FROM generate_series(1, 6000) i"
                )
            write.start()
            wait_for(
                lambda: tables_done(tmp_path, settings, "app.later"),
                process,
                "the new table's snapshot",
                timeout=300,
            )
            stop.set()
            write.join(60)
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            assert process.terminate() == 0, process.log()[-3000:]
        finally:
            stop.set()
            if process.proc.poll() is None:
                process.kill()
        log = process.log()
        assert "publication" in log and "added [('app', 'later')]" in log
        assert_rebuild_equals_source(local_stack, dsn, prefix, {"app.later": ("id",)})


def test_rows_ddl_rewrote_are_copied_again_with_the_default_settings(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """``snapshot.rewritten.tables = incremental`` (the default), no signal table:
    ``ALTER COLUMN … TYPE … USING`` rewrites every row without sending one, and ``RENAME TO``
    leaves the rows in the old topic; each time the bridge requests an incremental snapshot of
    the table by itself, its signals and watermarks travelling as signed logical messages, so
    a consumer of the topics ends with PostgreSQL's values (what USING computed) and the
    renamed table's topic holds all its rows. A forged signal message is ignored."""
    prefix = f"incrw{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE retyped (id int PRIMARY KEY, v text);"
                "INSERT INTO retyped SELECT i, repeat('x', i % 7) FROM generate_series(1, 3000) i;"
                "CREATE TABLE before_name (id int PRIMARY KEY, v text);"
                "INSERT INTO before_name SELECT i, 'b' || i FROM generate_series(1, 800) i"
            )
        settings = bridge_settings(local_stack, dsn, prefix, **{"state.dir": str(tmp_path)})
        process = BridgeProcess(settings, str(tmp_path / "bridge.log"))
        try:
            # Streaming, the initial snapshot done (a mark taken before the slot exists is
            # behind it: confirmed at once, while the snapshot may still run).
            wait_for(lambda: "to topics" in process.log(), process, "streaming")
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            with psycopg.connect(dsn, autocommit=True) as conn:
                forged = {"id": "forged", "type": "execute-snapshot", "data": {}, "mac": "00"}
                conn.execute(
                    "SELECT pg_logical_emit_message(true, 'pgbridge.signal', %s)",
                    (json.dumps(forged),),
                )
                conn.execute("SELECT pg_logical_emit_message(true, 'app', 'hello')")
                conn.execute("ALTER TABLE retyped ALTER COLUMN v TYPE int USING length(v) * 10")
                conn.execute("UPDATE retyped SET v = -1 WHERE id = 5")  # streamed as well
                conn.execute("ALTER TABLE before_name RENAME TO after_name")
                conn.execute("UPDATE after_name SET v = 'renamed' WHERE id = 1")
            wait_for(
                lambda: tables_done(tmp_path, settings, "public.retyped", "public.after_name"),
                process,
                "the rewritten tables' snapshots",
                timeout=300,
            )
            # pgbridge snapshot, without a signal table: signed with the bridge's key.
            sent = re.search(r"signal (\w+) to the stream", cli(settings, "public.after_name"))
            assert sent is not None
            wait_for(lambda: f"(signal {sent[1]})" in process.log(), process, "the CLI's signal")
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            assert process.terminate() == 0, process.log()[-3000:]
        finally:
            if process.proc.poll() is None:
                process.kill()
        log = process.log()
        assert "public.retyped: requesting an incremental snapshot (rewrite-" in log
        assert "public.after_name: requesting an incremental snapshot (rewrite-" in log
        assert "signal 'forged': not signed with this bridge's key" in log
        with psycopg.connect(dsn) as conn:  # nothing written to the database's tables
            assert conn.execute("SELECT to_regclass('public.dbz_signal')").fetchone() == (None,)
        # The bridge's own messages stay out of the messages topic; the application's go there.
        messages = read_topic(
            local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.messages"
        )
        prefixes = {k["prefix"] for k, _ in messages}
        assert "app" in prefixes and "pgbridge.signal" not in prefixes, prefixes
        assert_rebuild_equals_source(
            local_stack, dsn, prefix, {"public.retyped": ("id",), "public.after_name": ("id",)}
        )


def test_a_type_changed_while_the_bridge_was_down_is_copied_again_after_the_restart(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """The bridge stops; ``ALTER COLUMN … TYPE … USING`` rewrites every row while it is down;
    the next start compares the table's first Relation with the version the last run delivered
    (kept in its state directory, bridge.relation_memory) and requests the table's incremental
    snapshot by itself, so the topic ends with what USING computed."""
    prefix = f"incdn{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE retyped (id int PRIMARY KEY, v text);"
                "INSERT INTO retyped SELECT i, repeat('x', i % 7) FROM generate_series(1, 500) i"
            )
        settings = bridge_settings(local_stack, dsn, prefix, **{"state.dir": str(tmp_path)})
        log = str(tmp_path / "bridge.log")
        process = BridgeProcess(settings, log)
        try:
            wait_for(lambda: "to topics" in process.log(), process, "streaming")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE retyped SET v = 'y' WHERE id = 1")  # a change streamed
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            assert process.terminate() == 0, process.log()[-3000:]
            with psycopg.connect(dsn, autocommit=True) as conn:  # while no bridge runs
                conn.execute("ALTER TABLE retyped ALTER COLUMN v TYPE int USING length(v) * 10")
                conn.execute("UPDATE retyped SET v = -1 WHERE id = 5")  # brings the Relation
            process = BridgeProcess(settings, log)
            wait_for(
                lambda: tables_done(tmp_path, settings, "public.retyped"),
                process,
                "the retyped table's snapshot",
                timeout=120,
            )
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            assert process.terminate() == 0, process.log()[-3000:]
        finally:
            if process.proc.poll() is None:
                process.kill()
        assert "public.retyped: requesting an incremental snapshot (rewrite-" in process.log()
        assert_rebuild_equals_source(local_stack, dsn, prefix, {"public.retyped": ("id",)})
