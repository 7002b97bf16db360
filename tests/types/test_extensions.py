"""citext, hstore, ltree (captured from a real server), pgvector and PostGIS (hand-built wire
forms: the extensions are not installed where the vectors were captured)."""

from __future__ import annotations

import json
import struct

import pytest

from bridge.pgoutput.messages import Type
from bridge.types import ConversionError, TypeMapper, TypeOptions
from tests.types.vectors import find, roundtrip, schema_of

HSTORE = """'a=>1, "b c"=>NULL, "q''x\\\\y"=>"ü"'"""


def _mapper(oid: int, name: str, options: TypeOptions | None = None) -> TypeMapper:
    mapper = TypeMapper(options)
    mapper.observe(Type(None, oid, "public", name))
    return mapper


def test_citext_is_a_string() -> None:
    assert find("citext", "'MiXeD Ünïcode'").both() == ("MiXeD Ünïcode",) * 2


def test_citext_array_resolves_by_underscore_name() -> None:
    assert find("citext[]", "ARRAY['A'::citext, NULL]").both() == (["A", None],) * 2


def test_hstore_is_a_map_of_optional_strings() -> None:
    vector = find("hstore", HSTORE)
    expected = {"a": "1", "b c": None, "q'x\\y": "ü"}
    assert vector.both() == (expected, expected)
    assert roundtrip(vector.column_type().avro, expected) == expected
    assert find("hstore", "''").both() == ({}, {})


def test_hstore_json_mode() -> None:
    vector = find("hstore", HSTORE)
    text, binary = vector.both(TypeOptions(hstore_handling="json"))
    assert json.loads(text) == json.loads(binary) == {"a": "1", "b c": None, "q'x\\y": "ü"}
    # Compact, as Debezium's json mode writes it (its JDBC sink lands it in a json column).
    assert text == binary == '{"a":"1","b c":null,"q\'x\\\\y":"ü"}'
    json_mode = vector.column_type(TypeOptions(hstore_handling="json"))
    assert schema_of(json_mode)["connect.name"] == "io.debezium.data.Json"


def test_ltree_is_debezium_ltree() -> None:
    vector = find("ltree", "'top.science.astronomy'")
    assert vector.both() == ("top.science.astronomy",) * 2
    assert schema_of(vector.column_type())["connect.name"] == "io.debezium.data.Ltree"


def test_vector_is_debezium_double_vector() -> None:
    ct = _mapper(90001, "vector").column_type(90001, 3)
    assert schema_of(ct)["connect.name"] == "io.debezium.data.DoubleVector"
    binary = struct.pack(">HH3f", 3, 0, 1.0, -2.5, 0.125)
    assert ct.from_binary(binary) == ct.from_text(b"[1,-2.5,0.125]") == [1.0, -2.5, 0.125]
    assert ct.from_text(b"[]") == []
    assert roundtrip(ct.avro, [1.0, -2.5]) == [1.0, -2.5]


def test_halfvec_is_debezium_float_vector() -> None:
    ct = _mapper(90002, "halfvec").column_type(90002)
    assert ct.from_binary(struct.pack(">HH2e", 2, 0, 1.5, -0.25)) == [1.5, -0.25]


def test_sparsevec_binary_prints_text_form() -> None:
    ct = _mapper(90003, "sparsevec").column_type(90003)
    binary = struct.pack(">iii", 5, 2, 0) + struct.pack(">ii", 0, 3) + struct.pack(">ff", 1.5, 2.0)
    assert ct.from_binary(binary) == ct.from_text(b"{1:1.5,4:2}/5") == "{1:1.5,4:2}/5"


def _ewkb_point(srid: int | None) -> bytes:
    kind = 1 | (0x20000000 if srid is not None else 0)
    head = struct.pack("<BI", 1, kind) + (struct.pack("<i", srid) if srid is not None else b"")
    return head + struct.pack("<dd", 13.4, 52.5)


@pytest.mark.parametrize("name", ["geometry", "geography"])
def test_postgis_ewkb_splits_into_wkb_and_srid(name: str) -> None:
    ct = _mapper(90004, name).column_type(90004)
    assert schema_of(ct)["connect.name"] == f"io.debezium.data.geometry.{name.title()}"
    ogc = struct.pack("<BI", 1, 1) + struct.pack("<dd", 13.4, 52.5)
    expected = {"wkb": ogc, "srid": 4326}
    assert ct.from_binary(_ewkb_point(4326)) == expected
    assert ct.from_text(_ewkb_point(4326).hex().upper().encode()) == expected
    assert ct.from_binary(_ewkb_point(None)) == {"wkb": ogc, "srid": None}
    assert roundtrip(ct.avro, expected) == expected


def test_postgis_text_that_is_not_hex_is_a_conversion_error() -> None:
    with pytest.raises(ConversionError):
        _mapper(90004, "geometry").column_type(90004).from_text(b"POINT(1 2)")
