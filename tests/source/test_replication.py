"""Unit tests for the replication source that need no server."""

from __future__ import annotations

import socket

import pytest

from bridge.pgoutput.lsn import Lsn
from bridge.source import (
    LogicalReplicationSource,
    PublicationConfig,
    ReconnectPolicy,
    ReplicationConnectionLost,
    SlotInUseError,
    SlotMissingError,
    SourceConfig,
    SourceError,
)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there any more


def test_source_open_unreachable_server_raises_connection_lost() -> None:
    config = SourceConfig(
        dsn=f"host=127.0.0.1 port={closed_port()} dbname=x connect_timeout=2",
        slot_name="s",
        publication=PublicationConfig("p"),
    )
    with pytest.raises(ReplicationConnectionLost) as info:
        LogicalReplicationSource(config).open()
    assert info.value.sqlstate is None
    assert "refused" in str(info.value) or "connect" in str(info.value)


def test_source_used_before_open_raises_source_error() -> None:
    source = LogicalReplicationSource(
        SourceConfig(dsn="host=x", slot_name="s", publication=PublicationConfig("p"))
    )
    with pytest.raises(SourceError, match="open"):
        source.acknowledge(Lsn(1))
    source.close()  # closing a source that never opened is harmless


def test_source_replication_conninfo_adds_replication_and_escaped_options() -> None:
    from psycopg.conninfo import conninfo_to_dict

    from bridge.source.copy_both import replication_conninfo

    config = SourceConfig(
        dsn="host=h dbname=d options='-c search_path=s'",
        slot_name="s",
        publication=PublicationConfig("p"),
        server_options=(("logical_decoding_work_mem", "64kB"), ("application_name", "a b")),
    )
    params = conninfo_to_dict(replication_conninfo(config))
    assert params["replication"] == "database"
    assert params["dbname"] == "d"
    assert params["options"] == (
        "-c search_path=s -c logical_decoding_work_mem=64kB -c application_name=a\\ b"
    )


class FlakyConnectSource(LogicalReplicationSource):
    """Connecting fails with the given errors first, then succeeds; sleeps are recorded."""

    def __init__(self, config: SourceConfig, errors: list[SourceError]) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        super().__init__(config, clock=lambda: self.now, sleep=self._sleep_for)
        self.errors = errors
        self.connects = 0

    def _sleep_for(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def _connect(self) -> None:
        self.connects += 1
        if self.errors:
            raise self.errors.pop(0)


def flaky(errors: list[SourceError], **policy: float | int | None) -> FlakyConnectSource:
    config = SourceConfig(
        dsn="host=x",
        slot_name="s",
        publication=PublicationConfig("p"),
        reconnect=ReconnectPolicy(initial_delay=0.5, max_delay=2.0, **policy),  # type: ignore[arg-type]
    )
    return FlakyConnectSource(config, errors)


def test_source_reconnect_backs_off_exponentially_until_connected() -> None:
    source = flaky([ReplicationConnectionLost("refused")] * 4)
    source._connect_with_retry(first=False)
    assert source.connects == 5
    assert source.sleeps == [0.5, 1.0, 2.0, 2.0, 2.0]
    assert source.stats.reconnects == 1


def test_source_open_tries_at_once_then_backs_off() -> None:
    source = flaky([ReplicationConnectionLost("refused")])
    source._connect_with_retry(first=True)
    assert source.sleeps == [0.5]
    assert source.stats.reconnects == 0


def test_source_reconnect_gives_up_after_max_attempts() -> None:
    source = flaky([ReplicationConnectionLost("refused")] * 10, max_attempts=3)
    with pytest.raises(ReplicationConnectionLost) as info:
        source._connect_with_retry(first=False)
    assert info.value.attempts == 3
    assert "refused" in str(info.value)


def test_source_slot_in_use_retried_until_timeout() -> None:
    busy = SlotInUseError("s", 77)
    source = flaky([busy] * 20, slot_in_use_timeout=3.0)
    with pytest.raises(SlotInUseError) as info:
        source._connect_with_retry(first=False)
    assert info.value.active_pid == 77
    assert 3.0 <= source.now < 6.0


def test_source_non_retryable_error_is_raised_at_once() -> None:
    source = flaky([SlotMissingError("s")])
    with pytest.raises(SlotMissingError):
        source._connect_with_retry(first=False)
    assert source.connects == 1
