"""One incremental-snapshot chunk between its watermarks: the DBLog reconciliation, pure.

The chunk's rows are read after the low watermark was committed and before the high one
was. While the stream is between the two, every change of the table it carries is newer than
or as new as the row read for the same key, so that key's row is dropped from the chunk (the
streamed change stands); a truncate drops them all. What is left when the high watermark
arrives is emitted there, in the stream's order: nothing older than the stream's own changes
is ever emitted after them.

One more case closes the gap DBLog leaves on PostgreSQL: a transaction whose commit record
precedes the low watermark but that was not yet visible to the read (PostgreSQL makes a commit
visible just after writing its record, so the two orders can differ under load). Its changes
reach the stream before the window opens, yet the read has the older row. ``invisible`` holds
the transaction ids the read's snapshot saw in progress; their changes count as inside the
window wherever they arrive.
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
    #: Transactions in progress for the read's snapshot (32-bit xids, as pgoutput sends them).
    invisible: frozenset[int] = frozenset()
    opened: bool = False
    dropped: int = 0

    def open(self) -> None:
        self.opened = True

    def _counts(self, xid: int) -> bool:
        return self.opened or xid in self.invisible

    def saw(self, key: Hashable, xid: int) -> None:
        """The stream's transaction ``xid`` changed (inserted, updated, deleted) the row of
        ``key``: the row read goes if the change is not older than the read."""
        if self._counts(xid) and self.rows.pop(key, None) is not None:
            self.dropped += 1

    def truncated(self, xid: int) -> None:
        if self._counts(xid):
            self.dropped += len(self.rows)
            self.rows.clear()

    def close(self) -> list[Row]:
        """The rows to emit at the high watermark."""
        rows = list(self.rows.values())
        self.rows.clear()
        self.opened = False
        return rows
