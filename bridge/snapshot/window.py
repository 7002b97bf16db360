"""One incremental-snapshot chunk between its watermarks: the DBLog reconciliation, pure.

The chunk's rows are read after the low watermark was committed and before the high one
was. While the stream is between the two, every change of the table it carries is newer than
or as new as the row read for the same key, so that key's row is dropped from the chunk (the
streamed change stands); a truncate drops them all. What is left when the high watermark
arrives is emitted there, in the stream's order: nothing older than the stream's own changes
is ever emitted after them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["ChunkWindow"]

Row = TypeVar("Row")


@dataclass(slots=True)
class ChunkWindow(Generic[Row]):
    """``rows`` by message key (insertion order: the chunk's key order)."""

    chunk_id: str
    topic: str
    rows: dict[Hashable, Row] = field(default_factory=dict)
    opened: bool = False
    dropped: int = 0

    def open(self) -> None:
        self.opened = True

    def saw(self, key: Hashable) -> None:
        """The stream changed (inserted, updated, deleted) the row of ``key`` inside the window."""
        if self.opened and self.rows.pop(key, None) is not None:
            self.dropped += 1

    def truncated(self) -> None:
        if self.opened:
            self.dropped += len(self.rows)
            self.rows.clear()

    def close(self) -> list[Row]:
        """The rows to emit at the high watermark."""
        rows = list(self.rows.values())
        self.rows.clear()
        self.opened = False
        return rows
