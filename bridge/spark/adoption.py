"""Tables an earlier run of the job created, taken over from their Delta logs without Spark.

Why: a job learns a table's columns and fences when it first applies it. Through Spark that
costs the table's first batch after every start the full path (Spark decodes and summarises
the batch, ``ensure_table`` reads the table's schema, ``read_fences`` its history: Spark jobs
per table), so a restart over hundreds of tables spent its first batch on them. A table on a
local path is read here instead, by delta-rs from its log (milliseconds), and from then on
takes the paths of a table the job wrote itself (bridge.spark.driver_lane, the task lane).

Only a table whose log shows nothing left to do is taken over: nothing half-done
(``PENDING_BACKFILL_PROPERTY``, a column under ``RETYPED_PREFIX``) that Spark's
``ensure_table`` finishes at the first batch. A batch with columns or types the table lacks
takes Spark's path as before (the applier compares them with what is taken over here).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

from bridge.spark import transforms as tf
from bridge.spark.config import ApplyConfig, delta_table
from bridge.spark.decode import SAMPLE, SchemaCache
from bridge.spark.driver_decode import DriverDecoder
from bridge.spark.driver_merge import is_local_path, open_table
from bridge.spark.fences import Fences, logged_fences
from bridge.spark.merge import PENDING_BACKFILL_PROPERTY, RETYPED_PREFIX

__all__ = ["AdoptedTable", "adopt_table", "group_field", "sample_path", "table_columns"]

logger = logging.getLogger(__name__)

Columns = frozenset[tuple[str, str]]  # (lower-case name, Spark type) of a table's columns


@dataclass(frozen=True, slots=True)
class AdoptedTable:
    table: Any  # the delta-rs table, at the log's newest version
    columns: Columns  # its source columns (not pgbridge's metadata columns)
    fences: Fences  # as its newest commit holding them left them


def table_columns(schema: T.StructType) -> Columns:
    """The (lower-case name, Spark type) of a Delta schema's source columns, in the form the
    applier compares a batch's columns in."""
    return frozenset(
        (f.name.lower(), f.dataType.simpleString())
        for f in schema.fields
        if not f.name.startswith("_pgbridge_")
    )


def adopt_table(path: str) -> AdoptedTable | None:
    """The Delta table at ``path`` as its log states it, or None where Spark's path must see
    it first: not local, no table yet (or none delta-rs opens), or work left half done."""
    if not is_local_path(path):
        return None
    try:
        table = open_table(path)
        if PENDING_BACKFILL_PROPERTY in table.metadata().configuration:
            return None
        schema = T.StructType.fromJson(json.loads(table.schema().to_json()))
        if any(f.name.startswith(RETYPED_PREFIX) for f in schema.fields):
            return None
        return AdoptedTable(table, table_columns(schema), logged_fences(table))
    except Exception as exc:  # no table there, or a log delta-rs does not read: Spark's path
        logger.debug("%s: not taken over from its log (%s: %s)", path, type(exc).__name__, exc)
        return None


def sample_path(
    topic: str,
    rows: list[Any],
    config: ApplyConfig,
    schemas: SchemaCache,
    decoder: DriverDecoder,
) -> str | None:
    """The path of the table of ``topic``'s source table, from the sample record of its
    batch's one group (bridge.spark.decode.batch_groups), or None: several value schemas, a
    record the driver does not decode, a routed topic (its table is not the source table's)."""
    if len(rows) != 1:
        return None
    row = rows[0]
    sample, schema_id = group_field(row, SAMPLE), group_field(row, tf.VALUE_SCHEMA_ID)
    if sample is None or schema_id is None:
        return None
    try:
        schema_json = schemas.schema_json(int(schema_id))
        if schema_json is None:
            return None
        if decoder.prepare(int(schema_id), schema_json, config.variable_decimal) is None:
            return None
        first = decoder.decode(int(schema_id), [bytes(sample)], [0], [0])
    except Exception as exc:  # the registry, or a record Spark's path judges
        logger.debug("%s: no table from its sample (%s: %s)", topic, type(exc).__name__, exc)
        return None
    if not first:
        return None
    schema, name = first[0].schema, first[0].table
    if delta_table(config.topic_prefix, topic, schema, name) != (schema, name):
        return None
    return config.table_path(schema, name)


def group_field(row: Any, name: str) -> Any:
    """A field of a Spark Row or a dict (the driver's counted groups), None if absent."""
    try:
        return row[name]
    except (KeyError, ValueError):
        return None
