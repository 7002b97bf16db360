"""Relation -> key/value schemas (Debezium names and shape, per replica identity), the row
encoder, and schema comparison."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from bridge.pgoutput.messages import (
    COLUMN_FLAG_KEY,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    TupleData,
)
from bridge.schema import (
    UNCHANGED_TOAST_FIELD,
    KeylessTableError,
    SchemaError,
    TableHints,
    avro_name,
    relation_schemas,
    static_schema,
    subject_names,
    topic_name,
)
from bridge.schema_versions import carry_renames, column_changes
from bridge.types import DEBEZIUM_UNAVAILABLE, ConversionError, TypeMapper, TypeOptions

NUMERIC_10_2 = ((10 << 16) | 2) + 4


def col(name: str, oid: int, typmod: int = -1, *, key: bool = False) -> RelationColumn:
    return RelationColumn(COLUMN_FLAG_KEY if key else 0, name, oid, typmod)


def relation(
    *columns: RelationColumn,
    identity: ReplicaIdentity = ReplicaIdentity.DEFAULT,
    namespace: str = "public",
    name: str = "orders",
) -> Relation:
    return Relation(None, 16384, namespace, name, identity, columns)


ORDERS = relation(
    col("id", 20, key=True),
    col("amount", 1700, NUMERIC_10_2),
    col("note", 25),
    col("created", 1184),
    col("tags", 1009),
)


def tuple_data(*values: bytes | str | None) -> TupleData:
    """TupleData with text values; None = NULL, "u" = unchanged TOAST."""
    kinds, buffer, spans = bytearray(), bytearray(), []
    for value in values:
        if value is None:
            kinds += b"n"
            spans += [0, 0]
        elif value == "u":
            kinds += b"u"
            spans += [0, 0]
        else:
            assert isinstance(value, bytes)
            kinds += b"t"
            spans += [len(buffer), len(buffer) + len(value)]
            buffer += value
    return TupleData(bytes(kinds), bytes(buffer), tuple(spans))


def source_block(**overrides: Any) -> dict[str, Any]:
    block: dict[str, Any] = {
        "version": "0.1.0",
        "connector": "postgresql",
        "name": "pg",
        "ts_ms": 1_700_000_000_000,
        "snapshot": "false",
        "db": "app",
        "sequence": None,
        "ts_us": None,
        "ts_ns": None,
        "schema": "public",
        "table": "orders",
        "txId": 42,
        "lsn": 1000,
        "xmin": None,
        "commit_lsn": 2000,
        "seq": 0,
    }
    block.update(overrides)
    return block


def avro_roundtrip(schema: dict[str, Any], value: Any, reader: dict[str, Any] | None = None) -> Any:
    parsed = fastavro.parse_schema(schema)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, value)
    buf.seek(0)
    read_with = fastavro.parse_schema(reader) if reader is not None else None
    return fastavro.schemaless_reader(buf, parsed, read_with)


# --- names -------------------------------------------------------------------------------------


def test_topic_and_subjects_follow_debezium_and_topic_name_strategy() -> None:
    schemas = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg")
    assert schemas.topic == "pg.public.orders"
    assert (schemas.key_subject, schemas.value_subject) == (
        "pg.public.orders-key",
        "pg.public.orders-value",
    )
    assert subject_names("t") == ("t-key", "t-value")


def test_topic_name_of_pg_catalog_and_odd_characters() -> None:
    assert topic_name("pg", relation(col("a", 23, key=True), namespace="", name="x")) == (
        "pg.pg_catalog.x"
    )
    assert topic_name("pg", relation(col("a", 23, key=True), name="my table$")) == (
        "pg.public.my_table_"
    )


def test_avro_name_replaces_invalid_characters_and_leading_digit() -> None:
    assert [avro_name(n) for n in ("ok_1", "my col", "1st", "é", "")] == [
        "ok_1",
        "my_col",
        "_1st",
        "_",
        "_",
    ]


def test_value_schema_is_debezium_envelope() -> None:
    value = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg").value_schema
    assert (value["name"], value["namespace"], value["connect.name"], value["connect.version"]) == (
        "Envelope",
        "pg.public.orders",
        "pg.public.orders.Envelope",
        2,
    )
    names = [f["name"] for f in value["fields"]]
    assert names == [
        "before",
        "after",
        "source",
        "transaction",
        "op",
        "ts_ms",
        "ts_us",
        "ts_ns",
        UNCHANGED_TOAST_FIELD,
    ]
    before = value["fields"][0]
    assert before["type"][0] == "null" and before["default"] is None
    record = before["type"][1]
    assert (record["name"], record["connect.name"]) == ("Value", "pg.public.orders.Value")
    assert value["fields"][1]["type"] == ["null", "pg.public.orders.Value"]
    source = value["fields"][2]["type"]
    assert source["connect.name"] == "io.debezium.connector.postgresql.Source"
    assert {"version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "schema",
            "table", "txId", "lsn", "xmin", "commit_lsn", "seq"} <= {
        f["name"] for f in source["fields"]
    }  # fmt: skip
    assert value["fields"][3]["type"][1]["connect.name"] == "event.block"
    fastavro.parse_schema(value)


def test_value_fields_are_nullable_with_null_default_and_semantic_types() -> None:
    value = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg").value_schema
    fields = {f["name"]: f for f in value["fields"][0]["type"][1]["fields"]}
    assert all(f["type"][0] == "null" and f["default"] is None for f in fields.values())
    amount = fields["amount"]["type"][1]
    assert amount["connect.name"] == "org.apache.kafka.connect.data.Decimal"
    assert amount["connect.parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
    assert amount["logicalType"] == "decimal"
    assert fields["created"]["type"][1]["logicalType"] == "timestamp-micros"


# --- keys per replica identity ---------------------------------------------------------------


def test_key_schema_default_identity_is_required_key_columns() -> None:
    key = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg").key_schema
    assert key == {
        "type": "record",
        "name": "Key",
        "namespace": "pg.public.orders",
        "fields": [{"name": "id", "type": "long"}],
        "connect.name": "pg.public.orders.Key",
    }


def test_key_schema_index_identity_uses_flagged_columns_in_order() -> None:
    rel = relation(
        col("a", 23),
        col("tenant", 25, key=True),
        col("code", 1700, NUMERIC_10_2, key=True),
        identity=ReplicaIdentity.INDEX,
    )
    schemas = relation_schemas(rel, TypeMapper(), topic_prefix="pg")
    assert schemas.key_fields == ("tenant", "code")
    assert schemas.key_schema is not None
    key_types = [f["type"] for f in schemas.key_schema["fields"]]
    assert key_types[0] == "string" and key_types[1]["logicalType"] == "decimal"


def test_key_schema_full_identity_without_key_columns_is_a_null_key() -> None:
    # Keyed by the whole row, two identical rows would share a key and collapse downstream.
    rel = relation(col("a", 23, key=True), col("b", 25, key=True), identity=ReplicaIdentity.FULL)
    schemas = relation_schemas(rel, TypeMapper(), topic_prefix="pg")
    assert schemas.key_fields == ()
    assert schemas.key_schema is None
    assert schemas.key_of({"a": 1, "b": "x"}) is None


def test_key_schema_full_identity_is_keyed_by_the_catalogs_primary_key() -> None:
    # As Debezium: the Relation flags every column, the catalog says which are the primary key.
    rel = relation(col("a", 23, key=True), col("b", 25, key=True), identity=ReplicaIdentity.FULL)
    schemas = relation_schemas(
        rel, TypeMapper(), topic_prefix="pg", hints=TableHints(primary_key=("a",))
    )
    assert schemas.key_fields == ("a",)
    assert schemas.key_schema is not None
    assert [f["type"] for f in schemas.key_schema["fields"]] == ["int"]  # NOT NULL: no union
    assert schemas.key_of({"a": 1, "b": "x"}) == {"a": 1}
    # A primary key column the publication leaves out: no key, as without one.
    narrow = relation(col("b", 25, key=True), identity=ReplicaIdentity.FULL)
    hints = TableHints(primary_key=("a",))
    assert relation_schemas(narrow, TypeMapper(), topic_prefix="pg", hints=hints).key_schema is None
    # message.key.columns still chooses.
    chosen = TableHints(key_columns=("b",), primary_key=("a",))
    assert relation_schemas(rel, TypeMapper(), topic_prefix="pg", hints=chosen).key_fields == ("b",)


def test_key_schema_full_identity_with_key_columns_is_optional() -> None:
    rel = relation(col("a", 23, key=True), col("b", 25, key=True), identity=ReplicaIdentity.FULL)
    hints = TableHints(key_columns=("b", "a"))
    schemas = relation_schemas(rel, TypeMapper(), topic_prefix="pg", hints=hints)
    assert schemas.key_fields == ("b", "a")
    assert schemas.key_schema is not None
    assert all(f["type"][0] == "null" for f in schemas.key_schema["fields"])


def test_key_schema_full_identity_with_key_hint_uses_the_hint() -> None:
    rel = relation(col("a", 23), col("b", 25), identity=ReplicaIdentity.FULL)
    hints = TableHints(key_columns=("b",))
    assert relation_schemas(rel, TypeMapper(), topic_prefix="p", hints=hints).key_fields == ("b",)
    with pytest.raises(SchemaError, match="not in the table"):
        relation_schemas(rel, TypeMapper(), topic_prefix="p", hints=TableHints(key_columns=("z",)))


@pytest.mark.parametrize("identity", [ReplicaIdentity.NOTHING, ReplicaIdentity.DEFAULT])
def test_keyless_table_fail_mode_is_a_typed_error(identity: ReplicaIdentity) -> None:
    rel = relation(col("a", 23), identity=identity)
    with pytest.raises(KeylessTableError) as info:
        relation_schemas(rel, TypeMapper(), topic_prefix="pg", keyless="fail")
    assert info.value.table == "public.orders"
    assert info.value.replica_identity is identity


@pytest.mark.parametrize("identity", list(ReplicaIdentity))
def test_keyless_table_gets_a_null_key_by_default(identity: ReplicaIdentity) -> None:
    rel = relation(col("a", 23), identity=identity)
    schemas = relation_schemas(rel, TypeMapper(), topic_prefix="pg")
    assert schemas.key_schema is None
    assert schemas.key_of({"a": 1}) is None


def test_zero_column_table_has_an_empty_value_record_and_a_null_key() -> None:
    schemas = relation_schemas(relation(identity=ReplicaIdentity.DEFAULT), TypeMapper(),
                               topic_prefix="pg")  # fmt: skip
    assert schemas.key_schema is None
    assert schemas.value_schema["fields"][0]["type"][1]["fields"] == []
    assert schemas.encoder.encode(tuple_data())[0] == {}


# --- names, docs, named types ----------------------------------------------------------------


def test_column_comments_become_doc_and_renamed_columns_keep_their_name() -> None:
    rel = relation(col("id", 23, key=True), col("my col", 25))
    hints = TableHints(comments={"my col": "What the customer wrote"}, table_comment="Orders")
    value = relation_schemas(rel, TypeMapper(), topic_prefix="pg", hints=hints).value_schema
    record = value["fields"][0]["type"][1]
    assert record["doc"] == "Orders"
    field = record["fields"][1]
    assert (field["name"], field["doc"], field["pgbridge.column"]) == (
        "my_col",
        "What the customer wrote",
        "my col",
    )


def test_array_dimensions_hint_nests_the_field() -> None:
    rel = relation(col("id", 23, key=True), col("grid", 1007))
    hints = TableHints(array_dimensions={"grid": 2})
    schemas = relation_schemas(rel, TypeMapper(), topic_prefix="pg", hints=hints)
    grid = schemas.value_schema["fields"][0]["type"][1]["fields"][1]["type"][1]
    assert grid == {"type": "array", "items": {"type": "array", "items": ["null", "int"]}}
    assert schemas.encoder.encode(tuple_data(b"1", b"{{1,2},{3,4}}"))[0]["grid"] == [[1, 2], [3, 4]]


def test_colliding_column_names_get_a_stable_unique_suffix_and_keep_the_original() -> None:
    rel = relation(col("a b", 23, key=True), col("a_b", 23), col("naïve", 25), col("na_ve", 25))
    schemas = relation_schemas(rel, TypeMapper(), topic_prefix="pg")
    fields = schemas.value_schema["fields"][0]["type"][1]["fields"]
    names = [f["name"] for f in fields]
    assert names[0] == "a_b" and names[2] == "na_ve"
    assert names[1].startswith("a_b_") and names[3].startswith("na_ve_")
    assert len(set(names)) == 4
    assert [f.get("pgbridge.column") for f in fields] == ["a b", "a_b", "naïve", "na_ve"]
    # Stable: the same relation maps the same way again.
    again = relation_schemas(rel, TypeMapper(), topic_prefix="pg")
    assert again.field_names == schemas.field_names
    row, _ = schemas.encoder.encode(tuple_data(b"1", b"2", b"x", b"y"))
    assert dict(row) == {names[0]: 1, names[1]: 2, names[2]: "x", names[3]: "y"}


def test_repeated_named_types_are_defined_once() -> None:
    rel = relation(col("id", 23, key=True), col("n1", 1700), col("n2", 1700), col("p1", 600),
                   col("p2", 600), col("ps", 1017))  # fmt: skip
    value = relation_schemas(rel, TypeMapper(), topic_prefix="pg").value_schema
    text = json.dumps(value)
    assert text.count('"name": "VariableScaleDecimal"') == 1
    assert text.count('"name": "Point"') == 1
    fastavro.parse_schema(value)


# --- row encoding -----------------------------------------------------------------------------


def test_encoder_builds_avro_ready_row_that_roundtrips_in_envelope() -> None:
    schemas = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg")
    row, unchanged = schemas.encoder.encode(
        tuple_data(b"7", b"12.50", "u", b"2024-01-01 00:00:00+00", b'{a,"b c",NULL}')
    )
    assert row == {
        "id": 7,
        "amount": Decimal("12.50"),
        "note": DEBEZIUM_UNAVAILABLE,
        "created": 1_704_067_200_000_000,
        "tags": ["a", "b c", None],
    }
    assert unchanged == ["note"]
    assert schemas.key_of(row) == {"id": 7}
    event = {
        "before": None,
        "after": row,
        "source": source_block(),
        "transaction": {"id": "42:2000", "total_order": 1, "data_collection_order": 1},
        "op": "u",
        "ts_ms": 1_700_000_000_001,
        UNCHANGED_TOAST_FIELD: unchanged,
    }
    back = avro_roundtrip(schemas.value_schema, event)
    assert back["after"]["amount"] == Decimal("12.50")
    assert back[UNCHANGED_TOAST_FIELD] == ["note"]
    assert back["source"]["commit_lsn"] == 2000
    assert schemas.key_schema is not None
    assert avro_roundtrip(schemas.key_schema, {"id": 7}) == {"id": 7}


def test_encoder_unchanged_toast_of_non_string_column_is_null_and_listed() -> None:
    schemas = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg")
    row, unchanged = schemas.encoder.encode(tuple_data(b"1", None, None, None, "u"))
    assert row["tags"] is None and row["amount"] is None
    assert unchanged == ["tags"]


def test_encoder_reads_binary_kind() -> None:
    rel = relation(col("id", 23, key=True), col("d", 1082))
    schemas = relation_schemas(rel, TypeMapper(), topic_prefix="pg")
    data = TupleData(b"bb", (5).to_bytes(4, "big") + (0).to_bytes(4, "big"), (0, 4, 4, 8))
    assert schemas.encoder.encode(data) == ({"id": 5, "d": 10_957}, [])


def test_encoder_bad_value_names_table_and_column() -> None:
    schemas = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg")
    with pytest.raises(ConversionError) as info:
        schemas.encoder.encode(tuple_data(b"1", b"not a number", None, None, None))
    assert (info.value.table, info.value.column) == ("public.orders", "amount")
    assert info.value.raw == b"not a number"


def test_encoder_tuple_with_wrong_column_count_is_an_error() -> None:
    schemas = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg")
    with pytest.raises(ConversionError, match="5"):
        schemas.encoder.encode(tuple_data(b"1"))


def test_unknown_type_column_is_text_or_error_naming_it() -> None:
    rel = relation(col("id", 23, key=True), col("c", 99999))
    schemas = relation_schemas(rel, TypeMapper(), topic_prefix="pg")
    assert schemas.encoder.encode(tuple_data(b"1", b"(1,x)"))[0]["c"] == "(1,x)"
    from bridge.types import UnknownTypeError

    with pytest.raises(UnknownTypeError) as info:
        relation_schemas(rel, TypeMapper(TypeOptions(unknown_types="fail")), topic_prefix="pg")
    assert (info.value.table, info.value.column) == ("public.orders", "c")


# --- evolution --------------------------------------------------------------------------------


def test_adding_nullable_column_is_backward_compatible() -> None:
    old = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg")
    new = relation_schemas(
        relation(*ORDERS.columns, col("extra", 25)), TypeMapper(), topic_prefix="pg"
    )
    row = old.encoder.encode(tuple_data(b"1", None, b"x", None, None))[0]
    event = {"before": None, "after": row, "source": source_block(), "op": "c"}
    # Data written with the old schema, read with the new one: the new field takes its default.
    back = avro_roundtrip(old.value_schema, event, reader=new.value_schema)
    assert back["after"]["extra"] is None
    assert back[UNCHANGED_TOAST_FIELD] == []
    assert column_changes(old.value_schema, new.value_schema) == [("extra", "added")]


def test_column_changes_names_removed_and_retyped_columns() -> None:
    old = relation_schemas(ORDERS, TypeMapper(), topic_prefix="pg")
    cols = [c for c in ORDERS.columns if c.name != "note"]
    cols[1] = col("amount", 1700, ((12 << 16) | 2) + 4)
    new = relation_schemas(relation(*cols), TypeMapper(), topic_prefix="pg")
    assert column_changes(old.value_schema, new.value_schema) == [
        ("amount", "type changed"),
        ("note", "removed"),
    ]
    assert old.key_schema is not None and new.key_schema is not None
    assert column_changes(old.key_schema, new.key_schema) == []


def test_static_schemas_parse() -> None:
    for name in (
        "source",
        "transaction_block",
        "heartbeat_key",
        "heartbeat_value",
        "transaction_metadata_key",
        "transaction_metadata_value",
    ):
        fastavro.parse_schema(static_schema(name))


def test_registry_client_gives_up_on_a_registry_that_never_answers() -> None:
    # confluent-kafka's client has no request timeout by default: a stuck connection would
    # block the bridge forever. A listener that accepts and never answers must fail the call.
    import socket
    import time

    from bridge.sink.registry import registry_client

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        # One attempt: the client's retries (with backoff) only lengthen what is tested here.
        url = f"http://127.0.0.1:{port}"
        client = registry_client({"url": url, "timeout": 1, "max.retries": 0})
        started = time.monotonic()
        with pytest.raises(Exception, match=r"(?i)timed? ?out"):
            client.get_subjects()
        assert time.monotonic() - started < 30


def test_registry_client_default_timeout_is_set() -> None:
    from bridge.sink.registry import REQUEST_TIMEOUT_S, registry_client

    assert registry_client("http://127.0.0.1:1")._rest_client.timeout == REQUEST_TIMEOUT_S


# --- renames, told by attribute numbers --------------------------------------------------------


def _value_fields(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    before = next(f for f in schema["fields"] if f["name"] == "before")
    record = next(b for b in before["type"] if isinstance(b, dict))
    return {f["name"]: f for f in record["fields"]}


def _version(numbers: dict[str, int], *columns: RelationColumn) -> dict[str, Any]:
    rel = relation(col("id", 20, key=True), *columns)
    hints = TableHints(column_numbers={"id": 1, **numbers})
    return relation_schemas(rel, TypeMapper(), topic_prefix="pg", hints=hints).value_schema


def test_fields_carry_their_attribute_numbers() -> None:
    fields = _value_fields(_version({"vc": 2}, col("vc", 25)))
    assert fields["id"]["pgbridge.attnum"] == 1
    assert fields["vc"]["pgbridge.attnum"] == 2


def test_a_column_with_the_number_of_one_under_another_name_was_renamed() -> None:
    old = _version({"vc": 2}, col("vc", 25))
    new = carry_renames(old, _version({"vc_renamed": 2}, col("vc_renamed", 25)))
    field_ = _value_fields(new)["vc_renamed"]
    assert field_["aliases"] == ["vc"]
    assert field_["pgbridge.renamed_from"] == ["vc"]
    # Old records read with the new schema keep their value under the new name (Avro aliases).
    written = {"before": None, "after": {"id": 7, "vc": "kept"}, "op": "c", "ts_ms": None}
    writer = fastavro.parse_schema(old)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, writer, {**_envelope_defaults(), **written})
    buf.seek(0)
    read = fastavro.schemaless_reader(buf, writer, fastavro.parse_schema(new))
    assert read["after"] == {"id": 7, "vc_renamed": "kept"}


def _envelope_defaults() -> dict[str, Any]:
    return {"source": source_block(), "transaction": None, "ts_us": None, "ts_ns": None}


def test_a_dropped_and_added_column_is_not_a_rename() -> None:
    old = _version({"vc": 2}, col("vc", 25))
    new = _version({"other": 3}, col("other", 25))
    assert carry_renames(old, new) is new
    assert "aliases" not in _value_fields(new)["other"]


def test_renames_chain_and_a_reused_name_is_not_an_alias() -> None:
    v1 = _version({"a": 2}, col("a", 25))
    v2 = carry_renames(v1, _version({"b": 2}, col("b", 25)))
    v3 = carry_renames(v2, _version({"c": 2}, col("c", 25)))
    assert _value_fields(v3)["c"]["aliases"] == ["a", "b"]
    assert _value_fields(v3)["c"]["pgbridge.renamed_from"] == ["a", "b"]
    # A new column takes the first name: an alias naming it would be read twice.
    v4 = carry_renames(v3, _version({"c": 2, "a": 3}, col("c", 25), col("a", 25)))
    assert _value_fields(v4)["c"]["aliases"] == ["b"]
    assert "aliases" not in _value_fields(v4)["a"]


def test_renames_use_postgresql_names_beside_avro_names() -> None:
    old = _version({"Odd Name": 2}, col("Odd Name", 25))
    new = carry_renames(old, _version({"new name": 2}, col("new name", 25)))
    field_ = _value_fields(new)["new_name"]
    assert field_["aliases"] == ["Odd_Name"]
    assert field_["pgbridge.renamed_from"] == ["Odd Name"]


def test_without_numbers_or_a_previous_version_nothing_is_said() -> None:
    plain = relation_schemas(relation(col("id", 20, key=True)), TypeMapper(), topic_prefix="pg")
    assert "pgbridge.attnum" not in _value_fields(plain.value_schema)["id"]
    new = _version({"b": 2}, col("b", 25))
    assert carry_renames(None, new) is new
    assert carry_renames(plain.value_schema, new) is new
