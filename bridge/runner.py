"""``pgbridge run``: build the pipeline from a validated configuration and run it until stopped.

The library (source, events, sink, pipeline) knows nothing of processes; this module owns what
a process needs: signal handling for a graceful stop, the metrics endpoint, the final log line.
SIGTERM and SIGINT stop the loop at the next message boundary; the pipeline then flushes the
producer, confirms what Kafka acknowledged and exits 0.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass, replace
from types import FrameType

import psycopg
from confluent_kafka import KafkaException

from bridge import native, signal_messages
from bridge.config import BridgeConfig
from bridge.config.basics import reveal
from bridge.errors import ConfigError, PgBridgeError
from bridge.events import EventBuilder
from bridge.failures import FailurePolicy
from bridge.native.switches import NATIVE, enabled
from bridge.ops.metrics import BridgeMetrics
from bridge.ops.observe import MetricsObserver
from bridge.pgoutput.lsn import Lsn
from bridge.pipeline import Pipeline, PipelineObserver, PipelineOptions
from bridge.relation_memory import RelationMemory, relation_memory_file
from bridge.restarts import stream_with_restarts
from bridge.signals import ensure_signal_table, signal_table_name
from bridge.sink.delivery_mode import probe_transactions, resolve_delivery
from bridge.sink.metadata import MetadataRecords
from bridge.sink.publisher import KafkaPublisher
from bridge.sink.registry import SchemaRegistrar, registry_client
from bridge.sink.serializer import EnvelopeSerializer, SourceSettings
from bridge.sink.transactions import (
    ExactlyOnce,
    KafkaTransactionError,
    ProducerFencedError,
    committed_position,
    committed_value,
    ensure_offsets_topic,
)
from bridge.snapshot.chunk_transactions import SNAPSHOT_TRANSACTION_TIMEOUT_MS, SnapshotTransactions
from bridge.snapshot.copier import SnapshotSink
from bridge.snapshot.incremental import IncrementalSettings, IncrementalSnapshotter
from bridge.snapshot.incremental import state_file as incremental_state_file
from bridge.snapshot.incremental_state import (
    IncrementalState,
    incremental_key,
    parse_incremental_record,
)
from bridge.snapshot.kafka_signals import KafkaSignals
from bridge.snapshot.run import run_snapshot
from bridge.source.column_numbers import ColumnNumbers
from bridge.source.config import (
    PublicationConfig,
    PublicationMode,
    ReconnectPolicy,
    SourceConfig,
)
from bridge.source.replication import LogicalReplicationSource
from bridge.source.table_watch import TableWatch
from bridge.source.takeover import debezium_offset, offsets_from_file, offsets_from_topic
from bridge.source.type_catalog import TypeDescriber
from bridge.types import TypeMapper, TypeOptions

logger = logging.getLogger(__name__)

_PUBLICATION_MODES = {
    "all_tables": PublicationMode.ALL_TABLES,
    "filtered": PublicationMode.FILTERED,
    "disabled": PublicationMode.USER,
}


#: Session settings of the replication connection that text-format values depend on.
WALSENDER_SETTINGS: tuple[tuple[str, str], ...] = (
    ("datestyle", "ISO, MDY"),
    ("intervalstyle", "postgres"),
    ("timezone", "UTC"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
)


def source_config(config: BridgeConfig) -> SourceConfig:
    """The replication source's settings from the bridge's configuration."""
    rep = config.replication
    mode = _PUBLICATION_MODES[rep.publication_autocreate_mode]
    filtered = mode is PublicationMode.FILTERED
    publication = PublicationConfig(
        name=rep.publication_name,
        mode=mode,
        # In filtered mode the include lists name schemas and tables literally.
        include_schemas=config.filters.schema_include if filtered else (),
        include_tables=_with_signal_table(config) if filtered else (),
        exclude_tables=config.filters.table_exclude if filtered else (),
        create=mode is not PublicationMode.USER,
    )
    return SourceConfig(
        dsn=config.database.conninfo(),
        slot_name=rep.slot_name,
        failover=rep.slot_failover,
        publication=publication,
        binary=rep.pgoutput_binary,
        status_interval=rep.status_update_interval_ms / 1000,
        spill_threshold=rep.spill_threshold_bytes,
        spill_dir=rep.spill_dir,
        heartbeat_query=rep.heartbeat_action_query,
        heartbeat_interval=(rep.heartbeat_interval_ms or 60_000) / 1000,
        # Wake the loop often when the server is quiet, so that delivery reports of the last
        # records are served (and acknowledged) promptly rather than at the next change: the
        # tick bounds commit-to-acknowledgement latency (p50 20 -> 11 ms going from 20 to 5 ms)
        # and costs under 1% of a core when idle.
        idle_interval=0.005,
        # Text-format values are rendered with the walsender session's settings; the type
        # converters read exactly these forms (ISO dates, postgres intervals, UTC offsets).
        server_options=WALSENDER_SETTINGS,
        # One retry policy for every dependency: the errors.* keys bound reconnects too.
        reconnect=ReconnectPolicy(
            initial_delay=config.retry.initial_delay_ms / 1000,
            max_delay=config.retry.max_delay_ms / 1000,
            max_attempts=None if config.retry.max_retries == -1 else config.retry.max_retries,
        ),
    )


def _with_signal_table(config: BridgeConfig) -> tuple[str, ...]:
    """A filtered publication's tables: the include list, and the signal table when the list
    is not empty (an empty list already means every table)."""
    tables = config.filters.table_include
    signal = config.signal.data_collection
    if signal is not None and (tables or config.filters.schema_include) and signal not in tables:
        tables = (*tables, signal)
    return tables


def type_options(config: BridgeConfig) -> TypeOptions:
    """How PostgreSQL types are represented, from the handling-mode keys (validated there)."""
    events = config.events
    return TypeOptions(
        decimal_handling=events.decimal_handling_mode,  # type: ignore[arg-type]
        unconstrained_numeric=events.unconstrained_numeric_handling_mode,  # type: ignore[arg-type]
        interval_handling=events.interval_handling_mode,  # type: ignore[arg-type]
        timestamptz_handling=events.timestamptz_handling_mode,  # type: ignore[arg-type]
        money_fraction_digits=events.money_fraction_digits,
        hstore_handling=events.hstore_handling_mode,  # type: ignore[arg-type]
        binary_handling=events.binary_handling_mode,  # type: ignore[arg-type]
        time_precision=events.time_precision_mode,  # type: ignore[arg-type]
        logical_types=events.schema_logical_types,  # type: ignore[arg-type]
    )


@dataclass(frozen=True, slots=True)
class PipelineParts:
    """What the snapshot (bridge.snapshot) and the streaming pipeline share: the event builder
    (its relation and type caches), the registrar, the serializer and the publisher."""

    builder: EventBuilder
    registrar: SchemaRegistrar
    serializer: EnvelopeSerializer
    publisher: KafkaPublisher


def build_parts(config: BridgeConfig, *, transactional: bool = False) -> PipelineParts:
    """The stages after the source, ready for the snapshot and then for streaming;
    ``transactional``: the publisher's producer has the slot's transactional.id (streaming
    with ``exactly.once.support = required``; the initial snapshot has transactional
    producers of its own, :func:`snapshot_sink`)."""
    registrar = SchemaRegistrar(
        registry_client(config.registry.client_config()),
        compatibility=config.registry.compatibility_level or "BACKWARD",
        retry=config.retry,
        incompatible_changes=config.registry.incompatible_change_handling,
    )
    serializer = EnvelopeSerializer(
        SourceSettings(
            topic_prefix=config.topic_prefix,
            database=_database_name(config.database.conninfo()),
            provide_transaction_metadata=config.events.provide_transaction_metadata,
        )
    )
    builder = EventBuilder(
        config.topic_prefix,
        TypeMapper(type_options(config)),
        key_columns=config.events.key_columns,
        column_controls=config.events.column_controls(),
        router=config.events.router(),
        column_numbers=ColumnNumbers(config.database.conninfo(), WALSENDER_SETTINGS),
        failures=FailurePolicy(
            config.events.failure_handling_mode,  # type: ignore[arg-type]
            config.events.dead_letter_topic,
        ),
    )
    # DDL made while the bridge was down is compared with what it delivered before.
    builder.memory = RelationMemory(
        relation_memory_file(config.snapshot.state_dir, config.replication.slot_name)
    )
    return PipelineParts(builder, registrar, serializer, build_publisher(config, transactional))


def build_publisher(config: BridgeConfig, transactional: bool) -> KafkaPublisher:
    """The pipeline's publisher; ``transactional``: with the slot's transactional.id."""
    return KafkaPublisher(
        config.kafka,
        config.topic_creation,
        retry=config.retry,
        extra_config={
            "transactional.id": config.kafka.transactional_id,
            # librdkafka wants it at least the delivery timeout (message.timeout.ms).
            "transaction.timeout.ms": max(60_000, config.kafka.delivery_timeout_ms),
        }
        if transactional
        else None,
    )


def snapshot_sink(config: BridgeConfig, parts: PipelineParts) -> SnapshotSink:
    """The snapshot's sink: the pipeline's parts, and a ring of producers of its own that
    report failures only (:mod:`bridge.snapshot.epochs`), each with half of the queue bounds
    so that the ring holds no more than one streaming producer would; exactly once, the
    transactional lanes of :mod:`bridge.snapshot.chunk_transactions` instead."""
    kafka = replace(
        config.kafka,
        max_queue_size=max(1, config.kafka.max_queue_size // 2),
        max_queue_size_in_bytes=max(1024, config.kafka.max_queue_size_in_bytes // 2),
    )

    def publisher() -> KafkaPublisher:
        return KafkaPublisher(
            kafka, config.topic_creation, retry=config.retry, report_successes=False
        )

    transactions = None
    if config.kafka.exactly_once:

        def lane(index: int) -> KafkaPublisher:
            return KafkaPublisher(
                kafka,
                config.topic_creation,
                retry=config.retry,
                report_successes=False,
                extra_config={
                    "transactional.id": f"{kafka.transactional_id}-snapshot-{index}",
                    # Open while its chunk is copied, longer than a streaming commit interval.
                    "transaction.timeout.ms": max(
                        SNAPSHOT_TRANSACTION_TIMEOUT_MS, kafka.delivery_timeout_ms
                    ),
                },
            )

        replication = config.topic_creation.replication_factor
        transactions = SnapshotTransactions(
            lane,
            kafka_client(config),
            kafka.offsets_topic,
            config.replication.slot_name,
            replication if replication > 0 else -1,
        )
    return SnapshotSink(
        parts.registrar,
        parts.serializer,
        parts.publisher,
        parts.builder.failures,
        publisher,
        transactions,
    )


def kafka_client(config: BridgeConfig) -> dict[str, str]:
    """``bootstrap.servers`` and the security settings, for the admin and reading clients."""
    client = {"bootstrap.servers": config.kafka.bootstrap_servers}
    client.update({key: reveal(value) for key, value in config.kafka.security})
    return client


def takeover_start(config: BridgeConfig) -> Lsn | None:
    """Where a Debezium connector whose slot this bridge takes over stopped
    (``debezium.offsets.*``, bridge.source.takeover), or ``None``."""
    rep = config.replication
    if rep.debezium_offsets_topic:
        where = f"topic {rep.debezium_offsets_topic}"
        client = {key: reveal(value) for key, value in config.kafka.security}
        entries = offsets_from_topic(
            config.kafka.bootstrap_servers, rep.debezium_offsets_topic, client
        )
    elif rep.debezium_offsets_file is not None:
        where = str(rep.debezium_offsets_file)
        entries = offsets_from_file(rep.debezium_offsets_file)
    else:
        return None
    offset = debezium_offset(entries, config.topic_prefix, rep.debezium_connector_name, where)
    logger.info(
        "taking over from Debezium connector %r (%s): its last committed transaction ended at "
        "%s (txId %s)",
        offset.connector,
        where,
        offset.resume_lsn,
        offset.tx_id,
    )
    return offset.resume_lsn


def build_pipeline(
    config: BridgeConfig, metrics: BridgeMetrics | None = None, parts: PipelineParts | None = None
) -> Pipeline:
    """Everything wired, the source opened (slot and publication checked or created).
    ``config``'s delivery as :func:`with_resolved_delivery` left it (an unresolved
    ``requested`` streams at least once)."""
    parts = parts or build_parts(config, transactional=config.kafka.exactly_once)
    start_after = takeover_start(config)
    exactly_once: ExactlyOnce | None = None
    if config.kafka.exactly_once:
        exactly_once, committed = start_exactly_once(config, parts.publisher)
        if committed is not None and (start_after is None or committed > start_after):
            start_after = committed
    source = LogicalReplicationSource(replace(source_config(config), start_after=start_after))
    source.open()
    incremental = incremental_snapshotter(config, parts.builder, exactly_once is not None)
    if incremental is not None and exactly_once is not None:
        exactly_once.also_commit = incremental.kafka_records
    if incremental is not None and config.snapshot.rewritten_tables == "incremental":
        parts.builder.on_rewrite = incremental.snapshot_rewritten
    watch = TableWatch(
        config.database.conninfo(),
        source_config(config).publication,
        config.replication.publication_refresh_interval_ms / 1000,
        incremental.snapshot_new_tables
        if incremental is not None and config.snapshot.new_tables == "parallel"
        else None,
        incremental.snapshot_partitions
        if incremental is not None and config.snapshot.partition_changes == "incremental"
        else None,
    )
    registrar, serializer, publisher = parts.registrar, parts.serializer, parts.publisher
    observer: PipelineObserver | None = None
    if metrics is not None:
        progress = source.progress
        observer = MetricsObserver(
            metrics,
            received=lambda: (int(progress.received), int(progress.received)),
            in_flight_records=lambda: publisher.in_flight,
        )
    return Pipeline(
        source=source,
        builder=parts.builder,
        registrar=registrar,
        serializer=serializer,
        publisher=publisher,
        options=PipelineOptions(
            messages_topic=config.events.messages_topic,
            tombstones_on_delete=config.events.tombstones_on_delete,
            truncate_events=config.events.truncate_events,
            table_filter=config.filters.includes,
            metadata=(
                MetadataRecords(config.topic_prefix)
                if config.events.provide_transaction_metadata
                or config.replication.heartbeat_interval_ms
                else None
            ),
            transaction_metadata=config.events.provide_transaction_metadata,
            heartbeat_interval=config.replication.heartbeat_interval_ms / 1000,
        ),
        observer=observer,
        incremental=incremental,
        housekeeping=watch.tick,
        describe_type=TypeDescriber(config.database.conninfo()).describe,
        exactly_once=exactly_once,
    )


def start_exactly_once(
    config: BridgeConfig, publisher: KafkaPublisher
) -> tuple[ExactlyOnce, Lsn | None]:
    """The Kafka transactions of a streaming run (bridge.sink.transactions), started (older
    producers of the slot's transactional.id fenced), and where the last committed one ended:
    the stream starts there, so nothing Kafka already committed is sent again."""
    kafka = config.kafka
    client = kafka_client(config)
    replication = config.topic_creation.replication_factor
    ensure_offsets_topic(client, kafka.offsets_topic, replication if replication > 0 else -1)
    slot = config.replication.slot_name
    exactly_once = ExactlyOnce(
        publisher.producer,
        lambda key, value: publisher.produce_offsets(kafka.offsets_topic, key, value),
        publisher.flush,
        slot,
        kafka.commit_interval_ms / 1000,
        fatal_error=publisher.fatal_error,
    )
    exactly_once.start()  # fences older producers and aborts what they left open
    committed = committed_position(client, kafka.offsets_topic, slot)
    if committed is not None:
        logger.info("exactly once: Kafka holds slot %s's changes up to %s", slot, committed)
    return exactly_once, committed


def incremental_snapshotter(
    config: BridgeConfig, builder: EventBuilder, exactly_once: bool = False
) -> IncrementalSnapshotter | None:
    """The incremental snapshots' driver. Its signals go through the signal table when one is
    configured (checked to be in the publication: otherwise no signal would ever arrive), else
    as signed logical messages (bridge.signal_messages) where the server's pgoutput carries
    them (PostgreSQL 14+); on 13 without a signal table there is none."""
    table = config.signal.data_collection
    dsn = config.database.conninfo()
    publication = config.replication.publication_name
    state_dir = config.snapshot.state_dir
    signal_key = None
    with psycopg.connect(dsn, autocommit=True) as conn:
        if table is not None:
            _check_signal_table_published(conn, table, publication)
        elif conn.info.server_version >= signal_messages.MIN_SERVER_VERSION:
            key_file = signal_messages.key_path(state_dir, config.replication.slot_name)
            signal_key = signal_messages.load_or_create_key(key_file)
        else:
            _warn_without_signals(config, conn.info.server_version)
            return None
    snapshotter = IncrementalSnapshotter(
        IncrementalSettings(
            dsn=dsn,
            publication=publication,
            signal_table=table,
            chunk_size=config.signal.incremental_chunk_size,
            state_path=incremental_state_file(state_dir, config.replication.slot_name),
            slot=config.replication.slot_name,
            captured=config.filters.includes,
            table_signals="source" in config.signal.enabled_channels,
            signal_key=signal_key,
        ),
        builder,
        committed_incremental(config) if exactly_once else None,
    )
    if "kafka" in config.signal.enabled_channels:
        snapshotter.kafka = KafkaSignals(config, snapshotter.forward)
    return snapshotter


def committed_incremental(config: BridgeConfig) -> IncrementalState | None:
    """Exactly once: the incremental snapshot's progress last committed in Kafka, if any."""
    value = committed_value(
        kafka_client(config),
        config.kafka.offsets_topic,
        incremental_key(config.replication.slot_name),
    )
    return None if value is None else parse_incremental_record(value)


def _check_signal_table_published(
    conn: psycopg.Connection[tuple[object, ...]], table: str, publication: str
) -> None:
    """A signal table outside the publication would never bring a signal back."""
    schema, name = signal_table_name(table)
    published = conn.execute(
        "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s "
        "AND tablename = %s",
        (publication, schema, name),
    ).fetchone()
    if published is None:
        raise ConfigError(
            "signal.data.collection",
            f"table {table} is not in publication {publication}, so no signal written to it "
            f"would reach pgbridge: ALTER PUBLICATION {publication} ADD TABLE {table}",
        )


def _warn_without_signals(config: BridgeConfig, server_version: int) -> None:
    """PostgreSQL 13 without a signal table: say which configured behaviour cannot happen."""
    wanted = [
        what
        for what, on in (
            (
                "tables DDL rewrote are not copied again",
                config.snapshot.rewritten_tables == "incremental",
            ),
            ("new tables are not copied", config.snapshot.new_tables == "parallel"),
            (
                "attached and detached partitions' rows are not copied or deleted",
                config.snapshot.partition_changes == "incremental",
            ),
            ("Kafka signals are not read", "kafka" in config.signal.enabled_channels),
        )
        if on
    ]
    if wanted:
        logger.warning(
            "%s: PostgreSQL %d gives pgoutput no logical messages to carry incremental "
            "snapshots' signals; set signal.data.collection",
            "; ".join(wanted),
            server_version // 10000,
        )


def prepare_signal_table(config: BridgeConfig) -> None:
    """Create the signal table before the publication is ensured (FOR ALL TABLES then
    includes it; a filtered one lists it), when configured and allowed."""
    table = config.signal.data_collection
    if table is None or not config.signal.table_autocreate:
        return
    try:
        with psycopg.connect(config.database.conninfo(), autocommit=True) as conn:
            if ensure_signal_table(conn, table):
                logger.info("created signal table %s", table)
    except psycopg.Error as exc:
        # Checked again once the publication is ensured: a missing table is an error there.
        logger.warning("could not create signal table %s: %s", table, str(exc).strip())


class _SnapshotAttempt:
    """The initial snapshot, if one is due (see :mod:`bridge.restarts`)."""

    def __init__(self, config: BridgeConfig, parts: PipelineParts) -> None:
        self.config = config
        self.parts = parts
        #: Whether streaming should follow (False: initial_only, or stopped).
        self.stream_after = False

    def run(self, stop: threading.Event) -> None:
        parts = self.parts
        sink = snapshot_sink(self.config, parts)
        config = self.config
        self.stream_after = run_snapshot(config, source_config(config), parts.builder, sink, stop)

    def made_progress(self) -> bool:
        return False  # done chunks are kept in the state file whatever the count says

    def abandon(self) -> None:
        self.parts.publisher.abandon(self.config.kafka.delivery_timeout_ms / 1000 + 5)


class _StreamingAttempt:
    """One pipeline from the slot's confirmed position (see :mod:`bridge.restarts`)."""

    def __init__(self, config: BridgeConfig, metrics: BridgeMetrics, parts: PipelineParts) -> None:
        self._parts = parts
        self._delivery_timeout = config.kafka.delivery_timeout_ms / 1000
        self.pipeline = build_pipeline(config, metrics, parts)
        self._started_at = self.pipeline.tracker.flush_lsn
        logger.info(
            "streaming slot %s from %s to topics %s.*",
            config.replication.slot_name,
            self.pipeline.source.start_lsn,
            config.topic_prefix,
        )

    def run(self, stop: threading.Event) -> None:
        self.pipeline.run(stop)

    def made_progress(self) -> bool:
        return self.pipeline.tracker.flush_lsn > self._started_at

    def abandon(self) -> None:
        # Records on the wire end within the delivery timeout, delivered or failed.
        self._parts.publisher.abandon(self._delivery_timeout + 5)


def _database_name(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(dsn).get("dbname") or "postgres")


def streaming_parts_after_snapshot(config: BridgeConfig, parts: PipelineParts) -> PipelineParts:
    """The snapshot's parts, for streaming. Exactly once, streaming needs a transactional
    producer; the rest is the snapshot's all the same: its builder knows each table's
    relation, so DDL right after the snapshot is compared with what the snapshot sent (a
    rewrite is seen, bridge.events)."""
    if not config.kafka.exactly_once:
        return parts
    parts.publisher.close()
    return replace(parts, publisher=build_publisher(config, transactional=True))


def with_resolved_delivery(config: BridgeConfig) -> BridgeConfig:
    """``config`` with ``exactly.once.support = requested`` resolved for this start
    (bridge.sink.delivery_mode); what :func:`run` does first, before anything is built."""
    return resolve_delivery(config, _probe_transactions)


def _probe_transactions(config: BridgeConfig) -> str | None:
    """Why the cluster refuses this bridge Kafka transactions, or ``None``
    (bridge.sink.delivery_mode), waiting for a cluster that does not answer yet."""

    def probe() -> str | None:
        # The longest transaction timeout the bridge asks for: the snapshot's chunks'.
        timeout_ms = max(SNAPSHOT_TRANSACTION_TIMEOUT_MS, config.kafka.delivery_timeout_ms)
        return probe_transactions(config, kafka_client(config), timeout_ms)

    def transient(exc: Exception) -> bool:
        fenced = isinstance(exc, ProducerFencedError)
        return not fenced and isinstance(exc, KafkaTransactionError | KafkaException | TimeoutError)

    return config.retry.run("kafka", "asking the cluster for Kafka transactions", probe, transient)


def run(config: BridgeConfig, stop: threading.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or ``stop``); 0 after a clean stop."""
    stop = stop or threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        logger.info("%s received: draining and stopping", signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
    metrics = BridgeMetrics()
    if config.metrics.port:
        metrics.serve(config.metrics.port, config.metrics.host)
    if not native.ENABLED and enabled(NATIVE):  # not built, rather than switched off
        logger.warning(
            "the C accelerator (bridge.native) is not built: every row takes the pure-Python "
            "path, at 3-7 times the CPU per change; reinstall pgbridge where a C compiler is "
            "available to build it"
        )
    try:
        config = with_resolved_delivery(config)
        metrics.delivery(exactly_once=config.kafka.exactly_once)
        prepare_signal_table(config)
        # After a transient Kafka failure a publisher is spent: each restart takes fresh parts;
        # streaming goes on with the snapshot's (its relation and schema caches are warm).
        spare = [build_parts(config)]

        def next_parts() -> PipelineParts:
            return spare.pop() if spare else build_parts(config)

        # The snapshot, when one is due, is a second source feeding the same stages; streaming
        # starts only once every snapshot row is acknowledged (bridge.snapshot). A restarted
        # snapshot resumes from its state file, as after a crash.
        snapshots: list[_SnapshotAttempt] = []

        def start_snapshot() -> _SnapshotAttempt:
            snapshots.append(_SnapshotAttempt(config, next_parts()))
            return snapshots[-1]

        stream_with_restarts(start_snapshot, stop, config.retry)
        if not snapshots or not snapshots[-1].stream_after:
            if snapshots:
                snapshots[-1].parts.publisher.close()
            return 0
        spare.append(streaming_parts_after_snapshot(config, snapshots[-1].parts))

        def streaming_parts() -> PipelineParts:
            if spare:
                return spare.pop()
            return build_parts(config, transactional=config.kafka.exactly_once)

        stream_with_restarts(
            lambda: _StreamingAttempt(config, metrics, streaming_parts()), stop, config.retry
        )
    except PgBridgeError as exc:
        metrics.error(type(exc).__name__)
        raise
    finally:
        metrics.close()
    return 0
