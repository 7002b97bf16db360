"""The replication source on real PostgreSQL: ordering, acknowledgement, restarts, reconnects,
idle slots and streamed transactions (see conftest for versions and the fake pipeline)."""

from __future__ import annotations

import os
import threading
import time

import psycopg
import pytest

from bridge.pgoutput.lsn import Lsn
from bridge.source import PublicationConfig, PublicationMode

from .conftest import FakePipeline, SourceDb

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

EXPECTED_PROTOCOL = {13: 1, 14: 2, 15: 3, 16: 4, 17: 4, 18: 4}


def make_table(db: SourceDb, name: str = "t") -> None:
    db.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, pad text)")


def insert_transactions(db: SourceDb, batches: list[range], table: str = "t") -> None:
    for batch in batches:
        with db.admin.transaction():
            for i in batch:
                db.execute(f"INSERT INTO {table} VALUES (%s, 'x')", (i,))


def test_source_streams_transactions_in_commit_order(source_db: SourceDb) -> None:
    make_table(source_db)
    source = source_db.source()
    assert source.options.proto_version == EXPECTED_PROTOCOL[source_db.version_num // 10000]
    insert_transactions(source_db, [range(1, 4), range(4, 5), range(5, 9)])
    pipeline = FakePipeline(source)
    pipeline.run(lambda p: len(p.ids) >= 8)
    assert pipeline.ids == list(range(1, 9))
    assert [len(t.ids) for t in pipeline.transactions if t.ids] == [3, 1, 4]
    ends = [t.end_lsn for t in pipeline.transactions]
    assert ends == sorted(ends)


def test_source_restart_mid_transaction_resends_it_and_skips_nothing(
    source_db: SourceDb,
) -> None:
    make_table(source_db)
    first = source_db.source()
    insert_transactions(source_db, [range(1, 4), range(4, 9), range(9, 11)])
    pipeline = FakePipeline(first)
    # Stop after two changes of the second transaction: it was never complete downstream.
    pipeline.run(
        lambda p: len(p.transactions) >= 1 and p.current is not None and len(p.current.ids) == 2
    )
    delivered_end = pipeline.transactions[-1].end_lsn
    assert pipeline.tracker.flush_lsn == delivered_end
    first.close()  # the consumer stops here; close() reports the acknowledged position
    assert source_db.confirmed_flush() == delivered_end

    second = source_db.source()
    assert second.start_lsn == delivered_end
    again = FakePipeline(second)
    again.run(lambda p: len(p.ids) >= 7)
    assert again.ids == list(range(4, 11))  # the interrupted transaction whole, nothing before


def test_source_confirmed_flush_never_passes_acknowledged(source_db: SourceDb) -> None:
    make_table(source_db)
    source = source_db.source()
    insert_transactions(source_db, [range(i * 10, i * 10 + 3) for i in range(1, 7)])
    pipeline = FakePipeline(source, auto_deliver=False)
    seen: list[Lsn] = []

    def until_all(p: FakePipeline) -> bool:
        seen.append(source_db.confirmed_flush())
        return len(p.transactions) >= 6

    pipeline.run(until_all)
    pipeline.pump(1.0)  # keepalives and status updates, nothing delivered yet
    assert source_db.confirmed_flush() == source.start_lsn
    pipeline.deliver(2)
    acked = pipeline.tracker.flush_lsn
    assert acked == pipeline.transactions[1].end_lsn
    pipeline.pump(1.0)
    assert source_db.confirmed_flush() == acked  # reached, and not beyond
    assert all(lsn <= acked for lsn in seen)
    pipeline.deliver()
    pipeline.pump(1.0)
    assert source_db.confirmed_flush() >= pipeline.transactions[-1].end_lsn


def test_source_idle_slot_advances_with_keepalives(source_db: SourceDb) -> None:
    make_table(source_db, "published")
    make_table(source_db, "other")
    source = source_db.source(
        publication=PublicationConfig(
            source_db.publication,
            PublicationMode.FILTERED,
            include_tables=("public.published",),
        )
    )
    pipeline = FakePipeline(source)
    pipeline.pump(0.5)
    start = source_db.confirmed_flush()
    insert_transactions(source_db, [range(1, 50)], table="other")  # WAL the slot does not publish
    target = source_db.current_wal_lsn()
    assert target > start
    pipeline.run(lambda p: source_db.confirmed_flush() >= target, timeout=30)
    assert pipeline.ids == []


def test_source_reconnects_after_walsender_terminated_without_loss(source_db: SourceDb) -> None:
    make_table(source_db)
    source = source_db.source()
    insert_transactions(source_db, [range(i * 10, i * 10 + 5) for i in range(1, 21)])
    expected = [i * 10 + j for i in range(1, 21) for j in range(5)]
    pipeline = FakePipeline(source)
    # Break the connection in the middle of the sixth transaction.
    pipeline.run(
        lambda p: len(p.transactions) >= 5 and p.current is not None and len(p.current.ids) == 2
    )
    old_pid = source_db.terminate_walsender()
    pipeline.run(lambda p: len(p.ids) >= len(expected))
    pipeline.pump(0.5)
    assert pipeline.ids == expected  # nothing lost, nothing twice
    assert source.stats.reconnects >= 1
    assert source.stats.duplicates_dropped > 0  # the server did resend; the source filtered it
    new_pid = source_db.slot_row()[1]
    assert new_pid is not None and new_pid != old_pid
    pipeline.run(lambda p: source_db.confirmed_flush() >= p.transactions[-1].end_lsn)


def test_source_large_streamed_transaction_spills_and_arrives_whole(source_db: SourceDb) -> None:
    make_table(source_db)
    threshold = 256 * 1024
    source = source_db.source(
        spill_threshold=threshold,
        server_options=(("logical_decoding_work_mem", "64kB"),),
    )
    rows = 6000
    with source_db.admin.transaction():
        source_db.execute(
            "INSERT INTO t SELECT g, repeat('p', 200) FROM generate_series(1, %s::int) g", (rows,)
        )
        source_db.execute("SAVEPOINT s")
        source_db.execute(
            "INSERT INTO t SELECT g, repeat('q', 200) FROM generate_series(%s::int, %s::int) g",
            (rows + 1, rows + 2000),
        )
        source_db.execute("ROLLBACK TO SAVEPOINT s")
        source_db.execute("INSERT INTO t VALUES (%s, 'last')", (rows + 5000,))
    pipeline = FakePipeline(source)
    pipeline.run(lambda p: len(p.transactions) >= 1 and p.transactions[-1].ids != [])
    assert pipeline.ids == [*range(1, rows + 1), rows + 5000]
    assert len(pipeline.transactions) == 1
    stats = source.assembler.stats
    if source_db.version_num >= 140000:
        assert stats.streams_committed == 1
        assert stats.subtransactions_aborted >= 1
        assert stats.transactions_spilled == 1
        assert stats.bytes_spilled > 2 * threshold
        assert 0 < stats.peak_memory_bytes <= threshold
    else:  # PostgreSQL 13 has no streaming: the server sends it at commit, whole
        assert stats.streams_committed == 0
    assert stats.memory_bytes == 0


def test_source_aborted_stream_emits_nothing(source_db: SourceDb) -> None:
    make_table(source_db)
    source = source_db.source(server_options=(("logical_decoding_work_mem", "64kB"),))
    pipeline = FakePipeline(source)
    streaming = source_db.version_num >= 140000
    # Abort only after the server started streaming: PostgreSQL 17+ does not stream a
    # transaction it already knows to be aborted.
    with psycopg.connect(source_db.dsn) as writer:
        writer.execute("INSERT INTO t SELECT g, repeat('p', 200) FROM generate_series(1, 3000) g")
        if streaming:
            pipeline.run(lambda p: source.assembler.open_transactions == 1)
        writer.rollback()
    insert_transactions(source_db, [range(9000, 9002)])
    pipeline.run(lambda p: len(p.ids) >= 2)
    pipeline.pump(0.3)
    assert pipeline.ids == [9000, 9001]
    stats = source.assembler.stats
    if streaming:
        assert stats.streams_aborted == 1
    assert stats.streams_committed == 0
    assert stats.memory_bytes == 0 and source.assembler.open_transactions == 0


def test_source_reconnects_with_backoff_across_server_restart(source_db: SourceDb) -> None:
    make_table(source_db)
    source = source_db.source()
    insert_transactions(source_db, [range(i * 10, i * 10 + 3) for i in range(1, 6)])
    pipeline = FakePipeline(source)
    pipeline.run(lambda p: len(p.transactions) >= 2)
    source_db.admin.close()

    def restart() -> None:
        source_db.cluster.stop()
        time.sleep(1.5)  # the source keeps retrying meanwhile
        source_db.cluster.start()

    restarter = threading.Thread(target=restart)
    restarter.start()
    try:
        pipeline.run(lambda p: not restarter.is_alive() and source.stats.reconnects >= 1)
    finally:
        restarter.join()
    source_db.admin = psycopg.connect(source_db.dsn, autocommit=True)
    insert_transactions(source_db, [range(60, 63)])
    pipeline.run(lambda p: len(p.ids) >= 18)
    assert pipeline.ids == [i * 10 + j for i in range(1, 7) for j in range(3)]


def test_source_heartbeat_query_runs_periodically(source_db: SourceDb) -> None:
    source_db.execute("CREATE TABLE hb (id serial PRIMARY KEY, at timestamptz)")
    source = source_db.source(
        heartbeat_query="INSERT INTO hb (at) VALUES (now())", heartbeat_interval=0.2
    )
    pipeline = FakePipeline(source)
    pipeline.run(lambda p: len(p.ids) >= 3)
    assert pipeline.ids[:3] == [1, 2, 3]
    assert source.stats.heartbeats >= 3


def test_source_prepared_transactions_arrive_at_commit_prepared(source_db: SourceDb) -> None:
    make_table(source_db)
    source = source_db.source()
    with psycopg.connect(source_db.dsn) as writer:
        writer.execute("INSERT INTO t VALUES (1, 'x'), (2, 'x')")
        writer.execute("PREPARE TRANSACTION 'gid_commit'")
        writer.execute("INSERT INTO t VALUES (3, 'x')")
        writer.execute("PREPARE TRANSACTION 'gid_rollback'")
    pipeline = FakePipeline(source)
    pipeline.pump(0.5)
    assert pipeline.ids == []  # two_phase is off: nothing at PREPARE time
    source_db.execute("ROLLBACK PREPARED 'gid_rollback'")
    source_db.execute("COMMIT PREPARED 'gid_commit'")
    pipeline.run(lambda p: len(p.ids) >= 2)
    pipeline.pump(0.3)
    assert pipeline.ids == [1, 2]
    assert len([t for t in pipeline.transactions if t.ids]) == 1


def test_source_logical_messages_pass_through_and_are_acknowledged(source_db: SourceDb) -> None:
    make_table(source_db)
    source = source_db.source()
    pipeline = FakePipeline(source)
    source_db.execute("SELECT pg_logical_emit_message(false, 'pgbridge', 'outside')")
    with source_db.admin.transaction():
        source_db.execute("INSERT INTO t VALUES (1, 'x')")
        source_db.execute("SELECT pg_logical_emit_message(true, 'pgbridge', 'inside')")
    target = source_db.current_wal_lsn()
    if source_db.version_num < 140000:  # the 'messages' option arrived in PostgreSQL 14
        pipeline.run(lambda p: len(p.ids) >= 1)
        assert pipeline.logical_messages == []
        return
    pipeline.run(lambda p: len(p.ids) >= 1 and len(p.logical_messages) >= 2)
    outside, inside = pipeline.logical_messages
    assert (outside.transactional, outside.content) == (False, b"outside")
    assert (inside.transactional, inside.content) == (True, b"inside")
    pipeline.run(lambda p: source_db.confirmed_flush() >= target)


def test_source_binary_option_sends_binary_values_where_supported(source_db: SourceDb) -> None:
    make_table(source_db)
    source = source_db.source(binary=True)
    insert_transactions(source_db, [range(7, 9)])
    pipeline = FakePipeline(source)
    pipeline.run(lambda p: len(p.ids) >= 2)
    assert pipeline.ids == [7, 8]
    assert source.options.binary is (source_db.version_num >= 140000)
    assert set(pipeline.kinds) == ({"b"} if source.options.binary else {"t"})


def test_source_reconnect_mid_large_transaction_continues_after_emitted_changes(
    source_db: SourceDb,
) -> None:
    make_table(source_db)
    rows = 200_000  # far more than socket buffers hold, so the walsender dies mid-send
    source = source_db.source(streaming=False)
    source_db.execute(
        "INSERT INTO t SELECT g, repeat('p', 100) FROM generate_series(1, %s::int) g", (rows,)
    )
    insert_transactions(source_db, [range(rows + 1, rows + 3)])
    pipeline = FakePipeline(source)
    pipeline.run(lambda p: p.current is not None and len(p.current.ids) >= 1000)
    source_db.terminate_walsender()
    pipeline.run(lambda p: len(p.ids) >= rows + 2, timeout=120)
    assert pipeline.ids == list(range(1, rows + 3))
    assert source.stats.reconnects >= 1
    assert source.progress.resumed_mid_transaction == 1


def test_source_reconnect_while_stream_buffered_delivers_it_once(source_db: SourceDb) -> None:
    make_table(source_db)
    source = source_db.source(server_options=(("logical_decoding_work_mem", "64kB"),))
    pipeline = FakePipeline(source)
    streaming = source_db.version_num >= 140000
    with psycopg.connect(source_db.dsn) as writer:
        writer.execute("INSERT INTO t SELECT g, repeat('p', 200) FROM generate_series(1, 3000) g")
        if streaming:
            pipeline.run(lambda p: source.assembler.open_transactions == 1)
        source_db.terminate_walsender()
        writer.execute("INSERT INTO t VALUES (3001, 'last')")
    pipeline.run(lambda p: len(p.ids) >= 3001)
    pipeline.pump(0.3)
    assert pipeline.ids == list(range(1, 3002))
    assert source.stats.reconnects >= 1
    assert source.assembler.stats.memory_bytes == 0


def test_source_answers_reply_requested_keepalives_at_once(source_db: SourceDb) -> None:
    # With status updates every 30 s, only immediate answers to the server's requests keep a
    # 1 s wal_sender_timeout from cutting the connection.
    source = source_db.source(status_interval=30.0, server_options=(("wal_sender_timeout", "1s"),))
    pipeline = FakePipeline(source)
    pipeline.pump(3.5)
    assert source.stats.keepalives >= 2
    assert source.stats.reconnects == 0
    assert source.stats.status_updates >= 3  # the first one, then one per request


def test_drop_slot_drops_only_when_asked(source_db: SourceDb) -> None:
    from bridge.source.slots import drop_slot, get_slot

    source_db.source().close()
    source_db.wait_slot_released()
    assert get_slot(source_db.admin, source_db.slot) is not None
    assert drop_slot(source_db.admin, source_db.slot) is True
    assert get_slot(source_db.admin, source_db.slot) is None
    assert drop_slot(source_db.admin, source_db.slot) is False


def test_source_exported_snapshot_hands_off_to_stream_without_gap_or_overlap(
    source_db: SourceDb,
) -> None:
    from bridge.source.snapshot_slot import SlotWithSnapshot

    make_table(source_db)
    # The publication must exist before the slot's start: changes are matched against the
    # publication as the catalog was when they were made.
    source_db.execute(f'CREATE PUBLICATION "{source_db.publication}" FOR ALL TABLES')
    insert_transactions(source_db, [range(1, 4)])
    with SlotWithSnapshot(source_db.dsn, source_db.slot) as exported:
        insert_transactions(source_db, [range(4, 6)])  # after the snapshot: the stream's part
        with psycopg.connect(source_db.dsn) as reader:
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            reader.execute(f"SET TRANSACTION SNAPSHOT '{exported.snapshot_name}'")
            snapshot_ids = [r[0] for r in reader.execute("SELECT id FROM t ORDER BY id")]
    assert snapshot_ids == [1, 2, 3]
    source = source_db.source(create_slot=False)
    assert source.start_lsn == exported.consistent_point
    pipeline = FakePipeline(source)
    pipeline.run(lambda p: len(p.ids) >= 2)
    pipeline.pump(0.3)
    assert pipeline.ids == [4, 5]


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "pgbridge-wal-reader"]


def test_source_receives_on_a_reader_thread_that_owns_the_connection(
    source_db: SourceDb,
) -> None:
    # With the C module (bridge/native/_pqread.c), frames are received on a thread of their
    # own while the pipeline works; the pure-Python install reads in line. Either way the
    # stream, the status updates (sent by the reader while it owns the connection) and the
    # close behave the same.
    native = os.environ.get("PGBRIDGE_NATIVE", "1") != "0"
    make_table(source_db)
    source = source_db.source()
    insert_transactions(source_db, [range(1, 200), range(200, 201)])
    pipeline = FakePipeline(source)
    pipeline.run(lambda p: len(p.ids) >= 200)
    assert pipeline.ids == list(range(1, 201))
    assert len(_reader_threads()) == (1 if native else 0)
    acked = pipeline.tracker.flush_lsn
    pipeline.pump(1.0)  # a status update goes out within status_interval
    # At least what was acknowledged: with nothing in flight the source may also confirm the
    # server's WAL end from a keepalive (it did under a loaded machine), never less.
    confirmed = source_db.confirmed_flush()
    assert confirmed >= acked
    source.close()
    assert _reader_threads() == []  # stopped before the connection is closed
    assert source_db.confirmed_flush() >= confirmed
