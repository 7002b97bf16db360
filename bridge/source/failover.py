"""Failover slots (PostgreSQL 17+) and telling a primary from a standby.

A slot created with ``failover`` is synchronised by a physical standby that runs with
``sync_replication_slots = on``; once that standby is promoted the slot is there, at a position
no later than what the old primary confirmed (the primary's ``synchronized_standby_slots`` keeps
the bridge from being sent WAL the standby has not received), so streaming resumes on the new
primary without loss: at most the transactions after the synced position are sent again.

A standby (still in recovery) must never get a slot of its own nor be streamed from: PostgreSQL
16+ accepts logical slots on standbys, so a connection that lands on one by mistake would
create a slot that no failover ever brings back. Each connection therefore asks
``pg_is_in_recovery()`` on *itself* (not on a side connection, which a multi-host DSN may send
to another host), and a standby is retried like a lost connection: it may be about to be
promoted, and with several hosts in the DSN the next attempt may find the primary.
"""

from __future__ import annotations

import logging

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from bridge.source.errors import (
    FailoverSlotUnsupportedError,
    ReplicationConnectionLost,
    ServerInRecoveryError,
    SlotInUseError,
    SourceError,
)
from bridge.source.protocol import quote_ident

logger = logging.getLogger(__name__)

__all__ = [
    "FAILOVER_MIN_VERSION",
    "check_failover_supported",
    "check_not_in_recovery",
    "enable_failover",
    "server_address",
]

#: ``server_version_num`` from which slots have the ``failover`` property.
FAILOVER_MIN_VERSION = 170000


def check_failover_supported(server_version_num: int) -> None:
    """Raise :class:`FailoverSlotUnsupportedError` below PostgreSQL 17."""
    if server_version_num < FAILOVER_MIN_VERSION:
        raise FailoverSlotUnsupportedError(server_version_num)


def server_address(pgconn: pq.abc.PGconn) -> str:
    """``host:port`` of the server a connection reached (of a multi-host DSN, the one chosen)."""
    host = (pgconn.host or b"").decode("utf-8", "replace") or "?"
    port = (pgconn.port or b"").decode("utf-8", "replace") or "?"
    return f"{host}:{port}"


def check_not_in_recovery(pgconn: pq.abc.PGconn) -> None:
    """Raise :class:`ServerInRecoveryError` when the connection's server is a standby.

    Uses the simple query protocol, so it works on a replication connection too (a walsender
    with ``replication=database`` runs SQL, but only in simple queries)."""
    result = pgconn.exec_(b"SELECT pg_catalog.pg_is_in_recovery()")
    if result.status != pq.ExecStatus.TUPLES_OK:
        message = result.error_message.decode("utf-8", "replace").strip()
        raise SourceError(f"checking pg_is_in_recovery() failed: {message}")
    if result.get_value(0, 0) == b"t":
        raise ServerInRecoveryError(server_address(pgconn))


def enable_failover(dsn: str, slot_name: str) -> None:
    """Turn on ``failover`` of an existing slot (PostgreSQL 17+): ``ALTER_REPLICATION_SLOT``
    exists only in the replication protocol, hence the replication connection. The slot must
    not be in use, so this runs before streaming starts."""
    try:
        conn = psycopg.connect(make_conninfo(dsn, replication="database"), autocommit=True)
    except psycopg.OperationalError as exc:
        raise ReplicationConnectionLost(str(exc).strip(), exc.sqlstate) from exc
    with conn:
        pgconn = conn.pgconn
        check_not_in_recovery(pgconn)
        check_failover_supported(pgconn.server_version)
        command = f"ALTER_REPLICATION_SLOT {quote_ident(slot_name)} ( FAILOVER true )"
        result = pgconn.exec_(command.encode())
        if result.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
            raw = result.error_field(pq.DiagnosticField.SQLSTATE)
            sqlstate = raw.decode() if raw else None
            message = result.error_message.decode("utf-8", "replace").strip()
            if sqlstate == "55006":
                raise SlotInUseError(slot_name, None, message)
            raise SourceError(
                f"enabling failover on replication slot {slot_name!r} failed: {message}",
                sqlstate=sqlstate,
            )
    logger.info(
        "replication slot %s now has failover = true: standbys with sync_replication_slots = on "
        "synchronise it",
        slot_name,
    )
