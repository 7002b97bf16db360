"""The snapshot's progress bars on a terminal: the figures a person watches, redrawn in place,
never over a log line written in between; log lines when standard error is not a terminal."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from bridge.snapshot.progress import SnapshotProgress, TableFigures
from bridge.snapshot.terminal import TerminalProgress, bar_line, terminal_for


def test_bar_line_shows_rows_bytes_rate_and_time_left() -> None:
    f = TableFigures("public.big", estimated_rows=10_000_000, chunks=100, rows=2_500_000,
                     nbytes=360_000_000, started=0.0)  # fmt: skip
    line = bar_line(f, now=10.0, width=8)
    assert line == (
        "public.big  [##......]  25%  2,500,000/~10,000,000 rows  360.0 MB  250,000 rows/s  "
        "30s left"
    )
    done = TableFigures("public.t", 0, 1, rows=5, nbytes=100, started=0.0, finished=1.0)
    assert bar_line(done, now=2.0, width=4).startswith("public.t  [####] 100%  5/~5 rows")
    assert bar_line(done, now=2.0).endswith("done")


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def handler() -> Iterator[logging.Handler]:
    root = logging.getLogger()
    added = logging.StreamHandler(io.StringIO())
    root.addHandler(added)
    yield added
    root.removeHandler(added)


def test_terminal_redraws_in_place_but_never_over_a_log_line(handler: logging.Handler) -> None:
    progress = SnapshotProgress()
    progress.add("public.a", 100, 1)
    progress.add("public.b", 100, 1)
    progress.copied("public.a", 10, 1000, 0.0)
    progress.copied("public.b", 20, 2000, 0.0)
    stream = Tty()
    terminal = terminal_for(stream)
    assert isinstance(terminal, TerminalProgress)
    terminal.draw(progress, 1.0)
    first = stream.getvalue()
    assert "\x1b[2F" not in first and first.count("\n") == 2
    terminal.draw(progress, 2.0)
    assert stream.getvalue()[len(first) :].startswith("\x1b[2F")  # up over its two lines
    logging.getLogger("bridge.test").warning("something happened")
    mark = len(stream.getvalue())
    terminal.draw(progress, 3.0)
    assert stream.getvalue()[mark:].startswith("\x1b[2Kpublic.a")  # below the log line
    terminal.close()
    assert not any(isinstance(f, type(terminal._noticed)) for f in handler.filters)


def test_no_terminal_no_bars() -> None:
    assert terminal_for(io.StringIO()) is None
