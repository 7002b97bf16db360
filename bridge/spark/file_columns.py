"""Columns of a table's data files, kept in the driver from one batch to the next.

Why: the driver's MERGE (bridge.spark.driver_dv_merge) reads the key, ``_pgbridge_commit_lsn``
and ``_pgbridge_seq`` columns of every file whose statistics may hold a key of the batch. A
table keyed by random UUIDs has every file's range spanning every key, so each batch read and
decoded its whole key column again: for a 1,000,000-row table, 0.24 s of the MERGE's 0.38 s
(docs/measurements.md). A data file never changes once written (new rows are a new file, and
deleted rows are marked by deletion vectors beside it, which the MERGE reads from the log at
each batch), so what was read from a file stays right for as long as the file lives.

Bounded (``--driver-key-cache-mb``, 256 MiB by default; 0: nothing kept). A file read while
the cache is full evicts files no MERGE of this batch or the one before used; if that frees
too little it is not kept. So tables larger than the cache keep the same share of their files
cached batch after batch (plain LRU, or evicting what this batch has not read yet, would
evict a file before its next read: the tables of a batch are merged one after another), and
files no longer in any table (compacted away, or of a table no longer written) leave after a
batch without them.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.spark.apply_metrics import KEY_CACHE_BYTES, KEY_CACHE_READS

__all__ = ["DEFAULT_CACHE_MB", "FileColumns", "file_columns"]

#: ``--driver-key-cache-mb``'s default.
DEFAULT_CACHE_MB = 256


@dataclass(slots=True)
class _Entry:
    columns: Any  # a pyarrow.Table
    size: int
    generation: int  # that of the batch that last used it


class FileColumns:
    """Columns read from immutable Parquet files, by (path, columns), within a byte budget."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.hits = self.misses = 0
        self._entries: OrderedDict[tuple[str, tuple[str, ...]], _Entry] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        self._batch: object = None
        self._generation = 0

    def resize(self, budget_bytes: int) -> None:
        with self._lock:
            self.budget_bytes = budget_bytes
            self._evict(0, keep_recent=False)

    def read(self, path: Path, columns: Sequence[str], batch: object) -> Any:
        """``columns`` of the Parquet file at ``path``, for a MERGE of ``batch`` (the job's
        batch id: the tables of one batch share its generation)."""
        import pyarrow.parquet as pq

        key = (os.path.abspath(path), tuple(columns))
        with self._lock:
            if batch != self._batch:
                self._batch, self._generation = batch, self._generation + 1
            generation = self._generation
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                entry.generation = generation
                self.hits += 1
                KEY_CACHE_READS.labels("hit").inc()
                return entry.columns
            self.misses += 1
        KEY_CACHE_READS.labels("miss").inc()
        data = pq.read_table(path, columns=list(columns))
        size = data.nbytes
        with self._lock:
            if key not in self._entries and self._evict(size, keep_recent=True):
                self._entries[key] = _Entry(data, size, generation)
                self._held += size
        return data

    def _evict(self, room: int, keep_recent: bool) -> bool:
        """Evict least recently used entries until ``room`` bytes fit; with ``keep_recent``,
        none this batch or the one before used (then False if that is not enough)."""
        while self._held + room > self.budget_bytes:
            if not self._entries:
                return False
            key, oldest = next(iter(self._entries.items()))
            if keep_recent and oldest.generation >= self._generation - 1:
                return False
            del self._entries[key]
            self._held -= oldest.size
        return True

    @property
    def held_bytes(self) -> int:
        return self._held


#: The driver's one cache (its budget set by the job: bridge.spark.applier).
file_columns = FileColumns(DEFAULT_CACHE_MB * 2**20)
KEY_CACHE_BYTES.set_function(lambda: file_columns.held_bytes)
