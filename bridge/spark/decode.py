"""Decoding a micro-batch: Confluent framing + the registry's writer schemas -> per-table changes.

Runs on the driver inside ``foreachBatch``. It looks at the batch's distinct (topic, schema id)
pairs, fetches each schema once (cached for the life of the job: a schema id never changes
meaning), decodes each group with its own writer schema, and conforms the groups of one table
to the newest schema's shape. Records written under different schema versions thus decode
correctly in one batch.

The registry is the only I/O here. A definite "no such schema id" answer dead-letters the
records; a registry that cannot answer fails the batch (it is retried from the checkpoint),
because dead-lettering good records over a network blip would lose them from the tables.

A table topic is anything under the prefix with at least two segments after it (schema and
table names may contain dots); the table's identity comes from the records' source block, not
from the topic. Columns get their PostgreSQL names and Delta types (:mod:`bridge.spark.columns`);
a record with a value that does not fit its Delta type is applied with null there *and*
dead-lettered with the column named, so the exact value is kept. A table whose records carry
no key (a null Kafka key on anything but a truncate, and no keyed record in the batch) is
decoded into row images for the multiset apply (:mod:`bridge.spark.multiset`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bridge.retry import RetryPolicy
from bridge.sink.registry import registry_client
from bridge.spark import transforms as tf
from bridge.spark.columns import RowShape, missing_literal
from bridge.spark.config import ApplyConfig
from bridge.spark.errors import RegistryUnavailableError, TableApplyError
from bridge.spark.semantic import restore_logical_types
from bridge.spark.set_aside import set_aside_reason

__all__ = [
    "BatchGroups",
    "DecodedBatch",
    "SchemaCache",
    "TableBatch",
    "batch_groups",
    "decode_batch",
]

logger = logging.getLogger(__name__)

# Fields a change envelope must have for the job to apply it.
_ENVELOPE_FIELDS = ("op", "source")
_SOURCE_FIELDS = ("commit_lsn", "seq", "ts_ms")


class SchemaCache:
    """Schema id -> Avro schema JSON with references inlined, fetched once per id.

    ``client`` is a ``confluent_kafka.schema_registry.SchemaRegistryClient`` (or anything with
    its ``get_schema`` / ``get_version``). ``None`` means the registry does not know the id.
    """

    def __init__(self, client: Any, retry: RetryPolicy | None = None) -> None:
        self._client = client
        self._schemas: dict[int, str | None] = {}
        # A registry restarting or unreachable for a while must not fail the batch (and with
        # it the streaming query): the lookup waits, like pgbridge run's registrar.
        self._retry = retry or RetryPolicy()

    @classmethod
    def for_url(cls, url: str, options: dict[str, str] | None = None) -> SchemaCache:

        return cls(registry_client({"url": url, **(options or {})}))

    def schema_json(self, schema_id: int) -> str | None:
        if schema_id not in self._schemas:
            self._schemas[schema_id] = self._fetch(schema_id)
        return self._schemas[schema_id]

    def field_names(self, schema_id: int) -> tuple[str, ...] | None:
        """Top-level field names of a record schema (a key schema's replica-identity columns)."""
        text = self.schema_json(schema_id)
        if text is None:
            return None
        parsed = json.loads(text)
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            return None
        return tuple(str(f["name"]) for f in parsed.get("fields", []))

    def _fetch(self, schema_id: int) -> str | None:
        return self._retry.run(
            "schema registry",
            f"reading schema id {schema_id}",
            lambda: self._fetch_once(schema_id),
            lambda exc: isinstance(exc, RegistryUnavailableError) and exc.transient,
        )

    def _fetch_once(self, schema_id: int) -> str | None:
        import httpx  # the registry client's transport
        from confluent_kafka.schema_registry import SchemaRegistryError
        from confluent_kafka.schema_registry.error import OAuthTokenError

        from bridge.sink.registry import token_error, transport_error

        try:
            schema = self._client.get_schema(schema_id)
            if schema.schema_type not in (None, "AVRO"):
                logger.warning("schema id %d is %s, not Avro", schema_id, schema.schema_type)
                return None
            parsed = json.loads(schema.schema_str)
            if schema.references:
                named: dict[str, Any] = {}
                self._collect_references(schema.references, named)
                parsed = _inline(parsed, named, set())
            # Topics written with schema.logical.types=connect carry Debezium's semantic names
            # only: the standard logical types are put back for from_avro (same bytes).
            return json.dumps(restore_logical_types(parsed))
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None
            raise RegistryUnavailableError(schema_id, str(exc), exc.http_status_code) from exc
        except OAuthTokenError as exc:  # bearer auth: the token endpoint refused or is down
            error = token_error(f"id {schema_id}", exc)
            raise RegistryUnavailableError(schema_id, str(error), error.status) from exc
        except (OSError, httpx.HTTPError) as exc:  # connection refused, timeouts, resets
            error = transport_error(f"id {schema_id}", exc)
            raise RegistryUnavailableError(schema_id, str(error), final=error.final) from exc
        except ValueError as exc:  # an answer that is not a schema: waiting will not help
            raise RegistryUnavailableError(schema_id, repr(exc), final=True) from exc

    def _collect_references(self, references: Any, named: dict[str, Any]) -> None:
        """Referenced schemas (recursively), keyed by the full name each one defines."""
        for ref in references:
            registered = self._client.get_version(ref.subject, ref.version)
            if registered.schema.references:
                self._collect_references(registered.schema.references, named)
            parsed = json.loads(registered.schema.schema_str)
            named[_full_name(parsed)] = _inline(parsed, named, set())


def _full_name(schema: dict[str, Any]) -> str:
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return f"{namespace}.{name}" if namespace and "." not in name else name


def _inline(node: Any, named: dict[str, Any], defined: set[str]) -> Any:
    """Replace the first use of each referenced type name by its definition (Avro needs one)."""
    if isinstance(node, str):
        if node in named and node not in defined:
            defined.add(node)
            return _inline(named[node], named, defined)
        return node
    if isinstance(node, list):
        return [_inline(item, named, defined) for item in node]
    if isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed") and "name" in node:
            defined.add(_full_name(node))
        return {
            k: _inline(v, named, defined) if k in ("type", "fields", "items", "values") else v
            for k, v in node.items()
        }
    return node


@dataclass(frozen=True, slots=True)
class TableBatch:
    """The changes of one source table (one topic) in one micro-batch, conformed to one shape.

    ``changes`` carries the table's identity in its ``_pgbridge_source_*`` columns (the job
    reads it with its first aggregate); ``raw`` are the Kafka records behind ``changes``, for
    dead-lettering them if the table cannot be applied.
    """

    topic: str
    changes: DataFrame
    columns: T.StructType  # the row's columns (PostgreSQL names), newest schema version first
    key_columns: tuple[str, ...]  # empty: a keyless table, or a batch with only truncates
    raw: DataFrame
    keyless: bool = False  # changes are row images (envelope_to_images)
    # Columns renamed in the source (RENAME COLUMN): old name -> name now, for the table.
    renames: dict[str, str] = field(default_factory=dict)
    # Columns added with a default (ADD COLUMN ... DEFAULT): name -> the reader schema of the
    # value older rows hold (bridge.spark.columns.missing_literal), to backfill the table.
    missing: dict[str, str] = field(default_factory=dict)
    # Every record carries pgbridge's own position (source.commit_lsn, source.seq), not one
    # derived from Debezium's LSNs (a topic taken over): a snapshot's rows are then numbered
    # per attempt (bridge.snapshot.plan).
    pgbridge_positions: bool = True

    @property
    def name(self) -> str:
        return self.topic


@dataclass(slots=True)
class DecodedBatch:
    """A decoded micro-batch: changes per table, and the records that cannot be applied."""

    tables: list[TableBatch] = field(default_factory=list)
    dead_letters: list[DataFrame] = field(default_factory=list)
    cached: list[DataFrame] = field(default_factory=list)  # unpersist when the batch is done
    # Topics whose batch could not be decoded as a table: held back from now on
    # (bridge.spark.set_aside), every record of theirs in this batch dead-lettered.
    set_aside: set[str] = field(default_factory=set)

    def set_table_aside(
        self, topic: str, rows: Sequence[DataFrame], why: BaseException | str, batch_id: int
    ) -> None:
        """``topic``'s ``rows`` of the batch dead-lettered as its table's: the table is held."""
        reason = set_aside_reason(why)
        self.dead_letters.extend(tf.dead_letters(frame, reason, batch_id) for frame in rows)
        self.set_aside.add(topic)


@dataclass(slots=True)
class _Group:
    schema_id: int
    decoded: DataFrame
    shape: RowShape
    key_columns: tuple[str, ...]


def _envelope_problem(decoded: DataFrame) -> str | None:
    envelope = decoded.schema[tf.ENVELOPE].dataType
    if not isinstance(envelope, T.StructType):
        return "not a record"
    missing = [f for f in _ENVELOPE_FIELDS if f not in envelope.fieldNames()]
    if not ({"after", "before"} & set(envelope.fieldNames())):
        missing.append("after/before")
    if not missing:
        source = envelope["source"].dataType
        if not isinstance(source, T.StructType):
            missing.append("source record")
        else:
            names = source.fieldNames()
            # Debezium's records (a topic taken over) have no commit_lsn/seq: their lsn orders them.
            required = _SOURCE_FIELDS if "lsn" not in names else ("ts_ms",)
            missing += [f"source.{f}" for f in required if f not in names]
    return f"missing {', '.join(missing)}" if missing else None


def _raw(decoded: DataFrame) -> DataFrame:
    """The Kafka records behind a group's change rows."""
    return decoded.where(
        ~F.col(tf.UNDECODABLE) & F.col(f"{tf.ENVELOPE}.op").isin(*tf.APPLY_OPS)
    ).select(*tf.KAFKA_META, tf.VALUE_SCHEMA_ID)


@dataclass(frozen=True, slots=True)
class BatchGroups:
    """A framed batch's (topic, value schema id) groups: per group its record count and its
    key schema ids (``key_id``, ``min_key_id``); and whether any record is not even framed."""

    groups: list[Any]
    unframed: bool

    def without(self, topics: set[str]) -> BatchGroups:
        """The groups of other topics (those of ``topics`` are applied another way)."""
        return BatchGroups([g for g in self.groups if g["topic"] not in topics], self.unframed)


#: A group's sample record's value in :func:`batch_groups`'s rows.
SAMPLE = "sample"


def batch_groups(framed: DataFrame) -> BatchGroups:
    """One pass over a framed batch: its groups, and whether any record is not framed (then,
    and only then, the dead-letter phase reads the batch for them)."""
    unframed = F.col(tf.FRAMING_ERROR).isNotNull()
    counted = (
        framed.where(unframed | F.col("value").isNotNull())
        .groupBy("topic", tf.VALUE_SCHEMA_ID, unframed.alias("unframed"))
        .agg(
            F.max(tf.KEY_SCHEMA_ID).alias("key_id"),
            F.min(tf.KEY_SCHEMA_ID).alias("min_key_id"),
            F.count(F.lit(1)).alias("records"),
            # One record of the group, whatever it is: the task lane reads a new table's
            # source table from it before decoding the rest (bridge.spark.task_lane).
            F.first("value", ignorenulls=True).alias(SAMPLE),
        )
        .collect()
    )
    groups = [row for row in counted if not row["unframed"]]
    return BatchGroups(groups, len(groups) < len(counted))


#: A group of :func:`batch_groups`: (topic, value schema id, whether its records are unframed).
GroupKey = tuple[str, Any, bool]


def count_groups(
    records: Any, has_value: Any, groups: dict[GroupKey, dict[str, Any]] | None = None
) -> dict[GroupKey, dict[str, Any]]:
    """:func:`batch_groups`'s count over an Arrow table of framed records (a batch collected
    whole, or a task's share of one), added to ``groups``; ``has_value``: per record, whether
    it holds a value. A group: its value schema id, ``unframed``, ``key_id`` and
    ``min_key_id``, ``records`` and a :data:`SAMPLE` value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unframed = pc.is_valid(records.column(tf.FRAMING_ERROR))
    counted = (
        pa.table(
            {
                "topic": records.column("topic"),
                "schema_id": records.column(tf.VALUE_SCHEMA_ID),
                "unframed": unframed,
                "key_id": records.column(tf.KEY_SCHEMA_ID),
                "value": records.column("value"),
            }
        )
        .filter(pc.or_(unframed, has_value))
        .group_by(["topic", "schema_id", "unframed"], use_threads=False)
        .aggregate([("key_id", "max"), ("key_id", "min"), ("topic", "count"), ("value", "first")])
    )
    out = {} if groups is None else groups
    for row in counted.to_pylist():
        add_group(
            out,
            (row["topic"], row["schema_id"], bool(row["unframed"])),
            {
                tf.VALUE_SCHEMA_ID: row["schema_id"],
                "unframed": bool(row["unframed"]),
                "key_id": row["key_id_max"],
                "min_key_id": row["key_id_min"],
                "records": row["topic_count"],
                SAMPLE: row["value_first"],
            },
        )
    return out


def add_group(groups: dict[GroupKey, dict[str, Any]], key: GroupKey, part: dict[str, Any]) -> None:
    """Add one part of a group (:func:`count_groups`) to ``groups``: counts add up, key schema
    ids widen, the first sample stays."""
    group = groups.get(key)
    if group is None:
        groups[key] = dict(part)
        return
    group["records"] += part["records"]
    for name, pick in (("key_id", max), ("min_key_id", min)):
        values = [v for v in (group[name], part[name]) if v is not None]
        group[name] = pick(values) if values else None
    if group.get(SAMPLE) is None:
        group[SAMPLE] = part.get(SAMPLE)


def decode_batch(
    framed: DataFrame,
    config: ApplyConfig,
    schemas: SchemaCache,
    batch_id: int,
    planners: int = 1,
    groups: BatchGroups | None = None,
) -> DecodedBatch:
    """Decode a batch framed by :func:`bridge.spark.transforms.frame` (cached here when it
    holds several groups; the caller unpersists ``out.cached``); ``planners`` tables are
    planned at a time. ``groups``: the batch's (:func:`batch_groups`), if known (they may leave
    out topics applied another way)."""
    out = DecodedBatch()
    if groups is None:
        groups = batch_groups(framed)
    if groups.unframed:
        unframed = F.col(tf.FRAMING_ERROR).isNotNull()
        out.dead_letters.append(
            tf.dead_letters(framed.where(unframed), F.col(tf.FRAMING_ERROR), batch_id)
        )
    if len(groups.groups) > 1 and not framed.is_cached:
        # Each group's decode reads the batch again: from a cache, not Kafka, when there are
        # several. A batch of one group (one table's snapshot, say) reads Kafka twice instead,
        # which is cheaper than caching it (measured: 524,288 records, read phase 6.5 s with
        # the cache).
        framed.persist()
        out.cached.append(framed)
    per_topic: dict[str, list[Any]] = {}
    for row in sorted(groups.groups, key=lambda r: (r["topic"], r[tf.VALUE_SCHEMA_ID])):
        per_topic.setdefault(str(row["topic"]), []).append(row)

    def decode_table(topic: str) -> DecodedBatch:
        part = DecodedBatch()
        table_groups = [
            group
            for row in per_topic[topic]
            if (group := _decode_group(framed, row, config, schemas, batch_id, part)) is not None
        ]
        if table_groups and topic in part.set_aside:
            # Another schema version of the table's batch failed: none of it is applied.
            part.set_table_aside(
                topic,
                [_raw(group.decoded) for group in table_groups],
                "another schema version of the table's batch failed",
                batch_id,
            )
        elif table_groups:
            _add_table(part, topic, table_groups, config, batch_id)
        return part

    # Planning a table's frames is driver and JVM latency (py4j round trips, the analyser:
    # about 70 ms per group on 2 cores), not Spark tasks: tables are planned side by side.
    # Each into its own part, merged in topic order, so the batch is the same either way.
    topics = list(per_topic)
    if len(topics) > 1 and planners > 1:
        with ThreadPoolExecutor(planners, thread_name_prefix="pgbridge-decode") as pool:
            parts = list(pool.map(decode_table, topics))
    else:
        parts = [decode_table(topic) for topic in topics]
    for part in parts:
        out.tables.extend(part.tables)
        out.dead_letters.extend(part.dead_letters)
        out.cached.extend(part.cached)
        out.set_aside |= part.set_aside
    return out


def _add_table(
    out: DecodedBatch, topic: str, table_groups: list[_Group], config: ApplyConfig, batch_id: int
) -> None:
    """A topic's decoded groups -> its TableBatch in ``out`` (or its records dead-lettered)."""
    try:
        table, dead = _table_batch(
            topic,
            table_groups,
            batch_id,
            newest_only=config.dropped_columns == "drop",
            routed=_routed_key_column(config),
        )
    except Exception as exc:  # e.g. versions Spark cannot conform: this table only
        out.set_table_aside(topic, [_raw(group.decoded) for group in table_groups], exc, batch_id)
        return
    out.tables.append(table)
    out.dead_letters.extend(dead)


def _decode_group(
    framed: DataFrame,
    row: Any,
    config: ApplyConfig,
    schemas: SchemaCache,
    batch_id: int,
    out: DecodedBatch,
) -> _Group | None:
    """One (topic, value schema id) group of a batch, decoded (and cached in ``out``); None
    when its records cannot be applied, which then are in ``out.dead_letters`` with why."""
    topic, schema_id = str(row["topic"]), int(row[tf.VALUE_SCHEMA_ID])
    group_rows = framed.where(
        (F.col("topic") == topic)
        & (F.col(tf.VALUE_SCHEMA_ID) == schema_id)
        & F.col(tf.FRAMING_ERROR).isNull()
        & F.col("value").isNotNull()
    )
    if not config.is_table_topic(topic):
        out.dead_letters.append(
            tf.dead_letters(
                group_rows, f"topic is not {config.topic_prefix}.<schema>.<table>", batch_id
            )
        )
        return None
    schema_json = schemas.schema_json(schema_id)
    if schema_json is None:
        out.dead_letters.append(
            tf.dead_letters(group_rows, f"unknown schema id {schema_id}", batch_id)
        )
        return None
    shape = RowShape.from_schema(schema_json, config.variable_decimal)
    try:
        # Before decoding: Spark's Avro reader cannot even read some of these.
        _check_names(topic, shape)
    except TableApplyError as exc:
        out.set_table_aside(topic, [group_rows], str(exc), batch_id)
        return None
    decoded = tf.decode_envelopes(framed, topic, schema_id, schema_json)
    problem = _envelope_problem(decoded)
    if problem is not None:
        out.dead_letters.append(
            tf.dead_letters(
                group_rows,
                f"schema id {schema_id} is not a change envelope: {problem}",
                batch_id,
            )
        )
        return None
    # Decoding is the expensive part; it feeds both the changes and the dead letters.
    decoded = decoded.persist()
    out.cached.append(decoded)
    if not shape.columns:
        shape = RowShape.plain(tf.envelope_fields(decoded))
    try:
        key_fields = _key_columns(schemas, topic, row["key_id"], row["min_key_id"])
        routed = config.routed_key[0]  # a routed topic's key field: a column computed below
        missing = [
            k for k in key_fields if k not in {c.field for c in shape.columns} and k != routed
        ]
        if missing:
            raise TableApplyError(
                topic, f"key columns {missing} are not columns of schema id {schema_id}"
            )
        unfit = _unfit_columns(decoded, shape)
    except RegistryUnavailableError:
        raise
    except Exception as exc:  # this table's records only: the batch goes on
        out.dead_letters.append(_group_dead_letters(decoded, schema_id, None, config, batch_id))
        out.set_table_aside(topic, [_raw(decoded)], exc, batch_id)
        return None
    # One dead-letter frame per group, whatever the reasons: the dead-letter phase unions
    # these, so its plan grows by one branch per (topic, schema id), not by three.
    out.dead_letters.append(_group_dead_letters(decoded, schema_id, unfit, config, batch_id))
    names = {c.field for c in shape.columns}
    key_columns = tuple(shape.name_of(k) if k in names else k for k in key_fields)
    return _Group(schema_id, decoded, shape, key_columns)


def _check_names(topic: str, shape: RowShape) -> None:
    """Columns the job can name in Spark and Delta."""
    clash = [c.name for c in shape.columns if c.name.startswith("_pgbridge_")]
    if clash:
        raise TableApplyError(topic, f"columns {clash} clash with pgbridge's metadata columns")
    seen: dict[str, str] = {}
    for c in shape.columns:
        other = seen.setdefault(c.name.lower(), c.name)
        if other != c.name:
            raise TableApplyError(
                topic,
                f"columns {other!r} and {c.name!r} differ only in case, and Spark and Delta "
                "column names are case-insensitive",
            )


def _unfit_columns(decoded: DataFrame, shape: RowShape) -> Column | None:
    """Per record, the columns holding a value their Delta type cannot hold exactly (None: no
    column can be unfit). Such a record is applied with null there *and* dead-lettered."""
    envelope = decoded.schema[tf.ENVELOPE].dataType
    assert isinstance(envelope, T.StructType)
    lists = [
        shape.unfit_columns(F.col(tf.ENVELOPE)[image])
        for image in ("before", "after")
        if image in envelope.fieldNames()
    ]
    present = [u for u in lists if u is not None]
    if not present:
        return None
    return F.array_distinct(F.flatten(F.array(*present)))


_DEAD_REASON = "_pgbridge_dead_letter_reason"


def _group_dead_letters(
    decoded: DataFrame,
    schema_id: int,
    unfit: Column | None,
    config: ApplyConfig,
    batch_id: int,
) -> DataFrame:
    """A group's records that cannot be applied exactly, each with its reason: a payload that
    does not decode, an op the job does not know, or values that do not fit (those are applied
    with null too)."""
    op = F.col(f"{tf.ENVELOPE}.op")
    reason = F.when(
        F.col(tf.UNDECODABLE), F.lit(f"payload does not decode with schema id {schema_id}")
    ).when(~op.isin(*tf.APPLY_OPS, "m"), F.concat(F.lit("unknown op "), op))
    if unfit is not None:
        precision, scale = config.variable_decimal
        reason = reason.when(
            F.size(unfit) > 0,
            F.concat(
                F.lit(
                    f"value does not fit decimal({precision},{scale}); applied as null in "
                    "column(s) "
                ),
                F.array_join(unfit, ", "),
            ),
        )
    rows = decoded.withColumn(_DEAD_REASON, reason).where(F.col(_DEAD_REASON).isNotNull())
    return tf.dead_letters(rows, F.col(_DEAD_REASON), batch_id)


def _routed_key_column(config: ApplyConfig) -> tuple[str, Column]:
    """The key field of a routed topic (bridge.routing) and its value for each record, from
    the record's source table as ``pgbridge run`` computes it: the table's own topic name, or
    ``key.field.regex`` (Java's, as Debezium applies it) replaced in that name."""
    name, regex, replacement = config.routed_key
    own = F.regexp_replace(
        F.concat_ws(
            ".", F.lit(config.topic_prefix), F.col(tf.SOURCE_SCHEMA), F.col(tf.SOURCE_TABLE)
        ),
        r"[^A-Za-z0-9._\-]",
        "_",
    )
    if regex is None or replacement is None:
        return name, own
    whole = f"^(?:{regex})$"
    return name, F.when(own.rlike(whole), F.regexp_replace(own, whole, replacement)).otherwise(own)


def _table_batch(
    topic: str,
    table_groups: list[_Group],
    batch_id: int,
    newest_only: bool = False,
    routed: tuple[str, Column] | None = None,
) -> tuple[TableBatch, list[DataFrame]]:
    """One table's groups -> its TableBatch, and the dead letters of records it cannot use.
    ``newest_only``: the columns are the newest version's (older versions' other columns are
    left out: dropped in the source), not all versions'. ``routed``: a key column the values
    do not carry (a routed topic's), and how to compute it."""
    newest = max(table_groups, key=lambda g: g.schema_id)
    renames = newest.shape.renames()
    keys = newest.key_columns or next((g.key_columns for g in table_groups if g.key_columns), ())
    # Only a truncate has a null key in a keyed table: any other change with a null key, and
    # no keyed record in the batch, is from a table without key columns (a multiset).
    keyless = not keys
    frames: list[DataFrame] = []
    shapes: list[T.StructType] = []
    dead: list[DataFrame] = []
    for group in table_groups:
        # Older versions' records name a renamed column as it was: under its name now, here.
        shape = group.shape.renamed(renames) if renames and group is not newest else group.shape
        if keyless:
            dead.append(
                tf.dead_letters(
                    tf.images_without_before(group.decoded),
                    "update or delete without the old row in a table without key columns: "
                    "nothing to match it to (REPLICA IDENTITY FULL sends it)",
                    batch_id,
                )
            )
            changes = tf.envelope_to_images(group.decoded, shape)
        else:
            changes = tf.envelope_to_changes(group.decoded, shape)
        computed: list[str] = []
        if routed is not None and routed[0] in keys and routed[0] not in changes.columns:
            changes = changes.withColumn(routed[0], routed[1])
            computed.append(routed[0])
        frames.append(changes)
        shapes.append(
            T.StructType([changes.schema[c] for c in [*(c.name for c in shape.columns), *computed]])
        )
    order = sorted(range(len(table_groups)), key=lambda i: -table_groups[i].schema_id)
    columns = _union_columns([shapes[i] for i in (order[:1] if newest_only else order)])
    raw = _raw(table_groups[0].decoded)
    for group in table_groups[1:]:
        raw = raw.unionByName(_raw(group.decoded))
    missing = newest.shape.missing_values()
    literals = {
        name: missing_literal(reader, newest.shape.decimal) for name, reader in missing.items()
    }
    table = TableBatch(
        topic=topic,
        changes=tf.conform(frames, columns, literals),
        columns=columns,
        key_columns=keys,
        raw=raw,
        keyless=keyless,
        renames=renames,
        missing=missing,
        pgbridge_positions=all(
            tf.has_pgbridge_positions(_source_type(g.decoded)) for g in table_groups
        ),
    )
    return table, dead


def _source_type(decoded: DataFrame) -> T.DataType:
    envelope: Any = decoded.schema[tf.ENVELOPE].dataType
    return envelope["source"].dataType  # type: ignore[no-any-return]


def _key_columns(schemas: SchemaCache, topic: str, key_id: Any, min_key_id: Any) -> tuple[str, ...]:
    """The replica-identity columns, from the key schema (subject ``<topic>-key``) in the batch."""
    if key_id is None:
        return ()
    if min_key_id is not None and min_key_id != key_id:
        # A changed replica identity: the newest key schema (highest id) describes the table now.
        logger.warning(
            "%s: key schema ids %s..%s in one batch; using the newest", topic, min_key_id, key_id
        )
    names = schemas.field_names(int(key_id))
    if names is None:
        raise TableApplyError(topic, f"key schema id {key_id} is unknown or not a record")
    return names


def _union_columns(shapes: list[T.StructType]) -> T.StructType:
    """The newest version's columns, then columns only older versions have (kept, not lost)."""
    fields: list[T.StructField] = []
    seen: set[str] = set()
    for shape in shapes:
        for f in shape.fields:
            if f.name not in seen:
                seen.add(f.name)
                fields.append(T.StructField(f.name, f.dataType, True))
    return T.StructType(fields)
