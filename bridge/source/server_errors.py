"""What libpq and psycopg report on the replication connection, as typed :class:`SourceError`s
that name the slot, the publication and the user (bridge.source.errors.classify_server_error)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import pq

from bridge.source.copy_both import text
from bridge.source.errors import ReplicationConnectionLost, SourceError, classify_server_error

__all__ = ["ServerErrors"]


@dataclass(frozen=True, slots=True)
class ServerErrors:
    """The typed error for what the server or the connection said, for one slot."""

    slot: str
    publication: str
    user: str | None

    def from_result(self, result: pq.abc.PGresult | None, pgconn: pq.abc.PGconn) -> SourceError:
        """A failed command's result (None: the connection went away)."""
        if result is None:
            return ReplicationConnectionLost(text(pgconn.get_error_message()))
        sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
        message = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY)
        detail = result.error_field(pq.DiagnosticField.MESSAGE_DETAIL)
        return classify_server_error(
            self.slot,
            self.publication,
            sqlstate.decode() if sqlstate else None,
            text(message or result.error_message or pgconn.get_error_message()),
            text(detail or b""),
            self.user,
        )

    def from_exception(self, exc: psycopg.Error) -> SourceError:
        diag = exc.diag
        return classify_server_error(
            self.slot,
            self.publication,
            exc.sqlstate,
            diag.message_primary or str(exc),
            diag.message_detail or "",
            self.user,
        )

    def stream_ended(self, pgconn: pq.abc.PGconn, exc: BaseException | None) -> SourceError:
        """Why the replication stream ended: after CopyDone or an error, the final result
        carries the server's reason (a terminated walsender sends FATAL 57P01 before closing)."""
        result = None
        try:
            result = pgconn.get_result()
        except psycopg.Error:
            result = None
        if result is not None and result.status == pq.ExecStatus.FATAL_ERROR:
            return self.from_result(result, pgconn)
        detail = str(exc) if exc is not None else text(pgconn.get_error_message())
        return ReplicationConnectionLost(detail or "the server ended the replication stream")
