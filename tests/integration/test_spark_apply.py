"""The apply job on the real stack: change topics in Kafka -> Spark -> Delta tables.

Records are produced through the real Apicurio registry (AvroSerializer, Confluent framing) in
the wire contract's shape, under two schema versions of one table, with deletes + tombstones,
a key change, a truncate, unchanged-TOAST markers and poison records; the job runs as a real
Structured Streaming query (or its foreachBatch function directly, to replay a batch).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bridge.devstack.stack import StackInfo
from bridge.spark import transforms as tf
from bridge.spark.applier import DRIVER_WRITERS, BatchApplier
from bridge.spark.config import ApplyConfig
from bridge.spark.driver_dv_merge import DV_WRITER
from bridge.spark.graceful_stop import GracefulStop
from bridge.spark.job import start_apply
from bridge.spark.merge import KEY_COLUMNS_PROPERTY
from tests.integration.test_delta_e2e import apply_config
from tests.spark.envelopes import RegistryProducer, TableVersion, create_topics

pytestmark = pytest.mark.integration

DECIMAL: dict[str, Any] = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
CUSTOMER_V1: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "amount", "type": ["null", DECIMAL], "default": None},
    {"name": "born", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
    {
        "name": "updated_at",
        "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
        "default": None,
    },
    {"name": "doc", "type": ["null", "string"], "default": None},
]
CUSTOMER_V2: list[dict[str, Any]] = [
    *CUSTOMER_V1,
    {"name": "email", "type": ["null", "string"], "default": None},
    {
        "name": "ext_id",
        "type": ["null", {"type": "string", "logicalType": "uuid"}],
        "default": None,
    },
]
ORDERS: list[dict[str, Any]] = [
    {"name": "order_id", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
]
UPDATED_AT = dt.datetime(2026, 1, 1, 10, 0, 0, 123456, tzinfo=dt.UTC)
BIG_DOC = "toasted " * 1000
EXT_ID = "6b1f7a36-9d8e-4a55-8f0a-0c1d2e3f4a5b"


class Scenario:
    """Two phases of changes to public.customers (v1, then v1+v2 mixed) and public.orders."""

    def __init__(self, stack: StackInfo) -> None:
        self.prefix = f"it{uuid.uuid4().hex[:8]}"
        self.c1 = TableVersion(self.prefix, "public", "customers", CUSTOMER_V1, ["id"])
        self.c2 = TableVersion(self.prefix, "public", "customers", CUSTOMER_V2, ["id"])
        self.orders = TableVersion(self.prefix, "public", "orders", ORDERS, ["order_id"])
        # A table without a replica-identity key: the producer sends its changes with null keys.
        self.keyless = TableVersion(self.prefix, "public", "events", ORDERS, [])
        create_topics(
            stack.bootstrap_servers, [self.c1.topic, self.orders.topic, self.keyless.topic]
        )
        self.producer = RegistryProducer(stack.bootstrap_servers, stack.registry_url)

    def customer(self, id_: int, name: str | None = None, **extra: Any) -> dict[str, Any]:
        row: dict[str, Any] = {"id": id_, "name": name, "amount": None, "born": None}
        row.update({"updated_at": None, "doc": None, **extra})
        return row

    def phase1(self) -> None:
        p, c1, o = self.producer, self.c1, self.orders
        ann = self.customer(
            1,
            "ann",
            amount=Decimal("12.34"),
            born=dt.date(1990, 1, 2),
            updated_at=UPDATED_AT,
            doc=BIG_DOC,
        )
        p.change(c1, c1.envelope("c", 100, 0, after=ann), {"id": 1})
        p.change(c1, c1.envelope("c", 100, 1, after=self.customer(2, "bob")), {"id": 2})
        p.change(c1, c1.envelope("c", 100, 2, after=self.customer(3, "cy")), {"id": 3})
        p.change(o, o.envelope("r", 90, 0, after={"order_id": 1, "note": "one"}), {"order_id": 1})
        p.change(o, o.envelope("r", 90, 1, after={"order_id": 2, "note": "two"}), {"order_id": 2})
        p.flush()

    def phase2(self) -> None:
        p, c1, c2, o = self.producer, self.c1, self.c2, self.orders
        ann = self.customer(
            1, "ann2", amount=Decimal("12.34"), born=dt.date(1990, 1, 2), updated_at=UPDATED_AT
        )
        p.change(c1, c1.envelope("u", 200, 0, after=ann, unchanged=["doc"]), {"id": 1})
        p.change(c1, c1.envelope("d", 300, 0, before=self.customer(2)), {"id": 2})
        p.change(c1, None, {"id": 2})  # tombstone
        # The key of customer 3 changes to 30: delete + tombstone + create, in one transaction.
        p.change(c1, c1.envelope("d", 400, 0, before=self.customer(3)), {"id": 3})
        p.change(c1, None, {"id": 3})
        p.change(c1, c1.envelope("c", 400, 1, after=self.customer(30, "cy")), {"id": 30})
        # Schema v2 (email, ext_id) from here on, in the same batch as the v1 records.
        dee = self.customer(4, "dee", email="d@x", ext_id=EXT_ID)
        p.change(c2, c2.envelope("c", 500, 0, after=dee), {"id": 4})
        ann3 = {**ann, "name": "ann3", "email": "a@x", "ext_id": None}
        p.change(c2, c2.envelope("u", 600, 0, after=ann3, unchanged=["doc"]), {"id": 1})
        # Orders: truncate (null key), then a new row in a later transaction.
        p.change(o, o.envelope("t", 700, 0), None)
        p.change(
            o, o.envelope("c", 800, 0, after={"order_id": 3, "note": "three"}), {"order_id": 3}
        )
        # Poison: bad magic byte, unknown schema id, truncated payload under a real schema id.
        good = p.serialize(c2, c2.envelope("c", 900, 0, after=self.customer(5, "eve")), False)
        p.raw(c1.topic, None, b"\x01" + good[1:])
        p.raw(c1.topic, None, b"\x00" + struct.pack(">I", 987_654_321) + good[5:])
        p.raw(c1.topic, None, good[:8])
        k = self.keyless
        p.change(k, k.envelope("c", 950, 0, after={"order_id": 1, "note": "no key"}), None)
        p.flush()
        self.v2_schema_id = struct.unpack(">I", good[1:5])[0]

    def expected_customers(self) -> list[dict[str, Any]]:
        base = {
            "amount": None,
            "born": None,
            "updated_at": None,
            "doc": None,
            "email": None,
            "ext_id": None,
        }
        return [
            {
                **base,
                "id": 1,
                "name": "ann3",
                "amount": Decimal("12.34"),
                "born": dt.date(1990, 1, 2),
                "updated_at": UPDATED_AT.replace(tzinfo=None),  # session time zone is UTC
                "doc": BIG_DOC,  # unchanged TOAST: kept from the row applied in phase 1
                "email": "a@x",
            },
            {**base, "id": 4, "name": "dee", "email": "d@x", "ext_id": EXT_ID},
            {**base, "id": 30, "name": "cy"},
        ]

    def config(self, tmp: Path, **overrides: Any) -> ApplyConfig:
        settings: dict[str, Any] = {
            "topic_prefix": self.prefix,
            "bootstrap_servers": self.producer.bootstrap,
            "registry_url": self.producer.registry_url,
            "delta_base": str(tmp / "delta"),
            "checkpoint_location": str(tmp / "checkpoint"),
            "dead_letter_location": str(tmp / "dead"),
            "available_now": True,
        }
        settings.update(overrides)
        return ApplyConfig(**settings)


def _run(spark: Any, config: ApplyConfig, applier: BatchApplier | None = None) -> None:
    query = start_apply(spark, config, applier)
    try:
        finished = query.awaitTermination(300)
    finally:
        query.stop()
    assert finished, "the available-now query did not finish in 300 s"
    assert query.exception() is None


def _rows(spark: Any, path: str, key: str) -> list[dict[str, Any]]:
    df = spark.read.format("delta").load(path)
    data = [c for c in df.columns if not c.startswith("_pgbridge_")]
    return [r.asDict() for r in df.select(*data).orderBy(key).collect()]


def _applied_commits(spark: Any, path: str) -> int:
    """Commits that applied changes to a keyed table: MERGEs, and the append of a new table's
    first load (both record the table's fences as commit metadata; schema changes do not)."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history()
    return history.where("userMetadata IS NOT NULL").count()


def _merges(spark: Any, path: str) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).history().where("operation = 'MERGE'").count()


@pytest.fixture(scope="module")
def streamed(
    local_stack: StackInfo, spark: Any, tmp_path_factory: Any
) -> Iterator[tuple[Scenario, ApplyConfig]]:
    """Phase 1 applied by one available-now run, phase 2 by a second run from its checkpoint."""
    scenario = Scenario(local_stack)
    config = scenario.config(tmp_path_factory.mktemp("streamed"), history=True)
    scenario.phase1()
    _run(spark, config)
    scenario.phase2()
    _run(spark, config)
    yield scenario, config


def test_apply_job_writes_expected_rows_and_types(
    streamed: tuple[Scenario, ApplyConfig], spark: Any
) -> None:
    scenario, config = streamed
    path = config.table_path("public", "customers")
    assert _rows(spark, path, "id") == scenario.expected_customers()
    types = dict(spark.read.format("delta").load(path).dtypes)
    assert types == {
        "id": "bigint",
        "name": "string",
        "amount": "decimal(10,2)",
        "born": "date",
        "updated_at": "timestamp",
        "doc": "string",
        "email": "string",
        "ext_id": "string",
        tf.COMMIT_LSN: "bigint",
        tf.SEQ: "bigint",
        tf.COMMIT_TS: "timestamp",
    }


def test_apply_job_reports_each_topics_lag_from_its_progress_reports(
    streamed: tuple[Scenario, ApplyConfig],
) -> None:
    """pgbridge_apply_topic_lag_records is set per topic from the query's progress reports
    (posted asynchronously: waited for); both runs read to the latest offsets, so 0."""
    from prometheus_client import REGISTRY

    scenario, _ = streamed
    topic = scenario.c1.topic
    deadline = time.monotonic() + 30
    value = None
    while time.monotonic() < deadline:
        value = REGISTRY.get_sample_value("pgbridge_apply_topic_lag_records", {"topic": topic})
        if value == 0:
            break
        time.sleep(0.2)
    assert value == 0, f"lag of {topic}: {value}"


def test_a_local_checkpoint_is_kept_by_the_file_system_manager(
    streamed: tuple[Scenario, ApplyConfig], spark: Any
) -> None:
    """The job's local checkpoint goes through Spark's FileSystem-based manager (no readlink
    forked per file), and holds each batch's offsets and commit, as Spark's default would."""
    from bridge.spark.query import FILE_SYSTEM_CHECKPOINTS

    _, config = streamed
    key = "spark.sql.streaming.checkpointFileManagerClass"
    assert spark.conf.get(key) == FILE_SYSTEM_CHECKPOINTS
    checkpoint = Path(config.checkpoint_location)
    offsets = sorted(p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    commits = sorted(p.name for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert offsets and offsets == commits


def test_apply_job_records_position_of_last_change_per_row(
    streamed: tuple[Scenario, ApplyConfig], spark: Any
) -> None:
    _, config = streamed
    df = spark.read.format("delta").load(config.table_path("public", "customers"))
    got = sorted((r["id"], r[tf.COMMIT_LSN], r[tf.SEQ]) for r in df.collect())
    assert got == [(1, 600, 0), (4, 500, 0), (30, 400, 1)]


def test_apply_job_truncate_deletes_only_rows_before_it(
    streamed: tuple[Scenario, ApplyConfig], spark: Any
) -> None:
    _, config = streamed
    path = config.table_path("public", "orders")
    assert _rows(spark, path, "order_id") == [{"order_id": 3, "note": "three"}]
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().first()
    assert detail is not None
    properties = detail["properties"]
    assert properties[KEY_COLUMNS_PROPERTY] == "order_id"


def test_apply_job_dead_letters_poison_records_with_reasons(
    streamed: tuple[Scenario, ApplyConfig], spark: Any
) -> None:
    scenario, config = streamed
    dead = spark.read.format("delta").load(config.dead_letter_location)
    rows = dead.orderBy("topic", "offset").collect()
    assert [(r["topic"], r["reason"]) for r in rows] == [
        (scenario.c1.topic, "magic byte is 0x01, not 0"),
        (scenario.c1.topic, "unknown schema id 987654321"),
        (scenario.c1.topic, f"payload does not decode with schema id {scenario.v2_schema_id}"),
    ]
    assert rows[0]["value"][:1] == b"\x01" and len(rows[2]["value"]) == 8
    assert [r["partition"] for r in rows] == [0, 0, 0]
    assert rows[0]["offset"] < rows[1]["offset"] < rows[2]["offset"]
    # A table without a key is applied (as a multiset), not set aside.
    assert _rows(spark, config.table_path("public", "events"), "order_id") == [
        {"order_id": 1, "note": "no key"}
    ]


def _ts(commit_lsn: int) -> dt.datetime:
    """The scenario's commit time of a transaction (see TableVersion.envelope)."""
    return dt.datetime(2023, 11, 14, 22, 13, 20) + dt.timedelta(seconds=commit_lsn)


def test_apply_job_history_keeps_versions_with_validity(
    streamed: tuple[Scenario, ApplyConfig], spark: Any
) -> None:
    from bridge.spark.history import IS_CURRENT, VALID_FROM, VALID_TO

    _, config = streamed
    df = spark.read.format("delta").load(config.history_path("public", "customers"))
    got = [
        (
            r["id"],
            r["name"],
            r["doc"] == BIG_DOC,
            r[tf.OP],
            r[VALID_FROM],
            r[VALID_TO],
            r[IS_CURRENT],
        )
        for r in df.orderBy("id", VALID_FROM).collect()
    ]
    assert got == [
        (1, "ann", True, "c", _ts(100), _ts(200), False),
        # Unchanged TOAST: from the current version in the table, then carried within the batch.
        (1, "ann2", True, "u", _ts(200), _ts(600), False),
        (1, "ann3", True, "u", _ts(600), None, True),
        (2, "bob", False, "c", _ts(100), _ts(300), False),
        (3, "cy", False, "c", _ts(100), _ts(400), False),
        (4, "dee", False, "c", _ts(500), None, True),
        (30, "cy", False, "c", _ts(400), None, True),
    ]
    orders = spark.read.format("delta").load(config.history_path("public", "orders"))
    assert [
        (r["order_id"], r[VALID_FROM], r[VALID_TO], r[IS_CURRENT])
        for r in orders.orderBy("order_id").collect()
    ] == [
        (1, _ts(90), _ts(700), False),  # ended by the truncate
        (2, _ts(90), _ts(700), False),
        (3, _ts(800), None, True),
    ]


def _static_batches(spark: Any, scenario: Scenario, bootstrap: str) -> tuple[Any, Any]:
    """Phase 1 and phase 2 records as two static batches, as the Kafka source would cut them."""
    scenario.phase1()
    topics = f"{scenario.c1.topic},{scenario.orders.topic},{scenario.keyless.topic}"
    first = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topics)
        .load()
    )
    ends = {
        r["topic"]: r["n"]
        for r in first.groupBy("topic")
        .agg({"offset": "max"})
        .withColumnRenamed("max(offset)", "n")
        .collect()
    }
    scenario.phase2()
    everything = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topics)
        .load()
    )
    from pyspark.sql import functions as F

    earlier = F.lit(False)
    for topic, end in ends.items():
        earlier = earlier | ((F.col("topic") == topic) & (F.col("offset") <= end))
    return everything.where(earlier).localCheckpoint(), everything.where(~earlier).localCheckpoint()


# make test: the SIGKILL test replays a batch one of whose MERGEs had committed, and
# tests/spark/test_apply_batches.py replays batches of keyed and keyless tables.
@pytest.mark.long
def test_batch_applier_replayed_batch_applies_once(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    scenario = Scenario(local_stack)
    config = scenario.config(tmp_path, history=True)
    first, second = _static_batches(spark, scenario, local_stack.bootstrap_servers)
    BatchApplier(config)(first, 0)
    BatchApplier(config)(second, 1)
    # A crash after the Delta commits but before the checkpoint: the same batch id comes again,
    # to a fresh applier (a restarted driver).
    replay = BatchApplier(config)
    replay(second, 1)
    customers = config.table_path("public", "customers")
    assert _rows(spark, customers, "id") == scenario.expected_customers()
    assert _rows(spark, config.table_path("public", "orders"), "order_id") == [
        {"order_id": 3, "note": "three"}
    ]
    assert _applied_commits(spark, customers) == 2  # batches 0 and 1; the replay committed nothing
    history = config.history_path("public", "customers")
    assert _merges(spark, history) == 2
    assert spark.read.format("delta").load(history).count() == 7  # no version twice
    assert spark.read.format("delta").load(config.dead_letter_location).count() == 3
    assert replay.stats.dead_letters == 3  # still counted: the replay did see them


class _CrashAfterFirstTable(BatchApplier):
    """Dies in batch 1 after the first table's MERGE committed, before the checkpoint.

    The crash is raised outside the per-table guard (an error *of* one table is dead-lettered
    and the batch goes on), as a dying driver would end the batch.
    """

    def _apply_or_set_aside(self, spark: Any, table: Any, batch_id: int, batch: Any) -> None:
        super()._apply_or_set_aside(spark, table, batch_id, batch)
        if batch_id == 1:
            raise RuntimeError("simulated crash mid-batch")


# make test: test_apply_job_killed_mid_batch_resumes_from_checkpoint, the same crash by SIGKILL.
@pytest.mark.long
def test_apply_job_restart_after_crash_mid_batch_applies_once(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    scenario = Scenario(local_stack)
    config = scenario.config(tmp_path)
    scenario.phase1()
    _run(spark, config)
    scenario.phase2()
    query = start_apply(spark, config, _CrashAfterFirstTable(config))
    with pytest.raises(Exception, match="simulated crash mid-batch"):
        query.awaitTermination(300)  # the query fails (StreamingQueryException)
    query.stop()
    _run(spark, config)  # restart from the checkpoint: batch 1 again
    customers = config.table_path("public", "customers")
    assert _rows(spark, customers, "id") == scenario.expected_customers()
    assert _rows(spark, config.table_path("public", "orders"), "order_id") == [
        {"order_id": 3, "note": "three"}
    ]
    assert _applied_commits(spark, customers) == 2
    assert spark.read.format("delta").load(config.dead_letter_location).count() == 3


class _StoppedInItsFirstBatch(BatchApplier):
    """After a table of its first batch: the job's stop, its grace period already over (a
    batch longer than the grace period), each table's thread held until the query is stopped."""

    def __init__(self, config: ApplyConfig, stop: GracefulStop) -> None:
        super().__init__(config)
        self.stop = stop
        self.applied: list[str] = []

    def _apply_or_set_aside(self, spark: Any, table: Any, batch_id: int, batch: Any) -> None:
        super()._apply_or_set_aside(spark, table, batch_id, batch)
        self.applied.append(table.name)
        if not self.stop.requested.is_set():  # (a second request stops at once)
            self.stop.request("SIGTERM received")
        assert self.stop.stopped.wait(60), "the stop did not stop the query"


def test_a_stop_past_its_grace_period_leaves_the_rest_of_the_batch(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    """A stop that must interrupt a batch of many tables ends it before the tables not begun
    (not after all of them, past Kubernetes' grace period), as a stop, not an error; the next
    start applies the batch, each table once."""
    prefix = f"it{uuid.uuid4().hex[:8]}"
    tables = [TableVersion(prefix, "public", f"t{i}", ORDERS, ["order_id"]) for i in range(10)]
    create_topics(local_stack.bootstrap_servers, [t.topic for t in tables])
    producer = RegistryProducer(local_stack.bootstrap_servers, local_stack.registry_url)
    for table in tables:
        row = {"order_id": 1, "note": table.table}
        producer.change(table, table.envelope("c", 10, 0, after=row), {"order_id": 1})
    producer.flush()
    config = apply_config(local_stack, prefix, tmp_path)
    stop = GracefulStop(grace_s=0.1)
    # Each table's rows are written by the driver, DRIVER_WRITERS tables at a time.
    applier = _StoppedInItsFirstBatch(config, stop)
    query = start_apply(spark, config, applier, stopped=stop.stopped)
    stop.watch(query)
    try:
        assert query.awaitTermination(300), "the stopped query did not end"
        assert query.exception() is None  # Spark took the abandoned batch for its stop's
    finally:
        query.stop()
    # Only the tables begun before the stop: at most one per writer thread.
    applied = applier.applied
    assert 1 <= len(applied) <= DRIVER_WRITERS < len(tables), applied
    paths = [Path(config.table_path("public", t.table)) for t in tables]
    assert sum(_merge_commits(p) for p in paths) == len(applied)
    assert not (Path(config.checkpoint_location) / "commits" / "0").exists()

    _run(spark, config)  # the next start: the batch again, the tables applied before skipped
    assert [_merge_commits(p) for p in paths] == [1] * len(paths)  # each table once
    # The rows of a table applied before the stop and of one left (Spark's read of a Delta
    # table costs most of a second: not all ten).
    first = next(t for t in tables if t.topic == applied[0])
    left = next(t for t in tables if t.topic not in applied)
    for table in (first, left):
        rows = _rows(spark, config.table_path("public", table.table), "order_id")
        assert rows == [{"order_id": 1, "note": table.table}]


def _merge_commits(table: Path) -> int:
    """Commits that applied changes (see ``_merges``) in a table's Delta log, read from the
    files (the job may be mid-write)."""
    count = 0
    for entry in sorted((table / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and info.get("userMetadata"):
                count += 1
    return count


def test_apply_job_killed_mid_batch_resumes_from_checkpoint(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    from bridge.spark.applier import PAUSE_AFTER_MERGE_ENV

    scenario = Scenario(local_stack)
    config = scenario.config(tmp_path)
    scenario.phase1()
    _run(spark, config)
    scenario.phase2()
    tables = [Path(config.table_path("public", t)) for t in ("customers", "orders")]
    merged = sum(_merge_commits(t) for t in tables)
    log = (tmp_path / "job.log").open("wb")
    # The job as users run it, in its own process (and JVM), paused after its first MERGE of
    # batch 1: SIGKILL lands after a Delta commit and before the checkpoint's.
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge.spark.job",
            "--topic-prefix",
            scenario.prefix,
            "--bootstrap-servers",
            local_stack.bootstrap_servers,
            "--registry-url",
            local_stack.registry_url,
            "--delta-base",
            config.delta_base,
            "--checkpoint",
            config.checkpoint_location,
            "--dead-letter",
            config.dead_letter_location,
            "--available-now",
            "--parallel-tables",
            "1",
        ],
        env={
            **os.environ,
            PAUSE_AFTER_MERGE_ENV: "600",
            "PGBRIDGE_SPARK_MASTER": "local[2]",
            "PGBRIDGE_SPARK_JARS": ",".join(local_stack.spark_jars),
        },
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while sum(_merge_commits(t) for t in tables) == merged:
            assert job.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the job did not MERGE within 300 s"
            time.sleep(0.5)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        log.close()
    assert sum(_merge_commits(t) for t in tables) == merged + 1
    assert not (Path(config.checkpoint_location) / "commits" / "1").exists()  # killed mid-batch

    _run(spark, config)  # restart from the checkpoint: batch 1 again, in a new driver
    customers = config.table_path("public", "customers")
    assert _rows(spark, customers, "id") == scenario.expected_customers()
    assert _rows(spark, config.table_path("public", "orders"), "order_id") == [
        {"order_id": 3, "note": "three"}
    ]
    assert sum(_merge_commits(t) for t in tables) == merged + 2  # one per table, none twice
    assert spark.read.format("delta").load(config.dead_letter_location).count() == 3


def test_a_held_tables_updates_and_deletes_are_folded_by_the_lanes_tasks_and_merged(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    """A table the lane loaded, then a run of updates, deletes, a deleted key inserted again
    and new keys, over two Kafka partitions: the lane's tasks read them from Kafka, fold each
    key's last change and the driver MERGEs the rows (delta-rs), batch after batch; then the
    same updates again (a producer's resend) change nothing. Delta equals the source."""
    prefix = f"it{uuid.uuid4().hex[:8]}"
    busy = TableVersion(prefix, "public", "busy", ORDERS, ["order_id"])
    create_topics(local_stack.bootstrap_servers, [busy.topic], partitions=2)
    producer = RegistryProducer(local_stack.bootstrap_servers, local_stack.registry_url)
    expected: dict[int, str] = {}
    for i in range(300):
        expected[i] = f"n{i}"
        producer.change(busy, busy.envelope("r", 10, i, after={"order_id": i, "note": f"n{i}"}),
                        {"order_id": i})  # fmt: skip
    producer.flush()
    config = apply_config(
        local_stack,
        prefix,
        tmp_path,
        max_offsets_per_trigger=250,  # the changes below in two batches
        lane_min_records=100,  # these small topics count as large ones
        driver_decode=False,  # (else the driver lane takes topics of up to 50,000 records)
    )
    applier = BatchApplier(config)
    _run(spark, config, applier)
    assert applier.stats.last_write["public.busy"] == ("append", "tasks")
    updates = []
    for seq, i in enumerate(range(0, 300, 3)):
        row = {"order_id": i, "note": f"u{i}"}
        updates.append((busy.envelope("u", 20, seq, after=row), {"order_id": i}))
        expected[i] = row["note"]
    for envelope, key in updates:
        producer.change(busy, envelope, key)
    for seq, i in enumerate(range(1, 300, 7)):
        gone = {"order_id": i, "note": expected.pop(i)}
        producer.change(busy, busy.envelope("d", 21, seq, before=gone), {"order_id": i})
    back = {"order_id": 8, "note": "back"}  # deleted above, inserted again
    producer.change(busy, busy.envelope("c", 22, 0, after=back), {"order_id": 8})
    expected[8] = "back"
    for i in range(300, 400):
        producer.change(busy, busy.envelope("c", 23, i, after={"order_id": i, "note": f"c{i}"}),
                        {"order_id": i})  # fmt: skip
        expected[i] = f"c{i}"
    producer.flush()
    _run(spark, config, applier)
    # Folded by the tasks, the held rows marked with deletion vectors by the driver.
    assert applier.stats.last_write["public.busy"] == ("merge", f"tasks+{DV_WRITER}")
    merged_batches = applier.stats.batches
    rows = _rows(spark, config.table_path("public", "busy"), "order_id")
    assert rows == [{"order_id": k, "note": v} for k, v in sorted(expected.items())]
    for envelope, key in updates:  # resent after the newer changes: nothing changes
        producer.change(busy, envelope, key)
    producer.flush()
    _run(spark, config, applier)
    assert applier.stats.batches == merged_batches + 1
    assert _rows(spark, config.table_path("public", "busy"), "order_id") == rows
    assert not list((Path(config.table_path("public", "busy")) / "_pgbridge_folded").iterdir())


def test_a_jobs_first_batch_goes_to_the_task_lane_by_a_guess_and_a_wrong_guess_costs_nothing(
    local_stack: StackInfo, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The job's first batch has no batch before it to tell the lane its topics: the driver
    guesses them from the first and last records of the batch's Kafka ranges, and the lane's
    job takes them in the batch's only read. ``snap`` is what the guess is for (a snapshot:
    inserts of one schema), and the lane appends it. ``mixed`` starts and ends like one, but
    holds a record of another schema and an update in between: the lane refuses it, Spark's
    path applies it in the same batch, and both tables equal what was sent."""
    prefix = f"it{uuid.uuid4().hex[:8]}"
    snap = TableVersion(prefix, "public", "snap", ORDERS, ["order_id"])
    mixed = TableVersion(prefix, "public", "mixed", ORDERS, ["order_id"])
    mixed_v2 = TableVersion(
        prefix, "public", "mixed", [*ORDERS, {"name": "extra", "type": ["null", "long"],
                                              "default": None}], ["order_id"])  # fmt: skip
    create_topics(local_stack.bootstrap_servers, [snap.topic, mixed.topic])
    producer = RegistryProducer(local_stack.bootstrap_servers, local_stack.registry_url)
    rows = 300
    for i in range(rows):
        row = {"order_id": i, "note": f"n{i}"}
        producer.change(snap, snap.envelope("r", 10, i, after=row), {"order_id": i})
        if i == 100:  # another schema (a column added mid-snapshot), then an update
            v2_row = {**row, "extra": 7}
            producer.change(mixed_v2, mixed_v2.envelope("c", 20, 0, after=v2_row), {"order_id": i})
            updated = {"order_id": 5, "note": "updated"}
            producer.change(mixed, mixed.envelope("u", 30, 0, after=updated), {"order_id": 5})
        else:
            producer.change(mixed, mixed.envelope("r", 10, i, after=row), {"order_id": i})
    producer.flush()
    config = apply_config(
        local_stack,
        prefix,
        tmp_path,
        lane_min_records=100,  # these small topics count as snapshot-sized
        driver_write_rows=0,
    )
    applier = BatchApplier(config)
    with caplog.at_level(logging.INFO, logger="bridge.spark.lane_driver"):
        _run(spark, config, applier)
    guessed = [r.getMessage() for r in caplog.records if "guessed from the first" in r.message]
    assert guessed == [
        f"batch 0: the task lane takes {mixed.topic}, {snap.topic}, guessed from the first "
        "and last records of the batch's Kafka ranges"
    ]
    assert applier.stats.batches == 1
    assert applier.stats.last_write["public.snap"] == ("append", "tasks")
    assert applier.stats.last_write["public.mixed"][1] != "tasks"
    snap_rows = _rows(spark, config.table_path("public", "snap"), "order_id")
    assert snap_rows == [{"order_id": i, "note": f"n{i}"} for i in range(rows)]
    mixed_rows = _rows(spark, config.table_path("public", "mixed"), "order_id")
    expected = [{"order_id": i, "note": f"n{i}", "extra": None} for i in range(rows)]
    expected[5]["note"] = "updated"
    expected[100]["extra"] = 7
    assert mixed_rows == expected


class _OrdersFail(BatchApplier):
    """A storage outage under the orders table: its writes fail, the others' do not."""

    def _apply_table(self, spark: Any, table: Any, *args: Any) -> None:
        if table.topic.endswith(".public.orders"):
            raise OSError("No space left on device")
        super()._apply_table(spark, table, *args)


def test_a_table_whose_batches_fail_is_held_and_the_next_start_applies_it_in_order(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    """Through start_apply, as `pgbridge apply` runs: the orders table's batches fail (its
    snapshot rows, later a truncate and a new row) while customers is applied. Each start
    applies what is held first (its replay writes beside the failing applier), so the table is
    always a state it had in the source: nothing, then its snapshot, then after the truncate."""
    from bridge.ops.apply_status import HeldTable, read_held_tables

    scenario = Scenario(local_stack)
    config = scenario.config(tmp_path)
    orders = config.table_path("public", "orders")
    scenario.phase1()
    _run(spark, config, _OrdersFail(config))
    held = read_held_tables(config.dead_letter_location)
    assert held == {scenario.orders.topic: HeldTable(since_batch=0, records=2)}
    scenario.phase2()
    _run(spark, config, _OrdersFail(config))  # applies batch 0's orders first; batch 1 fails
    assert _rows(spark, orders, "order_id") == [
        {"order_id": 1, "note": "one"},
        {"order_id": 2, "note": "two"},
    ]
    held = read_held_tables(config.dead_letter_location)
    assert held == {scenario.orders.topic: HeldTable(since_batch=1, records=2)}
    assert _rows(spark, config.table_path("public", "customers"), "id") == (
        scenario.expected_customers()
    )
    _run(spark, config)  # the outage is over
    assert _rows(spark, orders, "order_id") == [{"order_id": 3, "note": "three"}]
    assert read_held_tables(config.dead_letter_location) == {}
    # Left: the poison records of customers, dead-lettered alone (they hold nothing).
    assert spark.read.format("delta").load(config.dead_letter_location).count() == 3


def test_small_batches_are_read_from_kafka_by_the_driver_across_a_restart(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    """Batches of a few changes over several tables are read by the driver with its own
    consumer (bridge.spark.driver_read: no Spark job reads them), from the job's first batch
    on and again after a restart from the checkpoint; inserts, updates and deletes over two
    Kafka partitions per table end equal to what was sent."""
    prefix = f"it{uuid.uuid4().hex[:8]}"
    tables = [TableVersion(prefix, "public", f"t{i}", ORDERS, ["order_id"]) for i in range(3)]
    create_topics(local_stack.bootstrap_servers, [t.topic for t in tables], partitions=2)
    producer = RegistryProducer(local_stack.bootstrap_servers, local_stack.registry_url)
    expected: dict[str, dict[int, str]] = {t.topic: {} for t in tables}
    for table in tables:
        for i in range(40):
            row = {"order_id": i, "note": f"n{i}"}
            producer.change(table, table.envelope("c", 10, i, after=row), {"order_id": i})
            expected[table.topic][i] = row["note"]
    producer.flush()
    config = apply_config(
        local_stack,
        prefix,
        tmp_path,
        max_offsets_per_trigger=50,  # 120 records: three batches
    )
    applier = BatchApplier(config)
    _run(spark, config, applier)
    assert applier.stats.batches == 3
    assert applier.stats.driver_reads == 3
    for table in tables:
        for seq, i in enumerate(range(0, 40, 4)):
            row = {"order_id": i, "note": f"u{i}"}
            producer.change(table, table.envelope("u", 20, seq, after=row), {"order_id": i})
            expected[table.topic][i] = row["note"]
        for seq, i in enumerate(range(1, 40, 5)):
            gone = {"order_id": i, "note": expected[table.topic].pop(i)}
            producer.change(table, table.envelope("d", 21, seq, before=gone), {"order_id": i})
    producer.flush()
    restarted = BatchApplier(config)
    _run(spark, config, restarted)
    assert restarted.stats.batches >= 1
    assert restarted.stats.driver_reads == restarted.stats.batches
    assert restarted.stats.driver_decoded >= 3  # the tables' changes decoded in the driver too
    for table in tables:
        rows = _rows(spark, config.table_path("public", table.table), "order_id")
        assert rows == [
            {"order_id": k, "note": v} for k, v in sorted(expected[table.topic].items())
        ]
