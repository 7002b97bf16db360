"""Initial snapshots end to end on the real stack: ``pgbridge run`` on a database that already has
rows (a table split into several key chunks, one without a key, one split into block ranges,
a partitioned one, TOASTed text, several types) while a writer inserts, updates, changes keys,
deletes and truncates; an independent consumer rebuilds every table from the topics and equals
the source. Then the same with SIGKILL during the snapshot and a restart that resumes it.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.snapshot.state import load_state
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import (
    BridgeProcess,
    bridge_settings,
    mark,
    normalized,
    postgres,
    read_topic,
    rebuild_tables,
    scratch_database,
    source_rows,
    table_differences,
    wait_for,
    wait_slot_confirmed,
)
from tests.integration.test_delta_e2e import apply_config, assert_delta_equals_source

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE big (id bigint PRIMARY KEY, v text, n numeric(12,2), at timestamptz, j jsonb,
                  flag boolean);
CREATE TABLE aaa_nokey (a int, b text);
ALTER TABLE aaa_nokey REPLICA IDENTITY FULL;   -- no key: a multiset downstream
CREATE TABLE blocks (id int, msg text);        -- keyed by message.key.columns, no unique index
ALTER TABLE blocks REPLICA IDENTITY FULL;
CREATE TABLE parted (id int, region text, v text, PRIMARY KEY (id, region))
    PARTITION BY LIST (region);
CREATE TABLE parted_eu PARTITION OF parted FOR VALUES IN ('eu');
CREATE TABLE parted_us PARTITION OF parted FOR VALUES IN ('us');
CREATE TABLE docs (id int PRIMARY KEY, title text, body text);
CREATE TABLE zoo (id int PRIMARY KEY, t text, b bytea, f8 float8, f4 real, num numeric,
                  d date, tm time, iv interval, ts timestamp, tz timestamptz, u uuid, ip inet,
                  arr int[], tarr text[], js json, jb jsonb, m mood, i2 smallint, bits bit(4),
                  ch char(3), vc varchar(10));
"""

KEYS: dict[str, tuple[str, ...]] = {
    "public.big": ("id",),
    "public.aaa_nokey": (),
    "public.blocks": ("id",),
    "public.parted": ("id", "region"),
    "public.docs": ("id",),
}

ZOO_VALUES = (
    "E'back\\\\slash\\nnew line\\ttab ü 𝄞 \"q\"', '\\x00ff5c0a'::bytea, 'Infinity', '-0', "
    "'NaN', '2024-02-29', '23:59:59.999999', '1 year 2 mons 3 days 04:05:06.5', "
    "'2024-01-01 12:00:00.123456', '2024-01-01 12:00:00+05:30', "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '192.168.0.1/24', '{1,NULL,3}', "
    '\'{"a b",NULL,"c,d","\\\\\\\\"}\', \'{"k": [1, 2.50]}\', \'{"k": [1, 2.50]}\', \'happy\', '
    "-32768, B'1010', 'ab', 'x''y'"
)


def populate(dsn: str, big_rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(
            "INSERT INTO big SELECT i, 'value ' || i, i / 7.0, "
            "'2024-01-01 00:00:00+00'::timestamptz + i * interval '1 minute', "
            "jsonb_build_object('i', i), i %% 2 = 0 FROM generate_series(1, %s) i",
            (big_rows,),
        )
        conn.execute("INSERT INTO aaa_nokey SELECT i % 7, 'dup' FROM generate_series(1, 300) i")
        conn.execute(
            "INSERT INTO blocks SELECT i, repeat('m', 200) FROM generate_series(1, 12000) i"
        )
        conn.execute(
            "INSERT INTO parted SELECT i, CASE WHEN i % 2 = 0 THEN 'eu' ELSE 'us' END, 'p' || i "
            "FROM generate_series(1, 2000) i"
        )
        conn.execute(
            # Random hex does not compress: the body is TOASTed out of line.
            "INSERT INTO docs SELECT i, 'doc ' || i, "
            "(SELECT string_agg(md5(random()::text || j), '') FROM generate_series(1, 2000) j) "
            "FROM generate_series(1, 20) i"
        )
        conn.execute(f"INSERT INTO zoo VALUES (1, {ZOO_VALUES})")
        conn.execute("VACUUM ANALYZE")  # relpages and reltuples for the chunk plans


def writer(dsn: str, rounds: int, pause: float, offset: int = 0) -> None:
    """Inserts, updates, key changes, deletes on every table while the snapshot runs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for r in range(rounds):
            base = 1_000_000 + offset + r * 100
            conn.execute(
                "INSERT INTO big SELECT i, 'new ' || i, 1.5, now(), '{}', true "
                "FROM generate_series(%s, %s) i",
                (base, base + 9),
            )
            conn.execute("UPDATE big SET v = 'updated' || %s WHERE id %% 997 = %s", (r, r))
            conn.execute(  # a key change, near the start and the end of the key space
                "UPDATE big SET id = id + 5000000 WHERE id IN (%s, %s)", (r * 13 + 1, 40_000 - r)
            )
            conn.execute("DELETE FROM big WHERE id IN (%s, %s)", (r * 17 + 2, 20_000 + r))
            conn.execute("UPDATE blocks SET msg = 'moved ' || %s WHERE id %% 301 = %s", (r, r))
            conn.execute("DELETE FROM blocks WHERE id = %s", (r * 7 + 3,))
            conn.execute("INSERT INTO blocks VALUES (%s, 'late')", (100_000 + offset + r,))
            conn.execute("UPDATE parted SET region = 'eu' WHERE id = %s", (r * 2 + 1,))
            conn.execute("UPDATE docs SET title = 'retitled ' || %s WHERE id = %s", (r, r % 20))
            conn.execute("INSERT INTO aaa_nokey VALUES (%s, 'late')", (r,))
            time.sleep(pause)


def assert_tables_equal(stack: StackInfo, dsn: str, prefix: str) -> dict[str, Any]:
    rebuilt = rebuild_tables(stack.bootstrap_servers, stack.registry_url, prefix)
    for table, key in KEYS.items():
        expected = source_rows(dsn, table, key)
        got = normalized(rebuilt.get(table, {}))
        for row in got.values():
            if isinstance(row.get("j"), str):
                row["j"] = json.loads(row["j"])
        assert got == expected, f"{table}: {table_differences(got, expected)}"
    return rebuilt


def settings_for(stack: StackInfo, dsn: str, prefix: str, state_dir: Path) -> dict[str, str]:
    return bridge_settings(
        stack,
        dsn,
        prefix,
        **{
            "state.dir": str(state_dir),
            "snapshot.chunk.size": "4000",
            "snapshot.max.threads": "2",
            "snapshot.progress.interval.ms": "100",  # the copy takes well under a second
            "message.key.columns": "public.blocks:id",
        },
    )


def truncate_nokey(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE aaa_nokey")
        conn.execute("INSERT INTO aaa_nokey VALUES (1, 'after truncate'), (1, NULL)")


def snapshot_locked(dsn: str, table: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE a.application_name = 'pgbridge-snapshot-0' AND l.granted "
            "AND l.relation = %s::regclass",
            (table,),
        ).fetchone()
    return bool(row and row[0])


# The stack's version runs in make test with PGBRIDGE_NATIVE=0 (the pure-Python slice), and
# in make test-long on the C path too; 13 runs on the C path in make test (the suite's time).
@pytest.mark.parametrize(
    "version",
    [pytest.param("stack", marks=[pytest.mark.pure_python_slice, pytest.mark.long]), "13"],
)
def test_snapshot_existing_rows_with_concurrent_writes_rebuild_equals_source(
    local_stack: StackInfo, tmp_path: Path, version: str, request: pytest.FixtureRequest
) -> None:
    prefix = f"snap{uuid.uuid4().hex[:8]}"
    with postgres(local_stack, version) as server, scratch_database(server) as dsn:
        # 13 chunks of 4,000 rows (the plan's test wants ten or more) and a copy of well over
        # one progress interval; 150,000 rows proved nothing more and cost a minute.
        populate(dsn, big_rows=50_000)
        settings = settings_for(server, dsn, prefix, tmp_path)
        state_file = tmp_path / f"snapshot-{settings['slot.name']}.json"
        process = BridgeProcess(settings, str(tmp_path / "bridge.log"))
        try:
            wait_for(state_file.exists, process, "the snapshot's state file")
            # A rewrite between the snapshot and its locks is a typed error (the snapshot
            # would see the table empty): truncate once the snapshot holds its locks.
            wait_for(lambda: snapshot_locked(dsn, "aaa_nokey"), process, "the snapshot's locks")
            write = threading.Thread(target=writer, args=(dsn, 30, 0.02))
            write.start()
            # Queued behind the snapshot's locks a second into the copy, it runs when the
            # snapshot ends (and holds back the writer's inserts into that table till then):
            # the truncate and the rows after it are streamed.
            truncate = threading.Timer(1.0, truncate_nokey, args=(dsn,))
            truncate.start()
            write.join(300)
            truncate.join(300)
            with psycopg.connect(dsn, autocommit=True) as conn:  # copied row vs streamed row
                conn.execute(f"INSERT INTO zoo VALUES (2, {ZOO_VALUES})")
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            assert process.terminate() == 0, process.log()[-3000:]
        finally:
            if process.proc.poll() is None:
                process.kill()
        log = process.log()
        assert "snapshot complete at" in log
        assert "snapshot public.big:" in log  # progress lines
        state = load_state(state_file)
        assert state is not None and state.status == "done"
        big = state.table("public.big")
        assert big is not None and big.plan.method == "key" and len(big.plan.chunks) >= 10
        blocks = state.table("public.blocks")
        assert blocks is not None
        with psycopg.connect(dsn) as conn:
            tid_range_scans = conn.info.server_version >= 140000
        if tid_range_scans:
            assert blocks.plan.method == "ctid" and len(blocks.plan.chunks) > 1
        else:
            assert blocks.plan.method == "whole"
        assert_tables_equal(local_stack, dsn, prefix)

        def read(table: str) -> list[tuple[Any, Any]]:
            return read_topic(
                local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.{table}"
            )

        # Every r record precedes every streamed change in (commit_lsn, seq) order.
        tables = [t.split(".")[1] for t in KEYS] + ["zoo"]
        records = [v for t in tables for _, v in read(t) if v is not None]
        snapshot = [v for v in records if v["op"] == "r"]
        markers = [v["source"]["snapshot"] for v in snapshot]
        assert markers.count("first") == 1 and markers.count("last") == 1
        assert set(markers) == {"first", "true", "last"}
        point = {v["source"]["commit_lsn"] for v in snapshot}
        assert len(point) == 1
        streamed = [v for v in records if v["op"] != "r"]
        assert streamed and min(v["source"]["commit_lsn"] for v in streamed) > point.pop()
        assert all(v["source"]["snapshot"] == "false" for v in streamed)
        # The same values copied (COPY binary) and streamed (pgoutput text) read the same.
        zoo = {v["after"]["id"]: v for _, v in read("zoo") if v is not None}
        assert zoo[1]["op"] == "r" and zoo[2]["op"] == "c"
        assert {**zoo[1]["after"], "id": 0} == {**zoo[2]["after"], "id": 0}
        if version == "stack" and os.environ.get("PGBRIDGE_NATIVE") != "0":
            # The Spark apply job applies the r events as upserts, then the streamed changes:
            # its Delta tables equal the source too (once: Spark is slow to start; and not
            # again on the pure-Python slice: the topics' bytes are the same, checked above).
            spark = request.getfixturevalue("spark")
            config = apply_config(local_stack, prefix, tmp_path / "apply")
            run_apply(config, spark=spark)
            assert_delta_equals_source(spark, config, dsn, KEYS)


# make test: a snapshot stopped by SIGTERM resumes (test_snapshot_modes.py), an incremental one
# resumes after SIGKILL (test_incremental_snapshot.py), streaming after kill -9 (test_pipeline_e2e).
@pytest.mark.long
def test_snapshot_sigkill_during_copy_resumes_and_still_equals_source(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """Killed twice (each time with part of public.big copied), restarted each time: the
    snapshot resumes where it was, and the rebuild still equals the source."""
    prefix = f"snapk{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        populate(dsn, big_rows=400_000)  # 20 chunks of a few hundred ms each: room to kill
        settings = settings_for(local_stack, dsn, prefix, tmp_path)
        settings["snapshot.chunk.size"] = "20000"
        state_file = tmp_path / f"snapshot-{settings['slot.name']}.json"
        log = str(tmp_path / "bridge.log")

        def big_done() -> set[int] | None:
            """public.big's done chunks while the snapshot is under way."""
            try:
                state = load_state(state_file)
            except Exception:  # only while the file is first written
                return None
            if state is None or state.status == "done":
                return None
            nokey, big = state.table("public.aaa_nokey"), state.table("public.big")
            return set(big.done) if nokey and nokey.complete and big else None

        processes = [BridgeProcess(settings, log)]
        write = threading.Thread(target=writer, args=(dsn, 60, 0.05))
        done_at_kills: list[set[int]] = []
        try:
            wait_for(state_file.exists, processes[0], "the snapshot's state file")
            write.start()
            for kill in range(2):
                before = done_at_kills[-1] if done_at_kills else set()

                def progressed(before: set[int] = before) -> bool:
                    done = big_done()
                    return done is not None and len(before) + 2 <= len(done) < 18

                wait_for(progressed, processes[-1], f"more chunks of public.big (kill {kill})")
                processes[-1].kill()
                state = load_state(state_file)
                assert state is not None and state.status == "copying"
                done_at_kills.append(set(state.table("public.big").done))  # type: ignore[union-attr]
                processes.append(BridgeProcess(settings, log))
            write.join(300)
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), processes[-1])
            assert processes[-1].terminate() == 0, processes[-1].log()[-3000:]
        finally:
            for process in processes:
                if process.proc.poll() is None:
                    process.kill()
            write.join(300)
        text = processes[0].log()
        assert text.count("resumed snapshot of slot") == 2, text[-4000:]
        assert "was not completely copied" not in text  # the keyless table was done first
        state = load_state(state_file)
        assert state is not None and state.status == "done" and state.run == 2
        big = state.table("public.big")
        assert big is not None
        assert done_at_kills[0] < done_at_kills[1] < big.done  # resumed, never restarted
        assert_tables_equal(local_stack, dsn, prefix)
