"""Rows written as Parquet files of a Delta table by Spark's Python tasks, committed by the
driver in one Delta transaction.

Why: a snapshot-sized batch spends most of its time in Spark's Avro decode, its columnar cache
and its Parquet writer (docs/measurements.md). Here each task of a ``mapInArrow`` over the
batch's Kafka records decodes its payloads in C (:mod:`bridge.spark.avro_columns`) and writes
its rows with Arrow's Parquet writer straight into the table's directory, returning only the
file's path, size and row count; the driver commits the files (:func:`commit_files`) the way
Spark's Delta writer does: files first, then one commit that makes them visible. A file no
commit names is invisible to every reader, and Delta's VACUUM removes it.

The files follow the table's column mapping: Parquet columns carry the physical names (and
field ids) of the table's schema, as Spark's writer gives them.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["FileLayout", "WrittenFile", "commit_files", "file_layout", "write_file"]

#: A column's dictionary is given up (plain pages follow) once it holds this many bytes. Arrow's
#: default, 1 MiB, hashes most of a row group of a unique column (a key, a name, a timestamp)
#: before it gives up, and the dictionary it then writes makes the file larger: measured on the
#: apply bench's rows (bigint key, unique text, decimal, timestamp, repeated text), 1.7M rows
#: in row groups of 65,536, zstd: 0.40 -> 0.26 us CPU per row, 21.3 -> 10.4 MB. A column with
#: few distinct values (a status, a country) still fits and keeps its dictionary.
DICTIONARY_PAGE_LIMIT = 64 * 1024

_PHYSICAL = "delta.columnMapping.physicalName"
_FIELD_ID = "delta.columnMapping.id"


@dataclass(frozen=True, slots=True)
class FileLayout:
    """The table's columns as its files hold them: logical name -> (physical name, field id,
    Arrow type), in the table's order."""

    root: str
    columns: tuple[tuple[str, str, int | None, Any], ...]

    def schema(self) -> Any:
        import pyarrow as pa

        fields = []
        for _, physical, field_id, arrow in self.columns:
            metadata = {b"PARQUET:field_id": str(field_id).encode()} if field_id else None
            fields.append(pa.field(physical, arrow, nullable=True, metadata=metadata))
        return pa.schema(fields)


@dataclass(frozen=True, slots=True)
class WrittenFile:
    path: str  # relative to the table's root
    size: int
    records: int


def file_layout(table: Any) -> FileLayout:
    """``table``'s (a delta-rs ``DeltaTable``) file layout, from its schema's column mapping."""
    import pyarrow as pa

    arrow = pa.schema(table.schema().to_arrow())
    described = json.loads(table.schema().to_json())["fields"]
    columns = []
    for field, described_field in zip(arrow, described, strict=True):
        metadata = described_field.get("metadata", {})
        physical = str(metadata.get(_PHYSICAL, field.name))
        field_id = metadata.get(_FIELD_ID)
        arrow_type = field.type
        if pa.types.is_large_string(arrow_type) or pa.types.is_string_view(arrow_type):
            arrow_type = pa.string()
        elif pa.types.is_large_binary(arrow_type) or pa.types.is_binary_view(arrow_type):
            arrow_type = pa.binary()
        columns.append(
            (field.name, physical, int(field_id) if field_id is not None else None, arrow_type)
        )
    return FileLayout(table.table_uri.removeprefix("file://"), tuple(columns))


def write_file(layout: FileLayout, tables: Iterator[Any]) -> WrittenFile | None:
    """Write the Arrow tables of ``tables`` (logical column names; a column of the table they
    lack is null) as one Parquet file under the table's root; None when there were no rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = layout.schema()
    relative = f"part-00000-{uuid.uuid4()}-c000.zstd.parquet"
    target = f"{layout.root.rstrip('/')}/{relative}"
    writer = None
    records = 0
    try:
        for table in tables:
            if table.num_rows == 0:
                continue
            arrays = []
            for name, _, _, arrow in layout.columns:
                if name in table.column_names:
                    arrays.append(table.column(name).cast(arrow))
                else:
                    arrays.append(pa.nulls(table.num_rows, arrow))
            if writer is None:
                writer = pq.ParquetWriter(
                    target,
                    schema,
                    compression="zstd",
                    dictionary_pagesize_limit=DICTIONARY_PAGE_LIMIT,
                )
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
            records += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return None
    return WrittenFile(relative, os.path.getsize(target), records)


def commit_files(
    table: Any,
    files: list[WrittenFile],
    app_id: str,
    batch_id: int,
    commit_metadata: str | None,
    modification_ms: int,
) -> None:
    """One Delta commit appending ``files`` to ``table`` (bridge.spark.logged_table), with the
    batch's transaction and ``commit_metadata``: the driver's own commit
    (bridge.spark.driver_commit), delta-rs's where that refuses the table."""
    from bridge.spark.driver_commit import commit, own_commit_refusal
    from bridge.spark.driver_merge import commit_properties
    from bridge.spark.driver_table import checkpoint_if_due, no_post_commit_hooks

    stats = [json.dumps({"numRecords": f.records}) for f in files]
    adds: list[dict[str, Any]] = [
        {"path": f.path, "partitionValues": {}, "size": f.size,
         "modificationTime": modification_ms, "dataChange": True, "stats": s}
        for f, s in zip(files, stats, strict=True)
    ]  # fmt: skip
    if own_commit_refusal(table) is None:
        commit(table, [{"add": add} for add in adds], operation="WRITE",
               parameters={"mode": "Append"}, blind_append=True, app_id=app_id,
               batch_id=batch_id, commit_metadata=commit_metadata,
               metrics={"numFiles": len(files),
                        "numOutputRows": sum(f.records for f in files)})  # fmt: skip
        return
    from deltalake.transaction import AddAction

    actions = [
        AddAction(f.path, f.size, {}, modification_ms, True, s)
        for f, s in zip(files, stats, strict=True)
    ]
    table.synced().create_write_transaction(
        actions,
        "append",
        table.schema(),
        commit_properties=commit_properties(app_id, batch_id, commit_metadata),
        post_commithook_properties=no_post_commit_hooks(),
    )
    table.update_incremental()
    checkpoint_if_due(table, table.version())
