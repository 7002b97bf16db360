"""Character and byte types: text, varchar, char(n), name, "char", bytea, uuid, xml, pg_lsn and
the object-name types (regclass, ...).

All character types are Avro ``string``; ``bytea`` is ``bytes``, or a string under
:attr:`TypeOptions.binary_handling` (Debezium's ``binary.handling.mode``: ``base64``,
``base64-url-safe``, ``hex``). ``uuid`` carries both Debezium's ``io.debezium.data.Uuid`` and
Avro's ``uuid`` logical type. String and bytes columns can be TOASTed, so their unchanged-TOAST
placeholder is Debezium's ``__debezium_unavailable_value`` (for ``bytea`` its UTF-8 bytes, in
the string modes encoded like any other value, as Debezium encodes it).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from typing import Final

from psycopg.pq import Format

from bridge.native import ops
from bridge.types.base import (
    DEBEZIUM_UNAVAILABLE,
    DEBEZIUM_UNAVAILABLE_BYTES,
    ColumnType,
    TypeRegistry,
    TypeRequest,
    connect,
    psycopg_loader,
    simple,
    utf8,
)

_bytea_text: Final = psycopg_loader("bytea", Format.TEXT)

UUID_SCHEMA: Final = connect("string", "io.debezium.data.Uuid", logical="uuid")
XML_SCHEMA: Final = connect("string", "io.debezium.data.Xml")


def bytea_from_text(raw: bytes) -> bytes:
    # psycopg's loader understands both bytea_output formats (hex and escape).
    return bytes(_bytea_text(raw))


def _bytes(raw: bytes) -> bytes:
    return bytes(raw)


#: binary.handling.mode -> bytes to the string sent.
_BINARY_ENCODINGS: Final[dict[str, Callable[[bytes], str]]] = {
    "base64": lambda b: base64.b64encode(b).decode("ascii"),
    "base64-url-safe": lambda b: base64.urlsafe_b64encode(b).decode("ascii"),
    "hex": lambda b: b.hex(),
}


def _bytea(request: TypeRequest) -> ColumnType:
    mode = request.options.binary_handling
    if mode == "bytes":
        return ColumnType(
            "bytea",
            "bytes",
            bytea_from_text,
            _bytes,
            DEBEZIUM_UNAVAILABLE_BYTES,
            native=(ops.BYTEA, ops.BYTEA),
        )
    encode = _BINARY_ENCODINGS[mode]
    return ColumnType(
        "bytea",
        "string",
        lambda raw: encode(bytea_from_text(raw)),
        lambda raw: encode(bytes(raw)),
        encode(DEBEZIUM_UNAVAILABLE_BYTES),
    )


def _uuid_binary(raw: bytes) -> str:
    return str(uuid.UUID(bytes=bytes(raw)))


def _ascii(raw: bytes) -> str:
    return raw.decode("ascii")


def _oid_name_binary(raw: bytes) -> str:
    # regclass & co. send the bare OID in binary; the text form is the object's name. The
    # schema is a string either way, so binary gives the OID as a string.
    return str(int.from_bytes(raw, "big"))


def _lsn_binary(raw: bytes) -> str:
    value = int.from_bytes(raw, "big")
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def _char_octal(byte: int) -> str:
    return f"\\{byte:03o}"


def char_from_text(raw: bytes) -> str:
    # "char" is one byte. charout prints a byte >= 0x80 as \ooo since PostgreSQL 15; older
    # servers send the byte itself, which is not UTF-8 on its own: spell it as 15+ does.
    if len(raw) == 1 and raw[0] >= 0x80:
        return _char_octal(raw[0])
    return raw.decode("utf-8")


def char_from_binary(raw: bytes) -> str:
    # charsend sends the byte itself; give the text charout prints, so that text and binary
    # publications agree: '' for \0, \ooo for a byte >= 0x80.
    byte = raw[0] if raw else 0
    if byte == 0:
        return ""
    return _char_octal(byte) if byte >= 0x80 else chr(byte)


def register_types(registry: TypeRegistry) -> None:
    for name, shown in (
        ("text", "text"),
        ("varchar", "character varying"),
        ("bpchar", "character"),
        ("name", "name"),
        ("refcursor", "refcursor"),
    ):
        registry.add_builtin(
            name,
            simple(
                shown, "string", utf8, utf8, DEBEZIUM_UNAVAILABLE, native=(ops.STRING, ops.STRING)
            ),
        )
    registry.add_builtin('"char"', simple('"char"', "string", char_from_text, char_from_binary))
    registry.add_builtin("bytea", _bytea)
    registry.add_builtin(
        "uuid",
        simple("uuid", UUID_SCHEMA, _ascii, _uuid_binary, native=(ops.UUID, ops.UUID)),
    )
    registry.add_builtin("xml", simple("xml", XML_SCHEMA, utf8, utf8, DEBEZIUM_UNAVAILABLE))
    registry.add_builtin("pg_lsn", simple("pg_lsn", "string", _ascii, _lsn_binary))
    for name in (
        "regclass",
        "regtype",
        "regproc",
        "regprocedure",
        "regoper",
        "regoperator",
        "regnamespace",
        "regrole",
        "regconfig",
        "regdictionary",
        "regcollation",
    ):
        registry.add_builtin(name, simple(name, "string", utf8, _oid_name_binary))
