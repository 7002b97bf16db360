"""Connection refusals that no retry can cure are typed, with the setting to look at."""

from __future__ import annotations

import pytest

from bridge.source.errors import (
    DatabaseAccessError,
    ReplicationConnectionLost,
    access_refusal,
    classify_server_error,
)


@pytest.mark.parametrize(
    ("libpq", "hint"),
    [
        ('FATAL:  password authentication failed for user "app"', "database.password"),
        ("fe_sendauth: no password supplied", "database.password"),
        ("SSL error: certificate verify failed", "database.sslrootcert"),
        ('server certificate for "db.example" does not match host name "10.0.0.5"', "hostname"),
        ('root certificate file "/x/root.crt" does not exist', "database.sslrootcert"),
        ("server does not support SSL, but SSL was required", "database.sslmode"),
        (
            'FATAL:  pg_hba.conf rejects connection for host "127.0.0.1", user "postgres", '
            'database "postgres", no encryption',
            "database.sslmode",
        ),
        ('FATAL:  no pg_hba.conf entry for host "10.1.1.1", user "app"', "pg_hba.conf"),
    ],
)
def test_permanent_refusals_name_the_setting_to_check(libpq: str, hint: str) -> None:
    error = access_refusal(f"connection failed: {libpq}\nmore detail")
    assert isinstance(error, DatabaseAccessError)
    assert hint in error.hint and libpq in str(error) and "more detail" not in str(error)


def test_transient_failures_are_not_refusals_and_stay_retryable() -> None:
    assert access_refusal("connection refused: is the server running?") is None
    error = classify_server_error("slot", "pub", "57P03", "the database system is starting up")
    assert isinstance(error, ReplicationConnectionLost)
    refused = classify_server_error("slot", "pub", "28P01", "password authentication failed")
    assert isinstance(refused, DatabaseAccessError)
    assert not isinstance(refused, ReplicationConnectionLost)
