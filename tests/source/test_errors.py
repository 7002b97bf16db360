"""Unit tests for mapping server errors on the replication path to typed errors."""

from __future__ import annotations

import pytest

from bridge.errors import PgBridgeError
from bridge.source.errors import (
    PublicationMissingError,
    ReplicationConnectionLost,
    ReplicationPrivilegeError,
    SlotInUseError,
    SlotInvalidatedError,
    SlotMissingError,
    SourceError,
    WalLevelError,
    classify_server_error,
)


def classify(sqlstate: str | None, message: str, detail: str = "") -> SourceError:
    return classify_server_error("s", "p", sqlstate, message, detail, "bob")


def test_classify_slot_active_is_slot_in_use_with_pid() -> None:
    error = classify("55006", 'replication slot "s" is active for PID 4242')
    assert isinstance(error, SlotInUseError)
    assert error.active_pid == 4242 and error.slot == "s" and error.sqlstate == "55006"


def test_classify_invalidated_slot() -> None:
    error = classify(
        "55000",
        'can no longer get changes from replication slot "s"',
        "This slot has been invalidated because it exceeded the maximum reserved size.",
    )
    assert isinstance(error, SlotInvalidatedError)
    assert "maximum reserved size" in error.reason


@pytest.mark.parametrize(
    ("sqlstate", "message", "kind"),
    [
        (
            "42501",
            "must be superuser or replication role to start walsender",
            ReplicationPrivilegeError,
        ),
        ("42704", 'publication "p" does not exist', PublicationMissingError),
        ("42704", 'replication slot "s" does not exist', SlotMissingError),
        ("55000", "logical decoding requires wal_level >= logical", WalLevelError),
        ("57P01", "terminating connection due to administrator command", ReplicationConnectionLost),
        ("08006", "server closed the connection unexpectedly", ReplicationConnectionLost),
        (None, "server closed the connection unexpectedly", ReplicationConnectionLost),
    ],
)
def test_classify_maps_server_errors_to_typed_errors(
    sqlstate: str | None, message: str, kind: type[SourceError]
) -> None:
    error = classify(sqlstate, message)
    assert type(error) is kind
    assert isinstance(error, PgBridgeError)


def test_classify_unknown_error_keeps_sqlstate_and_is_not_retryable() -> None:
    error = classify("XX000", "something odd")
    assert type(error) is SourceError
    assert error.sqlstate == "XX000"
    assert "something odd" in str(error)
