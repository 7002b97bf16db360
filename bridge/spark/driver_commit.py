"""The driver's own Delta commits: rows written as one Parquet file in the table's physical
schema, and the next version's commit file created with them, the batch's transaction and
its fences (``userMetadata``).

Why not delta-rs's writers: on a local path each of their commits lists the table's whole
log directory (bridge.spark.logged_table), so a write cost more as the log grew: 6 ms at 100
commits, 74 ms at 30,000 (bench/log_length_bench.py). A commit made here creates one file by
its version number (bridge.spark.delta_log.write_commit: atomic, and refused when another
writer took the version: Delta's optimistic concurrency) and reads nothing else of the log.

Who (:func:`own_commit_refusal`): a table whose writer features this module keeps the rules of
(:data:`HONOURED_WRITER_FEATURES`), unpartitioned, with no CHECK constraint, invariant,
generated or identity column, variant column or struct under column mapping; the callers
write any other through delta-rs (which checks constraints and computes generated columns).
An overwrite is refused on an append-only table.

Statistics: ``numRecords``, and the exact minimum, maximum and null count of every top-level
integer and text column (a text minimum as a prefix, a maximum whole up to
:data:`TEXT_MAX_WHOLE` characters, else left out); Delta reads a column without them as
unknown, which only costs data skipping.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bridge.spark.delta_log import CommitConflict, write_commit
from bridge.spark.driver_table import DriverWriteRefused, checkpoint_if_due, conformed
from bridge.spark.logged_table import LoggedTable

__all__ = [
    "HONOURED_WRITER_FEATURES",
    "INTEGER_STATS",
    "TEXT_MAX_WHOLE",
    "TEXT_MIN_PREFIX",
    "TEXT_STATS",
    "append_rows",
    "commit",
    "overwrite_rows",
    "own_commit_refusal",
    "physical_names",
    "removed",
    "stats_kind",
    "write_rows",
]

#: The writer features a commit of this module keeps the rules of: the legacy ones Spark lists
#: on every table (``appendOnly``, ``invariants``: checked off by the table's properties and
#: schema in :func:`own_commit_refusal`, as are ``checkConstraints``, ``changeDataFeed``,
#: ``generatedColumns`` and ``identityColumns``), column mapping (physical names and field
#: ids in the file written), deletion vectors, and those that ask nothing of a writer of data
#: files (``timestampNtz``, ``typeWidening``, ``domainMetadata``, ``vacuumProtocolCheck``;
#: ``variantType`` where no column is a variant: delta-rs lists it on the tables it creates).
#: Row tracking, in-commit timestamps, V2 checkpoints, clustering, Iceberg compatibility and
#: any feature added later are refused.
HONOURED_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "identityColumns",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "domainMetadata",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
    }
)

INTEGER_STATS = ("int8", "int16", "int32", "int64")
TEXT_STATS = ("string", "large_string", "string_view")
#: A text column's minimum is written as a prefix of this many characters (a lower bound, as
#: Delta-Spark's ``dataSkippingStringPrefixLength`` writes it); its maximum whole up to
#: ``TEXT_MAX_WHOLE`` characters (a UUID's 36 included), else not at all (a prefix is no
#: upper bound).
TEXT_MIN_PREFIX = 32
TEXT_MAX_WHOLE = 256


def own_commit_refusal(table: LoggedTable, *, overwrite: bool = False) -> str | None:
    """Why this module cannot commit to ``table`` (an overwrite, with ``overwrite``), or None:
    judged once per description of the table, not at every write."""
    name = "overwrite refusal" if overwrite else "append refusal"
    return table.described(name, lambda t: _refusal(t, overwrite))  # type: ignore[no-any-return]


def _refusal(table: LoggedTable, overwrite: bool) -> str | None:
    protocol, metadata = table.protocol(), table.metadata()
    features = set(protocol.writer_features or ())
    config = {k: str(v).lower() for k, v in metadata.configuration.items()}
    unknown = features - HONOURED_WRITER_FEATURES
    if unknown:
        return f"table features this writer does not keep: {', '.join(sorted(unknown))}"
    if metadata.partition_columns:
        return "a partitioned table"
    if overwrite and config.get("delta.appendOnly") == "true":
        return "an append-only table"
    if any(k.startswith("delta.constraints.") for k in config):
        return "a table with CHECK constraints"
    mapped = config.get("delta.columnMapping.mode", "none") != "none"
    for field in table.schema_fields():
        meta = field.get("metadata") or {}
        if any(k in meta for k in ("delta.invariants", "delta.generationExpression")) or any(
            k.startswith("delta.identity.") for k in meta
        ):
            return f"column {field['name']!r} is constrained, generated or an identity"
        if '"variant"' in json.dumps(field["type"]):
            return f"column {field['name']!r} is a variant"
        if mapped and '"struct"' in json.dumps(field["type"]):
            return f"column {field['name']!r} holds structs under column mapping"
    return None


def physical_names(table: LoggedTable) -> dict[str, tuple[str, int | None]]:
    """Each column's name in the data files, and its field id (column mapping), by name."""
    return table.described("physical names", _physical_names)  # type: ignore[no-any-return]


def _physical_names(table: LoggedTable) -> dict[str, tuple[str, int | None]]:
    names = {}
    for field in table.schema_fields():
        meta = field.get("metadata") or {}
        physical = meta.get("delta.columnMapping.physicalName", field["name"])
        names[field["name"]] = (physical, meta.get("delta.columnMapping.id"))
    return names


def stats_kind(arrow_type: Any) -> type | None:
    """The Python type a column's statistics are compared as, or None (none written)."""
    if str(arrow_type) in INTEGER_STATS:
        return int
    if str(arrow_type) in TEXT_STATS:
        return str
    return None


def write_rows(
    table: LoggedTable,
    rows: Any,
    physical: Mapping[str, tuple[str, int | None]] | None = None,
    now: int | None = None,
) -> dict[str, Any]:
    """``rows`` (Arrow, logical names; a column of the table they lack is null) as one Parquet
    file in the table's physical schema; its ``add`` action."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    physical = physical or physical_names(table)
    values = conformed(table, rows)
    fields = []
    for field in values.schema:
        name, field_id = physical[field.name]
        metadata = {b"PARQUET:field_id": str(field_id).encode()} if field_id is not None else None
        fields.append(pa.field(name, field.type, field.nullable, metadata))
    data = pa.Table.from_arrays(values.columns, schema=pa.schema(fields))
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    with pa.OSFile(str(table.log.root / name), "wb") as sink:  # (no file system to resolve)
        pq.write_table(data, sink, compression="snappy")
    low, high, nulls = {}, {}, {}
    for logical in values.column_names:
        column = values.column(logical)
        if stats_kind(column.type) is None:
            continue
        at = physical[logical][0]
        nulls[at] = column.null_count
        bounds = pc.min_max(column)
        if not bounds["min"].is_valid:
            continue
        least, most = bounds["min"].as_py(), bounds["max"].as_py()
        if isinstance(least, str):  # a prefix is a lower bound, as Delta-Spark writes it
            least = least[:TEXT_MIN_PREFIX]
        low[at] = least
        # A maximum is written whole (a prefix would be no upper bound); a very long one is
        # left out rather than make every commit of the log carry it.
        if not (isinstance(most, str) and len(most) > TEXT_MAX_WHOLE):
            high[at] = most
    stats = {"numRecords": data.num_rows, "minValues": low, "maxValues": high,
             "nullCount": nulls, "tightBounds": True}  # fmt: skip
    return {
        "path": name,
        "partitionValues": {},
        "size": (table.log.root / name).stat().st_size,
        "modificationTime": now if now is not None else int(time.time() * 1000),
        "dataChange": True,
        "stats": json.dumps(stats),
    }


def removed(add: Mapping[str, Any], now: int) -> dict[str, Any]:
    """The ``remove`` action of the live file ``add`` (with its deletion vector, if any)."""
    remove = {
        "path": add["path"],
        "deletionTimestamp": now,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add.get("partitionValues") or {},
        "size": add["size"],
    }
    if add.get("deletionVector"):
        remove["deletionVector"] = add["deletionVector"]
    return {"remove": remove}


def commit(
    table: LoggedTable,
    actions: Sequence[Mapping[str, Any]],
    *,
    operation: str,
    parameters: Mapping[str, Any],
    blind_append: bool,
    app_id: str,
    batch_id: int,
    commit_metadata: str | None,
    metrics: Mapping[str, int] | None = None,
    engine: str = "pgbridge driver",
) -> None:
    """Commit ``actions`` as the table's next version with the batch's transaction and
    ``commit_metadata``; :class:`DriverWriteRefused` when another writer took that version
    (nothing of this commit is in the table then). Then a checkpoint when one is due."""
    now = int(time.time() * 1000)
    commit_info: dict[str, Any] = {
        "timestamp": now,
        "operation": operation,
        "operationParameters": dict(parameters),
        "readVersion": table.version(),
        "isolationLevel": "Serializable",
        "isBlindAppend": blind_append,
        "operationMetrics": {k: str(v) for k, v in (metrics or {}).items()},
        "engineInfo": engine,
        "txnId": str(uuid.uuid4()),
    }
    if commit_metadata:
        commit_info["userMetadata"] = commit_metadata
    head = [
        {"commitInfo": commit_info},
        {"txn": {"appId": app_id, "version": batch_id, "lastUpdated": now}},
    ]
    try:
        write_commit(table.log.root, table.version() + 1, [*head, *actions])
    except CommitConflict as exc:
        raise DriverWriteRefused(str(exc)) from exc
    table.log.apply([*head[1:], *actions])
    table.log.version += 1
    checkpoint_if_due(table, table.version())


def append_rows(
    table: LoggedTable, rows: Any, app_id: str, batch_id: int, commit_metadata: str | None
) -> None:
    """Append ``rows`` (none: a commit of the batch's transaction alone) in one commit."""
    actions = [{"add": write_rows(table, rows)}] if rows.num_rows else []
    commit(table, actions, operation="WRITE", parameters={"mode": "Append"}, blind_append=True,
           app_id=app_id, batch_id=batch_id, commit_metadata=commit_metadata,
           metrics={"numFiles": len(actions), "numOutputRows": rows.num_rows})  # fmt: skip


def overwrite_rows(
    table: LoggedTable, rows: Any, app_id: str, batch_id: int, commit_metadata: str | None
) -> None:
    """Replace every row of the table by ``rows`` in one commit: every live file removed."""
    now = int(time.time() * 1000)
    gone: Iterable[Mapping[str, Any]] = list(table.log.adds.values())
    actions = [removed(add, now) for add in gone]
    if rows.num_rows:
        actions.append({"add": write_rows(table, rows, now=now)})
    commit(table, actions, operation="WRITE", parameters={"mode": "Overwrite"},
           blind_append=False, app_id=app_id, batch_id=batch_id,
           commit_metadata=commit_metadata,
           metrics={"numFiles": int(rows.num_rows > 0), "numOutputRows": rows.num_rows,
                    "numRemovedFiles": len(actions) - int(rows.num_rows > 0)})  # fmt: skip
