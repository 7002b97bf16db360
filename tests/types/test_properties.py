"""Property tests: for generated values, the text form (as PostgreSQL prints it) and the binary
form (psycopg's binary dumpers write PostgreSQL's send format) convert to the same exact Avro
value."""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.adapt import PyFormat, Transformer

from bridge.types import TypeMapper
from tests.examples import examples

_TX = Transformer(None)
MAPPER = TypeMapper()
# Any character PostgreSQL text can hold: no NUL, no lone surrogates.
PG_CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
EPOCH = datetime(1970, 1, 1)


def binary(value: Any) -> bytes:
    return bytes(_TX.get_dumper(value, PyFormat.BINARY).dump(value) or b"")


def text(value: Any) -> bytes:
    return bytes(_TX.get_dumper(value, PyFormat.TEXT).dump(value) or b"")


def _vs_value(record: dict[str, Any]) -> Decimal:
    unscaled = int.from_bytes(record["value"], "big", signed=True)
    return Decimal(f"{unscaled}E-{record['scale']}")


@settings(max_examples=examples(300))
@given(st.decimals(allow_nan=False, allow_infinity=False, places=None))
def test_property_unconstrained_numeric_is_exact(value: Decimal) -> None:
    ct = MAPPER.column_type(1700)
    from_text = ct.from_text(format(value, "f").encode())
    from_binary = ct.from_binary(binary(value))
    assert from_text == from_binary
    assert _vs_value(from_text) == value


@given(st.decimals(min_value=-(10**8), max_value=10**8, places=2, allow_nan=False))
def test_property_numeric_10_2_is_the_value(value: Decimal) -> None:
    ct = MAPPER.column_type(1700, ((10 << 16) | 2) + 4)
    assert ct.from_text(format(value, "f").encode()) == ct.from_binary(binary(value)) == value


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_property_bigint(value: int) -> None:
    ct = MAPPER.column_type(20)
    assert (
        ct.from_text(str(value).encode())
        == ct.from_binary(value.to_bytes(8, "big", signed=True))
        == value
    )


@given(st.floats(allow_nan=False))
def test_property_double(value: float) -> None:
    ct = MAPPER.column_type(701)
    printed = {float("inf"): b"Infinity", float("-inf"): b"-Infinity"}.get(
        value, repr(value).encode()
    )
    assert ct.from_text(printed) == ct.from_binary(struct.pack(">d", value)) == value


@given(st.dates())
def test_property_date(value: date) -> None:
    ct = MAPPER.column_type(1082)
    expected = (value - date(1970, 1, 1)).days
    assert ct.from_text(value.isoformat().encode()) == ct.from_binary(binary(value)) == expected


@given(st.datetimes())
def test_property_timestamp(value: datetime) -> None:
    ct = MAPPER.column_type(1114)
    expected = (value - EPOCH) // timedelta(microseconds=1)
    printed = value.isoformat(sep=" ").encode()
    assert ct.from_text(printed) == ct.from_binary(binary(value)) == expected


@given(
    st.datetimes(
        timezones=st.builds(
            timezone,
            st.timedeltas(min_value=timedelta(hours=-15), max_value=timedelta(hours=15)).map(
                lambda d: timedelta(minutes=d // timedelta(minutes=1))
            ),
        )
    ),
)
def test_property_timestamptz_any_offset(value: datetime) -> None:
    ct = MAPPER.column_type(1184)
    expected = (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    printed = value.isoformat(sep=" ").encode()  # e.g. 2001-02-03 04:05:06.000007+05:30
    assert ct.from_text(printed) == ct.from_binary(binary(value)) == expected


@given(st.text(alphabet=PG_CHARS))
def test_property_text(value: str) -> None:
    ct = MAPPER.column_type(25)
    assert ct.from_text(value.encode()) == ct.from_binary(value.encode()) == value


@given(
    st.lists(
        st.one_of(
            st.none(),
            st.text(alphabet=PG_CHARS),
        )
    )
)
def test_property_text_array_quoting(values: list[str | None]) -> None:
    # psycopg's dumpers quote and escape exactly as array_out does (quotes, backslashes, braces,
    # commas, whitespace, the word NULL).
    ct = MAPPER.column_type(1009)
    from_text = ct.from_text(text(values)) if values else ct.from_text(b"{}")
    assert from_text == ct.from_binary(text_array_send(values)) == values


def text_array_send(values: list[str | None]) -> bytes:
    """array_send of a one-dimensional text[] (psycopg cannot type an all-NULL list)."""
    if not values:
        return struct.pack(">iiI", 0, 0, 25)
    out = [struct.pack(">iiIii", 1, int(None in values), 25, len(values), 1)]
    for v in values:
        if v is None:
            out.append(struct.pack(">i", -1))
        else:
            data = v.encode()
            out.append(struct.pack(">i", len(data)) + data)
    return b"".join(out)


@given(st.lists(st.one_of(st.none(), st.integers(min_value=-(2**31), max_value=2**31 - 1))))
def test_property_integer_array(values: list[int | None]) -> None:
    ct = MAPPER.column_type(1007)
    printed = "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"
    assert ct.from_text(printed.encode()) == values


@st.composite
def int_arrays(draw: st.DrawFn) -> tuple[list[int], list[int], list[int | None]]:
    """(dimension lengths, lower bounds, row-major elements) of an int4 array of 0..3
    dimensions, with NULLs."""
    ndim = draw(st.integers(0, 3))
    dims = [draw(st.integers(1, 3)) for _ in range(ndim)]
    lower = [draw(st.integers(-3, 3)) for _ in range(ndim)]
    count = 1
    for n in dims:
        count *= n
    elements = draw(st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), min_size=count,
                             max_size=count)) if ndim else []  # fmt: skip
    return dims, lower, elements


def _array_text(dims: list[int], lower: list[int], elements: list[int | None]) -> bytes:
    """array_out: braces, NULL, and a [l:u] prefix when a lower bound is not 1."""
    if not dims:
        return b"{}"

    def nest(level: int, items: list[int | None]) -> str:
        if level == len(dims) - 1:
            return "{" + ",".join("NULL" if i is None else str(i) for i in items) + "}"
        step = len(items) // dims[level]
        parts = [nest(level + 1, items[k : k + step]) for k in range(0, len(items), step)]
        return "{" + ",".join(parts) + "}"

    prefix = ""
    if any(lb != 1 for lb in lower):
        prefix = "".join(f"[{lb}:{lb + n - 1}]" for lb, n in zip(lower, dims, strict=True)) + "="
    return (prefix + nest(0, elements)).encode()


def _array_binary(dims: list[int], lower: list[int], elements: list[int | None]) -> bytes:
    """array_send: ndim, has-nulls flag, element oid, (length, lower bound)*, elements."""
    out = struct.pack(">iiI", len(dims), int(None in elements), 23)
    out += b"".join(struct.pack(">ii", n, lb) for n, lb in zip(dims, lower, strict=True))
    for e in elements:
        out += struct.pack(">i", -1) if e is None else struct.pack(">ii", 4, e)
    return out


def _expected(dims: list[int], elements: list[int | None], depth: int) -> list[Any]:
    if not dims:
        return []
    shape = (
        [*dims[: depth - 1], len(elements) // _prod(dims[: depth - 1])]
        if len(dims) >= depth
        else [1] * (depth - len(dims)) + dims
    )
    flat: list[Any] = list(elements)
    for length in reversed(shape[1:]):
        flat = [flat[i : i + length] for i in range(0, len(flat), length)]
    return flat


def _prod(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


@settings(max_examples=examples(300))
@given(int_arrays(), st.integers(1, 3))
def test_property_array_of_any_shape_fits_any_declared_depth(
    array: tuple[list[int], list[int], list[int | None]], depth: int
) -> None:
    """Text and binary forms of any int[] value (0-3 dimensions, lower bounds, NULLs) give
    the same value, shaped to the declared depth: row-major order kept, never an error."""
    dims, lower, elements = array
    ct = MAPPER.column_type(1007, dimensions=depth)
    expected = _expected(dims, elements, depth)
    assert ct.from_text(_array_text(dims, lower, elements)) == expected
    assert ct.from_binary(_array_binary(dims, lower, elements)) == expected
