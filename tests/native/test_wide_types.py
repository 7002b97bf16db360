"""The C encoder on the wide table's families (interval, numeric without typmod, arrays, inet)
against the Python path.

What users rely on: a table of these types (``bench/pipeline_bench.py --tables wide``) takes the
C path, and every value it encodes is byte for byte what the Python converters and writers
produce; whatever the Python path clamps (intervals beyond a long, counted as lossy), reads
loosely (exponents, bounds prefixes, nested arrays) or refuses (NaN in a decimal, malformed
input) is declined, so the Python path delivers it, counts it or raises its typed error.

Byte equality on generated rows of every type, in any mix of text, binary and NULL, is in
test_rowavro.py (its COLUMNS include these families); this module has the wide table itself,
the edge values, the declines and the fuzzing of these parsers.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.schema import EncodedRow
from bridge.types import ConversionError, lossy
from tests.examples import examples
from tests.native.test_rowavro import (
    BY_NAME,
    DATE,
    INET,
    INT4,
    INT4_ARRAY,
    INT8,
    INTERVAL,
    JSONB,
    NUMERIC,
    SINGLES,
    TEXT,
    TEXT_ARRAY,
    Table,
    Value,
    assert_falls_back,
    assert_native_matches,
    assert_taken_as_python_writes,
    native_only,
    single,
    tuple_data,
)
from tests.native.wide_forms import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    array_out,
    array_send,
    interval_out,
    interval_pair,
    intervals,
    numeric_out,
    numeric_send,
)

UUID, TIME, TIMESTAMP, TIMESTAMPTZ, BYTEA = 2950, 1083, 1114, 1184, 17
US_PER_AVG_MONTH, US_PER_DAY = 2_629_800_000_000, 86_400_000_000

#: bench/pipeline_bench.py's bench_wide, column for column.
WIDE = Table.build(
    [
        ("id", INT8, -1),
        ("iv", INTERVAL, -1),
        ("num", NUMERIC, -1),
        ("ints", INT4_ARRAY, -1),
        ("tags", TEXT_ARRAY, -1),
        ("ip", INET, -1),
        ("u", UUID, -1),
        ("doc", JSONB, -1),
        ("d", DATE, -1),
        ("tm", TIME, -1),
        ("ts", TIMESTAMP, -1),
        ("tz", TIMESTAMPTZ, -1),
        ("raw", BYTEA, -1),
    ],
    keys=["id"],
)


def wide_row(g: int) -> tuple[Value, ...]:
    """The row bench_wide's INSERT writes for ``g`` (text format), as the server prints it."""
    digest = f"{g * 2654435761 % 2**128:032x}"
    return (
        ("t", str(g).encode()),
        ("t", interval_out(0, g % 400, (g % 86400) * 1_000_000)),
        ("t", b"0.14285728571428571429" if g % 2 else b"1428572.8571428571428571"),
        ("t", array_out([str(g % 10).encode(), str(g % 100).encode(), str(g % 1000).encode()])),
        ("t", array_out([f"a{g % 7}".encode(), f"b{g % 11}".encode()])),
        ("t", f"10.{g % 256}.{g // 256 % 256}.1".encode()),
        (
            "t",
            "-".join(
                (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:])
            ).encode(),
        ),
        ("t", f'{{"k": {g % 5000}}}'.encode()),
        ("t", b"2024-03-01"),
        ("t", b"13:14:15"),
        ("t", b"2024-01-01 00:00:00.123"),
        ("t", b"2026-11-24 21:20:00.654321+00"),
        ("t", b"\\x" + digest.encode()),
    )


# --- the wide table ------------------------------------------------------------------------------


@native_only
def test_wide_table_has_a_plan() -> None:
    """Every column of the benchmark's wide table has a native form in the default settings."""
    assert WIDE.schemas.encoder.native


@native_only
@pytest.mark.parametrize("g", [1, 2, 255, 256, 86_399, 86_400, 999_999, 1_000_000])
def test_wide_table_rows_encode_to_python_bytes(g: int) -> None:
    assert_native_matches(WIDE, tuple_data(*wide_row(g)))


# --- edge values the C path takes ----------------------------------------------------------------

# The last intervals below a long: int64 max - 1 and min + 1 are the clamped values themselves.
_MAX_MONTHS = (INT64_MAX - 1) // US_PER_AVG_MONTH

EDGES: list[tuple[str, Value]] = [
    ("iv", ("t", b"00:00:00")),
    ("iv", ("t", b"1 day 02:03:04.5")),
    ("iv", ("t", b"-1 years -2 mons +3 days -04:05:06")),
    ("iv", ("t", b"1 year")),
    ("iv", ("t", b"-1 days +01:00:00")),
    ("iv", ("t", b"-00:00:00.000001")),
    ("iv", ("t", b"+00:00:01")),  # a sign Python reads, on the time part
    ("iv", ("t", b"2562047788:00:54.775806")),  # int64 max - 1 microseconds
    ("iv", ("t", b"-2562047788:00:54.775807")),  # int64 min + 1
    ("iv", ("t", b"106751991 days 04:00:54.775806")),
    ("iv", ("t", b"infinity")),
    ("iv", ("t", b"-infinity")),
    ("iv", ("t", interval_out(_MAX_MONTHS, 0, 0))),
    ("iv", ("t", interval_out(-_MAX_MONTHS, 0, 0))),
    ("iv", ("t", interval_out(_MAX_MONTHS, 0, INT64_MAX - 1 - _MAX_MONTHS * US_PER_AVG_MONTH))),
    ("iv", ("b", interval_pair((0, 0, INT64_MAX - 1))[1])),
    ("iv", ("b", interval_pair((0, 0, INT64_MIN + 1))[1])),
    ("iv", ("b", interval_pair((INT32_MAX, INT32_MAX, INT64_MAX))[1])),  # infinity
    ("iv", ("b", interval_pair((INT32_MIN, INT32_MIN, INT64_MIN))[1])),  # -infinity
    ("iv", ("b", interval_pair((-3_500_000, 3_000_000, 5))[1])),
    ("num", ("t", b"0")),
    ("num", ("t", b"-0")),
    ("num", ("t", b"0.000")),
    ("num", ("t", b"-0.00")),
    ("num", ("t", b"100000")),  # 1E+5 as numeric_out prints it: scale 0, not -5
    ("num", ("t", b"100000.000")),
    ("num", ("t", b"123.4500")),  # trailing zeros stripped: scale 2
    ("num", ("t", b"0.05")),
    ("num", ("t", b"-128")),  # 0x80 needs two bytes: (bit length + 8) // 8
    ("num", ("t", b"-129")),
    ("num", ("t", b"127")),
    ("num", ("t", b"128")),
    ("num", ("t", b"9223372036854775807")),
    ("num", ("t", b"-9223372036854775808")),
    ("num", ("t", b"18446744073709551616")),  # beyond 64 bits
    ("num", ("t", b"0.14285728571428571429")),
    ("num", ("t", numeric_out(-(10**120 - 1), 60))),  # 120 digits: the C limit
    ("num", ("t", numeric_out(10**119, 0))),
    ("num", ("t", b"0." + b"0" * 118 + b"1")),  # scale 119
    # numeric_send's forms: printed as numeric_out prints them, then read as the text is.
    ("num", ("b", b"\x00\x00\x00\x00\x00\x00\x00\x00")),  # 0
    ("num", ("b", numeric_send(0, 3))),
    ("num", ("b", numeric_send(100000, 3))),
    ("num", ("b", numeric_send(12345, 4))),  # 1.2345: digits on both sides of a group
    ("num", ("b", numeric_send(5, 2))),  # 0.05: a negative weight
    ("num", ("b", numeric_send(-129, 0))),
    ("num", ("b", numeric_send(18446744073709551616, 0))),
    ("num", ("b", numeric_send(-(10**120 - 1), 60))),  # 120 digits: the C limit
    ("num", ("b", numeric_send(10**119, 0))),
    ("num", ("b", numeric_send(1, 119))),
    ("ai4", ("t", b"{}")),
    ("ai4", ("b", array_send([], INT4))),
    ("ai4", ("t", b"{NULL}")),
    ("ai4", ("t", b"{-2147483648,2147483647,0,NULL}")),
    ("ai8", ("t", b"{-9223372036854775808,9223372036854775807}")),
    ("ai8", ("b", array_send([struct.pack(">q", INT64_MIN), None], INT8))),
    ("ai2", ("t", b"{-32768,32767}")),
    ("atx", ("t", b'{""}')),
    ("atx", ("t", b'{"NULL","null",NULL}')),  # quoted NULL is text
    ("atx", ("t", b'{"a\\\\b","c\\"d","{,}"," x "}')),
    ("atx", ("t", b'{"\\a\\b"}')),  # any escaped character is itself
    ("atx", ("t", b'{"line\nbreak",tab\x01}')),
    ("atx", ("t", "{caf\u00e9,\U0001f418,\u00a0}".encode())),  # non-ASCII, a no-break space
    ("atx", ("t", b"{" + b",".join([b"x" * 300] * 10) + b"}")),  # past the 1 kB local buffer
    ("atx", ("t", b'{"' + b"\\\\" * 2000 + b'"}')),  # a long quoted element
    ("atx", ("b", array_send([b"", None, "\u00e9".encode()], TEXT))),
    ("avc", ("t", b"{x,y}")),
    ("an12_2", ("t", b"{1.50,-0.01,NULL,9999999999.99}")),
    ("ip", ("t", b"192.168.0.1/24")),
    ("ip", ("t", b"::ffff:10.0.0.1")),
]


@native_only
@pytest.mark.parametrize(("name", "value"), EDGES, ids=lambda v: repr(v)[:40])
def test_edge_values_encode_to_python_bytes(name: str, value: Value) -> None:
    assert_native_matches(SINGLES[name], tuple_data(value))


# --- declines ----------------------------------------------------------------------------------

FALLBACKS: list[tuple[str, Value]] = [
    # Intervals past a long: the Python converter clamps them and counts them as lossy.
    ("iv", ("t", b"2562047788:00:54.775807")),  # exactly int64 max: the infinity sentinel
    ("iv", ("t", b"-2562047788:00:54.775808")),
    ("iv", ("t", b"178956970 years 7 mons")),
    ("iv", ("t", b"178956970 years 7 mons 2147483647 days 2562047788:00:54.775807")),
    ("iv", ("t", interval_out(_MAX_MONTHS + 1, 0, 0))),
    ("iv", ("b", interval_pair((0, 0, INT64_MAX))[1])),  # not all fields at their extremes
    ("iv", ("b", interval_pair((INT32_MAX, 0, 0))[1])),
    ("iv", ("b", interval_pair((INT32_MIN, INT32_MIN, 0))[1])),
    # Spellings Python reads that the server does not print.
    ("iv", ("t", b"1 day 1 day")),
    ("iv", ("t", b"3 days 1 mon")),
    ("iv", ("t", b" 1 day")),
    ("iv", ("t", b"1 day  01:00:00")),
    ("iv", ("t", b"1 day\t01:00:00")),
    ("iv", ("t", b"1234567890123456789 days")),  # 19 digits
    # Numerics the VariableScaleDecimal cannot hold or the C path does not read.
    ("num", ("t", b"NaN")),
    ("num", ("t", b"Infinity")),
    ("num", ("t", b"-Infinity")),
    ("num", ("t", b"1e5")),
    ("num", ("t", b"1E+5")),
    ("num", ("t", b"+1")),
    ("num", ("t", b" 1")),
    ("num", ("t", b"1_000")),
    ("num", ("t", b".5")),
    ("num", ("t", numeric_out(10**120, 0))),  # 121 digits
    ("num", ("t", numeric_out(1, 120))),  # 121 digits with the leading zero
    ("num", ("b", numeric_send(10**120, 0))),  # 121 digits
    ("num", ("b", numeric_send(1, 120))),
    # Arrays beyond one plain dimension.
    ("ai4", ("t", b"[2:3]={1,2}")),
    ("ai4", ("t", b"[1:1]={1}")),
    ("ai4", ("t", b"{{1,2},{3,4}}")),  # flattened and counted by Python
    ("ai4", ("t", b"{{}}")),
    ("ai4", ("b", struct.pack(">iiIiiiiii", 2, 0, INT4, 1, 1, 1, 1, 4, 7))),  # 2 dimensions
    ("atx", ("t", b"{null}")),  # the server quotes it; Python keeps the text
    ("atx", ("t", b"{Null}")),
    ("atx", ("t", b"{a\\b}")),  # a backslash outside quotes
    ("atx", ("t", b"{ a }")),
    ("atx", ("t", b"{a,,b}")),
    ("atx", ("t", b"{a,}")),
    ("atx", ("t", b'{"a"b}')),
    ("atx", ("t", b'{"a\\\nb"}')),  # a backslash before a newline
    ("atx", ("t", b"{\xff}")),  # not UTF-8
    ("ai4", ("t", b"{+1}")),
    ("ai4", ("t", b"{2147483648}")),  # beyond the Avro int
    ("an12_2", ("t", b"{NaN}")),
    ("ai4", ("b", array_send([b"\x00\x00\x00\x01"], INT4) + b"\x00")),  # trailing byte
    ("ai4", ("b", array_send([], INT4) + b"\x00")),
]


@native_only
@pytest.mark.parametrize(("name", "value"), FALLBACKS, ids=lambda v: repr(v)[:40])
def test_values_the_c_path_declines(name: str, value: Value) -> None:
    """Declined, and the Python path delivers (or raises) as before."""
    table = SINGLES[name]
    tup = tuple_data(value)
    assert table.c_avro(tup) is None
    try:
        table.python_avro(tup)
    except (ConversionError, ValueError):  # the converter's or the Avro writer's refusal
        return
    assert_falls_back(table, tup)


@native_only
@pytest.mark.parametrize(
    "raw",
    [b"2562047788:00:54.775807", b"178956970 years 7 mons", interval_out(_MAX_MONTHS + 1, 0, 0)],
)
def test_clamped_intervals_are_counted_by_python(raw: bytes) -> None:
    """An interval past a long is delivered clamped by the Python path, which counts it."""
    table = single("iv")
    before = lossy.LOSSY_VALUES.get(("interval", lossy.CLAMPED), 0)
    row, _ = table.schemas.encoder.encode(tuple_data(("t", raw)))
    assert not isinstance(row, EncodedRow)
    assert row["iv"] in (INT64_MAX - 1, INT64_MIN + 1)
    assert lossy.LOSSY_VALUES[("interval", lossy.CLAMPED)] == before + 1


# --- properties ----------------------------------------------------------------------------------


@native_only
@settings(max_examples=examples(1000), deadline=None)
@given(pair=intervals(full_range=True), kind=st.sampled_from([0, 1]))
def test_any_interval_is_python_bytes_or_declined(pair: tuple[bytes, bytes], kind: int) -> None:
    """Over PostgreSQL's whole range: the C bytes equal Python's, and C takes every interval
    whose sum stays inside a long on the way (declining only what Python clamps or nearly)."""
    table = SINGLES["iv"]
    tup = tuple_data(("tb"[kind], pair[kind]))
    encoded = table.c_avro(tup)
    expected = table.python_avro(tup)
    if encoded is not None:
        assert encoded == expected


@native_only
@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_wide_rows_of_generated_values_encode_to_python_bytes(data: Any) -> None:
    """The wide table with generated values of its families, the rest as the benchmark has."""
    g = data.draw(st.integers(1, 10**6))
    values = list(wide_row(g))
    for i, name in ((1, "iv"), (2, "num"), (3, "ai4"), (4, "atx"), (5, "ip")):
        if data.draw(st.booleans()):
            values[i] = None
        else:
            values[i] = ("t", data.draw(BY_NAME[name].values)[0])
    assert_native_matches(WIDE, tuple_data(*values))


_NOISE = b'0123456789-+.:eE {}",\\NULnul\x00\xff\xc3 \tdaysmonyear'


@st.composite
def mangled(draw: st.DrawFn, name: str) -> tuple[str, bytes]:
    """A valid text or binary value of column ``name`` with a few bytes inserted, dropped or
    replaced."""
    kind = draw(st.sampled_from(["t", "b"]))
    raw = bytearray(draw(BY_NAME[name].values)[0 if kind == "t" else 1])
    for _ in range(draw(st.integers(1, 4))):
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
    return kind, bytes(raw)


_FAMILIES = ["iv", "num", "ai4", "ai8", "ai2", "atx", "avc", "an12_2", "ip"]


@native_only
@settings(max_examples=examples(3000), deadline=None)
@given(name=st.sampled_from(_FAMILIES), data=st.data())
def test_garbage_is_declined_or_matches_python(name: str, data: Any) -> None:
    """Random and mangled values: the C encoder never crashes and either declines or writes
    exactly what the Python path writes; where Python raises (converter or writer), C declined."""
    kind, raw = data.draw(
        mangled(name) | st.tuples(st.sampled_from(["t", "b"]), st.binary(max_size=60))
    )
    assert_taken_as_python_writes(SINGLES[name], tuple_data((kind, raw)))


# --- the renderers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ((0, 0, 0), b"00:00:00"),
        ((0, 1, 7_384_500_000), b"1 day 02:03:04.5"),
        ((-14, 3, -(4 * 3600 + 5 * 60 + 6) * 1_000_000), b"-1 years -2 mons +3 days -04:05:06"),
        ((14, 0, 0), b"1 year 2 mons"),
        ((0, 0, -1), b"-00:00:00.000001"),
        ((0, -1, 3_600_000_000), b"-1 days +01:00:00"),
        ((1, 0, 0), b"1 mon"),
        ((0, 0, INT64_MAX), b"2562047788:00:54.775807"),
        ((INT32_MAX, INT32_MAX, INT64_MAX), b"infinity"),
    ],
)
def test_interval_out_prints_like_postgresql(parts: tuple[int, int, int], expected: bytes) -> None:
    """Outputs of PostgreSQL's interval_out (IntervalStyle postgres) for these intervals."""
    assert interval_out(*parts) == expected


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([], b"{}"),
        ([b"1", None], b"{1,NULL}"),
        ([b"", b"NULL", b"null", b"a b"], b'{"","NULL","null","a b"}'),
        ([b'c"d', b"e\\f", b"{x}", b"y,z"], b'{"c\\"d","e\\\\f","{x}","y,z"}'),
    ],
)
def test_array_out_quotes_like_postgresql(items: list[bytes | None], expected: bytes) -> None:
    assert array_out(items) == expected


def test_numeric_out_never_uses_an_exponent() -> None:
    assert numeric_out(100000, 0) == b"100000"
    assert numeric_out(-5, 3) == b"-0.005"
    assert numeric_out(0, 2) == b"0.00"
