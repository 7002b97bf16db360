"""Exactly once: when Kafka transactions commit, what the slot may be confirmed to, typed
errors. The producer here records its calls (a unit test of the protocol of calls; the
integration tests run it on a real broker)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from bridge.pgoutput.lsn import Lsn
from bridge.sink.transactions import (
    ExactlyOnce,
    KafkaTransactionError,
    ProducerFencedError,
    offsets_record,
)


class CallLog:
    def __init__(self, fail: dict[str, KafkaError] | None = None) -> None:
        self.calls: list[Any] = []
        self.fail = fail or {}

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> None:
            self.calls.append(name)
            if name in self.fail:
                raise KafkaException(self.fail.pop(name))

        return call


def _exactly_once(producer: CallLog, interval: float = 3600.0) -> ExactlyOnce:
    eos = ExactlyOnce(
        producer,
        lambda key, value: producer.calls.append(("offsets", key, json.loads(value))),
        lambda timeout: producer.calls.append("flush"),
        "slot1",
        interval,
    )
    eos.start()
    return eos


def test_the_slot_is_confirmed_only_as_far_as_kafka_committed() -> None:
    producer = CallLog()
    eos = _exactly_once(producer)
    assert producer.calls == ["init_transactions", "begin_transaction"]
    assert eos.acknowledgeable(Lsn(500)) == Lsn(500)  # nothing waits: the stream may move on
    eos.transaction_done(Lsn(100))
    eos.transaction_done(Lsn(200))
    assert eos.acknowledgeable(Lsn(200)) == Lsn(0)  # delivered, not committed
    eos.idle()
    assert producer.calls[2:] == [
        ("offsets", b"slot1", {"slot": "slot1", "lsn": "0/C8", "lsn_int": 200}),
        "flush",
        "commit_transaction",
        "begin_transaction",
    ]
    assert eos.committed == Lsn(200) and eos.acknowledgeable(Lsn(200)) == Lsn(200)
    eos.transaction_done(Lsn(300))
    assert eos.acknowledgeable(Lsn(300)) == Lsn(200)


def test_a_transaction_commits_once_the_interval_passed_at_a_source_commit() -> None:
    producer = CallLog()
    eos = _exactly_once(producer, interval=0.0)
    eos.transaction_done(Lsn(100))
    assert "commit_transaction" in producer.calls and eos.committed == Lsn(100)
    eos.idle()  # nothing new: no empty commit
    assert producer.calls.count("commit_transaction") == 1


def test_a_message_outside_a_transaction_is_committed_without_moving_the_position() -> None:
    producer = CallLog()
    eos = _exactly_once(producer)
    eos.transaction_done(None)
    eos.idle()
    assert producer.calls.count("commit_transaction") == 1 and eos.committed is None
    assert not any(isinstance(c, tuple) for c in producer.calls)  # no offsets record


def test_a_fenced_producer_stops_with_a_typed_error() -> None:
    producer = CallLog({"commit_transaction": KafkaError(KafkaError._FENCED, "fenced", fatal=True)})
    eos = _exactly_once(producer)
    eos.transaction_done(Lsn(100))
    with pytest.raises(ProducerFencedError, match="another pgbridge instance took over slot slot1"):
        eos.idle()
    assert eos.acknowledgeable(Lsn(100)) == Lsn(0)


def test_an_abortable_failure_aborts_and_says_where_the_restart_resumes() -> None:
    error = KafkaError(KafkaError._TIMED_OUT, "timed out", txn_requires_abort=True)
    producer = CallLog({"commit_transaction": error})
    eos = _exactly_once(producer)
    eos.transaction_done(Lsn(100))
    with pytest.raises(KafkaTransactionError, match="aborted and will be sent again"):
        eos.idle()
    assert producer.calls[-1] == "abort_transaction"


def test_a_retriable_failure_is_retried() -> None:
    error = KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)
    producer = CallLog({"commit_transaction": error})
    eos = _exactly_once(producer)
    eos.transaction_done(Lsn(100))
    eos.idle()
    assert producer.calls.count("commit_transaction") == 2 and eos.committed == Lsn(100)


def test_the_offsets_record_is_keyed_by_slot() -> None:
    key, value = offsets_record("s", Lsn(0x1_0000_0010))
    assert key == b"s" and json.loads(value) == {
        "slot": "s",
        "lsn": "1/10",
        "lsn_int": 0x1_0000_0010,
    }


def test_a_producer_refusing_the_offsets_record_is_a_typed_error() -> None:
    """A transaction that failed (a record timed out) refuses new records with a bare _STATE
    error; the bridge restarts on a typed one instead of dying with a traceback."""
    producer = CallLog()

    def refuse(key: bytes, value: bytes) -> None:
        raise KafkaException(KafkaError(KafkaError._STATE, "Erroneous state"))

    eos = ExactlyOnce(producer, refuse, lambda timeout: None, "slot1", 3600.0)
    eos.start()
    eos.transaction_done(Lsn(100))
    with pytest.raises(KafkaTransactionError, match="Erroneous state"):
        eos.idle()
    assert "commit_transaction" not in producer.calls
    assert eos.acknowledgeable(Lsn(100)) == Lsn(0)


def test_a_bare_fatal_error_after_a_newer_producer_fenced_this_one_says_so() -> None:
    """A newer producer fenced this one in the background (its fatal error reached the error
    callback): the next record is refused with librdkafka's bare _FATAL, which must still stop
    the bridge as fenced (another instance runs the slot), not restart it into the fence."""
    producer = CallLog()

    def refuse(key: bytes, value: bytes) -> None:
        raise KafkaException(KafkaError(KafkaError._FATAL, "Fatal error"))

    fenced = ExactlyOnce(producer, refuse, lambda timeout: None, "slot1", 3600.0,
                         fatal_error=lambda: "_FENCED")  # fmt: skip
    fenced.start()
    fenced.transaction_done(Lsn(100))
    with pytest.raises(ProducerFencedError, match="another pgbridge instance took over"):
        fenced.idle()
    other = ExactlyOnce(producer, refuse, lambda timeout: None, "slot1", 3600.0,
                        fatal_error=lambda: "_MSG_TIMED_OUT")  # fmt: skip
    other.start()
    other.transaction_done(Lsn(100))
    with pytest.raises(KafkaTransactionError) as raised:
        other.idle()
    assert not isinstance(raised.value, ProducerFencedError)
