"""Data files' columns kept by the driver between batches (bridge.spark.file_columns): read
once, within the budget, a table larger than it keeping a stable share; and the deletion-vector
MERGE reading a table's files from it batch after batch with the same result."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bridge.spark.file_columns import FileColumns, file_columns


def _files(tmp_path: Path, count: int, rows: int = 1000) -> list[Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"k": range(i * rows, (i + 1) * rows), "v": ["x"] * rows}), path)
        paths.append(path)
    return paths


def _size(path: Path) -> int:
    return int(pq.read_table(path, columns=["k"]).nbytes)


def test_a_files_columns_are_read_once_and_by_the_columns_asked(tmp_path: Path) -> None:
    (path,) = _files(tmp_path, 1)
    cache = FileColumns(2**20)
    first = cache.read(path, ["k"], batch=1)
    assert cache.read(path, ["k"], batch=2) is first  # kept: no second read
    assert (cache.hits, cache.misses) == (1, 1)
    both = cache.read(path, ["k", "v"], batch=2)  # other columns: read, kept beside
    assert both.column_names == ["k", "v"] and (cache.hits, cache.misses) == (1, 2)
    assert first.column("k").to_pylist() == list(range(1000))


def test_tables_merged_one_after_another_keep_their_files_within_the_budget(
    tmp_path: Path,
) -> None:
    """Three tables of two files, room for four files; each batch adds a file to each table
    (its new rows). The files read in batch 1 stay hits: a new file does not evict a file a
    later table of the same batch is about to read."""
    tables = [_files(tmp_path / f"t{t}", 2) for t in range(3)]
    cache = FileColumns(int(_size(tables[0][0]) * 4.5))
    for batch in range(1, 5):
        hits = cache.hits
        for number, files in enumerate(tables):
            for path in files:
                cache.read(path, ["k"], batch)
            files.extend(_files(tmp_path / f"t{number}-b{batch}", 1))  # its batch's new file
        if batch > 1:
            assert cache.hits - hits >= 4, f"batch {batch}"


def test_a_table_larger_than_the_budget_keeps_the_same_files_batch_after_batch(
    tmp_path: Path,
) -> None:
    """Plain LRU over a scan of five files with room for two would evict each before its
    next read: none would ever be a hit."""
    paths = _files(tmp_path, 5)
    cache = FileColumns(int(_size(paths[0]) * 2.5))
    for batch in range(1, 5):
        hits = cache.hits
        for path in paths:
            cache.read(path, ["k"], batch)
        assert cache.hits - hits == (0 if batch == 1 else 2)
    assert cache.held_bytes <= cache.budget_bytes


def test_files_no_batch_uses_any_more_make_room_for_new_ones(tmp_path: Path) -> None:
    old, new = _files(tmp_path / "old", 2), _files(tmp_path / "new", 2)
    cache = FileColumns(int(_size(old[0]) * 2.5))
    for path in old:
        cache.read(path, ["k"], batch=1)
    # Batches 2 and 3 read other files (the old ones compacted away, say): batch 1's are kept
    # through batch 2 (a table may be merged later in it), then give way.
    for batch in (2, 3):
        for path in new:
            cache.read(path, ["k"], batch)
    misses = cache.misses
    for path in new:
        cache.read(path, ["k"], batch=4)
    assert cache.misses == misses  # both kept, in place of batch 1's
    cache.read(old[0], ["k"], batch=4)
    assert cache.misses == misses + 1


def test_a_budget_of_zero_keeps_nothing_and_a_smaller_one_drops_the_excess(
    tmp_path: Path,
) -> None:
    paths = _files(tmp_path, 3)
    cache = FileColumns(2**20)
    for path in paths:
        cache.read(path, ["k"], batch=1)
    assert cache.held_bytes == 3 * _size(paths[0])
    cache.resize(_size(paths[0]))
    assert cache.held_bytes == _size(paths[0])
    cache.resize(0)
    assert cache.held_bytes == 0
    cache.read(paths[0], ["k"], batch=2)
    cache.read(paths[0], ["k"], batch=3)
    assert cache.hits == 0 and cache.held_bytes == 0


def test_the_job_exports_its_hits_misses_and_bytes(tmp_path: Path) -> None:
    from prometheus_client import REGISTRY

    def reads(result: str) -> float:
        value = REGISTRY.get_sample_value("pgbridge_apply_key_cache_reads_total",
                                          {"result": result})  # fmt: skip
        return value or 0.0

    (path,) = _files(tmp_path, 1)
    hits, misses = reads("hit"), reads("miss")
    budget = file_columns.budget_bytes
    try:
        file_columns.resize(2**20)
        file_columns.read(path, ["k"], batch=1)
        file_columns.read(path, ["k"], batch=2)
        held = REGISTRY.get_sample_value("pgbridge_apply_key_cache_bytes")
    finally:
        file_columns.resize(budget)
    assert (reads("hit") - hits, reads("miss") - misses) == (1, 1)
    assert held is not None and held >= _size(path)


def test_a_file_missing_is_an_error_not_a_stale_answer(tmp_path: Path) -> None:
    cache = FileColumns(2**20)
    with pytest.raises(FileNotFoundError):
        cache.read(tmp_path / "gone.parquet", ["k"], batch=1)
