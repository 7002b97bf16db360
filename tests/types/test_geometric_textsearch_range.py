"""Geometric types, tsvector/tsquery, ranges and multiranges: binary forms print exactly as the
server's output functions do."""

from __future__ import annotations

import struct

import pytest

from bridge.types.geometric import format_float
from tests.types.vectors import VECTORS, find, roundtrip, schema_of

PRINTED = [
    v
    for v in VECTORS
    if v.type.split("(")[0]
    in {
        "line", "lseg", "box", "path", "polygon", "circle", "tsvector", "tsquery", "int4range",
        "int8range", "numrange", "daterange", "tsrange", "tstzrange", "int4multirange",
        "datemultirange",
    }
]  # fmt: skip


@pytest.mark.parametrize("vector", PRINTED, ids=lambda v: f"{v.id}-{v.type}")
def test_binary_form_prints_like_output_function(vector: object) -> None:
    text, binary = vector.both()  # type: ignore[attr-defined]
    assert binary == vector.text.decode()  # type: ignore[attr-defined]
    assert text == binary


def test_point_is_debezium_point_with_wkb() -> None:
    vector = find("point", "'(1.5,-2)'")
    ct = vector.column_type()
    assert schema_of(ct)["connect.name"] == "io.debezium.data.geometry.Point"
    text, binary = vector.both()
    assert text == binary
    assert (binary["x"], binary["y"], binary["srid"]) == (1.5, -2.0, None)
    assert struct.unpack("<BIdd", binary["wkb"]) == (1, 1, 1.5, -2.0)
    assert roundtrip(ct.avro, binary) == binary


def test_point_extreme_coordinates() -> None:
    text, binary = find("point", "'(1e+100,-0.0001)'").both()
    assert text == binary and binary["x"] == 1e100 and binary["y"] == -0.0001


def test_format_float_matches_float8out() -> None:
    assert [format_float(v) for v in (1.0, -0.5, 1e100, float("inf"), float("-inf"))] == [
        "1",
        "-0.5",
        "1e+100",
        "Infinity",
        "-Infinity",
    ]
    assert format_float(float("nan")) == "NaN"


def test_tsvector_named_like_debezium() -> None:
    vector = find("tsvector", "''::tsvector")
    assert vector.both() == ("", "")
    assert schema_of(vector.column_type())["connect.name"] == "io.debezium.data.Tsvector"


def test_range_empty_and_unbounded() -> None:
    assert find("int4range", "'empty'").both() == ("empty", "empty")
    assert find("int8range", "'[,)'").both() == ("(,)", "(,)")
    assert find("int4multirange", "'{}'").both() == ("{}", "{}")
