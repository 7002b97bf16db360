"""Signals: instructions to a running bridge, in Debezium's formats.

A signal is a row ``(id, type, data)`` of the signal table (``signal.data.collection``; it
must be in the publication, so its inserts reach the bridge through the stream, in commit
order) or a record of the Kafka signal topic (key: the topic prefix; value:
``{"type": …, "data": {…}}``). The types, as Debezium names them:

- ``execute-snapshot``: ``{"data-collections": ["schema.table" or a regex, …], "type":
  "incremental", "additional-conditions": [{"data-collection": …, "filter": …}]}`` (the older
  single ``"additional-condition"`` string is read too): copy those tables while streaming
  (:mod:`bridge.snapshot.incremental`);
- ``stop-snapshot``: ``{"data-collections": […]}`` to drop tables from the running snapshot,
  no list to stop it altogether;
- ``pause-snapshot`` / ``resume-snapshot``;
- ``log``: ``{"message": …}`` written to pgbridge's log;
- ``snapshot-window-open`` / ``snapshot-window-close``: the watermarks the incremental
  snapshot writes itself around each chunk it reads.

Anything else is an :class:`SignalError` that names the signal; the bridge logs it and goes on
(a typo in a signal must not stop the stream).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import sql

from bridge.errors import PgBridgeError

__all__ = [
    "CLOSE_WINDOW",
    "OPEN_WINDOW",
    "PARTITION",
    "PARTITION_CHANGE",
    "Signal",
    "SignalError",
    "SnapshotRequest",
    "cli_signal",
    "ensure_signal_table",
    "parse_signal",
    "send_signal",
    "send_signal_to",
    "signal_table_name",
]

EXECUTE: Final = "execute-snapshot"
STOP: Final = "stop-snapshot"
PAUSE: Final = "pause-snapshot"
RESUME: Final = "resume-snapshot"
LOG: Final = "log"
OPEN_WINDOW: Final = "snapshot-window-open"
CLOSE_WINDOW: Final = "snapshot-window-close"
KNOWN_TYPES: Final = frozenset({EXECUTE, STOP, PAUSE, RESUME, LOG, OPEN_WINDOW, CLOSE_WINDOW})
#: execute-snapshot data the bridge adds for a partition attached or detached while it runs.
PARTITION: Final = "pgbridge-partition"
PARTITION_CHANGE: Final = "pgbridge-partition-change"
PARTITION_CHANGES: Final = ("attached", "detached")


class SignalError(PgBridgeError):
    """A signal that cannot be acted on: which one, and why."""

    def __init__(self, signal_id: str, message: str) -> None:
        super().__init__(f"signal {signal_id!r}: {message}")
        self.signal_id = signal_id


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """What an ``execute-snapshot`` or ``stop-snapshot`` names: table patterns and, per
    pattern, a condition on the rows to copy."""

    collections: tuple[str, ...]
    conditions: tuple[tuple[str, str], ...] = ()  # (data-collection, SQL condition)
    #: The bridge's own requests for a partitioned table (bridge.source.table_watch): read the
    #: rows of this partition (schema.table) only, as the table's, and ...
    partition: str | None = None
    #: ... send them as deletes (it was detached) rather than as snapshot reads (attached).
    detached: bool = False

    def condition_for(self, table: str) -> str | None:
        for collection, condition in self.conditions:
            if collection == table:
                return condition
        return None


@dataclass(frozen=True, slots=True)
class Signal:
    id: str
    type: str
    data: dict[str, Any]

    def snapshot_request(self) -> SnapshotRequest:
        """The tables of an ``execute-snapshot``/``stop-snapshot`` (an empty tuple: all)."""
        raw = self.data.get("data-collections", [])
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(isinstance(c, str) and c for c in raw):
            raise SignalError(self.id, "data-collections must be a list of table names")
        if self.type == EXECUTE and not raw:
            raise SignalError(self.id, "execute-snapshot needs data-collections")
        kind = self.data.get("type", "incremental")
        if str(kind).lower() != "incremental":
            raise SignalError(
                self.id,
                f"snapshot type {kind!r} is not supported: only 'incremental' (blocking "
                "snapshots would stop the stream; an initial snapshot is snapshot.mode)",
            )
        conditions: list[tuple[str, str]] = []
        for item in self.data.get("additional-conditions", []) or []:
            if not isinstance(item, dict):
                raise SignalError(self.id, "additional-conditions must be a list of objects")
            collection, condition = item.get("data-collection"), item.get("filter")
            if not isinstance(collection, str) or not isinstance(condition, str):
                raise SignalError(
                    self.id, "each additional condition needs data-collection and filter"
                )
            conditions.append((collection, condition))
        legacy = self.data.get("additional-condition")
        if isinstance(legacy, str) and legacy.strip():
            conditions.extend((c, legacy) for c in raw)
        partition = self.data.get(PARTITION)
        change = self.data.get(PARTITION_CHANGE, "attached")
        if partition is not None and (
            not isinstance(partition, str) or len(raw) != 1 or change not in PARTITION_CHANGES
        ):
            raise SignalError(
                self.id,
                f"{PARTITION} needs one data-collection and {PARTITION_CHANGE} one of "
                f"{', '.join(PARTITION_CHANGES)}",
            )
        return SnapshotRequest(
            tuple(raw), tuple(conditions), partition, partition is not None and change == "detached"
        )


def parse_signal(signal_id: str, signal_type: str, data: str | None) -> Signal:
    """A signal from its three columns (``data`` is JSON text, may be empty)."""
    if signal_type not in KNOWN_TYPES:
        raise SignalError(signal_id, f"unknown signal type {signal_type!r}")
    parsed: Any = {}
    if data is not None and data.strip():
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise SignalError(signal_id, f"data is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        if signal_type in (OPEN_WINDOW, CLOSE_WINDOW):
            parsed = {}
        else:
            raise SignalError(signal_id, "data must be a JSON object")
    return Signal(signal_id, signal_type, parsed)


def cli_signal(
    tables: list[str], where: str | None, stop: bool, pause: bool, resume: bool
) -> tuple[str, dict[str, Any]]:
    """The signal ``pgbridge snapshot`` sends for its arguments: (type, data)."""
    if pause:
        return PAUSE, {}
    if resume:
        return RESUME, {}
    if stop:
        return STOP, {"data-collections": tables, "type": "incremental"} if tables else {}
    if not tables:
        raise SignalError("pgbridge snapshot", "name at least one table (schema.table)")
    data: dict[str, Any] = {"data-collections": tables, "type": "incremental"}
    if where:
        data["additional-conditions"] = [{"data-collection": t, "filter": where} for t in tables]
    return EXECUTE, data


def send_signal_to(dsn: str, table: str | None, signal_type: str, data: dict[str, Any]) -> str:
    """``pgbridge snapshot``: write one signal into the configured signal table; its id."""
    if table is None:
        raise SignalError(
            "pgbridge snapshot", "no signal table: set signal.data.collection (and restart run)"
        )
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return send_signal(conn, table, signal_type, data)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SignalError(
            "pgbridge snapshot",
            f"the role cannot write the signal table {table} ({_first_line(exc)}); it needs "
            f"GRANT SELECT, INSERT, DELETE ON {table} TO <the role>",
        ) from exc
    except psycopg.errors.UndefinedTable as exc:
        raise SignalError(
            "pgbridge snapshot",
            f"the signal table {table} does not exist: pgbridge run creates it when "
            "signal.table.autocreate is on, or an administrator creates it (see the README)",
        ) from exc
    except psycopg.Error as exc:
        from bridge.source.errors import access_refusal

        refusal = access_refusal(str(exc), getattr(exc, "sqlstate", None))
        if refusal is not None:
            raise refusal from exc
        raise SignalError("pgbridge snapshot", _first_line(exc)) from exc


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def signal_table_name(value: str) -> tuple[str, str]:
    """``schema.table`` (the schema defaults to ``public``)."""
    schema, sep, table = value.partition(".")
    if not sep:
        return "public", value
    return schema, table


def ensure_signal_table(conn: psycopg.Connection[Any], table: str) -> bool:
    """Create the signal table with Debezium's columns if it is missing; True if created."""
    schema, name = signal_table_name(table)
    exists = conn.execute(
        "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        (schema, name),
    ).fetchone()
    if exists:
        return False
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (id varchar(64) PRIMARY KEY, "
            "type varchar(32) NOT NULL, data varchar(8192))"
        ).format(sql.Identifier(schema, name))
    )
    return True


def send_signal(
    conn: psycopg.Connection[Any],
    table: str,
    signal_type: str,
    data: dict[str, Any] | None = None,
    signal_id: str | None = None,
    *,
    if_absent: bool = False,
) -> str:
    """Insert one signal row (committed by the caller's autocommit connection); its id.
    ``if_absent``: a row with that id already there is left as it is."""
    schema, name = signal_table_name(table)
    signal_id = signal_id or uuid.uuid4().hex
    conflict = sql.SQL(" ON CONFLICT (id) DO NOTHING" if if_absent else "")
    conn.execute(
        sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, %s, %s){}").format(
            sql.Identifier(schema, name), conflict
        ),
        (signal_id, signal_type, json.dumps(data or {})),
    )
    return signal_id
