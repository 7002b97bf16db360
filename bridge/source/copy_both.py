"""libpq's side of a replication connection: its conninfo, and ending its COPY BOTH politely.

Kept apart from :mod:`bridge.source.replication`, which runs the stream, because neither needs
the stream's state: a conninfo is the configuration's, the end of a copy is the connection's.
"""

from __future__ import annotations

import select
from collections.abc import Callable

from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bridge.source.config import SourceConfig
from bridge.source.errors import ReplicationConnectionLost

__all__ = ["end_copy", "replication_conninfo", "text"]


def replication_conninfo(config: SourceConfig) -> str:
    """The DSN with ``replication=database``, the application name, and the server settings
    the stream wants (``-c name=value`` appended to the DSN's own ``options``)."""
    params = conninfo_to_dict(config.dsn)
    options = str(params.get("options") or "")
    extra = " ".join(f"-c {k}={_escape_option(v)}" for k, v in config.server_options)
    return make_conninfo(
        config.dsn,
        replication="database",
        application_name=config.application_name,
        options=f"{options} {extra}".strip() or None,
    )


def end_copy(pgconn: pq.abc.PGconn, clock: Callable[[], float], timeout: float = 5.0) -> None:
    """End COPY BOTH politely so the server has processed the last status update.

    The walsender answers our CopyDone with its own and then CommandComplete; waiting for
    that (bounded) means the confirmed position is visible in pg_replication_slots when
    the source's close() returns, instead of whenever the walsender notices the socket closed.
    """
    deadline = clock() + timeout
    pgconn.put_copy_end()
    pgconn.flush()
    while True:
        nbytes, _ = pgconn.get_copy_data(1)
        if nbytes == -1:
            break
        if nbytes > 0:
            continue  # data after our last acknowledgement: the next start resends it
        remaining = deadline - clock()
        if remaining <= 0:
            raise ReplicationConnectionLost("no CopyDone from the server in time")
        select.select([pgconn.socket], [], [], remaining)
        pgconn.consume_input()
    while pgconn.is_busy():
        remaining = deadline - clock()
        if remaining <= 0:
            raise ReplicationConnectionLost("no CommandComplete from the server in time")
        select.select([pgconn.socket], [], [], remaining)
        pgconn.consume_input()
    while pgconn.get_result() is not None:
        pass


def text(raw: bytes | str) -> str:
    """A libpq message as text (libpq gives bytes in the server's encoding, UTF-8 here)."""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace").strip()
    return raw.strip()


def _escape_option(value: str) -> str:
    # libpq splits the "options" parameter at spaces unless they are backslash-escaped.
    return value.replace("\\", "\\\\").replace(" ", "\\ ")
