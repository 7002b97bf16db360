"""The C decoder of Avro payloads into Arrow columns (bridge.spark.avro_columns): the same
values as fastavro (its path without the C part), every captured type with its extremes,
uncaptured fields of every kind skipped, and a clear error for what it cannot decode."""

from __future__ import annotations

import io
import random
import struct
from decimal import Context, Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from bridge.native.switches import NATIVE, enabled
from bridge.spark.avro_columns import PayloadError, compile_plan, decode, native_decoder

# Off on purpose only under PGBRIDGE_NATIVE=0; a build that lacks the C decoder fails here.
pytestmark = pytest.mark.skipif(
    not enabled(NATIVE), reason="PGBRIDGE_NATIVE=0: the C part is off on purpose"
)


def test_the_c_decoder_is_built() -> None:
    """pip install compiles it; without it the job's task lane stays off."""
    assert native_decoder() is not None


ROW: dict[str, Any] = {
    "type": "record",
    "name": "Value",
    "fields": [
        {"name": "b", "type": ["null", "boolean"]},
        {"name": "i", "type": ["null", "int"]},
        {"name": "l", "type": "long"},
        {"name": "f", "type": ["null", "float"]},
        {"name": "d", "type": ["null", "double"]},
        {"name": "s", "type": ["null", "string"]},
        {"name": "u", "type": ["null", {"type": "string", "logicalType": "uuid"}]},
        {"name": "y", "type": ["null", "bytes"]},
        {
            "name": "n",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 4},
            ],
        },
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {
            "name": "lts",
            "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}],
        },
        # Not captured: skipped by their encodings.
        {"name": "arr", "type": ["null", {"type": "array", "items": "string"}]},
        {"name": "m", "type": ["null", {"type": "map", "values": "long"}]},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 3}},
        {
            "name": "rec",
            "type": [
                "null",
                {"type": "record", "name": "R", "fields": [{"name": "x", "type": "double"}]},
            ],
        },
    ],
}
ENVELOPE: dict[str, Any] = {
    "type": "record",
    "name": "Envelope",
    "namespace": "t.public.x",
    "fields": [
        {"name": "before", "type": ["null", ROW]},
        {"name": "after", "type": ["null", "Value"]},
        {"name": "op", "type": "string"},
        {"name": "unchanged_toast_columns", "type": {"type": "array", "items": "string"}},
    ],
}
CAPTURED = ["b", "i", "l", "f", "d", "s", "u", "y", "n", "day", "ts", "lts"]
EXTREMES: dict[str, list[Any]] = {
    "b": [True, False],
    "i": [-(2**31), 2**31 - 1, 0],
    "l": [-(2**63), 2**63 - 1, 0, -1],
    "f": [float("inf"), -0.0, 3.5e38, float("-inf")],
    "d": [float("inf"), -0.0, 1.7976931348623157e308, 5e-324],
    "s": ["", "é日本語🙂", "x" * 10_000, "a\x00b"],
    "u": ["123e4567-e89b-12d3-a456-426614174000"],
    "y": [b"", b"\x00\xff" * 100],
    "n": [
        Decimal("9999999999999999999999999999999999.9999"),
        Decimal("-9999999999999999999999999999999999.9999"),
        Decimal("0.0001"),
        Decimal("0"),
    ],
    "day": [-(2**31), 2**31 - 1, 0],
    "ts": [-(2**63), 2**63 - 1, 0],
    "lts": [-(2**63), 2**63 - 1],
}


def _random_row(rng: random.Random) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name in CAPTURED:
        if name != "l" and rng.random() < 0.2:
            row[name] = None
        else:
            row[name] = rng.choice(EXTREMES[name])
    row["arr"] = rng.choice([None, [], ["p", "q" * 300]])
    row["m"] = rng.choice([None, {}, {"k": 2**40, "": -1}])
    row["e"] = rng.choice(["A", "B"])
    row["fx"] = b"abc"
    row["rec"] = rng.choice([None, {"x": 1.5}])
    return row


def _raw(node: Any) -> Any:  # fastavro writes raw ints and bytes where logical types would be
    if isinstance(node, list):
        return [_raw(n) for n in node]
    if isinstance(node, dict):
        return {k: _raw(v) for k, v in node.items() if k != "logicalType"}
    return node


def _encode(rows: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]) -> pa.Array:
    parsed = fastavro.parse_schema(_raw(ENVELOPE))
    out = []
    for op, before, after in rows:
        buffer = io.BytesIO()
        record = {"before": _wire(before), "after": _wire(after), "op": op,
                  "unchanged_toast_columns": ["s"] if op == "u" else []}  # fmt: skip
        fastavro.schemaless_writer(buffer, parsed, record)
        out.append(b"\x00" + struct.pack(">I", 7) + buffer.getvalue())
    return pa.array(out, pa.binary())


def _wire(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    wire = dict(row)
    if wire["n"] is not None:
        unscaled = int(wire["n"].scaleb(4, Context(prec=80)))
        wire["n"] = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
    return wire


def _captures() -> dict[tuple[str, ...], str]:
    captures = {("after", name): name for name in CAPTURED}
    captures[("before", "l")] = "before_l"
    captures[("op",)] = "op"
    captures[("unchanged_toast_columns",)] = "toast"
    return captures


def test_every_type_decodes_as_fastavro_does(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    rows = []
    for i in range(400):
        after = _random_row(rng) if i % 7 else None
        before = _random_row(rng) if i % 3 == 0 else None
        rows.append(("u" if i % 5 == 0 else "c", before, after))
    payloads = _encode(rows)
    plan = compile_plan(ENVELOPE, _captures())
    assert plan is not None
    native = decode(plan, payloads)
    monkeypatch.setenv("PGBRIDGE_NATIVE", "0")
    slow = decode(plan, payloads)
    assert native.schema == slow.schema
    assert native.equals(slow)
    # And against the rows themselves (a bug shared by both paths is still caught); dates and
    # instants as their integers (their extremes are beyond Python's datetime).
    raw = {"day": pa.int32(), "ts": pa.int64(), "lts": pa.int64()}
    got = {
        name: native.column(name).cast(raw[name]).to_pylist()
        if name in raw
        else native.column(name).to_pylist()
        for name in native.column_names
    }
    for i, (op, before, after) in enumerate(rows):
        assert got["op"][i] == op
        assert got["toast"][i] == (1 if op == "u" else 0)
        assert got["before_l"][i] == (before["l"] if before else None)
        for name in CAPTURED:
            want = after[name] if after else None
            if name == "f" and want is not None:  # float32: as Arrow rounds the double
                assert got[name][i] == pa.scalar(want, pa.float32()).as_py()
            elif name == "d" and want is not None:
                assert struct.pack("<d", got[name][i]) == struct.pack("<d", want)
            else:
                assert got[name][i] == want, (i, name)


def test_types_not_captured_exactly_are_refused() -> None:
    assert compile_plan(ENVELOPE, {("after", "e"): "e"}) is None  # enum: Spark reads a string
    assert compile_plan(ENVELOPE, {("after", "rec"): "rec"}) is None  # a record
    assert compile_plan(ENVELOPE, {("after", "nope"): "nope"}) is None  # no such field
    millis = {"type": "record", "name": "M", "fields": [
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}  # fmt: skip
    assert compile_plan(millis, {("t",): "t"}) is None


def test_a_truncated_payload_is_a_payload_error_naming_the_record() -> None:
    payloads = _encode([("c", None, _random_row(random.Random(1)))] * 3)
    values = payloads.to_pylist()
    values[2] = values[2][:-3]
    plan = compile_plan(ENVELOPE, _captures())
    assert plan is not None
    with pytest.raises(PayloadError, match="record 2"):
        decode(plan, pa.array(values, pa.binary()))
    values[2] = values[1] + b"\x00"  # a byte past the record
    with pytest.raises(PayloadError, match="record 2: bytes left"):
        decode(plan, pa.array(values, pa.binary()))


def test_a_decimal_beyond_its_precision_is_a_payload_error() -> None:
    schema = {"type": "record", "name": "D", "fields": [
        {"name": "n", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4,
                               "scale": 2}}]}  # fmt: skip
    plan = compile_plan(schema, {("n",): "n"})
    assert plan is not None

    def framed(unscaled: int) -> bytes:
        raw = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, fastavro.parse_schema(_raw(schema)), {"n": raw})
        return b"\0\0\0\0\1" + buffer.getvalue()

    table = decode(plan, pa.array([framed(9999), framed(-9999)], pa.binary()))
    assert table.column("n").to_pylist() == [Decimal("99.99"), Decimal("-99.99")]
    with pytest.raises(PayloadError, match="record 1: a decimal that does not fit"):
        decode(plan, pa.array([framed(1), framed(10000)], pa.binary()))


def test_a_sliced_array_decodes_its_own_records() -> None:
    rng = random.Random(3)
    rows = [("c", None, _random_row(rng)) for _ in range(20)]
    payloads = _encode(rows)
    plan = compile_plan(ENVELOPE, _captures())
    assert plan is not None
    assert decode(plan, payloads.slice(5, 10)).equals(decode(plan, payloads).slice(5, 10))


def test_zoned_timestamps_are_read_as_the_driver_reads_them() -> None:
    """Every form the driver reads (its reading is held to Spark's in test_driver_decode) gives
    the same instant here; every form it leaves to Spark is refused here too."""
    from bridge.spark.driver_decode import NotForDriver, zoned_timestamp

    zoned = {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}
    schema = {"type": "record", "name": "Z", "fields": [{"name": "t", "type": ["null", zoned]}]}
    plan = compile_plan(schema, {("t",): "t"})
    assert plan is not None
    rng = random.Random(9)
    texts = ["infinity", "-infinity", "1970-01-01T00:00:00Z", "0001-01-01T00:00:00Z",
             "9999-12-31T23:59:59.999999Z", "2024-02-29T12:00:00.5Z", "2023-02-29T00:00:00Z",
             "2024-13-01T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:60:00Z",
             "0000-01-01T00:00:00Z", "10000-01-01T00:00:00Z", "2024-01-01T00:00:00+01:00",
             "2024-01-01T00:00:00.1234567Z", "2024-01-01T00:00:00.Z", "2024-01-01 00:00:00Z",
             "1900-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "", "x"]  # fmt: skip
    for _ in range(300):
        texts.append(
            f"{rng.randint(1, 9999):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 31):02d}T"
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
            + rng.choice(["", "." + str(rng.randint(0, 999999)).zfill(rng.randint(1, 6))[:6]])
            + "Z"
        )
    parsed = fastavro.parse_schema(schema)

    def payload(text: str | None) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, {"t": text})
        return b"\0\0\0\0\1" + buffer.getvalue()

    for text in texts:
        try:
            want: Any = zoned_timestamp(text)
        except NotForDriver:
            want = PayloadError
        if want is PayloadError:
            with pytest.raises(PayloadError, match="ZonedTimestamp"):
                decode(plan, pa.array([payload(text)], pa.binary()))
        else:
            got = decode(plan, pa.array([payload(text)], pa.binary()))
            assert got.column("t").cast(pa.int64()).to_pylist() == [want], text
    nulls = decode(plan, pa.array([payload(None)], pa.binary()))
    assert nulls.column("t").to_pylist() == [None]
