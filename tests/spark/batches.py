"""The harness of the apply job's batch tests on a real local Spark: Kafka-shaped rows holding
crafted Confluent-framed envelopes, applied by a BatchApplier as the running job applies them
(tests/spark/test_apply_batches.py, test_apply_schema_changes.py, test_lane_batches.py)."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridge.spark.applier import BatchApplier
from bridge.spark.config import ApplyConfig
from bridge.spark.decode import SchemaCache
from tests.spark.envelopes import TableVersion, frame_avro

PREFIX = "unit"
OPT_INT: Any = ["null", "int"]
OPT_STR: Any = ["null", "string"]
VSD: dict[str, Any] = {
    "type": "record",
    "name": "VariableScaleDecimal",
    "namespace": "io.debezium.data",
    "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
    "connect.name": "io.debezium.data.VariableScaleDecimal",
}


def col(name: str, type_: Any, original: str | None = None) -> dict[str, Any]:
    field: dict[str, Any] = {"name": name, "type": type_}
    if isinstance(type_, list) and type_[0] == "null":
        field["default"] = None
    if original is not None:
        field["pgbridge.column"] = original
    return field


class _Schemas(SchemaCache):
    """Schema ids assigned on first use; no registry."""

    def __init__(self) -> None:
        super().__init__(None)
        self.ids: dict[str, int] = {}

    def id_of(self, schema: dict[str, Any]) -> int:
        text = json.dumps(schema)
        if text not in self.ids:
            self.ids[text] = len(self.ids) + 1
            self._schemas[self.ids[text]] = text
        return self.ids[text]


#: The columns of Spark's Kafka source the job reads.
_KAFKA_ROWS = pa.schema(
    [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
     ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", "UTC"))]
)  # fmt: skip


class Batches:
    """Builds Kafka-shaped batches of framed records and applies them."""

    def __init__(self, spark: Any, tmp: Path, writer: str = "driver") -> None:
        self.spark = spark
        self.writer = writer  # who writes a small table's batch: "driver" (default), "spark"
        self.schemas = _Schemas()
        self.config = ApplyConfig(
            topic_prefix=PREFIX,
            bootstrap_servers="unused:9092",
            registry_url="http://unused",
            delta_base=str(tmp / "delta"),
            checkpoint_location=str(tmp / "checkpoint"),
            dead_letter_location=str(tmp / "dead"),
            parallel_tables=1,
            # "spark": every table written by Spark jobs (as large tables and batches are);
            # "tasks": large tables' batches of new keys by the task lane (its threshold
            # lowered to one record), the others by Spark jobs; "tasks+driver": the same,
            # the lane's folded updates and deletes MERGEd by the driver (which
            # decodes nothing itself: driver_decode off).
            **({"driver_write_rows": 0} if writer in ("spark", "tasks") else {}),
            **({"lane_min_records": 1} if writer.startswith("tasks") else {}),
            **({"driver_decode": False} if writer == "tasks+driver" else {}),
        )
        self.records: list[tuple[bytes | None, bytes | None, str, int]] = []
        self.offsets: dict[tuple[str, int], int] = {}
        self.applier: BatchApplier | None = None

    def add(
        self,
        version: TableVersion,
        op: str,
        position: tuple[int, int],
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
        topic: str | None = None,
        partition: int = 0,
        unchanged: list[str] | None = None,
    ) -> None:
        envelope = version.envelope(op, *position, before=before, after=after, unchanged=unchanged)
        value = frame_avro(
            version.value_schema(), envelope, self.schemas.id_of(version.value_schema())
        )
        key = None
        if version.key and op != "t":
            row = after if after is not None else before
            assert row is not None
            key = frame_avro(
                version.key_schema(),
                {k: row[k] for k in version.key},
                self.schemas.id_of(version.key_schema()),
            )
        self.records.append((key, value, topic or version.topic, partition))

    def frame(self) -> Any:
        """The batch as Spark's Kafka source gives it to the job; built from Arrow, so Spark
        holds it as a local relation (from a list of rows, every query of it ran through
        Python workers: 38 of this module's 308 CPU-seconds)."""
        rows = []
        for key, value, topic, partition in self.records:
            offset = self.offsets.get((topic, partition), 0)
            self.offsets[(topic, partition)] = offset + 1
            rows.append(
                {
                    "key": key,
                    "value": value,
                    "topic": topic,
                    "partition": partition,
                    "offset": offset,
                    "timestamp": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                }
            )
        self.records = []
        frame = self.spark.createDataFrame(pa.Table.from_pylist(rows, schema=_KAFKA_ROWS))
        if self.writer.startswith("tasks"):
            # Each Kafka partition in one Spark partition, as Spark's Kafka source reads them
            # (the task lane refuses a partition split over tasks: tested in test_task_lane).
            frame = frame.repartition(2, "topic", "partition")
        return frame

    def apply(self, batch_id: int, frame: Any = None, restarted: bool = False) -> BatchApplier:
        """Apply a batch as the running job does (one applier for all batches), or as a job
        restarted before it (a new applier: nothing known but what the tables hold)."""
        if self.applier is None or restarted:
            self.applier = BatchApplier(self.config, self.schemas)
        self.applier(frame if frame is not None else self.frame(), batch_id)
        return self.applier

    def rows(self, schema: str, table: str, spark_read: bool | None = None) -> list[dict[str, Any]]:
        """The table's data columns, row by row, as Spark gives them to Python.

        Read by Spark's Delta reader where Spark writes the table (or ``spark_read``); a table
        the driver writes is read by delta-rs and handed to Spark as a local relation, so the
        values still arrive as Spark converts them. A Spark read of a version Spark did not
        commit rebuilds the table's state first (5-7 Spark jobs: a quarter of
        test_apply_batches.py's time); that Spark reads what the driver writes is checked where
        it is the point: the deletion-vector test here, test_driver_decode.py, and every
        end-to-end test (tests/integration/test_delta_e2e.py's assert_delta_equals_source)."""
        path = self.config.table_path(schema, table)
        df = None
        if not (spark_read if spark_read is not None else self.writer != "driver"):
            df = self._read_by_delta_rs(path)
        if df is None:
            df = self.spark.read.format("delta").load(path)
        data = [c for c in df.columns if not c.startswith("_pgbridge_")]
        return [r.asDict() for r in df.select(*[f"`{c}`" for c in data]).collect()]

    def _read_by_delta_rs(self, path: str) -> Any:
        """The table read by delta-rs as a Spark local relation; None where delta-rs refuses
        it (a table feature it does not read, such as type widening: Spark's then)."""
        from deltalake.exceptions import DeltaError, DeltaProtocolError

        from bridge.spark.arrow_frame import frame_of
        from bridge.spark.driver_merge import open_table
        from bridge.spark.driver_table import conformed

        try:
            delta = open_table(path)
            rows = conformed(delta, pa.table(delta.scan()))
        except (DeltaError, DeltaProtocolError):
            return None
        return frame_of(self.spark, rows)

    def multiset(self, schema: str, table: str) -> Counter[tuple[Any, ...]]:
        return Counter(tuple(r.values()) for r in self.rows(schema, table))

    def dead(self) -> list[tuple[str, str]]:
        df = self.spark.read.format("delta").load(self.config.dead_letter_location)
        return sorted((r["topic"], r["reason"]) for r in df.collect())


FULL_DUPS = TableVersion(
    PREFIX, "public", "full_dups", [col("a", OPT_INT), col("b", OPT_STR)], key=[]
)


def _merges(spark: Any, path: str) -> int:
    """Commits that applied changes: MERGEs, and the append of a new table's first load."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history()
    return history.where("operation IN ('MERGE', 'WRITE')").count()


#: Runs a test with each writer: what a table holds must not depend on which wrote it.
BOTH_WRITERS = pytest.mark.parametrize("batches", ["driver", "spark"], indirect=True)

#: BOTH_WRITERS, the Spark writer's run in `make test-long` only: for a test whose Spark
#: statement (multiset MERGE, append, ...) another test runs through Spark in `make test`
#: (named where it is used). A `[spark]` run costs 2-4x its `[driver]` twin: Spark's MERGE of a
#: few rows (docs/measurements.md, "Where the test suite's time goes").
SPARK_WRITER_IN_LONG = pytest.mark.parametrize(
    "batches", ["driver", pytest.param("spark", marks=pytest.mark.long)], indirect=True
)


def no_unnamed_lane_files(batches: Batches) -> None:
    """No file of the task lane's (zstd: Spark and delta-rs write snappy) is left in the table
    that no commit ever named: a refused lane removes the files it wrote; nor are folded rows
    left for the driver (bridge.spark.task_lane.FOLDED_DIR)."""
    from deltalake import DeltaTable

    table = batches.config.table_path("public", "keyed")
    latest = DeltaTable(table).version()
    named = {
        Path(uri).name
        for version in range(latest + 1)
        for uri in DeltaTable(table, version=version).file_uris()
    }
    lane_files = {p.name for p in Path(table).glob("*.zstd.parquet")}
    assert lane_files <= named
    assert not list(Path(table).glob("_pgbridge_folded/*"))  # folded rows: read, then removed
    assert bool(lane_files) == batches.writer.startswith("tasks")


def appended_by(applier: BatchApplier, batches: Batches, table: str = "public.keyed") -> None:
    """The table's last batch was an append, by the task lane where the test runs with it."""
    kind, writer = applier.stats.last_write[table]
    assert kind == "append"
    assert (writer == "tasks") == batches.writer.startswith("tasks"), writer


def _last_write(applier: BatchApplier, table: str = "public.keyed") -> str:
    """How the applier wrote ``table``'s last batch (append, insert-only merge, merge)."""
    return applier.stats.last_write[table][0]


KEYED = TableVersion(PREFIX, "public", "keyed", [col("id", "int"), col("v", OPT_STR)], key=["id"])


def _ids(batches: Batches) -> dict[int, Any]:
    return {r["id"]: r["v"] for r in batches.rows("public", "keyed")}


def _vsd(value: str) -> dict[str, Any]:
    d = Decimal(value)
    sign, digits, exponent = d.as_tuple()
    assert isinstance(exponent, int)
    unscaled = int("".join(map(str, digits))) * (-1 if sign else 1)
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return {"scale": -exponent, "value": unscaled.to_bytes(length, "big", signed=True)}
