"""Debezium's column controls (bridge.column_controls): settings, schemas, values, keys, the C
and Python encoders, and the dead-letter topic."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import fastavro
import pytest

from bridge import native
from bridge.column_controls import (
    ColumnControlError,
    ColumnControls,
    hasher,
    java_serialized,
    parse_rule,
    truncated,
)
from bridge.config import load_config
from bridge.errors import ConfigError
from bridge.failures import dead_letter_record
from bridge.pgoutput.messages import ReplicaIdentity
from bridge.schema import EncodedRow, relation_schemas
from bridge.types import TypeMapper
from tests.test_schema import col, relation, tuple_data

BASE = {
    "topic.prefix": "pg",
    "kafka.bootstrap.servers": "k:9092",
    "database.dbname": "app",
    "schema.registry.url": "http://r:8081",
}

# varchar(10): typmod n + 4
USERS = relation(
    col("id", 20, key=True),
    col("email", 1043, 14),
    col("name", 25),
    col("ssn", 25),
    col("photo", 17),
    col("age", 23),
    name="users",
)


def controls(**settings: str) -> ColumnControls:
    config = load_config(None, {}, {**BASE, **settings})
    return config.events.column_controls()


def value_fields(schemas: Any) -> dict[str, Any]:
    return {f["name"]: f["type"][1] for f in schemas.value_schema["fields"][0]["type"][1]["fields"]}


def decoded(schemas: Any, row: Any) -> dict[str, Any]:
    """The Value record as a reader of the topic gets it, whichever encoder wrote it."""
    value = schemas.value_schema["fields"][0]["type"][1]
    parsed = fastavro.parse_schema(value)
    if isinstance(row, EncodedRow):
        return fastavro.schemaless_reader(io.BytesIO(row.avro), parsed, parsed)  # type: ignore[no-any-return]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, row)
    buf.seek(0)
    return fastavro.schemaless_reader(buf, parsed, parsed)  # type: ignore[no-any-return]


ROW = tuple_data(b"7", b"a@b.example", b"Ada Lovelace", b"123-45-6789", b"\\x0102030405", b"36")


# --- hashing as Debezium does ------------------------------------------------------------------


def test_hashes_equal_debeziums_own_test_vectors() -> None:
    # io.debezium.relational.mapping.MaskStringsTest, salt "salt"
    assert hasher("sha256", b"salt", 1)("hello") == (
        "af5843a0f0e728ab0332c8888b6e1190bfb79e584f0d40538de8f10df6ef29c6"
    )
    assert hasher("md5", b"salt", 1)("world") == "030f632140d9c9591b0d8c21098024b8"
    assert hasher("sha256", b"salt", 2)("hello") == (
        "cd31b3b98ece60cb739c0bf770b2de892ae0ad133f645513c3d83f08757a843a"
    )
    assert hasher("md5", b"salt", 2)("world") == "172c8e95398cc72ab5358ead6981e7e5"


def test_java_serialization_of_strings_uses_modified_utf8_and_long_strings() -> None:
    assert java_serialized("hello") == b"\xac\xed\x00\x05t\x00\x05hello"
    # U+0000 is two bytes, a character outside the BMP two 3-byte surrogates
    assert java_serialized("a\x00") == b"\xac\xed\x00\x05t\x00\x03a\xc0\x80"
    assert java_serialized("\U0001f600") == b"\xac\xed\x00\x05t\x00\x06\xed\xa0\xbd\xed\xb8\x80"
    long = "x" * 70_000
    assert java_serialized(long)[:13] == b"\xac\xed\x00\x05\x7c" + (70_000).to_bytes(8, "big")


def test_truncation_counts_characters_as_java_does_and_never_splits_a_pair() -> None:
    assert truncated("abcdef", 3) == "abc"
    assert truncated("ab", 3) == "ab"
    assert truncated("é" * 5, 2) == "éé"
    assert truncated("a\U0001f600b", 2) == "a"  # the pair would be cut: left out whole
    assert truncated("a\U0001f600b", 3) == "a\U0001f600"
    assert truncated(b"\x01\x02\x03", 2) == b"\x01\x02"
    assert truncated(None, 2) is None


# --- settings ----------------------------------------------------------------------------------


def test_patterned_keys_parse_with_debeziums_names() -> None:
    config = load_config(
        None,
        {"PGBRIDGE_COLUMN_MASK_WITH_4_CHARS": "public.users.name"},
        {
            **BASE,
            "column.exclude.list": "public.users.ssn",
            "column.truncate.to.3.chars": "public.users.photo",
            "column.mask.hash.SHA-256.with.salt.s3cr.et": "public.users.email, public.x.y",
        },
    )
    rules = {rule.kind: rule for rule in config.events.column_rules}
    assert rules["mask"].length == 4 and rules["mask"].patterns == ("public.users.name",)
    assert rules["truncate"].length == 3
    assert rules["hash"].algorithm == "sha256" and rules["hash"].salt == b"s3cr.et"
    assert rules["hash"].patterns == ("public.users.email", "public.x.y")
    assert config.events.column_exclude == ("public.users.ssn",)
    shown = {s.key for s in config.settings}
    assert "column.mask.hash.SHA-256.with.salt.****" in shown  # the salt is not printed
    assert not any("s3cr" in key for key in shown)


def test_bad_control_settings_are_typed_errors_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="unknown hash algorithm 'SHA-999'") as raised:
        load_config(None, {}, {**BASE, "column.mask.hash.SHA-999.with.salt.x": "a.b.c"})
    assert "salt.x" not in str(raised.value)
    with pytest.raises(ConfigError, match=r"cannot be combined with column\.include\.list"):
        load_config(None, {}, {**BASE, "column.include.list": "a", "column.exclude.list": "b"})
    with pytest.raises(ConfigError, match="is not a regular expression"):
        parse_rule("column.mask.with.3.chars", "public.(")
    with pytest.raises(ConfigError, match="names no column"):
        parse_rule("column.truncate.to.3.chars", " , ")


# --- schemas and values ------------------------------------------------------------------------


def test_controlled_columns_say_what_was_done_and_values_follow() -> None:
    schemas = relation_schemas(
        USERS,
        TypeMapper(),
        topic_prefix="pg",
        controls=controls(
            **{
                "column.exclude.list": "public.users.ssn",
                "column.mask.with.5.chars": "PUBLIC.USERS.NAME",  # case-insensitive
                "column.mask.hash.SHA-256.with.salt.pepper": "public.users.email",
                "column.truncate.to.2.chars": "public.users.photo",
            }
        ),
    )
    fields = value_fields(schemas)
    assert list(fields) == ["id", "email", "name", "photo", "age"]  # ssn left out
    assert fields["name"] == {"type": "string", "connect.parameters": {"masked": "true"}}
    assert fields["email"] == {"type": "string", "connect.parameters": {"masked": "true"}}
    assert fields["photo"] == {"type": "bytes", "connect.parameters": {"truncateLength": "2"}}
    assert fields["age"] == "int"
    row, _ = schemas.encoder.encode(ROW)
    values = decoded(schemas, row)
    # email is varchar(10): the digest is cut to the declared length, as Debezium does
    assert values == {
        "id": 7,
        "email": hasher("sha256", b"pepper", 1)("a@b.example")[:10],
        "name": "*****",
        "photo": b"\x01\x02",
        "age": 36,
    }
    assert schemas.key_of(row) == {"id": 7}
    assert {"ssn", "name", "email", "photo"} <= schemas.withheld
    assert "age" not in schemas.withheld and "id" not in schemas.withheld


def test_null_stays_null_under_every_control() -> None:
    schemas = relation_schemas(
        USERS,
        TypeMapper(),
        topic_prefix="pg",
        controls=controls(
            **{
                "column.mask.with.5.chars": "public.users.name",
                "column.mask.hash.v2.MD5.with.salt.x": "public.users.email",
                "column.truncate.to.2.chars": "public.users.photo",
            }
        ),
    )
    row, _ = schemas.encoder.encode(tuple_data(b"1", None, None, b"s", None, None))
    assert decoded(schemas, row)["name"] is None
    assert decoded(schemas, row)["email"] is None
    assert decoded(schemas, row)["photo"] is None


def test_most_protective_control_wins_when_several_match() -> None:
    schemas = relation_schemas(
        USERS,
        TypeMapper(),
        topic_prefix="pg",
        controls=controls(
            **{
                "column.truncate.to.3.chars": "public.users.name",
                "column.mask.hash.v2.MD5.with.salt.x": "public.users.name",
                "column.mask.with.2.chars": "public.users.name",
            }
        ),
    )
    row, _ = schemas.encoder.encode(ROW)
    assert decoded(schemas, row)["name"] == "**"


def test_include_list_keeps_the_key_in_the_key_and_only_listed_columns_in_the_value() -> None:
    schemas = relation_schemas(
        USERS,
        TypeMapper(),
        topic_prefix="pg",
        controls=controls(**{"column.include.list": "public.users.(name|age)"}),
    )
    assert list(value_fields(schemas)) == ["name", "age"]
    row, _ = schemas.encoder.encode(ROW)
    assert decoded(schemas, row) == {"name": "Ada Lovelace", "age": 36}
    assert schemas.key_of(row) == {"id": 7}


@pytest.mark.skipif(native.encode_row is None, reason="the C accelerator is not built")
def test_left_out_columns_keep_the_c_encoder_and_controlled_ones_take_python() -> None:
    plain = relation_schemas(USERS, TypeMapper(), topic_prefix="pg")
    excluded = relation_schemas(
        USERS,
        TypeMapper(),
        topic_prefix="pg",
        controls=controls(**{"column.exclude.list": "public.users.(ssn|photo)"}),
    )
    masked = relation_schemas(
        USERS,
        TypeMapper(),
        topic_prefix="pg",
        controls=controls(**{"column.mask.with.3.chars": "public.users.ssn"}),
    )
    assert plain.encoder.native and excluded.encoder.native and not masked.encoder.native
    row, _ = excluded.encoder.encode(ROW)
    assert isinstance(row, EncodedRow)
    assert decoded(excluded, row) == {
        "id": 7,
        "email": "a@b.example",
        "name": "Ada Lovelace",
        "age": 36,
    }
    assert decoded(masked, masked.encoder.encode(ROW)[0])["ssn"] == "***"


def test_unchanged_toast_of_a_left_out_column_is_not_listed() -> None:
    schemas = relation_schemas(
        USERS,
        TypeMapper(),
        topic_prefix="pg",
        controls=controls(**{"column.exclude.list": "public.users.ssn"}),
    )
    _, unchanged = schemas.encoder.encode(tuple_data(b"1", b"e", "u", "u", None, None))
    assert unchanged == ["name"]


def test_controls_on_other_types_pass_them_unchanged_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        schemas = relation_schemas(
            USERS,
            TypeMapper(),
            topic_prefix="pg",
            controls=controls(**{"column.mask.with.3.chars": "public.users.age"}),
        )
    assert value_fields(schemas)["age"] == "int"
    assert "public.users.age" in caplog.text and "sent as it is" in caplog.text


def test_a_masked_key_column_is_refused_and_a_hashed_one_hashes_the_key() -> None:
    with pytest.raises(ColumnControlError, match=r"public\.users\.email: is in the message key"):
        relation_schemas(
            relation(col("email", 25, key=True), col("n", 23), name="users"),
            TypeMapper(),
            topic_prefix="pg",
            controls=controls(**{"column.mask.with.3.chars": "public.users.email"}),
        )
    schemas = relation_schemas(
        relation(col("email", 25, key=True), col("n", 23), name="users"),
        TypeMapper(),
        topic_prefix="pg",
        controls=controls(**{"column.mask.hash.SHA-256.with.salt.k": "public.users.email"}),
    )
    row, _ = schemas.encoder.encode(tuple_data(b"a@b", b"1"))
    digest = hasher("sha256", b"k", 1)("a@b")
    assert schemas.key_of(row) == {"email": digest}
    assert schemas.key_schema is not None
    assert schemas.key_schema["fields"][0]["type"]["connect.parameters"] == {"masked": "true"}


def test_full_identity_table_with_message_key_columns_checks_those_columns() -> None:
    from bridge.schema import TableHints

    with pytest.raises(ColumnControlError):
        relation_schemas(
            relation(col("a", 25), col("b", 25), identity=ReplicaIdentity.FULL, name="t"),
            TypeMapper(),
            topic_prefix="pg",
            hints=TableHints(key_columns=("a",)),
            controls=controls(**{"column.truncate.to.1.chars": "public.t.a"}),
        )


def test_dead_letter_records_leave_withheld_columns_out() -> None:
    schemas = relation_schemas(
        USERS,
        TypeMapper(),
        topic_prefix="pg",
        controls=controls(
            **{"column.exclude.list": "public.users.ssn", "column.mask.with.3.chars": ".*name"}
        ),
    )
    _, value = dead_letter_record(
        table=schemas.table,
        topic=schemas.topic,
        op="c",
        commit_lsn=1,
        seq=0,
        xid=1,
        columns=tuple(c.name for c in schemas.relation.columns),
        before={"id": 7, "name": "Ada", "ssn": "123"},
        after=ROW,
        error=ValueError("boom"),
        withheld=schemas.withheld,
    )
    document = json.loads(value)
    assert set(document["after"]) == {"id", "email", "photo", "age"}
    assert document["before"] == {"id": "7"}
    assert "123-45-6789" not in value.decode() and "Lovelace" not in value.decode()
