"""Failover slots and standbys, without a server: version checks, the typed errors, and the
wait on a standby under the reconnect policy (bridge.source.failover)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.ops.status import SlotStatus, slot_query
from bridge.retry import WAITING_FOR
from bridge.source import (
    FailoverSlotUnsupportedError,
    LogicalReplicationSource,
    PublicationConfig,
    ReconnectPolicy,
    ReplicationConnectionLost,
    ServerInRecoveryError,
    SlotInUseError,
    SourceConfig,
    SourceError,
    slots,
)
from bridge.source.errors import classify_server_error
from bridge.source.failover import FAILOVER_MIN_VERSION, check_failover_supported


def test_failover_check_refuses_servers_before_17_with_a_typed_error() -> None:
    for version in (130023, 160015):
        with pytest.raises(FailoverSlotUnsupportedError) as info:
            check_failover_supported(version)
        assert info.value.server_version_num == version
        assert "PostgreSQL 17" in str(info.value)
        assert "slot.failover" in str(info.value)
        # Permanent: another attempt cannot upgrade the server.
        assert not isinstance(info.value, ReplicationConnectionLost)
    check_failover_supported(FAILOVER_MIN_VERSION)
    check_failover_supported(180006)


def test_failover_server_in_recovery_is_retryable_and_names_the_host() -> None:
    error = ServerInRecoveryError("127.0.0.1:5433")
    assert isinstance(error, ReplicationConnectionLost)  # retried like a lost connection
    assert "127.0.0.1:5433" in str(error)
    assert "standby" in str(error)
    assert "target_session_attrs" in str(error)


class _FakeConn:
    """Just enough of a psycopg connection for ensure_slot: records the SQL it is given."""

    def __init__(self, server_version: int, slot_row: tuple[Any, ...] | None) -> None:
        self.info = type("Info", (), {"server_version": server_version})()
        self.queries: list[str] = []
        self._slot_row = slot_row

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        self.queries.append(query)
        row = self._slot_row if "FROM pg_replication_slots" in query else None
        if "pg_create_logical_replication_slot" in query:
            self._slot_row = _slot_row(failover=True)
        return type("Cursor", (), {"fetchone": lambda _self: row})()


def _slot_row(*, failover: bool, synced: bool = False) -> tuple[Any, ...]:
    return ("s", "pgoutput", "logical", "db", None, "0/10", "0/8", "reserved", False, None,
            failover, synced)  # fmt: skip


def test_failover_ensure_slot_refuses_before_17_without_touching_the_server() -> None:
    conn = _FakeConn(160015, None)
    with pytest.raises(FailoverSlotUnsupportedError):
        slots.ensure_slot(conn, "s", "db", create=True, failover=True)  # type: ignore[arg-type]
    assert conn.queries == []


def test_failover_ensure_slot_creates_a_failover_slot_on_17() -> None:
    conn = _FakeConn(170011, None)
    slot = slots.ensure_slot(conn, "s", "db", create=True, failover=True)  # type: ignore[arg-type]
    created = [q for q in conn.queries if "pg_create_logical_replication_slot" in q]
    assert created == [
        "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, false, true)"
    ]
    assert slot.failover and not slot.synced
    assert "failover, synced" in conn.queries[0]


def test_failover_ensure_slot_without_failover_creates_an_ordinary_slot() -> None:
    conn = _FakeConn(170011, None)
    slots.ensure_slot(conn, "s", "db", create=True)  # type: ignore[arg-type]
    assert "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')" in conn.queries


def test_failover_get_slot_before_17_reports_no_failover() -> None:
    conn = _FakeConn(160015, _slot_row(failover=False))
    slot = slots.get_slot(conn, "s")  # type: ignore[arg-type]
    assert slot is not None and not slot.failover and not slot.synced
    assert "false, false FROM pg_replication_slots" in conn.queries[0]


class _StandbyFirst(LogicalReplicationSource):
    """_prepare meets a standby ``standby`` times, then a primary; sleeps are recorded."""

    def __init__(self, standby: int, **policy: Any) -> None:
        config = SourceConfig(
            dsn="host=a,b",
            slot_name="s",
            publication=PublicationConfig("p"),
            failover=True,
            reconnect=ReconnectPolicy(initial_delay=0.5, max_delay=2.0, **policy),
        )
        self.sleeps: list[float] = []
        self.waiting: list[str | None] = []
        super().__init__(config, sleep=self._record_sleep)
        self.standby = standby
        self.prepares = 0

    def _record_sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.waiting.append(WAITING_FOR.get("postgres"))

    def _prepare(self) -> tuple[slots.ServerInfo, slots.SlotInfo]:
        self.prepares += 1
        if self.prepares <= self.standby:
            raise ServerInRecoveryError("127.0.0.1:5433")
        server = slots.ServerInfo(170011, "logical", "db", "u", True)
        return server, slots.get_slot(_FakeConn(170011, _slot_row(failover=True)), "s")  # type: ignore[arg-type,return-value]


def test_failover_open_waits_on_a_standby_and_says_so() -> None:
    source = _StandbyFirst(standby=3)
    _, slot = source._prepare_with_retry()
    assert source.prepares == 4
    assert source.sleeps == [0.5, 1.0, 2.0]
    assert source.waiting == ["a primary (the server is in recovery)"] * 3
    assert "postgres" not in WAITING_FOR
    assert slot.failover


def test_failover_open_on_a_standby_gives_up_after_max_attempts() -> None:
    source = _StandbyFirst(standby=10, max_attempts=2)
    with pytest.raises(ServerInRecoveryError):
        source._prepare_with_retry()
    assert source.prepares == 3
    assert "postgres" not in WAITING_FOR


def test_failover_reconnect_to_a_standby_is_retried_until_promoted() -> None:
    source = _StandbyFirst(standby=0)
    attempts: list[SourceError] = [ServerInRecoveryError("127.0.0.1:5433")] * 2

    def connect() -> None:
        if attempts:
            raise attempts.pop(0)

    source._connect = connect  # type: ignore[method-assign]
    source._connect_with_retry(first=False)
    assert source.sleeps == [0.5, 1.0, 2.0]  # a reconnect waits before its first try
    assert source.waiting[-1] == "a primary (the server is in recovery)"
    assert source.stats.reconnects == 1
    assert "postgres" not in WAITING_FOR


def test_failover_synced_slot_on_a_standby_would_only_look_busy() -> None:
    # What a PostgreSQL 18 standby answers to START_REPLICATION of a synced slot (its slot sync
    # worker holds it): SlotInUseError, retried only for slot_in_use_timeout and then fatal.
    # The pg_is_in_recovery() check in front of START_REPLICATION is what makes a standby a
    # wait without end instead.
    error = classify_server_error("s", "p", "55006", 'replication slot "s" is active for PID 7829')
    assert isinstance(error, SlotInUseError)
    assert not isinstance(error, ReplicationConnectionLost)


def test_status_slot_query_reads_failover_columns_from_17() -> None:
    assert "failover, synced" in slot_query(170011)
    assert "NULL::bool, NULL::bool" in slot_query(160015)


@pytest.mark.parametrize(
    ("status", "text"),
    [
        (SlotStatus("s", True), "failover: n/a before PostgreSQL 17"),
        (SlotStatus("s", True, failover=False, synced=False, in_recovery=False), "failover: off"),
        (SlotStatus("s", True, failover=True, synced=False, in_recovery=False), "failover: on"),
        (
            SlotStatus("s", True, failover=True, synced=True, in_recovery=True),
            "failover: on, synced copy on a standby",
        ),
        (
            SlotStatus("s", True, failover=True, synced=True, in_recovery=False),
            "failover: on (synced from a former primary)",
        ),
    ],
)
def test_status_renders_the_slots_failover_state(status: SlotStatus, text: str) -> None:
    assert status.failover_text() == text
