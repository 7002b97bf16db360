"""bridge.native._kafka and bridge.sink.native_batches without a broker (the broker tests are
in tests/integration/test_publisher.py)."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaError

from bridge.sink.native_batches import BatchReport, native_batches

native_only = pytest.mark.skipif(
    os.environ.get("PGBRIDGE_NATIVE") == "0", reason="PGBRIDGE_NATIVE=0 turns the module off"
)


@native_only
def test_native_batches_bind_to_the_librdkafka_confluent_kafka_loaded() -> None:
    # Fails, never skips, where the C module was not built or cannot find the library.
    assert native_batches() is not None


@native_only
@pytest.mark.parametrize(
    ("key", "java_hash"),
    [  # org.apache.kafka.common.utils.UtilsTest#testMurmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_partition_of_a_key_is_the_java_default_partitioners(key: bytes, java_hash: int) -> None:
    module = native_batches()
    assert module is not None
    for partitions in (1, 3, 7, 1000003):
        assert module.murmur2_partition(key, partitions) == (java_hash & 0x7FFFFFFF) % partitions


class _Message:
    def __init__(self, partition: int, offset: int = 7) -> None:
        self._partition = partition
        self._offset = offset

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


def test_batch_report_delivers_once_when_every_marker_succeeded() -> None:
    delivered: list[int] = []
    failed: list[tuple[KafkaError, int]] = []
    report = BatchReport(10, delivered.append, lambda e, m, n: failed.append((e, n)))
    report.markers = 3
    report(None, _Message(0))
    report(None, _Message(1))
    assert delivered == []  # a marker is still out
    report(None, _Message(0))
    assert delivered == [10] and failed == []


def test_batch_report_fails_the_batch_once_and_never_delivers_it() -> None:
    delivered: list[int] = []
    failed: list[tuple[KafkaError, int]] = []
    report = BatchReport(10, delivered.append, lambda e, m, n: failed.append((e, n)))
    report.markers = 2
    error = KafkaError(KafkaError._MSG_TIMED_OUT)
    report(error, _Message(0))
    report(None, _Message(0))
    assert delivered == []
    assert failed == [(error, 10)]  # the batch's records counted as failed once
    report2 = BatchReport(4, delivered.append, lambda e, m, n: failed.append((e, n)))
    report2.markers = 2
    report2(error, _Message(0))
    report2(error, _Message(1))
    assert failed[1:] == [(error, 4), (error, 0)]


def test_batch_report_fails_a_batch_whose_marker_came_back_without_an_offset() -> None:
    """A marker librdkafka reported delivered only by implication (no offset: its request
    failed, a later one succeeded) does not prove its batch written."""
    delivered: list[int] = []
    failed: list[tuple[KafkaError, int]] = []
    report = BatchReport(10, delivered.append, lambda e, m, n: failed.append((e, n)))
    report.markers = 2
    report(None, _Message(0, offset=-1001))
    report(None, _Message(0, offset=12))
    assert delivered == []
    assert [(e.code(), e.retriable(), n) for e, n in failed] == [(KafkaError._FAIL, True, 10)]


@native_only
def test_marker_takes_a_pending_exception_out_before_calling() -> None:
    # confluent-kafka calls delivery reports with its fatal error still pending; the marker
    # keeps it for the publisher instead of letting the callback fail at its first C call.
    module = native_batches()
    assert module is not None
    cleared: list[BaseException] = []
    calls: list[tuple[object, object]] = []
    marker = module.Marker(lambda err, msg: calls.append((err, msg)), cleared)
    marker(None, "m")
    assert calls == [(None, "m")] and cleared == []
    with pytest.raises(TypeError):
        module.Marker(42, cleared)
