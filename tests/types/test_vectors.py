"""Every captured vector: the text and the binary form give the same Avro value, the value
round-trips through fastavro under the column's schema, and Debezium/Avro annotations parse."""

from __future__ import annotations

import pytest

from bridge.types import TypeMapper
from bridge.types.lossy import LOSSY_VALUES
from bridge.types.temporal import INT64_MAX
from tests.types.vectors import VECTORS, Vector, decode, encode, find, same

MULTI_DIMENSIONAL = [v for v in VECTORS if v.text.startswith(b"{{")]
# PostgreSQL's range exceeds microseconds-since-1970 in a long at the far end.
OUT_OF_RANGE = [
    find("timestamp", "'294276-12-31 23:59:59.999999'"),
    find("interval", "'178000000 years'"),
]
SINGLE = [v for v in VECTORS if v not in MULTI_DIMENSIONAL and v not in OUT_OF_RANGE]


def _id(v: Vector) -> str:
    return f"{v.id}-{v.type}"


@pytest.mark.parametrize("vector", SINGLE, ids=_id)
def test_vector_text_and_binary_forms_agree(vector: Vector) -> None:
    from_text, from_binary = vector.both()
    assert same(from_text, from_binary), (from_text, from_binary)


@pytest.mark.parametrize("vector", SINGLE, ids=_id)
def test_vector_roundtrips_through_avro(vector: Vector) -> None:
    ct = vector.column_type()
    value = ct.from_binary(vector.binary)
    data = encode(ct.avro, value)
    # Read back as raw Avro (ints for dates and timestamps, bytes for decimals) and written
    # again, the bytes are identical: nothing was lost, including values outside Python's
    # datetime range (infinity, BC, year > 9999) that a logical-type reader cannot build.
    raw = decode(ct.avro, data, logical=False)
    assert encode(ct.avro, raw, logical=False) == data


@pytest.mark.parametrize("vector", MULTI_DIMENSIONAL, ids=_id)
def test_vector_multidimensional_array_is_flattened_or_nested_as_declared(vector: Vector) -> None:
    ct = vector.column_type()
    flat = ct.from_binary(vector.binary)
    assert ct.from_text(vector.text) == flat
    assert all(not isinstance(item, list) for item in flat)
    declared = TypeMapper().column_type(vector.oid, vector.typmod, dimensions=2)
    from_text, from_binary = declared.from_text(vector.text), declared.from_binary(vector.binary)
    assert from_text == from_binary
    assert decode(declared.avro, encode(declared.avro, from_binary)) == from_binary


@pytest.mark.parametrize("vector", OUT_OF_RANGE, ids=_id)
def test_vector_out_of_avro_range_is_clamped_and_counted(vector: Vector) -> None:
    before = sum(LOSSY_VALUES.values())
    assert vector.both() == (INT64_MAX - 1, INT64_MAX - 1)
    assert sum(LOSSY_VALUES.values()) == before + 2


def test_vectors_cover_every_family() -> None:
    families = {v.type.split("(")[0].removesuffix("[]") for v in VECTORS}
    for needed in (
        "smallint", "numeric", "money", "real", "boolean", "text", "bytea", "uuid", "jsonb",
        "xml", "date", "time", "timetz", "timestamp", "timestamptz", "interval", "inet",
        "macaddr8", "bit", "varbit", "tsvector", "tsquery", "point", "polygon", "int4range",
        "int4multirange", "citext", "hstore", "ltree",
    ):  # fmt: skip
        assert needed in families
