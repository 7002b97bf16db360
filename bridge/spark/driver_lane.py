"""Which tables of a batch are decoded in the driver (bridge.spark.driver_decode), and their
records, collected in one Spark job for all of them.

A topic qualifies when what Spark's path would do with it is known to come to the same here: one
value schema version in the batch, keyed records of one key schema (or a table without key
columns, none of them a map, array or struct), no history table, and a Delta table this job
already wrote with these columns and types (no creation, evolution, rename or backfill to make)
whose batch delta-rs writes anyway (at most ``driver_write_rows`` records, a table under 32 MiB
on a local path: bridge.spark.driver_merge). Its records are then decoded here; a topic that
turns out otherwise (:class:`~bridge.spark.driver_decode.NotForDriver`, records of another
source table, a routed topic) goes back to Spark's path in the same batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bridge.spark import transforms as tf
from bridge.spark.arrow_frame import frame_of
from bridge.spark.config import ApplyConfig, delta_table
from bridge.spark.decode import BatchGroups, SchemaCache, count_groups
from bridge.spark.driver_changes import summarize
from bridge.spark.driver_decode import DriverDecoder, NotForDriver, RawChange
from bridge.spark.driver_multiset import COMPARED_NORMALISED
from bridge.spark.errors import RegistryUnavailableError

__all__ = [
    "Candidate",
    "DriverTable",
    "collect_small_batch",
    "driver_tables",
    "drives",
    "groups_of",
    "topic_candidate",
]

logger = logging.getLogger(__name__)

#: Key column types whose equality in Python is not Spark's (NaN, -0.0): Spark's path.
_INEXACT_KEYS = (T.FloatType, T.DoubleType)

#: Records of one batch decoded in the driver at most, over all its tables (smallest tables
#: first; the others take Spark's path). The batch bound is sized from the JVM's heap, and a
#: decoded change is about a kilobyte of Python objects: this keeps the driver's Python process
#: to a few hundred MiB whatever the batch holds.
MAX_DRIVER_RECORDS = 200_000


#: A batch of at most this many records is collected whole (:func:`collect_small_batch`), its
#: keys and values of at most :data:`COLLECTED_VALUE_BYTES` each: 128 MiB at the very most in
#: the driver, a few MiB for ordinary rows. A larger record is collected without its key and
#: value (its topic's records are read again if the driver decodes it); a larger batch is
#: counted by Spark.
COLLECTED_RECORDS = 16_384
COLLECTED_VALUE_BYTES = 4096
_HAS_VALUE = "_pgbridge_has_value"
_OVERSIZE = "_pgbridge_oversize"


def collect_small_batch(framed: DataFrame, limit: int = COLLECTED_RECORDS) -> Any | None:
    """The whole framed batch as Arrow when it holds at most ``limit`` records, else None.

    Why: a batch of many small tables was read from Kafka twice, once by Spark to count its
    groups (decode.batch_groups: a shuffle over every topic-partition) and once to collect the
    driver's records; collected whole, it is read once and counted here (:func:`groups_of`;
    measured over 200 tables at 1,000 changes/s: batches of 4.6 -> 3.0 s). A larger batch
    stops the read at ``limit + 1`` records and is counted by Spark after all.
    """
    value, key = F.col("value"), F.col("key")
    oversize = F.coalesce(F.length(key), F.lit(0)) > COLLECTED_VALUE_BYTES
    oversize = oversize | (F.coalesce(F.length(value), F.lit(0)) > COLLECTED_VALUE_BYTES)
    records = (
        framed.select(
            *[c for c in tf.KAFKA_META if c not in ("key", "value")],
            F.when(~oversize, key).alias("key"),
            F.when(~oversize, value).alias("value"),
            value.isNotNull().alias(_HAS_VALUE),
            oversize.alias(_OVERSIZE),
            tf.KEY_SCHEMA_ID,
            tf.VALUE_SCHEMA_ID,
            tf.FRAMING_ERROR,
        )
        .limit(limit + 1)
        .toArrow()
    )
    return records if records.num_rows <= limit else None


def _oversize_topics(records: Any) -> set[str]:
    """Topics of a collected batch with a record collected without its key and value."""
    return {str(t) for t in records.filter(records.column(_OVERSIZE)).column("topic").to_pylist()}


def groups_of(records: Any) -> BatchGroups:
    """:func:`bridge.spark.decode.batch_groups` of a batch collected whole, counted by Arrow
    (:func:`~bridge.spark.decode.count_groups`)."""
    counted = count_groups(records, records.column(_HAS_VALUE))
    groups = [{"topic": key[0], **g} for key, g in counted.items() if not g["unframed"]]
    return BatchGroups(groups, len(groups) < len(counted))


@dataclass(slots=True)
class DriverTable:
    """One topic's changes of a batch, decoded in the driver."""

    topic: str
    path: str
    columns: T.StructType  # the row's columns (PostgreSQL names, Spark types)
    key_columns: tuple[str, ...]
    changes: list[RawChange]
    summary: dict[str, Any]
    raw: Any  # pyarrow.Table: the Kafka records behind the changes (for dead letters)
    pgbridge_positions: bool = True  # checked by the schema (bridge.spark.driver_decode)

    @property
    def name(self) -> str:
        return self.topic

    def raw_frame(self, spark: Any) -> DataFrame:
        frame: DataFrame = frame_of(spark, self.raw)
        return frame


@dataclass(frozen=True, slots=True)
class Candidate:
    topic: str
    path: str
    schema_id: int
    columns: T.StructType
    key_columns: tuple[str, ...]


def driver_tables(
    framed: DataFrame,
    groups: BatchGroups,
    config: ApplyConfig,
    schemas: SchemaCache,
    decoder: DriverDecoder,
    writable_path: Callable[[str, frozenset[tuple[str, str]], int], str | None],
    collected: Any | None = None,
) -> list[DriverTable]:
    """The batch's topics decoded in the driver. ``writable_path(topic, columns, records)``:
    the path of the topic's Delta table if this job wrote it before with these (name, type)
    columns and delta-rs may write that many records to it, else None. ``collected``: the
    batch as :func:`collect_small_batch` collected it, if it did (no Spark job then)."""
    if not drives(config):
        return []
    candidates = _candidates(groups, config, schemas, decoder, writable_path)
    if not candidates:
        return []
    records = _records_of(framed, list(candidates), collected)
    tables: list[DriverTable] = []
    topics = records.column("topic").to_pylist()
    rows_of: dict[str, list[int]] = {}
    for i, topic in enumerate(topics):
        rows_of.setdefault(topic, []).append(i)
    for topic, candidate in candidates.items():
        raw = records.take(rows_of.get(topic, []))
        try:
            table = _decoded(candidate, raw, config, decoder)
        except Exception as exc:  # NotForDriver, or anything unforeseen: Spark's path decides
            logger.debug("%s: decoded by Spark (%s: %s)", topic, type(exc).__name__, exc)
            continue
        if table is not None:
            tables.append(table)
    return tables


def _records_of(framed: DataFrame, topics: list[str], collected: Any | None) -> Any:
    """The framed records holding a value of ``topics``, as Arrow: from the batch collected
    whole where it holds them in full, else in one Spark job (a topic with a record too large
    to have been collected, or a batch not collected)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    read = topics
    if collected is not None:
        read = sorted(_oversize_topics(collected) & set(topics))
        inline = [t for t in topics if t not in read]
        wanted = pc.and_(
            pc.is_in(collected.column("topic"), value_set=pa.array(inline, pa.string())),
            pc.and_(pc.is_null(collected.column(tf.FRAMING_ERROR)), collected.column(_HAS_VALUE)),
        )
        parts.append(collected.filter(wanted).select([*tf.KAFKA_META, tf.VALUE_SCHEMA_ID]))
    if read:
        parts.append(
            framed.where(
                F.col("topic").isin(*read)
                & F.col(tf.FRAMING_ERROR).isNull()
                & F.col("value").isNotNull()
            )
            .select(*tf.KAFKA_META, tf.VALUE_SCHEMA_ID)
            .toArrow()
        )
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="default")


def drives(config: ApplyConfig) -> bool:
    """Whether the job decodes tables in the driver at all."""
    return config.driver_decode and config.driver_write_rows > 0 and not config.history


def _candidates(
    groups: BatchGroups,
    config: ApplyConfig,
    schemas: SchemaCache,
    decoder: DriverDecoder,
    writable_path: Callable[[str, frozenset[tuple[str, str]], int], str | None],
) -> dict[str, Candidate]:
    per_topic: dict[str, list[Any]] = {}
    for row in groups.groups:
        per_topic.setdefault(str(row["topic"]), []).append(row)
    out: dict[str, Candidate] = {}
    budget = MAX_DRIVER_RECORDS
    for topic, rows in sorted(per_topic.items(), key=lambda item: _records(item[1])):
        if _records(rows) > budget:
            break  # this and every larger table: Spark's path
        try:
            candidate = topic_candidate(topic, rows, config, schemas, decoder, writable_path)
        except RegistryUnavailableError:
            raise  # the batch is retried, as Spark's path would
        except Exception as exc:  # a schema this module cannot read: Spark's path judges it
            logger.debug("%s: decoded by Spark (%s: %s)", topic, type(exc).__name__, exc)
            continue
        if candidate is not None:
            out[topic] = candidate
            budget -= _records(rows)
    return out


def _records(rows: list[Any]) -> int:
    return sum(int(row["records"]) for row in rows)


def topic_candidate(
    topic: str,
    rows: list[Any],
    config: ApplyConfig,
    schemas: SchemaCache,
    decoder: DriverDecoder,
    writable_path: Callable[[str, frozenset[tuple[str, str]], int], str | None],
) -> Candidate | None:
    """The topic's batch as a candidate for the driver, or None."""
    if len(rows) != 1 or not config.is_table_topic(topic):
        return None
    row = rows[0]
    key_id = row["key_id"]
    keyless = key_id is None and row["min_key_id"] is None  # a multiset (bridge.spark.multiset)
    if not keyless and (key_id is None or key_id != row["min_key_id"]):
        return None
    schema_id = int(row[tf.VALUE_SCHEMA_ID])
    schema_json = schemas.schema_json(schema_id)
    if schema_json is None:
        return None
    prepared = decoder.prepare(schema_id, schema_json, config.variable_decimal)
    key_fields: tuple[str, ...] | None = () if keyless else schemas.field_names(int(key_id))
    if prepared is None or key_fields is None or not (keyless or key_fields):
        return None
    columns = decoder.columns(schema_id)
    if keyless and any(isinstance(c.spark_type, COMPARED_NORMALISED) for c in columns):
        return None  # Spark's multiset compares these in a normalised form
    by_field = {c.field: c for c in columns}
    if any(k not in by_field or isinstance(by_field[k].spark_type, _INEXACT_KEYS)
           for k in key_fields):  # fmt: skip
        return None
    names = [c.name for c in columns]
    if any(n.startswith("_pgbridge_") for n in names) or len({n.lower() for n in names}) < len(
        names
    ):
        return None  # Spark's path dead-letters these
    typed = frozenset((c.name.lower(), c.spark_type.simpleString()) for c in columns)
    path = writable_path(topic, typed, int(row["records"]))
    if path is None:
        return None
    return Candidate(
        topic,
        path,
        schema_id,
        T.StructType([T.StructField(c.name, c.spark_type, True) for c in columns]),
        tuple(by_field[k].name for k in key_fields),
    )


def _decoded(
    candidate: Candidate, raw: Any, config: ApplyConfig, decoder: DriverDecoder
) -> DriverTable | None:
    """The candidate's table, or None when its records hold no change (logical messages)."""
    changes = decoder.decode(
        candidate.schema_id,
        raw.column("value").to_pylist(),
        raw.column("partition").to_pylist(),
        raw.column("offset").to_pylist(),
        with_before=not candidate.key_columns,
    )
    summary = summarize(changes)
    if summary is None:
        return None
    identity = (summary["schema"], summary["table"])
    if None in identity or identity != (summary["schema_max"], summary["table_max"]):
        raise NotForDriver("records without a source table, or of several")
    schema, name = str(identity[0]), str(identity[1])
    if delta_table(config.topic_prefix, candidate.topic, schema, name) != (schema, name):
        raise NotForDriver("a routed topic")
    if config.table_path(schema, name) != candidate.path:
        raise NotForDriver("records of another table than the topic's before")
    return DriverTable(
        candidate.topic,
        candidate.path,
        candidate.columns,
        candidate.key_columns,
        changes,
        summary,
        raw,
    )
