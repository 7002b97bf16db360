"""Access to ``vectors.json``: values of every type family as a real PostgreSQL 15 server wrote
them, in text (output function) and binary (send function) form — what pgoutput sends."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from bridge.pgoutput.messages import Type
from bridge.types import ColumnType, TypeMapper, TypeOptions

_PATH = Path(__file__).with_name("vectors.json")


@dataclass(frozen=True)
class Vector:
    id: int
    type: str
    literal: str
    oid: int
    typmod: int
    text: bytes
    binary: bytes
    type_name: str | None = None

    def column_type(self, options: TypeOptions | None = None) -> ColumnType:
        mapper = TypeMapper(options)
        if self.type_name is not None:
            mapper.observe(Type(None, self.oid, "public", self.type_name))
        return mapper.column_type(self.oid, self.typmod)

    def both(self, options: TypeOptions | None = None) -> tuple[Any, Any]:
        """(value from the text form, value from the binary form)."""
        ct = self.column_type(options)
        return ct.from_text(self.text), ct.from_binary(self.binary)


def _load() -> list[Vector]:
    out = []
    for raw in json.loads(_PATH.read_text(encoding="utf-8")):
        out.append(
            Vector(
                id=raw["id"],
                type=raw["type"],
                literal=raw["literal"],
                oid=raw["oid"],
                typmod=raw["typmod"],
                text=raw["text"].encode("utf-8"),
                binary=bytes.fromhex(raw["binary"]),
                type_name=raw.get("type_name"),
            )
        )
    return out


VECTORS: list[Vector] = _load()


def find(type_sql: str, literal: str) -> Vector:
    for v in VECTORS:
        if v.type == type_sql and v.literal == literal:
            return v
    raise KeyError((type_sql, literal))


def same(a: Any, b: Any) -> bool:
    """Equality that also holds for NaN (in floats and nested structures)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def strip_logical(schema: Any) -> Any:
    """The schema without logicalType annotations: reads back the raw Avro values."""
    if isinstance(schema, list):
        return [strip_logical(s) for s in schema]
    if isinstance(schema, dict):
        return {k: strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    return schema


def _record(avro: Any) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "R",
        "namespace": "test",
        "fields": [{"name": "v", "type": ["null", avro], "default": None}],
    }


def encode(avro: Any, value: Any, *, logical: bool = True) -> bytes:
    record = _record(avro)
    parsed = fastavro.parse_schema(record if logical else strip_logical(record))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, {"v": value})
    return buf.getvalue()


def decode(avro: Any, data: bytes, *, logical: bool = True) -> Any:
    record = _record(avro)
    parsed = fastavro.parse_schema(record if logical else strip_logical(record))
    record_value: Any = fastavro.schemaless_reader(io.BytesIO(data), parsed)
    return record_value["v"]


def roundtrip(avro: Any, value: Any, *, logical: bool = True) -> Any:
    """Write ``value`` as a nullable field and read it back with fastavro."""
    return decode(avro, encode(avro, value), logical=logical)


def schema_of(column_type: ColumnType) -> dict[str, Any]:
    """The column's Avro schema when it is a complex (dict) schema."""
    assert isinstance(column_type.avro, dict), column_type.avro
    return column_type.avro
