"""Debezium's semantic names -> standard Avro logical types for from_avro (pure, no Spark)."""

from __future__ import annotations

import json
from typing import Any

from bridge.retry import RetryPolicy
from bridge.spark.decode import SchemaCache
from bridge.spark.semantic import restore_logical_types
from bridge.types import TypeMapper, TypeOptions
from bridge.types.base import builtin_oid
from tests.spark.test_decode_schemas import _Client, _Schema


def _row(logical_types: str) -> dict[str, Any]:
    """A record of pgbridge's own column schemas in either form."""
    mapper = TypeMapper(TypeOptions(logical_types=logical_types))  # type: ignore[arg-type]
    names = ("date", "time", "timestamp", "uuid", "numeric", "text")
    fields = []
    for name in names:
        typmod = ((12 << 16) | 2) + 4 if name == "numeric" else -1
        avro = mapper.column_type(builtin_oid(name), typmod).avro
        fields.append({"name": f"c_{name}", "type": ["null", avro], "default": None})
    dates = mapper.column_type(1182).avro  # date[]
    fields.append({"name": "c_dates", "type": ["null", dates], "default": None})
    return {"type": "record", "name": "Value", "fields": fields}


def test_restore_logical_types_makes_connect_form_equal_to_avro_form() -> None:
    connect_form, avro_form = _row("connect"), _row("avro")
    assert connect_form != avro_form
    assert restore_logical_types(connect_form) == avro_form


def test_restore_logical_types_leaves_avro_form_and_others_alone() -> None:
    avro_form = _row("avro")
    assert restore_logical_types(avro_form) == avro_form
    # A semantic name on another primitive (ZonedTimestamp strings) gets nothing.
    zoned = {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}
    assert restore_logical_types(zoned) == zoned


def test_schema_cache_restores_logical_types_of_connect_form_schemas() -> None:
    client = _Client({1: _Schema(json.dumps(_row("connect")), [])}, {})
    cache = SchemaCache(client, RetryPolicy(max_retries=0, initial_delay_ms=1, max_delay_ms=1))
    text = cache.schema_json(1)
    assert text is not None and json.loads(text) == _row("avro")
