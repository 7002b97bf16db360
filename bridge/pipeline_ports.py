"""What the pipeline (bridge.pipeline) is handed: the publisher and observer it talks to, and
its options. Interfaces only, so the pipeline's collaborators need not import it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from bridge.pgoutput.lsn import Lsn
from bridge.sink.metadata import MetadataRecords

__all__ = ["NoObserver", "PipelineObserver", "PipelineOptions", "Publisher"]


class Publisher(Protocol):
    """What the pipeline needs from :class:`bridge.sink.publisher.KafkaPublisher`."""

    #: Runs between retries of a topic creation.
    on_wait: Callable[[], None] | None

    def publish(
        self, topic: str, key: bytes | None, value: bytes | None, on_delivered: Callable[[], None]
    ) -> None: ...

    def publish_packed(
        self, topic: str, pack: bytearray, count: int, on_delivered: Callable[[], None]
    ) -> None: ...

    def send_pending(self) -> None: ...

    def poll(self, timeout: float = 0.0) -> int: ...

    def flush(self, timeout: float) -> int: ...

    def close(self, timeout: float = 30.0) -> int: ...


class PipelineObserver(Protocol):
    """Hooks for metrics; every method must be cheap (called on the hot path)."""

    def on_events(self, table: str, op: str, count: int) -> None: ...

    def on_transaction(self, commit_ts_unix_us: int, end_lsn: Lsn) -> None: ...

    def on_acknowledged(self, flush_lsn: Lsn, in_flight: int) -> None: ...


class NoObserver:
    """The observer of a pipeline nobody observes."""

    def on_events(self, table: str, op: str, count: int) -> None:
        pass

    def on_transaction(self, commit_ts_unix_us: int, end_lsn: Lsn) -> None:
        pass

    def on_acknowledged(self, flush_lsn: Lsn, in_flight: int) -> None:
        pass


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    messages_topic: str
    tombstones_on_delete: bool = True
    truncate_events: bool = True
    #: (schema, table) -> captured? Tables outside it produce nothing (but their transactions
    #: are still acknowledged, so the slot moves past them).
    table_filter: Callable[[str, str], bool] | None = None
    shutdown_flush_timeout: float = 30.0
    #: BEGIN/END records on ``<prefix>.transaction`` and heartbeat records (None: neither).
    metadata: MetadataRecords | None = None
    transaction_metadata: bool = False
    heartbeat_interval: float = 0.0  # seconds; 0: no heartbeat records
