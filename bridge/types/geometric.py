"""Geometric types: point, line, lseg, box, path, polygon, circle.

``point`` is Debezium's ``io.debezium.data.geometry.Point`` record (x, y and the point as WKB);
the other shapes are Avro strings in PostgreSQL's text form, which every consumer can parse and
which loses nothing. Binary values are printed the way ``float8out`` prints (shortest exact
representation, ``Infinity``/``NaN``), so text and binary publications produce the same string.
"""

from __future__ import annotations

import re
import struct
from typing import Any, Final

from bridge.types.base import TypeRegistry, simple, utf8
from bridge.types.errors import ConversionError

POINT_SCHEMA: Final[dict[str, Any]] = {
    "type": "record",
    "name": "Point",
    "namespace": "io.debezium.data.geometry",
    "fields": [
        {"name": "x", "type": "double"},
        {"name": "y", "type": "double"},
        {"name": "wkb", "type": ["null", "bytes"], "default": None},
        {"name": "srid", "type": ["null", "int"], "default": None},
    ],
    "connect.doc": "Geometry (POINT)",
    "connect.version": 1,
    "connect.name": "io.debezium.data.geometry.Point",
}

_WKB_POINT: Final = struct.Struct("<BIdd")  # little-endian marker, type 1 (Point), x, y
_POINT_RE: Final = re.compile(rb"\(\s*([^,\s]+)\s*,\s*([^)\s]+)\s*\)$")


def format_float(value: float) -> str:
    """``float8out`` with the default ``extra_float_digits``: shortest exact form."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def _point(x: float, y: float) -> dict[str, Any]:
    return {"x": x, "y": y, "wkb": _WKB_POINT.pack(1, 1, x, y), "srid": None}


def point_from_text(raw: bytes) -> dict[str, Any]:
    m = _POINT_RE.match(raw.strip())
    if m is None:
        raise ConversionError("point", "unparseable point", raw=raw)
    return _point(float(m[1]), float(m[2]))


def _floats(raw: bytes, offset: int, count: int) -> tuple[float, ...]:
    return struct.unpack_from(f">{count}d", raw, offset)


def point_from_binary(raw: bytes) -> dict[str, Any]:
    x, y = _floats(raw, 0, 2)
    return _point(x, y)


def _pt(x: float, y: float) -> str:
    return f"({format_float(x)},{format_float(y)})"


def _points(raw: bytes, offset: int, count: int) -> str:
    coords = _floats(raw, offset, 2 * count)
    return ",".join(_pt(coords[i], coords[i + 1]) for i in range(0, 2 * count, 2))


def line_from_binary(raw: bytes) -> str:
    return "{" + ",".join(format_float(v) for v in _floats(raw, 0, 3)) + "}"


def lseg_from_binary(raw: bytes) -> str:
    return f"[{_points(raw, 0, 2)}]"


def box_from_binary(raw: bytes) -> str:
    return _points(raw, 0, 2)


def path_from_binary(raw: bytes) -> str:
    closed = raw[0]
    count = int.from_bytes(raw[1:5], "big")
    body = _points(raw, 5, count)
    return f"({body})" if closed else f"[{body}]"


def polygon_from_binary(raw: bytes) -> str:
    count = int.from_bytes(raw[0:4], "big")
    return f"({_points(raw, 4, count)})"


def circle_from_binary(raw: bytes) -> str:
    x, y, r = _floats(raw, 0, 3)
    return f"<{_pt(x, y)},{format_float(r)}>"


def register_types(registry: TypeRegistry) -> None:
    registry.add_builtin("point", simple("point", POINT_SCHEMA, point_from_text, point_from_binary))
    registry.add_builtin("line", simple("line", "string", utf8, line_from_binary))
    registry.add_builtin("lseg", simple("lseg", "string", utf8, lseg_from_binary))
    registry.add_builtin("box", simple("box", "string", utf8, box_from_binary))
    registry.add_builtin("path", simple("path", "string", utf8, path_from_binary))
    registry.add_builtin("polygon", simple("polygon", "string", utf8, polygon_from_binary))
    registry.add_builtin("circle", simple("circle", "string", utf8, circle_from_binary))
