"""The decoder against pgoutput bytes captured from real PostgreSQL servers.

``vectors/capture.py`` ran SQL on PostgreSQL 13 to 18 and wrote, next to each message's bytes,
what the message must contain: values from the SQL it ran and positions, xids and timestamps the
server reported through SQL functions. These tests decode the bytes in order, as a replication
client would (the in-stream state carries from one message to the next), and check every
expectation.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from bridge.pgoutput import Decoder, LogicalMessage, Relation, TupleData

from .encoder import encode, tuple_columns

VECTORS = Path(__file__).parent / "vectors"
REQUIRED_MAJORS = {13, 15, 18}


@cache
def _load() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(VECTORS.glob("pg*.json"))}


def _cases() -> list[Any]:
    return [
        pytest.param(name, case, id=f"{name}-{case['name']}")
        for name, data in _load().items()
        for case in data["cases"]
    ]


def _decoder(data: dict[str, Any], case: dict[str, Any]) -> Decoder:
    parallel = case["options"].get("streaming") == "parallel"
    return Decoder(data["proto_version"], streaming_parallel=parallel)


def _columns(t: TupleData) -> list[list[Any]]:
    """Decoded columns in the vectors' notation: text values as text, binary ones as hex."""
    out: list[list[Any]] = []
    for kind, value in tuple_columns(t):
        if value is None:
            out.append([kind, None])
        else:
            out.append([kind, value.decode() if kind == "t" else value.hex()])
    return out


def _check(msg: LogicalMessage, expect: dict[str, Any], row_lsn: int) -> None:
    assert type(msg).__name__ == expect["type"]
    for key, want in expect.items():
        if key == "type":
            continue
        if key.endswith("_between"):
            lo, hi = want
            got = getattr(msg, key.removesuffix("_between"))
            assert lo <= got <= hi, (key, got, want)
        elif key.endswith("_is_row_lsn"):
            assert getattr(msg, key.removesuffix("_is_row_lsn")) == row_lsn, key
        elif key in ("new_tuple", "old_tuple"):
            got_tuple = getattr(msg, key)
            assert (None if got_tuple is None else _columns(got_tuple)) == want, key
        elif key == "columns":
            assert isinstance(msg, Relation)
            got_cols = [
                {
                    "name": c.name,
                    "key": c.is_key,
                    "type_oid": c.type_oid,
                    "type_modifier": c.type_modifier,
                }
                for c in msg.columns
            ]
            assert got_cols == want
        elif key == "replica_identity":
            assert isinstance(msg, Relation) and msg.replica_identity.value == want
        elif key == "content_hex":
            assert getattr(msg, "content").hex() == want  # noqa: B009 - union narrowing
        elif key == "relation_oids":
            assert list(getattr(msg, key)) == want
        elif key == "relation_oids_any_order":
            assert sorted(getattr(msg, "relation_oids")) == sorted(want)  # noqa: B009
        else:
            assert getattr(msg, key) == want, (key, getattr(msg, key), want)


@pytest.mark.parametrize(("version", "case"), _cases())
def test_vectors_decode_to_expected_fields(version: str, case: dict[str, Any]) -> None:
    data = _load()[version]
    decoder = _decoder(data, case)
    assert case["messages"], "a case without messages tests nothing"
    for i, row in enumerate(case["messages"]):
        payload = bytes.fromhex(row["hex"])
        msg = decoder.decode(payload)
        try:
            _check(msg, row["expect"], row["lsn"])
        except AssertionError as exc:
            raise AssertionError(f"message {i} ({row['expect']['type']}): {exc}") from exc
    assert not decoder.in_stream  # every Stream Start had its Stream Stop


@pytest.mark.parametrize(("version", "case"), _cases())
def test_vectors_reencode_byte_for_byte(version: str, case: dict[str, Any]) -> None:
    # The test encoder, fed the decoded message, reproduces the server's bytes exactly: nothing
    # the server sent was dropped or misread, including fields no expectation names (flags).
    decoder = _decoder(_load()[version], case)
    for row in case["messages"]:
        payload = bytes.fromhex(row["hex"])
        assert encode(decoder.decode(payload)) == payload


def test_vectors_cover_required_versions_and_every_message_type() -> None:
    data = _load()
    assert {d["major"] for d in data.values()} >= REQUIRED_MAJORS
    seen = {m["expect"]["type"] for d in data.values() for c in d["cases"] for m in c["messages"]}
    assert seen == {
        "Begin",
        "Commit",
        "Origin",
        "Relation",
        "Type",
        "Insert",
        "Update",
        "Delete",
        "Truncate",
        "Message",
        "StreamStart",
        "StreamStop",
        "StreamCommit",
        "StreamAbort",
        "BeginPrepare",
        "Prepare",
        "CommitPrepared",
        "RollbackPrepared",
        "StreamPrepare",
    }
    kinds = {
        col[0]
        for d in data.values()
        for c in d["cases"]
        for m in c["messages"]
        for key in ("new_tuple", "old_tuple")
        for col in (m["expect"].get(key) or [])
    }
    assert kinds == {"n", "u", "t", "b"}
