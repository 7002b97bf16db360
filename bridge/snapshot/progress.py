"""Progress of a snapshot as plain log lines: rows and MB done per table, rate, time left.

Pure apart from the clock it is given. Rows count when handed to Kafka (a chunk counts as done
only once Kafka acknowledged all of its rows); the estimate is
``pg_class.reltuples`` (a count for tables never analyzed), so the percentage is approximate and
may pass 100 % on a table that grows during the copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CURRENT", "SnapshotProgress", "TableFigures", "format_duration"]


def format_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


@dataclass(slots=True)
class TableFigures:
    table: str
    estimated_rows: int
    chunks: int
    rows: int = 0
    nbytes: int = 0
    chunks_done: int = 0
    started: float | None = None
    finished: float | None = None
    base_rows: int = 0  # done before this run (a resumed snapshot): not part of the rate
    base_bytes: int = 0


@dataclass(slots=True)
class SnapshotProgress:
    """Per-table figures, and the lines to log every ``interval`` seconds."""

    interval: float = 5.0
    tables: dict[str, TableFigures] = field(default_factory=dict)
    running: bool = False
    _next: float = 0.0

    def add(self, table: str, estimated_rows: int, chunks: int, rows: int = 0, nbytes: int = 0,
            chunks_done: int = 0) -> None:  # fmt: skip
        self.tables[table] = TableFigures(
            table, estimated_rows, chunks, rows, nbytes, chunks_done, base_rows=rows,
            base_bytes=nbytes,
        )  # fmt: skip

    def copied(self, table: str, rows: int, nbytes: int, now: float) -> None:
        figures = self.tables[table]
        if figures.started is None:
            figures.started = now
        figures.rows += rows
        figures.nbytes += nbytes

    def chunk_done(self, table: str, now: float) -> None:
        figures = self.tables[table]
        figures.chunks_done += 1
        if figures.chunks_done == figures.chunks:
            figures.finished = now

    def due(self, now: float) -> bool:
        if now >= self._next:
            self._next = now + self.interval
            return True
        return False

    def lines(self, now: float) -> list[str]:
        """One line per table that is being copied (started, not finished)."""
        return [
            self.line(f, now)
            for f in self.tables.values()
            if f.started is not None and f.finished is None
        ]

    @staticmethod
    def line(f: TableFigures, now: float) -> str:
        elapsed = max(now - (f.started if f.started is not None else now), 1e-9)
        rate = (f.rows - f.base_rows) / elapsed
        estimate = max(f.estimated_rows, f.rows)
        percent = f"{100 * f.rows / estimate:.0f}%" if estimate else "?"
        left = (estimate - f.rows) / rate if rate > 0 else 0.0
        return (
            f"snapshot {f.table}: {f.rows}/{f.estimated_rows} rows ({percent}), "
            f"{f.nbytes / 1e6:.1f} MB, chunks {f.chunks_done}/{f.chunks}, "
            f"{rate:,.0f} rows/s, {(f.nbytes - f.base_bytes) / 1e6 / elapsed:.1f} MB/s, "
            f"ETA {format_duration(left)}"
        )


#: The progress of this process's snapshot, if one ran: what the metrics endpoint exports
#: (bridge.snapshot.metrics). Set by the copier; read, never written, by the HTTP thread.
CURRENT: SnapshotProgress | None = None
