"""A table with a column of every type family on the real PostgreSQL of the local stack: rows
read through a logical slot (pgoutput, text and binary), decoded by the pgoutput decoder,
converted, Avro-encoded, decoded by fastavro, and compared with the expected values and with
what psycopg reads from the table itself."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import fastavro
import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.pgoutput.decoder import Decoder
from bridge.pgoutput.messages import Insert, Relation, Type, Update
from bridge.schema import UNCHANGED_TOAST_FIELD, RelationSchemas, TableHints, relation_schemas
from bridge.types import DEBEZIUM_UNAVAILABLE, ConversionError, TypeMapper, TypeOptions
from bridge.types.temporal import INT32_MAX, INT64_MIN, US_PER_AVG_MONTH, days_from_civil

pytestmark = pytest.mark.integration

US = 1_000_000
UUID = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"


@dataclass(frozen=True)
class Col:
    name: str
    type: str
    normal: str  # SQL literal of row 1
    edge: str  # SQL literal of row 2 (extremes)
    expected: Any  # row 1 after Avro encode -> fastavro decode with logical types
    psycopg: bool = True  # psycopg's own value of row 1 equals ``expected``


COLUMNS = [
    Col("i2", "smallint", "1", "-32768", 1),
    Col("i4", "integer", "2", "2147483647", 2),
    Col("i8", "bigint", "3", "-9223372036854775808", 3),
    Col("f4", "real", "1.5", "'NaN'", 1.5),
    Col("f8", "double precision", "2.25", "'-Infinity'", 2.25),
    Col("n", "numeric(12,3)", "1234.5", "'NaN'", Decimal("1234.500")),
    Col("nu", "numeric", "3.14159", "'Infinity'", {"scale": 5, "value": b"\x04\xcb\x2f"}, False),
    Col("m", "money", "12.34", "-92233720368547758.08", Decimal("12.34"), False),
    Col("b", "boolean", "true", "false", True),
    Col("t", "text", "'héllo 😀'", "''", "héllo 😀"),
    Col("vc", "varchar(10)", "'abc'", "'x'", "abc"),
    Col("c", "char(4)", "'ab'", "''", "ab  "),
    Col("by", "bytea", "'\\x00ff'", "'\\x'", b"\x00\xff"),
    Col("u", "uuid", f"'{UUID}'", f"'{UUID}'", uuid.UUID(UUID)),
    Col("j", "json", "'{\"a\": [1, null]}'", "'[]'", '{"a": [1, null]}', False),
    Col("jb", "jsonb", "'{\"a\": [1, null]}'", "'\"s\"'", '{"a": [1, null]}', False),
    Col("x", "xml", "'<a>t</a>'", "'<b/>'", "<a>t</a>", False),
    Col("d", "date", "'2024-02-29'", "'infinity'", date(2024, 2, 29)),
    Col("tm", "time", "'12:34:56.789'", "'24:00:00'", time(12, 34, 56, 789000)),
    Col("ttz", "timetz", "'12:00:00+05:30'", "'00:00:00-12'", "06:30:00Z", False),
    Col("ts", "timestamp", "'2024-01-02 03:04:05.678901'", "'0044-03-15 12:00:00 BC'",
        datetime(2024, 1, 2, 3, 4, 5, 678901)),
    Col("tstz", "timestamptz", "'2024-01-02 03:04:05.678901+05:30'", "'-infinity'",
        datetime(2024, 1, 1, 21, 34, 5, 678901, tzinfo=UTC)),
    Col("iv", "interval", "'3 days 04:05:06.5'", "'-1 year -2 mons'",
        3 * 86_400 * US + (4 * 3600 + 5 * 60 + 6) * US + 500_000, False),
    Col("ip", "inet", "'192.168.0.1/24'", "'::1'", "192.168.0.1/24", False),
    Col("cd", "cidr", "'10.0.0.0/8'", "'2001:db8::/32'", "10.0.0.0/8", False),
    Col("mac", "macaddr", "'08:00:2b:01:02:03'", "'ff:ff:ff:ff:ff:ff'", "08:00:2b:01:02:03", False),
    Col("bt", "bit(4)", "B'1010'", "B'0000'", b"\x0a", False),
    Col("vb", "varbit", "B'1'", "B''", b"\x01", False),
    Col("tsv", "tsvector", "'a:1 b:2'", "''", "'a':1 'b':2", False),
    Col("tsq", "tsquery", "'a & !b'", "''", "'a' & !'b'", False),
    Col("pt", "point", "'(1,2)'", "'(-1e300,0)'", None, False),
    Col("bx", "box", "'(1,1),(0,0)'", "'(0,0),(0,0)'", "(1,1),(0,0)", False),
    Col("r", "int4range", "'[1,5)'", "'empty'", "[1,5)", False),
    Col("tr", "tstzrange", "'[2024-01-01 00:00:00+00,)'", "'(,)'", '["2024-01-01 00:00:00+00",)',
        False),
    Col("mr", "int4multirange", "'{[1,3)}'", "'{}'", "{[1,3)}", False),
    Col("ai", "integer[]", "'{1,NULL,3}'", "'{}'", [1, None, 3]),
    Col("at", "text[]", "ARRAY['a b', NULL, 'ü']", "'{}'", ["a b", None, "ü"]),
    Col("an", "numeric(6,2)[]", "'{1.5}'", "'{NULL}'", [Decimal("1.50")]),
    Col("grid", "integer[][]", "'{{1,2},{3,NULL}}'", "'{}'", [[1, 2], [3, None]]),
    Col("e", "mood", "'happy'", "'sad'", "happy"),
    Col("ea", "mood[]", "'{sad,happy}'", "'{}'", ["sad", "happy"], False),
    Col("dm", "posint", "5", "2147483647", 5),
    Col("ct", "citext", "'MiXeD'", "''", "MiXeD"),
    Col("hs", "hstore", "'a=>1, b=>NULL'", "''", {"a": "1", "b": None}, False),
    Col("lt", "ltree", "'a.b.c'", "'x'", "a.b.c", False),
]  # fmt: skip


@dataclass
class Zoo:
    conn: psycopg.Connection[Any]
    schema: str
    slot: str
    publication: str
    enum_labels: dict[str, tuple[str, ...]]
    array_dimensions: dict[str, int]


@pytest.fixture
def zoo(local_stack: StackInfo) -> Iterator[Zoo]:
    suffix = uuid.uuid4().hex[:8]
    schema, slot, pub = f"zoo_{suffix}", f"zoo_slot_{suffix}", f"zoo_pub_{suffix}"
    conn = psycopg.connect(local_stack.postgres_dsn(), autocommit=True)
    try:
        for ext in ("citext", "hstore", "ltree"):
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path = {schema}, public")
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        conn.execute("CREATE DOMAIN posint AS integer CHECK (VALUE > 0)")
        conn.execute("CREATE TYPE pair AS (a integer, b text)")
        columns = ", ".join(f"{c.name} {c.type}" for c in COLUMNS)
        conn.execute(f"CREATE TABLE zoo (id integer PRIMARY KEY, {columns})")
        conn.execute("CREATE TABLE comp (id integer PRIMARY KEY, p pair)")
        conn.execute("CREATE TABLE toasty (id integer PRIMARY KEY, big text, n integer)")
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE zoo, comp, toasty")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        names = ", ".join(c.name for c in COLUMNS)
        conn.execute(
            f"INSERT INTO zoo (id, {names}) VALUES (1, {', '.join(c.normal for c in COLUMNS)})"
        )
        conn.execute(
            f"INSERT INTO zoo (id, {names}) VALUES (2, {', '.join(c.edge for c in COLUMNS)})"
        )
        conn.execute("INSERT INTO zoo (id) VALUES (3)")  # every column NULL
        conn.execute("INSERT INTO comp VALUES (1, ROW(7, 'x y'))")
        # Random-looking text does not compress, so it is stored out of line (TOASTed).
        conn.execute(
            "INSERT INTO toasty SELECT 1, string_agg(md5(i::text), ''), 0"
            " FROM generate_series(1, 400) i"
        )
        conn.execute("UPDATE toasty SET n = 1 WHERE id = 1")
        (labels,) = conn.execute("SELECT enum_range(NULL::mood)::text[]").fetchone()  # type: ignore[misc]
        # What a caller with catalog access passes along: declared array dimensions.
        dims = conn.execute(
            "SELECT attname::text, attndims FROM pg_attribute"
            " WHERE attrelid = 'zoo'::regclass AND attndims > 1"
        ).fetchall()
        yield Zoo(conn, schema, slot, pub, {f"{schema}.mood": tuple(labels)}, dict(dims))
    finally:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        )
        conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.close()


@dataclass
class Change:
    table: str
    op: str
    schemas: RelationSchemas
    row: dict[str, Any]
    unchanged: list[str]


def stream(zoo: Zoo, table: str, *, binary: bool) -> list[Change]:
    """Peek the slot's changes and run those of ``table`` through decoder, mapper, encoder."""
    rows = zoo.conn.execute(
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', "
        "'1', 'publication_names', %s, 'binary', %s)",
        (zoo.slot, zoo.publication, "true" if binary else "false"),
    ).fetchall()
    decoder = Decoder(1)
    mapper = TypeMapper(TypeOptions(enum_labels=zoo.enum_labels))
    relations: dict[int, RelationSchemas] = {}
    out = []
    for (data,) in rows:
        message = decoder.decode(bytes(data))
        if isinstance(message, Type):
            mapper.observe(message)
        elif isinstance(message, Relation):
            hints = TableHints(array_dimensions=zoo.array_dimensions)
            relations[message.relation_oid] = relation_schemas(
                message, mapper, topic_prefix="zoo", hints=hints
            )
        elif isinstance(message, (Insert, Update)):
            schemas = relations[message.relation_oid]
            if schemas.relation.relation_name != table:
                continue
            row, unchanged = schemas.encoder.encode(message.new_tuple)
            op = "c" if isinstance(message, Insert) else "u"
            out.append(Change(schemas.relation.relation_name, op, schemas, row, unchanged))
    return out


def envelope(change: Change) -> dict[str, Any]:
    return {
        "before": None,
        "after": change.row,
        "source": {
            "version": "0", "connector": "postgresql", "name": "zoo", "ts_ms": 0,
            "snapshot": "false", "db": "postgres", "schema": "s", "table": change.table,
            "commit_lsn": 1, "seq": 0,
        },
        "op": change.op,
        UNCHANGED_TOAST_FIELD: change.unchanged,
    }  # fmt: skip


def strip_logical(schema: Any) -> Any:
    if isinstance(schema, list):
        return [strip_logical(s) for s in schema]
    if isinstance(schema, dict):
        return {k: strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    return schema


def through_avro(change: Change, *, logical: bool = True) -> dict[str, Any]:
    """Encode the change's envelope with its value schema and decode it with fastavro."""
    schema = change.schemas.value_schema
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), envelope(change))
    buf.seek(0)
    reader = fastavro.parse_schema(schema if logical else strip_logical(schema))
    decoded: Any = fastavro.schemaless_reader(buf, reader)
    return dict(decoded)


def zoo_changes(zoo: Zoo, *, binary: bool) -> dict[int, Change]:
    return {c.row["id"]: c for c in stream(zoo, "zoo", binary=binary)}


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_type_zoo_values_roundtrip_to_expected(zoo: Zoo, binary: bool) -> None:
    after = through_avro(zoo_changes(zoo, binary=binary)[1])["after"]
    for c in COLUMNS:
        if c.expected is not None:
            assert after[c.name] == c.expected, c.name
    assert (after["pt"]["x"], after["pt"]["y"]) == (1.0, 2.0)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_type_zoo_values_match_what_psycopg_reads(zoo: Zoo, binary: bool) -> None:
    after = through_avro(zoo_changes(zoo, binary=binary)[1])["after"]
    cur = zoo.conn.execute(f"SELECT * FROM {zoo.schema}.zoo WHERE id = 1")
    names = [d.name for d in cur.description or ()]
    theirs = dict(zip(names, cur.fetchone() or (), strict=True))
    for c in COLUMNS:
        if c.psycopg:
            assert after[c.name] == theirs[c.name], c.name
    assert json.loads(after["jb"]) == theirs["jb"]
    assert json.loads(after["j"]) == theirs["j"]
    assert after["iv"] == theirs["iv"] // (theirs["iv"].resolution)


def test_type_zoo_text_and_binary_publications_agree(zoo: Zoo) -> None:
    text, binary = zoo_changes(zoo, binary=False), zoo_changes(zoo, binary=True)
    assert text.keys() == binary.keys() == {1, 2, 3}
    for key in text:
        a = through_avro(text[key], logical=False)["after"]
        b = through_avro(binary[key], logical=False)["after"]
        for name in a:
            if name in ("f4",) and key == 2:
                assert a[name] != a[name] and b[name] != b[name]  # NaN
            else:
                assert a[name] == b[name], (key, name)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_type_zoo_extremes(zoo: Zoo, binary: bool) -> None:
    edge = through_avro(zoo_changes(zoo, binary=binary)[2], logical=False)["after"]
    assert edge["i8"] == -(2**63)
    assert edge["n"] is None and edge["nu"] is None  # NaN, Infinity in decimal form
    assert edge["f8"] == float("-inf")
    assert int.from_bytes(edge["m"], "big", signed=True) == -(2**63)  # cents, unscaled
    assert edge["d"] == INT32_MAX and edge["tstz"] == INT64_MIN
    assert edge["tm"] == 86_400 * US
    assert edge["ts"] == (days_from_civil(-43, 3, 15) * 86_400 + 12 * 3600) * US
    assert edge["iv"] == -14 * US_PER_AVG_MONTH
    assert edge["ttz"] == "12:00:00Z"
    assert (edge["t"], edge["c"], edge["by"], edge["vb"]) == ("", "    ", b"", b"")
    assert (edge["r"], edge["tr"], edge["mr"]) == ("empty", "(,)", "{}")
    assert (edge["ai"], edge["an"], edge["ea"], edge["grid"]) == ([], [None], [], [])


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_type_zoo_null_row(zoo: Zoo, binary: bool) -> None:
    after = through_avro(zoo_changes(zoo, binary=binary)[3])["after"]
    assert after == {"id": 3, **{c.name: None for c in COLUMNS}}


def test_type_zoo_schema_names_enum_and_domain(zoo: Zoo) -> None:
    schemas = zoo_changes(zoo, binary=False)[1].schemas
    fields = {
        f["name"]: f["type"][1] for f in schemas.value_schema["fields"][0]["type"][1]["fields"]
    }
    assert fields["e"]["connect.parameters"] == {"allowed": "sad,ok,happy"}
    assert fields["dm"] == "int"  # the domain is its base type
    assert schemas.topic == f"zoo.{zoo.schema}.zoo"


def test_type_zoo_unchanged_toast_is_marked(zoo: Zoo) -> None:
    for binary in (False, True):
        update = next(c for c in stream(zoo, "toasty", binary=binary) if c.op == "u")
        assert update.unchanged == ["big"]
        assert update.row == {"id": 1, "big": DEBEZIUM_UNAVAILABLE, "n": 1}
        assert through_avro(update)[UNCHANGED_TOAST_FIELD] == ["big"]


def test_type_zoo_composite_is_text_and_refused_in_binary_form(zoo: Zoo) -> None:
    (text,) = stream(zoo, "comp", binary=False)
    assert text.row == {"id": 1, "p": '(7,"x y")'}
    with pytest.raises(ConversionError) as info:
        stream(zoo, "comp", binary=True)
    assert (info.value.table, info.value.column) == (f"{zoo.schema}.comp", "p")
