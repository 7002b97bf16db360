"""Acknowledgement tracking: which WAL position may be confirmed to PostgreSQL.

The at-least-once contract: the flush LSN reported to the walsender is where a restart resumes
and what the server may throw away, so it may only cover changes that Kafka has acknowledged.
Transactions are registered in commit order (the order the source emits them); each one is done
when every record handed to the producer for it was delivered *and* the pipeline said no more
records will come (:meth:`AckTracker.transaction_complete`). :attr:`AckTracker.flush_lsn` is the
end LSN of the newest transaction that is done together with every transaction registered before
it. It never moves backward and never passes a transaction that is not done.

Pure: no I/O, no clock. Thread-safe: confluent-kafka runs delivery callbacks inside
``Producer.poll()`` / ``Producer.flush()`` on whichever thread calls those, which in pgbridge is
the pipeline thread, but a pipeline may also poll from a helper thread; one lock covers every
method, and each method is O(1) amortised, so the lock is never held for long.

Usage by the pipeline::

    token = tracker.begin_transaction(begin.final_lsn)   # at Begin: records may follow at once
    for each record: tracker.record_sent(token); producer.produce(..., on_delivery=...)
    # in the delivery callback: tracker.record_delivered(token) (or record_failed on error)
    tracker.transaction_complete(token, commit.end_lsn)  # at Commit, after the last record
    source.acknowledge(tracker.flush_lsn)

The position given at Begin is a stand-in; the Commit's *end* LSN given at completion is what
gets confirmed, and it matters: confirming the end LSN makes the server skip the transaction on
restart, while its commit LSN would have it sent again. A non-transactional logical message is
registered with its own ``lsn`` and completed without an end LSN.

A transaction with no records (an empty or fully filtered one) is done as soon as it is
complete; registering it anyway is what lets the slot move past it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from bridge.errors import PgBridgeError
from bridge.pgoutput.lsn import INVALID_LSN, Lsn

logger = logging.getLogger(__name__)

__all__ = [
    "AckTracker",
    "AckUsageError",
    "DeliveryFailedError",
    "TransactionCounts",
    "TransactionToken",
]


class AckUsageError(PgBridgeError):
    """The caller misused the tracker (unknown token, more deliveries than sends, …).

    ``token`` is the transaction concerned; this is a bug in the caller, never bad input.
    """

    def __init__(self, token: TransactionToken, message: str) -> None:
        super().__init__(f"transaction #{token.seq} (end {token.end_lsn}): {message}")
        self.token = token


class DeliveryFailedError(PgBridgeError):
    """A record of a transaction could not be delivered; the flush position is frozen before it.

    Raised by :meth:`AckTracker.raise_if_failed` so the pipeline can stop: the slot keeps the
    transaction and a restart sends it again.
    """

    def __init__(self, token: TransactionToken, reason: str) -> None:
        super().__init__(
            f"delivery failed for transaction #{token.seq} ending at {token.end_lsn}: {reason}"
        )
        self.token = token
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TransactionToken:
    """Identifies one registered transaction; ``seq`` orders registrations."""

    seq: int
    end_lsn: Lsn


@dataclass(slots=True)
class _Entry:
    token: TransactionToken
    outstanding: int = 0  # sent but not yet delivered
    end_lsn: Lsn | None = None  # set at completion when registration came before the Commit
    complete: bool = False  # no more records will be sent
    failed: bool = False

    @property
    def done(self) -> bool:
        return self.complete and self.outstanding == 0 and not self.failed


class AckTracker:
    """In-flight transactions in commit order -> the highest contiguous delivered end LSN.

    ``initial_flush`` is where the stream started (the slot's confirmed position); the flush
    position never reports anything lower.
    """

    def __init__(self, initial_flush: Lsn = INVALID_LSN) -> None:
        self._lock = threading.Lock()
        self._pending: deque[_Entry] = deque()
        self._by_seq: dict[int, _Entry] = {}
        self._next_seq = 0
        self._flush = Lsn(initial_flush)
        self._failure: DeliveryFailedError | None = None

    # -- registration -------------------------------------------------------------------------

    def begin_transaction(self, end_lsn: Lsn) -> TransactionToken:
        """Register the next transaction in commit order.

        ``end_lsn`` is the Commit's end LSN when already known, else a stand-in no later than it
        (Begin's ``final_lsn``) replaced at :meth:`transaction_complete`. Positions normally
        increase; an equal or lower one (a transaction the server sent again
        after a reconnect) is accepted and simply cannot move the flush position backward.
        """
        with self._lock:
            token = TransactionToken(self._next_seq, Lsn(end_lsn))
            self._next_seq += 1
            entry = _Entry(token)
            self._pending.append(entry)
            self._by_seq[token.seq] = entry
            return token

    def record_sent(self, token: TransactionToken, count: int = 1) -> None:
        """``count`` more records of the transaction were handed to the producer."""
        if count < 0:
            raise ValueError(f"count must not be negative, got {count}")
        with self._lock:
            entry = self._entry(token)
            if entry.complete:
                raise AckUsageError(token, "record sent after transaction_complete")
            entry.outstanding += count

    def transaction_complete(self, token: TransactionToken, end_lsn: Lsn | None = None) -> None:
        """Every record of the transaction has been handed to the producer.

        ``end_lsn``: the Commit's end LSN, when the transaction was registered at Begin (before
        its records were produced, which is what keeps a large transaction out of memory) with
        the commit LSN as a stand-in. It may only move the registered position forward.
        """
        with self._lock:
            entry = self._entry(token)
            if entry.complete:
                raise AckUsageError(token, "transaction_complete called twice")
            if end_lsn is not None:
                if end_lsn < token.end_lsn:
                    raise AckUsageError(token, f"end LSN {end_lsn} is before the registered one")
                entry.end_lsn = Lsn(end_lsn)
            entry.complete = True
            self._advance()

    # -- delivery reports (possibly from another thread) ---------------------------------------

    def record_delivered(self, token: TransactionToken, count: int = 1) -> None:
        """``count`` records of the transaction were acknowledged by Kafka."""
        with self._lock:
            entry = self._by_seq.get(token.seq)
            if entry is None or entry.token != token:
                raise AckUsageError(token, "delivery reported for an unknown or finished token")
            if count > entry.outstanding:
                raise AckUsageError(
                    token, f"{count} deliveries reported but only {entry.outstanding} outstanding"
                )
            entry.outstanding -= count
            self._advance()

    def record_failed(self, token: TransactionToken, reason: str) -> None:
        """A record of the transaction failed for good: never confirm it or anything later."""
        with self._lock:
            entry = self._entry(token)
            entry.failed = True
            if self._failure is None:
                self._failure = DeliveryFailedError(token, reason)
                logger.error("%s", self._failure)

    # -- reading ------------------------------------------------------------------------------

    @property
    def flush_lsn(self) -> Lsn:
        """End LSN of the newest transaction delivered together with all earlier ones."""
        with self._lock:
            return self._flush

    @property
    def in_flight(self) -> int:
        """How many registered transactions are not yet confirmed."""
        with self._lock:
            return len(self._pending)

    @property
    def failure(self) -> DeliveryFailedError | None:
        with self._lock:
            return self._failure

    def raise_if_failed(self) -> None:
        """Raise the first delivery failure, if any, so the pipeline stops."""
        failure = self.failure
        if failure is not None:
            raise failure

    # -- internals ----------------------------------------------------------------------------

    def _entry(self, token: TransactionToken) -> _Entry:
        entry = self._by_seq.get(token.seq)
        if entry is None or entry.token != token:
            raise AckUsageError(token, "unknown or already confirmed token")
        return entry

    def _advance(self) -> None:
        # Only the head may be confirmed: a done transaction behind an unfinished one has to wait,
        # because confirming its end LSN would also confirm the unfinished one before it.
        pending = self._pending
        while pending and pending[0].done:
            entry = pending.popleft()
            del self._by_seq[entry.token.seq]
            end = entry.end_lsn if entry.end_lsn is not None else entry.token.end_lsn
            if end > self._flush:
                self._flush = end


class TransactionCounts:
    """One transaction's records sent and delivered since last reported to the tracker (the
    pipeline reports them in bulk: the tracker takes a lock per call).

    ``on_delivered`` is the records' delivery callback: it only counts (callbacks run on the
    pipeline thread, inside ``poll()``/``flush()``/a blocked ``publish()``).
    """

    __slots__ = ("complete", "delivered", "on_delivered", "outstanding", "sent", "token")

    def __init__(self, token: TransactionToken) -> None:
        self.token = token
        self.sent = 0  # not yet reported
        self.delivered = 0  # not yet reported
        self.outstanding = 0  # reported sent minus reported delivered
        self.complete = False
        self.on_delivered: Callable[[], None] = self._delivered  # one bound method, reused

    def _delivered(self) -> None:
        self.delivered += 1

    def report(self, tracker: AckTracker) -> None:
        if self.sent:
            tracker.record_sent(self.token, self.sent)
            self.outstanding += self.sent
            self.sent = 0
        if self.delivered:
            delivered, self.delivered = self.delivered, 0
            self.outstanding -= delivered
            tracker.record_delivered(self.token, delivered)

    @property
    def finished(self) -> bool:
        """Completed, and every record reported delivered: nothing more to tell the tracker."""
        return self.complete and self.outstanding == 0 and not self.sent and not self.delivered
