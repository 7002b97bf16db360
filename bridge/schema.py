"""Relation message -> Avro key and value schemas, topic and subject names, and the row encoder.

Pure: everything here is derived from the Relation message, the cached Type messages (through
:class:`~bridge.types.TypeMapper`) and optional caller-supplied :class:`TableHints`; no I/O.

The schemas are named and annotated like those of Debezium's PostgreSQL connector written by
Confluent's AvroConverter, so Debezium consumers accept them unchanged:

- topic ``<prefix>.<schema>.<table>``, Avro namespace the same (each part made a valid Avro
  name: invalid characters become ``_``, a leading digit gets a ``_`` prefix, as Debezium's
  ``avro`` name adjustment does);
- key record ``Key``, value envelope ``Envelope`` with ``before``/``after`` of record ``Value``,
  ``source`` (``schemas/source.avsc``), ``transaction`` (``schemas/transaction_block.avsc``),
  ``op``, ``ts_ms``, ``ts_us``, ``ts_ns``;
- ``connect.name`` on each record and on the semantic types of the columns.

Every ``Value`` field is an optional union, ``null`` first, with ``default: null``: Relation
messages do not say which columns are ``NOT NULL``, ``before`` of a DEFAULT-identity delete holds
only the key, and a field with a default is what makes adding a column a BACKWARD-compatible
change. Column comments, which are not in Relation messages, come from :class:`TableHints`.

Except a column added by ``ADD COLUMN ... DEFAULT``, whose older rows hold the value computed at
the ``ALTER`` (``attmissingval``: :attr:`TableHints.missing_values`): ``[T, "null"]`` with it as
the default (as Confluent's AvroData writes one), so a reader with the new schema reads old
records as PostgreSQL shows them; ``pgbridge.missing`` holds its text (where Avro cannot too).

Unchanged TOAST
---------------
When an UPDATE does not change a TOASTed value the server does not send it. pgbridge marks such
columns two ways: the column holds Debezium's placeholder ``__debezium_unavailable_value``
(string columns) or its UTF-8 bytes (``bytea``), exactly as Debezium does, so existing consumers
keep working; and the envelope field ``unchanged_toast_columns`` (array of field names, default
``[]``) lists them, for every type. A consumer tests that list, never the placeholder, and so
tells "unchanged" from NULL (and from a string that happens to equal the placeholder) for
columns of any type; columns that are not strings or bytes hold ``null`` when unchanged.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Final, Literal

from bridge import native
from bridge.column_controls import ColumnControls
from bridge.errors import PgBridgeError
from bridge.native.plan import record_plan
from bridge.pgoutput.messages import Relation, ReplicaIdentity, TupleData
from bridge.routing import TopicRouter, avro_string
from bridge.types import ColumnType, TypeMapper
from bridge.types.defaults import avro_default
from bridge.types.errors import ConversionError

logger = logging.getLogger(__name__)

#: The static schemas: the repository's ``schemas/``, which ``bridge/avro_schemas`` links to in a
#: checkout and which a built wheel carries as that package directory's files.
SCHEMAS_DIR: Final = Path(__file__).parent / "avro_schemas"

#: The envelope field listing the columns whose unchanged TOASTed value was not sent.
UNCHANGED_TOAST_FIELD: Final = "unchanged_toast_columns"

#: Field properties of a ``Value`` column: its PostgreSQL name where the Avro name differs; its
#: The PostgreSQL text of the value rows written before ``ADD COLUMN ... DEFAULT`` hold.
MISSING: Final = "pgbridge.missing"
#: attribute number (``attnum``, kept through renames); the names it had before renames, oldest
#: first (PostgreSQL's, beside Avro's own ``aliases`` with the Avro names).
ORIGINAL_NAME: Final = "pgbridge.column"
ATTNUM: Final = "pgbridge.attnum"
RENAMED_FROM: Final = "pgbridge.renamed_from"

#: The fields of the value envelope, in order (what :func:`relation_schemas` builds; the
#: serializer's fast path relies on exactly this layout).
ENVELOPE_FIELDS: Final = (
    "before",
    "after",
    "source",
    "transaction",
    "op",
    "ts_ms",
    "ts_us",
    "ts_ns",
    UNCHANGED_TOAST_FIELD,
)

KeylessMode = Literal["fail", "null_key"]


class SchemaError(PgBridgeError):
    """A Relation cannot be turned into schemas; ``table`` names it."""

    def __init__(self, table: str, message: str) -> None:
        super().__init__(f"table {table}: {message}")
        self.table = table


class KeylessTableError(SchemaError):
    """The table has no replica identity columns (REPLICA IDENTITY NOTHING, or DEFAULT without a
    primary key) and ``keyless="fail"``."""

    def __init__(self, table: str, replica_identity: ReplicaIdentity) -> None:
        super().__init__(
            table,
            f"no key columns (REPLICA IDENTITY {replica_identity.name}); add a primary key, set "
            "REPLICA IDENTITY FULL or USING INDEX, or configure keyless='null_key'",
        )
        self.replica_identity = replica_identity


@dataclass(frozen=True, slots=True)
class TableHints:
    """What the caller knows about a table beyond the Relation message (from the catalog, read
    by the snapshot or setup code, never by the mapper).

    - ``comments``: column name -> comment, emitted as the field's Avro ``doc``.
    - ``table_comment``: the ``Value`` record's ``doc``.
    - ``key_columns``: overrides the replica identity as the message key (e.g. the primary key of
      a REPLICA IDENTITY FULL table, like Debezium's ``message.key.columns``).
    - ``array_dimensions``: column name -> dimensions of an array column (``attndims``) when
      more than one; the Avro schema then nests arrays.
    - ``column_numbers``: column name -> attribute number (``attnum``), emitted as the field's
      ``pgbridge.attnum``: a column keeps its number through ``RENAME COLUMN``, so the next
      version of the schema can say it was renamed (:func:`bridge.schema_versions.carry_renames`).
    - ``missing_values``: column name -> the text (as the walsender renders values) of the value
      rows written before ``ADD COLUMN ... DEFAULT`` hold for it (``attmissingval``): the
      field's Avro default and ``pgbridge.missing``.
    - ``primary_key``: the table's primary key columns (catalog), the message key of a
      REPLICA IDENTITY FULL table when ``key_columns`` does not choose one, as Debezium keys it.
    """

    comments: Mapping[str, str] = field(default_factory=dict)
    table_comment: str | None = None
    key_columns: tuple[str, ...] | None = None
    array_dimensions: Mapping[str, int] = field(default_factory=dict)
    column_numbers: Mapping[str, int] = field(default_factory=dict)
    missing_values: Mapping[str, str] = field(default_factory=dict)
    primary_key: tuple[str, ...] = ()


# --- names -------------------------------------------------------------------------------------

_INVALID_AVRO: Final = re.compile(r"[^A-Za-z0-9_]")
_INVALID_TOPIC: Final = re.compile(r"[^A-Za-z0-9._\-]")


def avro_name(name: str) -> str:
    """A valid Avro name: invalid characters become ``_``, a leading digit gets a ``_``."""
    cleaned = _INVALID_AVRO.sub("_", name) or "_"
    return "_" + cleaned if cleaned[0].isdigit() else cleaned


def unique_field_name(column: str, taken: list[str] | tuple[str, ...]) -> str:
    """The Avro field name of ``column``: :func:`avro_name`, and where that is already taken by
    an earlier column (``"a b"`` and ``a_b``, ``naïve`` and ``na_ve``), that name plus ``_`` and
    six hex digits of the original name's SHA-1: unique, and stable across schema versions
    (columns keep their order, so the earlier column keeps the plain name). The original name
    is always in the field's ``pgbridge.column`` property."""
    name = avro_name(column)
    if name not in taken:
        return name
    suffixed = f"{name}_{hashlib.sha1(column.encode()).hexdigest()[:6]}"
    n = 2
    candidate = suffixed
    while candidate in taken:  # only for contrived names
        candidate = f"{suffixed}_{n}"
        n += 1
    return candidate


def table_schema_name(relation: Relation) -> str:
    """The table's schema name; the protocol sends "" for pg_catalog."""
    return relation.namespace or "pg_catalog"


def topic_name(prefix: str, relation: Relation) -> str:
    """``<prefix>.<schema>.<table>``, with characters Kafka forbids replaced by ``_``."""
    return table_topic(prefix, table_schema_name(relation), relation.relation_name)


def table_topic(prefix: str, schema: str, table: str) -> str:
    """The topic of table ``schema.table`` (:func:`topic_name`)."""
    return _INVALID_TOPIC.sub("_", f"{prefix}.{schema}.{table}")


def record_namespace(prefix: str, relation: Relation) -> str:
    parts = (*prefix.split("."), table_schema_name(relation), relation.relation_name)
    return ".".join(avro_name(p) for p in parts)


def subject_names(topic: str) -> tuple[str, str]:
    """(key subject, value subject) under the topic-name strategy."""
    return f"{topic}-key", f"{topic}-value"


# --- static schemas ----------------------------------------------------------------------------


@cache
def _load_static(name: str) -> str:
    return (SCHEMAS_DIR / f"{name}.avsc").read_text(encoding="utf-8")


def static_schema(name: str) -> dict[str, Any]:
    """A schema from ``schemas/<name>.avsc`` (a fresh copy: callers may embed and mutate it)."""
    loaded: dict[str, Any] = json.loads(_load_static(name))
    return loaded


# --- the schemas -----------------------------------------------------------------------------


def _dedupe_named(schema: Any, seen: set[str], namespace: str | None = None) -> Any:
    """Replace the second and later definitions of a named type by a reference to its full
    name, as Avro requires (e.g. two numeric columns share one VariableScaleDecimal)."""
    if isinstance(schema, list):
        return [_dedupe_named(s, seen, namespace) for s in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed"):
        ns = schema.get("namespace", namespace)
        full = schema["name"] if "." in schema["name"] or not ns else f"{ns}.{schema['name']}"
        if full in seen:
            return full
        seen.add(full)
        if kind == "record":
            schema = dict(schema)
            schema["fields"] = [
                {**f, "type": _dedupe_named(f["type"], seen, ns)} for f in schema["fields"]
            ]
        return schema
    if kind == "array":
        return {**schema, "items": _dedupe_named(schema["items"], seen, namespace)}
    if kind == "map":
        return {**schema, "values": _dedupe_named(schema["values"], seen, namespace)}
    if isinstance(kind, (dict, list)):
        return {**schema, "type": _dedupe_named(kind, seen, namespace)}
    return schema


@dataclass(frozen=True, slots=True)
class RelationSchemas:
    """Everything the sink needs for one table version: topic, subjects, schemas, encoder."""

    relation: Relation
    table: str  # "schema.table", for messages
    topic: str
    key_subject: str
    value_subject: str
    key_schema: dict[str, Any] | None  # None: keyless table in "null_key" mode
    value_schema: dict[str, Any]
    field_names: tuple[str, ...]  # one per column of the Relation, a field of the Value or not
    key_fields: tuple[str, ...]
    columns: tuple[ColumnType, ...]
    encoder: RowEncoder
    #: The PostgreSQL and field names of the columns whose values are withheld by column
    #: controls: never written anywhere in clear (the dead-letter topic leaves them out).
    withheld: frozenset[str] = frozenset()
    #: A topic shared by several tables (bridge.routing): the key's last field, named
    #: ``routed_key[0]``, holds ``routed_key[1]`` (the table's identifier) for every row, and
    #: ``key_suffix`` is its Avro encoding, written after the row's key fields.
    routed_key: tuple[str, str] | None = None
    key_suffix: bytes = b""

    def key_of(self, row: Mapping[str, Any]) -> dict[str, Any] | None:
        """The key record for a row (``after``, or ``before`` of a delete)."""
        if self.key_schema is None:
            return None
        key = {name: row[name] for name in self.key_fields}
        if self.routed_key is not None:
            key[self.routed_key[0]] = self.routed_key[1]
        return key


def relation_schemas(
    relation: Relation,
    mapper: TypeMapper,
    *,
    topic_prefix: str,
    hints: TableHints | None = None,
    keyless: KeylessMode = "null_key",
    controls: ColumnControls | None = None,
    router: TopicRouter | None = None,
) -> RelationSchemas:
    """Build the key and value schemas and the row encoder of one Relation message.

    A table without key columns (no primary key under REPLICA IDENTITY DEFAULT, NOTHING, zero
    columns, or FULL without ``hints.key_columns``) gets a null key (``keyless="null_key"``, the
    default, as Debezium does for tables without a primary key), or :class:`KeylessTableError`
    with ``keyless="fail"``. Column names that are not Avro names are sanitised and made unique
    (:func:`unique_field_name`). ``controls`` leave columns out of the ``Value`` record or mask,
    hash or cut their values (:mod:`bridge.column_controls`). ``router`` sends the table's
    records to a topic shared with other tables (:mod:`bridge.routing`). Raises
    :class:`~bridge.types.UnknownTypeError` for unknown types when the mapper is set to fail.
    """
    hints = hints or TableHints()
    table = f"{table_schema_name(relation)}.{relation.relation_name}"
    topic = topic_name(topic_prefix, relation)
    namespace = record_namespace(topic_prefix, relation)
    routed = router.route(topic) if router is not None else None
    routed_key: tuple[str, str] | None = None
    if router is not None and routed is not None:
        if router.key_enforce_uniqueness:
            routed_key = (router.key_field_name, router.identifier(topic))
        topic, namespace = routed, ".".join(avro_name(p) for p in routed.split("."))
    key_subject, value_subject = subject_names(topic)

    key_columns = _key_column_names(relation, hints)
    columns, names, fields, null_second, in_value, withheld = _value_fields(
        relation, mapper, hints, table, controls or ColumnControls(), set(key_columns)
    )
    by_column = {c.name: (n, t) for c, n, t in zip(relation.columns, names, columns, strict=True)}

    key_schema, key_fields, key_optional = _key_schema(
        relation, hints, key_columns, by_column, namespace, table, keyless
    )
    if key_schema is None:
        routed_key = None  # a keyless table keeps its null key, as with Debezium's router
    elif routed_key is not None:
        if routed_key[0] in key_fields:
            raise SchemaError(table, f"key.field.name {routed_key[0]!r} is a key column")
        key_schema["fields"].append({"name": routed_key[0], "type": "string"})

    value_record: dict[str, Any] = {
        "type": "record",
        "name": "Value",
        "namespace": namespace,
        "fields": fields,
        "connect.name": f"{namespace}.Value",
    }
    if hints.table_comment:
        value_record["doc"] = hints.table_comment
    envelope = _envelope(namespace, value_record)
    # A private copy: the column types' schema dicts are shared through the mapper's cache.
    value_schema = _dedupe_named(copy.deepcopy(envelope), set())
    key_names = {by_column[c.name][0]: i for i, c in enumerate(relation.columns)}
    encoder = RowEncoder(
        table,
        tuple(names),
        tuple(columns),
        key_indexes=tuple(key_names[name] for name in key_fields),
        key_optional=key_optional,
        null_second=frozenset(null_second),
        value_indexes=tuple(in_value),
        withheld=frozenset(withheld),
    )
    withheld_names = {relation.columns[i].name for i in withheld} | {names[i] for i in withheld}
    return RelationSchemas(
        relation=relation,
        table=table,
        topic=topic,
        key_subject=key_subject,
        value_subject=value_subject,
        key_schema=key_schema,
        value_schema=value_schema,
        field_names=tuple(names),
        key_fields=key_fields,
        columns=tuple(columns),
        encoder=encoder,
        withheld=frozenset(withheld_names),
        routed_key=routed_key,
        key_suffix=avro_string(routed_key[1]) if routed_key is not None else b"",
    )


def _value_fields(
    relation: Relation,
    mapper: TypeMapper,
    hints: TableHints,
    table: str,
    controls: ColumnControls,
    key_columns: set[str],
) -> tuple[list[ColumnType], list[str], list[dict[str, Any]], set[int], list[int], set[int]]:
    """Each column's type (under its control, if any), its Avro field name (sanitised,
    unique), the ``Value`` fields, the indexes of the columns whose field is ``[T, "null"]``
    (a default of the column's type), of the columns that are fields, and of those whose
    values are withheld (left out, masked, hashed or cut)."""
    columns: list[ColumnType] = []
    names: list[str] = []
    fields: list[dict[str, Any]] = []
    null_second: set[int] = set()
    in_value: list[int] = []
    withheld: set[int] = set()
    for i, column in enumerate(relation.columns):
        column_type = mapper.column_type(
            column.type_oid,
            column.type_modifier,
            dimensions=max(1, hints.array_dimensions.get(column.name, 1)),
            table=table,
            column=column.name,
        )
        if controls:
            mapped = column_type
            column_type = controls.controlled(
                column_type,
                table,
                column.name,
                length=_declared_length(column_type, column.type_modifier),
                in_key=column.name in key_columns,
            )
            if column_type is not mapped or not controls.in_value(table, column.name):
                withheld.add(i)
        name = unique_field_name(column.name, names)
        columns.append(column_type)
        names.append(name)
        if controls and not controls.in_value(table, column.name):
            continue
        field_schema = _value_field(name, column.name, column_type, hints, table)
        if field_schema["type"][-1] == "null":
            null_second.add(i)
        fields.append(field_schema)
        in_value.append(i)
    return columns, names, fields, null_second, in_value, withheld


def _declared_length(column_type: ColumnType, typmod: int) -> int:
    """The ``n`` of ``varchar(n)`` / ``char(n)`` (their typmod is ``n + 4``), else -1."""
    if column_type.pg_name in ("character varying", "character") and typmod >= 4:
        return typmod - 4
    return -1


def _envelope(namespace: str, value_record: dict[str, Any]) -> dict[str, Any]:
    """Debezium's change envelope around a table's ``Value`` record, plus pgbridge's
    ``unchanged_toast_columns``."""
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": namespace,
        "fields": [
            {"name": "before", "type": ["null", value_record], "default": None},
            {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
            {"name": "source", "type": static_schema("source")},
            {
                "name": "transaction",
                "type": ["null", static_schema("transaction_block")],
                "default": None,
            },
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "ts_us", "type": ["null", "long"], "default": None},
            {"name": "ts_ns", "type": ["null", "long"], "default": None},
            {
                "name": UNCHANGED_TOAST_FIELD,
                "type": {"type": "array", "items": "string"},
                "default": [],
                "doc": "pgbridge: fields of 'after' whose unchanged TOASTed value the server did "
                "not send. Such a field holds Debezium's placeholder (strings, bytes) or null; "
                "it is not NULL in the database.",
            },
        ],
        # Debezium 2+ envelopes are Connect schema version 2 (with ts_us, ts_ns).
        "connect.version": 2,
        "connect.name": f"{namespace}.Envelope",
    }


def _value_field(
    name: str, column: str, column_type: ColumnType, hints: TableHints, table: str
) -> dict[str, Any]:
    """The ``Value`` record's field of one column (see the module doc)."""
    field_schema: dict[str, Any] = {
        "name": name,
        "type": ["null", column_type.avro],
        "default": None,
    }
    missing = hints.missing_values.get(column)
    if missing is not None:
        try:
            field_schema["default"] = avro_default(column_type, missing)
            field_schema["type"] = [column_type.avro, "null"]
        except ValueError as exc:
            logger.info("%s.%s: %r has no Avro default form (%s): in %s only",
                        table, column, missing, exc, MISSING)  # fmt: skip
        field_schema[MISSING] = missing
    comment = hints.comments.get(column)
    if comment:
        field_schema["doc"] = comment
    if name != column:
        # The real name: the Spark job names Delta columns by it, and so can any consumer.
        field_schema[ORIGINAL_NAME] = column
    number = hints.column_numbers.get(column)
    if number is not None:
        field_schema[ATTNUM] = number
    return field_schema


def _key_column_names(relation: Relation, hints: TableHints) -> list[str]:
    """The columns of the message key (none: a keyless table)."""
    if hints.key_columns is not None:
        return list(hints.key_columns)
    if relation.replica_identity is ReplicaIdentity.FULL:
        # FULL flags every column as part of the identity, so the Relation does not say which
        # columns are the primary key: the catalog does (hints.primary_key), and Debezium keys
        # by it. Without one, keyed by the whole row, identical rows would share a key and
        # collapse downstream (and in compaction): like Debezium, the key is null unless
        # message.key.columns names the key columns.
        return list(_full_table_primary_key(relation, hints))
    # DEFAULT (primary key) and USING INDEX (a unique index on NOT NULL columns).
    return [c.name for c in relation.columns if c.is_key]


def _full_table_primary_key(relation: Relation, hints: TableHints) -> tuple[str, ...]:
    """A REPLICA IDENTITY FULL table's primary key from the catalog, when every column of it is
    in the Relation message (a publication's column list may leave one out); else none."""
    names = {c.name for c in relation.columns}
    key = hints.primary_key
    return key if key and all(name in names for name in key) else ()


def _key_schema(
    relation: Relation,
    hints: TableHints,
    key_columns: list[str],
    by_column: Mapping[str, tuple[str, ColumnType]],
    namespace: str,
    table: str,
    keyless: KeylessMode,
) -> tuple[dict[str, Any] | None, tuple[str, ...], bool]:
    """(key schema, its field names, whether its fields are optional unions)."""
    missing = [c for c in key_columns if c not in by_column]
    if missing:
        raise SchemaError(table, f"key columns {missing} are not in the table")
    # A caller-chosen key is typically the primary key, but nothing here proves NOT NULL;
    # those of DEFAULT and USING INDEX identities, and a primary key, are never NULL.
    optional = hints.key_columns is not None or (
        relation.replica_identity is ReplicaIdentity.FULL
        and not _full_table_primary_key(relation, hints)
    )
    if not key_columns:
        if keyless == "null_key":
            return None, (), False
        raise KeylessTableError(table, relation.replica_identity)
    fields: list[dict[str, Any]] = []
    for column in key_columns:
        name, column_type = by_column[column]
        if optional:
            fields.append({"name": name, "type": ["null", column_type.avro], "default": None})
        else:
            fields.append({"name": name, "type": copy.deepcopy(column_type.avro)})
    key = {
        "type": "record",
        "name": "Key",
        "namespace": namespace,
        "fields": fields,
        "connect.name": f"{namespace}.Key",
    }
    return _dedupe_named(key, set()), tuple(by_column[c][0] for c in key_columns), optional


class EncodedRow(Mapping[str, Any]):
    """A row the C accelerator already encoded: the Avro binary of the ``Value`` record and of
    the ``Key`` record, which the serializer copies as they are. As a mapping it is the row
    the Python converters make of the same TupleData, built on first access (nothing on the
    hot path reads it)."""

    __slots__ = ("_data", "_encoder", "_values", "avro", "key_avro")

    def __init__(
        self, avro: bytes, key_avro: bytes | None, data: TupleData, encoder: RowEncoder
    ) -> None:
        self.avro = avro
        self.key_avro = key_avro
        self._data = data
        self._encoder = encoder
        self._values: dict[str, Any] | None = None

    @property
    def tuple_data(self) -> TupleData:
        """The TupleData it was encoded from (for the dead-letter topic's raw text)."""
        return self._data

    def _row(self) -> dict[str, Any]:
        if self._values is None:
            self._values = self._encoder.values(self._data)[0]
        return self._values

    def __getitem__(self, name: str) -> Any:
        return self._row()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._row())

    def __len__(self) -> int:
        return len(self._row())

    def __repr__(self) -> str:
        return f"EncodedRow({self._row()!r})"


class RowEncoder:
    """TupleData -> the row of ``before``/``after``: one precomputed converter per column and
    wire format (the hot path: no per-value type dispatch, only the kind byte), or, where the
    C accelerator is built and knows every column's type, the Avro bytes directly
    (:class:`EncodedRow`)."""

    __slots__ = (
        "_binary",
        "_columns",
        "_key_plan",
        "_names",
        "_placeholders",
        "_row_plan",
        "_size",
        "_text",
        "_unlisted",
        "_withheld",
        "table",
    )

    def __init__(
        self,
        table: str,
        names: tuple[str, ...],
        columns: tuple[ColumnType, ...],
        *,
        key_indexes: tuple[int, ...] = (),
        key_optional: bool = False,
        null_second: frozenset[int] = frozenset(),
        value_indexes: tuple[int, ...] | None = None,
        withheld: frozenset[int] = frozenset(),
    ) -> None:
        """``key_indexes``: the columns of the ``Key`` record in its field order (none for a
        keyless table), ``key_optional``: whether its fields are ``["null", T]`` unions;
        ``null_second``: the columns whose value field is ``[T, "null"]`` instead;
        ``value_indexes``: the columns that are fields of the ``Value`` (default all);
        ``withheld``: the columns whose raw values no error may quote (column controls)."""
        self.table = table
        self._names = names
        self._columns = columns
        self._text = tuple(c.from_text for c in columns)
        self._binary = tuple(c.from_binary for c in columns)
        self._placeholders = tuple(c.toast_placeholder for c in columns)
        self._size = len(columns)
        # Value fields are ["null", T] but for null_second's (see the module doc); plans exist
        # only if the C encoder is built and covers every column of the row and of the key.
        self._row_plan: bytes | None = None
        self._key_plan: bytes | None = None
        in_value = range(len(columns)) if value_indexes is None else value_indexes
        # Unchanged TOAST is listed for fields only; errors quote no withheld value.
        self._unlisted = frozenset(range(len(columns))) - frozenset(in_value)
        self._withheld = withheld
        if native.encode_row is not None:
            row_plan = record_plan(columns, in_value, nullable=True, null_second=null_second)
            key_plan = record_plan(columns, key_indexes, nullable=key_optional)
            if row_plan is not None and key_plan is not None:
                self._row_plan = row_plan
                self._key_plan = key_plan if key_indexes else None

    @property
    def native(self) -> bool:
        """Whether rows of this table version go through the C accelerator."""
        return self._row_plan is not None

    @property
    def plans(self) -> tuple[bytes | None, bytes | None]:
        """The C encoder's (row plan, key plan) (:mod:`bridge.native.plan`); ``None`` for the
        row plan where rows take the Python converters."""
        return self._row_plan, self._key_plan

    def encode(self, data: TupleData) -> tuple[Mapping[str, Any], list[str]]:
        """(row, unchanged TOAST field names): an :class:`EncodedRow` where the accelerator
        encodes the whole row, else the dict of :meth:`values`. Raises
        :class:`ConversionError` naming the table and column when a value cannot be read."""
        row_plan = self._row_plan
        if row_plan is not None:
            encode_row = native.encode_row
            assert encode_row is not None
            encoded = encode_row(data.buffer, data.kinds, data.spans, row_plan, self._key_plan)
            if encoded is not None:
                return EncodedRow(encoded[0], encoded[1], data, self), []
        return self.values(data)

    def values(self, data: TupleData) -> tuple[dict[str, Any], list[str]]:
        """(row as a dict, unchanged TOAST field names), by the Python converters."""
        kinds, buffer, spans = data.kinds, data.buffer, data.spans
        if len(kinds) != self._size:
            raise ConversionError(
                "row",
                f"tuple has {len(kinds)} columns, the Relation has {self._size}",
                table=self.table,
            )
        text, binary, names = self._text, self._binary, self._names
        row: dict[str, Any] = {}
        unchanged: list[str] = []
        i = 0
        try:
            for i, kind in enumerate(kinds):
                if kind == 0x74:  # 't'
                    row[names[i]] = text[i](buffer[spans[2 * i] : spans[2 * i + 1]])
                elif kind == 0x62:  # 'b'
                    row[names[i]] = binary[i](buffer[spans[2 * i] : spans[2 * i + 1]])
                elif kind == 0x6E:  # 'n'
                    row[names[i]] = None
                elif kind == 0x75:  # 'u'
                    row[names[i]] = self._placeholders[i]
                    if i not in self._unlisted:
                        unchanged.append(names[i])
                else:
                    raise ValueError(f"unknown column kind {kind!r}")
        except ConversionError as exc:
            raw = None if i in self._withheld else exc.raw
            raise ConversionError(
                exc.type_name, exc.detail, table=self.table, column=names[i], raw=raw
            ) from exc
        except Exception as exc:  # a converter met input it cannot read
            raise ConversionError(
                self._columns[i].pg_name,
                f"{type(exc).__name__}: {exc}",
                table=self.table,
                column=names[i],
                raw=None if i in self._withheld else buffer[spans[2 * i] : spans[2 * i + 1]],
            ) from exc
        return row, unchanged
