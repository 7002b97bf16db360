"""Reading a Debezium connector's stored offsets (bridge.source.takeover): the standalone
worker's file, the choice of connector, and the typed refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.config import load_config
from bridge.errors import ConfigError
from bridge.pgoutput.lsn import Lsn
from bridge.source.takeover import TakeoverError, debezium_offset, offsets_from_file

REQUIRED = {
    "topic.prefix": "shop",
    "kafka.bootstrap.servers": "k:9092",
    "database.dbname": "app",
    "schema.registry.url": "http://r:8081",
}


def java_hashmap(entries: list[tuple[object, object]]) -> bytes:
    """What Kafka's FileOffsetBackingStore writes: ObjectOutputStream.writeObject of a
    HashMap<byte[], byte[]> (the class descriptors as Java writes them, each array as TC_ARRAY,
    its class descriptor or a back reference, a 4-byte length and the bytes)."""
    out = bytearray(b"\xac\xed\x00\x05")  # stream header
    out += b"\x73\x72\x00\x11java.util.HashMap\x05\x07\xda\xc1\xc3\x16\x60\xd1\x03\x00\x02F"
    out += b"\x00\x0aloadFactorI\x00\x09thresholdxp?@\x00\x00\x00\x00\x00\x0cw\x08"
    out += b"\x00\x00\x00\x10" + len(entries).to_bytes(4, "big")
    first = True
    for key, value in entries:
        for part in (key, value):
            raw = json.dumps(part, separators=(",", ":")).encode()
            if first:  # the byte[] class descriptor, then back references to it
                out += b"\x75\x72\x00\x02[B\xac\xf3\x17\xf8\x06\x08T\xe0\x02\x00\x00xp"
                first = False
            else:
                out += b"\x75\x71\x00\x7e\x00\x03"
            out += len(raw).to_bytes(4, "big") + raw
    return bytes(out + b"x")


DEBEZIUM = ["inventory-connector", {"server": "shop"}]
OFFSET = {
    "transaction_id": None,
    "lsn_proc": 40_000_336,
    "messageType": "INSERT",
    "lsn_commit": 40_000_200,
    "lsn": 40_000_336,
    "txId": 771,
    "ts_usec": 1_764_300_000_000_000,
}


def test_the_standalone_workers_file_gives_the_connectors_last_commit(tmp_path: Path) -> None:
    path = tmp_path / "offsets"
    other = ["other", {"server": "elsewhere"}]
    path.write_bytes(java_hashmap([(other, {"lsn": 5}), (DEBEZIUM, OFFSET)]))
    entries = offsets_from_file(path)
    assert entries == [(other, {"lsn": 5}), (DEBEZIUM, OFFSET)]
    offset = debezium_offset(entries, "shop", None, str(path))
    assert offset.connector == "inventory-connector" and offset.tx_id == 771
    assert offset.resume_lsn == Lsn(40_000_200)  # after the last committed transaction


def test_without_a_committed_transaction_the_last_change_is_the_position() -> None:
    value = {**OFFSET, "lsn_commit": None}
    assert debezium_offset([(DEBEZIUM, value)], "shop", None, "t").resume_lsn == Lsn(40_000_336)


def test_the_latest_value_wins_and_a_tombstone_removes_the_offset() -> None:
    newer = {**OFFSET, "lsn_commit": 50_000_000}
    assert debezium_offset(
        [(DEBEZIUM, OFFSET), (DEBEZIUM, newer)], "shop", None, "t"
    ).resume_lsn == Lsn(50_000_000)
    with pytest.raises(TakeoverError, match=r"no offsets of a connector with topic\.prefix 'shop'"):
        debezium_offset([(DEBEZIUM, OFFSET), (DEBEZIUM, None)], "shop", None, "t")


def test_refusals_are_typed_and_say_what_to_do() -> None:
    twin = ["twin", {"server": "shop"}]
    with pytest.raises(TakeoverError, match=r"name one \(debezium.connector.name\)"):
        debezium_offset([(DEBEZIUM, OFFSET), (twin, OFFSET)], "shop", None, "t")
    assert debezium_offset(
        [(DEBEZIUM, OFFSET), (twin, {**OFFSET, "lsn_commit": 7})], "shop", "twin", "t"
    ).resume_lsn == Lsn(7)
    snapshotting = {
        "last_snapshot_record": False,
        "lsn": 40_000_000,
        "snapshot": "INITIAL",
        "snapshot_completed": False,
    }
    with pytest.raises(TakeoverError, match="stopped in its initial snapshot"):
        debezium_offset([(DEBEZIUM, snapshotting)], "shop", None, "t")
    done = {**snapshotting, "snapshot_completed": True}
    assert debezium_offset([(DEBEZIUM, done)], "shop", None, "t").resume_lsn == Lsn(40_000_000)
    with pytest.raises(TakeoverError, match="hold no LSN"):
        debezium_offset([(DEBEZIUM, {"txId": 3})], "shop", None, "t")
    with pytest.raises(TakeoverError, match="cannot read the offsets file"):
        offsets_from_file(Path("/nonexistent/offsets"))


def test_takeover_settings() -> None:
    config = load_config(
        None,
        {},
        {
            **REQUIRED,
            "debezium.offsets.topic": "connect-offsets",
            "debezium.connector.name": "inventory-connector",
        },
    )
    assert config.replication.debezium_offsets_topic == "connect-offsets"
    assert config.replication.debezium_connector_name == "inventory-connector"
    assert load_config(None, {}, REQUIRED).replication.debezium_offsets_topic is None
    with pytest.raises(ConfigError, match=r"cannot be combined with debezium\.offsets\.topic"):
        load_config(
            None,
            {},
            {**REQUIRED, "debezium.offsets.topic": "t", "debezium.offsets.file": "/x"},
        )
