"""``pgbridge check``: before anything is streamed, what works and what would stop the bridge.

It connects with exactly the settings ``pgbridge run`` would use and looks, read-only, at each
part: PostgreSQL (the server's settings, the role's attributes, the slot, the publication or the
right to create it, SELECT on every captured table, a replication connection), Kafka (the
brokers answer) and the schema registry (it answers, credentials accepted). Each finding says
what was checked and, when it fails, what to change. Nothing is created; every network step
has a timeout, so an unreachable part is a finding, never a hang.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from bridge.config import BridgeConfig
from bridge.errors import PgBridgeError
from bridge.source.config import PublicationMode
from bridge.source.errors import access_refusal
from bridge.source.slots import desired_tables

logger = logging.getLogger(__name__)

__all__ = ["Finding", "check", "render"]

#: Bounded answers from every part (seconds).
TIMEOUT_S = 10

Conn = psycopg.Connection[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Finding:
    part: str  # "postgres", "kafka" or "schema registry"
    ok: bool
    what: str  # what was found; for a failure, also what to change

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check(config: BridgeConfig) -> list[Finding]:
    """Every finding, PostgreSQL's first."""
    return [*_postgres(config), _kafka(config), _registry(config)]


def render(findings: list[Finding]) -> str:
    lines = [f"{'ok  ' if f.ok else 'FAIL'} {f.part}: {f.what}" for f in findings]
    failed = sum(not f.ok for f in findings)
    lines.append(
        "everything pgbridge needs is in place"
        if not failed
        else f"{failed} problem(s) would stop pgbridge"
    )
    return "\n".join(lines)


# -- PostgreSQL ----------------------------------------------------------------------------------


def _postgres(config: BridgeConfig) -> list[Finding]:
    from bridge.runner import source_config

    found: list[Finding] = []

    def say(ok: bool, what: str) -> None:
        found.append(Finding("postgres", ok, what))

    dsn = config.database.conninfo()
    try:
        conn: Conn = psycopg.connect(dsn, autocommit=True, connect_timeout=TIMEOUT_S)
    except psycopg.Error as exc:
        refusal = access_refusal(str(exc), exc.sqlstate)
        hint = f" ({refusal.hint})" if refusal is not None else ""
        say(False, f"cannot connect: {_first_line(exc)}{hint}")
        return found
    with conn:
        row = conn.execute(
            "SELECT current_setting('server_version'), current_setting('wal_level'),"
            " current_database(), current_user, r.rolsuper, r.rolreplication,"
            " pg_catalog.pg_is_in_recovery(),"
            " current_setting('max_replication_slots')::int,"
            " (SELECT count(*) FROM pg_replication_slots)::int,"
            " current_setting('max_wal_senders')::int,"
            " (SELECT count(*) FROM pg_stat_replication)::int"
            " FROM pg_roles r WHERE r.rolname = current_user"
        ).fetchone()
        assert row is not None
        version, wal_level, database, user, superuser, replication, standby = row[:7]
        max_slots, slots_used, max_senders, senders_used = row[7:]
        say(True, f"connected to PostgreSQL {version}, database {database}, as role {user}")
        say(
            wal_level == "logical",
            "wal_level = logical"
            if wal_level == "logical"
            else f"wal_level is {wal_level}: set wal_level = logical and restart the server",
        )
        say(
            not standby,
            "a primary" if not standby else "a standby: slots can only be created on a primary",
        )
        say(
            bool(superuser or replication),
            f"role {user} may replicate"
            if superuser or replication
            else f"role {user} lacks REPLICATION: ALTER ROLE {user} REPLICATION",
        )
        free = max_slots - slots_used
        _slot(conn, source_config(config).slot_name, database, free, max_slots, say)
        say(
            max_senders > senders_used,
            f"{max_senders - senders_used} of {max_senders} WAL senders free"
            if max_senders > senders_used
            else f"all {max_senders} WAL senders are in use: raise max_wal_senders",
        )
        tables = _publication(conn, config, bool(superuser), say)
        if config.snapshot.mode != "no_data":
            _select_privileges(conn, tables, user, say)
        _signals(conn.info.server_version, config, say)
    _replication_connection(dsn, say)
    return found


def _signals(server_version: int, config: BridgeConfig, say: Any) -> None:
    """How incremental snapshots get their signals here (never a reason not to start)."""
    from bridge import signal_messages

    table = config.signal.data_collection
    if table is not None:
        say(True, f"incremental snapshots' signals go through the signal table {table}")
    elif server_version >= signal_messages.MIN_SERVER_VERSION:
        say(True, "incremental snapshots' signals travel as signed logical messages")
    else:
        say(
            True,
            "no incremental snapshots (PostgreSQL 13 gives pgoutput no logical messages): "
            "tables DDL rewrote are not copied again; set signal.data.collection for them",
        )


def _slot(
    conn: Conn,
    slot_name: str,
    database: str,
    free: int,
    max_slots: int,
    say: Callable[[bool, str], None],
) -> None:
    """The replication slot: created if missing (a free slot needed), else usable by pgbridge
    (pgoutput, this database, not invalidated, not streamed by another process)."""
    slot = conn.execute(
        "SELECT plugin, database, active_pid, wal_status FROM pg_replication_slots"
        " WHERE slot_name = %s",
        (slot_name,),
    ).fetchone()
    if slot is None:
        say(
            free > 0,
            f"slot {slot_name} will be created ({free} of {max_slots} slots free)"
            if free > 0
            else f"slot {slot_name} does not exist and all {max_slots} slots are used: "
            "raise max_replication_slots or drop an unused slot",
        )
    else:
        plugin, slot_db, active_pid, wal_status = slot
        problems = []
        if plugin != "pgoutput":
            problems.append(f"its plugin is {plugin}, pgbridge needs pgoutput")
        if slot_db != database:
            problems.append(f"it belongs to database {slot_db}")
        if wal_status == "lost":
            problems.append("it was invalidated (its WAL is gone): drop it and snapshot again")
        if active_pid is not None:
            problems.append(f"another process (pid {active_pid}) streams it now")
        say(
            not problems,
            f"slot {slot_name} exists ({wal_status})"
            if not problems
            else f"slot {slot_name}: " + "; ".join(problems),
        )


def _publication(
    conn: Conn, config: BridgeConfig, superuser: bool, say: Any
) -> list[tuple[str, str]]:
    """The publication or the right to create it; the captured (schema, table) list."""
    from bridge.runner import source_config

    publication = source_config(config).publication
    exists = conn.execute(
        "SELECT 1 FROM pg_publication WHERE pubname = %s", (publication.name,)
    ).fetchone()
    if exists:
        rows = conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
            (publication.name,),
        ).fetchall()
        tables = sorted((str(s), str(t)) for s, t in rows)
        say(True, f"publication {publication.name} exists ({len(tables)} tables)")
        return [t for t in tables if config.filters.includes(*t)]
    if publication.mode is PublicationMode.USER or not publication.create:
        say(
            False,
            f"publication {publication.name} does not exist and pgbridge may not create it "
            "(publication.autocreate.mode = disabled): create it, or change the mode",
        )
        return []
    try:
        tables = desired_tables(conn, publication)
    except PgBridgeError as exc:  # included tables that do not exist
        say(False, str(exc))
        return []
    if publication.mode is PublicationMode.ALL_TABLES:
        say(
            superuser,
            f"publication {publication.name} will be created FOR ALL TABLES"
            if superuser
            else f"publication {publication.name} does not exist, and FOR ALL TABLES needs a "
            "superuser: create it as one, or set publication.autocreate.mode = filtered",
        )
        return tables
    create = conn.execute("SELECT has_database_privilege(current_database(), 'CREATE')").fetchone()
    not_owned = [
        f"{s}.{t}"
        for s, t, owned in conn.execute(
            "SELECT n.nspname, c.relname, pg_has_role(c.relowner, 'USAGE') FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE (n.nspname, c.relname) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
            ([s for s, _ in tables], [t for _, t in tables]),
        ).fetchall()
        if not owned
    ]
    problems = []
    if not (create and create[0]):
        problems.append("CREATE on the database is missing")
    if not_owned:
        problems.append(f"the role does not own {', '.join(sorted(not_owned))}")
    say(
        not problems,
        f"publication {publication.name} will be created for {len(tables)} tables"
        if not problems
        else f"publication {publication.name} cannot be created: " + "; ".join(problems),
    )
    return tables


def _select_privileges(conn: Conn, tables: list[tuple[str, str]], user: str, say: Any) -> None:
    """The snapshot reads every captured table: SELECT on each."""
    if not tables:
        return
    missing = [
        f"{s}.{t}"
        for s, t, allowed in conn.execute(
            "SELECT s, t, has_table_privilege(format('%%I.%%I', s, t), 'SELECT')"
            " FROM unnest(%s::text[], %s::text[]) AS u(s, t)",
            ([s for s, _ in tables], [t for _, t in tables]),
        ).fetchall()
        if not allowed
    ]
    say(
        not missing,
        f"SELECT on all {len(tables)} captured tables (for the snapshot)"
        if not missing
        else f"no SELECT on {', '.join(missing)}: the snapshot would stop there "
        f"(GRANT SELECT ON … TO {user}, or snapshot.include.collection.list)",
    )


def _replication_connection(dsn: str, say: Any) -> None:
    try:
        with psycopg.connect(
            dsn, autocommit=True, replication="database", connect_timeout=TIMEOUT_S
        ) as conn:
            row = conn.execute("IDENTIFY_SYSTEM").fetchone()
        say(True, f"replication connection accepted (system {row[0] if row else '?'})")
    except psycopg.Error as exc:
        say(
            False,
            f"replication connection refused: {_first_line(exc)} (pg_hba.conf needs a "
            "'host <database> <role> …' line, the role REPLICATION)",
        )


# -- Kafka and the registry ----------------------------------------------------------------------


def _kafka(config: BridgeConfig) -> Finding:
    from confluent_kafka.admin import AdminClient

    from bridge.sink.kafka_client import admin_config

    try:
        metadata = AdminClient(admin_config(config.kafka)).list_topics(timeout=TIMEOUT_S)
    except Exception as exc:  # KafkaException, or the client's own errors
        return Finding("kafka", False, f"no answer from {config.kafka.bootstrap_servers}: {exc}")
    ours = sum(1 for t in metadata.topics if t.startswith(config.topic_prefix + "."))
    return Finding(
        "kafka",
        True,
        f"{len(metadata.brokers)} broker(s) answer, cluster {metadata.cluster_id}; "
        f"{ours} topic(s) under {config.topic_prefix}.",
    )


def _registry(config: BridgeConfig) -> Finding:
    from bridge.sink.registry import registry_client

    try:
        subjects = registry_client(config.registry.client_config()).get_subjects()
    except Exception as exc:  # connection errors, 401/403, …
        return Finding("schema registry", False, f"{config.registry.url}: {_first_line(exc)}")
    ours = sum(1 for s in subjects if s.startswith(config.topic_prefix + "."))
    return Finding("schema registry", True, f"{config.registry.url} answers; {ours} subject(s)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
