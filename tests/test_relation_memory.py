"""DDL made while the bridge was down (bridge.relation_memory): a table's first Relation after a
restart is compared with the version the bridge delivered before it stopped, so a rewrite of
its rows (a type changed with USING, a rename) is still reported and resnapshotted; only
versions the slot was confirmed past are kept, so a replay never looks like a change back."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.events import EventBuilder
from bridge.pgoutput.messages import Begin, Insert
from bridge.relation_memory import RelationMemory, relation_memory_file
from tests.rows import INT4, lsn, relation, tuple_data
from tests.test_events import BEGIN, COMMIT, _run

RETYPED = relation(columns=(("id", INT4, True), ("body", INT4, False)))


def _bridge(path: Path, told: list[tuple[str, str]]) -> EventBuilder:
    """A bridge process's builder: its memory read from the state file at start."""
    builder = EventBuilder("app")
    builder.memory = RelationMemory(path)
    builder.on_rewrite = lambda table, signal_id: told.append((table, signal_id))
    return builder


def _stream_one_change(builder: EventBuilder, version: object = None) -> None:
    builder.message_lsn = int(lsn("0/0F00"))
    _run(builder, version or relation(), BEGIN, Insert(None, 16384, tuple_data("1", "a")), COMMIT)


def _delivered(path: Path, told: list[tuple[str, str]]) -> EventBuilder:
    """A bridge that streamed one change of the table, the slot confirmed past it."""
    builder = _bridge(path, told)
    _stream_one_change(builder)
    assert builder.memory is not None
    builder.memory.acknowledged(int(lsn("0/1030")))
    return builder


def test_a_type_changed_while_the_bridge_was_down_is_reported_after_the_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = relation_memory_file(tmp_path, "slot")
    told: list[tuple[str, str]] = []
    _delivered(path, told)  # then a stop
    # ALTER COLUMN body TYPE int USING ..., while no bridge runs; the next one's stream:
    second = _bridge(path, told)
    later = Begin(final_lsn=lsn("0/5000"), commit_ts=2_000_000, xid=701)
    with caplog.at_level("WARNING", logger="bridge.events"):
        _run(second, later, RETYPED)
    assert told == [("public.items", "rewrite-16384-0/5000")]
    assert any("changed type" in r.getMessage() for r in caplog.records)


def test_a_rename_while_the_bridge_was_down_is_reported_after_the_restart(tmp_path: Path) -> None:
    path = relation_memory_file(tmp_path, "slot")
    told: list[tuple[str, str]] = []
    _delivered(path, told)
    _run(_bridge(path, told), BEGIN, relation(name="things"))
    assert [table for table, _ in told] == ["public.things"]


def test_a_version_not_yet_confirmed_is_not_kept_so_a_replay_is_no_change(tmp_path: Path) -> None:
    """The bridge saw the new version but stopped before the slot was confirmed past it: the
    restart replays the old version first, which must not read as a change back."""
    path = relation_memory_file(tmp_path, "slot")
    told: list[tuple[str, str]] = []
    first = _delivered(path, told)
    assert first.memory is not None
    first.message_lsn = int(lsn("0/5000"))
    _run(first, RETYPED)  # reported by the running bridge
    assert len(told) == 1
    first.memory.acknowledged(int(lsn("0/1030")))  # not past the new version: a crash here
    replayed = _bridge(path, told)
    _stream_one_change(replayed)  # the replay: the old version, as the file has it
    assert len(told) == 1
    assert relation_memory_file(tmp_path, "slot").exists()


def test_an_unreadable_file_is_a_warning_and_an_empty_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = relation_memory_file(tmp_path, "slot")
    path.write_text("{torn")
    with caplog.at_level("WARNING", logger="bridge.relation_memory"):
        assert RelationMemory(path).known == {}
    assert "DDL made while the bridge was down is not seen" in caplog.text


def test_the_default_state_directory_is_under_the_home_directory() -> None:
    from bridge.config.settings import DEFAULT_STATE_DIR

    path = relation_memory_file(DEFAULT_STATE_DIR, "slot")
    assert path == Path.home() / ".local/state/pgbridge/relations-slot.json"
