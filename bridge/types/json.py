"""json, jsonb and jsonpath: JSON text in an Avro ``string`` named ``io.debezium.data.Json``.

The text is passed through as the server wrote it (jsonb normalises it); no parse and re-dump on
the hot path. jsonb's binary form is a version byte followed by the same text.
"""

from __future__ import annotations

from typing import Final

from bridge.native import ops
from bridge.types.base import DEBEZIUM_UNAVAILABLE, TypeRegistry, connect, simple, utf8
from bridge.types.errors import ConversionError

JSON_SCHEMA: Final = connect("string", "io.debezium.data.Json")


def _jsonb_binary(raw: bytes) -> str:
    if not raw or raw[0] != 1:
        raise ConversionError("jsonb", "unsupported jsonb binary version", raw=raw[:1])
    return raw[1:].decode("utf-8")


def _jsonpath_binary(raw: bytes) -> str:
    if not raw or raw[0] != 1:
        raise ConversionError("jsonpath", "unsupported jsonpath binary version", raw=raw[:1])
    return raw[1:].decode("utf-8")


def register_types(registry: TypeRegistry) -> None:
    text = (ops.STRING, ops.STRING)
    registry.add_builtin(
        "json", simple("json", JSON_SCHEMA, utf8, utf8, DEBEZIUM_UNAVAILABLE, native=text)
    )
    # jsonb's binary form starts with a version byte before the same text (ops.JSONB).
    registry.add_builtin(
        "jsonb",
        simple(
            "jsonb",
            JSON_SCHEMA,
            utf8,
            _jsonb_binary,
            DEBEZIUM_UNAVAILABLE,
            native=(ops.STRING, ops.JSONB),
        ),
    )
    registry.add_builtin("jsonpath", simple("jsonpath", "string", utf8, _jsonpath_binary))
