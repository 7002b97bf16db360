"""Fixtures for the replication source's integration tests on real PostgreSQL.

``PGBRIDGE_PG_VERSIONS`` (comma list, default ``13,18``: the oldest and newest supported)
selects the major versions; every test runs once per version. A cluster that cannot start makes
the tests error (StackError from the fixture), never skip.

:class:`FakePipeline` stands in for the pipeline the way the real one will drive the source:
it groups messages into transactions, registers each Commit with an :class:`AckTracker`,
"delivers" it (at once, or when the test says so) and acknowledges the tracker's flush position.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.ack import AckTracker, TransactionToken
from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.pgoutput.lsn import INVALID_LSN, Lsn
from bridge.pgoutput.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Update,
)
from bridge.source import (
    LogicalReplicationSource,
    PublicationConfig,
    PublicationMode,
    ReconnectPolicy,
    SourceConfig,
)


def pg_versions() -> list[str]:
    raw = os.environ.get("PGBRIDGE_PG_VERSIONS", "13,18")
    return [v.strip() for v in raw.split(",") if v.strip()]


@pytest.fixture(scope="session", params=pg_versions(), ids=lambda v: f"pg{v}")
def pg_cluster(request: pytest.FixtureRequest) -> Iterator[PostgresCluster]:
    version = str(request.param)
    bindir = ensure_postgres_binaries(version)
    base = Path(tempfile.mkdtemp(prefix=f"pgbridge-source-pg{version}-"))
    cluster = PostgresCluster(bindir, base_dir=base)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.destroy()


@dataclass
class Txn:
    xid: int
    commit_lsn: Lsn
    end_lsn: Lsn = INVALID_LSN
    ids: list[int] = field(default_factory=list)


class FakePipeline:
    """Consumes a source like the pipeline will, with delivery under the test's control."""

    def __init__(self, source: LogicalReplicationSource, *, auto_deliver: bool = True) -> None:
        self.source = source
        self.tracker = AckTracker(source.start_lsn)
        self.auto_deliver = auto_deliver
        self.transactions: list[Txn] = []
        self.current: Txn | None = None
        self.token: TransactionToken | None = None
        self.undelivered: list[tuple[TransactionToken, int]] = []
        self.acked_history: list[Lsn] = []
        self.logical_messages: list[Message] = []
        self.kinds: list[str] = []  # column kind of each change's first column (t or b)
        self._messages = source.messages()  # one generator for the whole life of the source

    @property
    def ids(self) -> list[int]:
        return [i for t in self.transactions for i in t.ids]

    def deliver(self, count: int | None = None) -> None:
        """Mark the oldest ``count`` (default all) undelivered transactions as delivered."""
        n = len(self.undelivered) if count is None else count
        for token, records in self.undelivered[:n]:
            if records:
                self.tracker.record_delivered(token, records)
        del self.undelivered[:n]
        self._acknowledge()

    def _acknowledge(self) -> None:
        flush = self.tracker.flush_lsn
        self.acked_history.append(flush)
        self.source.acknowledge(flush)

    def handle(self, message: LogicalMessage) -> None:
        if isinstance(message, Begin):
            assert self.current is None, "Begin inside a transaction"
            self.current = Txn(message.xid, message.final_lsn)
            # Registered at Begin like the real pipeline: records may be produced before Commit.
            self.token = self.tracker.begin_transaction(message.final_lsn)
        elif isinstance(message, Insert | Update | Delete):
            assert self.current is not None, "change outside a transaction"
            tup = message.new_tuple if not isinstance(message, Delete) else message.old_tuple
            raw = tup.raw(0)
            assert raw is not None
            kind = tup.kind(0).value
            self.kinds.append(kind)
            self.current.ids.append(int(raw) if kind == "t" else int.from_bytes(raw, "big"))
            assert self.token is not None
            self.tracker.record_sent(self.token)
        elif isinstance(message, Message):
            self.logical_messages.append(message)
            if not message.transactional:
                assert self.current is None, "non-transactional message inside a transaction"
                unit = self.tracker.begin_transaction(message.lsn)
                self.tracker.transaction_complete(unit)
        elif isinstance(message, Commit):
            txn = self.current
            assert txn is not None and txn.commit_lsn == message.commit_lsn
            txn.end_lsn = message.end_lsn
            self.transactions.append(txn)
            self.current = None
            token = self.token
            assert token is not None
            self.token = None
            self.tracker.transaction_complete(token, message.end_lsn)
            self.undelivered.append((token, len(txn.ids)))
            if self.auto_deliver:
                self.deliver()

    def run(self, until: Callable[[FakePipeline], bool], timeout: float = 60.0) -> None:
        """Pull messages until ``until(self)`` holds; fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not until(self):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out: {len(self.transactions)} transactions, ids {self.ids[-5:]}"
                )
            message = next(self._messages)
            if message is not None:
                self.handle(message)
            self._acknowledge()

    def pump(self, seconds: float) -> None:
        """Keep iterating (status updates, keepalives) for ``seconds``."""
        end = time.monotonic() + seconds
        self.run(lambda _: time.monotonic() >= end, timeout=seconds + 30)


def source_config(dsn_: str, slot_: str, publication_: str, **overrides: Any) -> SourceConfig:
    """A test configuration: short status and idle intervals, quick reconnects."""
    base = SourceConfig(
        dsn=dsn_,
        slot_name=slot_,
        publication=PublicationConfig(publication_, PublicationMode.ALL_TABLES),
        status_interval=0.2,
        idle_interval=0.05,
        reconnect=ReconnectPolicy(initial_delay=0.1, max_delay=1.0, slot_in_use_timeout=10),
    )
    return replace(base, **overrides)


class SourceDb:
    """One fresh database of the cluster with its own slot and publication names."""

    def __init__(self, cluster: PostgresCluster) -> None:
        self.cluster = cluster
        self.name = f"src_{uuid.uuid4().hex[:10]}"
        self.slot = f"slot_{uuid.uuid4().hex[:10]}"
        self.publication = f"pub_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        self.dsn = cluster.dsn(self.name)
        self.admin = psycopg.connect(self.dsn, autocommit=True)
        self.sources: list[LogicalReplicationSource] = []
        self.version_num = self.admin.info.server_version

    def execute(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        cur = self.admin.execute(query.encode(), params)
        return cur.fetchall() if cur.description else []

    def config(self, **overrides: Any) -> SourceConfig:
        return source_config(self.dsn, self.slot, self.publication, **overrides)

    def source(self, **overrides: Any) -> LogicalReplicationSource:
        source = LogicalReplicationSource(self.config(**overrides))
        self.sources.append(source)
        source.open()
        return source

    def slot_row(self) -> tuple[Lsn, int | None]:
        """(confirmed_flush_lsn, active_pid) of the slot."""
        rows = self.execute(
            "SELECT confirmed_flush_lsn::text, active_pid FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (self.slot,),
        )
        assert rows, f"slot {self.slot} missing"
        return Lsn.parse(rows[0][0]), rows[0][1]

    def confirmed_flush(self) -> Lsn:
        return self.slot_row()[0]

    def current_wal_lsn(self) -> Lsn:
        return Lsn.parse(self.execute("SELECT pg_current_wal_lsn()::text")[0][0])

    def terminate_walsender(self) -> int:
        rows = self.execute(
            "SELECT pg_terminate_backend(active_pid), active_pid FROM pg_replication_slots"
            " WHERE slot_name = %s AND active_pid IS NOT NULL",
            (self.slot,),
        )
        assert rows and rows[0][0], "no active walsender to terminate"
        return int(rows[0][1])

    def wait_slot_released(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.slot_row()[1] is not None:
            assert time.monotonic() < deadline, "slot still active"
            time.sleep(0.05)

    def close(self) -> None:
        for source in self.sources:
            source.close()
        self.execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots"
            " WHERE database = current_database() AND active_pid IS NOT NULL"
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                self.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    " WHERE database = current_database()"
                )
                break
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self.admin.close()
        with psycopg.connect(self.cluster.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{self.name}" WITH (FORCE)')


@pytest.fixture
def source_db(pg_cluster: PostgresCluster) -> Iterator[SourceDb]:
    db = SourceDb(pg_cluster)
    try:
        yield db
    finally:
        db.close()
