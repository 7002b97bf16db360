"""SCD type 2 versions from a batch of changes (pure transform, on a real local Spark)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from bridge.spark import transforms as tf
from bridge.spark.history import VALID_TO, history_versions
from tests.spark.envelopes import TableVersion, frame_avro

pytestmark = pytest.mark.integration

V = TableVersion(
    "hist",
    "public",
    "t",
    [
        {"name": "id", "type": "long"},
        {"name": "doc", "type": ["null", "string"], "default": None},
    ],
    ["id"],
)


def _changes(spark: Any, envelopes: list[dict[str, Any]]) -> Any:
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("key", T.BinaryType()),
            T.StructField("value", T.BinaryType()),
            T.StructField("topic", T.StringType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("offset", T.LongType()),
            T.StructField("timestamp", T.TimestampType()),
        ]
    )
    rows = [
        (None, frame_avro(V.value_schema(), e, 3), V.topic, 0, i, dt.datetime(2026, 1, 1))
        for i, e in enumerate(envelopes)
    ]
    framed = tf.frame(spark.createDataFrame(rows, schema))
    decoded = tf.decode_envelopes(framed, V.topic, 3, json.dumps(V.value_schema()))
    return tf.envelope_to_changes(decoded)


def _ts(lsn: int) -> dt.datetime:
    return dt.datetime(2023, 11, 14, 22, 13, 20) + dt.timedelta(seconds=lsn)


def test_history_versions_end_at_next_change_of_same_key(spark: Any) -> None:
    changes = _changes(
        spark,
        [
            V.envelope("c", 1, 0, after={"id": 1, "doc": "a"}),
            V.envelope("u", 2, 0, after={"id": 1, "doc": "b"}),
            V.envelope("c", 2, 1, after={"id": 2, "doc": "x"}),
            V.envelope("d", 3, 0, before={"id": 1, "doc": None}),
            V.envelope("t", 4, 0),
        ],
    )
    rows = history_versions(changes, ["id"]).orderBy("id", tf.COMMIT_LSN).collect()
    assert [(r["id"], r["doc"], r[tf.OP], r[VALID_TO], r["_pgbridge_first"]) for r in rows] == [
        (1, "a", "c", _ts(2), True),
        (1, "b", "u", _ts(3), False),
        (1, None, "d", None, False),
        (2, "x", "c", None, True),
    ]


def test_history_versions_fill_unchanged_toast_from_batch_then_current_version(
    spark: Any,
) -> None:
    changes = _changes(
        spark,
        [
            V.envelope("u", 5, 0, after={"id": 1, "doc": None}, unchanged=["doc"]),
            V.envelope("u", 6, 0, after={"id": 1, "doc": "new"}),
            V.envelope("u", 7, 0, after={"id": 1, "doc": None}, unchanged=["doc"]),
            V.envelope("u", 7, 1, after={"id": 2, "doc": None}, unchanged=["doc"]),
        ],
    )
    current = spark.createDataFrame([(1, "cur")], "id long, doc string")
    rows = history_versions(changes, ["id"], current).orderBy("id", tf.COMMIT_LSN).collect()
    # Key 2 has no earlier version anywhere: null, not Debezium's placeholder.
    assert [(r["id"], r["doc"]) for r in rows] == [(1, "cur"), (1, "new"), (1, "new"), (2, None)]
