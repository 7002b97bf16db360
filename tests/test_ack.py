"""Unit and property tests for the acknowledgement tracker (bridge.ack)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.ack import AckTracker, AckUsageError, DeliveryFailedError, TransactionToken
from bridge.pgoutput.lsn import Lsn
from tests.examples import examples


def test_ack_tracker_starts_at_initial_flush() -> None:
    tracker = AckTracker(Lsn(100))
    assert tracker.flush_lsn == 100
    assert tracker.in_flight == 0


def test_ack_tracker_advances_when_transaction_delivered_and_complete() -> None:
    tracker = AckTracker(Lsn(10))
    token = tracker.begin_transaction(Lsn(50))
    tracker.record_sent(token, 2)
    tracker.record_delivered(token)
    tracker.transaction_complete(token)
    assert tracker.flush_lsn == 10  # one record still outstanding
    tracker.record_delivered(token)
    assert tracker.flush_lsn == 50
    assert tracker.in_flight == 0


def test_ack_tracker_waits_for_complete_even_when_all_sent_records_delivered() -> None:
    tracker = AckTracker()
    token = tracker.begin_transaction(Lsn(50))
    tracker.record_sent(token)
    tracker.record_delivered(token)
    # More records of this transaction may still be produced.
    assert tracker.flush_lsn == 0
    tracker.transaction_complete(token)
    assert tracker.flush_lsn == 50


def test_ack_tracker_later_transaction_waits_for_earlier_one() -> None:
    tracker = AckTracker()
    first = tracker.begin_transaction(Lsn(100))
    tracker.record_sent(first)
    tracker.transaction_complete(first)
    second = tracker.begin_transaction(Lsn(200))
    tracker.record_sent(second)
    tracker.transaction_complete(second)
    tracker.record_delivered(second)
    assert tracker.flush_lsn == 0
    tracker.record_delivered(first)
    assert tracker.flush_lsn == 200


def test_ack_tracker_empty_transaction_confirms_on_complete() -> None:
    tracker = AckTracker()
    token = tracker.begin_transaction(Lsn(70))
    tracker.transaction_complete(token)
    assert tracker.flush_lsn == 70


def test_ack_tracker_resent_lower_end_lsn_never_moves_backward() -> None:
    tracker = AckTracker()
    for end in (Lsn(300), Lsn(200)):
        token = tracker.begin_transaction(end)
        tracker.transaction_complete(token)
    assert tracker.flush_lsn == 300


def test_ack_tracker_failure_freezes_flush_and_raises() -> None:
    tracker = AckTracker()
    first = tracker.begin_transaction(Lsn(100))
    tracker.record_sent(first)
    tracker.transaction_complete(first)
    tracker.record_failed(first, "broker said no")
    tracker.record_delivered(first)  # a report after the failure changes nothing
    second = tracker.begin_transaction(Lsn(200))
    tracker.transaction_complete(second)
    assert tracker.flush_lsn == 0
    with pytest.raises(DeliveryFailedError, match="broker said no") as info:
        tracker.raise_if_failed()
    assert info.value.token == first


def test_ack_tracker_rejects_more_deliveries_than_sends() -> None:
    tracker = AckTracker()
    token = tracker.begin_transaction(Lsn(10))
    tracker.record_sent(token)
    with pytest.raises(AckUsageError, match="only 1 outstanding"):
        tracker.record_delivered(token, 2)


def test_ack_tracker_rejects_send_after_complete() -> None:
    tracker = AckTracker()
    token = tracker.begin_transaction(Lsn(10))
    tracker.record_sent(token)
    tracker.transaction_complete(token)
    with pytest.raises(AckUsageError, match="after transaction_complete"):
        tracker.record_sent(token)


def test_ack_tracker_rejects_confirmed_token() -> None:
    tracker = AckTracker()
    token = tracker.begin_transaction(Lsn(10))
    tracker.transaction_complete(token)
    with pytest.raises(AckUsageError, match="unknown"):
        tracker.record_delivered(token)


def test_ack_tracker_delivery_from_other_threads_confirms_everything() -> None:
    tracker = AckTracker()
    tokens = []
    for i in range(1, 201):
        token = tracker.begin_transaction(Lsn(i * 10))
        tracker.record_sent(token, 5)
        tracker.transaction_complete(token)
        tokens.append(token)

    def deliver(part: int) -> None:
        for token in tokens[part::4]:
            for _ in range(5):
                tracker.record_delivered(token)

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tracker.flush_lsn == 2000
    assert tracker.in_flight == 0


@settings(max_examples=examples(300), deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=12),
    data=st.data(),
)
def test_ack_tracker_property_flush_monotonic_and_never_passes_undelivered(
    sizes: list[int], data: st.DataObject
) -> None:
    """Any interleaving of sends, completions and deliveries, with transactions registered at
    Begin (commit LSN as stand-in, end LSN at completion) or at Commit: the flush position only
    moves forward, is always below the commit LSN of every transaction not yet done, and
    reaches the last end once everything is delivered."""
    tracker = AckTracker(Lsn(1))
    ends = [Lsn(100 * (i + 1)) for i in range(len(sizes))]
    commits = [Lsn(end - 50) for end in ends]
    at_begin = data.draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes)))
    tokens: list[TransactionToken] = []
    sent = [0] * len(sizes)
    delivered = [0] * len(sizes)
    completed = [False] * len(sizes)
    previous = tracker.flush_lsn
    while True:
        actions: list[tuple[str, int]] = []
        if len(tokens) < len(sizes) and (not tokens or completed[len(tokens) - 1]):
            actions.append(("begin", len(tokens)))
        if tokens and not completed[len(tokens) - 1]:
            current = len(tokens) - 1
            actions.append(
                ("send", current) if sent[current] < sizes[current] else ("complete", current)
            )
        actions += [("deliver", i) for i in range(len(tokens)) if delivered[i] < sent[i]]
        if not actions:
            break
        action, i = data.draw(st.sampled_from(actions))
        if action == "begin":
            tokens.append(tracker.begin_transaction(commits[i] if at_begin[i] else ends[i]))
        elif action == "send":
            tracker.record_sent(tokens[i])
            sent[i] += 1
        elif action == "complete":
            tracker.transaction_complete(tokens[i], ends[i] if at_begin[i] else None)
            completed[i] = True
        else:
            tracker.record_delivered(tokens[i])
            delivered[i] += 1
        flush = tracker.flush_lsn
        assert flush >= previous
        previous = flush
        for j in range(len(tokens)):
            done = completed[j] and delivered[j] == sizes[j]
            if not done:
                assert flush < commits[j]
    assert tracker.flush_lsn == ends[-1]
    assert tracker.in_flight == 0


def test_ack_tracker_end_lsn_given_at_completion_is_confirmed() -> None:
    # Registered at Begin with the commit LSN; the Commit's end LSN arrives at completion.
    tracker = AckTracker(Lsn(0x100))
    token = tracker.begin_transaction(Lsn(0x200))
    tracker.record_sent(token)
    tracker.transaction_complete(token, end_lsn=Lsn(0x230))
    assert tracker.flush_lsn == Lsn(0x100)  # not delivered yet
    tracker.record_delivered(token)
    assert tracker.flush_lsn == Lsn(0x230)


def test_ack_tracker_end_lsn_at_completion_cannot_move_backward() -> None:
    tracker = AckTracker()
    token = tracker.begin_transaction(Lsn(0x200))
    with pytest.raises(AckUsageError):
        tracker.transaction_complete(token, end_lsn=Lsn(0x1FF))
