"""Whether a snapshot is due, and running it: slot with an exported snapshot or resume, plan,
copy; streaming starts only afterwards (see :mod:`bridge.snapshot`)."""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg

from bridge.config import BridgeConfig
from bridge.events import EventBuilder
from bridge.pgoutput.lsn import Lsn
from bridge.schema import RelationSchemas
from bridge.snapshot import catalog
from bridge.snapshot.chunk_transactions import ChunkTransactions
from bridge.snapshot.copier import SnapshotCopier, SnapshotSink
from bridge.snapshot.errors import SnapshotStateMismatchError
from bridge.snapshot.reader import SnapshotConnection, classify, open_connections
from bridge.snapshot.state import SnapshotState, TableProgress, load_state, save_state
from bridge.source import slots
from bridge.source.config import SourceConfig
from bridge.source.errors import ServerInRecoveryError, access_refusal
from bridge.source.failover import check_not_in_recovery
from bridge.source.snapshot_slot import SlotWithSnapshot

logger = logging.getLogger(__name__)

__all__ = ["Decision", "decide", "run_snapshot", "state_path"]


def state_path(config: BridgeConfig) -> Path:
    """``snapshot.state.file``, else ``<state.dir>/snapshot-<slot>.json``."""
    snap = config.snapshot
    if snap.state_file is not None:
        return snap.state_file.expanduser()
    return snap.state_dir.expanduser() / f"snapshot-{config.replication.slot_name}.json"


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do before streaming: ``action`` is ``none``, ``fresh`` (new slot with an
    exported snapshot), ``resume`` (continue the recorded snapshot in a new transaction) or
    ``again`` (``always`` with an existing slot: copy everything again in a new transaction,
    positioned at the slot's confirmed position); ``stream``: whether streaming follows."""

    action: str
    stream: bool
    reason: str


def decide(
    mode: str,
    slot: slots.SlotInfo | None,
    state: SnapshotState | None,
) -> Decision:
    """Pure: the mode, the slot as it is, the recorded state -> what to do."""
    stream = mode != "initial_only"
    if mode == "no_data":
        return Decision("none", True, "snapshot.mode = no_data")
    invalid = slot is not None and (
        slot.wal_status == "lost" or slot.invalidation_reason is not None
    )
    if slot is None:
        return Decision("fresh", stream, "the slot does not exist yet")
    if invalid and mode == "when_needed":
        return Decision("fresh", stream, "the slot was invalidated (when_needed)")
    if state is not None and state.status == "copying":
        if slot.confirmed_flush_lsn != Lsn.parse(state.consistent_point):
            return Decision(
                "mismatch",
                stream,
                f"the state file's snapshot is at {state.consistent_point} but slot "
                f"{slot.name} was confirmed up to {slot.confirmed_flush_lsn}",
            )
        return Decision("resume", stream, "a snapshot was under way")
    if mode == "always":
        return Decision("again", stream, "snapshot.mode = always")
    return Decision("none", stream, "the slot exists and no snapshot is under way")


def _primary_connection(config: BridgeConfig, dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    """A connection to a primary: while the server answering is a standby (a failover under
    way, or a multi-host DSN reaching the standby first), wait under the ``errors.*`` policy
    rather than stop; nothing is ever created on a standby."""

    def connect() -> psycopg.Connection[tuple[object, ...]]:
        try:
            conn = psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            refusal = access_refusal(str(exc), exc.sqlstate)
            if refusal is not None:
                raise refusal from exc
            raise
        try:
            check_not_in_recovery(conn.pgconn)
        except BaseException:
            conn.close()
            raise
        return conn

    return config.retry.run(
        "postgres",
        "a primary (the server is in recovery)",
        connect,
        lambda exc: isinstance(exc, ServerInRecoveryError),
    )


def run_snapshot(
    config: BridgeConfig,
    source: SourceConfig,
    builder: EventBuilder,
    sink: SnapshotSink,
    stop: threading.Event,
) -> bool:
    """Snapshot if due; ``True`` when streaming should follow (the snapshot, if any, is
    complete and acknowledged), ``False`` to stop (``initial_only``, or ``stop`` was set)."""
    path = state_path(config)
    slot_name = config.replication.slot_name
    mode = config.snapshot.mode
    decision, slot, state = _examine(config, source, path)
    if decision.action == "mismatch":
        raise SnapshotStateMismatchError(
            str(path), decision.reason + "; move the file away to stream without snapshot"
        )
    if decision.action == "none":
        if mode != "no_data":
            logger.info("no snapshot: %s", decision.reason)
        return decision.stream
    logger.info("snapshot (%s): %s; state file %s", mode, decision.reason, path)
    threads = config.snapshot.max_threads
    if decision.action == "fresh":
        with SlotWithSnapshot(
            source.dsn, slot_name, source.publication.name, failover=source.failover
        ) as exported:
            new_state = SnapshotState(
                slot_name,
                str(exported.consistent_point),
                state.run + 1 if state is not None else 0,
                planned=False,
                lanes=state.lanes if state is not None else 0,
            )
            # Recorded before anything else: from now on the slot exists, and a restart must
            # know that its snapshot was never delivered.
            save_state(path, new_state)
            connections, _ = open_connections(
                source.dsn,
                exported.snapshot_name,
                lambda conn: _lock_list(config, source, conn, None),
                threads,
            )
            complete = _plan_and_copy(
                config, source, builder, sink, connections, new_state, None, path, stop
            )
    else:
        assert slot is not None
        resumed = state if decision.action == "resume" else None
        if resumed is not None:
            new_state = resumed
            new_state.run += 1
            if not resumed.planned:
                resumed = None  # the slot was created, nothing planned: plan every table
        else:
            new_state = SnapshotState(
                slot_name,
                str(slot.confirmed_flush_lsn),
                state.run + 1 if state else 1,
                lanes=state.lanes if state else 0,
            )
        connections, _ = open_connections(
            source.dsn, None, lambda conn: _lock_list(config, source, conn, resumed), threads
        )
        complete = _plan_and_copy(
            config, source, builder, sink, connections, new_state, resumed, path, stop
        )
    if not complete:
        return False
    logger.info(
        "snapshot complete at %s: %d tables, %d rows; streaming from the consistent point",
        new_state.consistent_point,
        len(new_state.tables),
        sum(t.rows_done for t in new_state.tables),
    )
    if mode == "initial_only":
        logger.warning(
            "snapshot.mode = initial_only: not streaming; slot %s stays and retains WAL until "
            "pgbridge streams it or it is dropped",
            slot_name,
        )
    return decision.stream


def _examine(
    config: BridgeConfig, source: SourceConfig, path: Path
) -> tuple[Decision, slots.SlotInfo | None, SnapshotState | None]:
    """On the primary: the publication ensured, the slot and the state file read, and what the
    snapshot mode decides of them (an invalidated slot is dropped for a fresh snapshot)."""
    slot_name = config.replication.slot_name
    with _primary_connection(config, source.dsn) as conn:
        server = slots.inspect_server(conn)
        slots.ensure_publication(conn, source.publication)
        slot = slots.get_slot(conn, slot_name)
        state = load_state(path)
        if state is not None and state.slot != slot_name:
            state = None
        decision = decide(config.snapshot.mode, slot, state)
        if decision.action == "fresh" and slot is not None:
            logger.warning("dropping invalidated slot %s to snapshot again", slot_name)
            slots.drop_slot(conn, slot_name)
        if slot is not None and decision.action != "fresh":
            slots.validate_slot(slot, server.database)
    return decision, slot, state


def _plan_and_copy(
    config: BridgeConfig,
    source: SourceConfig,
    builder: EventBuilder,
    sink: SnapshotSink,
    connections: list[SnapshotConnection],
    state: SnapshotState,
    resumed: SnapshotState | None,
    path: Path,
    stop: threading.Event,
) -> bool:
    lanes: ChunkTransactions | None = None
    try:
        transactions = sink.transactions
        if transactions is not None:
            # Exactly once: the lanes first (a worker each, the held row's chunk, and one for
            # a chunk whose commit is under way), at least as many as any run before started:
            # what those left open is aborted before the offsets topic is read.
            lanes = transactions.lanes(max(state.lanes, len(connections) + 2))
            state.lanes = lanes.lanes
            if resumed is not None:
                _add_committed_chunks(resumed, transactions.committed(resumed.id))
        schemas = _plan(config, source, builder, connections[0], state, resumed)
        state.planned = True
        if resumed is not None:
            logger.info(
                "resumed snapshot of slot %s at %s (attempt %d): %s",
                state.slot,
                state.consistent_point,
                state.run,
                ", ".join(
                    f"{t.plan.table} {len(t.done)}/{len(t.plan.chunks)} chunks done"
                    for t in state.tables
                ),
            )
        save_state(path, state)
    except BaseException:
        for connection in connections:
            connection.close()
        if lanes is not None:
            lanes.abandon()
        raise
    copier = SnapshotCopier(
        sink,
        state,
        path,
        schemas,
        progress_interval=config.snapshot.progress_interval_ms / 1000,
        lanes=lanes,
    )
    return copier.run(stop, connections)


def _add_committed_chunks(state: SnapshotState, committed: dict[str, set[int]]) -> None:
    """Exactly once: the chunks whose Kafka transaction committed after the state file was
    last written (a crash between the two) are done too; copying them again would repeat
    their rows for a read_committed reader."""
    for table in state.tables:
        known = {c.index for c in table.plan.chunks}
        extra = (committed.get(table.plan.table, set()) & known) - table.done
        if extra:
            logger.info(
                "snapshot of %s: chunk(s) %s committed in Kafka after the state file was last "
                "written: not copied again",
                table.plan.table,
                ", ".join(map(str, sorted(extra))),
            )
            table.done |= extra
            table.started = True


def _lock_list(
    config: BridgeConfig,
    source: SourceConfig,
    conn: psycopg.Connection[tuple[object, ...]],
    resumed: SnapshotState | None,
) -> list[tuple[str, str, int]]:
    """The tables the snapshot reads, to lock before anything else."""
    published = catalog.published_tables(conn, source.publication.name)
    if resumed is None:
        chosen = [t for t in published if _captured(config, t)]
    else:
        names = {t.plan.table for t in resumed.tables if not t.complete}
        chosen = [t for t in published if t.table in names]
    return [(t.table, t.qualified, t.oid) for t in chosen]


def _captured(config: BridgeConfig, table: catalog.PublishedTable) -> bool:
    if not config.filters.includes(table.schema, table.name):
        return False
    patterns = config.snapshot.include_collection_list
    return not patterns or any(re.fullmatch(p, table.table) for p in patterns)


def _plan(
    config: BridgeConfig,
    source: SourceConfig,
    builder: EventBuilder,
    planner: SnapshotConnection,
    state: SnapshotState,
    resumed: SnapshotState | None,
) -> dict[str, RelationSchemas]:
    """Read the catalog in the planner's snapshot: each table's schemas (through ``builder``,
    exactly as streaming builds them) and, for a new snapshot, its chunk plan into ``state``;
    for a resumed one, the recorded plans are kept (columns as the table is now)."""
    conn = planner.conn
    chunk_rows = config.snapshot.chunk_size
    overrides = dict(config.snapshot.select_overrides)
    schemas: dict[str, RelationSchemas] = {}
    published = {t.table: t for t in catalog.published_tables(conn, source.publication.name)}
    if resumed is None:
        wanted = [t for t in published.values() if _captured(config, t)]
    else:
        wanted = []
        for progress in resumed.tables:
            table = published.get(progress.plan.table)
            if table is None:
                logger.warning(
                    "table %s is no longer published: its snapshot is left as it was",
                    progress.plan.table,
                )
                continue
            wanted.append(table)
    kept: list[TableProgress] = []
    for table in wanted:
        try:
            info = catalog.read_table(conn, table)
        except psycopg.Error as exc:
            raise classify(table.table, exc) from exc
        info.describe_to(builder.mapper)
        builder.feed(info.relation)
        table_schemas = builder.relations[info.relation.relation_oid]
        schemas[table.table] = table_schemas
        keyed = table_schemas.key_schema is not None
        if resumed is None:
            try:
                plan = catalog.plan_table(
                    conn,
                    info,
                    keyed=keyed,
                    rows_per_chunk=chunk_rows,
                    source_query=overrides.get(table.table),
                )
            except psycopg.Error as exc:
                raise classify(table.table, exc) from exc
            kept.append(TableProgress(plan))
            continue
        kept.append(_resumed_progress(table, info, keyed, resumed))
    # Tables without a message key first: copied before anything else, they are the least
    # likely to be interrupted by a crash, after which they could not be resumed exactly.
    kept.sort(key=lambda t: (t.plan.keyed, t.plan.table))
    state.tables = kept
    if not kept and resumed is None:
        logger.info("snapshot: no published table to copy")
    for progress in kept:
        logger.info(
            "snapshot plan: %s by %s in %d chunk(s), about %d rows",
            progress.plan.table,
            progress.plan.method,
            len(progress.plan.chunks),
            progress.plan.estimated_rows,
        )
    return schemas


def _resumed_progress(
    table: catalog.PublishedTable, info: catalog.TableCatalog, keyed: bool, resumed: SnapshotState
) -> TableProgress:
    """A resumed snapshot's recorded progress of ``table``, its plan brought up to the table as
    it is now (columns, OID, file node), with what changed since said in the log."""
    recorded = resumed.table(table.table)
    assert recorded is not None
    progress = recorded
    columns = tuple(c.name for c in info.relation.columns)
    if columns != progress.plan.columns:
        # Rows copied now have the new columns; the stream replays changes made between
        # the consistent point and the DDL with the old ones, after them.
        logger.warning(
            "table %s changed its published columns since the snapshot started (%s -> %s): "
            "rows changed between %s and that change may lack the new columns downstream "
            "until changed again",
            table.table,
            ", ".join(progress.plan.columns),
            ", ".join(columns),
            resumed.consistent_point,
        )
    plan = replace(progress.plan, columns=columns, oid=table.oid, keyed=keyed)
    if plan.method == "ctid" and info.relfilenode != progress.plan.relfilenode and progress.done:
        logger.warning(
            "table %s was rewritten since the snapshot started: copying all of it again "
            "(its rows are upserts by key, so nothing is doubled)",
            table.table,
        )
        progress.done.clear()
        progress.rows_done = progress.bytes_done = 0
    plan = replace(plan, relfilenode=info.relfilenode)
    progress.plan = plan
    if not keyed and not progress.complete:
        logger.warning(
            "table %s has no message key and was not completely copied when pgbridge "
            "stopped: it is copied in a new transaction, so for a consumer keeping its rows "
            "as a multiset, changes made to it after %s may apply to rows that already "
            "contain them%s",
            table.table,
            resumed.consistent_point,
            ", and rows delivered before the restart may arrive twice" if progress.started else "",
        )
    return progress
