"""What the driver's delta-rs writers share: their refusal, and rows in a table's schema."""

from __future__ import annotations

from typing import Any

__all__ = ["DriverWriteRefused", "conformed", "pa_schema"]


class DriverWriteRefused(Exception):
    """delta-rs could not write the batch and committed nothing: apply it with Spark."""


def pa_schema(table: Any) -> Any:
    """The table's schema as pyarrow's."""
    import pyarrow as pa

    return pa.schema(table.schema().to_arrow())


def conformed(table: Any, rows: Any) -> Any:
    """``rows`` with exactly the table's columns and types (delta-rs appends only that)."""
    import pyarrow as pa

    target = pa_schema(table)
    columns = []
    for field in target:
        if field.name in rows.column_names:
            columns.append(rows.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=target)
