"""``COPY … TO STDOUT`` read with libpq's own calls: many CopyData messages per call with the
GIL released where the C module is built (:mod:`bridge.native.pq`), else one per step.

psycopg's ``Copy`` iterator runs a generator, a wait loop and two method calls per message
before it returns a row; the snapshot reads one message per row, and that machinery was the
larger part of a worker's time (py-spy: about 1 µs of the 2 µs per row the worker held the
GIL). Here a message already buffered by libpq is one ``get_copy_data(1)`` call; only when the
buffer is empty does the loop wait on the socket, as the replication stream does
(:mod:`bridge.source.replication`). Errors are psycopg's own (``error_from_result``), so the
callers' classification of server errors is unchanged.

The connection must be idle (inside a transaction or not) and used by no other thread
meanwhile (the snapshot gives each worker its own). A COPY
abandoned half-way (the caller stops iterating) leaves the connection in the COPY state:
the snapshot closes such a connection, it never reuses it.
"""

from __future__ import annotations

import select
from collections.abc import Iterator

import psycopg
from psycopg import errors as pgerrors
from psycopg import pq

from bridge.native.pq import copy_data_reader

__all__ = ["copy_out"]

_WAIT_S = 1.0  # a wait on the socket wakes up this often (the query has no timeout of its own)
_WAIT_MS = int(_WAIT_S * 1000)
_FRAMES, _FRAME_BYTES = 2048, 1 << 20  # messages per read_frames call, at most


def copy_out(conn: psycopg.Connection[object], statement: str) -> Iterator[list[bytes]]:
    """The CopyData messages of ``statement`` (a ``COPY … TO STDOUT``), in order, in blocks of
    the messages that had arrived (so that a caller can hand a block to C in one call)."""
    # Not under conn.lock: a generator abandoned by an exception would keep holding it.
    pgconn = conn.pgconn
    pgconn.send_query(statement.encode())
    _flush(pgconn)
    result = _result(pgconn)
    if result is None or result.status != pq.ExecStatus.COPY_OUT:
        _finish(pgconn, result)
        raise psycopg.ProgrammingError(f"not a COPY TO STDOUT: {statement[:80]}")
    reader = copy_data_reader()
    address = getattr(pgconn, "pgconn_ptr", None)  # not in the pq protocol class
    if reader is not None and address is not None:
        # Many messages per call, read with the GIL released (the other workers run).
        read = reader.read_frames
        while True:
            frames, status = read(address, _FRAMES, _FRAME_BYTES, _WAIT_MS)
            if frames:
                yield frames
            if status == -1:  # the end of the COPY
                break
            if status != 0:
                raise psycopg.OperationalError(_message(pgconn))
            if not frames and pgconn.status != pq.ConnStatus.OK:
                raise psycopg.OperationalError(_message(pgconn))
        _finish(pgconn, _result(pgconn))
        return
    get = pgconn.get_copy_data
    block: list[bytes] = []
    while True:
        nbytes, data = get(1)
        if nbytes > 0:
            block.append(bytes(data))
            if len(block) < _FRAMES:
                continue
        if block:
            yield block
            block = []
        if nbytes == 0:  # nothing buffered: wait for the server
            _readable(pgconn)
            pgconn.consume_input()
        elif nbytes == -1:  # the end of the COPY: its command result follows
            break
        elif nbytes < 0:
            raise psycopg.OperationalError(_message(pgconn))
    _finish(pgconn, _result(pgconn))


def _finish(pgconn: pq.abc.PGconn, first: pq.abc.PGresult | None) -> None:
    """Read every result left; raise the first error among them."""
    error: pq.abc.PGresult | None = None
    result = first
    while result is not None:
        if error is None and result.status not in (
            pq.ExecStatus.COMMAND_OK,
            pq.ExecStatus.TUPLES_OK,
            pq.ExecStatus.COPY_OUT,
        ):
            error = result
        result = _result(pgconn)
    if error is not None:
        raise pgerrors.error_from_result(error, encoding=pgconn._encoding)  # psycopg's own


def _result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    """The next result, waiting for the socket while libpq is busy."""
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            return pgconn.get_result()
        _readable(pgconn)


def _flush(pgconn: pq.abc.PGconn) -> None:
    while pgconn.flush():
        select.select([], [pgconn.socket], [], _WAIT_S)


def _readable(pgconn: pq.abc.PGconn) -> None:
    while not select.select([pgconn.socket], [], [], _WAIT_S)[0]:
        if pgconn.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError(_message(pgconn))


def _message(pgconn: pq.abc.PGconn) -> str:
    return pgconn.get_error_message() or "the connection was lost during COPY"
