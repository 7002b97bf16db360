"""Columns added by ``ALTER TABLE ... ADD COLUMN ... DEFAULT``: rows written before the ALTER
hold, in PostgreSQL, the value computed at the ALTER (``attmissingval``). Consumers reading such
a row's record with the new schema must read that value, not null (bridge.schema)."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from bridge.pgoutput.messages import COLUMN_FLAG_KEY, Relation, RelationColumn, ReplicaIdentity
from bridge.schema import MISSING, TableHints, relation_schemas
from bridge.source.column_numbers import missing_values
from bridge.types import TypeMapper
from tests.test_schema import source_block

INT4, INT8, TEXT, BOOL, FLOAT8, NUMERIC, BYTEA = 23, 20, 25, 16, 701, 1700, 17
DATE, TIMESTAMPTZ, INT4_ARRAY, JSONB, UUID, INTERVAL = 1082, 1184, 1007, 3802, 2950, 1186
NUMERIC_10_2 = ((10 << 16) | 2) + 4


def _schemas(added: RelationColumn | None, missing: dict[str, str]) -> dict[str, Any]:
    columns = [RelationColumn(COLUMN_FLAG_KEY, "id", INT8, -1)]
    if added is not None:
        columns.append(added)
    rel = Relation(None, 16384, "public", "t", ReplicaIdentity.DEFAULT, tuple(columns))
    hints = TableHints(missing_values=missing)
    return relation_schemas(rel, TypeMapper(), topic_prefix="pg", hints=hints).value_schema


def _after_field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    record = next(b for b in schema["fields"][0]["type"] if isinstance(b, dict))
    return next(f for f in record["fields"] if f["name"] == name)


def _read_old_record_with(new: dict[str, Any]) -> dict[str, Any]:
    """A row written before the column existed (the old schema), read with the new one."""
    old = fastavro.parse_schema(_schemas(None, {}))
    record = {
        "before": None,
        "after": {"id": 1},
        "source": source_block(),
        "transaction": None,
        "op": "r",
        "ts_ms": None,
        "ts_us": None,
        "ts_ns": None,
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, record)
    buf.seek(0)
    read = fastavro.schemaless_reader(buf, old, fastavro.parse_schema(new))
    assert isinstance(read, dict)
    after = read["after"]
    assert isinstance(after, dict)
    return after


CASES = [
    (TEXT, -1, 'dflt, "quoted"', 'dflt, "quoted"'),
    (INT4, -1, "5", 5),
    (INT8, -1, "-9223372036854775808", -9223372036854775808),
    (BOOL, -1, "t", True),
    (FLOAT8, -1, "1.5", 1.5),
    (NUMERIC, NUMERIC_10_2, "12.50", None),  # bytes of the unscaled value: compared below
    (BYTEA, -1, "\\x00ff", b"\x00\xff"),
    (DATE, -1, "2024-02-29", None),
    (TIMESTAMPTZ, -1, "2026-11-27 21:37:18.384184+00", None),
    (JSONB, -1, '{"a": 1}', '{"a": 1}'),
    (UUID, -1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    (INTERVAL, -1, "1 day 00:00:01", 86_401_000_000),
]


@pytest.mark.parametrize(("oid", "typmod", "text", "expected"), CASES)
def test_an_old_record_read_with_the_new_schema_holds_the_missing_value(
    oid: int, typmod: int, text: str, expected: Any
) -> None:
    mapper = TypeMapper()
    column_type = mapper.column_type(oid, typmod)
    converted = column_type.from_text(text.encode())
    new = _schemas(RelationColumn(0, "added", oid, typmod), {"added": text})
    field = _after_field(new, "added")
    assert field[MISSING] == text
    assert field["type"][1] == "null", "a non-null default needs the union [T, null]"
    after = _read_old_record_with(new)
    if isinstance(converted, (bytes, Decimal)) and isinstance(after["added"], str):
        # fastavro hands a bytes default back as its JSON string (one code point per byte),
        # without the decimal logical type's conversion
        raw = after["added"].encode("latin-1")
        after["added"] = (
            raw if isinstance(converted, bytes) else Decimal(int.from_bytes(raw, signed=True))
        )
        if isinstance(converted, Decimal):
            after["added"] = after["added"].scaleb(-2)
    assert after["added"] == converted
    if expected is not None:
        assert after["added"] == expected


def test_without_a_missing_value_the_field_stays_null_first() -> None:
    field = _after_field(_schemas(RelationColumn(0, "added", INT4, -1), {}), "added")
    assert field["type"] == ["null", "int"] and field["default"] is None
    assert MISSING not in field
    assert (
        _read_old_record_with(_schemas(RelationColumn(0, "added", INT4, -1), {}))["added"] is None
    )


@pytest.mark.parametrize(
    ("oid", "text"), [(FLOAT8, "NaN"), (NUMERIC, "1.5"), (INT4_ARRAY, "{1,NULL}")]
)
def test_a_value_avro_cannot_default_to_is_still_told_in_the_field(oid: int, text: str) -> None:
    """NaN is no JSON number; an unconstrained numeric is a record (VariableScaleDecimal); an
    array's items are unions, whose JSON default form Avro readers disagree on: the union
    stays ``["null", T]`` (an old record reads null) and ``pgbridge.missing`` holds
    PostgreSQL's text."""
    new = _schemas(RelationColumn(0, "added", oid, -1), {"added": text})
    field = _after_field(new, "added")
    assert field["type"][0] == "null" and field["default"] is None
    assert field[MISSING] == text
    assert _read_old_record_with(new)["added"] is None


def test_missing_values_are_read_only_while_the_catalog_describes_the_message() -> None:
    columns = [RelationColumn(0, "id", INT4, -1), RelationColumn(0, "added", TEXT, -1)]
    catalog = [("id", 1, INT4, None), ("added", 3, TEXT, "dflt")]
    assert missing_values(columns, catalog) == {"added": "dflt"}
    # The table changed since the message (a later column's type differs): nothing is trusted.
    assert missing_values(columns, [("id", 1, INT4, None), ("added", 3, INT8, "5")]) == {}


def test_a_rewrite_clearing_the_missing_value_is_no_type_change() -> None:
    """A later table rewrite (ALTER ... TYPE of another column) clears attmissingval: the field
    goes from [int, "null"] with a default to ["null", int]. The column's type is the same, so
    a refused change names only the columns that changed (bridge.schema_versions)."""
    from bridge.schema_versions import column_changes

    added = RelationColumn(0, "w", INT4, -1)
    with_default, cleared = _schemas(added, {"w": "7"}), _schemas(added, {})
    assert _after_field(with_default, "w")["type"] != _after_field(cleared, "w")["type"]
    assert column_changes(with_default, cleared) == []
    assert column_changes(with_default, _schemas(RelationColumn(0, "w", TEXT, -1), {})) == [
        ("w", "type changed")
    ]
