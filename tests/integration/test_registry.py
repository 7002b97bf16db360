"""Schema registration and evolution on the real registry (Apicurio through its Confluent API).

Each test uses its own topic prefix, so subjects start empty. Schemas come from Relation
messages built here; the registry's compatibility checker decides, not a stand-in.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from bridge.devstack.stack import StackInfo
from bridge.pgoutput.messages import COLUMN_FLAG_KEY, Relation, RelationColumn, ReplicaIdentity
from bridge.schema import RelationSchemas, TableHints, relation_schemas
from bridge.sink.registry import (
    FORCED_SCHEMA_CHANGES,
    IncompatibleSchemaError,
    RegistryError,
    SchemaRegistrar,
    is_transient,
)
from bridge.types import TypeMapper

pytestmark = pytest.mark.integration


class CountingClient(SchemaRegistryClient):
    """The real client, counting the registrations it sends."""

    def __init__(self, conf: dict[str, Any]) -> None:
        super().__init__(conf)
        self.registrations = 0

    def register_schema(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> int:
        self.registrations += 1
        return int(super().register_schema(subject_name, schema, normalize_schemas))


def col(name: str, oid: int, *, key: bool = False) -> RelationColumn:
    return RelationColumn(COLUMN_FLAG_KEY if key else 0, name, oid, -1)


def schemas(prefix: str, *columns: RelationColumn) -> RelationSchemas:
    rel = Relation(None, 16384, "public", "items", ReplicaIdentity.DEFAULT, columns)
    return relation_schemas(rel, TypeMapper(), topic_prefix=prefix)


BASE = (col("id", 20, key=True), col("name", 25), col("qty", 23))


@pytest.fixture
def prefix() -> str:
    return f"it{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(local_stack: StackInfo) -> CountingClient:
    return CountingClient({"url": local_stack.registry_url})


def test_registry_registers_key_and_value_with_compatibility(
    client: CountingClient, prefix: str
) -> None:
    registrar = SchemaRegistrar(client, compatibility="BACKWARD")
    v1 = schemas(prefix, *BASE)
    ids = registrar.register_relation(v1)
    assert ids.key_id is not None and ids.key_id != ids.value_id
    assert client.get_versions(v1.key_subject) == [1]
    assert client.get_versions(v1.value_subject) == [1]
    assert client.get_compatibility(v1.value_subject) == "BACKWARD"
    assert client.get_compatibility(v1.key_subject) == "BACKWARD"


def test_registry_unchanged_relation_is_not_registered_again(
    client: CountingClient, prefix: str
) -> None:
    registrar = SchemaRegistrar(client)
    first = registrar.register_relation(schemas(prefix, *BASE))
    sent = client.registrations
    # The server resends the same Relation after every reconnect: same ids, no request.
    again = registrar.register_relation(schemas(prefix, *BASE))
    assert again == first
    assert client.registrations == sent == 2


def test_registry_add_nullable_column_is_a_new_compatible_version(
    client: CountingClient, prefix: str
) -> None:
    registrar = SchemaRegistrar(client)
    v1 = schemas(prefix, *BASE)
    first = registrar.register_relation(v1)
    second = registrar.register_relation(schemas(prefix, *BASE, col("note", 25)))
    assert second.value_id != first.value_id
    assert second.key_id == first.key_id
    assert client.get_versions(v1.value_subject) == [1, 2]
    assert client.get_versions(v1.key_subject) == [1]


def test_registry_drop_column_is_backward_compatible(client: CountingClient, prefix: str) -> None:
    registrar = SchemaRegistrar(client)
    v1 = schemas(prefix, *BASE)
    registrar.register_relation(v1)
    registrar.register_relation(schemas(prefix, *BASE[:2]))
    assert client.get_versions(v1.value_subject) == [1, 2]


def test_registry_widen_int_to_bigint_is_compatible(client: CountingClient, prefix: str) -> None:
    registrar = SchemaRegistrar(client)
    v1 = schemas(prefix, *BASE)
    registrar.register_relation(v1)
    registrar.register_relation(schemas(prefix, *BASE[:2], col("qty", 20)))  # int -> long
    assert client.get_versions(v1.value_subject) == [1, 2]


def test_registry_incompatible_type_change_names_table_column_and_reason(
    client: CountingClient, prefix: str
) -> None:
    registrar = SchemaRegistrar(client, incompatible_changes="fail")
    v1 = schemas(prefix, *BASE)
    registrar.register_relation(v1)
    with pytest.raises(IncompatibleSchemaError) as info:
        registrar.register_relation(schemas(prefix, *BASE[:1], col("name", 23), BASE[2]))
    error = info.value
    assert error.table == "public.items"
    assert error.subject == v1.value_subject
    assert error.columns == [("name", "type changed")]
    assert error.reason  # the registry's own explanation
    assert "name" in str(error) and "public.items" in str(error)
    assert client.get_versions(v1.value_subject) == [1]


def test_registry_refused_change_is_registered_anyway_by_default_and_counted(
    client: CountingClient, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The default (evolve): PostgreSQL made the change already, so the subject follows it; the
    # refusal is logged with the columns and counted, and the level is back afterwards.
    registrar = SchemaRegistrar(client, compatibility="BACKWARD")
    v1 = schemas(prefix, *BASE)
    registrar.register_relation(v1)
    before = FORCED_SCHEMA_CHANGES[v1.value_subject]
    v2 = schemas(prefix, *BASE[:1], col("name", 23), BASE[2])
    with caplog.at_level(logging.WARNING, logger="bridge.sink.registry"):
        ids = registrar.register_relation(v2)
    assert client.get_versions(v1.value_subject) == [1, 2]
    latest = client.get_version(v1.value_subject, 2)  # (the client caches "latest")
    assert latest.schema_id == ids.value_id
    stored = json.loads(latest.schema.schema_str)
    value_record = stored["fields"][0]["type"][1]
    assert {f["name"]: f["type"] for f in value_record["fields"]}["name"] == ["null", "int"]
    assert FORCED_SCHEMA_CHANGES[v1.value_subject] == before + 1
    assert "name (type changed)" in caplog.text and "public.items" in caplog.text
    assert client.get_compatibility(v1.value_subject) == "BACKWARD"
    # A compatible change after it is judged by the level again, as usual.
    registrar.register_relation(schemas(prefix, *BASE[:1], col("name", 23), BASE[2], col("x", 25)))
    assert client.get_versions(v1.value_subject) == [1, 2, 3]
    assert FORCED_SCHEMA_CHANGES[v1.value_subject] == before + 1


def test_registry_rename_value_column_is_compatible_but_key_rename_is_not(
    client: CountingClient, prefix: str
) -> None:
    registrar = SchemaRegistrar(client, incompatible_changes="fail")
    v1 = schemas(prefix, *BASE)
    registrar.register_relation(v1)
    # A renamed non-key column reads as "dropped + added nullable": compatible.
    registrar.register_relation(schemas(prefix, BASE[0], col("title", 25), BASE[2]))
    assert client.get_versions(v1.value_subject) == [1, 2]
    # A renamed key column is a required field without a default: old keys cannot be read.
    with pytest.raises(IncompatibleSchemaError) as info:
        registrar.register_relation(
            schemas(prefix, col("item_id", 20, key=True), col("title", 25), BASE[2])
        )
    assert info.value.subject == v1.key_subject
    assert ("item_id", "added") in info.value.columns
    assert ("id", "removed") in info.value.columns


def numbered(prefix: str, numbers: dict[str, int], *columns: RelationColumn) -> RelationSchemas:
    """A table version whose columns carry attribute numbers (as ``pgbridge run`` builds it)."""
    rel = Relation(None, 16384, "public", "items", ReplicaIdentity.DEFAULT, columns)
    hints = TableHints(column_numbers=numbers)
    return relation_schemas(rel, TypeMapper(), topic_prefix=prefix, hints=hints)


def _fields(client: CountingClient, subject: str) -> dict[str, dict[str, Any]]:
    # The newest version by number: the client caches get_latest_version's answers.
    newest = client.get_versions(subject)[-1]
    latest = json.loads(client.get_version(subject, newest).schema.schema_str)
    if latest["name"] == "Key":
        return {f["name"]: f for f in latest["fields"]}
    before = next(f for f in latest["fields"] if f["name"] == "before")
    record = next(b for b in before["type"] if isinstance(b, dict))
    return {f["name"]: f for f in record["fields"]}


def test_registry_renamed_columns_are_aliased_compatible_and_told_after_a_restart(
    client: CountingClient, prefix: str
) -> None:
    # Debezium's behaviour on refusals: any refused version here fails the test.
    registrar = SchemaRegistrar(client, incompatible_changes="fail")
    v1 = numbered(prefix, {"id": 1, "name": 2, "qty": 3}, *BASE)
    registrar.register_relation(v1)
    renamed = (col("item_id", 20, key=True), col("title", 25), BASE[2])
    v2 = numbered(prefix, {"item_id": 1, "title": 2, "qty": 3}, *renamed)
    ids = registrar.register_relation(v2)
    assert client.get_versions(v1.value_subject) == [1, 2]
    assert client.get_versions(v1.key_subject) == [1, 2]
    value = _fields(client, v1.value_subject)
    assert value["title"]["aliases"] == ["name"]
    assert value["title"]["pgbridge.renamed_from"] == ["name"]
    assert value["item_id"]["aliases"] == ["id"]
    assert "aliases" not in value["qty"]
    assert _fields(client, v1.key_subject)["item_id"]["aliases"] == ["id"]

    # A restarted bridge reads the same table version: same schema ids, no new version.
    assert SchemaRegistrar(client, incompatible_changes="fail").register_relation(v2) == ids
    assert client.get_versions(v1.value_subject) == [1, 2]

    # A rename made while the bridge was down is told from the registry's latest version.
    after_restart = SchemaRegistrar(client, incompatible_changes="fail")
    v3 = numbered(
        prefix, {"item_id": 1, "label": 2, "qty": 3}, renamed[0], col("label", 25), BASE[2]
    )
    after_restart.register_relation(v3)
    assert _fields(client, v1.value_subject)["label"]["aliases"] == ["name", "title"]
    # Dropping a column and adding one of the old name is no rename.
    v4 = numbered(
        prefix, {"item_id": 1, "qty": 3, "label": 4}, renamed[0], BASE[2], col("label", 25)
    )
    after_restart.register_relation(v4)
    assert "aliases" not in _fields(client, v1.value_subject)["label"]


def test_registry_subject_compatibility_none_accepts_any_change(
    client: CountingClient, prefix: str
) -> None:
    v1 = schemas(prefix, *BASE)
    registrar = SchemaRegistrar(client, subject_compatibility={v1.value_subject: "NONE"})
    registrar.register_relation(v1)
    registrar.register_relation(schemas(prefix, *BASE[:1], col("name", 23), BASE[2]))
    assert client.get_compatibility(v1.value_subject) == "NONE"
    assert client.get_versions(v1.value_subject) == [1, 2]


def test_registry_type_zoo_schema_is_accepted(client: CountingClient, prefix: str) -> None:
    # Every annotated representation (decimals, named records used twice, maps, arrays, enums
    # of connect parameters) is a schema the registry's Avro parser accepts.
    zoo = schemas(
        prefix,
        col("id", 20, key=True),
        *(col(f"c{oid}", oid) for oid in (21, 700, 701, 1700, 790, 16, 17, 2950, 114, 3802, 142,
                                          1082, 1083, 1266, 1114, 1184, 1186, 869, 650, 829, 774,
                                          1560, 1562, 3614, 3615, 600, 601, 603, 718, 3904, 4451,
                                          1007, 1009, 1231, 1017)),
        col("n2", 1700),
    )  # fmt: skip
    ids = SchemaRegistrar(client).register_relation(zoo)
    fetched = client.get_schema(ids.value_id)
    assert fetched.schema_str is not None and "VariableScaleDecimal" in fetched.schema_str


def test_registry_unreachable_is_a_registry_error_naming_the_subject(prefix: str) -> None:
    # A real connection to a port nobody listens on: the error is typed, not a client internal.
    registrar = SchemaRegistrar.from_url("http://127.0.0.1:9")
    v1 = schemas(prefix, *BASE)
    with pytest.raises(RegistryError) as info:
        registrar.register_relation(v1)
    assert info.value.subject == v1.key_subject
    assert is_transient(info.value)  # nobody there yet: an outage, waited on


def test_registry_tls_to_a_plain_port_is_a_final_error_naming_the_url(
    local_stack: StackInfo, prefix: str
) -> None:
    # The stack's registry answers plain HTTP: https:// to it can never work.
    registrar = SchemaRegistrar.from_url(local_stack.registry_url.replace("http://", "https://"))
    with pytest.raises(RegistryError) as info:
        registrar.register_relation(schemas(prefix, *BASE))
    assert "schema.registry.url with http://?" in str(info.value)
    assert not is_transient(info.value)
