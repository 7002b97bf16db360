"""The contract between a change source and the pipeline that drives it.

The pipeline pulls messages and pushes back the position it has made durable downstream::

    source = LogicalReplicationSource(config)
    source.open()
    tracker = AckTracker(source.start_lsn)
    for message in source.messages():
        if message is None:            # nothing arrived for idle_interval
            producer.poll(0)           # runs delivery callbacks -> tracker.record_delivered
        else:
            ...                        # Begin / Relation / Insert / … / Commit, in commit order
        source.acknowledge(tracker.flush_lsn)

What the pipeline may rely on:

- Messages come in commit order as whole transactions ``Begin … Commit``. Streamed
  transactions are replayed at their Stream Commit with a synthesized ``Begin(final_lsn =
  commit LSN, commit_ts, xid)`` and ``Commit(flags, commit_lsn, end_lsn, commit_ts)``; their
  changes keep the (sub)transaction xid the server put on them (``xid`` is not ``None``). An
  aborted transaction or subtransaction emits nothing. Stream*, two-phase and keepalive
  messages never reach the pipeline.
- Relation (and Type) messages precede the first change of a relation in a connection and may
  be repeated; treat them as cache updates. Non-transactional logical messages (``Message`` with
  ``transactional=False``) arrive between transactions.
- Reconnects are invisible: after the connection is restored nothing already emitted is emitted
  again and nothing is skipped.

What the pipeline must do:

- Register *every* transaction with the ack tracker (``begin_transaction(begin.final_lsn)``,
  ``transaction_complete(token, commit.end_lsn)``), also empty or filtered ones, and every
  non-transactional message with its ``lsn``; otherwise the slot cannot move past them (an idle
  slot advances only once everything emitted is acknowledged).
- Call :meth:`ChangeSource.acknowledge` with the tracker's flush position, and keep iterating:
  status updates to the server are sent from inside the iterator, so a pipeline that stops
  pulling for longer than the server's ``wal_sender_timeout`` (default 60 s) gets disconnected.

Optional, where a source has it (:class:`~bridge.source.replication.LogicalReplicationSource`):
``take_insert_runs(runs, min_run)`` hands the pipeline consecutive Insert frames of a received
batch to publish itself (``runs(frames, start) -> taken``), instead of one message each; what
it takes is accounted for by the source as if it had been yielded, and a ``None`` follows it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import LogicalMessage

__all__ = ["ChangeSource"]


class ChangeSource(Protocol):
    """A stream of committed logical-replication messages with positional acknowledgement."""

    @property
    def start_lsn(self) -> Lsn:
        """The position streaming resumed from (the slot's confirmed flush position)."""
        ...

    @property
    def message_lsn(self) -> int:
        """The WAL position of the message :meth:`messages` yielded last (its XLogData's
        start; for a change, the LSN of its WAL record), 0 where the source has none."""
        ...

    def messages(self) -> Iterator[LogicalMessage | None]:
        """Messages in commit order; ``None`` when nothing arrived for a while."""
        ...

    def acknowledge(self, flush_lsn: Lsn) -> None:
        """Everything up to ``flush_lsn`` is durable downstream; it may be confirmed."""
        ...

    def close(self) -> None:
        """Report the last acknowledged position and disconnect."""
        ...
