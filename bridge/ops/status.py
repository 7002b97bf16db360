"""``pgbridge status``: where the bridge stands, read from PostgreSQL, Kafka and the registry.

Reads only: the slot's confirmed position and how much WAL it holds back, the publication, the
topics under the prefix, the registry subjects. Works whether or not ``pgbridge run`` is up.
"""

from __future__ import annotations

import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from bridge.config import BridgeConfig
from bridge.sink.kafka_client import admin_config
from bridge.sink.registry import registry_client


@dataclass
class SlotStatus:
    name: str
    exists: bool
    active: bool = False
    active_pid: int | None = None
    confirmed_flush_lsn: str | None = None
    restart_lsn: str | None = None
    wal_status: str | None = None  # reserved | extended | unreserved | lost
    lag_bytes: int | None = None  # current WAL end minus confirmed flush
    retained_bytes: int | None = None  # current WAL end minus restart LSN: WAL kept for us
    failover: bool | None = None  # PostgreSQL 17+: a failover slot (None before 17)
    synced: bool | None = None  # PostgreSQL 17+: synchronised from a primary
    in_recovery: bool | None = None  # the server answering is a standby

    def failover_text(self) -> str:
        """The slot's failover state, for the one-line summary."""
        if self.failover is None:
            return "failover: n/a before PostgreSQL 17"
        if not self.failover:
            return "failover: off"
        if self.in_recovery:
            # A standby's copy: usable once this server is promoted.
            return (
                "failover: on, synced copy on a standby"
                if self.synced
                else ("failover: on, on a standby but not synced")
            )
        return "failover: on" + (" (synced from a former primary)" if self.synced else "")


@dataclass
class BridgeStatus:
    slot: SlotStatus
    publication: str
    publication_exists: bool
    topics: list[str] = field(default_factory=list)
    subjects: int | None = None
    problems: list[str] = field(default_factory=list)
    #: The snapshot's state file, if any (bridge.snapshot): status and one entry per table.
    snapshot: dict[str, Any] | None = None
    #: Incremental snapshots (bridge.snapshot.incremental), as last recorded.
    incremental: dict[str, Any] | None = None
    #: What the running bridge waits for (dependency names), read from its metrics endpoint;
    #: None when that cannot be known (metrics.port unset, or the bridge is not running).
    waiting_for: list[str] | None = None
    #: The Spark apply job's position (``--apply-checkpoint``): its last committed batch and,
    #: per table topic, the Kafka records it has not applied yet (bridge.ops.apply_status).
    apply: dict[str, Any] | None = None
    #: The tables the apply job holds (``--apply-dead-letter``), by topic: the batch that set
    #: each aside first and its records waiting (bridge.ops.apply_status.read_held_tables).
    held_tables: dict[str, dict[str, int]] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        s = self.slot
        lines = [
            f"slot {s.name}: "
            + (
                f"{'active (pid ' + str(s.active_pid) + ')' if s.active else 'inactive'}, "
                f"confirmed {s.confirmed_flush_lsn}, lag {s.lag_bytes} bytes, "
                f"retains {s.retained_bytes} bytes of WAL ({s.wal_status}), {s.failover_text()}"
                if s.exists
                else "missing"
            ),
            f"publication {self.publication}: {'exists' if self.publication_exists else 'missing'}",
            f"topics: {len(self.topics)}" + (f" ({', '.join(self.topics)})" if self.topics else ""),
            f"registry subjects: {self.subjects if self.subjects is not None else 'unreachable'}",
        ]
        if self.snapshot is not None:
            snap = self.snapshot
            lines.append(
                f"snapshot at {snap['consistent_point']}: {snap['status']} "
                f"(attempt {snap['run']}, {snap['path']})"
            )
            lines += [
                f"  {t['table']}: {t['state']}, {t['rows_done']}/{t['estimated_rows']} rows, "
                f"chunks {t['chunks_done']}/{t['chunks']} (by {t['method']})"
                for t in snap["tables"]
            ]
        if self.incremental is not None:
            incr = self.incremental
            state = "paused" if incr["paused"] else "running" if incr["running"] else "idle"
            lines.append(f"incremental snapshots: {state} ({incr['path']})")
            lines += [
                f"  {t['table']}: {t['status']}, {t['rows']} rows in {t['chunks']} chunks"
                + (f" where {t['condition']}" if t["condition"] else "")
                + (f" ({t['reason']})" if t["reason"] else "")
                for t in incr["tables"]
            ]
        if self.apply is not None:
            lines += _render_apply(self.apply)
        if self.waiting_for:
            lines.append(f"waiting for: {', '.join(self.waiting_for)} (a transient fault)")
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)


_SLOT_QUERY = """
SELECT active, active_pid, confirmed_flush_lsn::text, restart_lsn::text, wal_status,
       pg_wal_lsn_diff(_wal_end, confirmed_flush_lsn)::bigint,
       pg_wal_lsn_diff(_wal_end, restart_lsn)::bigint,
       {failover}, pg_is_in_recovery()
FROM pg_replication_slots,
     LATERAL (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
                          ELSE pg_current_wal_lsn() END AS _wal_end) AS w
WHERE slot_name = %s
"""


def slot_query(server_version: int) -> str:
    """The status query; ``failover`` and ``synced`` exist from PostgreSQL 17."""
    failover = "failover, synced" if server_version >= 170000 else "NULL::bool, NULL::bool"
    return _SLOT_QUERY.format(failover=failover)


def collect(
    config: BridgeConfig, apply_checkpoint: str | None = None, apply_dead_letter: str | None = None
) -> BridgeStatus:
    """Everything ``pgbridge status`` shows; ``apply_checkpoint``: the Spark apply job's
    streaming checkpoint, for its per-table lag."""
    rep = config.replication
    status = BridgeStatus(SlotStatus(rep.slot_name, False), rep.publication_name, False)
    try:
        with psycopg.connect(config.database.conninfo(), autocommit=True, connect_timeout=10) as c:
            row = c.execute(slot_query(c.info.server_version), (rep.slot_name,)).fetchone()
            if row is not None:
                status.slot = SlotStatus(rep.slot_name, True, *row)
            status.publication_exists = bool(
                c.execute(
                    "SELECT 1 FROM pg_publication WHERE pubname = %s", (rep.publication_name,)
                ).fetchone()
            )
    except psycopg.Error as exc:
        status.problems.append(f"PostgreSQL: {exc}".strip())
    if status.slot.wal_status == "lost":
        status.problems.append("the slot is invalidated (WAL it needed was removed): re-snapshot")
    admin: AdminClient | None = None
    md: Any = None  # the cluster's metadata, also for the apply job's lag
    try:
        admin = AdminClient(admin_config(config.kafka))
        md = admin.list_topics(timeout=10)
        status.topics = sorted(t for t in md.topics if t.startswith(config.topic_prefix + "."))
    except Exception as exc:  # the client raises KafkaException or plain errors
        status.problems.append(f"Kafka: {exc}")
    try:
        subjects = registry_client(config.registry.client_config()).get_subjects()
        status.subjects = sum(1 for s in subjects if s.startswith(config.topic_prefix + "."))
    except Exception as exc:
        status.problems.append(f"registry: {exc}")
    _snapshot_status(config, status)
    _incremental_status(config, status)
    status.waiting_for = waiting_for(config)
    if apply_checkpoint is not None:
        _apply_status(config, apply_checkpoint, admin, md, status)
    if apply_dead_letter is not None:
        _held_tables(apply_dead_letter, status)
    return status


def _held_tables(dead_letter: str, status: BridgeStatus) -> None:
    """The tables the apply job holds (bridge.spark.set_aside): each is a problem."""
    from bridge.ops.apply_status import ApplyDeadLetterError, read_held_tables

    try:
        held = read_held_tables(dead_letter)
    except (ApplyDeadLetterError, OSError) as exc:
        status.problems.append(str(exc))
        return
    status.held_tables = {t: {"since_batch": h.since_batch, "records": h.records}
                          for t, h in sorted(held.items())}  # fmt: skip
    for topic, table in sorted(held.items()):
        status.problems.append(
            f"apply: {topic} held since batch {table.since_batch}, which failed: its "
            f"{table.records} records wait in {dead_letter}, applied when the job tries the "
            "table again (docs/configuration.md)"
        )


def _apply_status(
    config: BridgeConfig,
    checkpoint: str,
    admin: AdminClient | None,
    metadata: Any,
    status: BridgeStatus,
) -> None:
    from bridge.ops.apply_status import ApplyCheckpointError, apply_lag, read_apply_position
    from bridge.spark.config import is_table_topic

    try:
        position = read_apply_position(checkpoint)
    except ApplyCheckpointError as exc:
        status.problems.append(str(exc))
        return
    if admin is None or metadata is None:
        return  # Kafka is unreachable: already a problem of its own
    tables = [t for t in status.topics if is_table_topic(config.topic_prefix, t)]
    try:
        watermarks = _watermarks(admin, metadata, tables)
    except Exception as exc:  # the client raises KafkaException or plain errors
        status.problems.append(f"Kafka (apply lag): {exc}")
        return
    lag = apply_lag(position, watermarks)
    status.apply = {
        "checkpoint": checkpoint,
        "batch": position.batch,
        "batch_time_ms": position.batch_time_ms,
        "lag_records": sum(lag.values()),
        "tables": lag,
    }


def _watermarks(
    admin: AdminClient, metadata: Any, topics: list[str]
) -> dict[str, dict[int, tuple[int, int]]]:
    """Earliest and end offset of every partition of ``topics`` (in ``metadata``)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    parts = [
        TopicPartition(topic, partition)
        for topic in topics
        if topic in metadata.topics
        for partition in metadata.topics[topic].partitions
    ]
    result: dict[str, dict[int, tuple[int, int]]] = {t: {} for t in topics if t in metadata.topics}
    if not parts:
        return result
    first, end = OffsetSpec.earliest(), OffsetSpec.latest()  # type: ignore[no-untyped-call]
    earliest = admin.list_offsets({p: first for p in parts}, request_timeout=10)
    latest = admin.list_offsets({p: end for p in parts}, request_timeout=10)
    for part in parts:
        low = earliest[part].result().offset
        high = latest[part].result().offset
        result[part.topic][part.partition] = (low, high)
    return result


def _render_apply(apply: dict[str, Any]) -> list[str]:
    behind = {t: n for t, n in apply["tables"].items() if n}
    head = (
        f"apply job ({apply['checkpoint']}): "
        + (
            "no batch committed yet"
            if apply["batch"] is None
            else f"batch {apply['batch']} committed"
        )
        + f", {apply['lag_records']} records behind in {len(behind)} of "
        f"{len(apply['tables'])} tables"
    )
    worst = sorted(behind.items(), key=lambda item: -item[1])[:10]
    return [head, *(f"  {topic}: {records} records behind" for topic, records in worst)]


def waiting_for(config: BridgeConfig, timeout: float = 2.0) -> list[str] | None:
    """The dependencies the running bridge is waiting for, from its own metrics endpoint."""
    if not config.metrics.port:
        return None
    host = config.metrics.host
    host = "127.0.0.1" if host in ("", "0.0.0.0") else host
    url = f"http://{host}:{config.metrics.port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode("utf-8")
    except OSError:
        return None  # not running, or not reachable from here
    return sorted(
        sample.labels["dependency"]
        for family in text_string_to_metric_families(text)
        if family.name == "pgbridge_waiting_for_dependency"
        for sample in family.samples
        if sample.value == 1.0
    )


def _snapshot_status(config: BridgeConfig, status: BridgeStatus) -> None:
    from bridge.snapshot.run import state_path
    from bridge.snapshot.state import StateFileError, load_state

    path = state_path(config)
    try:
        state = load_state(path)
    except StateFileError as exc:
        status.problems.append(str(exc))
        return
    if state is None or state.slot != config.replication.slot_name:
        return
    status.snapshot = {
        "path": str(path),
        "status": state.status,
        "consistent_point": state.consistent_point,
        "run": state.run,
        "tables": [
            {
                "table": t.plan.table,
                "state": t.state,
                "method": t.plan.method,
                "chunks": len(t.plan.chunks),
                "chunks_done": len(t.done),
                "rows_done": t.rows_done,
                "estimated_rows": t.plan.estimated_rows,
                "bytes_done": t.bytes_done,
            }
            for t in state.tables
        ],
    }


def _incremental_status(config: BridgeConfig, status: BridgeStatus) -> None:
    from bridge.snapshot.incremental import state_file
    from bridge.snapshot.incremental_state import load_incremental
    from bridge.snapshot.state import StateFileError

    path = state_file(config.snapshot.state_dir, config.replication.slot_name)
    try:
        state = load_incremental(path)
    except StateFileError as exc:
        status.problems.append(str(exc))
        return
    if state is None:
        return
    status.incremental = {
        "path": str(path),
        "paused": state.paused,
        "running": state.running,
        "tables": [
            {
                "table": t.table,
                "status": t.status,
                "rows": t.rows,
                "chunks": t.chunks,
                "condition": t.condition,
                "reason": t.reason,
            }
            for t in state.tables
        ],
    }
