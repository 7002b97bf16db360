"""How a held table's set-aside batches are grouped for their replay (bridge.spark.replay)."""

from __future__ import annotations

from bridge.spark.replay import replay_chunks


def test_consecutive_batches_share_a_replay_up_to_the_bound() -> None:
    counts = [(3, 40), (4, 50), (5, 10), (9, 70), (12, 1)]
    assert replay_chunks(counts, 100) == [(3, 5), (9, 12)]


def test_a_batch_above_the_bound_is_replayed_alone() -> None:
    assert replay_chunks([(1, 5), (2, 500), (3, 5)], 100) == [(1, 1), (2, 2), (3, 3)]


def test_nothing_set_aside_is_no_replay() -> None:
    assert replay_chunks([], 100) == []


def test_every_batch_is_in_exactly_one_chunk_in_order() -> None:
    counts = [(b, (b * 37) % 11 + 1) for b in range(200)]
    chunks = replay_chunks(counts, 20)
    covered = [b for first, last in chunks for b in range(first, last + 1)]
    assert covered == list(range(200))
    sizes = dict(counts)
    for first, last in chunks:
        total = sum(sizes[b] for b in range(first, last + 1))
        assert total <= 20 or first == last
