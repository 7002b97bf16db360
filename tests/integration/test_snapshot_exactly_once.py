"""Snapshots exactly once (#36, ``exactly.once.support = required``), on the real stack.

A snapshot of 60 chunks is killed with SIGKILL twice mid-copy (chunks committed, others in
flight) and resumed; before the first resume the state file is also set back to no chunk done,
as if each crash had come between a chunk's Kafka commit and the file's write. A read_committed
consumer then sees each row exactly once: the chunks cut short were aborted, the committed
ones were found in Kafka's progress records and not copied again. At least once, the same
kills repeat rows (tests/integration/test_snapshot_modes.py covers that mode's resume).

The same for an incremental snapshot: killed mid-copy, its state file set back to an earlier
version (a crash between Kafka's commits and the file's writes), resumed: each row once.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.snapshot.incremental_state import load_incremental
from bridge.snapshot.state import load_state
from tests.integration.bridge_harness import (
    BridgeProcess,
    bridge_settings,
    mark,
    read_topic,
    scratch_database,
    wait_for,
    wait_slot_confirmed,
)
from tests.integration.test_incremental_snapshot import cli

pytestmark = pytest.mark.integration

ROWS = 120_000
CHUNK = 2_000  # 60 chunks, each a Kafka transaction: room to kill between them


def test_a_snapshot_killed_mid_copy_gives_a_read_committed_reader_each_row_once(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    prefix = f"snapeos{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE big (id int PRIMARY KEY, v text)")
            conn.execute(
                "INSERT INTO big SELECT g, repeat('x', 40) || g FROM generate_series(1, %s) g",
                (ROWS,),
            )
        settings = bridge_settings(
            local_stack,
            dsn,
            prefix,
            **{
                "exactly.once.support": "required",
                "state.dir": str(tmp_path),
                "snapshot.chunk.size": str(CHUNK),
                "snapshot.max.threads": "2",
            },
        )
        state_file = tmp_path / f"snapshot-{settings['slot.name']}.json"
        log = str(tmp_path / "bridge.log")

        def done_chunks() -> set[int] | None:
            try:
                state = load_state(state_file)
            except Exception:  # only while the file is first written
                return None
            table = state.table("public.big") if state is not None else None
            if state is None or state.status == "done" or table is None:
                return None
            return set(table.done)

        processes = [BridgeProcess(settings, log)]
        committed_before_kill: list[int] = []
        try:
            for kill in range(2):
                floor = committed_before_kill[-1] + 2 if committed_before_kill else 3

                def progressed(floor: int = floor) -> bool:
                    done = done_chunks()
                    return done is not None and floor <= len(done) < ROWS // CHUNK - 10

                wait_for(progressed, processes[-1], f"committed chunks (kill {kill})")
                processes[-1].kill()
                done = done_chunks()
                assert done is not None
                committed_before_kill.append(len(done))
                if kill == 0:
                    # The file as if written before any of those commits: Kafka must say.
                    raw = json.loads(state_file.read_text())
                    raw["tables"][0]["done"] = []
                    state_file.write_text(json.dumps(raw))
                processes.append(BridgeProcess(settings, log))
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), processes[-1])
            assert processes[-1].terminate() == 0, processes[-1].log()[-3000:]
        finally:
            for process in processes:
                if process.proc.poll() is None:
                    process.kill()
        text = processes[0].log()
        assert text.count("resumed snapshot of slot") == 2, text[-4000:]
        assert "committed in Kafka after the state file was last written" in text
        state = load_state(state_file)
        assert state is not None and state.status == "done"
    records = [
        value
        for _, value in read_topic(
            local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.big"
        )
        if value is not None
    ]
    seen = Counter(value["after"]["id"] for value in records)
    repeated = sum(n - 1 for n in seen.values())
    print(f"snapshot exactly once: {len(records)} rows read, {repeated} repeated")
    assert repeated == 0
    assert set(seen) == set(range(1, ROWS + 1))  # nothing lost
    assert all(value["op"] == "r" for value in records)
    markers = Counter(value["source"]["snapshot"] for value in records)
    assert markers["last"] == 1 and markers["first"] <= 1, markers


def _r_rows_seen_once(stack: StackInfo, topic: str, rows: int) -> None:
    records = [value for _, value in read_topic(stack.bootstrap_servers, stack.registry_url, topic)]
    seen = Counter(v["after"]["id"] for v in records if v is not None and v["op"] == "r")
    repeated = sum(n - 1 for n in seen.values())
    print(f"{topic}: {sum(seen.values())} snapshot rows read, {repeated} repeated")
    assert repeated == 0
    assert set(seen) == set(range(1, rows + 1))  # nothing lost


def test_an_incremental_snapshot_killed_mid_copy_gives_each_row_once(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    rows = 30_000
    prefix = f"increos{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
            conn.execute(
                "CREATE TABLE dbz_signal (id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, "
                "data varchar(8192))"
            )
            conn.execute(
                "INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, %s) g", (rows,)
            )
        settings = bridge_settings(
            local_stack,
            dsn,
            prefix,
            **{
                "exactly.once.support": "required",
                "state.dir": str(tmp_path),
                "snapshot.mode": "no_data",
                "signal.data.collection": "public.dbz_signal",
                "incremental.snapshot.chunk.size": "300",  # 100 chunks
            },
        )
        state_file = tmp_path / f"incremental-{settings['slot.name']}.json"

        def chunks() -> int:
            try:
                state = load_incremental(state_file)
            except Exception:  # only while the file is first written
                return 0
            return state.tables[0].chunks if state is not None and state.tables else 0

        log = str(tmp_path / "bridge.log")
        processes = [BridgeProcess(settings, log)]
        try:
            wait_for(lambda: "to topics" in processes[0].log(), processes[0], "streaming")
            cli(settings, "public.items")
            wait_for(lambda: chunks() >= 10, processes[0], "ten chunks recorded")
            earlier = state_file.read_text()
            at_copy = chunks()
            wait_for(lambda: chunks() >= at_copy + 5, processes[0], "five more chunks")
            processes[0].kill()
            state_file.write_text(earlier)  # the file as if the last writes never happened
            processes.append(BridgeProcess(settings, log))

            def done() -> bool:
                state = load_incremental(state_file)
                return state is not None and state.tables[0].status == "done"

            wait_for(done, processes[-1], "the resumed snapshot", timeout=300)
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), processes[-1])
            assert processes[-1].terminate() == 0, processes[-1].log()[-3000:]
        finally:
            for process in processes:
                if process.proc.poll() is None:
                    process.kill()
        assert "Kafka's offsets topic holds a later version" in processes[0].log()
    _r_rows_seen_once(local_stack, f"{prefix}.public.items", rows)
