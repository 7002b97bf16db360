"""Incremental snapshots without a server: signals as Debezium writes them, the chunk window's
reconciliation, and the rule that progress is recorded only once Kafka has it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.events import EventBuilder
from bridge.pgoutput.lsn import Lsn
from bridge.signals import SignalError, SnapshotRequest, cli_signal, parse_signal
from bridge.snapshot.incremental import IncrementalSettings, IncrementalSnapshotter
from bridge.snapshot.incremental_state import (
    HANDLED_MEMORY,
    IncrementalState,
    TableTask,
    load_incremental,
    parse_incremental_record,
    save_incremental,
)
from bridge.snapshot.window import ChunkWindow
from tests.rows import tuple_data


def test_execute_snapshot_in_debeziums_format_with_additional_conditions() -> None:
    signal = parse_signal(
        "ad-hoc-1",
        "execute-snapshot",
        '{"data-collections": ["public.a", "s.b"], "type": "INCREMENTAL", '
        '"additional-conditions": [{"data-collection": "s.b", "filter": "color = \'blue\'"}]}',
    )
    request = signal.snapshot_request()
    assert request.collections == ("public.a", "s.b")
    assert request.condition_for("s.b") == "color = 'blue'"
    assert request.condition_for("public.a") is None


def test_the_older_single_additional_condition_applies_to_every_collection() -> None:
    signal = parse_signal(
        "x", "execute-snapshot", '{"data-collections": ["t"], "additional-condition": "id > 5"}'
    )
    assert signal.snapshot_request().condition_for("t") == "id > 5"


@pytest.mark.parametrize(
    ("signal_type", "data", "message"),
    [
        ("execute-snapshot", "{not json", "not JSON"),
        ("execute-snapshot", "[1]", "JSON object"),
        ("explode", "{}", "unknown signal type"),
    ],
)
def test_malformed_signals_are_typed_errors_naming_the_signal(
    signal_type: str, data: str, message: str
) -> None:
    with pytest.raises(SignalError, match=message) as info:
        parse_signal("sig-7", signal_type, data)
    assert "sig-7" in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ('{"data-collections": ["t"], "type": "blocking"}', "only 'incremental'"),
        ('{"type": "incremental"}', "needs data-collections"),
        ('{"data-collections": [1]}', "list of table names"),
        ('{"data-collections": ["t"], "additional-conditions": [{"filter": "x"}]}', "needs"),
    ],
)
def test_execute_snapshot_requests_that_cannot_run_say_why(data: str, message: str) -> None:
    with pytest.raises(SignalError, match=message):
        parse_signal("s", "execute-snapshot", data).snapshot_request()


def test_a_partition_request_names_one_table_and_whether_its_rows_left() -> None:
    def request(data: str) -> object:
        return parse_signal("p", "execute-snapshot", data).snapshot_request()

    detached = request(
        '{"data-collections": ["public.meas"], "pgbridge-partition": "public.meas_us", '
        '"pgbridge-partition-change": "detached"}'
    )
    assert detached == SnapshotRequest(("public.meas",), (), "public.meas_us", True)
    attached = request(
        '{"data-collections": ["public.meas"], "pgbridge-partition": "public.meas_us"}'
    )
    assert attached == SnapshotRequest(("public.meas",), (), "public.meas_us", False)
    with pytest.raises(SignalError, match="one data-collection"):
        request('{"data-collections": ["a", "b"], "pgbridge-partition": "public.p"}')
    with pytest.raises(SignalError, match="attached, detached"):
        request(
            '{"data-collections": ["a"], "pgbridge-partition": "public.p", '
            '"pgbridge-partition-change": "moved"}'
        )


def test_a_partition_task_survives_the_state_file(tmp_path: Path) -> None:
    state = IncrementalState(
        "slot", [TableTask("public.meas", partition="public.meas_us", detached=True)]
    )
    save_incremental(tmp_path / "s.json", state)
    loaded = load_incremental(tmp_path / "s.json")
    assert loaded is not None and loaded.tables == state.tables
    assert loaded.tables[0].describe() == (
        "deleting the rows of detached partition public.meas_us from public.meas"
    )


def test_stop_snapshot_without_collections_means_all() -> None:
    assert parse_signal("s", "stop-snapshot", None).snapshot_request().collections == ()


def test_cli_arguments_become_debezium_signals() -> None:
    assert cli_signal(["public.t"], "id < 10", False, False, False) == (
        "execute-snapshot",
        {
            "data-collections": ["public.t"],
            "type": "incremental",
            "additional-conditions": [{"data-collection": "public.t", "filter": "id < 10"}],
        },
    )
    assert cli_signal([], None, True, False, False) == ("stop-snapshot", {})
    assert cli_signal([], None, False, True, False) == ("pause-snapshot", {})
    assert cli_signal([], None, False, False, True) == ("resume-snapshot", {})
    with pytest.raises(SignalError, match="at least one table"):
        cli_signal([], None, False, False, False)


def test_window_drops_rows_the_stream_changed_only_while_open() -> None:
    window: ChunkWindow[str] = ChunkWindow("c1", "topic", {b"1": "r1", b"2": "r2", b"3": "r3"})
    window.saw(b"1", 700)  # before the low watermark: older than the read, the row stays
    window.open()
    window.saw(b"2", 701)  # inside: the stream's change is as new as the read, the row goes
    window.saw(b"9", 702)  # a key the chunk does not hold
    assert window.close() == ["r1", "r3"]
    assert window.dropped == 1


def test_a_transaction_the_read_did_not_see_counts_even_before_the_low_watermark() -> None:
    """Committed (in WAL order) before the low watermark, but still in progress for the read's
    snapshot: the row read is older than that transaction's change, which must win."""
    window: ChunkWindow[str] = ChunkWindow(
        "c1", "topic", {b"1": "r1", b"2": "r2"}, invisible=frozenset({800})
    )
    window.saw(b"1", 800)
    window.saw(b"2", 799)  # visible to the read: older, the row stays
    assert window.close() == ["r2"]
    truncating: ChunkWindow[str] = ChunkWindow("c2", "t", {b"1": "r1"}, frozenset({5}))
    truncating.truncated(5)
    assert truncating.close() == []


def test_window_truncate_inside_drops_the_whole_chunk() -> None:
    window: ChunkWindow[str] = ChunkWindow("c1", "topic", {b"1": "r1"})
    window.open()
    window.truncated(1)
    assert window.close() == []


def test_state_round_trips_and_remembers_a_bounded_number_of_signals(tmp_path: Path) -> None:
    state = IncrementalState("slot", [TableTask("public.t", "id > 1", ["5"], 10, 2, "copying")])
    for i in range(HANDLED_MEMORY + 5):
        state.remember(f"s{i}")
    path = tmp_path / "incremental-slot.json"
    save_incremental(path, state)
    loaded = load_incremental(path)
    assert loaded is not None and loaded.tables == state.tables
    assert len(loaded.handled) == HANDLED_MEMORY and loaded.handled[-1] == f"s{HANDLED_MEMORY + 4}"
    assert loaded.current is not None and loaded.current.table == "public.t"


def snapshotter(tmp_path: Path) -> IncrementalSnapshotter:
    settings = IncrementalSettings(
        dsn="host=/nonexistent",
        publication="pub",
        signal_table="public.signals",
        chunk_size=10,
        state_path=tmp_path / "incremental-slot.json",
        slot="slot",
        captured=lambda schema, table: True,
    )
    return IncrementalSnapshotter(settings, EventBuilder("p"))


def test_a_signal_is_recorded_only_once_kafka_has_its_transaction(tmp_path: Path) -> None:
    first = snapshotter(tmp_path)
    first.on_signal_row(tuple_data("sig-1", "pause-snapshot", "{}"))
    first.transaction_end(Lsn(200))
    first.acknowledged(Lsn(199))
    assert load_incremental(tmp_path / "incremental-slot.json") is None
    first.acknowledged(Lsn(200))
    recorded = load_incremental(tmp_path / "incremental-slot.json")
    assert recorded is not None and recorded.paused and recorded.handled == ["sig-1"]
    # A restart replays the slot from before the signal: it is not acted on twice.
    second = snapshotter(tmp_path)
    assert second.state.paused
    second.on_signal_row(tuple_data("sig-2", "resume-snapshot", "{}"))
    second.on_signal_row(tuple_data("sig-1", "pause-snapshot", "{}"))  # replayed
    assert not second.state.paused


def test_exactly_once_commits_each_version_with_the_transactions_that_made_it(
    tmp_path: Path,
) -> None:
    """The Kafka transaction that commits a signal's (or a chunk's) stream transaction carries
    the state it produced, once; a start after a crash that came before the file's write takes
    Kafka's later version, and a file later than Kafka's wins over it."""
    first = snapshotter(tmp_path)
    assert first.kafka_records(Lsn(100)) == []  # nothing changed
    first.on_signal_row(tuple_data("sig-1", "pause-snapshot", "{}"))
    first.transaction_end(Lsn(200))
    assert first.kafka_records(Lsn(199)) == []  # that transaction is not in this commit
    ((key, value),) = first.kafka_records(Lsn(200))
    assert key == b"slot/incremental"
    committed = parse_incremental_record(value)
    assert committed.paused and committed.handled == ["sig-1"] and committed.lsn == 200
    assert first.kafka_records(Lsn(300)) == []  # given once
    # The crash: Kafka committed it, the file was never written.
    assert load_incremental(tmp_path / "incremental-slot.json") is None
    resumed = IncrementalSnapshotter(first.settings, EventBuilder("p"), committed)
    assert resumed.state.paused and resumed.state.handled == ["sig-1"]
    assert load_incremental(tmp_path / "incremental-slot.json") == committed
    # A file version later than Kafka's (a change between transactions, written at once).
    later = IncrementalState("slot", paused=False, handled=["sig-1", "sig-2"], lsn=300)
    save_incremental(tmp_path / "incremental-slot.json", later)
    again = IncrementalSnapshotter(first.settings, EventBuilder("p"), committed)
    assert not again.state.paused and again.state.lsn == 300


def test_watermarks_of_an_earlier_attempt_are_ignored(tmp_path: Path) -> None:
    snap = snapshotter(tmp_path)
    snap.on_signal_row(tuple_data("0123-open", "snapshot-window-open", "{}"))
    assert snap.watched_topic is None


def test_a_malformed_signal_row_is_logged_and_the_stream_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snap = snapshotter(tmp_path)
    snap.on_signal_row(tuple_data("bad", "execute-snapshot", "{oops"))
    snap.on_signal_row(tuple_data(None, "log", "{}"))
    assert "signal 'bad': data is not JSON" in caplog.text
    assert "without id or type" in caplog.text


@pytest.mark.parametrize(
    "raced",
    ["ended", "in the stream", None],
    ids=["raced a streamed commit", "raced the transaction the stream is in", "clean read"],
)
def test_a_chunk_read_that_raced_a_commit_the_stream_carried_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raced: str | None
) -> None:
    """PostgreSQL makes a commit visible just after writing its record: under load the stream
    can carry transaction 77 (before the chunk existed to drop the keys it changed) while the
    chunk's read still sees 77 in progress, so the read holds the rows as they were before 77.
    Emitting them at the high watermark would put old rows after 77's changes (seen in CI: one
    row of 80,000 kept its snapshot value). The same when the tick falls inside 77, part of
    whose changes the stream already published. The chunk is dropped and read again instead; a
    read that saw no such transaction goes on to its high watermark."""
    from types import SimpleNamespace
    from typing import Any

    from bridge.snapshot import incremental
    from bridge.snapshot.incremental_state import TableTask
    from tests.rows import relation

    snap = snapshotter(tmp_path)
    sent: list[str] = []
    forgotten: list[str] = []
    published = SimpleNamespace(table="public.items", qualified='"public"."items"', row_filter=None)
    info = SimpleNamespace(
        relation=relation(), chunk_key=[("id", "int4")], describe_to=lambda mapper: None
    )

    def read(*args: Any) -> tuple[list[dict[str, Any]], list[str], frozenset[int]]:
        return [{"id": 1, "body": "old"}], ["1"], frozenset({77})

    monkeypatch.setattr(snap, "_connection", lambda: object())
    monkeypatch.setattr(incremental.catalog, "published_tables", lambda conn, pub: [published])
    monkeypatch.setattr(incremental.catalog, "read_table", lambda conn, table: info)
    monkeypatch.setattr(
        incremental, "send_signal", lambda c, t, kind, d, sid, **kw: sent.append(kind)
    )
    monkeypatch.setattr(snap, "_read", read)
    monkeypatch.setattr(snap, "_forget_watermarks", forgotten.append)
    snap.attach(
        SimpleNamespace(
            snapshot_key=lambda table, row: b"\0\0\0\0\1" + str(row["id"]).encode(),
            publish_snapshot_rows=lambda table, rows, deleted=False: None,
        )  # type: ignore[arg-type]
    )
    snap.transaction_end(Lsn(100), 76)
    if raced == "ended":
        snap.transaction_end(Lsn(200), 77)
    snap._start_chunk(TableTask("public.items"), 77 if raced == "in the stream" else 78)
    if raced:
        assert sent == [incremental.OPEN_WINDOW] and len(forgotten) == 1
        assert snap._chunk is None and snap.watched_topic is None  # read again at the next tick
    else:
        assert sent == [incremental.OPEN_WINDOW, incremental.CLOSE_WINDOW] and not forgotten
        assert snap._chunk is not None and snap.watched_topic == "p.public.items"
