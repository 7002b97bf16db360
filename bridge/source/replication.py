"""The logical replication source: one slot streamed over psycopg 3's low-level ``pq`` layer.

psycopg 3 has no replication API, and its ``execute()`` must not drive START_REPLICATION (it
would wait for a result that never ends), so the COPY BOTH stream is run on ``conn.pgconn``:
``send_query`` starts it, ``get_result`` must answer ``COPY_BOTH``, then ``get_copy_data(1)``
(non-blocking) returns buffered CopyData, ``select`` on ``pgconn.socket`` waits for more and
``consume_input`` reads it, and ``put_copy_data`` + ``flush`` send standby status updates. This
is the loop ``pg_recvlogical`` runs.

One thread, one connection at a time. Around the loop:

- :mod:`bridge.source.slots` validates the server and creates/validates slot and publication;
- :mod:`bridge.source.protocol` picks the protocol version and options;
- :class:`~bridge.source.assembler.StreamAssembler` turns streamed transactions into ordinary
  ones (bounded memory, spill to disk);
- :class:`~bridge.source.progress.Progress` decides the status values and drops what the server
  resends after a reconnect.
- :mod:`bridge.source.copy_both` builds the replication conninfo and ends the copy politely;
  :mod:`bridge.source.heartbeat` runs ``heartbeat.action.query`` on a connection of its own.

Reconnects: a broken connection, a terminated walsender (``pg_terminate_backend``, SQLSTATE
57P01) or a server restart is retried with exponential backoff from the flush position; errors
that another attempt cannot fix (privileges, wal_level, invalidated slot, missing publication)
are raised at once as typed :class:`~bridge.source.errors.SourceError` subclasses. A slot still
held by the previous walsender (SQLSTATE 55006, right after a termination) is retried for
``ReconnectPolicy.slot_in_use_timeout`` seconds.

Failover (PostgreSQL 17+ failover slots, :mod:`bridge.source.failover`): with a multi-host DSN
a reconnect after the primary died lands on whichever host answers; every connection checks
``pg_is_in_recovery()`` on itself, and a standby is waited on (retried under the same policy,
``pgbridge_waiting_for_dependency{dependency="postgres"}``) until it is promoted or the DSN's
next host is the primary. The promoted standby's synced slot is streamed from the flush
position, as after any reconnect.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import psycopg
from psycopg import pq

from bridge.pgoutput.copyboth import (
    PrimaryKeepalive,
    parse_copy_data,
    split_xlogdata,
    standby_status_update,
)
from bridge.pgoutput.decoder import Decoder
from bridge.pgoutput.lsn import Lsn, unix_micros_to_pg_timestamp
from bridge.pgoutput.messages import LogicalMessage
from bridge.retry import WAITED_SECONDS, WAITING_FOR
from bridge.source import slots
from bridge.source.assembler import StreamAssembler, in_stream_decoder
from bridge.source.config import SourceConfig
from bridge.source.copy_both import end_copy, replication_conninfo
from bridge.source.errors import (
    ReplicationConnectionLost,
    ServerInRecoveryError,
    SlotInUseError,
    SourceError,
)
from bridge.source.failover import check_not_in_recovery, enable_failover
from bridge.source.frame_reader import STREAMING, FrameReader, frame_reading
from bridge.source.heartbeat import HeartbeatQuery
from bridge.source.progress import Progress
from bridge.source.protocol import StreamOptions, negotiate
from bridge.source.server_errors import ServerErrors

logger = logging.getLogger(__name__)

__all__ = ["LogicalReplicationSource", "SourceStats"]

_T = TypeVar("_T")

#: A taker of insert runs (:meth:`LogicalReplicationSource.take_insert_runs`): given a batch of
#: frames and the index of an Insert, how many frames from there it published.
InsertRuns = Callable[[list[bytes], int], int]


@dataclass(slots=True)
class SourceStats:
    """Counters of one source, across reconnects."""

    reconnects: int = 0
    messages_received: int = 0
    keepalives: int = 0
    status_updates: int = 0
    duplicates_dropped: int = 0
    heartbeats: int = 0


class LogicalReplicationSource:
    """Streams one logical replication slot; implements :class:`bridge.source.api.ChangeSource`.

    ``open()`` checks the server, ensures publication and slot, and connects;
    :meth:`messages` yields committed transactions' messages (``None`` when idle);
    :meth:`acknowledge` takes the ack tracker's flush position; :meth:`close` reports it and
    disconnects. One thread: call every method, :meth:`acknowledge` included, from the thread
    that iterates (the ack tracker is the thread-safe part; read its flush position there).
    """

    def __init__(
        self,
        config: SourceConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.stats = SourceStats()
        self._clock = clock
        self._sleep = sleep
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._heartbeat = (
            HeartbeatQuery(config.dsn, config.heartbeat_query)
            if config.heartbeat_query is not None
            else None
        )
        self._server: slots.ServerInfo | None = None
        self._options: StreamOptions | None = None
        self._progress: Progress | None = None
        self._decoder: Decoder | None = None
        self._assembler: StreamAssembler | None = None
        self._start_lsn = Lsn(0)
        #: The WAL position of the message :meth:`messages` yielded last (its XLogData's start:
        #: for a change, the LSN of its WAL record; Debezium's ``source.lsn``).
        self.message_lsn = 0
        self._next_status = 0.0
        self._next_heartbeat = 0.0
        self._closed = False
        #: The thread reading the current connection's frames, while one does.
        self._reader: FrameReader | None = None
        # The pipeline's taker of insert runs (take_insert_runs), and the shortest run it takes.
        self._insert_runs: InsertRuns | None = None
        self._min_run = 0

    # -- facts ----------------------------------------------------------------------------------

    @property
    def start_lsn(self) -> Lsn:
        """The slot's confirmed flush position when the source opened; seed the ack tracker."""
        return self._start_lsn

    @property
    def server_version_num(self) -> int:
        return self._require(self._server, "server").version_num

    @property
    def options(self) -> StreamOptions:
        """The negotiated pgoutput options."""
        return self._require(self._options, "options")

    @property
    def assembler(self) -> StreamAssembler:
        return self._require(self._assembler, "assembler")

    @property
    def progress(self) -> Progress:
        return self._require(self._progress, "progress")

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self) -> None:
        """Validate the server, ensure publication and slot, and start streaming. A standby
        (in recovery) is waited on under the reconnect policy: nothing is created there."""
        cfg = self.config
        server, slot = self._prepare_with_retry()
        if cfg.failover and not slot.failover:
            enable_failover(cfg.dsn, cfg.slot_name)
        if slot.synced:
            logger.info(
                "slot %s was synchronised from a former primary; streaming it on the promoted "
                "server from %s",
                cfg.slot_name,
                slot.confirmed_flush_lsn,
            )
        self._server = server
        self._options = negotiate(
            server.version_num,
            (cfg.publication.name,),
            binary=cfg.binary,
            streaming=cfg.streaming,
        )
        start = slot.confirmed_flush_lsn
        if cfg.start_after is not None and cfg.start_after > start:
            logger.info(
                "slot %s is confirmed up to %s; starting at %s, which the connector taken "
                "over delivered up to",
                cfg.slot_name,
                start,
                cfg.start_after,
            )
            start = cfg.start_after
        self._start_lsn = start
        self._progress = Progress(start)
        self._assembler = StreamAssembler(
            in_stream_decoder(self._options.proto_version),
            spill_threshold=cfg.spill_threshold,
            spill_dir=cfg.spill_dir,
        )
        logger.info(
            # The slot's restart LSN: where the server decodes from (what a report of a
            # decoding session in the server's log is compared with).
            "streaming slot %s from %s, decoding from %s (PostgreSQL %d, %s)",
            cfg.slot_name,
            start,
            slot.restart_lsn,
            server.version_num,
            self._options,
        )
        self._connect_with_retry(first=True)

    def _prepare(self) -> tuple[slots.ServerInfo, slots.SlotInfo]:
        cfg = self.config
        try:
            with psycopg.connect(cfg.dsn, autocommit=True) as conn:
                server = slots.inspect_server(conn)  # ServerInRecoveryError on a standby
                slots.ensure_publication(conn, cfg.publication)
                slot = slots.ensure_slot(
                    conn,
                    cfg.slot_name,
                    server.database,
                    create=cfg.create_slot,
                    failover=cfg.failover,
                )
        except psycopg.OperationalError as exc:
            raise self._errors.from_exception(exc) from exc
        except psycopg.Error as exc:
            # E.g. CREATE PUBLICATION ... FOR ALL TABLES without superuser (42501).
            raise SourceError(
                f"preparing publication {cfg.publication.name!r} and slot {cfg.slot_name!r} "
                f"failed: {exc}",
                sqlstate=exc.sqlstate,
            ) from exc
        return server, slot

    def _prepare_with_retry(self) -> tuple[slots.ServerInfo, slots.SlotInfo]:
        """:meth:`_prepare`, waiting while the server reached is a standby (a failover under
        way, or a multi-host DSN whose first host answering is not the primary)."""
        policy = self.config.reconnect
        attempt = 0
        while True:
            try:
                prepared = self._prepare()
            except ServerInRecoveryError as exc:
                attempt += 1
                if policy.max_attempts is not None and attempt > policy.max_attempts:
                    WAITING_FOR.pop("postgres", None)
                    raise
                delay = policy.delay(attempt)
                WAITING_FOR["postgres"] = "a primary (the server is in recovery)"
                logger.warning("%s; retry %d in %.1f s", exc, attempt, delay)
                self._sleep(delay)
                WAITED_SECONDS["postgres"] = WAITED_SECONDS.get("postgres", 0.0) + delay
                continue
            if attempt:
                WAITING_FOR.pop("postgres", None)
            return prepared

    def close(self) -> None:
        """Send the last flush position (best effort) and disconnect."""
        if self._closed:
            return
        self._closed = True
        self._stop_reader()
        if self._conn is not None and self._progress is not None:
            try:
                self._send_status()
                end_copy(self._conn.pgconn, self._clock)
            except (SourceError, psycopg.Error, OSError) as exc:
                logger.info("replication stream not ended cleanly: %s", exc)
        self._disconnect()
        if self._heartbeat is not None:
            self._heartbeat.close()
        if self._assembler is not None:
            self._assembler.close()

    def __enter__(self) -> LogicalReplicationSource:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the pipeline's side --------------------------------------------------------------------

    def acknowledge(self, flush_lsn: Lsn) -> None:
        """Everything up to ``flush_lsn`` is delivered; it will be confirmed at the next status."""
        self.progress.acknowledge(flush_lsn)

    def keepalive(self) -> None:
        """Send a status update if one is due, while the pipeline waits on another dependency
        (the walsender ends a connection it hears nothing from for wal_sender_timeout). A lost
        connection is left for the next read to reconnect."""
        if self._conn is None or self._clock() < self._next_status:
            return
        try:
            self._send_status()
        except SourceError as exc:
            logger.warning("status update while waiting failed: %s", exc)

    def take_insert_runs(self, runs: InsertRuns, min_run: int) -> None:
        """Offer ``runs`` the frames of a batch that start with at least ``min_run`` Inserts
        (outside streamed transactions, while no resent change is being skipped): it publishes
        the leading ones it can itself and answers how many; the rest, and everything else,
        come out of :meth:`messages` as before. After a run, :meth:`messages` yields ``None``
        (the pipeline's tick) with :attr:`message_lsn` at the run's last frame. Only the frame
        reader's batches are offered (see :meth:`_stream_batches`)."""
        self._insert_runs = runs
        self._min_run = max(1, min_run)

    def messages(self) -> Iterator[LogicalMessage | None]:
        """Committed transactions' messages in commit order; ``None`` after ``idle_interval``
        without one. Reconnects happen inside; the iterator ends only when the source closes."""
        while not self._closed:
            try:
                yield from self._stream()
            except ReplicationConnectionLost as exc:
                if self._closed:
                    return
                logger.warning("%s; reconnecting from %s", exc, self.progress.resume_lsn)
                self._disconnect()
                self._connect_with_retry(first=False, cause=exc)

    # -- connection -----------------------------------------------------------------------------

    def _connect_with_retry(self, *, first: bool, cause: SourceError | None = None) -> None:
        policy = self.config.reconnect
        retries = 0
        busy_since: float | None = None
        last: SourceError | None = cause
        immediate = first  # open() tries once at once; a reconnect waits before its first try
        while True:
            if not immediate:
                retries += 1
                if policy.max_attempts is not None and retries > policy.max_attempts:
                    detail = last.args[0] if last is not None else "gave up"
                    WAITING_FOR.pop("postgres", None)
                    raise ReplicationConnectionLost(str(detail), attempts=retries - 1)
                WAITING_FOR["postgres"] = (
                    "a primary (the server is in recovery)"
                    if isinstance(last, ServerInRecoveryError)
                    else "replication connection"
                )
                delay = policy.delay(retries)
                self._sleep(delay)
                WAITED_SECONDS["postgres"] = WAITED_SECONDS.get("postgres", 0.0) + delay
            immediate = False
            try:
                self._connect()
            except SlotInUseError as exc:
                now = self._clock()
                busy_since = now if busy_since is None else busy_since
                if now - busy_since >= policy.slot_in_use_timeout:
                    raise
                logger.info("slot busy (%s), retrying", exc)
                last = exc
                continue
            except ServerInRecoveryError as exc:
                # Not a slot of ours to create or stream here: wait for the promotion (or for
                # the DSN's next host to be the primary).
                logger.warning("%s (retry %d)", exc, retries + 1)
                last = exc
                continue
            except ReplicationConnectionLost as exc:
                logger.warning("connecting failed: %s", exc)
                last = exc
                continue
            if not first:
                self.stats.reconnects += 1
                WAITING_FOR.pop("postgres", None)
            return

    def _connect(self) -> None:
        cfg = self.config
        options = self.options
        progress = self.progress
        try:
            conn = psycopg.connect(replication_conninfo(self.config), autocommit=True)
        except psycopg.OperationalError as exc:
            raise self._errors.from_exception(exc) from exc
        pgconn = conn.pgconn
        try:
            # A multi-host DSN without target_session_attrs=read-write (or a libpq that does
            # not apply it) may land on a standby; a synced slot cannot stream there and
            # nothing else may be created there. Waited on by _connect_with_retry.
            check_not_in_recovery(pgconn)
        except SourceError:
            conn.close()
            raise
        if pgconn.server_version != self.server_version_num:
            # The server was upgraded under us; the negotiated options may no longer fit.
            conn.close()
            raise SourceError(
                f"server version changed from {self.server_version_num} to "
                f"{pgconn.server_version} while streaming; restart the source"
            )
        start = progress.resume_lsn
        command = options.start_replication(cfg.slot_name, start)
        logger.debug("%s", command.decode())
        try:
            pgconn.send_query(command)
            result = pgconn.get_result()
        except psycopg.OperationalError as exc:
            conn.close()
            raise self._errors.from_exception(exc) from exc
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            error = self._errors.from_result(result, pgconn)
            conn.close()
            raise error
        self._conn = conn
        self._decoder = Decoder(options.proto_version)
        # Whatever was buffered belonged to the old connection; the server resends it.
        self.assembler.reset()
        progress.reconnected()
        now = self._clock()
        self._next_status = now  # tell the server where we are right away
        self._next_heartbeat = now + cfg.heartbeat_interval

    def _disconnect(self) -> None:
        self._stop_reader()
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error as exc:  # closing a broken connection may complain
                logger.debug("closing replication connection: %s", exc)
            self._conn = None

    @property
    def _errors(self) -> ServerErrors:
        user = self._server.user if self._server else None
        return ServerErrors(self.config.slot_name, self.config.publication.name, user)

    # -- streaming ------------------------------------------------------------------------------

    def _stream(self) -> Iterator[LogicalMessage | None]:
        conn = self._conn
        if conn is None:
            raise ReplicationConnectionLost("not connected")
        module = frame_reading()
        if module is not None:
            reader = FrameReader(conn.pgconn, module)
            self._reader = reader
            reader.start()
            try:
                yield from self._stream_batches(reader)
            finally:
                self._stop_reader()
            return
        yield from self._stream_in_line(conn)

    def _stop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.stop()

    def _stream_batches(self, reader: FrameReader) -> Iterator[LogicalMessage | None]:
        """:meth:`_stream_in_line`'s loop over the frames a :class:`FrameReader` receives.
        The per-frame part is the same in both, written out in each on purpose: a shared
        helper generator would cost a call and a generator per change on the hot path."""
        last_yield = self._clock()
        idle = self.config.idle_interval
        heartbeat = self.config.heartbeat_query is not None
        handle = self._handle
        runs, min_run, offer = self._insert_runs, self._min_run, True
        while not self._closed:
            now = self._clock()
            if now - last_yield >= idle:
                yield None  # the pipeline's tick (see _stream_in_line)
                last_yield = now = self._clock()
            if now >= self._next_status or (heartbeat and now >= self._next_heartbeat):
                self._housekeeping(now)
            deadline = min(self._next_status, last_yield + idle)
            if heartbeat:
                deadline = min(deadline, self._next_heartbeat)
            batch = reader.get(max(0.0, deadline - now))
            if batch is None:
                continue
            frames, status = batch
            index, count = 0, len(frames)
            while index < count:
                buf = frames[index]
                index += 1
                if runs is not None and buf[0] == 0x77 and len(buf) > 30:  # XLogData
                    if buf[25] != 0x49:  # not an Insert: the next Insert may start a run
                        offer = True
                    elif offer and count - index >= min_run - 1 and self._runs_allowed():
                        # Declined: the Inserts that follow it are not offered again (a run
                        # too short stays so), up to the next message of another kind.
                        offer = False
                        taken = runs(frames, index - 1)
                        if taken:
                            self._took_run(frames[index - 2 + taken], taken)
                            index += taken - 1
                            offer = True
                            yield None  # the pipeline's tick: its records may be served now
                            last_yield = now
                            continue
                emitted = handle(buf)
                if isinstance(emitted, tuple):  # the usual: nothing or one message
                    for message in emitted:
                        yield message
                        last_yield = now  # read before the batch: close enough for idling
                    continue
                for message in emitted:
                    yield message
                    last_yield = self._clock()
                    # A long replay of a spilled transaction must not starve status updates.
                    self._housekeeping(last_yield)
            if status != STREAMING:
                error = reader.error
                self._stop_reader()  # the connection is this thread's again
                pgconn = self._require(self._conn, "connection").pgconn
                raise self._errors.stream_ended(pgconn, error)

    def _stream_in_line(
        self, conn: psycopg.Connection[tuple[object, ...]]
    ) -> Iterator[LogicalMessage | None]:
        pgconn = conn.pgconn
        last_yield = self._clock()
        idle = self.config.idle_interval
        heartbeat = self.config.heartbeat_query is not None
        handle = self._handle
        while not self._closed:
            now = self._clock()
            if now - last_yield >= idle:
                # Also while only keepalives or buffered stream blocks arrive: the pipeline
                # serves its delivery callbacks (and so its acknowledgements) on these ticks.
                yield None
                last_yield = now = self._clock()
            if now >= self._next_status or (heartbeat and now >= self._next_heartbeat):
                self._housekeeping(now)  # checked here first: this runs for every frame
            try:
                nbytes, data = pgconn.get_copy_data(1)
            except psycopg.OperationalError as exc:
                raise self._errors.stream_ended(pgconn, exc) from exc
            if nbytes > 0:
                emitted = handle(bytes(data))
                if isinstance(emitted, tuple):  # the usual: nothing or one message
                    for message in emitted:
                        yield message
                        last_yield = now  # read before the frame: close enough for idling
                    continue
                for message in emitted:
                    yield message
                    last_yield = self._clock()
                    # A long replay of a spilled transaction must not starve status updates.
                    self._housekeeping(last_yield)
                continue
            if nbytes == -1:
                raise self._errors.stream_ended(pgconn, None)
            # Nothing buffered: wait for the socket, the next status update or the idle tick.
            deadline = min(self._next_status, last_yield + idle)
            if self.config.heartbeat_query is not None:
                deadline = min(deadline, self._next_heartbeat)
            timeout = max(0.0, deadline - now)
            try:
                ready, _, _ = select.select([pgconn.socket], [], [], timeout)
                if ready:
                    pgconn.consume_input()
            except (OSError, psycopg.OperationalError) as exc:
                raise self._errors.stream_ended(pgconn, exc) from exc

    def _handle(self, buf: bytes) -> tuple[LogicalMessage, ...] | Iterator[LogicalMessage]:
        """The messages one CopyData frame releases, resends filtered out: a tuple (of at most
        one), or an iterator over a committed stream's replay."""
        progress, assembler, decoder = self._progress, self._assembler, self._decoder
        assert progress is not None and assembler is not None and decoder is not None
        xlogdata = split_xlogdata(buf)
        if xlogdata is None:
            frame = parse_copy_data(buf)  # raises DecodeError for a malformed frame
            if isinstance(frame, PrimaryKeepalive):
                self.stats.keepalives += 1
                progress.on_keepalive(frame.wal_end)
                if frame.reply_requested:
                    self._send_status()
                return ()
            xlogdata = (frame.wal_start, frame.wal_end, frame.payload)
        wal_start, wal_end, payload = xlogdata
        self.stats.messages_received += 1
        progress.on_wal_data(wal_start, wal_end)
        self.message_lsn = wal_start
        message = decoder.decode(payload)
        if assembler.passes(message):  # outside streamed transactions: the usual case
            if progress.admit(message):
                return (message,)
            self.stats.duplicates_dropped += 1
            return ()
        released = assembler.feed(message, payload, wal_start)
        if not isinstance(released, tuple):
            return self._admitted(released)
        if not released:
            return released
        admitted = tuple(m for m in released if progress.admit(m))
        self.stats.duplicates_dropped += len(released) - len(admitted)
        return admitted

    def _runs_allowed(self) -> bool:
        """Whether an Insert frame would be decoded as a plain insert and admitted as it is:
        outside a streamed transaction, with no resent change to skip."""
        progress, assembler = self._progress, self._assembler
        assert progress is not None and assembler is not None
        return not assembler.in_stream and progress.admits_rows

    def _took_run(self, last: bytes, count: int) -> None:
        """What :meth:`_handle` accounts for each message, for ``count`` Inserts the pipeline
        took as a run, ``last`` the run's last frame (positions only grow along a stream)."""
        progress = self._progress
        assert progress is not None
        xlogdata = split_xlogdata(last)
        assert xlogdata is not None
        wal_start, wal_end, _ = xlogdata
        self.stats.messages_received += count
        progress.on_wal_data(wal_start, wal_end)
        progress.admit_rows(count)
        self.message_lsn = wal_start

    def _admitted(self, messages: Iterator[LogicalMessage]) -> Iterator[LogicalMessage]:
        progress, assembler = self.progress, self.assembler
        for message in messages:
            self.message_lsn = assembler.message_lsn  # the replayed message's own position
            if progress.admit(message):
                yield message
            else:
                self.stats.duplicates_dropped += 1

    def _housekeeping(self, now: float) -> None:
        if now >= self._next_status:
            self._send_status()
        if self._heartbeat is not None and now >= self._next_heartbeat:
            if self._heartbeat.run():
                self.stats.heartbeats += 1
            self._next_heartbeat = now + self.config.heartbeat_interval

    def _send_status(self) -> None:
        conn = self._conn
        if conn is None:
            return
        progress = self.progress
        flush = progress.flush_position(self.assembler.open_transactions > 0)
        write = max(progress.received, flush)
        send_time = unix_micros_to_pg_timestamp(time.time_ns() // 1000)
        message = standby_status_update(write, flush, flush, send_time)
        if self._reader is not None:  # the reader owns the connection: it sends, in order
            self._reader.send(message)
        else:
            self._send_now(conn.pgconn, message)
        self.stats.status_updates += 1
        self._next_status = self._clock() + self.config.status_interval
        logger.debug("status update: write %s flush %s", write, flush)

    def _send_now(self, pgconn: pq.abc.PGconn, message: bytes) -> None:
        try:
            pgconn.put_copy_data(message)
            pgconn.flush()
        except psycopg.OperationalError as exc:
            raise self._errors.stream_ended(pgconn, exc) from exc

    @staticmethod
    def _require(value: _T | None, what: str) -> _T:
        if value is None:
            raise SourceError(f"the source is not open ({what} unknown); call open() first")
        return value
