"""Initial snapshots' modes and stops, without Spark: `snapshot.mode=always` copying again at
the slot's position, a SIGTERM mid-copy resumed by the next start, and a SELECT override
copying only its rows in key ranges. A module apart from test_snapshot_e2e.py (whose test
applies to Delta) so that the integration run's worker without a Spark session takes it."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.snapshot.state import load_state
from tests.integration.bridge_harness import (
    BridgeProcess,
    mark,
    normalized,
    read_topic,
    rebuild_tables,
    scratch_database,
    source_rows,
    wait_for,
    wait_slot_confirmed,
)
from tests.integration.test_snapshot_e2e import (
    assert_tables_equal,
    populate,
    settings_for,
)

pytestmark = pytest.mark.integration


def test_snapshot_mode_always_copies_again_at_the_slot_position(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    from bridge.config import load_config
    from bridge.runner import run

    prefix = f"snapa{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO t SELECT i, 'v' || i FROM generate_series(1, 500) i")
        settings = settings_for(local_stack, dsn, prefix, tmp_path)
        state_file = tmp_path / f"snapshot-{settings['slot.name']}.json"

        def run_until_caught_up(mode: str, attempt: int) -> None:
            config = load_config(None, {}, {**settings, "snapshot.mode": mode})
            stop = threading.Event()
            thread = threading.Thread(target=run, args=(config, stop))
            thread.start()
            try:
                deadline = time.monotonic() + 120
                while (state := load_state(state_file)) is None or (state.run, state.status) != (
                    attempt,
                    "done",
                ):
                    assert thread.is_alive() and time.monotonic() < deadline
                    time.sleep(0.05)
                target = mark(dsn)
                while slot_position(dsn, settings["slot.name"]) < int(target):
                    assert thread.is_alive() and time.monotonic() < deadline
                    time.sleep(0.1)
            finally:
                stop.set()
                thread.join(60)

        run_until_caught_up("initial", 0)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE t SET v = 'changed' WHERE id <= 10")
            conn.execute("DELETE FROM t WHERE id > 490")
        run_until_caught_up("always", 1)
        state = load_state(state_file)
        assert state is not None and state.status == "done" and state.run == 1
        rebuilt = rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)
        assert normalized(rebuilt["public.t"]) == source_rows(dsn, "public.t", ("id",))
        records = read_topic(
            local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.t"
        )
        assert sum(1 for _, v in records if v is not None and v["op"] == "r") == 500 + 490


def slot_position(dsn: str, slot: str) -> int:
    from tests.integration.bridge_harness import slot_confirmed

    return int(slot_confirmed(dsn, slot))


def test_snapshot_sigterm_stops_cleanly_and_the_next_start_resumes(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    prefix = f"snapt{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        populate(dsn, big_rows=150_000)
        settings = settings_for(local_stack, dsn, prefix, tmp_path)
        # 150 chunks, stopped with at least 50 left: the copy cannot finish while the SIGTERM
        # is handled. Acknowledgements come in batches, so the chunks done jump (a CI run saw
        # 0 -> 20 of 30 between two looks, and with 15 chunks the copy once finished).
        settings["snapshot.chunk.size"] = "1000"
        state_file = tmp_path / f"snapshot-{settings['slot.name']}.json"
        log = str(tmp_path / "bridge.log")

        def some_done() -> bool:
            try:
                state = load_state(state_file)
            except Exception:  # only while the file is first written
                return False
            big = state.table("public.big") if state is not None else None
            return big is not None and 1 <= len(big.done) < 100

        first = BridgeProcess(settings, log)
        second: BridgeProcess | None = None
        try:
            wait_for(some_done, first, "a chunk of public.big done")
            assert first.terminate() == 0, first.log()[-3000:]  # SIGTERM: drain, record, exit 0
            state = load_state(state_file)
            assert state is not None and state.status == "copying"
            stopped_with = set(state.table("public.big").done)  # type: ignore[union-attr]
            assert "snapshot stopped before its end" in first.log()
            second = BridgeProcess(settings, log)
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), second)
            assert second.terminate() == 0, second.log()[-3000:]
        finally:
            for process in (first, second):
                if process is not None and process.proc.poll() is None:
                    process.kill()
        assert "resumed snapshot of slot" in first.log()
        state = load_state(state_file)
        assert state is not None and state.status == "done"
        assert stopped_with < state.table("public.big").done  # type: ignore[union-attr]
        assert_tables_equal(local_stack, dsn, prefix)


def test_snapshot_select_statement_override_copies_only_its_rows_in_key_ranges(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """Debezium's snapshot.select.statement.overrides: the table's snapshot is the user's
    query (still copied in key ranges), streaming afterwards is every change; a query that
    cannot give the table's columns stops the bridge before anything is published, naming the
    key."""
    from bridge.config import load_config
    from bridge.runner import run
    from bridge.snapshot import SnapshotTableError

    prefix = f"snapo{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute('CREATE TABLE "Orders" (id int PRIMARY KEY, region text, v text)')
            conn.execute(
                "INSERT INTO \"Orders\" SELECT i, CASE WHEN i % 3 = 0 THEN 'eu' ELSE 'us' END, "
                "'v' || i FROM generate_series(1, 3000) i"
            )
            conn.execute("CREATE TABLE other (id int PRIMARY KEY)")
            conn.execute("INSERT INTO other SELECT generate_series(1, 10)")
            conn.execute("VACUUM ANALYZE")
        settings = settings_for(local_stack, dsn, prefix, tmp_path) | {
            "snapshot.mode": "initial_only",
            "snapshot.chunk.size": "500",
            "snapshot.select.statement.overrides": "public.Orders",
            "snapshot.select.statement.overrides.public.Orders": (
                "SELECT * FROM public.\"Orders\" WHERE region = 'eu'"
            ),
        }
        wrong = settings | {
            "slot.name": settings["slot.name"] + "_wrong",
            "state.dir": str(tmp_path / "wrong"),
            "snapshot.select.statement.overrides.public.Orders": 'SELECT id FROM "Orders"',
        }
        with pytest.raises(SnapshotTableError, match=r"overrides\.public\.Orders cannot give"):
            run(load_config(None, {}, wrong), threading.Event())
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (wrong["slot.name"],))
        run(load_config(None, {}, settings), threading.Event())
        state = load_state(tmp_path / f"snapshot-{settings['slot.name']}.json")
        assert state is not None and state.status == "done"
        orders = state.table("public.Orders")
        assert orders is not None and orders.plan.method == "key" and len(orders.plan.chunks) > 2
        rebuilt = rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)
        assert normalized(rebuilt["public.Orders"]) == source_rows(
            dsn, 'public."Orders"', ("id",), "region = 'eu'"
        )
        assert len(rebuilt["public.Orders"]) == 1000
        assert normalized(rebuilt["public.other"]) == source_rows(dsn, "public.other", ("id",))
