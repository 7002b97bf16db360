"""A micro-batch's Kafka offset ranges from Spark's offset log, librdkafka's configuration for
the Kafka source's options, tasks' shares, and the Confluent framing of records read by a task
(bridge.spark.kafka_ranges). Reading a real topic is covered in tests/integration
(test_delta_e2e's bounded apply, the Spark cluster test)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.spark import transforms as tf
from bridge.spark.config import ApplyConfig
from bridge.spark.kafka_ranges import (
    KafkaRange,
    batch_ranges,
    client_config,
    framed_batch,
    framing_error,
    task_shares,
)
from tests.examples import examples
from tests.spark.envelopes import KafkaMessage

META = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})


def _log(checkpoint: Path, batch: int, offsets: dict[str, dict[str, int]]) -> None:
    """An offset log file as Spark's streaming engine writes it."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{META}\n{json.dumps(offsets)}")


def _initial(checkpoint: Path, offsets: dict[str, dict[str, int]]) -> None:
    """The Kafka source's initial offsets (a zero byte first, for Spark 2.1.0's sake)."""
    (checkpoint / "sources" / "0").mkdir(parents=True)
    (checkpoint / "sources" / "0" / "0").write_bytes(b"\x00v1\n" + json.dumps(offsets).encode())


def test_a_batch_runs_from_the_last_ones_end_to_its_own(tmp_path: Path) -> None:
    _initial(tmp_path, {"p.s.a": {"0": 0, "1": 0}})
    _log(tmp_path, 0, {"p.s.a": {"0": 10, "1": 0}})
    _log(tmp_path, 1, {"p.s.a": {"0": 25, "1": 4}})
    assert batch_ranges(str(tmp_path), 0) == [KafkaRange("p.s.a", 0, 0, 10)]  # [1] is empty
    assert batch_ranges(f"file://{tmp_path}", 1) == [
        KafkaRange("p.s.a", 0, 10, 25),
        KafkaRange("p.s.a", 1, 0, 4),
    ]


def test_ranges_spark_alone_knows_are_left_to_it(tmp_path: Path) -> None:
    _initial(tmp_path, {"p.s.a": {"0": 0}})
    _log(tmp_path, 0, {"p.s.a": {"0": 10}})
    _log(tmp_path, 1, {"p.s.a": {"0": 12}, "p.s.new": {"0": 3}})  # starts at its earliest
    assert batch_ranges(str(tmp_path), 1) is None
    assert batch_ranges(str(tmp_path), 2) is None  # not planned yet
    assert batch_ranges(f"s3a://bucket{tmp_path}", 0) is None  # not read here
    _log(tmp_path, 3, {"p.s.a": {"0": 12}})
    (tmp_path / "offsets" / "2").write_text(f"v1\n{META}\n{{}}\n{{}}")  # two sources
    assert batch_ranges(str(tmp_path), 3) is None
    # Another source's offsets (the changelog mode's compaction reads a Delta table).
    for batch, version in ((4, 5), (5, 6)):
        delta_source: Any = {"sourceVersion": 1, "reservoirVersion": version, "index": -1}
        _log(tmp_path, batch, delta_source)
    assert batch_ranges(str(tmp_path), 5) is None


def test_plain_kafka_options_map_to_librdkafka_and_secured_ones_keep_sparks_source() -> None:
    config = ApplyConfig(
        topic_prefix="p",
        bootstrap_servers="127.0.0.1:9092",
        registry_url="http://r",
        delta_base="/d",
        checkpoint_location="/c",
        dead_letter_location="/x",
    )
    client = client_config(config.kafka_source_options())
    assert client is not None
    assert client["bootstrap.servers"] == "127.0.0.1:9092"
    assert client["isolation.level"] == "read_committed"  # never an open transaction's records
    assert client["enable.auto.commit"] is False
    assert client["auto.offset.reset"] == "error"  # records gone are never skipped silently
    plain = {**config.kafka_source_options(), "kafka.security.protocol": "PLAINTEXT"}
    assert client_config(plain) is not None
    for key, value in [
        ("kafka.security.protocol", "SASL_SSL"),
        ("kafka.sasl.jaas.config", "org.apache.kafka...PlainLoginModule required;"),
        ("kafka.ssl.truststore.location", "/etc/trust.jks"),
    ]:
        assert client_config({**config.kafka_source_options(), key: value}) is None, key


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=30), st.integers(1, 8))
def test_each_topic_partition_goes_whole_to_one_task(sizes: list[int], tasks: int) -> None:
    ranges = [KafkaRange(f"t{i % 3}", i, 0, size) for i, size in enumerate(sizes)]
    shares = task_shares(ranges, tasks)
    assert len(shares) <= tasks
    dealt = [r for share in shares for r in share]
    assert sorted(dealt, key=lambda r: r.partition) == ranges  # each once, none split
    if len(ranges) >= tasks:  # largest first to the least loaded: within one range of even
        loads = [sum(r.records for r in share) for share in shares]
        assert max(loads) - min(loads) <= max(sizes)


_PAYLOADS = st.one_of(
    st.none(),
    st.binary(max_size=9),
    st.tuples(st.integers(0, 2**32 - 1), st.binary(max_size=4)).map(
        lambda p: b"\x00" + p[0].to_bytes(4, "big") + p[1]
    ),
)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(_PAYLOADS, _PAYLOADS), max_size=20))
def test_records_read_by_a_task_are_framed_as_spark_frames_them(
    records: list[tuple[bytes | None, bytes | None]],
) -> None:
    """Schema ids: bytes 1..4 of a framed payload (magic byte 0, at least 5 bytes), else null;
    the framing error as transforms.frame words it (test_transforms holds the two renderings
    to Spark's)."""

    def schema_id(payload: bytes | None) -> int | None:
        if payload is None or len(payload) < 5 or payload[0] != 0:
            return None
        return int.from_bytes(payload[1:5], "big")

    messages = [KafkaMessage(k, v, 100 + i) for i, (k, v) in enumerate(records)]
    batch = pa.Table.from_batches([framed_batch("p.s.t", 3, messages)]).to_pydict()
    assert batch["value"] == [v for _, v in records]
    assert batch["offset"] == [100 + i for i in range(len(records))]
    assert batch["partition"] == [3] * len(records)
    assert batch[tf.VALUE_SCHEMA_ID] == [schema_id(v) for _, v in records]
    assert batch[tf.KEY_SCHEMA_ID] == [schema_id(k) for k, _ in records]
    assert batch[tf.FRAMING_ERROR] == [framing_error(v) for _, v in records]


def test_framing_errors_say_what_is_wrong() -> None:
    assert framing_error(None) is None  # a tombstone
    assert framing_error(b"\x00\x00\x00\x00\x07{}") is None
    assert framing_error(b"\x00\x01") == "value shorter than the 5-byte Confluent header"
    assert framing_error(b'{"a": 1}') == "magic byte is 0x7b, not 0"
