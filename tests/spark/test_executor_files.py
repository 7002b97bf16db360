"""The Parquet files the task lane writes: what they hold, and how their columns are encoded."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bridge.spark.executor_files import FileLayout, write_file


def _layout(root: Path) -> FileLayout:
    return FileLayout(
        str(root),
        (
            ("id", "col-1", 1, pa.int64()),
            ("name", "col-2", 2, pa.string()),
            ("status", "col-3", 3, pa.string()),
            ("missing", "col-4", 4, pa.int32()),
        ),
    )


def test_rows_are_written_under_physical_names_and_absent_columns_are_null(tmp_path: Path) -> None:
    rows = pa.table({"id": [1, 2], "name": ["a", None], "status": ["new", "old"]})
    written = write_file(_layout(tmp_path), iter([rows, rows.slice(0, 0)]))
    assert written is not None and written.records == 2
    table = pq.read_table(tmp_path / written.path)
    assert table.column_names == ["col-1", "col-2", "col-3", "col-4"]
    assert table.to_pylist() == [
        {"col-1": 1, "col-2": "a", "col-3": "new", "col-4": None},
        {"col-1": 2, "col-2": None, "col-3": "old", "col-4": None},
    ]
    assert table.schema.field("col-2").metadata == {b"PARQUET:field_id": b"2"}


def test_no_rows_no_file(tmp_path: Path) -> None:
    assert write_file(_layout(tmp_path), iter([])) is None
    assert list(tmp_path.iterdir()) == []


def _dictionary_bytes(path: Path) -> dict[str, int]:
    """Per column of the first row group: the bytes of its dictionary page (compressed)."""
    chunk = pq.ParquetFile(path).metadata.row_group(0)
    spans = {}
    for i in range(chunk.num_columns):
        column = chunk.column(i)
        start = column.dictionary_page_offset if column.has_dictionary_page else None
        spans[column.path_in_schema] = 0 if start is None else column.data_page_offset - start
    return spans


def test_a_unique_column_gives_its_dictionary_up_early_and_a_repeated_one_keeps_it(
    tmp_path: Path,
) -> None:
    """20,000 unique names (~600 KB, under Arrow's default 1 MiB dictionary limit, over the
    lane's 64 KiB): the lane's file stops the dictionary early where Arrow's default writes
    all of it; a column of three values keeps its dictionary either way."""
    n = 20_000
    rows = pa.table(
        {
            "id": list(range(n)),
            "name": [f"customer-{i:08d}-of-the-bench" for i in range(n)],
            "status": [("new", "paid", "shipped")[i % 3] for i in range(n)],
        }
    )
    written = write_file(_layout(tmp_path), iter([rows]))
    assert written is not None
    lane = _dictionary_bytes(tmp_path / written.path)
    default_path = tmp_path / "default.parquet"
    pq.write_table(pq.read_table(tmp_path / written.path), default_path, compression="zstd")
    default = _dictionary_bytes(default_path)
    assert lane["col-2"] * 4 < default["col-2"], (lane, default)
    assert 0 < lane["col-3"] == default["col-3"], (lane, default)
    assert (
        pq.read_table(tmp_path / written.path).column("col-2").to_pylist()
        == rows.column("name").to_pylist()
    )
