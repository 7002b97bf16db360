"""Fences of a keyed table (bridge.spark.fences): what a MERGE commit stores, read back the same,
and never moving back. Applying them to batches runs on Spark in test_apply_batches.py."""

from __future__ import annotations

import json

from bridge.spark.fences import METADATA_KEY, Fences


def test_fences_round_trip_through_commit_metadata() -> None:
    fences = Fences({0: (100, 3), 7: (2**62, 0)}, truncate=(90, 1))
    text = fences.to_metadata()
    assert json.loads(text)[METADATA_KEY]["truncate"] == [90, 1]
    assert Fences.from_metadata(text) == fences
    assert Fences.from_metadata(Fences().to_metadata()) == Fences()


def test_fences_ignore_metadata_that_is_not_theirs() -> None:
    for text in (None, "", "not json", '{"other": 1}', json.dumps({METADATA_KEY: {"x": 1}})):
        assert Fences.from_metadata(text) is None


def test_fences_only_move_up() -> None:
    fences = Fences({0: (100, 3), 1: (50, 0)}, truncate=(90, 1))
    after = fences.advanced({0: (99, 9), 1: (60, 0), 2: (5, 5)}, truncate=(80, 0))
    assert after == Fences({0: (100, 3), 1: (60, 0), 2: (5, 5)}, truncate=(90, 1))
    assert Fences().advanced({}, (10, 0)).truncate == (10, 0)


def test_the_floor_is_set_by_the_first_load_and_only_moves_down() -> None:
    """The lowest commit LSN ever applied: set by a table's first load, lowered by any batch,
    committed with the fences; a table whose first load predates it never gets one."""
    first = Fences().advanced({0: (100, 3)}, None, lowest=40, first_load=True)
    assert first.floor == 40
    assert first.advanced({0: (120, 0)}, None, lowest=110).floor == 40
    assert first.advanced({0: (120, 0)}, None, lowest=30).floor == 30
    assert Fences.from_metadata(first.to_metadata()) == first
    older = Fences({0: (100, 3)})  # written by a job before floors
    assert older.advanced({0: (120, 0)}, None, lowest=110).floor is None


def test_a_batch_is_covered_when_every_partition_offset_was_committed() -> None:
    fences = Fences(offsets={0: 100, 1: 50})
    assert fences.cover({0: 100, 1: 7})  # a replay of what the table's commits covered
    assert not fences.cover({0: 101})  # a record past the commits: a new batch
    assert not fences.cover({0: 10, 2: 0})  # a partition no commit covered
    assert not fences.cover({})  # no records: nothing to say (the caller applies as usual)
    assert not Fences().cover({0: 0})  # commits from before offsets were recorded
