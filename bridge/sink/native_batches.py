"""Records handed to librdkafka in batches with two delivery reports per partition, not one
per record (the C side and why it is enough: ``bridge/native/_kafka.c``).

:func:`native_batches` answers whether this process can do it: the C module was built,
``PGBRIDGE_NATIVE`` is not ``0``, and the librdkafka that confluent-kafka loaded exports what
the module needs. The publisher then asks for :data:`PRODUCER_SETTINGS` and falls back to
``produce_batch`` (a report per record) for any producer or topic the module cannot serve.

:class:`BatchReport` is the callable the markers' delivery reports reach (inside
``Producer.poll()``/``flush()``, on the publishing thread): once every marker of a batch has
reported without error, the whole batch is delivered; a marker's error fails the batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from confluent_kafka import KafkaError, Message

from bridge.native.librdkafka import bind_to_wheel_librdkafka
from bridge.native.switches import NATIVE_BATCHES, enabled
from bridge.sink.kafka_errors import proven_delivery

#: What the markers' proof needs from the producer (on top of its enable.idempotence):
#: an error that would leave a gap in a partition is fatal and fails every queued record.
PRODUCER_SETTINGS: dict[str, Any] = {"enable.gapless.guarantee": True}


@functools.cache  # bound once per process
def native_batches() -> ModuleType | None:
    """The bound ``bridge.native._kafka`` module, or ``None`` (then ``produce_batch``)."""
    if not enabled(NATIVE_BATCHES):  # off, or every C part off (bridge.native.switches)
        return None
    try:
        from bridge.native import _kafka
    except ImportError:  # not built (no C compiler at install time)
        return None
    # The wheel's own copy (a build against a system librdkafka has none: produce_batch then).
    return _kafka if bind_to_wheel_librdkafka(_kafka, "records go by produce_batch") else None


class BatchReport:
    """The delivery of one batch, known from its markers' reports.

    ``markers`` is set by the publisher after the first ``produce`` call of the batch (no
    report can run before it: reports are served by polls on the same thread). ``delivered``
    runs once, with the batch's record count, when all markers reported success; ``failed``
    runs for each marker that reported an error (the first error fails the batch).
    """

    __slots__ = ("count", "delivered", "failed", "failure_seen", "markers", "reported")

    def __init__(
        self,
        count: int,
        delivered: Callable[[int], None],
        failed: Callable[[KafkaError, Message, int], None],
    ) -> None:
        self.count = count
        self.delivered = delivered
        self.failed = failed
        self.markers = 0
        self.reported = 0
        self.failure_seen = False

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        self.reported += 1
        err = proven_delivery(err, msg)
        if err is not None:
            # The records not proven delivered count as failed once, with the first error.
            self.failed(err, msg, 0 if self.failure_seen else self.count)
            self.failure_seen = True
            return
        if self.reported == self.markers and not self.failure_seen:
            self.delivered(self.count)
