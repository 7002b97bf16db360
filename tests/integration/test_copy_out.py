"""The snapshot's COPY reader (libpq calls, no psycopg Copy object) against a real server:
the same messages as psycopg's own reader, server errors as psycopg's typed errors, and the
connection usable afterwards; both ways of reading (the C module's many messages per call,
and psycopg's libpq calls one message at a time where it is not built)."""

from __future__ import annotations

import os

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.native.pq import copy_data_reader
from bridge.snapshot import copy_out as copy_out_module
from bridge.snapshot.copy_out import copy_out

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True, params=["read_frames", "get_copy_data"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "read_frames":
        if os.environ.get("PGBRIDGE_NATIVE") == "0":
            pytest.skip("PGBRIDGE_NATIVE=0: the C module is turned off on purpose")
        assert copy_data_reader() is not None, "the C module is built in the test environment"
    else:
        monkeypatch.setattr(copy_out_module, "copy_data_reader", lambda: None)


def messages(conn: psycopg.Connection[object], statement: str) -> list[bytes]:
    blocks = list(copy_out(conn, statement))
    assert all(blocks), "no empty block"
    return [message for block in blocks for message in block]


# Rows of varying size, some far larger than a socket buffer (the reader waits mid-row).
ROWS = (
    "COPY (SELECT g, repeat(md5(g::text), CASE WHEN g % 500 = 0 THEN 40000 ELSE 1 END) "
    "FROM generate_series(1, 20000) g) TO STDOUT (FORMAT binary)"
)


def test_copy_out_reads_what_psycopg_reads_and_leaves_the_connection_usable(
    local_stack: StackInfo,
) -> None:
    with psycopg.connect(local_stack.postgres_dsn(), autocommit=True) as conn:
        with conn.cursor() as cur, cur.copy(ROWS) as copy:
            expected = [bytes(m) for m in copy]
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        got = messages(conn, ROWS)
        assert got == expected
        assert len(got) >= 20000  # a message per row, as the server sent them
        # Still inside the transaction, and usable.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert conn.execute("SELECT 41 + 1").fetchone() == (42,)
        conn.execute("COMMIT")


def test_copy_out_server_errors_are_psycopg_errors(local_stack: StackInfo) -> None:
    with psycopg.connect(local_stack.postgres_dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            messages(conn, "COPY (SELECT * FROM no_such_table) TO STDOUT (FORMAT binary)")
        assert conn.execute("SELECT 1").fetchone() == (1,)
        # An error after rows were sent: the rows came, then the error.
        failing = (
            "COPY (SELECT 1 / (g - 15000) FROM generate_series(1, 20000) g) "
            "TO STDOUT (FORMAT binary)"
        )
        rows = 0
        with pytest.raises(psycopg.errors.DivisionByZero):
            for block in copy_out(conn, failing):
                rows += len(block)
        assert rows > 1
        assert conn.execute("SELECT 2").fetchone() == (2,)
        with pytest.raises(psycopg.ProgrammingError, match="not a COPY TO STDOUT"):
            messages(conn, "SELECT 3")
        assert conn.execute("SELECT 4").fetchone() == (4,)
