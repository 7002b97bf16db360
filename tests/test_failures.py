"""The failure policy and the dead-letter record (pure)."""

from __future__ import annotations

import json

import pytest

from bridge.failures import DEAD_LETTERED, FailurePolicy, dead_letter_record, raw_text
from bridge.pgoutput.messages import TupleData
from bridge.types import ConversionError


def _tuple(*parts: tuple[bytes, bytes]) -> TupleData:
    kinds, buffer, spans = b"", b"", []
    for kind, raw in parts:
        kinds += kind
        spans += [len(buffer), len(buffer) + len(raw)]
        buffer += raw
    return TupleData(kinds, buffer, tuple(spans))


def test_raw_text_keeps_every_value_as_the_server_sent_it() -> None:
    data = _tuple((b"t", "naïve".encode()), (b"b", b"\x00\x01"), (b"n", b""), (b"u", b""),
                  (b"t", b"\xff"))  # fmt: skip
    assert raw_text(data) == ["naïve", "\\x0001", None, "__debezium_unavailable_value", "\\xff"]
    assert raw_text(None) is None


def test_dead_letter_record_names_table_position_column_and_reason() -> None:
    error = ConversionError("integer", "bad digits", table="s.t", column="id", raw=b"x")
    key, value = dead_letter_record(
        table="s.t",
        topic="p.s.t",
        op="u",
        commit_lsn=(1 << 32) + 0x20,
        seq=7,
        xid=42,
        columns=("id", "name"),
        before=_tuple((b"t", b"1"), (b"t", b"a")),
        after={"id": 2, "name": None},
        error=error,
    )
    doc = json.loads(value)
    assert key == b"s.t"
    assert doc["table"] == "s.t" and doc["topic"] == "p.s.t" and doc["op"] == "u"
    assert (doc["commit_lsn"], doc["lsn"], doc["seq"], doc["xid"]) == (
        (1 << 32) + 32,
        "1/20",
        7,
        42,
    )
    assert doc["column"] == "id" and doc["error"] == "ConversionError"
    assert "bad digits" in doc["reason"]
    assert doc["before"] == {"id": "1", "name": "a"}
    assert doc["after"] == {"id": "2", "name": None}


def test_dead_letter_record_of_a_malformed_tuple_keeps_values_by_position() -> None:
    _, value = dead_letter_record(
        table="s.t", topic="p.s.t", op="c", commit_lsn=1, seq=0, xid=1, columns=("a", "b"),
        before=None, after=_tuple((b"t", b"1")), error=ValueError("short tuple"),
    )  # fmt: skip
    assert json.loads(value)["after"] == {"0": "1"}


def test_failure_policy_needs_a_topic_unless_it_fails() -> None:
    assert FailurePolicy("fail").stops
    with pytest.raises(ValueError, match="dead-letter topic"):
        FailurePolicy("warn")
    with pytest.raises(ValueError, match="not one of"):
        FailurePolicy("ignore", "t")  # type: ignore[arg-type]


def test_failure_policy_warn_logs_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    before = DEAD_LETTERED["s.t"]
    FailurePolicy("warn", "p.dead_letter").report("s.t", "LSN 0/10 seq 1", ValueError("boom"))
    assert DEAD_LETTERED["s.t"] == before + 1
    assert any("s.t" in r.message and "boom" in r.message and r.levelname == "WARNING"
               for r in caplog.records)  # fmt: skip
