"""The task lane's guess of a batch's topics from the edges of its Kafka ranges
(bridge.spark.lane_driver._edge_group): a topic is guessed only where every edge that holds a
value is of one value schema and one key schema."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.spark import lane_driver
from bridge.spark import transforms as tf
from bridge.spark.decode import SAMPLE
from bridge.spark.kafka_ranges import KafkaRange, framed_batch
from tests.spark.envelopes import KafkaMessage


def _framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def _edges(monkeypatch: pytest.MonkeyPatch, edges: dict[int, list[tuple[Any, Any]]]) -> None:
    """Each partition's edges as (value, key) pairs, as edge_records would read them."""

    def edge_records(kafka_range: KafkaRange, config: Any) -> list[Any]:
        return [
            framed_batch(kafka_range.topic, kafka_range.partition, [KafkaMessage(k, v, i)])
            for i, (v, k) in enumerate(edges[kafka_range.partition])
        ]

    monkeypatch.setattr(lane_driver, "edge_records", edge_records)


RANGES = [KafkaRange("p.s.t", 0, 0, 60_000), KafkaRange("p.s.t", 1, 10, 40_010)]


def test_edges_of_one_value_and_one_key_schema_make_the_topics_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, key = _framed(7, b"first"), _framed(3, b"k")
    _edges(monkeypatch, {0: [(first, key)], 1: [(_framed(7, b"x"), key), (_framed(7, b"y"), key)]})
    row = lane_driver._edge_group("p.s.t", RANGES, {})
    assert row is not None
    assert row["topic"] == "p.s.t" and row[tf.VALUE_SCHEMA_ID] == 7
    assert row["key_id"] == row["min_key_id"] == 3
    assert row["records"] == 100_000 and row[SAMPLE] == first and not row["unframed"]


def test_tombstones_at_the_edges_are_stepped_over(monkeypatch: pytest.MonkeyPatch) -> None:
    key = _framed(3, b"k")
    _edges(
        monkeypatch,
        {0: [(None, key), (_framed(7, b"v"), key)], 1: [(_framed(7, b"w"), key), (None, key)]},
    )
    row = lane_driver._edge_group("p.s.t", RANGES, {})
    assert row is not None and row[SAMPLE] == _framed(7, b"v")


@pytest.mark.parametrize(
    "edges",
    [
        # two value schemas (a column added between the edges' records)
        {0: [(_framed(7, b"v"), _framed(3, b"k"))], 1: [(_framed(8, b"v"), _framed(3, b"k"))]},
        # two key schemas (the replica identity changed)
        {0: [(_framed(7, b"v"), _framed(3, b"k"))], 1: [(_framed(7, b"v"), _framed(4, b"k"))]},
        # no key: a table without key columns (the lane takes keyed tables only)
        {0: [(_framed(7, b"v"), None)], 1: [(_framed(7, b"v"), None)]},
        # a value that is not Confluent-framed (dead-lettered by Spark's path)
        {0: [(b"\x01nope", _framed(3, b"k"))], 1: [(b"\x01nope", _framed(3, b"k"))]},
        # tombstones only
        {0: [(None, _framed(3, b"k"))], 1: []},
    ],
    ids=["two value schemas", "two key schemas", "no key", "unframed", "tombstones only"],
)
def test_anything_else_is_no_guess(
    monkeypatch: pytest.MonkeyPatch, edges: dict[int, list[tuple[Any, Any]]]
) -> None:
    _edges(monkeypatch, edges)
    assert lane_driver._edge_group("p.s.t", RANGES, {}) is None
