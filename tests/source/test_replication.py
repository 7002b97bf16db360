"""Unit tests for the replication source that need no server."""

from __future__ import annotations

import socket

import pytest

from bridge.pgoutput.lsn import Lsn
from bridge.source import (
    LogicalReplicationSource,
    PublicationConfig,
    ReplicationConnectionLost,
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

    config = SourceConfig(
        dsn="host=h dbname=d options='-c search_path=s'",
        slot_name="s",
        publication=PublicationConfig("p"),
        server_options=(("logical_decoding_work_mem", "64kB"), ("application_name", "a b")),
    )
    params = conninfo_to_dict(LogicalReplicationSource(config)._replication_conninfo())
    assert params["replication"] == "database"
    assert params["dbname"] == "d"
    assert params["options"] == (
        "-c search_path=s -c logical_decoding_work_mem=64kB -c application_name=a\\ b"
    )
