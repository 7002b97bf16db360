"""The compiled Avro writer against fastavro: same bytes, and the bytes read back to the input.

Values are generated from the schemas themselves (:func:`values_for`), for the envelopes that
:func:`bridge.schema.relation_schemas` builds over every built-in column type of
:mod:`bridge.types`, and for hand-written schemas covering what pgbridge does not emit today
(enums, fixed, maps, recursion, general unions through the fallback).
"""

from __future__ import annotations

import functools
import io
import json
import uuid
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from bridge.events import ChangeEvent, EventBuilder
from bridge.pgoutput.messages import (
    COLUMN_FLAG_KEY,
    Begin,
    Commit,
    Insert,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    Update,
)
from bridge.schema import RelationSchemas, relation_schemas
from bridge.sink import serializer as serializer_module
from bridge.sink.avro_writer import AvroWriteError, compile_writer, encode_long
from bridge.sink.registry import RegisteredSchemas
from bridge.sink.serializer import EnvelopeSerializer, SourceSettings
from bridge.types import TypeMapper, default_registry
from tests.rows import lsn, relation, tuple_data

# --- values from a schema ----------------------------------------------------------------------

_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=80)


def _full_name(schema: dict[str, Any], namespace: str) -> tuple[str, str]:
    name: str = schema["name"]
    if "." in name:
        return name, name.rpartition(".")[0]
    ns = schema.get("namespace", namespace) or ""
    return (f"{ns}.{name}" if ns else name), ns


# Recursion bound for named types: a record may contain itself this many levels deep. Past it,
# only the branches that end are drawn (an empty array or map, a union's other branches), so
# every drawn value is valid and none is filtered away.
_MAX_NESTING = 2


def values_for(schema: Any) -> st.SearchStrategy[Any]:
    """A strategy of values fastavro accepts for ``schema`` (primitive forms of logical types,
    and for some of them also the Python objects fastavro converts).

    Values are built directly, never drawn and filtered: a recursive named type is expanded
    at most :data:`_MAX_NESTING` times on any path, and beyond that the parts that can end
    (empty arrays and maps, the other branches of a union) are the only ones drawn."""
    definitions: dict[str, tuple[dict[str, Any], str]] = {}

    def named(full: str, stack: tuple[str, ...]) -> st.SearchStrategy[Any] | None:
        definition, ns = definitions[full]
        if stack.count(full) >= _MAX_NESTING:
            return None
        return build(definition, ns, stack)

    def build(s: Any, ns: str, stack: tuple[str, ...]) -> st.SearchStrategy[Any] | None:
        """None: no value of ``s`` fits within the nesting bound on this path."""
        if isinstance(s, str):
            for full in (s, f"{ns}.{s}"):
                if full in definitions:
                    return named(full, stack)
            return build({"type": s}, ns, stack)
        if isinstance(s, list):
            branches = [b for b in (build(b, ns, stack) for b in s) if b is not None]
            return st.one_of(*branches) if branches else None
        kind = s["type"]
        if isinstance(kind, (dict, list)):
            return build(kind, ns, stack)
        if kind == "array":
            items = build(s["items"], ns, stack)
            return st.just([]) if items is None else st.lists(items, max_size=3)
        if kind == "map":
            values = build(s["values"], ns, stack)
            return st.just({}) if values is None else st.dictionaries(_TEXT, values, max_size=3)
        if kind in ("enum", "fixed", "record"):
            full, child_ns = _full_name(s, ns)
            definitions.setdefault(full, (s, ns))
            if kind == "enum":
                return st.sampled_from(s["symbols"])
            if kind == "fixed":
                return st.binary(min_size=s["size"], max_size=s["size"])
            inner = (*stack, full)
            fields = {f["name"]: build(f["type"], child_ns, inner) for f in s["fields"]}
            if any(field is None for field in fields.values()):
                return None
            return st.fixed_dictionaries(fields)  # type: ignore[arg-type]
        return _primitive_values(kind, s.get("logicalType"), s)

    strategy = build(schema, "", ())
    assert strategy is not None, f"no finite value of {schema!r}"
    return strategy


def _primitive_values(kind: str, logical: str | None, s: dict[str, Any]) -> st.SearchStrategy[Any]:
    if kind == "bytes" and logical == "decimal":
        precision, scale = s["precision"], s.get("scale", 0)
        limit = 10 ** min(precision, 30) - 1
        unscaled = st.integers(-limit, limit)
        return st.one_of(
            unscaled.map(lambda u: Decimal(u).scaleb(-scale)),
            unscaled.map(lambda u: u.to_bytes((u.bit_length() + 8) // 8, "big", signed=True)),
        )
    if kind == "int" and logical == "date":
        return st.one_of(_INT32, st.dates())
    if kind == "long" and logical == "timestamp-micros":
        return st.one_of(
            _INT64, st.datetimes(timezones=st.just(UTC), min_value=datetime(1970, 1, 2))
        )
    if kind == "long" and logical == "time-micros":
        return st.one_of(st.integers(0, 86_400_000_000 - 1), st.times())
    if kind == "string" and logical == "uuid":
        return st.one_of(st.uuids().map(str), st.uuids())
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": _INT32,
        "long": _INT64,
        "float": st.floats(width=32, allow_nan=False),
        "double": st.floats(allow_nan=False),
        "bytes": st.binary(max_size=80),
        "string": _TEXT,
    }
    if kind not in simple:
        raise AssertionError(f"no strategy for {s!r}")
    return simple[kind]


# Compiled and parsed once per schema: a property test runs each example against the same one.
@functools.cache
def _parsed(schema_json: str) -> Any:
    return fastavro.parse_schema(json.loads(schema_json))


@functools.cache
def _compiled(schema_json: str) -> Any:
    return compile_writer(json.loads(schema_json))


def fastavro_bytes(schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _parsed(json.dumps(schema)), value)
    return out.getvalue()


def our_bytes(schema: Any, value: Any) -> bytes:
    buf = bytearray()
    _compiled(json.dumps(schema))(buf, value)
    return bytes(buf)


def _without_logical_types(schema: Any) -> Any:
    """The same schema minus logical types: reading with it returns the primitive forms."""
    if isinstance(schema, list):
        return [_without_logical_types(s) for s in schema]
    if isinstance(schema, dict):
        return {k: _without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    return schema


def _primitive_form(value: Any) -> Any:
    """What a value given as a Python object is written as (fastavro's conversions)."""
    if isinstance(value, dict):
        return {k: _primitive_form(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_primitive_form(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return (value - datetime(1970, 1, 1, tzinfo=UTC)) // _MICROSECOND
    if isinstance(value, date):
        return (value - date(1970, 1, 1)).days
    if isinstance(value, time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 10**6 + value.microsecond
    return value


_MICROSECOND = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)


def assert_same_as_fastavro(schema: Any, value: Any) -> None:
    ours = our_bytes(schema, value)
    assert ours == fastavro_bytes(schema, value)
    if not _has_decimal(value):
        read = fastavro.schemaless_reader(
            io.BytesIO(ours), _parsed(json.dumps(_without_logical_types(schema))), None
        )
        assert read == _primitive_form(value)


def _has_decimal(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_decimal(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_decimal(v) for v in value)
    return isinstance(value, Decimal)


# --- every column type bridge.types maps -------------------------------------------------------


def _zoo() -> RelationSchemas:
    """One table with a column of every built-in type (and typmod variants), keyed by two."""
    oids = sorted(default_registry().by_oid)
    columns: list[tuple[str, int, int]] = [(f"c{oid}", oid, -1) for oid in oids]
    columns += [
        ("num_12_2", 1700, ((12 << 16) | 2) + 4),
        ("num_38_0", 1700, (38 << 16) + 4),
        ("ts_3", 1114, 3),
        ("tstz_0", 1184, 0),
        ("varchar_5", 1043, 9),
    ]
    rel = Relation(
        xid=None,
        relation_oid=99,
        namespace="public",
        relation_name="zoo",
        replica_identity=ReplicaIdentity.DEFAULT,
        columns=tuple(
            RelationColumn(COLUMN_FLAG_KEY if name in ("c20", "c25") else 0, name, oid, mod)
            for name, oid, mod in columns
        ),
    )
    return relation_schemas(rel, TypeMapper(), topic_prefix="zoo")


ZOO = _zoo()
ZOO_VALUE_RECORD = ZOO.value_schema["fields"][0]["type"][1]
_SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_avro_writer_zoo_covers_the_type_families() -> None:
    # Not a vacuous zoo: decimals, temporal logical types, arrays, the VariableScaleDecimal
    # record and strings with connect names all take part.
    text = json.dumps(ZOO.value_schema)
    for needle in (
        '"decimal"',
        "timestamp-micros",
        '"date"',
        "time-micros",
        '"uuid"',
        '"array"',
        "VariableScaleDecimal",
        '"double"',
        '"float"',
        '"boolean"',
        '"bytes"',
    ):
        assert needle in text, needle


@_SLOW
@given(values_for(ZOO_VALUE_RECORD))
def test_avro_writer_zoo_rows_equal_fastavro(record: dict[str, Any]) -> None:
    assert_same_as_fastavro(ZOO_VALUE_RECORD, record)


assert ZOO.key_schema is not None


@_SLOW
@given(values_for(ZOO.value_schema), values_for(ZOO.key_schema))
def test_avro_writer_zoo_envelopes_and_keys_equal_fastavro(
    envelope: dict[str, Any], key: dict[str, Any]
) -> None:
    assert_same_as_fastavro(ZOO.value_schema, envelope)
    assert ZOO.key_schema is not None
    assert_same_as_fastavro(ZOO.key_schema, key)


# --- hand-written schemas ----------------------------------------------------------------------

OTHER_SCHEMAS: list[Any] = [
    "long",
    "int",
    "string",
    ["string", "null"],
    {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]},
    {"type": "fixed", "name": "Md5", "size": 16},
    {"type": "map", "values": ["null", "double"]},
    {"type": "array", "items": {"type": "array", "items": "float"}},
    ["null", "long", "string"],  # a general union: fastavro's branch choice, via the fallback
    {
        "type": "record",
        "name": "Node",
        "namespace": "t",
        "fields": [
            {"name": "label", "type": "string"},
            {"name": "children", "type": {"type": "array", "items": "Node"}},
            {"name": "next", "type": ["null", "t.Node"], "default": None},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {"name": "again", "type": ["null", "Kind"]},
            {"name": "any", "type": ["int", "string", "Kind"]},
        ],
    },
]


@pytest.mark.parametrize("schema", OTHER_SCHEMAS, ids=lambda s: json.dumps(s)[:40])
@_SLOW
@given(data=st.data())
def test_avro_writer_other_schemas_equal_fastavro(schema: Any, data: st.DataObject) -> None:
    assert_same_as_fastavro(schema, data.draw(values_for(schema)))


@pytest.mark.parametrize(
    "n",
    [
        *(0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, -8193),
        *(2**20 - 1, -(2**20), 2**20, -(2**20) - 1, 2**31 - 1, -(2**31), 2**62, 2**63 - 1),
        -(2**63),
    ],
)
def test_avro_writer_long_boundaries_equal_fastavro(n: int) -> None:
    assert encode_long(n) == fastavro_bytes("long", n)
    # Record fields take the generated code's inline varint paths (1, 2 and 3 bytes).
    record = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": ["null", "long"]}],
    }
    assert our_bytes(record, {"a": n, "b": n}) == fastavro_bytes(record, {"a": n, "b": n})


def test_avro_writer_out_of_range_values_are_errors() -> None:
    with pytest.raises(AvroWriteError):
        our_bytes("long", 2**63)
    with pytest.raises(AvroWriteError):
        our_bytes("int", 2**31)
    with pytest.raises(AvroWriteError):
        our_bytes({"type": "enum", "name": "E", "symbols": ["A"]}, "B")
    with pytest.raises(AvroWriteError):
        our_bytes(
            {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
            Decimal("1.234"),
        )


def test_avro_writer_missing_field_takes_default_like_fastavro() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "a", "type": "long"},
            {"name": "b", "type": ["null", "string"], "default": None},
            {"name": "c", "type": "string", "default": "x"},
        ],
    }
    assert our_bytes(schema, {"a": 5}) == fastavro_bytes(schema, {"a": 5})
    with pytest.raises(AvroWriteError):
        our_bytes(schema, {"b": "no a"})


# --- the serializer's envelope assembly --------------------------------------------------------


def _events() -> list[ChangeEvent]:
    b = EventBuilder("app")
    out: list[Any] = []
    for m in (
        relation(),
        relation(oid=16385, name="other"),
        Begin(lsn("1/2000"), 1_000_000, 42),
        Insert(None, 16384, tuple_data("7", "hello")),
        Insert(None, 16385, tuple_data("8", "there")),
        Update(None, 16384, None, None, tuple_data("7", None, unchanged=(1,))),
        Commit(0, lsn("1/2000"), lsn("1/2030"), 1_000_000),
        Begin(lsn("1/3000"), 2_000_000, 43),
        Insert(None, 16384, tuple_data("9", "again")),
        Commit(0, lsn("1/3000"), lsn("1/3030"), 2_000_000),
    ):
        out += b.feed(m)
    return [e for e in out if isinstance(e, ChangeEvent)]


@pytest.mark.parametrize("transaction_metadata", [False, True])
def test_serializer_envelope_parts_equal_fastavro_of_the_whole(
    transaction_metadata: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pre-encoded source prefix + seq, cached timestamps and op bytes make exactly the
    bytes fastavro writes for the envelope dict (the clock is frozen to compare them)."""
    monkeypatch.setattr("bridge.sink.serializer.time.time_ns", lambda: 1_700_000_000_123_456_789)
    settings_ = SourceSettings("app", "shop", provide_transaction_metadata=transaction_metadata)
    fast = EnvelopeSerializer(settings_)
    reference = EnvelopeSerializer(settings_)
    for n, event in enumerate(_events()):
        ids = RegisteredSchemas(key_id=2 * n + 1, value_id=2 * n + 2)
        assert event.table.key_schema is not None
        fast.register_parsed(ids.key_id, event.table.key_schema)  # type: ignore[arg-type]
        fast.register_parsed(ids.value_id, event.table.value_schema)
        record = reference._envelope_record(event)
        expected = serializer_module.frame(
            ids.value_id, fastavro_bytes(event.table.value_schema, record)
        )
        assert fast.value(event, ids) == expected
        key = event.table.key_of(event.after or event.before or {})
        assert ids.key_id is not None
        assert fast.key(event, ids) == serializer_module.frame(
            ids.key_id, fastavro_bytes(event.table.key_schema, key)
        )


def test_decimal_with_an_exponent_far_outside_the_schema_fails_fast() -> None:
    # Decimal.as_integer_ratio of 1E-999999999 would compute a billion-digit power of ten.
    writer = compile_writer(
        {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}
    )
    for text in ("1E999999999", "1E-999999999", "1E+12", "0.0001"):
        with pytest.raises(AvroWriteError, match="decimal"):
            writer(bytearray(), Decimal(text))


NODE_SCHEMA = OTHER_SCHEMAS[-1]


def _nesting(node: dict[str, Any]) -> int:
    inner = [*node["children"], *([node["next"]] if node["next"] else [])]
    return 1 + max((_nesting(child) for child in inner), default=0)


def test_values_for_recursive_schema_nests_to_its_bound_and_no_deeper() -> None:
    # The strategy explores recursion (a Node holding Nodes) without drawing and discarding
    # values: it reaches the bound, and every value it draws stays within it.
    strategy = values_for(NODE_SCHEMA)
    nested = find(
        strategy,
        lambda node: _nesting(node) == 2,
        settings=settings(database=None, phases=[Phase.generate]),
    )
    assert nested["children"] or nested["next"]

    @settings(max_examples=100, deadline=None)
    @given(strategy)
    def within_bound(node: dict[str, Any]) -> None:
        assert _nesting(node) <= 2

    within_bound()
