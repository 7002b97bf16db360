"""Types from common extensions, whose OIDs differ per database and are resolved by the type
name a Type message carries: citext, hstore, ltree, pgvector (vector, halfvec, sparsevec) and
PostGIS (geometry, geography).

Representations follow Debezium: citext a string; hstore a map of optional strings (or a JSON
string); ltree ``io.debezium.data.Ltree``; vector ``io.debezium.data.DoubleVector`` and halfvec
``io.debezium.data.FloatVector`` (Avro arrays); PostGIS values Debezium's
``io.debezium.data.geometry.Geometry`` / ``Geography`` records of WKB plus SRID. sparsevec is a
string in its text form.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any, Final

from psycopg.types.hstore import HstoreBinaryLoader, HstoreLoader

from bridge.types.base import (
    DEBEZIUM_UNAVAILABLE,
    ColumnType,
    TypeRegistry,
    TypeRequest,
    connect,
    simple,
    utf8,
)
from bridge.types.errors import ConversionError
from bridge.types.json import JSON_SCHEMA

# psycopg's hstore loaders need no registration to parse; the OID only labels them.
_hstore_text: Final = HstoreLoader(0).load
_hstore_binary: Final = HstoreBinaryLoader(0).load

HSTORE_MAP_SCHEMA: Final = {"type": "map", "values": ["null", "string"]}
LTREE_SCHEMA: Final = connect("string", "io.debezium.data.Ltree")
DOUBLE_VECTOR_SCHEMA: Final = connect(
    {"type": "array", "items": "double"}, "io.debezium.data.DoubleVector"
)
FLOAT_VECTOR_SCHEMA: Final = connect(
    {"type": "array", "items": "float"}, "io.debezium.data.FloatVector"
)


def _geo_schema(name: str, doc: str) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": "io.debezium.data.geometry",
        "fields": [
            {"name": "wkb", "type": "bytes"},
            {"name": "srid", "type": ["null", "int"], "default": None},
        ],
        "connect.doc": doc,
        "connect.version": 1,
        "connect.name": f"io.debezium.data.geometry.{name}",
    }


GEOMETRY_SCHEMA: Final = _geo_schema("Geometry", "Geometry")
GEOGRAPHY_SCHEMA: Final = _geo_schema("Geography", "Geography")

_EWKB_SRID: Final = 0x20000000


def hstore_map_text(raw: bytes) -> dict[str, str | None]:
    return dict(_hstore_text(raw))


def hstore_map_binary(raw: bytes) -> dict[str, str | None]:
    return dict(_hstore_binary(raw))


def split_ewkb(ewkb: bytes) -> dict[str, Any]:
    """PostGIS EWKB -> OGC WKB plus SRID (the SRID flag and field removed from the header)."""
    if len(ewkb) < 5:
        raise ConversionError("geometry", "truncated EWKB", raw=ewkb)
    order = "<" if ewkb[0] == 1 else ">"
    (kind,) = struct.unpack_from(order + "I", ewkb, 1)
    if not kind & _EWKB_SRID:
        return {"wkb": bytes(ewkb), "srid": None}
    (srid,) = struct.unpack_from(order + "i", ewkb, 5)
    header = ewkb[0:1] + struct.pack(order + "I", kind & ~_EWKB_SRID)
    return {"wkb": header + bytes(ewkb[9:]), "srid": srid}


def geo_from_text(raw: bytes) -> dict[str, Any]:
    # geometry_out prints hex EWKB.
    try:
        return split_ewkb(bytes.fromhex(raw.decode("ascii")))
    except ValueError as exc:
        raise ConversionError("geometry", "expected hex EWKB", raw=raw) from exc


def geo_from_binary(raw: bytes) -> dict[str, Any]:
    return split_ewkb(raw)


_VECTOR_TEXT_RE: Final = re.compile(rb"^\[(.*)\]$")


def vector_from_text(raw: bytes) -> list[float]:
    m = _VECTOR_TEXT_RE.match(raw.strip())
    if m is None:
        raise ConversionError("vector", "expected [x,y,...]", raw=raw)
    body = m[1].strip()
    return [float(v) for v in body.split(b",")] if body else []


def vector_from_binary(raw: bytes) -> list[float]:
    dim = int.from_bytes(raw[0:2], "big")
    return list(struct.unpack_from(f">{dim}f", raw, 4))


def halfvec_from_binary(raw: bytes) -> list[float]:
    dim = int.from_bytes(raw[0:2], "big")
    return list(struct.unpack_from(f">{dim}e", raw, 4))


def sparsevec_from_binary(raw: bytes) -> str:
    dim, nnz = struct.unpack_from(">ii", raw, 0)
    indices = struct.unpack_from(f">{nnz}i", raw, 12)
    values = struct.unpack_from(f">{nnz}f", raw, 12 + 4 * nnz)
    body = ",".join(f"{i + 1}:{_short(v)}" for i, v in zip(indices, values, strict=True))
    return f"{{{body}}}/{dim}"


def _short(value: float) -> str:
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def _hstore_json(pairs: dict[str, str | None]) -> str:
    """An hstore as Debezium's ``json`` mode writes it: compact JSON (``{"a":"1","b":null}``)."""
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))


def _hstore(request: TypeRequest) -> ColumnType:
    if request.options.hstore_handling == "json":
        return ColumnType(
            "hstore",
            JSON_SCHEMA,
            lambda raw: _hstore_json(hstore_map_text(raw)),
            lambda raw: _hstore_json(hstore_map_binary(raw)),
            DEBEZIUM_UNAVAILABLE,
        )
    return ColumnType("hstore", HSTORE_MAP_SCHEMA, hstore_map_text, hstore_map_binary)


def register_types(registry: TypeRegistry) -> None:
    registry.add_named("citext", simple("citext", "string", utf8, utf8, DEBEZIUM_UNAVAILABLE))
    registry.add_named("hstore", _hstore)
    registry.add_named("ltree", simple("ltree", LTREE_SCHEMA, utf8, lambda raw: raw[1:].decode()))
    registry.add_named(
        "vector", simple("vector", DOUBLE_VECTOR_SCHEMA, vector_from_text, vector_from_binary)
    )
    registry.add_named(
        "halfvec", simple("halfvec", FLOAT_VECTOR_SCHEMA, vector_from_text, halfvec_from_binary)
    )
    registry.add_named("sparsevec", simple("sparsevec", "string", utf8, sparsevec_from_binary))
    registry.add_named(
        "geometry", simple("geometry", GEOMETRY_SCHEMA, geo_from_text, geo_from_binary)
    )
    registry.add_named(
        "geography", simple("geography", GEOGRAPHY_SCHEMA, geo_from_text, geo_from_binary)
    )
