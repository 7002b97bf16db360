"""The pure DataFrame transforms, on a real local Spark (hence integration: they need its jars).

Payloads are framed by hand with a fixed schema id: these tests exercise the transforms, not
the registry (the integration tests in tests/integration/test_spark_apply.py do).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from bridge.spark import transforms as tf
from tests.spark.envelopes import TableVersion, frame_avro

pytestmark = pytest.mark.integration

V1 = TableVersion(
    "unit",
    "public",
    "t",
    [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {
            "name": "amount",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            ],
            "default": None,
        },
        {"name": "doc", "type": ["null", "string"], "default": None},
    ],
    ["id"],
)
V2 = TableVersion(
    "unit",
    "public",
    "t",
    [
        *V1.columns,
        {"name": "born", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
    ],
    ["id"],
)


def _kafka_rows(spark: Any, values: list[bytes | None], topic: str = V1.topic) -> Any:
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
    now = dt.datetime(2026, 1, 1)
    return spark.createDataFrame(
        [(None, v, topic, 0, i, now) for i, v in enumerate(values)], schema
    )


def _decoded(
    spark: Any, version: TableVersion, envelopes: list[dict[str, Any]], schema_id: int
) -> Any:
    import json

    framed = tf.frame(
        _kafka_rows(spark, [frame_avro(version.value_schema(), e, schema_id) for e in envelopes])
    )
    return tf.decode_envelopes(framed, version.topic, schema_id, json.dumps(version.value_schema()))


def _row(
    id_: int, name: str | None = None, amount: str | None = None, doc: str | None = None
) -> dict[str, Any]:
    return {"id": id_, "name": name, "amount": Decimal(amount) if amount else None, "doc": doc}


def test_frame_reads_big_endian_schema_ids(spark: Any) -> None:
    rows = tf.frame(
        _kafka_rows(spark, [b"\x00\x00\x01\x00\x02rest", b"\x00\xff\xff\xff\xffx"])
    ).collect()
    assert [r[tf.VALUE_SCHEMA_ID] for r in rows] == [65538, 4294967295]
    assert [r[tf.FRAMING_ERROR] for r in rows] == [None, None]


def test_frame_flags_bad_magic_and_short_values_but_not_tombstones(spark: Any) -> None:
    rows = tf.frame(_kafka_rows(spark, [b"\x01\x00\x00\x00\x01x", b"\x00\x00", None])).collect()
    assert rows[0][tf.FRAMING_ERROR] == "magic byte is 0x01, not 0"
    assert rows[1][tf.FRAMING_ERROR] == "value shorter than the 5-byte Confluent header"
    assert rows[2][tf.FRAMING_ERROR] is None and rows[2][tf.VALUE_SCHEMA_ID] is None


def test_records_a_lane_task_reads_from_kafka_are_framed_as_spark_frames_them(spark: Any) -> None:
    """bridge.spark.kafka_ranges frames the records a task reads itself; the lane takes them
    for what Spark's frame gives (schema ids, framing errors, tombstones)."""
    from bridge.spark.kafka_ranges import framed_batch

    values = [
        b"\x00\x00\x01\x00\x02rest", b"\x00\xff\xff\xff\xffx", b"\x01\x00\x00\x00\x01x",
        b"\x00\x00", b"", b"\x7b\x00\x00\x00\x00\x00", None, b"\x00\x00\x00\x00\x05",
    ]  # fmt: skip
    columns = [tf.VALUE_SCHEMA_ID, tf.KEY_SCHEMA_ID, tf.FRAMING_ERROR]
    spark_rows = [[r[c] for c in columns] for r in tf.frame(_kafka_rows(spark, values)).collect()]

    class Message:
        def __init__(self, value: bytes | None) -> None:
            self._value = value

        def key(self) -> None:
            return None

        def value(self) -> bytes | None:
            return self._value

        def offset(self) -> int:
            return 0

    read = framed_batch("t", 0, [Message(v) for v in values]).to_pydict()
    assert [list(r) for r in zip(*(read[c] for c in columns), strict=True)] == spark_rows


def test_decode_envelopes_gives_null_for_undecodable_payload(spark: Any) -> None:
    import json

    good = frame_avro(V1.value_schema(), V1.envelope("c", 1, 0, after=_row(1, "a")), 5)
    bad = good[:12]  # truncated mid-record
    framed = tf.frame(_kafka_rows(spark, [good, bad]))
    decoded = tf.decode_envelopes(framed, V1.topic, 5, json.dumps(V1.value_schema())).collect()
    assert decoded[0][tf.ENVELOPE]["after"]["name"] == "a"
    assert [r[tf.UNDECODABLE] for r in decoded] == [False, True]


def test_envelope_to_changes_takes_delete_values_from_before(spark: Any) -> None:
    decoded = _decoded(
        spark,
        V1,
        [
            V1.envelope("c", 10, 0, after=_row(1, "a", "1.50")),
            V1.envelope("d", 11, 3, before=_row(1)),
            V1.envelope("m", 12, 0),
        ],
        5,
    )
    rows = tf.envelope_to_changes(decoded).collect()
    assert [
        (r["id"], r["name"], r["amount"], r[tf.OP], r[tf.COMMIT_LSN], r[tf.SEQ]) for r in rows
    ] == [
        (1, "a", Decimal("1.50"), "c", 10, 0),
        (1, None, None, "d", 11, 3),
    ]
    assert rows[0][tf.COMMIT_TS] == dt.datetime(2023, 11, 14, 22, 13, 30)


def test_envelope_to_changes_without_toast_field_marks_nothing_unchanged(spark: Any) -> None:
    old = TableVersion(V1.prefix, V1.schema, V1.table, V1.columns, V1.key, toast_field=False)
    rows = tf.envelope_to_changes(
        _decoded(spark, old, [old.envelope("u", 1, 0, after=_row(1))], 5)
    ).collect()
    assert rows[0][tf.UNCHANGED] == []


def test_conform_gives_null_for_column_an_older_version_lacks(spark: Any) -> None:
    old = tf.envelope_to_changes(
        _decoded(spark, V1, [V1.envelope("c", 1, 0, after=_row(1, "a"))], 5)
    )
    new = tf.envelope_to_changes(
        _decoded(
            spark,
            V2,
            [V2.envelope("c", 2, 0, after={**_row(2, "b"), "born": dt.date(2000, 2, 29)})],
            6,
        )
    )
    columns = tf.envelope_fields(_decoded(spark, V2, [], 6))
    rows = sorted(tf.conform([old, new], columns).collect(), key=lambda r: r["id"])
    assert [(r["id"], r["name"], r["born"]) for r in rows] == [
        (1, "a", None),
        (2, "b", dt.date(2000, 2, 29)),
    ]
    assert tf.conform([old, new], columns).schema["born"].dataType.simpleString() == "date"


def test_last_change_per_key_orders_by_commit_lsn_then_seq(spark: Any) -> None:
    decoded = _decoded(
        spark,
        V1,
        [
            V1.envelope("u", 20, 5, after=_row(1, "second")),
            V1.envelope("c", 10, 9, after=_row(1, "first")),
            V1.envelope("u", 20, 6, after=_row(1, "third")),
            V1.envelope("c", 20, 0, after=_row(2, "x")),
            V1.envelope("d", 30, 0, before=_row(2)),
        ],
        5,
    )
    rows = tf.last_change_per_key(tf.envelope_to_changes(decoded), ["id"]).collect()
    assert sorted((r["id"], r["name"], r[tf.OP]) for r in rows) == [
        (1, "third", "u"),
        (2, None, "d"),
    ]


def test_last_change_per_key_folds_unchanged_toast_from_earlier_change(spark: Any) -> None:
    decoded = _decoded(
        spark,
        V1,
        [
            V1.envelope("u", 1, 0, after=_row(1, "a", doc="big"), unchanged=[]),
            V1.envelope("u", 2, 0, after=_row(1, "b"), unchanged=["doc"]),
            V1.envelope("u", 3, 0, after=_row(2, "c"), unchanged=["doc"]),
        ],
        5,
    )
    rows = tf.last_change_per_key(
        tf.envelope_to_changes(decoded), ["id"], fold_unchanged=True
    ).collect()
    got = sorted((r["id"], r["name"], r["doc"], r[tf.UNCHANGED]) for r in rows)
    # Key 1 took "big" from its earlier change; key 2 had none, so the target's value stays.
    assert got == [(1, "b", "big", []), (2, "c", None, ["doc"])]


def test_drop_before_keeps_only_changes_after_position(spark: Any) -> None:
    decoded = _decoded(
        spark,
        V1,
        [
            V1.envelope("c", 5, 0, after=_row(1)),
            V1.envelope("t", 5, 1),
            V1.envelope("c", 5, 2, after=_row(2)),
            V1.envelope("c", 6, 0, after=_row(3)),
        ],
        5,
    )
    rows = tf.drop_before(tf.envelope_to_changes(decoded), 5, 1).collect()
    assert sorted(r["id"] for r in rows) == [2, 3]


def test_dead_letters_have_fixed_shape_and_reason(spark: Any) -> None:
    framed = tf.frame(_kafka_rows(spark, [b"\x07abcdef"]))
    rows = tf.dead_letters(framed, "why", 42)
    assert [(f.name, f.dataType) for f in rows.schema.fields] == [
        (f.name, f.dataType) for f in tf.DEAD_LETTER_SCHEMA.fields
    ]
    row = rows.first()
    assert row is not None
    assert (row["topic"], row["offset"], row["value"], row["reason"], row["batch_id"]) == (
        V1.topic,
        0,
        bytearray(b"\x07abcdef"),
        "why",
        42,
    )


def test_spark_fence_columns_admit_what_the_python_rule_admits(spark: Any) -> None:
    """Fences.admits and not_covered (Spark's path) against Fences.admits_change (the
    driver's; tests/spark/test_fences.py holds the task lane's Arrow rule to the same), over
    every change of a small grid and fences of each kind."""
    from pyspark.sql import functions as F

    from bridge.spark.fences import Fences

    changes = [
        (partition, offset, op, lsn, seq)
        for partition in (0, 1, 2)
        for offset in (0, 5, 9)
        for op in ("r", "c", "d")
        for lsn in (3, 4, 5)
        for seq in (0, 1)
    ]
    frame = spark.createDataFrame(
        changes,
        f"{tf.PARTITION} int, {tf.OFFSET} long, {tf.OP} string, "
        f"{tf.COMMIT_LSN} long, {tf.SEQ} long",
    ).cache()
    for fences in (
        Fences(),
        Fences({0: (4, 0), 2: (5, 1)}),
        Fences(truncate=(4, 1)),
        Fences(offsets={0: 5, 1: 0}),
        Fences({1: (3, 1)}, (4, 0), {2: 5}),
    ):
        admitted = frame
        for condition in (
            fences.admits(),
            fences.not_covered(F.col(tf.PARTITION), F.col(tf.OFFSET)),
        ):
            if condition is not None:
                admitted = admitted.where(condition)
        expected = {c for c in changes if fences.admits_change(c[0], c[1], c[2], (c[3], c[4]))}
        assert {tuple(row) for row in admitted.collect()} == expected, fences
