"""An Arrow table as a Spark DataFrame, every row of it.

PySpark 4.0's ``createDataFrame`` of a ``pyarrow.Table`` loses rows when the table holds an
empty record batch before others: chunks of 1, 0 and 1 rows give a frame of 1 row, 0, 0 and 2
give none (measured on pyspark 4.0.0; tests/spark/test_driver_decode.py). A table
concatenated from parts (a batch's partitions, a table's files) keeps an empty part as an empty
batch (``take`` and ``filter`` do not), so every Arrow table the job hands to Spark goes
through :func:`frame_of`, which drops the empty batches first (no copy of the data, unlike
``combine_chunks``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["frame_of", "without_empty_batches"]


def without_empty_batches(table: Any) -> Any:
    """``table`` (pyarrow) with the same rows, in batches none of which is empty."""
    import pyarrow as pa

    batches = table.to_batches()
    if all(batch.num_rows for batch in batches):
        return table
    return pa.Table.from_batches([b for b in batches if b.num_rows], schema=table.schema)


def frame_of(spark: Any, table: Any, schema: Any = None) -> Any:
    """A DataFrame of every row of the Arrow ``table`` (in ``schema``, a Spark StructType, when
    given)."""
    rows = without_empty_batches(table)
    return spark.createDataFrame(rows) if schema is None else spark.createDataFrame(rows, schema)
