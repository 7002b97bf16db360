"""The snapshot's progress as bars on a terminal, redrawn in place; log lines elsewhere.

Used when standard error is a terminal (:func:`terminal_for`): one line per table being copied,
with a bar, rows done against ``pg_class.reltuples``, MB, rate and time left, redrawn about
once a second. Log records written in between are never overwritten: a filter on the root
logger's handlers notices them, and the next drawing starts below them instead of moving up.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from bridge.snapshot.progress import SnapshotProgress, TableFigures, format_duration

__all__ = ["TerminalProgress", "bar_line", "terminal_for"]

BAR_WIDTH = 24
#: Redraws at most this often (s), whatever snapshot.progress.interval.ms says for log lines.
REDRAW_INTERVAL = 1.0


def bar_line(f: TableFigures, now: float, width: int = BAR_WIDTH) -> str:
    """``public.big  [#########...............]  38%  3,812,000/~10,000,000 rows  550.1 MB
    258,899 rows/s  24s left`` (the estimate is ``~`` because reltuples is one)."""
    elapsed = max(now - (f.started if f.started is not None else now), 1e-9)
    rate = (f.rows - f.base_rows) / elapsed
    estimate = max(f.estimated_rows, f.rows)
    done = f.finished is not None
    fraction = 1.0 if done else (f.rows / estimate if estimate else 0.0)
    filled = min(width, int(fraction * width))
    left = (
        "done" if done else f"{format_duration((estimate - f.rows) / rate)} left" if rate else "?"
    )
    return (
        f"{f.table}  [{'#' * filled}{'.' * (width - filled)}] {100 * fraction:3.0f}%  "
        f"{f.rows:,}/~{estimate:,} rows  {f.nbytes / 1e6:,.1f} MB  {rate:,.0f} rows/s  {left}"
    )


class _Noticed(logging.Filter):
    """Lets every record through, remembering that one was written."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen = True
        return True


class TerminalProgress:
    """Draws :class:`SnapshotProgress` on ``stream``, moving up over its previous drawing."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._drawn = 0  # lines of the previous drawing, still right above the cursor
        self._noticed = _Noticed()
        for handler in logging.getLogger().handlers:
            handler.addFilter(self._noticed)

    def draw(self, progress: SnapshotProgress, now: float) -> None:
        lines = [bar_line(f, now) for f in progress.tables.values() if f.started is not None]
        out = []
        if self._drawn and not self._noticed.seen:
            out.append(f"\x1b[{self._drawn}F")  # to the start of the previous drawing
        self._noticed.seen = False
        out.extend(f"\x1b[2K{line}\n" for line in lines)
        self.stream.write("".join(out))
        self.stream.flush()
        self._drawn = len(lines)

    def close(self) -> None:
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self._noticed)


def terminal_for(stream: TextIO | None = None) -> TerminalProgress | None:
    """A display on ``stream`` (default standard error) when it is a terminal, else None."""
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    return TerminalProgress(stream) if isatty is not None and isatty() else None
