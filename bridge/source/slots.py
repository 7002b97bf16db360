"""Slot and publication management over an ordinary (non-replication) connection.

Creates what is missing, validates what exists, and refuses with a typed error what cannot
work: a server older than 13, a standby (in recovery), ``wal_level`` below logical, a role
without REPLICATION, a slot of another plugin, database or with ``two_phase``, an invalidated
slot, a publication that does not publish what the configuration says, ``failover`` asked of a
server older than 17 (see :mod:`bridge.source.failover`). A slot is never dropped unless
:func:`drop_slot` is called explicitly: dropping it loses the position and lets the server
discard WAL not yet streamed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
from psycopg import sql

from bridge.pgoutput.lsn import INVALID_LSN, Lsn
from bridge.source.config import PublicationConfig, PublicationMode
from bridge.source.errors import (
    PublicationMismatchError,
    PublicationMissingError,
    ReplicationPrivilegeError,
    ServerInRecoveryError,
    SlotInvalidatedError,
    SlotMismatchError,
    SlotMissingError,
    WalLevelError,
)
from bridge.source.failover import check_failover_supported, server_address
from bridge.source.protocol import negotiate

logger = logging.getLogger(__name__)

__all__ = [
    "ServerInfo",
    "SlotInfo",
    "desired_tables",
    "drop_slot",
    "ensure_publication",
    "ensure_slot",
    "get_slot",
    "inspect_server",
    "validate_slot",
]

_SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")


@dataclass(frozen=True, slots=True)
class ServerInfo:
    version_num: int
    wal_level: str
    database: str
    user: str
    can_replicate: bool  # superuser or REPLICATION


@dataclass(frozen=True, slots=True)
class SlotInfo:
    name: str
    plugin: str | None
    slot_type: str
    database: str | None
    active_pid: int | None
    confirmed_flush_lsn: Lsn
    restart_lsn: Lsn | None
    wal_status: str | None  # reserved / extended / unreserved / lost
    two_phase: bool
    invalidation_reason: str | None  # PostgreSQL 17+, or "conflicting" on 16
    failover: bool = False  # PostgreSQL 17+: synchronised to standbys (sync_replication_slots)
    synced: bool = False  # PostgreSQL 17+: synchronised from a primary (this server is or was
    # its standby); usable for streaming only once the server is promoted


def inspect_server(conn: psycopg.Connection[tuple[object, ...]]) -> ServerInfo:
    """Server facts, checked: version >= 13, a primary (not in recovery), wal_level logical,
    role may replicate. A standby raises :class:`ServerInRecoveryError` (retryable): nothing may
    be created there, and it may be promoted soon."""
    row = conn.execute(
        "SELECT current_setting('server_version_num')::int, current_setting('wal_level'),"
        " current_database(), current_user,"
        " (SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user),"
        " pg_catalog.pg_is_in_recovery()"
    ).fetchone()
    assert row is not None
    info = ServerInfo(int(str(row[0])), str(row[1]), str(row[2]), str(row[3]), bool(row[4]))
    negotiate(info.version_num, ())  # raises ServerVersionError below the minimum
    if row[5]:
        raise ServerInRecoveryError(server_address(conn.pgconn))
    if info.wal_level != "logical":
        raise WalLevelError(info.wal_level)
    if not info.can_replicate:
        raise ReplicationPrivilegeError(info.user, "checked in pg_roles before connecting")
    return info


# -- publication -------------------------------------------------------------------------------


def desired_tables(
    conn: psycopg.Connection[tuple[object, ...]], config: PublicationConfig
) -> list[tuple[str, str]]:
    """The (schema, table) list a FILTERED publication should contain, sorted."""
    rows = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        # Ordinary and partitioned tables; partitions are published through their root.
        " WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition"
        " AND n.nspname <> ALL(%s) AND n.nspname NOT LIKE 'pg\\_%%'",
        (list(_SYSTEM_SCHEMAS),),
    ).fetchall()
    everything = {(str(s), str(t)) for s, t in rows}
    if config.include_schemas or config.include_tables:
        wanted_tables = {tuple(t.split(".", 1)) for t in config.include_tables}
        chosen = {
            (s, t) for s, t in everything if s in config.include_schemas or (s, t) in wanted_tables
        }
        missing = wanted_tables - everything
        if missing:
            names = ", ".join(sorted(f"{s}.{t}" for s, t in missing))
            raise PublicationMismatchError(config.name, f"included tables do not exist: {names}")
    else:
        chosen = everything
    excluded = {tuple(t.split(".", 1)) for t in config.exclude_tables}
    return sorted(chosen - excluded)


def _table_list(tables: list[tuple[str, str]]) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(s, t) for s, t in tables)


def publication_options(server_version: int) -> sql.Composable:
    """The options of a publication pgbridge creates: a partitioned table's changes as the
    partitioned table's own (one topic per table, whatever partition a row lives in or moves
    to, as Debezium recommends), and from PostgreSQL 18 the stored generated columns (before
    18 the server never publishes them: they are absent from the Relation, hence the topics)."""
    options = ["publish_via_partition_root = true"]
    if server_version >= 180000:
        options.append("publish_generated_columns = stored")
    return sql.SQL("WITH ({})").format(sql.SQL(", ").join(sql.SQL(o) for o in options))


def ensure_publication(
    conn: psycopg.Connection[tuple[object, ...]], config: PublicationConfig
) -> None:
    """Create the publication if missing and allowed; check or reconcile an existing one."""
    row = conn.execute(
        "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate"
        " FROM pg_publication WHERE pubname = %s",
        (config.name,),
    ).fetchone()
    name = sql.Identifier(config.name)
    if row is None:
        if config.mode is PublicationMode.USER or not config.create:
            raise PublicationMissingError(config.name)
        options = publication_options(conn.info.server_version)
        if config.mode is PublicationMode.ALL_TABLES:
            conn.execute(sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES {}").format(name, options))
        else:
            tables = desired_tables(conn, config)
            if tables:
                conn.execute(
                    sql.SQL("CREATE PUBLICATION {} FOR TABLE {} {}").format(
                        name, _table_list(tables), options
                    )
                )
            else:
                conn.execute(sql.SQL("CREATE PUBLICATION {} {}").format(name, options))
        logger.info("created publication %s (%s)", config.name, config.mode.value)
        return
    all_tables = bool(row[0])
    if not all(row[1:]):
        logger.warning(
            "publication %s does not publish every operation "
            "(insert=%s update=%s delete=%s truncate=%s)",
            config.name,
            *row[1:],
        )
    if config.mode is PublicationMode.ALL_TABLES and not all_tables:
        raise PublicationMismatchError(config.name, "exists but is not FOR ALL TABLES")
    if config.mode is PublicationMode.FILTERED:
        if all_tables:
            raise PublicationMismatchError(
                config.name, "is FOR ALL TABLES but mode 'filtered' wants a table list"
            )
        _reconcile_tables(conn, config)


def _reconcile_tables(
    conn: psycopg.Connection[tuple[object, ...]], config: PublicationConfig
) -> None:
    # pg_publication_rel holds the members as added (a partitioned root stays the root), unlike
    # pg_publication_tables, which expands roots into their partitions.
    current = {
        (str(s), str(t))
        for s, t in conn.execute(
            "SELECT n.nspname, c.relname FROM pg_publication_rel pr"
            " JOIN pg_publication p ON p.oid = pr.prpubid"
            " JOIN pg_class c ON c.oid = pr.prrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE p.pubname = %s",
            (config.name,),
        ).fetchall()
    }
    wanted = desired_tables(conn, config)
    if current == set(wanted):
        return
    name = sql.Identifier(config.name)
    to_add = sorted(set(wanted) - current)
    to_drop = sorted(current - set(wanted))
    if to_add:
        conn.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(name, _table_list(to_add)))
    if to_drop:
        conn.execute(
            sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(name, _table_list(to_drop))
        )
    logger.info(
        "publication %s reconciled: added %s, dropped %s",
        config.name,
        to_add or "-",
        to_drop or "-",
    )


# -- slot ---------------------------------------------------------------------------------------


def get_slot(conn: psycopg.Connection[tuple[object, ...]], slot_name: str) -> SlotInfo | None:
    """The slot's row of pg_replication_slots, with version-dependent columns filled in."""
    version = conn.info.server_version
    two_phase = "two_phase" if version >= 140000 else "false"
    if version >= 170000:
        reason = "invalidation_reason"
    elif version >= 160000:
        reason = "CASE WHEN conflicting THEN 'conflicting' END"
    else:
        reason = "NULL"
    failover = "failover, synced" if version >= 170000 else "false, false"
    query = (
        "SELECT slot_name, plugin, slot_type, database, active_pid,"
        " confirmed_flush_lsn::text, restart_lsn::text, wal_status,"
        f" {two_phase}, {reason}, {failover} FROM pg_replication_slots WHERE slot_name = %s"
    )
    row = conn.execute(query, (slot_name,)).fetchone()
    if row is None:
        return None
    return SlotInfo(
        name=str(row[0]),
        plugin=None if row[1] is None else str(row[1]),
        slot_type=str(row[2]),
        database=None if row[3] is None else str(row[3]),
        active_pid=None if row[4] is None else int(str(row[4])),
        confirmed_flush_lsn=INVALID_LSN if row[5] is None else Lsn.parse(str(row[5])),
        restart_lsn=None if row[6] is None else Lsn.parse(str(row[6])),
        wal_status=None if row[7] is None else str(row[7]),
        two_phase=bool(row[8]),
        invalidation_reason=None if row[9] is None else str(row[9]),
        failover=bool(row[10]),
        synced=bool(row[11]),
    )


def validate_slot(slot: SlotInfo, database: str) -> None:
    """Raise unless ``slot`` can stream pgoutput for ``database``."""
    if slot.slot_type != "logical":
        raise SlotMismatchError(slot.name, "slot_type", "logical", slot.slot_type)
    if slot.plugin != "pgoutput":
        raise SlotMismatchError(slot.name, "plugin", "pgoutput", str(slot.plugin))
    if slot.database != database:
        raise SlotMismatchError(slot.name, "database", database, str(slot.database))
    if slot.two_phase:
        # With two_phase the server sends PREPARE-time messages pgbridge does not buffer.
        raise SlotMismatchError(slot.name, "two_phase", "false", "true")
    if slot.wal_status == "lost":
        raise SlotInvalidatedError(slot.name, "wal_status = lost: required WAL was removed")
    if slot.invalidation_reason is not None:
        raise SlotInvalidatedError(slot.name, slot.invalidation_reason)


def ensure_slot(
    conn: psycopg.Connection[tuple[object, ...]],
    slot_name: str,
    database: str,
    *,
    create: bool,
    failover: bool = False,
) -> SlotInfo:
    """The validated slot, created (pgoutput, no two_phase) when missing and ``create``.

    With ``failover`` (PostgreSQL 17+, else :class:`FailoverSlotUnsupportedError`) a new slot is
    created with ``failover => true``; an existing one without it is returned as it is, for the
    caller to alter over a replication connection (:func:`bridge.source.failover.enable_failover`:
    ``ALTER_REPLICATION_SLOT`` has no SQL function)."""
    if failover:
        check_failover_supported(conn.info.server_version)
    slot = get_slot(conn, slot_name)
    if slot is None:
        if not create:
            raise SlotMissingError(slot_name)
        if failover:
            # (slot_name, plugin, temporary, twophase, failover)
            conn.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, false, true)",
                (slot_name,),
            )
        else:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot_name,))
        logger.info("created replication slot %s%s", slot_name, " (failover)" if failover else "")
        slot = get_slot(conn, slot_name)
        assert slot is not None
    validate_slot(slot, database)
    return slot


def drop_slot(conn: psycopg.Connection[tuple[object, ...]], slot_name: str) -> bool:
    """Drop the slot if it exists; only ever called on an explicit user request."""
    row = conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (slot_name,),
    ).fetchone()
    if row is not None:
        logger.warning("dropped replication slot %s", slot_name)
    return row is not None
