"""Fences of a keyed table (bridge.spark.fences): what a MERGE commit stores, read back the same,
and never moving back. Applying them to batches runs on Spark in test_apply_batches.py."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.spark import transforms as tf
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


# The fence rule's renderings (Fences.admits_change for the driver, Fences.admitted_rows for the
# task lane) must admit the same changes; Spark's (Fences.admits, not_covered) is held to
# admits_change in test_transforms.py.
_positions = st.tuples(st.integers(0, 6), st.integers(0, 3))
_changes = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 9), st.sampled_from("rcudt"), _positions),
    max_size=40,
)
_fences = st.builds(
    Fences,
    st.dictionaries(st.integers(0, 2), _positions, max_size=3),
    st.none() | _positions,
    st.dictionaries(st.integers(0, 2), st.integers(0, 9), max_size=3),
)


def _arrow_changes(changes: list[tuple[int, int, str, tuple[int, int]]]) -> pa.Table:
    return pa.table(
        {
            tf.PARTITION: pa.array([c[0] for c in changes], pa.int32()),
            tf.OFFSET: pa.array([c[1] for c in changes], pa.int64()),
            "op": pa.array([c[2] for c in changes], pa.string()),
            tf.COMMIT_LSN: pa.array([c[3][0] for c in changes], pa.int64()),
            tf.SEQ: pa.array([c[3][1] for c in changes], pa.int64()),
            "row": pa.array(range(len(changes)), pa.int64()),
        }
    )


# No deadline: the first example pays pyarrow.compute's import, and the unit run shares the
# cores with other workers.
@settings(deadline=None)
@given(_fences, _changes)
def test_the_arrow_rule_admits_what_the_python_rule_admits(
    fences: Fences, changes: list[tuple[int, int, str, tuple[int, int]]]
) -> None:
    expected = [i for i, c in enumerate(changes) if fences.admits_change(*c)]
    admitted = fences.admitted_rows(_arrow_changes(changes), "op")
    assert admitted.column("row").to_pylist() == expected


def test_the_rule_drops_covered_records_resends_and_changes_a_truncate_erased() -> None:
    fences = Fences({0: (10, 2)}, truncate=(5, 0), offsets={0: 100})
    assert not fences.admits_change(0, 100, "c", (20, 0))  # covered by a commit
    assert fences.admits_change(0, 101, "c", (20, 0))
    assert not fences.admits_change(0, 101, "u", (10, 2))  # a resend: at the partition fence
    assert fences.admits_change(0, 101, "r", (10, 2))  # snapshot reads are exempt
    assert not fences.admits_change(1, 0, "r", (5, 0))  # erased by the truncate
    assert fences.admits_change(1, 0, "c", (5, 1))
    assert Fences().admits_change(0, 0, "d", (0, 0))
