"""The C row encoder (:func:`bridge.native.encode_row`) against the Python path.

What users rely on: a row the accelerator encodes is byte for byte what the Python converters
and :func:`bridge.sink.avro_writer.compile_writer` produce for the same TupleData, for the key
as for the value; anything it does not reproduce exactly (unchanged TOAST, NULL keys, NaN,
infinities, BC dates, out-of-range or malformed values) it hands back to Python (``None``), so
the output and the errors stay those of the Python path.

Values are rendered the way PostgreSQL's output (text) and send (binary) functions write them,
computed here with :mod:`datetime` and plain integer arithmetic, not with bridge's helpers.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.adapt import PyFormat, Transformer

from bridge import native
from bridge.pgoutput.messages import (
    COLUMN_FLAG_KEY,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    TupleData,
)
from bridge.pgoutput.rows import make_tuple
from bridge.schema import EncodedRow, RelationSchemas, TableHints, relation_schemas
from bridge.sink.avro_writer import Writer, compile_writer
from bridge.types import ConversionError, TypeMapper, TypeOptions
from tests.examples import examples
from tests.native.wide_forms import arrays, inets, intervals, unconstrained_numerics

# --- PostgreSQL wire forms -----------------------------------------------------------------------

INT2, INT4, INT8, TEXT, VARCHAR, BPCHAR, NAME = 21, 23, 20, 25, 1043, 1042, 19
JSON, JSONB, BOOL, FLOAT8, NUMERIC = 114, 3802, 16, 701, 1700
TIMESTAMPTZ, TIMESTAMP, DATE, UUID, INTERVAL = 1184, 1114, 1082, 2950, 1186
BYTEA, TIME, INET = 17, 1083, 869
MONEY, POINT, FLOAT4, NUMERIC_ARRAY, POINT_ARRAY = 790, 600, 700, 1231, 1017
INT2_ARRAY, INT4_ARRAY, INT8_ARRAY, TEXT_ARRAY, VARCHAR_ARRAY = 1005, 1007, 1016, 1009, 1015

PG_EPOCH = datetime(2000, 1, 1)
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970
PG_MAX_TIMESTAMP = bytes.fromhex("7fffff5bb3b29fff")  # 294276-12-31 23:59:59.999999 (binary)
NUMERIC_NAN = bytes.fromhex("00000000c0000000")  # numeric_send of NaN
US = timedelta(microseconds=1)
_NUMERIC_DUMPER = Transformer(None).get_dumper(Decimal(0), PyFormat.BINARY)


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


def pg_numeric(unscaled: int, scale: int) -> bytes:
    """numeric_out of a numeric(p, s) value: always exactly ``scale`` fraction digits."""
    sign = "-" if unscaled < 0 else ""
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    text = f"{sign}{digits[:-scale]}.{digits[-scale:]}" if scale else f"{sign}{digits}"
    return text.encode()


def numeric_send(unscaled: int, scale: int) -> bytes:
    dumped = _NUMERIC_DUMPER.dump(Decimal(unscaled).scaleb(-scale))
    assert dumped is not None
    return bytes(dumped)


def pg_float8(x: float) -> bytes:
    """float8out (shortest exact): Python's repr without a ``.0`` ("1", "-0", "1e-07")."""
    text = repr(x)
    return (text[:-2] if text.endswith(".0") else text).encode()


def pg_offset(seconds: int) -> str:
    """An ISO DateStyle UTC offset: ``+00``, ``-03``, ``+05:30``, ``+05:53:28``."""
    sign = "-" if seconds < 0 else "+"
    h, rest = divmod(abs(seconds), 3600)
    m, s = divmod(rest, 60)
    text = f"{sign}{h:02d}"
    if m or s:
        text += f":{m:02d}"
    if s:
        text += f":{s:02d}"
    return text


def pg_timestamp(local: datetime) -> str:
    """timestamp_out in ISO DateStyle: fraction trimmed of trailing zeros, none when zero."""
    frac = f".{local.microsecond:06d}".rstrip("0") if local.microsecond else ""
    return f"{local.year:04d}-{local:%m-%d %H:%M:%S}{frac}"  # %Y does not pad years < 1000


def micros_since_2000(local: datetime) -> int:
    return (local - PG_EPOCH) // US


def be(n: int, size: int) -> bytes:
    return n.to_bytes(size, "big", signed=True)


# --- value strategies: (text form, binary form) of one value ----------------------------------

Pair = tuple[bytes, bytes]


def ints(bits: int) -> st.SearchStrategy[Pair]:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return st.integers(lo, hi).map(lambda n: (str(n).encode(), be(n, bits // 8)))


def strings() -> st.SearchStrategy[Pair]:
    return st.text(st.characters(exclude_categories=["Cs"]), max_size=40).map(
        lambda s: (s.encode(), s.encode())
    )


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


def json_text(version: bytes = b"") -> st.SearchStrategy[Pair]:
    """JSON text; jsonb's binary form prefixes the version byte."""
    return _JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=False).encode()).map(
        lambda t: (t, version + t)
    )


def bools() -> st.SearchStrategy[Pair]:
    return st.booleans().map(lambda b: (b"t", b"\x01") if b else (b"f", b"\x00"))


def float8s() -> st.SearchStrategy[Pair]:
    edges = st.sampled_from([1e-07, 1.5e300, -0.0, 0.0, 5e-324, 1.7976931348623157e308, 1e15])
    return (st.floats(allow_nan=False, allow_infinity=False) | edges).map(
        lambda x: (pg_float8(x), struct.pack(">d", x))
    )


def numerics(precision: int, scale: int) -> st.SearchStrategy[Pair]:
    limit = 10**precision - 1
    return st.integers(-limit, limit).map(lambda u: (pg_numeric(u, scale), numeric_send(u, scale)))


_DATETIMES = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59))
_OFFSETS = st.sampled_from([0, 3600, -3 * 3600, 5 * 3600 + 1800, 5 * 3600 + 53 * 60 + 28]) | (
    st.integers(-15 * 3600, 15 * 3600)
)


def timestamptzs() -> st.SearchStrategy[Pair]:
    """Local wall clock plus offset as printed; binary is the UTC instant."""

    def render(local: datetime, offset: int) -> Pair:
        instant = micros_since_2000(local) - offset * 1_000_000
        return f"{pg_timestamp(local)}{pg_offset(offset)}".encode(), be(instant, 8)

    return st.builds(render, _DATETIMES, _OFFSETS)


def timestamps() -> st.SearchStrategy[Pair]:
    return _DATETIMES.map(lambda t: (pg_timestamp(t).encode(), be(micros_since_2000(t), 8)))


def dates() -> st.SearchStrategy[Pair]:
    return st.dates().map(
        lambda d: (d.isoformat().encode(), be(d.toordinal() - PG_EPOCH.toordinal(), 4))
    )


def uuids() -> st.SearchStrategy[Pair]:
    return st.uuids().map(lambda u: (str(u).encode(), u.bytes))


def byteas() -> st.SearchStrategy[Pair]:
    """bytea_out's hex format (the walsender runs with bytea_output=hex); send is raw."""
    return st.binary(max_size=40).map(lambda b: (b"\\x" + b.hex().encode(), b))


def times() -> st.SearchStrategy[Pair]:
    """time_out: HH:MM:SS, fraction trimmed; 24:00:00 is a valid time."""

    def render(t: time) -> Pair:
        frac = f".{t.microsecond:06d}".rstrip("0") if t.microsecond else ""
        micros = ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
        return f"{t:%H:%M:%S}{frac}".encode(), be(micros, 8)

    midnight_end = (b"24:00:00", be(86_400_000_000, 8))
    return st.times().map(render) | st.just(midnight_end)


@dataclass(frozen=True)
class Column:
    name: str
    oid: int
    typmod: int
    values: st.SearchStrategy[Pair]
    binary_native: bool = True  # False: the C encoder has no binary form (inet)


COLUMNS: tuple[Column, ...] = (
    Column("i8", INT8, -1, ints(64)),
    Column("i2", INT2, -1, ints(16)),
    Column("i4", INT4, -1, ints(32)),
    Column("txt", TEXT, -1, strings()),
    Column("vc", VARCHAR, 44, strings()),
    Column("bp", BPCHAR, 9, strings()),
    Column("nm", NAME, -1, strings()),
    Column("js", JSON, -1, json_text()),
    Column("jsb", JSONB, -1, json_text(b"\x01")),
    Column("flag", BOOL, -1, bools()),
    Column("f8", FLOAT8, -1, float8s()),
    Column("n12_2", NUMERIC, numeric_typmod(12, 2), numerics(12, 2)),
    Column("n18_0", NUMERIC, numeric_typmod(18, 0), numerics(18, 0)),
    Column("n18_6", NUMERIC, numeric_typmod(18, 6), numerics(18, 6)),
    Column("n5_5", NUMERIC, numeric_typmod(5, 5), numerics(5, 5)),
    Column("tstz", TIMESTAMPTZ, -1, timestamptzs()),
    Column("ts", TIMESTAMP, -1, timestamps()),
    Column("d", DATE, -1, dates()),
    Column("u", UUID, -1, uuids()),
    Column("raw", BYTEA, -1, byteas()),
    Column("tm", TIME, -1, times()),
    # The wide table's families (tests/native/wide_forms.py renders them).
    Column("iv", INTERVAL, -1, intervals()),
    Column("num", NUMERIC, -1, unconstrained_numerics()),
    Column("ai4", INT4_ARRAY, -1, arrays(ints(32), INT4)),
    Column("ai8", INT8_ARRAY, -1, arrays(ints(64), INT8)),
    Column("ai2", INT2_ARRAY, -1, arrays(ints(16), INT2)),
    Column("atx", TEXT_ARRAY, -1, arrays(strings(), TEXT)),
    Column("avc", VARCHAR_ARRAY, 44, arrays(strings(), VARCHAR)),
    Column(
        "an12_2",
        NUMERIC_ARRAY,
        numeric_typmod(12, 2),
        arrays(numerics(12, 2), NUMERIC),
    ),
    Column("ip", INET, -1, inets(), binary_native=False),
)
BY_NAME = {c.name: c for c in COLUMNS}

# --- tables and the Python reference -----------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """A table version's schemas with the Python writers of its Value and Key records."""

    schemas: RelationSchemas
    row_writer: Writer
    key_writer: Writer | None

    @classmethod
    def build(
        cls,
        columns: Sequence[tuple[str, int, int]],
        *,
        keys: Sequence[str] = (),
        identity: ReplicaIdentity | None = None,
        hints: TableHints | None = None,
        mapper: TypeMapper | None = None,
    ) -> Table:
        """Columns (name, type oid, typmod); a primary key ``keys`` (DEFAULT identity) or
        else REPLICA IDENTITY FULL; ``mapper``: other type options than the defaults."""
        if identity is None:
            identity = ReplicaIdentity.DEFAULT if keys else ReplicaIdentity.FULL
        relation = Relation(
            None,
            16384,
            "public",
            "zoo",
            identity,
            tuple(
                RelationColumn(COLUMN_FLAG_KEY if name in keys else 0, name, oid, typmod)
                for name, oid, typmod in columns
            ),
        )
        schemas = relation_schemas(relation, mapper or TypeMapper(), topic_prefix="pg", hints=hints)
        before = schemas.value_schema["fields"][0]
        assert before["name"] == "before"
        value_record = next(b for b in before["type"] if isinstance(b, dict))
        key = schemas.key_schema
        return cls(schemas, compile_writer(value_record), compile_writer(key) if key else None)

    def python_avro(self, data: TupleData) -> tuple[bytes, bytes | None]:
        """What the Python converters and writers make of a row; raises as they do."""
        row = self.schemas.encoder.values(data)[0]
        buf = bytearray()
        self.row_writer(buf, row)
        if self.key_writer is None:
            return bytes(buf), None
        key_buf = bytearray()
        self.key_writer(key_buf, self.schemas.key_of(row))
        return bytes(buf), bytes(key_buf)

    def c_avro(self, data: TupleData) -> tuple[bytes, bytes | None] | None:
        """The raw answer of the C encoder for this table's plans."""
        encoder = self.schemas.encoder
        assert encoder.native, "this table should have a native plan"
        assert native.encode_row is not None
        return native.encode_row(
            data.buffer,
            data.kinds,
            data.spans,
            encoder._row_plan,  # type: ignore[arg-type]
            encoder._key_plan,
        )


Value = tuple[str, bytes] | str | None  # (kind "t"/"b", raw), None = NULL, "u" = unchanged TOAST


def tuple_data(*values: Value) -> TupleData:
    """A TupleData over a larger message buffer, so spans are absolute (as the decoder makes
    them): a header before the first value and between values."""
    kinds, buffer, spans = bytearray(), bytearray(b"\x00HDR"), []
    for value in values:
        if not isinstance(value, tuple):
            kinds += b"n" if value is None else b"u"
            spans += [0, 0]
        else:
            kind, raw = value
            buffer += b"\x00\x00\x00\x00\x00"  # kind byte and length in a real message
            kinds += kind.encode()
            spans += [len(buffer), len(buffer) + len(raw)]
            buffer += raw
    return make_tuple(bytes(kinds), bytes(buffer) + b"\xff", tuple(spans))


def single(name: str, identity: ReplicaIdentity = ReplicaIdentity.FULL) -> Table:
    """A one-column table of column ``name`` (of COLUMNS), keyed by it: an optional key field
    under FULL, a non-null one under DEFAULT (primary key)."""
    column = BY_NAME[name]
    return Table.build(
        [(column.name, column.oid, column.typmod)], keys=[column.name], identity=identity
    )


def assert_same_row(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """``actual == expected`` as mappings, NaN counting as equal to NaN."""
    nans = {k for k, v in expected.items() if isinstance(v, float) and math.isnan(v)}
    if not nans:
        assert actual == expected
        return
    assert all(math.isnan(actual[k]) for k in nans)
    assert {k: v for k, v in actual.items() if k not in nans} == {
        k: v for k, v in expected.items() if k not in nans
    }


def assert_native_matches(table: Table, data: TupleData) -> EncodedRow:
    """The C path encoded the row, to exactly the Python bytes, and reads as the Python row."""
    encoded, unchanged = table.schemas.encoder.encode(data)
    assert isinstance(encoded, EncodedRow), "expected the C encoder to take this row"
    assert unchanged == []
    assert (encoded.avro, encoded.key_avro) == table.python_avro(data)
    assert_same_row(encoded, table.schemas.encoder.values(data)[0])
    return encoded


def assert_falls_back(table: Table, data: TupleData) -> None:
    """The C encoder declined; the row is the Python converters' dict."""
    assert table.c_avro(data) is None
    row, unchanged = table.schemas.encoder.encode(data)
    assert not isinstance(row, EncodedRow)
    expected_row, expected_unchanged = table.schemas.encoder.values(data)
    assert_same_row(row, expected_row)
    assert unchanged == expected_unchanged


ALL = [(c.name, c.oid, c.typmod) for c in COLUMNS]
TABLES = {
    "full": Table.build(ALL),
    "composite_pk": Table.build(ALL, keys=("i4", "txt", "tstz", "n12_2", "d")),
    "hinted_key": Table.build(ALL, hints=TableHints(key_columns=("d", "i8", "f8"))),
}
SINGLES = {c.name: single(c.name) for c in COLUMNS}

native_only = pytest.mark.skipif(
    os.environ.get("PGBRIDGE_NATIVE") == "0", reason="PGBRIDGE_NATIVE=0 turns the encoder off"
)

# --- 1. the build ----------------------------------------------------------------------------


def test_extension_is_built() -> None:
    """The accelerator is compiled in this environment (fails, never skips, when it is not);
    PGBRIDGE_NATIVE=0 turns it off."""
    if os.environ.get("PGBRIDGE_NATIVE") == "0":
        assert not native.ENABLED
        assert native.encode_row is None
    else:
        assert native.ENABLED, "bridge.native's C extension is not built: pip install -e ."
        assert callable(native.encode_row)


# --- 2. byte equality through the real schema path --------------------------------------------


@st.composite
def rows(draw: st.DrawFn, table: Table) -> tuple[TupleData, bool]:
    """A row of ``table`` in any mix of text, binary and NULL (never NULL in a non-null key),
    and whether the C encoder must take it (no binary inet)."""
    schemas = table.schemas
    non_null = set() if _key_optional(schemas) else set(schemas.key_fields)
    values: list[Value] = []
    expect_native = True
    for column in COLUMNS:
        options = ["t", "b"] if column.name in non_null else ["t", "b", "n"]
        kind = draw(st.sampled_from(options))
        if kind == "n":
            values.append(None)
            continue
        text, binary = draw(column.values)
        values.append((kind, text if kind == "t" else binary))
        if kind == "b" and not column.binary_native:
            expect_native = False
    return tuple_data(*values), expect_native


def _key_optional(schemas: RelationSchemas) -> bool:
    key = schemas.key_schema
    return key is not None and isinstance(key["fields"][0]["type"], list)


@native_only
@pytest.mark.parametrize("table_name", sorted(TABLES))
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rows_encode_to_python_bytes(table_name: str, data: st.DataObject) -> None:
    """Rows of every natively handled type, text and binary, with NULLs: the C bytes of the Value
    and Key records equal the Python writers' (REPLICA IDENTITY FULL keys are optional unions,
    a composite primary key's fields are not, a hinted key has its own field order)."""
    table = TABLES[table_name]
    assert table.schemas.encoder.native
    # A FULL table without key columns has no key record (null message keys).
    key_optional = None if table.schemas.key_schema is None else _key_optional(table.schemas)
    assert key_optional is {"full": None, "composite_pk": False, "hinted_key": True}[table_name]
    tup, expect_native = data.draw(rows(table))
    if expect_native:
        assert_native_matches(table, tup)
    else:
        assert_falls_back(table, tup)


# --- 3. values the C encoder hands back to Python ----------------------------------------------

FALLBACKS: list[tuple[str, Value]] = [
    ("raw", ("t", b"abc\\000def")),  # bytea's escape format: psycopg's loader reads it
    ("tm", ("t", b"12:00:00+02")),  # a zone on a time: the Python reader ignores it
    ("n12_2", ("t", b"NaN")),
    ("n12_2", ("t", b"Infinity")),
    ("n12_2", ("t", b"-Infinity")),
    ("n18_0", ("t", b"1234567890123456789")),  # 19 digits: beyond int64-safe unscaled
    ("n18_6", ("t", b"12345678901234.1234567")),  # more fraction digits than the scale
    ("n12_2", ("b", NUMERIC_NAN)),
    ("n12_2", ("b", NUMERIC_NAN[:4] + b"\xd0\x00" + NUMERIC_NAN[6:])),  # Infinity
    ("num", ("b", NUMERIC_NAN[:4] + b"\xf0\x00" + NUMERIC_NAN[6:])),  # -Infinity
    ("n18_0", ("b", numeric_send(10**18, 0))),  # 19 digits: beyond int64-safe unscaled
    ("num", ("b", numeric_send(10**130, 0))),  # more digits than the C path holds
    # Not what numeric_send writes (a base-10000 digit of 10000): declined, the loader judges.
    ("n12_2", ("b", b"\x00\x01\x00\x00\x00\x00\x00\x00\x27\x10")),
    ("tstz", ("t", b"infinity")),
    ("tstz", ("t", b"-infinity")),
    ("tstz", ("t", b"0044-03-15 12:00:00+00 BC")),
    ("tstz", ("t", b"12021-01-01 00:00:00+00")),
    ("tstz", ("t", b"2024-01-01T00:00:00+00")),  # not ISO DateStyle's space
    ("ts", ("t", b"infinity")),
    ("ts", ("t", b"-infinity")),
    ("ts", ("t", b"0001-01-01 00:00:00 BC")),
    ("ts", ("t", b"10000-01-01 00:00:00")),
    ("d", ("t", b"infinity")),
    ("d", ("t", b"-infinity")),
    ("d", ("t", b"0001-12-31 BC")),
    ("d", ("t", b"10000-01-01")),
    ("i8", ("t", b"12345678901234567890")),  # 20 digits: out of int64
    ("i8", ("t", b"-9223372036854775809")),
    ("i8", ("t", b"+5")),  # int() reads it; not the server's spelling
    ("f8", ("t", b"NaN")),
    ("f8", ("t", b"Infinity")),
    ("f8", ("t", b"-Infinity")),
    ("flag", ("t", b"true")),  # not boolout's spelling
    # Past Avro's long microseconds: the Python converters clamp and count them.
    ("ts", ("b", be(2**63 - 1 - PG_EPOCH_US, 8))),  # would land on the infinity sentinel
    ("ts", ("b", PG_MAX_TIMESTAMP)),
    ("tstz", ("b", PG_MAX_TIMESTAMP)),
    ("ts", ("t", b"294276-12-31 23:59:59.999999")),
    ("tstz", ("t", b"294276-12-31 23:59:59.999999+00")),
    ("ts", ("t", b"4714-11-24 00:00:00 BC")),  # PostgreSQL's minimum: exact, in Python
]


@native_only
@pytest.mark.parametrize(("name", "value"), FALLBACKS, ids=lambda v: repr(v)[:40])
def test_unusual_values_fall_back_to_python(name: str, value: Value) -> None:
    """Values the C encoder does not reproduce (NaN, infinities, BC and 5-digit years, numbers
    beyond int64 or the scale, binary forms that are not numeric_send's) go through the Python
    converters."""
    assert_falls_back(SINGLES[name], tuple_data(value))


@native_only
def test_unchanged_toast_falls_back() -> None:
    """An unchanged TOASTed column ('u') takes the Python path, which lists it."""
    table = Table.build([("id", INT4, -1), ("body", TEXT, -1)], keys=["id"])
    tup = tuple_data(("t", b"1"), "u")
    assert_falls_back(table, tup)
    assert table.schemas.encoder.encode(tup)[1] == ["body"]


@native_only
def test_null_in_non_null_key_falls_back() -> None:
    """A NULL in a primary-key field (not a union in the Key record) is Python's to handle."""
    table = Table.build([("id", INT4, -1), ("body", TEXT, -1)], keys=["id"])
    assert_falls_back(table, tuple_data(None, ("t", b"x")))
    assert_native_matches(table, tuple_data(("t", b"1"), None))


@native_only
@pytest.mark.parametrize(
    ("oid", "typmod", "raw"),
    [
        (MONEY, -1, b"$1.50"),
        (POINT, -1, b"(1,2)"),
        (FLOAT4, -1, b"1.5"),
        (NUMERIC, numeric_typmod(38, 10), b"1.5000000000"),  # precision beyond 18 digits
        (NUMERIC_ARRAY, numeric_typmod(38, 10), b"{1.5000000000}"),  # items beyond 18 digits
        (POINT_ARRAY, -1, b'{"(1,2)"}'),  # items without a native form
    ],
)
def test_table_with_unsupported_type_has_no_plan(oid: int, typmod: int, raw: bytes) -> None:
    """One column without a native form: the table gets no plan at all, and still encodes."""
    table = Table.build([("id", INT8, -1), ("other", oid, typmod)], keys=["id"])
    assert not table.schemas.encoder.native
    tup = tuple_data(("t", b"7"), ("t", raw))
    row, unchanged = table.schemas.encoder.encode(tup)
    assert not isinstance(row, EncodedRow)
    assert (row, unchanged) == table.schemas.encoder.values(tup)
    table.python_avro(tup)  # the Python writers accept it


@native_only
@pytest.mark.parametrize(
    "value",
    [
        ("b", PG_MAX_TIMESTAMP),
        ("t", b"294276-12-31 23:59:59.999999+00"),
        ("b", be(2**63 - 1 - PG_EPOCH_US, 8)),
    ],
)
def test_timestamp_past_avro_long_is_clamped_by_python(value: Value) -> None:
    """The C path declines; the Python converter delivers int64 max - 1 (max is infinity)."""
    row, _ = SINGLES["tstz"].schemas.encoder.encode(tuple_data(value))
    assert not isinstance(row, EncodedRow)
    assert row == {"tstz": 2**63 - 2}


ZONED = Table.build(
    [("id", INT8, -1), ("tstz", TIMESTAMPTZ, -1)],
    keys=["id"],
    mapper=TypeMapper(TypeOptions(timestamptz_handling="string")),
)


@native_only
@settings(max_examples=examples(500), deadline=None)
@given(value=timestamptzs(), binary=st.booleans())
def test_zoned_timestamps_encode_to_python_bytes(value: Pair, binary: bool) -> None:
    """``timestamptz.handling.mode = string`` (Debezium's ZonedTimestamp): the C text equals
    the Python converter's for every instant of years 1..9999 at any offset, text and binary
    (instants in year 0 included)."""
    text, raw = value
    assert_native_matches(ZONED, tuple_data(("t", b"1"), ("b", raw) if binary else ("t", text)))


@native_only
@pytest.mark.parametrize(
    "value",
    [
        ("t", b"infinity"),
        ("t", b"-infinity"),
        ("b", be(2**63 - 1, 8)),
        ("b", be(-(2**63), 8)),
        ("t", b"0001-01-01 00:00:00+05"),  # an instant of year 0: "0000-12-31T19:00:00Z"
        ("t", b"2024-02-29 23:59:59.000001-00:30"),
    ],
)
def test_zoned_edge_values_encode_to_python_bytes(value: Value) -> None:
    assert_native_matches(ZONED, tuple_data(("t", b"1"), value))


TIMESTAMPTZ_ARRAY = 1185
ZONED_ARRAYS = Table.build(
    [("id", INT8, -1), ("atz", TIMESTAMPTZ_ARRAY, -1), ("atz3", TIMESTAMPTZ_ARRAY, 3)],
    keys=["id"],
    mapper=TypeMapper(TypeOptions(timestamptz_handling="string")),
)


@native_only
@settings(max_examples=examples(300), deadline=None)
@given(
    six=arrays(timestamptzs(), TIMESTAMPTZ),
    three=arrays(timestamptzs(), TIMESTAMPTZ),
    binary=st.booleans(),
)
def test_zoned_array_items_are_padded_like_debeziums_in_c_as_in_python(
    six: Pair, three: Pair, binary: bool
) -> None:
    """A timestamptz[]'s ZonedTimestamp items have the fraction padded to the column's
    precision (6 unless declared), as Debezium writes them; the C text equals Python's."""
    form = 1 if binary else 0
    kind = "b" if binary else "t"
    assert_native_matches(
        ZONED_ARRAYS, tuple_data(("t", b"1"), (kind, six[form]), (kind, three[form]))
    )


def test_zoned_array_items_and_scalars_differ_only_in_the_padding() -> None:
    row = ZONED_ARRAYS.schemas.encoder.values(
        tuple_data(
            ("t", b"1"),
            ("t", b'{"2024-01-02 03:04:05.5+00","2024-01-02 03:04:05+00",NULL}'),
            ("t", b'{"2024-01-02 03:04:05.5+00"}'),
        )
    )[0]
    assert row["atz"] == ["2024-01-02T03:04:05.500000Z", "2024-01-02T03:04:05.000000Z", None]
    assert row["atz3"] == ["2024-01-02T03:04:05.500Z"]
    scalar = ZONED.schemas.encoder.values(
        tuple_data(("t", b"1"), ("t", b"2024-01-02 03:04:05.5+00"))
    )
    assert scalar[0]["tstz"] == "2024-01-02T03:04:05.5Z"


@native_only
@pytest.mark.parametrize(
    "value",
    [
        ("t", b"10000-01-01 00:00:00+00"),  # Python spells expanded years
        ("t", b"0044-03-15 12:00:00+00 BC"),
        ("b", be(2**63 - 2, 8)),  # past Avro's long once moved to 1970
    ],
)
def test_zoned_values_outside_years_0_to_9999_take_python(value: Value) -> None:
    assert_falls_back(ZONED, tuple_data(("t", b"1"), value))


@native_only
@pytest.mark.parametrize(
    ("options", "oid", "raw"),
    [
        (TypeOptions(binary_handling="base64"), BYTEA, b"\\x00ff"),
        (TypeOptions(time_precision="connect"), TIMESTAMP, b"2024-01-01 00:00:00.123456"),
        (TypeOptions(time_precision="connect"), DATE, b"2024-01-01"),
        (TypeOptions(time_precision="connect"), TIME, b"12:00:00.5"),
        (TypeOptions(interval_handling="string"), INTERVAL, b"1 day 02:03:04.5"),
        (TypeOptions(unconstrained_numeric="string"), NUMERIC, b"3.14"),
        (TypeOptions(unconstrained_numeric="double"), NUMERIC, b"3.14"),
        (TypeOptions(decimal_handling="string"), NUMERIC, b"3.14"),
    ],
)
def test_handling_modes_without_native_form_take_the_python_path(
    options: TypeOptions, oid: int, raw: bytes
) -> None:
    """A handling mode whose output the C encoder does not produce gives the table no plan."""
    relation = Relation(
        None,
        16384,
        "public",
        "zoo",
        ReplicaIdentity.DEFAULT,
        (RelationColumn(COLUMN_FLAG_KEY, "id", INT8, -1), RelationColumn(0, "v", oid, -1)),
    )
    schemas = relation_schemas(relation, TypeMapper(options), topic_prefix="pg")
    assert not schemas.encoder.native
    row, _ = schemas.encoder.encode(tuple_data(("t", b"7"), ("t", raw)))
    assert not isinstance(row, EncodedRow)


# --- 4. errors are Python's ------------------------------------------------------------------

MALFORMED: list[tuple[str, Value]] = [
    ("i4", ("t", b"abc")),
    ("i8", ("t", b"")),
    ("txt", ("t", b"caf\xc3")),  # truncated UTF-8
    ("txt", ("b", b"\xff\xfe")),
    ("js", ("t", b"\xed\xa0\x80")),  # an encoded surrogate
    ("jsb", ("b", b'\x02{"a": 1}')),  # unknown jsonb version
    ("jsb", ("b", b"")),
    ("jsb", ("b", b"\x01\xff")),  # not UTF-8 after the version byte
    ("num", ("b", b"\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01")),  # 2 digits, 1 sent
    ("n12_2", ("b", b"\x00\x00\x00")),  # shorter than the header
    ("d", ("t", b"yesterday")),
    ("tstz", ("t", b"tomorrow")),
    ("ts", ("t", b"not a time")),
    ("n12_2", ("t", b"12,50")),
    ("f8", ("t", b"1.5.5")),
    ("u", ("t", "caf\u00e9".encode())),  # not ASCII
    ("u", ("b", b"\x00" * 15)),  # not 16 bytes
    ("tm", ("t", b"12:3")),
]


@native_only
@pytest.mark.parametrize(("name", "value"), MALFORMED, ids=lambda v: repr(v)[:40])
def test_malformed_values_raise_python_conversion_error(name: str, value: Value) -> None:
    """A value the converters cannot read still raises ConversionError naming table and
    column: the C encoder declines it rather than writing or failing on its own."""
    table = SINGLES[name]
    tup = tuple_data(value)
    assert table.c_avro(tup) is None
    with pytest.raises(ConversionError) as info:
        table.schemas.encoder.encode(tup)
    assert (info.value.table, info.value.column) == ("public.zoo", name)


WRITER_REFUSED: list[tuple[str, Value]] = [
    ("i4", ("t", b"2147483648")),  # int4 text beyond the Avro int
    ("i4", ("t", b"-2147483649")),
    ("i2", ("b", be(1 << 40, 8))),  # an 8-byte value in an int2 column
    ("n12_2", ("t", b"12345678901.00")),  # 13 digits in numeric(12,2)
    ("n12_2", ("t", b"1.005")),  # more fraction digits than the scale
    ("d", ("b", be(2**31 - 10_000, 4))),  # days since 1970 beyond int32
]


@native_only
@pytest.mark.parametrize(("name", "value"), WRITER_REFUSED, ids=lambda v: repr(v)[:40])
def test_values_the_avro_writer_refuses_are_not_encoded(name: str, value: Value) -> None:
    """Where the Python writer refuses the converted value (out of the Avro type's range or
    the decimal's precision), the C encoder must not write bytes for it either."""
    table = SINGLES[name]
    tup = tuple_data(value)
    with pytest.raises(ValueError):
        table.python_avro(tup)
    assert table.c_avro(tup) is None


# --- 5. edge values ----------------------------------------------------------------------------


def _tstz(local: datetime, offset: int) -> Value:
    return ("t", f"{pg_timestamp(local)}{pg_offset(offset)}".encode())


EDGES: list[tuple[str, Value]] = [
    ("raw", ("t", b"\\xDEADbeef")),  # upper-case hex digits
    ("raw", ("t", b"\\x")),  # empty
    ("u", ("t", b"00000000-0000-0000-0000-000000000000")),
    ("tm", ("t", b"00:00:00")),
    ("tm", ("b", be(86_400_000_000, 8))),
    ("i8", ("t", b"-9223372036854775808")),
    ("i8", ("t", b"9223372036854775807")),
    ("i8", ("b", be(-(2**63), 8))),
    ("i8", ("b", be(2**63 - 1, 8))),
    ("i8", ("t", b"-0")),
    ("i2", ("t", b"-32768")),
    ("i2", ("t", b"32767")),
    ("i2", ("b", be(-32768, 2))),
    ("i2", ("b", be(32767, 2))),
    ("i4", ("t", b"-2147483648")),
    ("i4", ("b", be(2**31 - 1, 4))),
    ("txt", ("t", b"")),
    ("txt", ("b", b"")),
    ("txt", ("t", "emoji 🐘 and CJK 漢字 and é".encode())),
    ("txt", ("t", b"x" * 100_000)),  # beyond the encoder's 1 kB local buffer
    ("vc", ("b", ("ü" * 50_000).encode())),
    ("nm", ("t", b"a\x00b")),
    ("js", ("t", b'{"k": "\xe2\x82\xac", "n": [1, 2.5, null]}')),
    ("jsb", ("t", b"[]")),
    ("flag", ("t", b"t")),
    ("flag", ("t", b"f")),
    ("flag", ("b", b"\x00")),
    ("flag", ("b", b"\x02")),
    ("f8", ("t", b"-0")),
    ("f8", ("b", struct.pack(">d", -0.0))),
    ("f8", ("t", b"1e-07")),
    ("f8", ("t", b"1.5e+300")),
    ("f8", ("t", b"5e-324")),
    ("f8", ("t", b"1.7976931348623157e+308")),
    ("f8", ("b", struct.pack(">d", float("nan")))),
    ("f8", ("b", struct.pack(">d", float("-inf")))),
    ("n12_2", ("t", b"0.00")),
    ("n12_2", ("t", b"-0.00")),
    ("n12_2", ("t", b"-0.50")),
    ("n12_2", ("t", b"12.00")),
    ("n12_2", ("t", b"9999999999.99")),
    ("n12_2", ("t", b"-9999999999.99")),
    ("n12_2", ("t", b"1.28")),  # unscaled 128: 0x0080, two bytes
    ("n12_2", ("t", b"-1.28")),  # unscaled -128: 0xff80 (fastavro's width)
    ("n12_2", ("t", b"2.55")),  # 255: 0x00ff
    ("n12_2", ("t", b"-1.29")),  # -129: 0xff7f
    ("n12_2", ("t", b"0.01")),
    ("n12_2", ("t", b"-0.01")),
    ("n12_2", ("t", b"1.5")),  # fewer fraction digits than the scale
    ("n12_2", ("t", b"000012.30")),
    ("n18_0", ("t", b"0")),
    ("n18_0", ("t", b"999999999999999999")),
    ("n18_0", ("t", b"-999999999999999999")),
    ("n18_0", ("t", b"128")),
    ("n18_0", ("t", b"-129")),
    ("n18_6", ("t", b"999999999999.999999")),
    ("n18_6", ("t", b"-0.000001")),
    ("n5_5", ("t", b"0.99999")),
    ("n5_5", ("t", b"-0.99999")),
    ("tstz", _tstz(datetime(1970, 1, 1), 0)),
    ("tstz", ("t", b"1970-01-01 00:00:00+00")),
    ("tstz", _tstz(datetime(1, 1, 1), 0)),
    ("tstz", _tstz(datetime(1, 1, 1), 5 * 3600 + 53 * 60 + 28)),  # UTC instant in year 0
    ("tstz", _tstz(datetime(9999, 12, 31, 23, 59, 59, 999999), 0)),
    ("tstz", _tstz(datetime(9999, 12, 31, 23, 59, 59, 999999), -12 * 3600)),
    ("tstz", _tstz(datetime(2026, 11, 22, 5, 21, 2, 123456), 0)),
    ("tstz", _tstz(datetime(2026, 11, 22, 5, 21, 2, 120000), 5 * 3600 + 1800)),
    ("tstz", _tstz(datetime(1900, 6, 1, 12), -(4 * 3600 + 56 * 60 + 2))),
    ("tstz", ("t", b"2024-02-29 23:59:59.5-03")),
    ("tstz", ("b", be(0, 8))),
    ("tstz", ("b", be(2**63 - 1, 8))),  # infinity
    ("tstz", ("b", be(-(2**63), 8))),  # -infinity
    ("ts", ("t", b"1970-01-01 00:00:00")),
    ("ts", ("t", b"0001-01-01 00:00:00")),
    ("ts", ("t", b"9999-12-31 23:59:59.999999")),
    ("ts", ("t", b"2000-01-01 00:00:00.000001")),
    ("ts", ("b", be(micros_since_2000(datetime(1, 1, 1)), 8))),
    ("ts", ("b", be(2**63 - 1, 8))),
    ("ts", ("b", be(2**63 - 2 - PG_EPOCH_US, 8))),  # the last one C shifts itself: int64 max - 1
    ("d", ("t", b"1970-01-01")),
    ("d", ("t", b"0001-01-01")),
    ("d", ("t", b"9999-12-31")),
    ("d", ("t", b"2000-02-29")),
    ("d", ("b", be(date(1, 1, 1).toordinal() - PG_EPOCH.toordinal(), 4))),
    ("d", ("b", be(2**31 - 1, 4))),  # infinity
    ("d", ("b", be(-(2**31), 4))),  # -infinity
]


@native_only
@pytest.mark.parametrize("identity", [ReplicaIdentity.FULL, ReplicaIdentity.DEFAULT])
@pytest.mark.parametrize(("name", "value"), EDGES, ids=lambda v: repr(v)[:40])
def test_edge_values_encode_to_python_bytes(
    name: str, value: Value, identity: ReplicaIdentity
) -> None:
    """Range limits, empty and huge strings, non-ASCII, decimals whose two's complement needs
    an extra byte, -0, timestamps at the calendar's ends and offsets with seconds: the C path
    takes them, as an optional (FULL) and as a non-null (primary key) key field."""
    table = SINGLES[name] if identity is ReplicaIdentity.FULL else single(name, identity)
    assert_native_matches(table, tuple_data(value))


# --- fuzz: garbage never diverges ---------------------------------------------------------------

_NOISE = b"0123456789-+.:eE tfNaIn\x00\xff\xc3"


@st.composite
def near_valid(draw: st.DrawFn, column: Column) -> bytes:
    """A valid text or binary form with a few bytes inserted, dropped or replaced."""
    raw = bytearray(draw(column.values)[draw(st.sampled_from([0, 1]))])
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(raw)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        byte = draw(st.sampled_from(_NOISE))
        if op == "insert":
            raw.insert(at, byte)
        elif at < len(raw):
            if op == "delete":
                del raw[at]
            else:
                raw[at] = byte
    return bytes(raw)


@native_only
@settings(max_examples=examples(2000), deadline=None)
@given(
    column=st.sampled_from(COLUMNS),
    kind=st.sampled_from(["t", "b"]),
    raw=st.data(),
)
def test_garbage_is_declined_or_matches_python(
    column: Column, kind: str, raw: st.DataObject
) -> None:
    """Random bytes in any column: the C encoder never crashes and either declines or writes
    exactly what the Python path writes; if Python raises (converter or writer), C declined."""
    value = raw.draw(st.binary(max_size=40) | near_valid(column), label="raw")
    assert_taken_as_python_writes(SINGLES[column.name], tuple_data((kind, value)))


def assert_taken_as_python_writes(table: Table, tup: TupleData) -> None:
    """What the C encoder takes it writes as the Python path does; where Python raises
    (converter or writer), C must have declined. Declined values are not checked here:
    declining is always allowed, the Python path then judges them."""
    encoded = table.c_avro(tup)
    if encoded is None:
        return
    try:
        expected: tuple[bytes, bytes | None] | None = table.python_avro(tup)
    except Exception:
        expected = None
    assert encoded == expected


# --- helpers kept honest --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("render", "expected"),
    [
        (lambda: pg_numeric(-50, 2), b"-0.50"),
        (lambda: pg_numeric(1200, 2), b"12.00"),
        (lambda: pg_numeric(7, 0), b"7"),
        (lambda: pg_float8(1.0), b"1"),
        (lambda: pg_float8(1e-07), b"1e-07"),
        (lambda: pg_offset(5 * 3600 + 1800), "+05:30"),
        (lambda: pg_offset(-3 * 3600), "-03"),
        (lambda: pg_offset(5 * 3600 + 53 * 60 + 28), "+05:53:28"),
        (lambda: pg_timestamp(datetime(2026, 11, 22, 5, 21, 2, 120000)), "2026-11-22 05:21:02.12"),
        (lambda: pg_timestamp(datetime(1, 1, 1)), "0001-01-01 00:00:00"),
    ],
)
def test_renderers_print_like_postgresql(render: Callable[[], Any], expected: Any) -> None:
    """The test's own renderings follow PostgreSQL's output functions."""
    assert render() == expected


# --- 6. columns added with a default: [T, "null"] unions ---------------------------------------


@native_only
@pytest.mark.parametrize("value", [None, ("t", b"42")])
def test_a_column_added_with_a_default_encodes_its_union_in_that_order(value: Value) -> None:
    """A column whose older rows hold a value (``ADD COLUMN ... DEFAULT``) is the union
    ``[T, "null"]`` with that default: the C encoder writes its branch bytes in that order,
    as the Python writer does, for values and NULLs, beside ``["null", T]`` columns."""
    table = Table.build(
        [("id", INT8, -1), ("added", INT4, -1), ("note", TEXT, -1)],
        keys=["id"],
        hints=TableHints(missing_values={"added": "7"}),
    )
    fields = {f["name"]: f for f in table.schemas.value_schema["fields"][0]["type"][1]["fields"]}
    assert fields["added"]["type"] == ["int", "null"] and fields["added"]["default"] == 7
    assert fields["note"]["type"] == ["null", "string"]
    encoded = assert_native_matches(table, tuple_data(("t", b"1"), value, ("t", b"x")))
    assert encoded["added"] == (None if value is None else 42)
