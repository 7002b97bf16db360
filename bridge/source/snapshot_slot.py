"""Creating the slot together with an exported snapshot, for the snapshot -> stream hand-off.

A consistent initial copy needs the database as of exactly the point where the slot starts:
``CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT`` (``(SNAPSHOT 'export')`` from PostgreSQL 15) on a
replication connection returns the slot's ``consistent_point`` and a snapshot name. Another
connection runs ``BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '<name>'``
and reads every table as of that point; streaming the slot afterwards delivers exactly the
changes committed after it, so rows are neither missed nor doubled. The snapshot can be imported
only while the creating connection stays open and runs no other command, hence the context
manager. Create the publication first (:func:`bridge.source.slots.ensure_publication`): the
server matches each change against publications as the catalog was when the change was made,
so a publication created after the slot's start misses what came before it.

Like the rest of the replication path this runs on psycopg's ``pq`` layer: a walsender only
speaks the simple query protocol, which ``Connection.execute`` does not use.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from bridge.pgoutput.lsn import Lsn
from bridge.source.errors import SourceError, classify_server_error
from bridge.source.failover import check_failover_supported, check_not_in_recovery
from bridge.source.protocol import quote_ident

logger = logging.getLogger(__name__)

__all__ = ["ExportedSnapshot", "SlotWithSnapshot"]


@dataclass(frozen=True, slots=True)
class ExportedSnapshot:
    """The new slot, where it starts, and the snapshot that matches that start."""

    slot_name: str
    consistent_point: Lsn
    snapshot_name: str


class SlotWithSnapshot:
    """Context manager: creates a pgoutput slot with an exported snapshot, kept importable
    until exit. The slot itself stays (it is never dropped here)."""

    def __init__(
        self, dsn: str, slot_name: str, publication: str = "", *, failover: bool = False
    ) -> None:
        self._dsn = dsn
        self._slot_name = slot_name
        self._publication = publication  # only for error context
        self._failover = failover  # PostgreSQL 17+: a failover slot (bridge.source.failover)
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None

    def __enter__(self) -> ExportedSnapshot:
        try:
            conn = psycopg.connect(
                make_conninfo(self._dsn, replication="database"), autocommit=True
            )
        except psycopg.OperationalError as exc:
            raise classify_server_error(
                self._slot_name, self._publication, exc.sqlstate, str(exc)
            ) from exc
        self._conn = conn
        pgconn = conn.pgconn
        try:
            check_not_in_recovery(pgconn)  # never a slot of our own on a standby
            if self._failover:
                check_failover_supported(pgconn.server_version)
        except SourceError:
            self.close()
            raise
        slot = quote_ident(self._slot_name)
        if self._failover:
            command = (
                f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput "
                "(SNAPSHOT 'export', FAILOVER true)"
            )
        elif pgconn.server_version >= 150000:
            command = f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput (SNAPSHOT 'export')"
        else:
            command = f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput EXPORT_SNAPSHOT"
        result = pgconn.exec_(command.encode())
        if result.status != pq.ExecStatus.TUPLES_OK:
            sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
            message = result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or b""
            self.close()
            raise classify_server_error(
                self._slot_name,
                self._publication,
                sqlstate.decode() if sqlstate else None,
                message.decode("utf-8", "replace"),
            )
        # Columns: slot_name, consistent_point, snapshot_name, output_plugin.
        point = result.get_value(0, 1)
        name = result.get_value(0, 2)
        if point is None or name is None:
            self.close()
            raise SourceError("CREATE_REPLICATION_SLOT returned no snapshot")
        exported = ExportedSnapshot(self._slot_name, Lsn.parse(point.decode()), name.decode())
        logger.info(
            "created slot %s at %s with snapshot %s",
            exported.slot_name,
            exported.consistent_point,
            exported.snapshot_name,
        )
        return exported

    def close(self) -> None:
        """End the snapshot's lifetime (the slot remains)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
