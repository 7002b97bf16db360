"""``heartbeat.action.query``: a statement run on a connection of its own every
``heartbeat.interval.ms``, so a slot on a quiet database (or one whose changes are all in
tables outside the publication) still sees WAL of its own and can advance (Debezium's key)."""

from __future__ import annotations

import logging

import psycopg

__all__ = ["HeartbeatQuery"]

logger = logging.getLogger(__name__)


class HeartbeatQuery:
    """Runs ``query`` on demand; a failure is logged and the next run connects again."""

    def __init__(self, dsn: str, query: str) -> None:
        self.dsn = dsn
        self.query = query
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def run(self) -> bool:
        """Whether the query ran. A failed heartbeat must not stop streaming."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.dsn, autocommit=True)
            self._conn.execute(self.query.encode())
            return True
        except psycopg.Error as exc:
            logger.warning("heartbeat query failed: %s", exc)
            self.close()
            return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
