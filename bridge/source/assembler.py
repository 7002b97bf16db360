"""Assembly of streamed (in-progress) transactions into ordinary Begin … Commit transactions.

With ``streaming`` on (protocol 2+, PostgreSQL 14+) the server sends a large transaction before
it commits, in blocks between Stream Start and Stream Stop, possibly interleaved with other
transactions, and ends it with Stream Commit or Stream Abort. Downstream stages only understand
committed transactions in commit order, so this module holds each open streamed transaction
per top-level xid and replays it at Stream Commit as ``Begin(commit_lsn, commit_ts, xid)``, the
changes in the order received, and ``Commit(flags, commit_lsn, end_lsn, commit_ts)``.

Memory is bounded: the raw pgoutput payloads (not decoded objects) are buffered, and whenever the
buffered bytes of all open transactions exceed ``spill_threshold`` the largest in-memory
transaction moves to a temporary file, and everything later of that transaction goes straight to
the file. At replay the payloads are decoded again with a decoder kept in "inside a stream"
state (:func:`in_stream_decoder`), so memory and disk share one path.

Spill format, one anonymous temporary file per transaction (``tempfile.TemporaryFile``: already
unlinked, so a crash leaves nothing behind): a sequence of records ``xid:u32 lsn:u64
length:u32 payload``, big-endian, where ``xid`` is the (sub)transaction the change belongs to and
``lsn`` the WAL position its XLogData frame carried (the change's own LSN, which the envelope's
``source.lsn`` reports; :attr:`StreamAssembler.message_lsn` gives it back at replay).

Aborts: Stream Abort with ``subxid == xid`` drops the transaction (and its file). With
``subxid != xid`` only that subtransaction's changes are dropped: inside a stream every change
carries the xid of the subtransaction that made it, so in-memory records with that xid are
removed at once and spilled ones are skipped at replay.

Two-phase messages raise :class:`~bridge.source.errors.TwoPhaseNotSupportedError`: pgbridge
never asks for ``two_phase``, so the server decodes a prepared transaction as an ordinary one at
COMMIT PREPARED (and sends nothing for ROLLBACK PREPARED).

Pure apart from the temporary files: messages and payloads in, messages out; no server needed.
"""

from __future__ import annotations

import logging
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bridge.pgoutput.decoder import Decoder
from bridge.pgoutput.messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Prepare,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Update,
)
from bridge.source.errors import SpillError, StreamProtocolError, TwoPhaseNotSupportedError

logger = logging.getLogger(__name__)

__all__ = ["AssemblerStats", "StreamAssembler", "in_stream_decoder"]

_RECORD = struct.Struct("!IQI")  # xid, lsn, payload length
#: Bytes a buffered record counts for besides its payload (its header in the spill file).
RECORD_OVERHEAD = _RECORD.size

_TWO_PHASE = (BeginPrepare, Prepare, CommitPrepared, RollbackPrepared, StreamPrepare)
#: Outside a stream these are emitted as they come (a shortcut past feed()'s type checks).
_PASSED_THROUGH = frozenset((Begin, Commit, Insert, Update, Delete))


def in_stream_decoder(protocol_version: int) -> Callable[[bytes], LogicalMessage]:
    """A decode function for payloads that were received inside a Stream Start … Stop block.

    The decoder's only state is "inside a stream" (which adds the xid prefix to change
    messages); priming a private decoder with a Stream Start puts it there for good.
    """
    # Protocol 1 has no streams, so nothing is ever buffered there; the layout of buffered
    # messages is the same in versions 2 to 4.
    decoder = Decoder(max(protocol_version, 2))
    decoder.decode(b"S" + struct.pack("!IB", 0, 1))
    return decoder.decode


@dataclass(slots=True)
class AssemblerStats:
    """Counters for tests, logs and metrics."""

    streams_committed: int = 0
    streams_aborted: int = 0
    subtransactions_aborted: int = 0
    transactions_spilled: int = 0
    bytes_spilled: int = 0
    memory_bytes: int = 0  # payload bytes (plus record headers) buffered in memory now
    peak_memory_bytes: int = 0  # the highest memory_bytes after any feed()


@dataclass(slots=True)
class _OpenTransaction:
    xid: int
    records: list[tuple[int, int, bytes]] = field(default_factory=list)  # xid, lsn, payload
    memory: int = 0
    spill: IO[bytes] | None = None
    aborted_subxids: set[int] = field(default_factory=set)
    changes: int = 0


class StreamAssembler:
    """Turns the server's message sequence into committed transactions in commit order.

    Feed every decoded message with the payload and WAL position it came from; :meth:`feed`
    returns the messages to pass on now: the message itself outside a stream, nothing while a
    transaction is being streamed, and the whole transaction at its Stream Commit. Consume each
    returned iterator before the next call (a replay reads its spill file lazily); while it is
    consumed, :attr:`message_lsn` is the WAL position of the message it yielded last.
    """

    def __init__(
        self,
        redecode: Callable[[bytes], LogicalMessage],
        *,
        spill_threshold: int = 64 * 1024 * 1024,
        spill_dir: Path | None = None,
    ) -> None:
        if spill_threshold < 0:
            raise ValueError(f"spill_threshold must not be negative, got {spill_threshold}")
        self._redecode = redecode
        self._threshold = spill_threshold
        self._spill_dir = spill_dir
        self._open: dict[int, _OpenTransaction] = {}
        self._current: _OpenTransaction | None = None
        self.stats = AssemblerStats()
        #: During a replay: the WAL position of the message yielded last (a buffered change's
        #: own LSN; the Stream Commit's for the Begin and Commit made of it).
        self.message_lsn = 0

    @property
    def in_stream(self) -> bool:
        """True between Stream Start and Stream Stop."""
        return self._current is not None

    @property
    def open_transactions(self) -> int:
        """Streamed transactions neither committed nor aborted yet."""
        return len(self._open)

    def passes(self, message: LogicalMessage) -> bool:
        """Whether :meth:`feed` would only hand ``message`` back (an ordinary transaction's
        Begin, change or Commit outside a stream): the caller may skip the call."""
        return self._current is None and type(message) in _PASSED_THROUGH

    def feed(
        self, message: LogicalMessage, payload: bytes, lsn: int = 0
    ) -> tuple[LogicalMessage, ...] | Iterator[LogicalMessage]:
        """Account for one message (``lsn``: its XLogData's WAL start); return what can be
        emitted now, in order: a tuple, or an iterator when a committed stream is replayed
        (read lazily: it may be long)."""
        if self._current is None and type(message) in _PASSED_THROUGH:
            return (message,)  # the usual case, outside streamed transactions
        if isinstance(message, StreamStart):
            self._stream_start(message)
            return ()
        if isinstance(message, StreamStop):
            if self._current is None:
                raise StreamProtocolError("Stream Stop", "no stream is open")
            self._current = None
            return ()
        if isinstance(message, StreamCommit):
            return self._stream_commit(message, lsn)
        if isinstance(message, StreamAbort):
            self._stream_abort(message)
            return ()
        if isinstance(message, _TWO_PHASE):
            raise TwoPhaseNotSupportedError(type(message).__name__, message.xid)
        current = self._current
        if current is None or (isinstance(message, Message) and not message.transactional):
            # Not part of a streamed transaction: an ordinary transaction's message, or a
            # non-transactional logical message, which the server sends as soon as it is decoded.
            return (message,)
        # Origin has no xid and belongs to the top-level transaction; everything else in a
        # stream carries the xid of the (sub)transaction that made the change.
        xid = getattr(message, "xid", None)
        self._append(current, current.xid if xid is None else xid, lsn, payload)
        return ()

    def reset(self) -> None:
        """Forget every open transaction (after a reconnect the server sends them again)."""
        for txn in self._open.values():
            self._discard(txn)
        self._open.clear()
        self._current = None
        self.stats.memory_bytes = 0

    close = reset

    # -- stream framing -----------------------------------------------------------------------

    def _stream_start(self, message: StreamStart) -> None:
        if self._current is not None:
            raise StreamProtocolError("Stream Start", "a stream is already open", message.xid)
        txn = self._open.get(message.xid)
        if txn is None:
            if not message.first_segment:
                # The first blocks never reached us: replaying the rest would emit half a
                # transaction.
                raise StreamProtocolError(
                    "Stream Start",
                    "continuation of a transaction whose start was not seen",
                    message.xid,
                )
            txn = self._open[message.xid] = _OpenTransaction(message.xid)
        elif message.first_segment:
            raise StreamProtocolError(
                "Stream Start", "first segment of a transaction that is already open", message.xid
            )
        self._current = txn

    def _stream_abort(self, message: StreamAbort) -> None:
        if self._current is not None:
            raise StreamProtocolError("Stream Abort", "inside an open stream", message.xid)
        txn = self._open.get(message.xid)
        if txn is None:
            # Nothing of it was buffered (the server only aborts what it streamed, but after a
            # reset we may not have seen it): nothing to drop.
            logger.debug("Stream Abort for unknown xid %d ignored", message.xid)
            return
        if message.subxid == message.xid:
            del self._open[message.xid]
            self._discard(txn)
            self.stats.streams_aborted += 1
            return
        txn.aborted_subxids.add(message.subxid)
        self.stats.subtransactions_aborted += 1
        if txn.records:
            kept = [r for r in txn.records if r[0] != message.subxid]
            freed = sum(len(p) + RECORD_OVERHEAD for x, _, p in txn.records if x == message.subxid)
            txn.records = kept
            txn.memory -= freed
            self.stats.memory_bytes -= freed

    def _stream_commit(self, message: StreamCommit, lsn: int) -> Iterator[LogicalMessage]:
        if self._current is not None:
            raise StreamProtocolError("Stream Commit", "inside an open stream", message.xid)
        txn = self._open.pop(message.xid, None)
        if txn is None:
            raise StreamProtocolError("Stream Commit", "no streamed transaction open", message.xid)
        self.stats.streams_committed += 1
        return self._replay(txn, message, lsn)

    # -- buffering ----------------------------------------------------------------------------

    def _append(self, txn: _OpenTransaction, xid: int, lsn: int, payload: bytes) -> None:
        txn.changes += 1
        if txn.spill is not None:
            self._write(txn.spill, xid, lsn, payload)
            return
        size = len(payload) + RECORD_OVERHEAD
        txn.records.append((xid, lsn, payload))
        txn.memory += size
        self.stats.memory_bytes += size
        while self.stats.memory_bytes > self._threshold:
            # Like PostgreSQL's reorder buffer: evict the biggest, which frees the most memory
            # for the fewest files.
            candidates = [t for t in self._open.values() if t.spill is None and t.memory > 0]
            if not candidates:
                break  # what remains belongs to a replay in progress; it is freed as it ends
            self._spill(max(candidates, key=lambda t: t.memory))
        self.stats.peak_memory_bytes = max(self.stats.peak_memory_bytes, self.stats.memory_bytes)

    @contextmanager
    def _spilling(self, xid: int) -> Iterator[None]:
        """Disk faults of the spill file as :class:`SpillError` naming directory and xid."""
        try:
            yield
        except OSError as exc:
            directory = str(self._spill_dir or tempfile.gettempdir())
            raise SpillError(directory, xid, exc) from exc

    def _spill(self, txn: _OpenTransaction) -> None:
        with self._spilling(txn.xid):
            # Owned by the transaction until its replay or abort closes it: no context manager.
            spill = tempfile.TemporaryFile(prefix=f"pgbridge-xid{txn.xid}-", dir=self._spill_dir)  # noqa: SIM115
            try:
                for xid, lsn, payload in txn.records:
                    self._write(spill, xid, lsn, payload)
            except BaseException:
                spill.close()
                raise
        logger.debug("spilled streamed transaction %d (%d bytes) to disk", txn.xid, txn.memory)
        self.stats.memory_bytes -= txn.memory
        self.stats.transactions_spilled += 1
        txn.records = []
        txn.memory = 0
        txn.spill = spill

    def _write(self, spill: IO[bytes], xid: int, lsn: int, payload: bytes) -> None:
        with self._spilling(xid):
            spill.write(_RECORD.pack(xid, lsn, len(payload)))
            spill.write(payload)
        self.stats.bytes_spilled += len(payload) + RECORD_OVERHEAD

    def _discard(self, txn: _OpenTransaction) -> None:
        self.stats.memory_bytes -= txn.memory
        txn.records = []
        txn.memory = 0
        if txn.spill is not None:
            txn.spill.close()
            txn.spill = None

    # -- replay -------------------------------------------------------------------------------

    def _replay(
        self, txn: _OpenTransaction, commit: StreamCommit, commit_frame_lsn: int
    ) -> Iterator[LogicalMessage]:
        try:
            self.message_lsn = commit_frame_lsn
            yield Begin(commit.commit_lsn, commit.commit_ts, commit.xid)
            aborted = txn.aborted_subxids
            if txn.spill is not None:
                # Only this generator's own reads raise in here (a consumer's exception does
                # not travel into a suspended generator).
                with self._spilling(txn.xid):
                    for xid, lsn, payload in _read_records(txn.spill, txn.xid):
                        if xid not in aborted:
                            self.message_lsn = lsn
                            yield self._redecode(payload)
            for xid, lsn, payload in txn.records:
                if xid not in aborted:
                    self.message_lsn = lsn
                    yield self._redecode(payload)
            self.message_lsn = commit_frame_lsn
            yield Commit(commit.flags, commit.commit_lsn, commit.end_lsn, commit.commit_ts)
        finally:
            self._discard(txn)


def _read_records(spill: IO[bytes], top_xid: int) -> Iterator[tuple[int, int, bytes]]:
    spill.flush()
    spill.seek(0)
    header_size = _RECORD.size
    while True:
        header = spill.read(header_size)
        if not header:
            return
        if len(header) != header_size:
            raise StreamProtocolError("spill file", "truncated record header", top_xid)
        xid, lsn, length = _RECORD.unpack(header)
        payload = spill.read(length)
        if len(payload) != length:
            raise StreamProtocolError("spill file", "truncated record", top_xid)
        yield xid, lsn, payload
