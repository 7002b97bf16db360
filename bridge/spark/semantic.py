"""Debezium's semantic types as standard Avro logical types, for Spark's ``from_avro``.

A topic written with ``schema.logical.types=connect`` (Debezium's own form, which Kafka Connect's
Avro converters require) carries ``connect.name: io.debezium.time.Date`` on a plain ``int``
where the default form also has ``logicalType: date``. A logical type only annotates the
primitive, so putting it back on the reader's copy of the writer schema reads the same bytes
and gives ``from_avro`` the native Spark type: both forms land in Delta with the same column
types. Pure: schema JSON in, schema JSON out.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["SEMANTIC_LOGICAL_TYPES", "restore_logical_types"]

#: (Debezium semantic name, Avro primitive) -> the logical type pgbridge's ``avro`` form adds.
#: ``MicroTimestamp`` is a local date-time in Debezium (``timestamp``); pgbridge's
#: ``timestamptz.handling.mode=instant`` also uses it, for UTC: in the ``connect`` form the two
#: cannot be told apart, so both become ``timestamp_ntz`` (use ``timestamptz.handling.mode=
#: string`` with ``connect``, as Debezium sends timestamptz).
SEMANTIC_LOGICAL_TYPES: Final[dict[tuple[str, str], str]] = {
    ("io.debezium.time.Date", "int"): "date",
    ("io.debezium.time.MicroTime", "long"): "time-micros",
    ("io.debezium.time.MicroTimestamp", "long"): "local-timestamp-micros",
    ("io.debezium.data.Uuid", "string"): "uuid",
}


def restore_logical_types(node: Any) -> Any:
    """``node`` with a logical type added to every primitive that has a Debezium semantic
    name from :data:`SEMANTIC_LOGICAL_TYPES` and no ``logicalType`` (walks records, unions,
    arrays and maps; other annotations are kept)."""
    if isinstance(node, list):
        return [restore_logical_types(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: restore_logical_types(v) if k in ("type", "items", "values") else v
        for k, v in node.items()
    }
    if isinstance(out.get("fields"), list):
        out["fields"] = [
            {**f, "type": restore_logical_types(f["type"])} if isinstance(f, dict) else f
            for f in out["fields"]
        ]
    kind = out.get("type")
    if "logicalType" not in out and isinstance(kind, str):
        logical = SEMANTIC_LOGICAL_TYPES.get((str(out.get("connect.name")), kind))
        if logical is not None:
            out["logicalType"] = logical
    return out
