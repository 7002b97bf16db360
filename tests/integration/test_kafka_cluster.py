"""Exactly once on a 3-broker Kafka cluster (#36): replication factor 3,
``min.insync.replicas = 2``, and the leader of the hot partition killed (SIGKILL) under a
steady writer, then started again. A read_committed consumer sees every change once.

In ``make test-long`` (a 3-node cluster beside the stack costs a minute;
``tests/integration/test_exactly_once.py`` checks the guarantee through bridge crashes in
``make test``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.devstack.kafka import SHORT_LIVED_JVM_OPTIONS
from bridge.devstack.kafka_cluster import KafkaCluster
from bridge.devstack.stack import StackInfo
from tests.integration.bridge_harness import (
    BridgeProcess,
    bridge_settings,
    mark,
    read_topic,
    scratch_database,
    wait_slot_confirmed,
    wait_streaming,
)
from tests.integration.test_exactly_once import ROWS, _writer

pytestmark = [pytest.mark.integration, pytest.mark.long]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(tmp_path / "cluster", brokers=3, jvm_options=SHORT_LIVED_JVM_OPTIONS)
    kafka.start()  # fails, never skips, when it cannot start
    try:
        yield kafka
    finally:
        kafka.stop()


def test_leader_killed_under_a_writer_repeats_and_loses_nothing(
    local_stack: StackInfo, cluster: KafkaCluster, tmp_path: Path
) -> None:
    prefix = f"leader{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.public.events"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE events (id int PRIMARY KEY, v text)")
        settings = bridge_settings(local_stack, dsn, prefix, **{"exactly.once.support": "required"})
        settings["kafka.bootstrap.servers"] = cluster.bootstrap_servers
        slot = settings["slot.name"]
        process = BridgeProcess(settings, str(tmp_path / "bridge.log"))
        wait_streaming(dsn, slot, process)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO events VALUES (0, 'first')")  # the topic exists now
        wait_slot_confirmed(dsn, slot, mark(dsn), process)
        done = threading.Event()
        writer = threading.Thread(target=_writer, args=(dsn, done))
        writer.start()
        time.sleep(1.5)
        leader = cluster.broker(cluster.leader_of(topic))
        assert leader.pid is not None
        os.kill(leader.pid, signal.SIGKILL)
        time.sleep(3)
        leader.launch()  # back, catching up as a follower
        writer.join(180)
        assert done.is_set()
        wait_slot_confirmed(dsn, slot, mark(dsn), process, timeout=180)
        assert process.terminate() == 0, process.log()[-3000:]
        with psycopg.connect(dsn) as conn:
            source: dict[Any, Any] = dict(conn.execute("SELECT id, v FROM events").fetchall())
    records = read_topic(cluster.bootstrap_servers, local_stack.registry_url, topic)
    changes = [v for _, v in records if v is not None]
    positions = Counter((v["source"]["commit_lsn"], v["source"]["seq"]) for v in changes)
    assert len(changes) == len(positions), "a change was seen twice"
    assert len(positions) == 1 + ROWS + ROWS // 50
    rebuilt = {}
    for value in sorted(changes, key=lambda v: (v["source"]["commit_lsn"], v["source"]["seq"])):
        rebuilt[value["after"]["id"]] = value["after"]["v"]
    assert rebuilt == source
