"""Tables sharing a topic (Debezium's ByLogicalTableRouter): names, the key field, its bytes."""

from __future__ import annotations

import io
import struct

import fastavro
import pytest

from bridge.errors import ConfigError
from bridge.events import ChangeEvent, EventBuilder
from bridge.pgoutput.messages import Begin, Commit, Insert, ReplicaIdentity
from bridge.routing import TopicRouter
from bridge.schema import relation_schemas
from bridge.sink.registry import RegisteredSchemas
from bridge.sink.serializer import EnvelopeSerializer, SourceSettings
from bridge.types import TypeMapper
from tests.rows import INT4, TEXT, lsn, relation, tuple_data

SHARDS = TopicRouter(r"(.*)\.customers_shard\d+", "$1.customers_all")


def test_a_matching_topic_is_routed_with_java_groups_and_others_keep_theirs() -> None:
    assert SHARDS.route("app.public.customers_shard1") == "app.public.customers_all"
    assert SHARDS.route("app.public.customers_shard1x") is None  # the whole name must match
    assert SHARDS.route("app.public.orders") is None
    named = TopicRouter(r"(?<p>app)\.(?<s>\w+)\.t_\d+", "${p}.${s}.t")
    assert named.route("app.tenant.t_42") == "app.tenant.t"


def test_the_key_field_names_the_table_by_its_own_topic_or_by_the_key_regex() -> None:
    assert SHARDS.identifier("app.public.customers_shard1") == "app.public.customers_shard1"
    short = TopicRouter(
        r"(.*)_shard\d+", "$1", key_field_regex=r".*_shard(\d+)", key_field_replacement="$1"
    )
    assert short.identifier("app.public.customers_shard7") == "7"


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"topic_regex": "(", "topic_replacement": "x"}, "topic.regex"),
        ({"topic_regex": "(.*)", "topic_replacement": "$"}, "topic.replacement"),
        ({"topic_regex": "a", "topic_replacement": "b", "key_field_regex": "x"}, "key.field"),
        ({"topic_regex": "a", "topic_replacement": "b", "key_field_name": "a-b"}, "key.field"),
    ],
)
def test_settings_that_cannot_route_say_which_and_why(settings: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        TopicRouter(**settings)


def test_a_routed_table_is_named_by_its_topic_and_keyed_by_its_identity_too() -> None:
    schemas = relation_schemas(
        relation(name="customers_shard1"), TypeMapper(), topic_prefix="app", router=SHARDS
    )
    assert schemas.topic == "app.public.customers_all"
    assert (schemas.key_subject, schemas.value_subject) == (
        "app.public.customers_all-key",
        "app.public.customers_all-value",
    )
    assert schemas.table == "public.customers_shard1"  # the source block's table
    key = schemas.key_schema
    assert key is not None and key["connect.name"] == "app.public.customers_all.Key"
    assert [f["name"] for f in key["fields"]] == ["id", "__dbz__physicalTableIdentifier"]
    assert schemas.value_schema["connect.name"] == "app.public.customers_all.Envelope"
    assert schemas.key_of({"id": 7, "body": "x"}) == {
        "id": 7,
        "__dbz__physicalTableIdentifier": "app.public.customers_shard1",
    }
    plain = relation_schemas(relation(), TypeMapper(), topic_prefix="app", router=SHARDS)
    assert plain.topic == "app.public.items" and plain.routed_key is None


def test_without_uniqueness_the_key_is_the_rows_and_a_keyless_table_keeps_a_null_key() -> None:
    loose = TopicRouter(r"(.*)_shard\d+", "$1", key_enforce_uniqueness=False)
    mapper = TypeMapper()
    schemas = relation_schemas(relation(name="c_shard1"), mapper, topic_prefix="a", router=loose)
    assert schemas.topic == "a.public.c" and schemas.key_fields == ("id",)
    assert [f["name"] for f in schemas.key_schema["fields"]] == ["id"]  # type: ignore[index]
    keyless = relation(
        name="c_shard2",
        identity=ReplicaIdentity.NOTHING,
        columns=(("id", INT4, False), ("body", TEXT, False)),
    )
    strict = TopicRouter(r"(.*)_shard\d+", "$1")
    schemas = relation_schemas(keyless, mapper, topic_prefix="a", router=strict)
    assert schemas.topic == "a.public.c" and schemas.key_schema is None
    assert schemas.routed_key is None and schemas.key_of({"id": 1}) is None


def _insert(router: TopicRouter) -> ChangeEvent:
    builder = EventBuilder("app", router=router)
    events: list[object] = []
    for message in (
        relation(name="customers_shard2"),
        Begin(lsn("1/2000"), 1_000_000, 42),
        Insert(None, 16384, tuple_data("7", "hello")),
        Commit(0, lsn("1/2000"), lsn("1/2030"), 1_000_000),
    ):
        events += builder.feed(message)
    return next(e for e in events if isinstance(e, ChangeEvent))


def test_the_key_bytes_carry_the_identifier_after_the_row_key_on_every_path() -> None:
    event = _insert(SHARDS)
    ids = RegisteredSchemas(key_id=21, value_id=22)
    serializer = EnvelopeSerializer(SourceSettings(topic_prefix="app", database="shop"))
    serializer.register_parsed(ids.key_id, event.table.key_schema)  # type: ignore[arg-type]
    serializer.register_parsed(ids.value_id, event.table.value_schema)
    assert serializer.insert_lane(event.table, ids) is None  # the C lanes write row keys only
    data = serializer.key(event, ids)
    assert data is not None and struct.unpack(">bI", data[:5]) == (0, 21)
    key = fastavro.schemaless_reader(
        io.BytesIO(data[5:]),
        fastavro.parse_schema(event.table.key_schema),  # type: ignore[arg-type]
    )
    assert key == {"id": 7, "__dbz__physicalTableIdentifier": "app.public.customers_shard2"}
