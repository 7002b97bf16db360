"""Signals as signed logical messages (no signal table): what a forged or altered message gets,
the key file, and the snapshotter acting on a message as on a signal table row."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from bridge import signal_messages
from bridge.events import EventBuilder
from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import Message
from bridge.signals import SignalError
from bridge.snapshot.incremental import IncrementalSettings, IncrementalSnapshotter
from bridge.snapshot.incremental_state import load_incremental

KEY = bytes(range(32))


def test_a_signed_signal_reads_back_as_it_was_sent() -> None:
    content = signal_messages.encode(KEY, "s-1", "execute-snapshot", {"data-collections": ["t"]})
    signal = signal_messages.decode(KEY, content.encode())
    assert (signal.id, signal.type, signal.data) == (
        "s-1",
        "execute-snapshot",
        {"data-collections": ["t"]},
    )


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda c: c.replace('"t"', '"public.secret"'), "not signed with this bridge's key"),
        (lambda c: c.replace('"mac": "', '"mac": "0'), "not signed with this bridge's key"),
        (lambda c: c.split(', "mac"')[0] + "}", "not signed with this bridge's key"),
        (lambda c: c[:-3], "not JSON"),
        (lambda c: '["a list"]', "not a JSON object"),
        (lambda c: '{"type": "log"}', "without id or type"),
    ],
    ids=["data changed", "mac changed", "no mac", "cut short", "a list", "no id"],
)
def test_an_altered_or_forged_message_is_a_typed_error(tamper: object, message: str) -> None:
    content = signal_messages.encode(KEY, "s-1", "execute-snapshot", {"data-collections": ["t"]})
    with pytest.raises(SignalError, match=message):
        signal_messages.decode(KEY, tamper(content).encode())  # type: ignore[operator]


def test_a_message_signed_with_another_key_is_refused() -> None:
    content = signal_messages.encode(b"other" * 8, "s-1", "pause-snapshot", {})
    with pytest.raises(SignalError, match="not signed"):
        signal_messages.decode(KEY, content.encode())


def test_the_key_is_created_once_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = signal_messages.key_path(tmp_path / "state", "slot_a")
    assert signal_messages.load_key(path) is None
    key = signal_messages.load_or_create_key(path)
    assert len(key) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signal_messages.load_or_create_key(path) == key  # kept across restarts
    assert signal_messages.load_key(path) == key


def _snapshotter(tmp_path: Path) -> IncrementalSnapshotter:
    settings = IncrementalSettings(
        dsn="host=/nonexistent",
        publication="pub",
        signal_table=None,
        chunk_size=10,
        state_path=tmp_path / "incremental-slot.json",
        slot="slot",
        captured=lambda schema, table: True,
        table_signals=False,  # the table channel off: messages are the bridge's own
        signal_key=KEY,
    )
    return IncrementalSnapshotter(settings, EventBuilder("p"))


def _message(content: str, transactional: bool = True) -> Message:
    return Message(7, transactional, Lsn(100), signal_messages.PREFIX, content.encode())


def test_the_snapshotter_acts_on_signed_messages_and_ignores_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snap = _snapshotter(tmp_path)
    forged = signal_messages.encode(b"x" * 32, "f-1", "pause-snapshot", {})
    snap.on_signal_message(_message(forged))
    snap.on_signal_message(
        _message(signal_messages.encode(KEY, "s-0", "pause-snapshot", {}), transactional=False)
    )
    assert not snap.state.paused
    assert "not signed with this bridge's key" in caplog.text
    assert "not one this bridge sent" in caplog.text
    snap.on_signal_message(_message(signal_messages.encode(KEY, "s-1", "pause-snapshot", {})))
    assert snap.state.paused
    # Recorded like a signal table's row: once Kafka has the transaction.
    snap.transaction_end(Lsn(200), 7)
    snap.acknowledged(Lsn(200))
    recorded = load_incremental(tmp_path / "incremental-slot.json")
    assert recorded is not None and recorded.paused and recorded.handled == ["s-1"]


def test_without_a_signal_table_no_table_is_the_signal_table(tmp_path: Path) -> None:
    from tests.rows import relation

    snap = _snapshotter(tmp_path)
    assert snap._self() == ""
    assert not snap.is_signal_table(EventBuilder("p").schemas_for(relation()))
