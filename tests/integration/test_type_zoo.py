"""A table with a column of every type family on real PostgreSQL, the oldest and the newest
supported major (``PGBRIDGE_PG_VERSIONS``, default ``13,18``; the stack's own server for its
major, a throwaway cluster for the others): rows read through a logical slot (pgoutput, text
and, from PostgreSQL 14, binary), decoded by the pgoutput decoder, converted, Avro-encoded,
decoded by fastavro and by Spark's ``from_avro``, and compared with the expected values and with
what psycopg reads from the table itself.

Columns whose type the server lacks (multiranges before 14, an extension that is not
installed) are left out of that server's zoo; :func:`test_type_zoo_covers_every_type_family`
pins exactly which, so coverage cannot shrink unnoticed.
"""

from __future__ import annotations

import io
import json
import os
import struct
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from confluent_kafka.schema_registry import Schema
from psycopg.types import TypeInfo
from psycopg.types.hstore import register_hstore
from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.devstack.stack import StackInfo
from bridge.pgoutput.decoder import Decoder
from bridge.pgoutput.messages import Insert, Relation, Type, Update
from bridge.schema import UNCHANGED_TOAST_FIELD, RelationSchemas, TableHints, relation_schemas
from bridge.sink.registry import registry_client
from bridge.snapshot.catalog import published_tables, read_table
from bridge.source.type_catalog import describe_types
from bridge.types import DEBEZIUM_UNAVAILABLE, ConversionError, TypeMapper
from bridge.types.lossy import LOSSY_VALUES
from bridge.types.temporal import (
    INT32_MAX,
    INT32_MIN,
    INT64_MIN,
    US_PER_AVG_MONTH,
    days_from_civil,
)
from tests.integration import zoo_spark

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
    psycopg: bool = True  # psycopg's own value of row 1 equals ``expected`` (else: PSYCOPG_VIEWS)
    since: int = 13  # the first PostgreSQL major with this type
    extension: str | None = None  # the extension providing the type
    edge_before_14: str | None = None  # row 2's literal on servers older than 14


COLUMNS = [
    Col("i2", "smallint", "1", "-32768", 1),
    Col("i4", "integer", "2", "2147483647", 2),
    Col("i8", "bigint", "3", "-9223372036854775808", 3),
    Col("f4", "real", "1.5", "'NaN'", 1.5),
    Col("f8", "double precision", "2.25", "'-Infinity'", 2.25),
    Col("n", "numeric(12,3)", "1234.5", "'NaN'", Decimal("1234.500")),
    # Spark's widest decimal; negative (two's complement) and all 38 digits.
    Col("n38", "numeric(38,10)", "-12345678901234567890.0123456789",
        "9999999999999999999999999999.9999999999", Decimal("-12345678901234567890.0123456789")),
    # numeric has infinities only since PostgreSQL 14.
    Col("nu", "numeric", "3.14159", "'Infinity'", {"scale": 5, "value": b"\x04\xcb\x2f"}, False,
        edge_before_14="'NaN'"),
    Col("m", "money", "12.34", "-92233720368547758.08", Decimal("12.34"), False),
    Col("b", "boolean", "true", "false", True),
    Col("t", "text", "'héllo 😀'", "''", "héllo 😀"),
    Col("vc", "varchar(10)", "'abc'", "'x'", "abc"),
    Col("c", "char(4)", "'ab'", "''", "ab  "),
    Col("by", "bytea", "'\\x00ff'", "'\\x'", b"\x00\xff"),
    Col("u", "uuid", f"'{UUID}'", f"'{UUID}'", uuid.UUID(UUID)),
    Col("j", "json", "'{\"a\": [1, null]}'", "'[]'", '{"a": [1, null]}', False),
    Col("jb", "jsonb", "'{\"a\": [1, null]}'", "'\"s\"'", '{"a": [1, null]}', False),
    Col("x", "xml", "'<a>t</a>'", "'<b/>'", "<a>t</a>"),
    Col("d", "date", "'2024-02-29'", "'infinity'", date(2024, 2, 29)),
    # Before the Gregorian reform (a date Julian calendars lack) / PostgreSQL's first date.
    Col("dold", "date", "'1582-10-10'", "'4713-01-01 BC'", date(1582, 10, 10)),
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
    Col("mac", "macaddr", "'08:00:2b:01:02:03'", "'ff:ff:ff:ff:ff:ff'", "08:00:2b:01:02:03"),
    Col("bt", "bit(4)", "B'1010'", "B'0000'", b"\x0a", False),
    Col("vb", "varbit", "B'1'", "B''", b"\x01", False),
    Col("tsv", "tsvector", "'a:1 b:2'", "''", "'a':1 'b':2"),
    Col("tsq", "tsquery", "'a & !b'", "''", "'a' & !'b'"),
    Col("pt", "point", "'(1,2)'", "'(-1e300,0)'", None, False),
    Col("bx", "box", "'(1,1),(0,0)'", "'(0,0),(0,0)'", "(1,1),(0,0)"),
    Col("r", "int4range", "'[1,5)'", "'empty'", "[1,5)", False),
    Col("tr", "tstzrange", "'[2024-01-01 00:00:00+00,)'", "'(,)'", '["2024-01-01 00:00:00+00",)',
        False),
    Col("mr", "int4multirange", "'{[1,3)}'", "'{}'", "{[1,3)}", False, since=14),
    Col("ai", "integer[]", "'{1,NULL,3}'", "'{}'", [1, None, 3]),
    Col("at", "text[]", "ARRAY['a b', NULL, 'ü']", "'{}'", ["a b", None, "ü"]),
    Col("an", "numeric(6,2)[]", "'{1.5}'", "'{NULL}'", [Decimal("1.50")]),
    Col("ad", "date[]", "'{2024-02-29,NULL}'", "'{infinity,-infinity}'", [date(2024, 2, 29), None]),
    Col("atz", "timestamptz[]", "'{\"2024-01-02 03:04:05.5+00\"}'", "'{-infinity}'",
        [datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)]),
    Col("ats", "timestamp[]", "'{\"2024-01-02 03:04:05\"}'", "'{\"0044-03-15 12:00:00 BC\"}'",
        [datetime(2024, 1, 2, 3, 4, 5)]),
    Col("au", "uuid[]", f"ARRAY['{UUID}'::uuid]", "'{}'", [uuid.UUID(UUID)]),
    Col("anu", "numeric[]", "'{1.5,NULL}'", "'{NaN}'", [{"scale": 1, "value": b"\x0f"}, None],
        False),
    Col("grid", "integer[][]", "'{{1,2},{3,NULL}}'", "'{}'", [[1, 2], [3, None]]),
    Col("oi", "oid", "4294967295", "0", 4294967295),
    Col("x8", "xid8", "'123'", "'9223372036854775807'", 123, False),
    Col("lsn", "pg_lsn", "'16/B374D848'", "'0/0'", "16/B374D848"),
    Col("nm", "name", "'nämé'", "''", "nämé"),
    Col("ch", '"char"', "'x'", "''", "x"),
    # "char" is one byte: '' is stored as \0, 'é' as its first UTF-8 byte (0xC3).
    Col("chh", '"char"', "'a'", "'é'", "a"),
    Col("m8", "macaddr8", "'08:00:2b:01:02:03:04:05'", "'ff:ff:ff:ff:ff:ff:ff:ff'",
        "08:00:2b:01:02:03:04:05"),
    Col("ln", "line", "'{1,-1,0}'", "'{1,0,0}'", "{1,-1,0}"),
    Col("ls", "lseg", "'[(0,0),(1,1)]'", "'[(0,0),(0,0)]'", "[(0,0),(1,1)]"),
    Col("pa", "path", "'[(0,0),(1,1)]'", "'((0,0))'", "[(0,0),(1,1)]"),
    Col("pg", "polygon", "'((0,0),(1,1),(1,0))'", "'((0,0))'", "((0,0),(1,1),(1,0))"),
    Col("ci", "circle", "'<(0,0),1>'", "'<(0,0),0>'", "<(0,0),1>"),
    Col("dr", "daterange", "'[2024-01-01,2024-02-01)'", "'(,)'", "[2024-01-01,2024-02-01)", False),
    Col("nr", "numrange", "'[1.5,2.5]'", "'empty'", "[1.5,2.5]", False),
    Col("i8r", "int8range", "'[1,9223372036854775807)'", "'empty'", "[1,9223372036854775807)",
        False),
    Col("ab", "boolean[]", "'{t,f,NULL}'", "'{}'", [True, False, None]),
    Col("aby", "bytea[]", "ARRAY['\\x00'::bytea]", "'{}'", [b"\x00"]),
    Col("ajb", "jsonb[]", "ARRAY['{\"a\":1}'::jsonb]", "'{}'", ['{"a": 1}'], False),
    Col("aiv", "interval[]", "'{1 day}'", "'{}'", [86_400 * US], False),
    Col("atm", "time[]", "'{12:00:00}'", "'{24:00:00}'", [time(12)]),
    Col("af", "float8[]", "'{NaN,Infinity,-0}'", "'{}'", None, False),
    Col("amo", "money[]", "'{1.25}'", "'{}'", [Decimal("1.25")], False),
    Col("e", "mood", "'happy'", "'sad'", "happy"),
    Col("ea", "mood[]", "'{sad,happy}'", "'{}'", ["sad", "happy"], False),
    Col("dm", "posint", "5", "2147483647", 5),
    Col("ct", "citext", "'MiXeD'", "''", "MiXeD", extension="citext"),
    Col("hs", "hstore", "'a=>1, b=>NULL'", "''", {"a": "1", "b": None}, extension="hstore"),
    Col("act", "citext[]", "'{A,b}'", "'{}'", ["A", "b"], False, extension="citext"),
    Col("ahs", "hstore[]", "ARRAY['a=>1'::hstore]", "'{}'", [{"a": "1"}], extension="hstore"),
    Col("lt", "ltree", "'a.b.c'", "'x'", "a.b.c", extension="ltree"),
]  # fmt: skip


#: Oldest and newest supported majors by default, like tests/integration/source.
PG_VERSIONS = [
    v.strip() for v in os.environ.get("PGBRIDGE_PG_VERSIONS", "13,18").split(",") if v.strip()
]
#: pgoutput's ``binary`` option (binary column values) exists from PostgreSQL 14.
BINARY_SINCE = 14
#: (PostgreSQL major, binary) combinations: text everywhere, binary where the server has it.
STREAMS = [  # for ("zoo", "binary")
    pytest.param(v, binary, id=f"pg{v}-{'binary' if binary else 'text'}")
    for v in PG_VERSIONS
    for binary in (False, True)
    if not binary or int(v) >= BINARY_SINCE
]
BINARY_SERVERS = [pytest.param(v, id=f"pg{v}") for v in PG_VERSIONS if int(v) >= BINARY_SINCE]
TEXT_ONLY_SERVERS = [pytest.param(v, id=f"pg{v}") for v in PG_VERSIONS if int(v) < BINARY_SINCE]


@dataclass
class Zoo:
    conn: psycopg.Connection[Any]
    major: int
    schema: str
    slot: str
    publication: str
    enum_labels: dict[str, tuple[str, ...]]
    array_dimensions: dict[str, int]
    columns: list[Col]
    omitted: dict[str, str] = field(default_factory=dict)  # column -> why this server lacks it
    spark_reads: dict[bool, SparkZoo] = field(default_factory=dict)  # binary -> Spark's read


def server_columns(conn: psycopg.Connection[Any], major: int) -> tuple[list[Col], dict[str, str]]:
    """The columns this server can hold, and why each other one is left out."""
    wanted = sorted({c.extension for c in COLUMNS if c.extension})
    available = {
        name
        for (name,) in conn.execute(
            "SELECT name FROM pg_available_extensions WHERE name = ANY(%s)", (wanted,)
        )
    }
    columns, omitted = [], {}
    for c in COLUMNS:
        if major < c.since:
            omitted[c.name] = f"{c.type} needs PostgreSQL {c.since}"
        elif c.extension and c.extension not in available:
            omitted[c.name] = f"extension {c.extension} is not available"
        else:
            columns.append(c)
    return columns, omitted


@contextmanager
def build_zoo(dsn: str, major: int) -> Iterator[Zoo]:
    """The zoo tables, their changes waiting in a fresh slot; all dropped on exit."""
    suffix = uuid.uuid4().hex[:8]
    schema, slot, pub = f"zoo_{suffix}", f"zoo_slot_{suffix}", f"zoo_pub_{suffix}"
    conn = psycopg.connect(dsn, autocommit=True)
    assert conn.info.server_version // 10_000 == major
    try:
        cols, omitted = server_columns(conn, major)
        for ext in sorted({c.extension for c in cols if c.extension}):
            conn.execute(f"CREATE EXTENSION IF NOT EXISTS {ext}")
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path = {schema}, public")
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        conn.execute("CREATE DOMAIN posint AS integer CHECK (VALUE > 0)")
        conn.execute("CREATE TYPE pair AS (a integer, b text)")
        # Domains over every kind of base: a typmod'd numeric, a domain over a domain, text,
        # an enum, an array of a domain.
        conn.execute("CREATE DOMAIN amount AS numeric(12,3)")
        conn.execute("CREATE DOMAIN positive_amount AS amount CHECK (VALUE > 0)")
        conn.execute("CREATE DOMAIN label AS text")
        conn.execute("CREATE DOMAIN feeling AS mood")
        columns = ", ".join(f"{c.name} {c.type}" for c in cols)
        conn.execute(f"CREATE TABLE zoo (id integer PRIMARY KEY, {columns})")
        conn.execute("CREATE TABLE comp (id integer PRIMARY KEY, p pair)")
        conn.execute("CREATE TABLE toasty (id integer PRIMARY KEY, big text, n integer)")
        conn.execute("CREATE TABLE huge (id integer PRIMARY KEY, x xid8)")
        conn.execute(
            "CREATE TABLE doms (id integer PRIMARY KEY, a amount, p positive_amount, l label,"
            " f feeling, pi posint, aa amount[])"
        )
        conn.execute(f"CREATE PUBLICATION {pub} FOR TABLE zoo, comp, toasty, huge, doms")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        names = ", ".join(c.name for c in cols)
        normal = ", ".join(c.normal for c in cols)
        edge = ", ".join(
            c.edge_before_14 if c.edge_before_14 and major < 14 else c.edge for c in cols
        )
        conn.execute(f"INSERT INTO zoo (id, {names}) VALUES (1, {normal})")
        conn.execute(f"INSERT INTO zoo (id, {names}) VALUES (2, {edge})")
        conn.execute("INSERT INTO zoo (id) VALUES (3)")  # every column NULL
        conn.execute("INSERT INTO comp VALUES (1, ROW(7, 'x y'))")
        conn.execute("INSERT INTO doms VALUES (1, 1.5, 2.25, 'x', 'ok', 3, '{1.5,2}')")
        # Random-looking text does not compress, so it is stored out of line (TOASTed).
        conn.execute(
            "INSERT INTO toasty SELECT 1, string_agg(md5(i::text), ''), 0"
            " FROM generate_series(1, 400) i"
        )
        conn.execute("UPDATE toasty SET n = 1 WHERE id = 1")
        # xid8 is unsigned 64-bit; Avro's long is signed.
        conn.execute(
            "INSERT INTO huge VALUES (1, '9223372036854775807'), (2, '9223372036854775808')"
        )
        (labels,) = conn.execute("SELECT enum_range(NULL::mood)::text[]").fetchone()  # type: ignore[misc]
        if any(c.extension == "hstore" for c in cols):  # psycopg reads hstore as a dict
            hstore = TypeInfo.fetch(conn, "hstore")
            assert hstore is not None
            register_hstore(hstore, conn)
        # What a caller with catalog access passes along: declared array dimensions.
        dims = conn.execute(
            "SELECT attname::text, attndims FROM pg_attribute"
            " WHERE attrelid = 'zoo'::regclass AND attndims > 1"
        ).fetchall()
        yield Zoo(
            conn, major, schema, slot, pub, {f"{schema}.mood": tuple(labels)},
            dict(dims), cols, omitted,
        )  # fmt: skip
    finally:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        )
        conn.execute(f"DROP PUBLICATION IF EXISTS {pub}")
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.close()


class ZooKeeper:
    """One zoo per PostgreSQL major, built on first use and kept for the module (its tests only
    peek at the slot): the stack's own server for its major, a throwaway cluster for others."""

    def __init__(self, stack: StackInfo, exits: ExitStack) -> None:
        self.stack = stack
        self.exits = exits
        self.zoos: dict[str, Zoo] = {}

    def zoo(self, version: str) -> Zoo:
        if version not in self.zoos:
            self.zoos[version] = self.exits.enter_context(
                build_zoo(self.server_dsn(version), int(version))
            )
        return self.zoos[version]

    def server_dsn(self, version: str) -> str:
        if version == self.stack.postgres_major:
            return self.stack.postgres_dsn()
        bindir = ensure_postgres_binaries(version)
        # PostgreSQL runs as a non-root account: its directory must be traversable.
        base = Path(tempfile.mkdtemp(prefix=f"pgbridge-zoo-pg{version}-", dir="/tmp"))
        base.chmod(0o755)
        cluster = PostgresCluster(bindir, base_dir=base)
        self.exits.callback(cluster.destroy)
        cluster.start()
        return cluster.dsn()


@pytest.fixture(scope="module")
def zookeeper(local_stack: StackInfo) -> Iterator[ZooKeeper]:
    with ExitStack() as exits:
        yield ZooKeeper(local_stack, exits)


@pytest.fixture(params=[pytest.param(v, id=f"pg{v}") for v in PG_VERSIONS])
def zoo(request: pytest.FixtureRequest, zookeeper: ZooKeeper) -> Zoo:
    """The zoo on the PostgreSQL major ``request.param`` (tests narrow it by parametrizing
    ``zoo`` indirectly)."""
    return zookeeper.zoo(str(request.param))


@dataclass
class Change:
    table: str
    op: str
    schemas: RelationSchemas
    row: Mapping[str, Any]
    unchanged: list[str]


def peek(zoo: Zoo, *, binary: bool) -> list[bytes]:
    """The slot's pending pgoutput messages, without consuming them."""
    rows = zoo.conn.execute(
        "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', "
        "'1', 'publication_names', %s" + (", 'binary', 'true')" if binary else ")"),
        (zoo.slot, zoo.publication),
    ).fetchall()
    return [bytes(data) for (data,) in rows]


def stream(zoo: Zoo, table: str, *, binary: bool) -> list[Change]:
    """Peek the slot's changes and run those of ``table`` through decoder, mapper, encoder."""
    decoder = Decoder(1)
    mapper = TypeMapper()  # enum labels and domain modifiers from the catalog, as the bridge
    relations: dict[int, RelationSchemas] = {}
    out = []
    for data in peek(zoo, binary=binary):
        message = decoder.decode(data)
        if isinstance(message, Type):
            for resolved in describe_types(zoo.conn, [message.type_oid]).values():
                resolved.tell(mapper)
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


def test_type_zoo_snapshot_catalog_maps_every_column_as_the_stream_does(zoo: Zoo) -> None:
    # One mapping per column, whichever path describes the table first: the snapshot reads the
    # catalog, the stream gets Relation and Type messages. A domain was once the domain's own
    # name in the first (text fallback) and its base type in the second, so any later ALTER
    # registered an "incompatible" change and stopped the capture.
    decoder = Decoder(1)
    streamed_mapper = TypeMapper()
    streamed: dict[str, RelationSchemas] = {}
    for data in peek(zoo, binary=False):
        message = decoder.decode(data)
        if isinstance(message, Type):
            # As the pipeline does: the catalog's word first (a domain's modifier, an enum's
            # labels).
            for resolved in describe_types(zoo.conn, [message.type_oid]).values():
                resolved.tell(streamed_mapper)
            streamed_mapper.observe(message)
        elif isinstance(message, Relation):
            streamed[message.relation_name] = relation_schemas(
                message, streamed_mapper, topic_prefix="zoo"
            )
    published = published_tables(zoo.conn, zoo.publication)
    assert {t.name for t in published} == set(streamed) >= {"zoo", "doms"}
    for table in published:
        catalog = read_table(zoo.conn, table)
        copied_mapper = TypeMapper()
        catalog.describe_to(copied_mapper)
        copied = relation_schemas(catalog.relation, copied_mapper, topic_prefix="zoo")
        assert copied.relation.columns == streamed[table.name].relation.columns, table.name
        assert copied.value_schema == streamed[table.name].value_schema, table.name
        assert copied.key_schema == streamed[table.name].key_schema, table.name
    # A domain maps as its base type with the domain's modifier: numeric(12,3) under one or
    # two domains, and in an array of one, is the decimal numeric(12,3) is.
    doms = {f["name"]: f["type"] for f in row_schema(streamed["doms"])["fields"]}
    plain = {f["name"]: f["type"] for f in row_schema(streamed["zoo"])["fields"]}
    assert doms["a"] == doms["p"] == plain["n"]
    assert doms["aa"][1]["items"] == plain["n"]
    assert doms["pi"] == ["null", "int"] and doms["l"] == ["null", "string"]
    # Enums are Debezium's io.debezium.data.Enum with their labels (read from the catalog:
    # the Type message has none), a domain over one too.
    for enum in (plain["e"][1], doms["f"][1]):
        assert enum["connect.name"] == "io.debezium.data.Enum"
        assert enum["connect.parameters"] == {"allowed": "sad,ok,happy"}


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


def encode(change: Change) -> bytes:
    """The change's envelope, schemaless Avro in its value schema (the record after the
    Confluent framing)."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(
        buf, fastavro.parse_schema(change.schemas.value_schema), envelope(change)
    )
    return buf.getvalue()


def through_avro(change: Change, *, logical: bool = True) -> dict[str, Any]:
    """Encode the change's envelope with its value schema and decode it with fastavro."""
    schema = change.schemas.value_schema
    reader = fastavro.parse_schema(schema if logical else strip_logical(schema))
    decoded: Any = fastavro.schemaless_reader(io.BytesIO(encode(change)), reader)
    return dict(decoded)


def row_schema(schemas: RelationSchemas) -> dict[str, Any]:
    """The value schema's row record (the type of ``after``), named references expanded."""
    expanded: Any = fastavro.parse_schema(schemas.value_schema, expand=True)
    (after,) = (f for f in expanded["fields"] if f["name"] == "after")
    (record,) = (t for t in after["type"] if t != "null")
    return dict(record)


def zoo_changes(zoo: Zoo, *, binary: bool) -> dict[int, Change]:
    return {c.row["id"]: c for c in stream(zoo, "zoo", binary=binary)}


def psycopg_row(zoo: Zoo, key: int, *, text: bool = False) -> dict[str, Any]:
    """Row ``key`` as psycopg reads it; with ``text``, every column cast to ``text`` first."""
    cols = ", ".join(
        ["id", *(f"{c.name}::text AS {c.name}" if text else c.name for c in zoo.columns)]
    )
    cur = zoo.conn.execute(f"SELECT {cols} FROM {zoo.schema}.zoo WHERE id = %s", (key,))
    names = [d.name for d in cur.description or ()]
    return dict(zip(names, cur.fetchone() or (), strict=True))


def _unscaled(v: dict[str, Any]) -> Decimal:
    return zoo_spark.scaled(int.from_bytes(v["value"], "big", signed=True), v["scale"])


def _utc_time(t: time) -> time:
    return datetime.combine(date(2000, 1, 1), t).astimezone(UTC).timetz()


def _same(v: Any, *_: Any) -> Any:
    return v


def _server_text(_: Any, text: str) -> str:
    return text


#: Row 1's columns whose value psycopg reads in another form than pgbridge sends: for each,
#: (our value -> x, (psycopg's value, psycopg's value of ``column::text``) -> x) with equal x.
#: Our value is fastavro's, or Spark's in :mod:`zoo_spark`'s plain form: the same here.
PSYCOPG_VIEWS: dict[str, tuple[Callable[[Any], Any], Callable[[Any, str], Any]]] = {
    "nu": (_unscaled, _same),  # VariableScaleDecimal (scale, unscaled bytes) vs Decimal
    "anu": (lambda v: [None if x is None else _unscaled(x) for x in v], _same),
    "m": (_same, lambda v, _: Decimal(v.replace("$", "").replace(",", ""))),  # '$12.34'
    "j": (json.loads, _same),  # JSON text vs parsed
    "jb": (json.loads, _same),
    "ttz": (time.fromisoformat, lambda v, _: _utc_time(v)),  # '06:30:00Z' vs time(+05:30)
    "iv": (_same, lambda v, _: v // timedelta(microseconds=1)),  # MicroDuration vs timedelta
    "ip": (_same, lambda v, _: str(v)),  # string vs ipaddress objects
    "cd": (_same, lambda v, _: str(v)),
    "bt": (lambda v: int.from_bytes(v, "big"), lambda v, _: int(v, 2)),  # bytes vs '1010'
    "vb": (lambda v: int.from_bytes(v, "big"), lambda v, _: int(v, 2)),
    "pt": (lambda v: (v["x"], v["y"]), lambda v, _: tuple(map(float, v.strip("()").split(",")))),
    "r": (_same, _server_text),  # PostgreSQL's text form vs psycopg's Range objects
    "tr": (_same, _server_text),
    "mr": (_same, _server_text),
    "ea": (_same, lambda v, _: v.strip("{}").split(",")),  # psycopg: '{sad,happy}' (no loader)
    "act": (_same, lambda v, _: v.strip("{}").split(",")),  # psycopg: '{A,b}' (no loader)
    "x8": (_same, lambda v, _: int(v)),  # psycopg: '123' (no loader)
    "dr": (_same, _server_text),
    "nr": (_same, _server_text),
    "i8r": (_same, _server_text),
    "ajb": (lambda v: [json.loads(x) for x in v], _same),
    "aiv": (_same, lambda v, _: [x // timedelta(microseconds=1) for x in v]),
    "af": (lambda v: [repr(x) for x in v], lambda v, _: [repr(x) for x in v]),  # NaN != NaN
    "amo": (_same, lambda v, _: [Decimal(x.replace("$", "").replace(",", "")) for x in v]),
}


def assert_matches_psycopg(
    ours: dict[str, Any], zoo: Zoo, convert: Callable[[str, Any], Any] = lambda _, v: v
) -> None:
    """Every column of row 1 (``ours``) equals what psycopg reads: directly (after
    ``convert(column, psycopg value)``) or under its :data:`PSYCOPG_VIEWS` entry."""
    theirs, text = psycopg_row(zoo, 1), psycopg_row(zoo, 1, text=True)
    assert ours.keys() == theirs.keys() and ours["id"] == theirs["id"] == 1
    for c in zoo.columns:
        if c.psycopg:
            assert ours[c.name] == convert(c.name, theirs[c.name]), c.name
        else:
            mine, their = PSYCOPG_VIEWS[c.name]
            assert mine(ours[c.name]) == their(theirs[c.name], text[c.name]), c.name


# --- fastavro --------------------------------------------------------------------------------


def test_type_zoo_covers_every_type_family(zoo: Zoo) -> None:
    # Multiranges arrived in PostgreSQL 14; citext, hstore and ltree ship with every supported
    # major, so a missing one is a broken server install, not a reason to test less.
    expected = {"mr": "int4multirange needs PostgreSQL 14"} if zoo.major < 14 else {}
    assert zoo.omitted == expected
    assert [c.name for c in zoo.columns] == [c.name for c in COLUMNS if c.name not in expected]


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_values_roundtrip_to_expected(zoo: Zoo, binary: bool) -> None:
    after = through_avro(zoo_changes(zoo, binary=binary)[1])["after"]
    assert list(after) == ["id", *(c.name for c in zoo.columns)]
    for c in zoo.columns:
        if c.expected is not None:
            assert after[c.name] == c.expected, c.name
    assert (after["pt"]["x"], after["pt"]["y"]) == (1.0, 2.0)
    assert [repr(v) for v in after["af"]] == ["nan", "inf", "-0.0"]


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_values_match_what_psycopg_reads(zoo: Zoo, binary: bool) -> None:
    assert_matches_psycopg(through_avro(zoo_changes(zoo, binary=binary)[1])["after"], zoo)


@pytest.mark.parametrize("zoo", BINARY_SERVERS, indirect=True)
def test_type_zoo_text_and_binary_publications_agree(zoo: Zoo) -> None:
    text, binary = zoo_changes(zoo, binary=False), zoo_changes(zoo, binary=True)
    assert text.keys() == binary.keys() == {1, 2, 3}
    row = row_schema(text[1].schemas)
    assert row == row_schema(binary[1].schemas)
    for key in text:
        # Wire values, compared byte for byte (decimals too); the normalisation (logical=True
        # on undecoded values) only makes NaN equal to itself: f4 of row 2, af of row 1.
        a = through_avro(text[key], logical=False)["after"]
        b = through_avro(binary[key], logical=False)["after"]
        a, b = (zoo_spark.avro_as_spark(row, v) for v in (a, b))
        for name in a:
            assert a[name] == b[name], (key, name)


@pytest.mark.parametrize("zoo", TEXT_ONLY_SERVERS, indirect=True)
def test_type_zoo_binary_mode_is_refused_before_pg14(zoo: Zoo) -> None:
    # pgoutput before PostgreSQL 14 has no 'binary' option: a binary stream cannot be asked for
    # (the startup callback's elog(ERROR), hence no specific SQLSTATE).
    with pytest.raises(psycopg.errors.InternalError_, match="unrecognized pgoutput option: binary"):
        peek(zoo, binary=True)
    assert zoo_changes(zoo, binary=False).keys() == {1, 2, 3}  # the slot is unharmed


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_extremes(zoo: Zoo, binary: bool) -> None:
    edge = through_avro(zoo_changes(zoo, binary=binary)[2], logical=False)["after"]
    assert edge["i8"] == -(2**63)
    assert edge["n"] is None and edge["nu"] is None  # NaN, Infinity (NaN before 14): no decimal
    assert edge["f8"] == float("-inf")
    assert int.from_bytes(edge["m"], "big", signed=True) == -(2**63)  # cents, unscaled
    assert edge["d"] == INT32_MAX and edge["tstz"] == INT64_MIN
    assert edge["dold"] == days_from_civil(-4712, 1, 1)
    assert int.from_bytes(edge["n38"], "big", signed=True) == 10**38 - 1
    assert edge["tm"] == 86_400 * US
    assert edge["ts"] == (days_from_civil(-43, 3, 15) * 86_400 + 12 * 3600) * US
    assert edge["iv"] == -14 * US_PER_AVG_MONTH
    assert edge["ttz"] == "12:00:00Z"
    assert (edge["t"], edge["c"], edge["by"], edge["vb"]) == ("", "    ", b"", b"")
    assert (edge["r"], edge["tr"]) == ("empty", "(,)")
    assert edge.get("mr", "absent") == ("{}" if zoo.major >= 14 else "absent")
    assert (edge["ai"], edge["an"], edge["ea"], edge["grid"]) == ([], [None], [], [])
    assert (edge["ad"], edge["atz"], edge["anu"]) == ([INT32_MAX, INT32_MIN], [INT64_MIN], [None])
    assert edge["ats"] == [edge["ts"]]
    assert (edge["x8"], edge["oi"]) == (2**63 - 1, 0)
    # "char" as PostgreSQL 15+ prints it in either mode: '' for \0, octal for bytes >= 0x80.
    assert (edge["ch"], edge["chh"]) == ("", "\\303")


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_null_row(zoo: Zoo, binary: bool) -> None:
    after = through_avro(zoo_changes(zoo, binary=binary)[3])["after"]
    assert after == {"id": 3, **{c.name: None for c in zoo.columns}}


def test_type_zoo_schema_names_enum_and_domain(zoo: Zoo) -> None:
    schemas = zoo_changes(zoo, binary=False)[1].schemas
    fields = {f["name"]: f["type"][1] for f in row_schema(schemas)["fields"]}
    assert fields["e"]["connect.parameters"] == {"allowed": "sad,ok,happy"}
    assert fields["dm"] == "int"  # the domain is its base type
    assert schemas.topic == f"zoo.{zoo.schema}.zoo"


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_unchanged_toast_is_marked(zoo: Zoo, binary: bool) -> None:
    update = next(c for c in stream(zoo, "toasty", binary=binary) if c.op == "u")
    assert update.unchanged == ["big"]
    assert update.row == {"id": 1, "big": DEBEZIUM_UNAVAILABLE, "n": 1}
    assert through_avro(update)[UNCHANGED_TOAST_FIELD] == ["big"]


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_composite_is_text_and_refused_in_binary_form(zoo: Zoo, binary: bool) -> None:
    if not binary:
        (text,) = stream(zoo, "comp", binary=False)
        assert text.row == {"id": 1, "p": '(7,"x y")'}
        return
    with pytest.raises(ConversionError) as info:
        stream(zoo, "comp", binary=True)
    assert (info.value.table, info.value.column) == (f"{zoo.schema}.comp", "p")


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_xid8_beyond_long_is_clamped_and_counted(zoo: Zoo, binary: bool) -> None:
    # 2**63 - 1 fits a long; 2**63 does not: a documented lossy case (docs/types.md), clamped
    # to the largest long and counted, never a wrapped-around negative number nor a stop.
    before = LOSSY_VALUES[("xid8", "clamped")]
    rows = [change.row for change in stream(zoo, "huge", binary=binary)]
    assert rows == [{"id": 1, "x": 2**63 - 1}, {"id": 2, "x": 2**63 - 1}]
    assert LOSSY_VALUES[("xid8", "clamped")] == before + 1


# --- Spark's from_avro -----------------------------------------------------------------------

#: The Spark SQL type of each column as from_avro reads pgbridge's schema: logical types land
#: as native types (decimal, date, timestamp, timestamp_ntz); time-micros stays a long.
SPARK_TYPES = {
    "id": "int", "i2": "int", "i4": "int", "i8": "bigint", "f4": "float", "f8": "double",
    "n": "decimal(12,3)", "n38": "decimal(38,10)", "dold": "date",
    "nu": "struct<scale:int,value:binary>", "m": "decimal(19,2)",
    "b": "boolean", "t": "string", "vc": "string", "c": "string", "by": "binary",
    "u": "string", "j": "string", "jb": "string", "x": "string", "d": "date", "tm": "bigint",
    "ttz": "string", "ts": "timestamp_ntz", "tstz": "timestamp", "iv": "bigint",
    "ip": "string", "cd": "string", "mac": "string", "bt": "binary", "vb": "binary",
    "tsv": "string", "tsq": "string", "pt": "struct<x:double,y:double,wkb:binary,srid:int>",
    "bx": "string", "r": "string", "tr": "string", "mr": "string", "ai": "array<int>",
    "at": "array<string>", "an": "array<decimal(6,2)>", "ad": "array<date>",
    "atz": "array<timestamp>", "ats": "array<timestamp_ntz>", "au": "array<string>",
    "anu": "array<struct<scale:int,value:binary>>", "grid": "array<array<int>>",
    "oi": "bigint", "x8": "bigint", "lsn": "string", "nm": "string", "ch": "string",
    "chh": "string", "m8": "string", "ln": "string", "ls": "string", "pa": "string", "pg": "string",
    "ci": "string", "dr": "string", "nr": "string", "i8r": "string", "ab": "array<boolean>",
    "aby": "array<binary>", "ajb": "array<string>", "aiv": "array<bigint>",
    "atm": "array<bigint>", "af": "array<double>", "amo": "array<decimal(19,2)>",
    "act": "array<string>", "ahs": "array<map<string,string>>",
    "e": "string", "ea": "array<string>", "dm": "int", "ct": "string",
    "hs": "map<string,string>", "lt": "string",
}  # fmt: skip


@dataclass
class SparkZoo:
    changes: dict[int, Change]
    row: dict[str, Any]  # the Avro row record
    read: zoo_spark.SparkRead


def spark_zoo(zoo: Zoo, spark: Any, *, binary: bool) -> SparkZoo:
    """The zoo's rows decoded by Spark (once per zoo and mode: a Spark job is slow)."""
    if binary not in zoo.spark_reads:
        changes = zoo_changes(zoo, binary=binary)
        schemas = changes[1].schemas
        payloads = {key: encode(change) for key, change in changes.items()}
        frame = zoo_spark.local_frame(spark, payloads)
        read = zoo_spark.read(frame, json.dumps(schemas.value_schema), natural_keys={1, 3})
        zoo.spark_reads[binary] = SparkZoo(changes, row_schema(schemas), read)
    return zoo.spark_reads[binary]


def assert_same_row(spark_row: dict[str, Any], expected: dict[str, Any], what: str) -> None:
    assert list(spark_row) == list(expected), what  # every column, in order: none skipped
    for name, value in expected.items():
        assert spark_row[name] == value, f"{what}, column {name}: Spark read {spark_row[name]!r}"


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_spark_types_are_native(zoo: Zoo, spark: Any, binary: bool) -> None:
    after = spark_zoo(zoo, spark, binary=binary).read.after
    assert {f.name: f.dataType.simpleString() for f in after.fields} == {
        name: t for name, t in SPARK_TYPES.items() if name not in zoo.omitted
    }


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_spark_reads_what_fastavro_reads(zoo: Zoo, spark: Any, binary: bool) -> None:
    sz = spark_zoo(zoo, spark, binary=binary)
    assert sz.read.ops == {1: "c", 2: "c", 3: "c"}
    # Rows 1 (ordinary values) and 3 (all NULL), as PySpark collects them.
    assert sz.read.natural.keys() == {1, 3}
    for key, spark_row in sz.read.natural.items():
        fast = through_avro(sz.changes[key])["after"]
        assert_same_row(spark_row, zoo_spark.avro_as_spark(sz.row, fast), f"row {key}")
    # Row 1 against the table of expected values as well.
    fields = {f["name"]: f["type"] for f in sz.row["fields"]}
    row1 = sz.read.natural[1]
    for c in zoo.columns:
        if c.expected is not None:
            assert row1[c.name] == zoo_spark.avro_as_spark(fields[c.name], c.expected), c.name
    assert (row1["pt"]["x"], row1["pt"]["y"]) == (1.0, 2.0)
    # Every row, row 2's extremes included, with dates and timestamps as their wire integers.
    assert sz.read.integral.keys() == {1, 2, 3}
    for key, spark_row in sz.read.integral.items():
        raw = through_avro(sz.changes[key], logical=False)["after"]
        want = zoo_spark.avro_as_spark(sz.row, raw, logical=False)
        assert_same_row(spark_row, want, f"row {key} (dates and timestamps as integers)")
    assert sz.read.integral[2]["d"] == INT32_MAX and sz.read.integral[2]["tstz"] == INT64_MIN


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_spark_values_match_what_psycopg_reads(zoo: Zoo, spark: Any, binary: bool) -> None:
    sz = spark_zoo(zoo, spark, binary=binary)
    fields = {f["name"]: f["type"] for f in sz.row["fields"]}
    ours = sz.read.natural[1]
    assert_matches_psycopg(ours, zoo, lambda name, v: zoo_spark.avro_as_spark(fields[name], v))
    # The two kinds of timestamps: the instant (timestamptz), the wall clock (timestamp).
    assert ours["tstz"] == datetime(2024, 1, 1, 21, 34, 5, 678901, tzinfo=UTC)
    assert ours["ts"] == datetime(2024, 1, 2, 3, 4, 5, 678901)


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_spark_extremes_stay_sentinels(zoo: Zoo, spark: Any, binary: bool) -> None:
    """``infinity`` / ``-infinity`` reach Spark as its extreme date / timestamp (the int32 /
    int64 sentinels, exact), BC timestamps as proleptic Gregorian ones; Spark shows them, but
    PySpark cannot turn them into Python objects (years outside 1..9999)."""
    sz = spark_zoo(zoo, spark, binary=binary)
    assert sz.read.shown[2] == {
        "d": "+5881580-07-11",  # 2**31 - 1 days after 1970-01-01
        "dold": "-4712-01-01",
        "ts": "-0043-03-15 12:00:00",  # 44 BC is astronomical year -43
        "tstz": "-290308-12-21 19:59:05.224192",  # -2**63 microseconds
    }
    assert sz.read.shown[1] == {
        "d": "2024-02-29",
        "dold": "1582-10-10",
        "ts": "2024-01-02 03:04:05.678901",
        "tstz": "2024-01-01 21:34:05.678901",  # the session zone is UTC
    }
    # collect() builds Python objects with the types' fromInternal: year out of range.
    with pytest.raises((ValueError, OverflowError)):
        zoo_spark.after_of(sz.read.decoded, 2).collect()
    wire = sz.read.integral[2]
    for name, dtype in (
        ("d", DateType()),
        ("dold", DateType()),
        ("ts", TimestampNTZType()),
        ("tstz", TimestampType()),
    ):
        with pytest.raises((ValueError, OverflowError)):
            dtype.fromInternal(wire[name])


def produce_framed(stack: StackInfo, changes: dict[int, Change]) -> tuple[str, int, str]:
    """The changes' envelopes as pgbridge publishes them: the value schema registered under
    ``<topic>-value``, Confluent framing, the row id as key, on a fresh topic. Returns the
    topic, the schema id and the schema text the registry gives back."""
    topic = f"zoo-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    registry = registry_client(stack.registry_url)
    schema = changes[1].schemas.value_schema
    schema_id = registry.register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    for key, change in changes.items():
        producer.produce(
            topic, key=str(key), value=b"\x00" + struct.pack(">I", schema_id) + encode(change)
        )
    assert producer.flush(30) == 0
    registered = registry.get_schema(schema_id).schema_str
    assert registered is not None
    return topic, schema_id, registered


@pytest.mark.parametrize(("zoo", "binary"), STREAMS, indirect=["zoo"])
def test_type_zoo_spark_reads_the_same_through_kafka_and_registry(
    zoo: Zoo, spark: Any, binary: bool, local_stack: StackInfo
) -> None:
    sz = spark_zoo(zoo, spark, binary=binary)
    topic, schema_id, schema_json = produce_framed(local_stack, sz.changes)
    frame = zoo_spark.kafka_frame(spark, local_stack.bootstrap_servers, topic)
    via_kafka = zoo_spark.read(frame, schema_json, natural_keys={1, 3})
    assert set(frame.select("magic", "schema_id").collect()) == {("00", schema_id)}
    assert via_kafka.after == sz.read.after
    assert (via_kafka.ops, via_kafka.natural) == (sz.read.ops, sz.read.natural)
    assert (via_kafka.integral, via_kafka.shown) == (sz.read.integral, sz.read.shown)
