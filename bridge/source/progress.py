"""Positions of the replication stream: what was received, emitted and acknowledged.

Two jobs, both pure (no I/O, no clock), kept together because both depend on what has been
handed to the pipeline:

1. **Standby status values.** ``write`` is the highest WAL position received. ``flush`` (also
   reported as ``apply``) is the highest position the pipeline acknowledged through
   :meth:`Progress.acknowledge`, or — when the source is *settled*, that is every transaction and
   non-transactional message emitted so far has been acknowledged, no transaction is half
   emitted and no streamed transaction is buffered — the WAL end of the latest keepalive. The
   walsender sends a keepalive's WAL end only after it sent everything before it, so a settled
   source has nothing pending below it; advancing there lets an idle slot (or one whose
   publication sees no changes) release WAL. ``flush`` never moves backward.

2. **Resend filtering after a reconnect.** The server resumes from the confirmed flush position,
   so it sends again transactions the pipeline already received (delivered or still in
   flight) and, if the connection broke mid-transaction, the start of that transaction. The
   pipeline never sees a reconnect: whole transactions already emitted are dropped (commit LSN
   below the end of the last emitted commit), and for the half-emitted one the Begin, the Origin
   and as many changes as were already emitted are dropped. This relies on logical decoding
   being deterministic — the same WAL, slot and publication produce the same changes in the
   same order — and on counting only changes, because Relation and Type messages are resent
   once per connection and are passed through (they are idempotent for a relation cache).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bridge.pgoutput.lsn import INVALID_LSN, Lsn
from bridge.pgoutput.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Truncate,
    Update,
)
from bridge.source.errors import StreamProtocolError

logger = logging.getLogger(__name__)

__all__ = ["Progress"]

_CHANGES = (Insert, Update, Delete, Truncate, Message)
_ROW_CHANGES = frozenset((Insert, Update, Delete))
_int_new = int.__new__


@dataclass(slots=True)
class _OpenTransaction:
    commit_lsn: Lsn
    xid: int
    changes: int = 0  # changes emitted so far


class Progress:
    """Received/emitted/acknowledged positions of one slot, across reconnects."""

    def __init__(self, start: Lsn) -> None:
        self._received: int = Lsn(start)  # a plain int on the hot path: see received
        self._acked = Lsn(start)
        self._flush = Lsn(start)
        self._keepalive_end = INVALID_LSN
        # The position the pipeline must acknowledge before the source counts as settled: end
        # LSN of the last emitted Commit, or LSN of the last emitted non-transactional message.
        self._must_ack = INVALID_LSN
        # Commits below this were emitted already; resent ones are dropped.
        self._emitted_end = INVALID_LSN
        self._open: _OpenTransaction | None = None
        self._skipping_whole = False
        self._skip_changes = 0
        self._resuming_open = False
        self.duplicates_dropped = 0
        self.resumed_mid_transaction = 0  # reconnects that continued a half-emitted transaction

    # -- positions ----------------------------------------------------------------------------

    @property
    def received(self) -> Lsn:
        return _int_new(Lsn, self._received)

    @property
    def acknowledged(self) -> Lsn:
        return self._acked

    @property
    def resume_lsn(self) -> Lsn:
        """Where a new connection starts: the flush position (never past an unacked change)."""
        return self._flush

    def on_wal_data(self, wal_start: int, wal_end: int) -> None:
        # Once per change: the highest position is kept as the server's int (an unsigned
        # 64-bit value, a valid LSN) and made an Lsn when read.
        if wal_end > self._received or wal_start > self._received:
            self._received = wal_end if wal_end > wal_start else wal_start

    def on_keepalive(self, wal_end: Lsn) -> None:
        self._received = max(self._received, wal_end)
        self._keepalive_end = max(self._keepalive_end, wal_end)

    def acknowledge(self, flush_lsn: Lsn) -> None:
        """The pipeline delivered everything up to ``flush_lsn`` (the ack tracker's flush)."""
        if flush_lsn > self._acked:
            self._acked = Lsn(flush_lsn)

    def settled(self, buffered_streams: bool) -> bool:
        """Nothing emitted is unacknowledged and nothing is half received."""
        return (
            self._open is None
            and not self._skipping_whole
            and not buffered_streams
            and self._acked >= self._must_ack
        )

    def flush_position(self, buffered_streams: bool) -> Lsn:
        """The flush LSN to report now; monotonic."""
        candidate = self._acked
        if self.settled(buffered_streams):
            candidate = max(candidate, self._keepalive_end)
        if candidate > self._flush:
            self._flush = candidate
        return self._flush

    # -- emission and resend filtering ----------------------------------------------------------

    def reconnected(self) -> None:
        """A new connection starts; what it resends is filtered by :meth:`admit`."""
        self._skipping_whole = False
        self._skip_changes = 0
        self._resuming_open = self._open is not None

    @property
    def admits_rows(self) -> bool:
        """Whether :meth:`admit` would take any row change now without looking at it (inside
        a transaction, not resuming one that was half emitted): :meth:`admit_rows` may
        stand for it."""
        return self._open is not None and not self._resuming_open and not self._skipping_whole

    def admit_rows(self, count: int) -> None:
        """:meth:`admit` of ``count`` row changes, while :attr:`admits_rows`."""
        assert self._open is not None
        self._open.changes += count

    def admit(self, message: LogicalMessage) -> bool:
        """Record that ``message`` is about to be emitted; False if it was emitted before."""
        open_tx = self._open
        if (
            type(message) in _ROW_CHANGES
            and open_tx is not None
            and not self._resuming_open
            and not self._skipping_whole
        ):
            open_tx.changes += 1  # the usual row of a transaction, as below
            return True
        if isinstance(message, Begin):
            return self._admit_begin(message)
        if isinstance(message, Commit):
            if self._skipping_whole:
                self._skipping_whole = False
                return self._drop()
            if self._open is None:
                raise StreamProtocolError("Commit", "no transaction is open")
            if self._skip_changes > 0:
                # The resent transaction is shorter than what was already emitted of it: the
                # server's output is not what determinism promised; stop rather than guess.
                raise StreamProtocolError(
                    "Commit",
                    f"resent transaction ended {self._skip_changes} changes short of what was "
                    "already emitted",
                    self._open.xid,
                )
            self._open = None
            self._resuming_open = False
            self._emitted_end = max(self._emitted_end, message.end_lsn)
            self._must_ack = max(self._must_ack, message.end_lsn)
            return True
        if self._skipping_whole:
            return self._drop()
        if self._open is None:
            if isinstance(message, Message) and not message.transactional:
                if message.lsn < self._emitted_end:
                    return self._drop()
                # +1: the message's own record is now behind us; a commit after it is later.
                self._emitted_end = max(self._emitted_end, Lsn(message.lsn + 1))
                self._must_ack = max(self._must_ack, message.lsn)
            return True
        if self._resuming_open:
            if isinstance(message, Origin):
                return self._drop()
            if isinstance(message, _CHANGES) and self._skip_changes > 0:
                self._skip_changes -= 1
                return self._drop()
        if isinstance(message, _CHANGES):
            self._open.changes += 1
        return True

    def _admit_begin(self, message: Begin) -> bool:
        if self._open is not None:
            if self._resuming_open and message.final_lsn == self._open.commit_lsn:
                # The transaction that broke off: continue after what was already emitted.
                self._skip_changes = self._open.changes
                self.resumed_mid_transaction += 1
                return self._drop()
            if self._resuming_open and message.final_lsn < self._open.commit_lsn:
                self._skipping_whole = True  # an earlier transaction, emitted and confirmed
                return self._drop()
            raise StreamProtocolError(
                "Begin",
                f"transaction committing at {message.final_lsn} begins while the one committing "
                f"at {self._open.commit_lsn} is still open",
                message.xid,
            )
        if message.final_lsn < self._emitted_end:
            self._skipping_whole = True
            return self._drop()
        self._open = _OpenTransaction(message.final_lsn, message.xid)
        return True

    def _drop(self) -> bool:
        self.duplicates_dropped += 1
        return False
