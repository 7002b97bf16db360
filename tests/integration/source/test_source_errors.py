"""Typed errors of the replication source against real PostgreSQL."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

from bridge.devstack.postgres import PostgresCluster
from bridge.source import (
    LogicalReplicationSource,
    PublicationConfig,
    PublicationMismatchError,
    PublicationMissingError,
    PublicationMode,
    ReconnectPolicy,
    ReplicationPrivilegeError,
    SlotInUseError,
    SlotInvalidatedError,
    SlotMismatchError,
    SlotMissingError,
    WalLevelError,
)

from .conftest import FakePipeline, SourceDb, source_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_source_user_publication_missing_raises(source_db: SourceDb) -> None:
    with pytest.raises(PublicationMissingError) as info:
        source_db.source(publication=PublicationConfig("nope", PublicationMode.USER))
    assert info.value.publication == "nope"
    assert source_db.execute("SELECT 1 FROM pg_publication WHERE pubname = 'nope'") == []


def test_source_all_tables_mode_rejects_table_list_publication(source_db: SourceDb) -> None:
    source_db.execute("CREATE TABLE a (id int PRIMARY KEY)")
    source_db.execute(f'CREATE PUBLICATION "{source_db.publication}" FOR TABLE a')
    with pytest.raises(PublicationMismatchError, match="FOR ALL TABLES"):
        source_db.source()


def test_source_filtered_publication_is_created_and_reconciled(source_db: SourceDb) -> None:
    for table in ("a", "b", "c"):
        source_db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY)")
    filtered = PublicationConfig(
        source_db.publication,
        PublicationMode.FILTERED,
        include_schemas=("public",),
        exclude_tables=("public.b",),
    )
    source_db.source(publication=filtered).close()
    members = "SELECT tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1"
    assert source_db.execute(members, (source_db.publication,)) == [("a",), ("c",)]
    source_db.execute("CREATE TABLE d (id int PRIMARY KEY)")
    source_db.source(publication=filtered).close()  # the next start picks up the new table
    assert source_db.execute(members, (source_db.publication,)) == [("a",), ("c",), ("d",)]


def test_source_slot_active_elsewhere_raises_slot_in_use(source_db: SourceDb) -> None:
    first = source_db.source()
    pid = source_db.slot_row()[1]
    assert pid is not None
    policy = ReconnectPolicy(initial_delay=0.1, max_delay=0.2, slot_in_use_timeout=0.5)
    with pytest.raises(SlotInUseError) as info:
        source_db.source(reconnect=policy)
    assert info.value.slot == source_db.slot
    assert info.value.active_pid == pid
    assert info.value.sqlstate == "55006"
    first.close()


def test_source_missing_slot_without_create_raises(source_db: SourceDb) -> None:
    with pytest.raises(SlotMissingError):
        source_db.source(create_slot=False)


def test_source_slot_of_other_plugin_raises_mismatch(source_db: SourceDb) -> None:
    source_db.execute(
        "SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (source_db.slot,)
    )
    with pytest.raises(SlotMismatchError) as info:
        source_db.source()
    assert (info.value.attribute, info.value.actual) == ("plugin", "test_decoding")


def test_source_role_without_replication_raises_privilege_error(source_db: SourceDb) -> None:
    role = f"norepl_{uuid.uuid4().hex[:8]}"
    source_db.execute(f"CREATE ROLE {role} LOGIN")
    try:
        with pytest.raises(ReplicationPrivilegeError) as info:
            source_db.source(dsn=source_db.cluster.dsn(source_db.name, user=role))
        assert info.value.user == role
    finally:
        source_db.execute(f"DROP ROLE {role}")


def test_source_publication_dropped_while_streaming_raises(source_db: SourceDb) -> None:
    source_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    source = source_db.source()
    pipeline = FakePipeline(source)
    pipeline.pump(0.3)
    source_db.execute(f'DROP PUBLICATION "{source_db.publication}"')
    source_db.execute("INSERT INTO t VALUES (1)")
    if source_db.version_num >= 180000:
        # PostgreSQL 18 skips publications that do not exist instead of failing the stream
        # (with a WARNING in the server log), so the change is simply not published.
        pipeline.pump(1.0)
        assert pipeline.ids == []
        return
    with pytest.raises(PublicationMissingError) as info:
        pipeline.run(lambda p: False, timeout=30)
    assert info.value.publication == source_db.publication


def test_source_invalidated_slot_raises(source_db: SourceDb) -> None:
    source_db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    source_db.source().close()
    source_db.wait_slot_released()
    source_db.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
    source_db.execute("SELECT pg_reload_conf()")
    try:
        for _ in range(4):  # push the slot's restart_lsn far behind and remove that WAL
            source_db.execute("INSERT INTO t SELECT coalesce(max(id), 0) + 1 FROM t")
            source_db.execute("SELECT pg_switch_wal()")
        source_db.execute("CHECKPOINT")
        status = source_db.execute(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (source_db.slot,)
        )
        assert status == [("lost",)]
        with pytest.raises(SlotInvalidatedError) as info:
            source_db.source()
        assert info.value.slot == source_db.slot
    finally:
        source_db.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
        source_db.execute("SELECT pg_reload_conf()")


def test_source_wal_level_replica_raises(pg_cluster: PostgresCluster) -> None:
    base = Path(tempfile.mkdtemp(prefix="pgbridge-source-replica-"))
    cluster = PostgresCluster(pg_cluster.bindir, base_dir=base, settings={"wal_level": "replica"})
    cluster.start()
    try:
        source = LogicalReplicationSource(source_config(cluster.dsn(), "slot_x", "pub_x"))
        with pytest.raises(WalLevelError) as info:
            source.open()
        assert info.value.wal_level == "replica"
        with psycopg.connect(cluster.dsn()) as conn:  # nothing was created
            assert conn.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
    finally:
        cluster.destroy()
