"""When a snapshot chunk counts as delivered: the two ways the copier can learn it.

* :class:`EpochAcks` (at least once): every record of the chunk was acknowledged, learnt in
  bulk from a ring of producers (:mod:`bridge.snapshot.epochs`).
* :class:`TransactionAcks` (``exactly.once.support = required``): the chunk's Kafka transaction,
  with its progress record, committed (:mod:`bridge.snapshot.chunk_transactions`).

The copier (:mod:`bridge.snapshot.copier`) publishes through :meth:`publisher_for`, counts with
:meth:`sent`, and hands the chunks read to their end to :meth:`settle`, which calls back for
each one Kafka now holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Protocol

from bridge.snapshot.chunk_transactions import ChunkTransactions
from bridge.snapshot.epochs import AckEpochs, DrainablePublisher

__all__ = ["ChunkAcks", "EpochAcks", "TransactionAcks"]


class Chunk(Protocol):
    """The copier's count of a chunk: which chunk, its lane, the epoch of its last record."""

    key: tuple[str, int]
    lane: int | None
    epoch: int


Progress = Callable[[Chunk], Sequence[tuple[bytes, bytes]]]


class ChunkAcks(Protocol):
    def publisher_for(self, chunk: Chunk) -> DrainablePublisher: ...

    def sent(self, chunk: Chunk, records: int) -> None: ...

    def service(self, now: float) -> None: ...

    def settle(
        self, ready: Sequence[Chunk], progress: Progress, delivered: Callable[[Chunk], None]
    ) -> None: ...

    def drain(self) -> None: ...

    def close(self) -> None: ...

    def abandon(self) -> None: ...


class EpochAcks:
    """At least once: a chunk is delivered once the epoch of its last record is."""

    def __init__(self, publishers: Sequence[DrainablePublisher], *, own: bool) -> None:
        """``own``: the publishers are the snapshot's, closed with it."""
        self.epochs = AckEpochs(publishers)
        self._own = own

    def publisher_for(self, chunk: Chunk) -> DrainablePublisher:
        return self.epochs.publisher

    def sent(self, chunk: Chunk, records: int) -> None:
        chunk.epoch = self.epochs.sent(records)

    def service(self, now: float) -> None:
        self.epochs.service(now)

    def settle(
        self, ready: Sequence[Chunk], progress: Progress, delivered: Callable[[Chunk], None]
    ) -> None:
        below = self.epochs.acknowledged_below
        for chunk in ready:
            if chunk.epoch < below:
                delivered(chunk)

    def drain(self) -> None:
        self.epochs.drain()

    def close(self) -> None:
        if self._own:
            for publisher in self.epochs.publishers:
                publisher.close()  # type: ignore[attr-defined]

    def abandon(self) -> None:
        if self._own:
            for publisher in self.epochs.publishers:
                with contextlib.suppress(Exception):  # the failure propagating says what failed
                    publisher.close()  # type: ignore[attr-defined]


class TransactionAcks:
    """Exactly once: a chunk is delivered once its Kafka transaction committed."""

    def __init__(
        self, transactions: ChunkTransactions, settle_ready: Callable[[], None] | None = None
    ) -> None:
        """``settle_ready()``: settle the chunks read to their end now (called when a chunk
        finds every lane taken and no commit under way)."""
        self.transactions = transactions
        self.settle_ready = settle_ready

    def publisher_for(self, chunk: Chunk) -> DrainablePublisher:
        return self.transactions.publisher_for(chunk, self.settle_ready)

    def sent(self, chunk: Chunk, records: int) -> None:
        """Nothing to count: the commit says it all."""

    def service(self, now: float) -> None:
        self.transactions.service()

    def settle(
        self, ready: Sequence[Chunk], progress: Progress, delivered: Callable[[Chunk], None]
    ) -> None:
        self.transactions.commit(ready, progress, delivered)

    def drain(self) -> None:
        self.transactions.drain()

    def close(self) -> None:
        self.transactions.close()

    def abandon(self) -> None:
        self.transactions.abandon()
