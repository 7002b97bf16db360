"""Acknowledgement by epochs: a chunk counts as delivered only once the producer that carried
its last record ran empty, and the ring never stalls on a producer still draining."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from bridge.sink.kafka_errors import DeliveryError
from bridge.snapshot import epochs as epochs_module
from bridge.snapshot.epochs import AckEpochs


class Drainable:
    """A producer whose records stay outstanding until ``deliver()``; ``fail`` raises."""

    def __init__(self) -> None:
        self.queued = 0
        self.fail: DeliveryError | None = None

    @property
    def outstanding(self) -> int:
        return self.queued

    def publish(self, topic: str, key: bytes | None, value: bytes | None,
                on_delivered: Callable[[], None]) -> None:  # fmt: skip
        self.queued += 1

    def publish_records(self, topic: str, records: Sequence[tuple[bytes | None, bytes | None]],
                        on_delivered: Callable[[], None]) -> None:  # fmt: skip
        self.queued += len(records)

    def deliver(self) -> None:
        self.queued = 0

    def poll(self, timeout: float = 0.0) -> int:
        if self.fail is not None:
            raise self.fail
        return 0

    def flush(self, timeout: float) -> int:
        self.poll()
        self.deliver()
        return 0


def _send(epochs: AckEpochs, records: int) -> int:
    epochs.publisher.publish_records("t", [(b"k", b"v")] * records, lambda: None)
    return epochs.sent(records)


def test_an_epoch_is_acknowledged_only_when_its_producer_ran_empty() -> None:
    a, b = Drainable(), Drainable()
    epochs = AckEpochs([a, b])
    first = _send(epochs, 10)
    epochs.service(0.0)
    assert epochs.acknowledged_below <= first  # queued, not delivered
    a.deliver()
    epochs.service(0.0)
    assert epochs.acknowledged_below > first


def test_the_next_epoch_starts_on_an_empty_producer_while_the_previous_drains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(epochs_module, "EPOCH_RECORDS", 5)
    a, b = Drainable(), Drainable()
    epochs = AckEpochs([a, b])
    e0 = _send(epochs, 5)
    epochs.service(0.0)  # due, b empty: epoch 1 on b
    assert epochs.publisher is b
    e1 = _send(epochs, 5)
    assert e1 == e0 + 1
    epochs.service(0.0)  # due, but a still holds epoch 0: stay on b (no stall, no mix)
    assert epochs.publisher is b
    e1b = _send(epochs, 3)
    assert e1b == e1
    b.deliver()
    epochs.service(0.0)
    # b ran empty, but epoch 0 on a is not delivered: nothing at or after epoch 0 counts.
    assert epochs.acknowledged_below == e0
    a.deliver()
    epochs.service(0.0)
    assert epochs.acknowledged_below > e1b
    assert epochs.publisher is a  # epoch 2, back on a


def test_a_failed_delivery_is_raised_by_service_and_drain() -> None:
    a = Drainable()
    epochs = AckEpochs([a])
    _send(epochs, 1)
    a.fail = DeliveryError("t", 0, "MSG_SIZE_TOO_LARGE", "too large")
    with pytest.raises(DeliveryError):
        epochs.service(0.0)
    with pytest.raises(DeliveryError):
        epochs.drain()
    assert epochs.acknowledged_below == 0


def test_drain_acknowledges_everything_published() -> None:
    a, b = Drainable(), Drainable()
    epochs = AckEpochs([a, b])
    _send(epochs, 3)
    epochs.service(10.0)  # age past EPOCH_SECONDS: epoch 1 on b
    last = _send(epochs, 2)
    epochs.drain()
    assert epochs.acknowledged_below > last
