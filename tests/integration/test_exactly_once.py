"""Exactly once into Kafka (#36, ``exactly.once.support = required``, and the default
``requested`` on a broker that refuses transactions), on the real stack.

A steady writer (small transactions on one table) runs while ``pgbridge run`` is killed with
SIGKILL three times and restarted; a read_committed consumer of the topic then sees every
change exactly once: no (commit_lsn, seq) twice, none missing, and the rebuilt table equals
the source. The same run at-least-once prints its duplicates (make test-long). A second producer
with the slot's transactional.id fences the first, which stops with a typed error.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.devstack.kafka import SHORT_LIVED_JVM_OPTIONS
from bridge.devstack.kafka_cluster import KafkaCluster
from bridge.devstack.stack import StackInfo
from bridge.runner import build_parts, start_exactly_once
from bridge.sink.transactions import ProducerFencedError
from tests.integration.bridge_harness import (
    BridgeProcess,
    RunningBridge,
    bridge_config,
    bridge_settings,
    free_port,
    mark,
    read_topic,
    scrape_metrics,
    scratch_database,
    wait_slot_confirmed,
    wait_streaming,
)

pytestmark = pytest.mark.integration

ROWS = 3_000


def _writer(dsn: str, done: threading.Event) -> None:
    """Inserts and updates in transactions of 1-5 rows, for about six seconds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(0, ROWS, 5):
            with conn.transaction():
                conn.execute(
                    "INSERT INTO events SELECT g, 'v' || g "
                    "FROM generate_series(%s::int, %s::int) g",
                    (i + 1, i + 5),
                )
                if i % 50 == 0:
                    conn.execute("UPDATE events SET v = 'updated' WHERE id = %s", (i + 1,))
            time.sleep(0.01)
    done.set()


def _kill_cycle(local_stack: StackInfo, tmp_path: Path, exactly_once: bool) -> tuple[int, int]:
    """(changes a read_committed consumer sees, how many of them are repeats) after three
    SIGKILLs of the bridge under a steady writer."""
    prefix = f"eos{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE events (id int PRIMARY KEY, v text)")
        settings = bridge_settings(
            local_stack,
            dsn,
            prefix,
            **{"exactly.once.support": "required" if exactly_once else "disabled"},
        )
        slot = settings["slot.name"]
        log = str(tmp_path / f"bridge-{exactly_once}.log")
        process = BridgeProcess(settings, log)
        wait_streaming(dsn, slot, process)
        done = threading.Event()
        writer = threading.Thread(target=_writer, args=(dsn, done))
        writer.start()
        for _ in range(3):
            time.sleep(1.2)  # mid-stream: transactions committed, others in flight
            process.kill()
            process = BridgeProcess(settings, log)
        writer.join(120)
        assert done.is_set()
        wait_slot_confirmed(dsn, slot, mark(dsn), process)
        assert process.terminate() == 0, process.log()[-3000:]
        with psycopg.connect(dsn) as conn:
            source: dict[Any, Any] = dict(conn.execute("SELECT id, v FROM events").fetchall())
    records = read_topic(
        local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.events"
    )
    changes = [v for _, v in records if v is not None]
    positions = Counter((v["source"]["commit_lsn"], v["source"]["seq"]) for v in changes)
    rebuilt: dict[int, Any] = {}
    for value in sorted(changes, key=lambda v: (v["source"]["commit_lsn"], v["source"]["seq"])):
        after = value["after"]
        rebuilt[after["id"]] = after["v"]
    assert rebuilt == source  # nothing lost, in either mode
    expected = ROWS + ROWS // 50  # the inserts and the updates
    assert len(positions) == expected, _extra_positions(changes, len(positions), expected)
    return len(changes), len(changes) - len(positions)


def _extra_positions(changes: list[dict[str, Any]], seen: int, expected: int) -> str:
    """What a failure needs to be understood: rows whose changes came at more than the writer's
    positions, with where and how each came."""
    by_row: dict[Any, list[dict[str, Any]]] = {}
    for value in changes:
        by_row.setdefault(value["after"]["id"], []).append(value)
    ops = Counter(v["op"] for v in changes)
    odd = [(k, vs) for k, vs in sorted(by_row.items()) if len(vs) > (2 if k % 50 == 1 else 1)]
    lines = [f"{seen} distinct positions, {expected} changes made; ops {dict(ops)}"]
    for key, values in odd[:8]:
        lines.append(f"id {key}:")
        for v in values:
            source = v["source"]
            lines.append(
                f"  op {v['op']} commit_lsn {source['commit_lsn']} seq {source['seq']} "
                f"lsn {source['lsn']} txId {source['txId']} snapshot {source['snapshot']}"
            )
    return "\n".join(lines)


# make test: the short fault cycle on 3 brokers (test_fault_cycle.py) kills an exactly-once
# bridge twice under a writer; here three kills, positions and the rebuilt table checked.
@pytest.mark.long
def test_a_read_committed_consumer_sees_each_change_once_through_sigkills(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    seen, repeated = _kill_cycle(local_stack, tmp_path, exactly_once=True)
    print(f"exactly once: {seen} changes seen, {repeated} repeated")
    assert repeated == 0


@pytest.mark.long
def test_the_same_cycle_at_least_once_repeats_changes(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """What exactly once saves consumers from (printed beside; make test-long)."""
    seen, repeated = _kill_cycle(local_stack, tmp_path, exactly_once=False)
    print(f"at least once: {seen} changes seen, {repeated} repeated")


def test_a_newer_producer_on_the_slot_fences_the_running_bridge(local_stack: StackInfo) -> None:
    prefix = f"fence{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE events (id int PRIMARY KEY, v text)")
        config = bridge_config(local_stack, dsn, prefix, **{"exactly.once.support": "required"})
        bridge = RunningBridge(config)
        bridge.wait_confirmed(mark(dsn))
        # A second instance of the slot's producer (a bridge that took over while this one
        # lost its connection, say): starting it fences this one.
        newer = build_parts(config, transactional=True).publisher
        start_exactly_once(config, newer)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO events VALUES (1, 'after the takeover')")
        with pytest.raises(ProducerFencedError, match="another pgbridge instance took over"):
            bridge.wait_confirmed(mark(dsn), timeout=60)
        with pytest.raises(ProducerFencedError):
            bridge.stop()
        newer.abandon(5)


def test_by_default_a_cluster_refusing_transactions_gets_at_least_once_and_says_why(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """``exactly.once.support`` left at its default (requested) on a broker that refuses the
    bridge's transactions (its transaction.max.timeout.ms below the bridge's timeout: Kafka
    answers INVALID_TRANSACTION_TIMEOUT): the bridge warns, says why, and streams at least
    once, delivering everything. On the stack's own broker (which allows them) every other
    test runs the default exactly once."""
    kafka = KafkaCluster(
        tmp_path / "kafka",
        brokers=1,
        jvm_options=SHORT_LIVED_JVM_OPTIONS,
        settings=["transaction.max.timeout.ms=60000"],
    )
    kafka.start()  # fails, never skips, when it cannot start
    prefix = f"refused{uuid.uuid4().hex[:8]}"
    try:
        with scratch_database(local_stack) as dsn:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE events (id int PRIMARY KEY, v text)")
            port = free_port()
            settings = bridge_settings(
                local_stack,
                dsn,
                prefix,
                **{
                    "kafka.bootstrap.servers": kafka.bootstrap_servers,
                    "metrics.port": str(port),
                    "metrics.host": "127.0.0.1",
                },
            )
            assert "exactly.once.support" not in settings  # the default
            process = BridgeProcess(settings, str(tmp_path / "bridge.log"))
            wait_streaming(dsn, settings["slot.name"], process)
            assert "pgbridge_exactly_once 0.0" in scrape_metrics(port, "pgbridge_exactly_once")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO events SELECT g, 'v' FROM generate_series(1, 100) g")
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            assert process.terminate() == 0, process.log()[-3000:]
            log = process.log()
            assert "exactly once requested, but the brokers' transaction.max.timeout.ms" in log
            assert "this run delivers at least once" in log
        records = read_topic(
            kafka.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.events"
        )
        assert sorted(v["after"]["id"] for _, v in records if v is not None) == list(range(1, 101))
    finally:
        kafka.stop()
