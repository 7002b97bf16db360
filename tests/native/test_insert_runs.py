"""Runs of inserts: the replication source hands a batch's leading Inserts of one table to the
pipeline, which publishes them as one packed batch (:meth:`Pipeline._insert_run`,
:meth:`LogicalReplicationSource.take_insert_runs`).

What users rely on: the records on Kafka, their order, ``seq`` and ``lsn``, and the position
confirmed to PostgreSQL are the same as when every frame goes through the message path; the
source's accounting (messages received, WAL positions, the open transaction's change count,
``message_lsn``) is what decoding each frame would have made it. The source is the real one,
fed frames by a stand-in for its WAL reader thread (no server: these are unit tests).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bridge import native
from bridge.events import EventBuilder
from bridge.pgoutput.decoder import Decoder
from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    TupleData,
    Update,
)
from bridge.pipeline import Pipeline, PipelineOptions
from bridge.sink.serializer import EnvelopeSerializer, SourceSettings
from bridge.source import LogicalReplicationSource, PublicationConfig, SourceConfig
from bridge.source.assembler import StreamAssembler, in_stream_decoder
from bridge.source.frame_reader import STREAMING
from bridge.source.progress import Progress
from tests.native.test_insert_lane import (
    VALUES,
    _Publisher,
    _Registrar,
    fixed_clock,
    xlogdata,
)
from tests.native.test_rowavro import TABLES, native_only, tuple_data
from tests.pgoutput.encoder import encode, tuple_columns


class FramesSource(LogicalReplicationSource):
    """The replication source over given batches of frames, as its reader thread hands them
    over; the stream ends after the last batch."""

    def __init__(self, batches: list[list[bytes]]) -> None:
        config = SourceConfig(dsn="host=x", slot_name="s", publication=PublicationConfig("p"))
        super().__init__(config, clock=lambda: 0.0)
        self._progress = Progress(Lsn(0))
        self._decoder = Decoder(1)
        self._assembler = StreamAssembler(in_stream_decoder(1))
        self._batches = list(batches)
        self.acknowledged: list[Lsn] = []

    def messages(self) -> Iterator[LogicalMessage | None]:
        return self._stream_batches(self)  # type: ignore[arg-type]  # the reader's get()

    def get(self, timeout: float) -> tuple[list[bytes], int] | None:
        if self._batches:
            return self._batches.pop(0), STREAMING
        self._closed = True
        return None

    def acknowledge(self, flush_lsn: Lsn) -> None:
        self.acknowledged.append(flush_lsn)

    def close(self) -> None:
        pass


def row(n: int) -> TupleData:
    return tuple_data(("t", str(n).encode()), *VALUES[1:])


def frames_of(messages: list[tuple[int, LogicalMessage]]) -> list[bytes]:
    return [xlogdata(lsn, encode(message)) for lsn, message in messages]


def transaction(
    first_lsn: int, body: list[LogicalMessage], xid: int
) -> list[tuple[int, LogicalMessage]]:
    """Begin, ``body`` (each message at its own WAL position), Commit."""
    commit = first_lsn + 0x40 * (len(body) + 1)
    out: list[tuple[int, LogicalMessage]] = [(first_lsn, Begin(Lsn(commit), 7_000_000 + xid, xid))]
    out += [(first_lsn + 0x40 * (i + 1), m) for i, m in enumerate(body)]
    out.append((commit, Commit(0, Lsn(commit), Lsn(commit + 0x30), 7_000_000 + xid)))
    return out


def workload() -> list[bytes]:
    relation = TABLES["composite_pk"].schemas.relation
    declined = tuple_data(*VALUES[:6], "u", *VALUES[7:])  # unchanged TOAST: the general path
    big: list[LogicalMessage] = [Insert(None, 16384, row(n)) for n in range(40)]
    big[25] = Insert(None, 16384, declined)  # cuts the run; the rest is a run again
    big += [Update(None, 16384, None, None, row(99)), Delete(None, 16384, "O", row(1))]
    big += [Insert(None, 16384, row(n)) for n in range(100, 120)]
    small: list[LogicalMessage] = [Insert(None, 16384, row(n)) for n in range(200, 205)]
    return frames_of([(0x100, relation), *transaction(0x1000, big, 10)]) + frames_of(
        transaction(0x9000, small, 11)
    )


def run_pipeline(batches: list[list[bytes]]) -> tuple[_Publisher, FramesSource]:
    builder = EventBuilder("pg")
    serializer = EnvelopeSerializer(SourceSettings(topic_prefix="pg", database="zoo"))
    source, publisher = FramesSource(batches), _Publisher()
    pipeline = Pipeline(
        source,
        builder,
        _Registrar(),  # type: ignore[arg-type]
        serializer,
        publisher,
        PipelineOptions(messages_topic="pg.messages"),
    )
    with fixed_clock():
        pipeline.run()
    return publisher, source


@native_only
@pytest.mark.parametrize("batch_size", [7, 30, 512])
def test_runs_publish_the_records_the_message_path_publishes(
    batch_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = workload()
    batches = [frames[i : i + batch_size] for i in range(0, len(frames), batch_size)]
    with_runs, source = run_pipeline(batches)
    monkeypatch.setattr(native, "encode_insert_frames", None)  # no runs offered
    without_runs, source_without = run_pipeline(batches)
    assert without_runs.packed_batches == []
    # Runs of at least 16 Inserts only, never across a batch or past the declined row.
    assert all(16 <= n <= batch_size for n in with_runs.packed_batches)
    if batch_size >= 30:
        assert with_runs.packed_batches
    assert with_runs.records == without_runs.records
    assert len(with_runs.records) == 40 + 2 + 1 + 20 + 5  # a tombstone after the delete
    assert (
        source.acknowledged[-1] == source_without.acknowledged[-1] == Lsn(0x9000 + 0x40 * 6 + 0x30)
    )
    assert source.stats.messages_received == source_without.stats.messages_received == len(frames)
    assert source.progress.received == source_without.progress.received


@native_only
def test_source_offers_runs_and_accounts_for_what_was_taken() -> None:
    body: list[LogicalMessage] = [Insert(None, 16384, row(n)) for n in range(20)]
    frames = frames_of(transaction(0x1000, body, 10))
    source = FramesSource([frames])
    offered: list[int] = []

    def take_ten(batch: list[bytes], start: int) -> int:
        offered.append(start)
        return 10 if len(offered) == 1 else 0  # then declines: not offered again in the run

    source.take_insert_runs(take_ten, 4)
    seen: list[tuple[Any, int]] = []
    for message in source.messages():
        seen.append((message, source.message_lsn))
    assert offered == [1, 11]
    kinds = [type(m).__name__ if m is not None else None for m, _ in seen]
    assert kinds == ["Begin", None] + ["Insert"] * 10 + ["Commit"]
    assert seen[1][1] == 0x1000 + 0x40 * 10  # the run's last frame
    assert [tuple_columns(m.new_tuple) for m, _ in seen[2:12]] == [
        tuple_columns(row(n)) for n in range(10, 20)
    ]
    assert source.stats.messages_received == len(frames)
    assert source.progress.received == 0x1000 + 0x40 * 21 + 0x1000  # the last frame's WAL end


@native_only
def test_source_offers_no_run_while_a_resent_transaction_is_skipped() -> None:
    """After a reconnect inside a transaction, its changes are checked one by one (those
    emitted before are dropped): no run until the next transaction."""
    body: list[LogicalMessage] = [Insert(None, 16384, row(n)) for n in range(20)]
    frames = frames_of(transaction(0x1000, body, 10))
    source = FramesSource([frames[:6], frames, frames_of(transaction(0x5000, body, 11))])
    offered: list[int] = []

    def take_none(batch: list[bytes], start: int) -> int:
        offered.append(int.from_bytes(batch[start][1:9], "big"))
        return 0

    source.take_insert_runs(take_none, 2)
    messages = source.messages()
    assert [type(next(messages)).__name__ for _ in range(6)] == ["Begin"] + ["Insert"] * 5
    source.progress.reconnected()  # the connection was lost after five changes; resent whole
    inserts = [m for m in messages if isinstance(m, Insert)]
    assert [tuple_columns(m.new_tuple) for m in inserts] == [
        tuple_columns(row(n)) for n in [*range(5, 20), *range(20)]
    ]
    # Offered at the first Insert of each batch only where no resend was being filtered.
    assert offered == [0x1040, 0x5040]
