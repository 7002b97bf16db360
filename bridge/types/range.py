"""Ranges and multiranges of the built-in subtypes, as strings in PostgreSQL's text form
(``[1,10)``, ``empty``, ``{[1,3),[5,7)}``), as Debezium sends them.

Binary values are printed the way ``range_out`` prints them: bounds quoted when they contain
spaces or delimiters. ``tstzrange`` bounds from binary are printed in UTC (``+00``); the text
form uses the replication connection's ``TimeZone``, so set it to UTC for identical output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from psycopg.pq import Format

from bridge.types.base import TypeRegistry, psycopg_loader, simple, utf8
from bridge.types.numeric import decimal_to_string
from bridge.types.temporal import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    PG_EPOCH_DAYS,
    PG_EPOCH_US,
    US_PER_DAY,
    US_PER_SECOND,
    civil_from_days,
)

_EMPTY, _LB_INC, _UB_INC, _LB_INF, _UB_INF = 0x01, 0x02, 0x04, 0x08, 0x10
_NEEDS_QUOTES: Final = re.compile(r'[\s"\\()\[\],]')

_numeric_binary: Final = psycopg_loader("numeric", Format.BINARY)


def _pg_date(days_since_unix: int) -> str:
    year, month, day = civil_from_days(days_since_unix)
    if year <= 0:
        return f"{1 - year:04d}-{month:02d}-{day:02d} BC"
    return f"{year:04d}-{month:02d}-{day:02d}"


def _date_text(raw: bytes) -> str:
    days = int.from_bytes(raw, "big", signed=True)
    if days == INT32_MAX:
        return "infinity"
    if days == INT32_MIN:
        return "-infinity"
    return _pg_date(days + PG_EPOCH_DAYS)


def _timestamp_text(raw: bytes, suffix: str = "") -> str:
    us = int.from_bytes(raw, "big", signed=True)
    if us == INT64_MAX:
        return "infinity"
    if us == INT64_MIN:
        return "-infinity"
    days, rest = divmod(us + PG_EPOCH_US, US_PER_DAY)
    seconds, frac = divmod(rest, US_PER_SECOND)
    minutes, s = divmod(seconds, 60)
    h, mi = divmod(minutes, 60)
    date_text = _pg_date(days)
    bc = date_text.endswith(" BC")
    date_text = date_text.removesuffix(" BC")
    fraction = f".{frac:06d}".rstrip("0") if frac else ""
    return f"{date_text} {h:02d}:{mi:02d}:{s:02d}{fraction}{suffix}{' BC' if bc else ''}"


_SUBTYPES: Final[dict[str, Callable[[bytes], str]]] = {
    "int4": lambda raw: str(int.from_bytes(raw, "big", signed=True)),
    "int8": lambda raw: str(int.from_bytes(raw, "big", signed=True)),
    "numeric": lambda raw: decimal_to_string(_numeric_binary(raw)),
    "date": _date_text,
    "timestamp": _timestamp_text,
    "timestamptz": lambda raw: _timestamp_text(raw, "+00"),
}

_RANGES: Final = {
    "int4range": ("int4multirange", "int4"),
    "int8range": ("int8multirange", "int8"),
    "numrange": ("nummultirange", "numeric"),
    "daterange": ("datemultirange", "date"),
    "tsrange": ("tsmultirange", "timestamp"),
    "tstzrange": ("tstzmultirange", "timestamptz"),
}


def _bound(text: str) -> str:
    if text and not _NEEDS_QUOTES.search(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def range_formatter(subtype: str) -> Callable[[bytes], str]:
    fmt = _SUBTYPES[subtype]

    def from_binary(raw: bytes) -> str:
        flags = raw[0]
        if flags & _EMPTY:
            return "empty"
        pos = 1
        lower = upper = ""
        if not flags & _LB_INF:
            size = int.from_bytes(raw[pos : pos + 4], "big")
            lower = _bound(fmt(raw[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if not flags & _UB_INF:
            size = int.from_bytes(raw[pos : pos + 4], "big")
            upper = _bound(fmt(raw[pos + 4 : pos + 4 + size]))
        return f"{'[' if flags & _LB_INC else '('}{lower},{upper}{']' if flags & _UB_INC else ')'}"

    return from_binary


def multirange_formatter(subtype: str) -> Callable[[bytes], str]:
    one = range_formatter(subtype)

    def from_binary(raw: bytes) -> str:
        count = int.from_bytes(raw[0:4], "big")
        pos = 4
        parts = []
        for _ in range(count):
            size = int.from_bytes(raw[pos : pos + 4], "big")
            parts.append(one(raw[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        return "{" + ",".join(parts) + "}"

    return from_binary


def register_types(registry: TypeRegistry) -> None:
    for name, (multi, subtype) in _RANGES.items():
        registry.add_builtin(name, simple(name, "string", utf8, range_formatter(subtype)))
        registry.add_builtin(multi, simple(multi, "string", utf8, multirange_formatter(subtype)))
