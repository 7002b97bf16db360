"""Resolving OIDs: built-ins, Type messages (domains, extensions, arrays), enums, unknowns."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.pgoutput.messages import Type
from bridge.types import ConversionError, TypeMapper, TypeOptions, UnknownTypeError
from tests.types.vectors import schema_of


def test_mapper_builtin_resolves_without_type_message() -> None:
    assert TypeMapper().column_type(23).avro == "int"


def test_mapper_domain_resolves_to_its_base_type() -> None:
    # pgoutput sends a domain's OID with its base type's name, "" meaning pg_catalog.
    mapper = TypeMapper()
    mapper.observe(Type(None, 70001, "", "numeric"))
    ct = mapper.column_type(70001, ((8 << 16) | 3) + 4)
    assert schema_of(ct)["logicalType"] == "decimal" and schema_of(ct)["scale"] == 3


def test_mapper_enum_with_labels_is_debezium_enum() -> None:
    mapper = TypeMapper(TypeOptions(enum_labels={"public.mood": ("sad", "ok", "happy")}))
    mapper.observe(Type(None, 70002, "public", "mood"))
    ct = mapper.column_type(70002)
    assert ct.avro == {
        "type": "string",
        "connect.version": 1,
        "connect.parameters": {"allowed": "sad,ok,happy"},
        "connect.name": "io.debezium.data.Enum",
    }
    assert ct.from_text(b"happy") == ct.from_binary(b"happy") == "happy"


def test_mapper_enum_array_uses_element_labels() -> None:
    mapper = TypeMapper(TypeOptions(enum_labels={"mood": ("sad", "happy")}))
    mapper.observe(Type(None, 70003, "public", "_mood"))
    ct = mapper.column_type(70003)
    assert schema_of(ct)["items"][1]["connect.name"] == "io.debezium.data.Enum"
    assert ct.from_text(b"{sad,NULL}") == ["sad", None]


def test_mapper_unknown_type_falls_back_to_text_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    mapper = TypeMapper()
    mapper.observe(Type(None, 70004, "public", "complex_t"))
    with caplog.at_level(logging.WARNING, logger="bridge.types.mapper"):
        ct = mapper.column_type(70004, table="public.t", column="c")
        mapper.column_type(70004, 5, table="public.t", column="d")
    assert ct.avro == "string"
    assert ct.from_text(b'(1,"a b")') == '(1,"a b")'
    assert len(caplog.records) == 1
    assert "public.complex_t" in caplog.records[0].getMessage()


def test_mapper_unknown_type_fails_when_configured() -> None:
    mapper = TypeMapper(TypeOptions(unknown_types="fail"))
    mapper.observe(Type(None, 70005, "public", "complex_t"))
    with pytest.raises(UnknownTypeError) as info:
        mapper.column_type(70005, table="public.t", column="c")
    assert (info.value.table, info.value.column, info.value.type_oid) == ("public.t", "c", 70005)
    assert info.value.type_name == "public.complex_t"


def test_mapper_oid_without_type_message_is_unknown() -> None:
    with pytest.raises(UnknownTypeError, match="oid 70006"):
        TypeMapper(TypeOptions(unknown_types="fail")).column_type(70006, table="t", column="c")


def test_mapper_changed_type_message_drops_cached_mapping() -> None:
    mapper = TypeMapper()
    mapper.observe(Type(None, 70007, "public", "citext"))
    assert mapper.column_type(70007).pg_name == "citext"
    mapper.observe(Type(None, 70007, "public", "ltree"))
    assert mapper.column_type(70007).pg_name == "ltree"


def test_mapper_caches_per_oid_and_typmod() -> None:
    mapper = TypeMapper()
    assert mapper.column_type(1700, 655366) is mapper.column_type(1700, 655366)
    assert mapper.column_type(1700, 655366) is not mapper.column_type(1700, -1)


def test_mapper_unknown_type_in_binary_form_is_refused_unless_text() -> None:
    mapper = TypeMapper()
    mapper.observe(Type(None, 70008, "public", "complex_t"))
    ct = mapper.column_type(70008)
    assert ct.from_binary("label ü".encode()) == "label ü"  # e.g. an enum without labels
    with pytest.raises(ConversionError, match="binary"):
        ct.from_binary(b"\x00\x00\x00\x02\x00\x00\x00\x17")  # record_send of a composite


def test_mapper_set_enum_labels_rebuilds_enum_mappings() -> None:
    mapper = TypeMapper(TypeOptions(enum_labels={"mood": ("sad",)}))
    mapper.observe(Type(None, 70009, "public", "mood"))
    assert schema_of(mapper.column_type(70009))["connect.parameters"] == {"allowed": "sad"}
    mapper.set_enum_labels({"mood": ("sad", "happy")})
    assert schema_of(mapper.column_type(70009))["connect.parameters"] == {"allowed": "sad,happy"}


# -- schema.logical.types ---------------------------------------------------------------------


def _oid(name: str) -> int:
    from bridge.types.base import builtin_oid

    return builtin_oid(name)


@pytest.mark.parametrize(
    ("type_name", "connect_name"),
    [
        ("date", "io.debezium.time.Date"),
        ("time", "io.debezium.time.MicroTime"),
        ("timestamp", "io.debezium.time.MicroTimestamp"),
        ("timestamptz", "io.debezium.time.MicroTimestamp"),
        ("uuid", "io.debezium.data.Uuid"),
    ],
)
def test_mapper_connect_logical_types_drop_conflicting_logical_type(
    type_name: str, connect_name: str
) -> None:
    avro_form = schema_of(TypeMapper().column_type(_oid(type_name)))
    connect_form = schema_of(
        TypeMapper(TypeOptions(logical_types="connect")).column_type(_oid(type_name))
    )
    assert "logicalType" in avro_form  # the default keeps both, for Spark's from_avro
    assert connect_form["connect.name"] == connect_name
    assert "logicalType" not in connect_form  # Kafka Connect refuses the pair
    assert {k: v for k, v in avro_form.items() if k != "logicalType"} == connect_form


def test_mapper_connect_logical_types_keep_the_ones_connect_agrees_with() -> None:
    mapper = TypeMapper(TypeOptions(logical_types="connect"))
    decimal = schema_of(mapper.column_type(_oid("numeric"), ((12 << 16) | 2) + 4))
    assert decimal["logicalType"] == "decimal"
    assert decimal["connect.name"] == "org.apache.kafka.connect.data.Decimal"
    millis = TypeMapper(TypeOptions(logical_types="connect", time_precision="connect"))
    date = schema_of(millis.column_type(_oid("date")))
    assert date["logicalType"] == "date"
    assert date["connect.name"] == "org.apache.kafka.connect.data.Date"


def test_mapper_connect_logical_types_reach_array_elements() -> None:
    mapper = TypeMapper(TypeOptions(logical_types="connect"))
    schema = schema_of(mapper.column_type(1182))  # date[]
    assert schema["type"] == "array"
    items = schema["items"]
    branches = items if isinstance(items, list) else [items]
    dates = [b for b in branches if isinstance(b, dict)]
    assert dates and all("logicalType" not in b for b in dates)
    assert all(b["connect.name"] == "io.debezium.time.Date" for b in dates)


def test_mapper_connect_logical_types_same_encoded_values() -> None:
    avro = TypeMapper().column_type(_oid("date"))
    connect = TypeMapper(TypeOptions(logical_types="connect")).column_type(_oid("date"))
    assert avro.from_text(b"2024-02-29") == connect.from_text(b"2024-02-29") == 19782


# --- one mapping per column, whatever the order of what the mapper is told -------------------

AMOUNT, AMOUNTS, MOOD, PAIR = 17001, 17002, 17003, 17004
NUMERIC_12_3 = ((12 << 16) | 3) + 4


def _facts() -> list[Callable[[TypeMapper], None]]:
    """Everything a stream or a snapshot tells the mapper of four user types: the Type messages
    (a domain is named by its base type; an array of a domain by its own name), the catalog's
    word on domains (bridge.source.type_catalog) and the enum's labels."""
    return [
        lambda m: m.observe(Type(None, AMOUNT, "", "numeric")),
        lambda m: m.observe(Type(None, AMOUNTS, "public", "_amount")),
        lambda m: m.observe(Type(None, MOOD, "public", "mood")),
        lambda m: m.observe(Type(None, PAIR, "public", "pair")),
        lambda m: m.observe_resolved(AMOUNT, "", "numeric", NUMERIC_12_3),
        lambda m: m.observe_resolved(AMOUNTS, "", "_numeric", NUMERIC_12_3),
        lambda m: m.set_enum_labels({"public.mood": ("sad", "ok")}),
    ]


def _mappings(mapper: TypeMapper) -> list[Any]:
    return [mapper.column_type(oid).avro for oid in (AMOUNT, AMOUNTS, MOOD, PAIR)]


def _in_order(order: Sequence[int]) -> list[Any]:
    mapper, facts = TypeMapper(), _facts()
    for i in order:
        facts[i](mapper)
        with contextlib.suppress(Exception):
            _mappings(mapper)  # mapped in between: nothing cached may outlive a new fact
    return _mappings(mapper)


@given(st.permutations(range(7)))
def test_mapper_mapping_is_independent_of_the_order_of_facts(order: list[int]) -> None:
    assert _in_order(order) == _in_order(range(7))


def test_mapper_domain_keeps_its_modifier_and_arrays_of_it_too() -> None:
    amount, amounts, mood, pair = _in_order(range(7))
    plain = TypeMapper().column_type(1700, NUMERIC_12_3).avro
    assert amount == plain  # a decimal of scale 3, not VariableScaleDecimal
    assert amounts == {"type": "array", "items": ["null", plain]}
    assert mood["connect.name"] == "io.debezium.data.Enum"
    assert pair == "string"  # a composite: its text form


def test_mapper_column_modifier_wins_over_the_domains() -> None:
    mapper = TypeMapper()
    mapper.observe_resolved(AMOUNT, "", "numeric", NUMERIC_12_3)
    wider = ((20 << 16) | 5) + 4
    assert mapper.column_type(AMOUNT, wider).avro == TypeMapper().column_type(1700, wider).avro
