"""A large keyed table's batch of new keys, decoded and written by Spark's Python tasks.

Why: a snapshot-sized batch spent most of its time in Spark's ``from_avro``, the columnar cache
and Spark's Parquet writer: 0.11x the raw read for a snapshot topic (docs/measurements.md).
Here one ``mapInArrow`` job over the batch's Kafka records of every such topic decodes each
task's payloads in C (:mod:`bridge.spark.avro_columns`), batch by batch, summarises them per
Kafka partition (the same figures as :mod:`bridge.spark.summary`), keeps each key's last change
and writes the rows as Parquet files of the table (:mod:`bridge.spark.executor_files`). The
driver then decides as Spark's path would: a table's first load (created empty for it: its
updates and deletes fold into the rows it ends with), or a batch of new keys
(:func:`bridge.spark.write_choice.new_keys_only`), has its files committed in one Delta commit
carrying the batch's fences. A batch of updates and deletes of a table small enough for
delta-rs (``LaneSpec.merge``) is folded by the tasks to each key's last change, which the
driver MERGEs as it MERGEs a table it decoded itself (:class:`LaneMerge`; Spark's path took
it before: 0.056x the raw read on the bench's 4-table mix). Anything else (a truncate,
unchanged TOAST, a replay, a payload the plan does not decode, a Kafka partition split over two
tasks) deletes the files and the topic takes Spark's path in the same batch. Nothing is
visible before the commit, and the commit is the fences' too. A topic the lane took goes
through :func:`run_lane_first` in the next batch: the same job counts the batch's groups, so
the batch is read from Kafka once.

A table qualifies as a driver-lane one does (:mod:`bridge.spark.driver_lane`: one schema
version, keyed, plain column types, delta-rs able to write it), with more records than the
driver lane takes: a table this job wrote before with these columns and a floor in its fences
(appends need one), or one that does not exist yet. A table whose batch was not an append
takes Spark's path from then on.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.spark import python_worker
from bridge.spark import transforms as tf
from bridge.spark.avro_columns import PayloadError, Plan, compile_plan, decode
from bridge.spark.decode import SAMPLE, GroupKey, add_group, count_groups
from bridge.spark.executor_files import FileLayout, write_file
from bridge.spark.fences import Fences
from bridge.spark.kafka_ranges import KafkaRange, read_ranges
from bridge.spark.summary import SUMMARY_PARTITION

__all__ = [
    "LANE_OUTPUT",
    "DirectRead",
    "Expected",
    "LaneCommit",
    "LaneMerge",
    "LaneSpec",
    "LaneTopic",
    "NotAnAppend",
    "file_rows",
    "folded_rows",
    "lane_plan",
    "read_folded",
    "run_lane",
    "sweep_folded",
    "task_result",
    "task_rows",
]

logger = logging.getLogger(__name__)

#: Rows of a task: per lane topic (``lane``) its file (if it wrote rows) and its summary per
#: Kafka partition (JSON), or why the batch is not a lane append (``refused``); per group of
#: the batch (``group``, :func:`run_lane_first` only) its counts (JSON) and a sample value.
LANE_OUTPUT = (
    "kind string, topic string, path string, size long, records long, parts string, "
    "refused string, sample binary, folded string"
)

#: The most bytes of folded rows one task hands the driver for one topic's MERGE
#: (:func:`folded_rows`); a task holding more refuses the topic (Spark's path applies it).
#: A batch is bounded by records (bridge.spark.resources), not bytes: this bounds the driver's
#: memory where rows are wide.
FOLDED_MAX_BYTES = 256 << 20

#: Where a task leaves its folded rows for the driver (an Arrow IPC file per task and topic),
#: under the table's root: a directory Delta's readers and VACUUM never look into (``_``). A
#: file, not a row of the job's result: 40 MB of rows through Spark's collect cost a 444,825-
#: record batch a second more than the same rows written and memory-mapped (measured on
#: bench/spark_apply_bench.py's mix). The driver removes each file once read; what a crash
#: leaves is removed when a job next folds the table (:func:`sweep_folded`).
FOLDED_DIR = "_pgbridge_folded"

_OP, _TS, _SCHEMA, _TABLE, _TOAST = "op", "ts_ms", "schema", "table", "toast"
_APPENDED_OPS = ("c", "r")
_FIRST_LOAD_OPS = ("c", "r", "u", "d")
_SKIPPED_OPS = ("m",)  # logical messages: not changes, as in Spark's path


@dataclass(frozen=True, slots=True)
class LaneSpec:
    """What a task needs: the plan, the row columns (Avro field -> PostgreSQL name), the key
    columns (PostgreSQL names), the table's files' layout and fences, whether the batch is
    the table's first load (the table was created empty for it: every change folds into the
    rows it holds after the batch, updates and deletes too), and whether the driver may MERGE
    a batch of updates and deletes into the table (``merge``: a task then folds them to each
    key's last change and hands those rows to the driver, :func:`folded_rows`)."""

    plan: Plan
    columns: tuple[tuple[str, str], ...]
    keys: tuple[str, ...]
    layout: FileLayout
    fences: Fences
    first_load: bool = False
    merge: bool = False


def before_key(name: str) -> str:
    """The output column of key column ``name`` in a change's old row (a delete's key)."""
    return f"_pgbridge_before_{name}"


def lane_plan(
    schema_json: str, columns: Sequence[tuple[str, str]], keys: Sequence[str] = ()
) -> Plan | None:
    """The plan capturing a change's row (``after``), the key columns ``keys`` (PostgreSQL
    names) of its old row, op, position, commit time, source table and unchanged TOAST columns;
    None where one of them is not decoded exactly here."""
    schema = json.loads(schema_json)
    captures: dict[tuple[str, ...], str] = {("after", field): name for field, name in columns}
    captures.update({("before", field): before_key(name) for field, name in columns
                     if name in keys})  # fmt: skip
    captures.update(
        {
            ("op",): _OP,
            ("source", "commit_lsn"): tf.COMMIT_LSN,
            ("source", "seq"): tf.SEQ,
            ("source", "ts_ms"): _TS,
            ("source", "schema"): _SCHEMA,
            ("source", "table"): _TABLE,
        }
    )
    fields = {f.get("name") for f in schema.get("fields", [])}
    if "unchanged_toast_columns" in fields:
        captures[("unchanged_toast_columns",)] = _TOAST
    return compile_plan(schema, captures)


class NotAnAppend(Exception):
    """The task's records are not a batch of new keys: Spark's path applies the topic."""


def task_rows(records: Any, spec: LaneSpec) -> tuple[Any, list[dict[str, Any]]]:
    """One task's Kafka records (``value``, ``partition``, ``offset``; Arrow) -> (the rows an
    append of them writes, in the table's logical columns, and its summary parts per Kafka
    partition). :class:`NotAnAppend` where they hold anything but inserts and snapshot reads
    (a first load: anything but changes of rows), or unchanged TOAST;
    :class:`~bridge.spark.avro_columns.PayloadError` where a payload does not decode."""
    chunk = decoded_chunk(records, spec)
    return appended_rows([chunk.rows], spec), merge_parts([chunk.parts])


@dataclass(frozen=True, slots=True)
class DecodedChunk:
    """Some of a task's records of one topic, decoded: the columns its rows need, and their
    summary parts (mergeable: :func:`merge_parts`). The payloads are not kept."""

    rows: Any
    parts: list[dict[str, Any]]


def decoded_chunk(records: Any, spec: LaneSpec) -> DecodedChunk:
    """Decode and check ``records`` (one Arrow batch's worth: a task decodes batch by batch, so
    it never holds its payloads and their rows at once)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    decoded = decode(spec.plan, records.column("value"))
    decoded = decoded.append_column(tf.PARTITION, records.column("partition").cast(pa.int32()))
    decoded = decoded.append_column(tf.OFFSET, records.column("offset").cast(pa.int64()))
    skipped = pc.is_in(decoded.column(_OP), pa.array(_SKIPPED_OPS))
    if pc.any(skipped).as_py():  # (each filter copies every column: only when needed)
        decoded = decoded.filter(pc.invert(skipped))
    ops = decoded.column(_OP)
    allowed = _FIRST_LOAD_OPS if spec.first_load or spec.merge else _APPENDED_OPS
    if len(ops) and not pc.all(pc.is_in(ops, value_set=pa.array(allowed))).as_py():
        raise NotAnAppend(f"changes other than {', '.join(allowed)}")
    if _TOAST in decoded.column_names and pc.max(decoded.column(_TOAST)).as_py():
        raise NotAnAppend("unchanged TOAST columns")
    parts = _summary_parts(decoded)
    kept = [c for c in decoded.column_names if c not in (_SCHEMA, _TABLE, _TOAST)]
    return DecodedChunk(decoded.select(kept), parts)


def appended_rows(chunks: Sequence[Any], spec: LaneSpec) -> Any:
    """A task's decoded rows of one topic -> the rows its append writes: fenced, each key's
    last change (a first load: without the keys it ends deleted), in the table's columns."""
    import pyarrow.compute as pc

    rows, deleting = _last_changes(chunks, spec)
    if deleting:
        rows = rows.filter(pc.not_equal(rows.column(_OP), "d"))
    return _table_columns(rows, spec)


def folded_rows(chunks: Sequence[Any], spec: LaneSpec) -> Any:
    """A task's decoded rows of one topic -> what the driver's MERGE takes from it: fenced,
    each key's last change (a delete keyed by its old row), in the table's columns, with its
    kind (``transforms.OP``): ``transforms.last_change_per_key``'s rows."""
    rows, _ = _last_changes(chunks, spec)
    return _table_columns(rows, spec).append_column(tf.OP, rows.column(_OP))


def _last_changes(chunks: Sequence[Any], spec: LaneSpec) -> tuple[Any, bool]:
    """The chunks' admitted rows, each key's last change; and whether deletes are among them
    (keyed by their old row's key columns)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = pa.concat_tables(chunks) if len(chunks) != 1 else chunks[0]
    rows = spec.fences.admitted_rows(rows, _OP)
    # A delete (rare in a first load: a snapshot has none) takes its key from the old row;
    # without one, nothing is copied. An append's rows are inserts only (decoded_chunk).
    deletes = pc.equal(rows.column(_OP), "d") if spec.first_load or spec.merge else None
    deleting = deletes is not None and bool(pc.any(deletes).as_py())
    if deleting:
        for key in spec.keys:
            at = rows.column_names.index(key)
            keyed = pc.if_else(deletes, rows.column(before_key(key)), rows.column(key))
            rows = rows.set_column(at, key, keyed)
    return _last_per_key(rows, spec.keys), deleting


def _table_columns(rows: Any, spec: LaneSpec) -> Any:
    """The table's columns of ``rows``: the row's, its position and its commit time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    commit_ts = pc.multiply(rows.column(_TS), 1000).cast(pa.timestamp("us", tz="UTC"))
    names = [name for _, name in spec.columns]
    return rows.select([*names, tf.COMMIT_LSN, tf.SEQ]).append_column(tf.COMMIT_TS, commit_ts)


def merge_parts(chunks: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Summary parts of several chunks of a task -> one per Kafka partition."""
    merged: dict[int, dict[str, Any]] = {}

    def pick(function: Any, *values: Any) -> Any:
        present = [v for v in values if v is not None]
        return function(present) if present else None

    for parts in chunks:
        for part in parts:
            number = part[SUMMARY_PARTITION]
            have = merged.get(number)
            if have is None:
                merged[number] = dict(part)
                continue
            for name in ("n", "rows", "removals", "creates", "reads"):
                have[name] += part[name]
            for name in ("reads_lsn", "schema_max", "table_max", "newest_ms", "max_offset"):
                have[name] = pick(max, have[name], part[name])
            for name in ("lowest_lsn", "schema", "table", "oldest_ms"):
                have[name] = pick(min, have[name], part[name])
            have["last"] = pick(max, have["last"], part["last"])
    return list(merged.values())


def _summary_parts(decoded: Any) -> list[dict[str, Any]]:
    """:func:`bridge.spark.summary.summary_aggregates` per Kafka partition, for changes of
    rows (no truncate, no TOAST: checked before). Grouped, not filtered per partition: a
    filter copies every column, once per partition a task holds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ops, lsn = decoded.column(_OP), decoded.column(tf.COMMIT_LSN)
    reads = pc.equal(ops, "r")
    figures = pa.table(
        {
            "p": decoded.column(tf.PARTITION),
            "lsn": lsn,
            "read_lsn": pc.if_else(reads, lsn, pa.scalar(None, lsn.type)),
            "removal": pc.cast(pc.is_in(ops, pa.array(["u", "d"])), pa.int64()),
            "create": pc.cast(pc.equal(ops, "c"), pa.int64()),
            "read": pc.cast(reads, pa.int64()),
            "schema": decoded.column(_SCHEMA),
            "table": decoded.column(_TABLE),
            "ts": decoded.column(_TS),
            "offset": decoded.column(tf.OFFSET),
        }
    )
    grouped = figures.group_by("p").aggregate(
        [
            ("p", "count"), ("lsn", "max"), ("lsn", "min"), ("read_lsn", "max"),
            ("removal", "sum"), ("create", "sum"), ("read", "sum"), ("schema", "min_max"),
            ("table", "min_max"), ("ts", "min_max"), ("offset", "max"),
        ]
    )  # fmt: skip
    # The last change of a partition: the highest sequence number at its highest commit LSN.
    top_of_row = pc.take(
        grouped.column("lsn_max"), pc.index_in(figures.column("p"), grouped.column("p"))
    )
    at_top = pc.if_else(
        pc.equal(lsn, top_of_row),
        decoded.column(tf.SEQ),
        pa.scalar(None, decoded.column(tf.SEQ).type),
    )
    top_seq = dict(
        zip(
            *pa.table({"p": figures.column("p"), "seq": at_top})
            .group_by("p")
            .aggregate([("seq", "max")])
            .select(["p", "seq_max"])
            .to_pydict()
            .values(),
            strict=True,
        )
    )
    parts = []
    for row in grouped.to_pylist():
        parts.append(
            {
                SUMMARY_PARTITION: int(row["p"]),
                "n": row["p_count"],
                "rows": row["p_count"],
                "removals": row["removal_sum"],
                "creates": row["create_sum"],
                "reads": row["read_sum"],
                "reads_lsn": row["read_lsn_max"],
                "lowest_lsn": row["lsn_min"],
                "trunc": None,
                "toast": False,
                "schema": row["schema_min_max"]["min"],
                "schema_max": row["schema_min_max"]["max"],
                "table": row["table_min_max"]["min"],
                "table_max": row["table_min_max"]["max"],
                "oldest_ms": row["ts_min_max"]["min"],
                "newest_ms": row["ts_min_max"]["max"],
                "last": [row["lsn_max"], top_seq[row["p"]]],
                "max_offset": row["offset_max"],
            }
        )
    return parts


def _last_per_key(rows: Any, keys: Sequence[str]) -> Any:
    """Each key's last change by position (then offset), as ``last_change_per_key`` keeps it:
    a record delivered twice in one batch is appended once. In the rows' order (or, where
    their positions are out of order, in position order)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if rows.num_rows == 0:
        return rows
    if len(keys) == 1 and _strictly_increasing(rows.column(keys[0])):
        return rows  # each key once: a snapshot's keys come in order, per Kafka partition
    if not _in_position_order(rows):
        # Several Kafka partitions, or a resend: order the rows once (the positions and
        # offsets only are sorted; the rows are taken once, below).
        rows = rows.take(
            pc.sort_indices(
                rows.select([tf.COMMIT_LSN, tf.SEQ, tf.OFFSET]),
                sort_keys=[(c, "ascending") for c in (tf.COMMIT_LSN, tf.SEQ, tf.OFFSET)],
            )
        )
    index = "_pgbridge_lane_row"
    numbered = rows.select(list(keys)).append_column(index, pa.array(np.arange(rows.num_rows)))
    last = numbered.group_by(list(keys), use_threads=False).aggregate([(index, "max")])
    if last.num_rows == rows.num_rows:
        return rows  # no key repeats
    return rows.take(np.sort(last.column(f"{index}_max").to_numpy()))


def _in_position_order(rows: Any) -> bool:
    """Whether ``rows`` already come in (commit LSN, sequence, offset) order, as one Kafka
    partition's records do unless a crash resent some: then no sort is needed. A scan of
    three integer columns; ``False`` where one holds nulls (the sort then places them)."""
    import numpy as np

    columns = [rows.column(c) for c in (tf.COMMIT_LSN, tf.SEQ, tf.OFFSET)]
    if any(c.null_count for c in columns):
        return False
    lsn, seq, offset = (c.to_numpy() for c in columns)
    same_lsn = lsn[1:] == lsn[:-1]
    same_seq = same_lsn & (seq[1:] == seq[:-1])
    in_order = (
        (lsn[1:] > lsn[:-1])
        | (same_lsn & (seq[1:] > seq[:-1]))
        | (same_seq & (offset[1:] >= offset[:-1]))
    )
    return bool(np.all(in_order))


def _strictly_increasing(keys: Any) -> bool:
    """Whether an integer key column without nulls only ever grows: then no key repeats. A
    scan (3 ns a row) where grouping by key hashes each."""
    import numpy as np
    import pyarrow as pa

    if not pa.types.is_integer(keys.type) or keys.null_count:
        return False
    values = keys.to_numpy()
    return bool(np.all(values[1:] > values[:-1]))


#: What a task of :func:`run_lane_first` expects of a lane topic's records: its value schema
#: id and key schema id (as the batch before had them).
Expected = Mapping[str, tuple[int, int]]


def task_result(
    records: Iterator[Any], specs: Mapping[str, LaneSpec], expected: Expected | None = None
) -> Iterator[Any]:
    """The ``mapInArrow`` function: a task's record batches -> a ``lane`` row of
    :data:`LANE_OUTPUT` per topic of ``specs`` it holds. With ``expected`` (the records are
    the whole framed batch: :func:`run_lane_first`), also a ``group`` row per group of
    :func:`bridge.spark.decode.batch_groups`, and a lane topic whose records are not all of
    the expected schemas, or not all framed, is refused. Batch by batch: the payloads of one
    Arrow batch at a time are held, beside the decoded rows."""
    python_worker.settle()
    import pyarrow as pa
    import pyarrow.compute as pc

    groups: dict[GroupKey, dict[str, Any]] = {}
    chunks: dict[str, list[DecodedChunk]] = {}
    refused: dict[str, str] = {}
    for batch in records:
        everything = pa.Table.from_batches([batch])
        if expected is not None:
            count_groups(everything, pc.is_valid(everything.column("value")), groups)
        topics = everything.column("topic")
        present = pc.unique(topics).to_pylist()
        for topic in present:
            spec = specs.get(topic)
            if spec is None or topic in refused:
                continue
            try:
                mine = everything
                if len(present) > 1:  # (a filter copies every column)
                    mine = everything.filter(pc.equal(topics, topic))
                if expected is not None:
                    mine = _expected_records(mine, *expected[topic])
                chunks.setdefault(topic, []).append(decoded_chunk(mine, spec))
            except (NotAnAppend, PayloadError) as exc:
                refused[topic] = f"{type(exc).__name__}: {exc}"
                chunks.pop(topic, None)
    for (topic, _, _), group in groups.items():
        counts = {k: v for k, v in group.items() if k != SAMPLE}
        yield _output_row("group", topic, None, None, None, json.dumps(counts), None,
                          group[SAMPLE])  # fmt: skip
    for topic, why in refused.items():
        yield _output_row("lane", topic, None, None, None, None, why, None)
    for topic, decoded in chunks.items():
        spec = specs[topic]
        merged = merge_parts([c.parts for c in decoded])
        parts = json.dumps(merged)
        if spec.merge and any(part["removals"] for part in merged):
            # Updates or deletes of a table the driver may MERGE: each key's last change goes
            # to the driver in an Arrow file of FOLDED_DIR, not in a file of the table.
            folded = folded_rows([c.rows for c in decoded], spec)
            decoded.clear()
            if folded.nbytes > FOLDED_MAX_BYTES:
                why = f"{folded.nbytes >> 20} MiB of folded rows in one task: too many to merge"
                yield _output_row("lane", topic, None, None, None, None, why, None)
                continue
            yield _output_row("lane", topic, None, None, folded.num_rows, parts, None, None,
                              _write_folded(spec.layout.root, folded))  # fmt: skip
            continue
        rows = appended_rows([c.rows for c in decoded], spec)
        decoded.clear()
        file = write_file(spec.layout, iter([rows]))
        path, size, written = (file.path, file.size, file.records) if file else (None, None, None)
        yield _output_row("lane", topic, path, size, written, parts, None, None)


def _write_folded(root: str, table: Any) -> str:
    """Write a task's folded rows as an Arrow IPC file under ``root``'s :data:`FOLDED_DIR`;
    its path relative to ``root``."""
    import pyarrow as pa

    relative = f"{FOLDED_DIR}/{uuid.uuid4()}.arrow"
    target = os.path.join(root, relative)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with pa.OSFile(target, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return relative


def read_folded(root: str, relative: str) -> Any:
    """The rows :func:`_write_folded` wrote (memory-mapped), the file removed."""
    import pyarrow as pa

    path = os.path.join(root, relative)
    with pa.memory_map(path) as source:
        table = pa.ipc.open_file(source).read_all()
    os.remove(path)  # the mapping stays readable until the table is dropped
    return table


def sweep_folded(root: str) -> None:
    """Remove folded rows a task left for a driver that never read them (it crashed)."""
    folder = os.path.join(root, FOLDED_DIR)
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        try:
            os.remove(os.path.join(folder, name))
        except OSError as exc:
            logger.debug("could not remove %s: %s", name, exc)


def _output_row(
    kind: str,
    topic: str,
    path: str | None,
    size: int | None,
    records: int | None,
    parts: str | None,
    refused: str | None,
    sample: bytes | None,
    folded: str | None = None,
) -> Any:
    import pyarrow as pa

    return pa.record_batch(
        [
            pa.array([kind], pa.string()),
            pa.array([topic], pa.string()),
            pa.array([path], pa.string()),
            pa.array([size], pa.int64()),
            pa.array([records], pa.int64()),
            pa.array([parts], pa.string()),
            pa.array([refused], pa.string()),
            pa.array([sample], pa.binary()),
            pa.array([folded], pa.string()),
        ],
        names=["kind", "topic", "path", "size", "records", "parts", "refused", "sample", "folded"],
    )


def _expected_records(records: Any, schema_id: int, key_id: int) -> Any:
    """A lane topic's records holding a value; :class:`NotAnAppend` unless every one is
    framed, of value schema ``schema_id`` and key schema ``key_id``."""
    import pyarrow.compute as pc

    if records.column(tf.FRAMING_ERROR).null_count != records.num_rows:
        raise NotAnAppend("a record that is not framed")
    valued = records
    if records.column("value").null_count:  # tombstones
        valued = records.filter(pc.is_valid(records.column("value")))
    schema_ids = pc.unique(valued.column(tf.VALUE_SCHEMA_ID)).to_pylist()
    key_ids = pc.unique(valued.column(tf.KEY_SCHEMA_ID)).to_pylist()
    if schema_ids not in ([], [schema_id]) or key_ids not in ([], [key_id]):
        raise NotAnAppend(f"schema ids {schema_ids}, key schema ids {key_ids}: not the last's")
    return valued


def remove_files(root: str, paths: Sequence[str]) -> None:
    """Delete files a refused lane wrote (no commit names them: a best effort, VACUUM's)."""
    for relative in paths:
        try:
            os.remove(os.path.join(root, relative))
        except OSError as exc:
            logger.debug("could not remove %s: %s", relative, exc)


def combine_task_parts(rows: Sequence[Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The tasks' summary parts, and why they cannot be combined (a Kafka partition in two
    tasks: each key's last change was then not found in one place)."""
    parts: list[dict[str, Any]] = []
    seen: set[int] = set()
    for row in rows:
        if row["refused"] is not None:
            return [], str(row["refused"])
        for part in json.loads(row["parts"]):
            number = int(part[SUMMARY_PARTITION])
            if number in seen:
                return [], f"Kafka partition {number} read by two tasks"
            seen.add(number)
            part["last"] = tuple(part["last"])
            parts.append(part)
    return parts, None


@dataclass(frozen=True, slots=True)
class LaneCommit:
    """A topic's batch the lane committed: its table, summary and fences after, and what
    wrote it (``ApplyStats.last_write``'s kind and writer)."""

    topic: str
    path: str
    label: str
    summary: dict[str, Any]
    fences: Fences
    files: int
    written: tuple[str, str] = ("append", "tasks")


@dataclass(frozen=True, slots=True)
class LaneMerge:
    """A topic's batch the tasks folded for the driver to MERGE into a table that holds rows:
    each key's last change (:func:`folded_rows`), in pieces (one per task or file)."""

    topic: str
    path: str
    label: str
    summary: dict[str, Any]
    pieces: list[Any]


#: A lane topic's outcome: committed, to be MERGEd by the driver, or why neither.
Outcome = LaneCommit | LaneMerge | str


@dataclass(frozen=True, slots=True)
class LaneTopic:
    """One topic the lane takes in a batch: its schema id, table (path and the delta-rs table,
    current) and spec; with ``spec.merge``, the largest table delta-rs MERGEs its batch into
    (``merge_bytes``, bridge.spark.lane_driver.lane_merge_max_bytes)."""

    schema_id: int
    path: str
    table: Any
    spec: LaneSpec
    merge_bytes: int = 0


def run_lane(
    framed: Any,
    topics: Mapping[str, LaneTopic],
    batch_id: int,
    app_id: str,
    identity_path: Any,
    direct: tuple[DirectRead, Expected] | None = None,
) -> dict[str, Outcome]:
    """The batch's ``topics`` through the lane in one Spark job: each committed
    (:class:`LaneCommit`) or why not (its files removed; Spark's path applies it).
    ``identity_path(schema, table)``: the path records of that source table go to. With
    ``direct``, the tasks read these topics' offset ranges from Kafka themselves, and a topic
    whose records are not all of its expected (value, key) schema ids is refused."""
    from pyspark.sql import functions as F

    if direct is not None:
        read, expected = direct
        specs = {topic: lane.spec for topic, lane in topics.items()}
        task_rows = _read_by_tasks(framed.sparkSession, read, specs, expected)
        return _outcomes_of(
            [row for row in task_rows if row["kind"] == "lane"],
            topics,
            batch_id,
            app_id,
            identity_path,
        )
    wanted: Any = None
    for topic, lane in topics.items():
        test = (F.col("topic") == topic) & (F.col(tf.VALUE_SCHEMA_ID) == lane.schema_id)
        wanted = test if wanted is None else wanted | test
    records = framed.where(
        wanted & F.col(tf.FRAMING_ERROR).isNull() & F.col("value").isNotNull()
    ).select(*_LANE_COLUMNS)
    specs = {topic: lane.spec for topic, lane in topics.items()}
    rows = records.mapInArrow(lambda batches: task_result(batches, specs), LANE_OUTPUT).collect()
    return _outcomes_of(rows, topics, batch_id, app_id, identity_path)


def _outcomes_of(
    rows: Sequence[Any],
    topics: Mapping[str, LaneTopic],
    batch_id: int,
    app_id: str,
    identity_path: Any,
) -> dict[str, Outcome]:
    per_topic: dict[str, list[Any]] = {topic: [] for topic in topics}
    for row in rows:
        per_topic[row["topic"]].append(row)
    return {
        topic: _committed(topic, topics[topic], per_topic[topic], batch_id, app_id, identity_path)
        for topic in topics
    }


_LANE_COLUMNS = (
    "topic",
    "value",
    "partition",
    "offset",
    tf.VALUE_SCHEMA_ID,
    tf.KEY_SCHEMA_ID,
    tf.FRAMING_ERROR,
)


@dataclass(frozen=True, slots=True)
class DirectRead:
    """A batch's Kafka offset ranges dealt to tasks, and the consumer configuration they read
    them with (:mod:`bridge.spark.kafka_ranges`)."""

    shares: list[list[KafkaRange]]
    client: dict[str, Any]


def _read_by_tasks(
    spark: Any, direct: DirectRead, specs: Mapping[str, LaneSpec], expected: Expected
) -> list[Any]:
    """:func:`task_result` of each task's share of the batch, read from Kafka by the task:
    one Spark task per share, each share's topic-partitions whole."""
    shares, client = direct.shares, direct.client

    def task(ids: Iterator[Any]) -> Iterator[Any]:
        for batch in ids:
            for index in batch.column(0).to_pylist():
                yield from task_result(read_ranges(shares[index], client), specs, expected)

    tasks = spark.range(0, len(shares), 1, len(shares))
    return list(tasks.mapInArrow(task, LANE_OUTPUT).collect())


def run_lane_first(
    framed: Any,
    topics: Mapping[str, LaneTopic],
    expected: Expected,
    batch_id: int,
    app_id: str,
    identity_path: Any,
    direct: DirectRead | None = None,
) -> tuple[dict[str, Outcome], Any]:
    """:func:`run_lane` for the topics the lane took in the batch before, in the batch's only
    read before the lane's commits: the same job counts the batch's groups
    (:func:`bridge.spark.decode.batch_groups`, returned for the rest of the batch), so a
    topic the lane keeps taking costs one read of Kafka per batch, not two. A topic absent
    from the batch has no outcome; one whose records are not all of the ``expected`` (value
    schema id, key schema id) is refused. With ``direct``, the tasks read the batch's
    offset ranges from Kafka themselves (:mod:`bridge.spark.kafka_ranges`), not through
    Spark's Kafka source (``framed`` is then not read)."""
    from bridge.spark.decode import BatchGroups

    specs = {topic: lane.spec for topic, lane in topics.items()}
    if direct is not None:
        rows = _read_by_tasks(framed.sparkSession, direct, specs, expected)
    else:
        rows = (
            framed.select(*_LANE_COLUMNS)
            .mapInArrow(lambda batches: task_result(batches, specs, expected), LANE_OUTPUT)
            .collect()
        )
    merged: dict[GroupKey, dict[str, Any]] = {}
    per_topic: dict[str, list[Any]] = {}
    for row in rows:
        if row["kind"] == "lane":
            per_topic.setdefault(row["topic"], []).append(row)
            continue
        part = {"topic": row["topic"], **json.loads(row["parts"]), SAMPLE: row["sample"]}
        add_group(merged, (row["topic"], part[tf.VALUE_SCHEMA_ID], part["unframed"]), part)
    groups = [g for g in merged.values() if not g["unframed"]]
    outcomes = {
        topic: _committed(topic, topics[topic], per_topic[topic], batch_id, app_id, identity_path)
        for topic in topics
        if topic in per_topic
    }
    return outcomes, BatchGroups(groups, len(groups) < len(merged))


def _committed(
    topic: str, lane: LaneTopic, rows: list[Any], batch_id: int, app_id: str, identity_path: Any
) -> LaneCommit | LaneMerge | str:
    """One topic's task rows -> its commit, the rows the driver is to MERGE (a table that
    holds rows, ``spec.merge``, whose batch is not one of new keys), or why neither (its files
    removed)."""
    import time

    from bridge.spark.executor_files import WrittenFile, commit_files
    from bridge.spark.summary import combine_parts
    from bridge.spark.write_choice import new_keys_only

    spec, path = lane.spec, lane.path
    files = [WrittenFile(r["path"], int(r["size"]), int(r["records"])) for r in rows if r["path"]]
    folded = [str(r["folded"]) for r in rows if r["folded"] is not None]

    def refuse(why: str) -> str:
        remove_files(spec.layout.root, [f.path for f in files] + folded)
        return why

    parts, why = combine_task_parts(rows)
    if why is not None:
        return refuse(why)
    summary = combine_parts(parts)
    if summary is None:
        return refuse("no changes")
    identity = (summary["schema"], summary["table"])
    if None in identity or identity != (summary["schema_max"], summary["table_max"]):
        return refuse("records without a source table, or of several")
    if identity_path(str(identity[0]), str(identity[1])) != path:
        return refuse("a routed topic, or records of another table than the topic's before")
    label = f"{identity[0]}.{identity[1]}"
    count, fences = int(summary["n"]), spec.fences
    if not spec.first_load:
        if fences.cover(summary["offsets"]):
            return refuse("a replay")
        if folded or not new_keys_only(summary, count, fences, True):
            if not spec.merge:
                return refuse("not a batch of new keys")
            try:  # the tasks' files (inserts of keys the table may hold) join the MERGE
                pieces = [read_folded(spec.layout.root, f) for f in folded]
                pieces += file_rows(spec.layout, files)
            except Exception as exc:
                return refuse(f"the tasks' rows could not be read back: {exc}")
            remove_files(spec.layout.root, [f.path for f in files])
            return LaneMerge(topic, path, label, summary, pieces)
    after = fences.advanced(
        summary["partitions"],
        None,
        summary["offsets"],
        summary["lowest_lsn"],
        first_load=spec.first_load,
    )
    try:
        commit_files(
            lane.table, files, app_id, batch_id, after.to_metadata(), int(time.time() * 1000)
        )
    except Exception as exc:  # nothing committed: Spark's path writes the batch
        return refuse(f"the commit failed: {exc}")
    return LaneCommit(topic, path, label, summary, after, len(files))


def file_rows(layout: FileLayout, files: Sequence[Any]) -> list[Any]:
    """The rows of a lane append's files (:func:`appended_rows`: inserts) as
    :func:`folded_rows` gives them: logical column names, the kind ``c``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    logical = {physical: name for name, physical, _, _ in layout.columns}
    pieces = []
    for written in files:
        table = pq.read_table(os.path.join(layout.root, written.path))
        table = table.rename_columns([logical.get(n, n) for n in table.column_names])
        pieces.append(table.append_column(tf.OP, pa.array(["c"] * table.num_rows, pa.string())))
    return pieces
