"""Faults of a dependency while ``pgbridge run`` streams, injected on the real stack.

The registry is reached through a TCP proxy (tests/integration/faults.py) that the test takes
down and brings back: the real registry behind it is untouched, so other tests sharing the
stack are not disturbed, and pgbridge sees exactly what an outage looks like (connections
refused, open ones cut).
"""

from __future__ import annotations

import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.retry import WAITING_FOR
from tests.integration.bridge_harness import (
    RunningBridge,
    bridge_config,
    mark,
    normalized,
    rebuild_tables,
    scratch_database,
    source_rows,
)
from tests.integration.faults import TcpProxy

pytestmark = pytest.mark.integration

#: The issue's figure: a registry outage of a minute, while a schema change needs it.
OUTAGE_S = 60


def test_faults_registry_outage_during_a_schema_change_waits_and_continues(
    local_stack: StackInfo,
) -> None:
    registry = urlsplit(local_stack.registry_url)
    assert registry.hostname is not None and registry.port is not None
    proxy = TcpProxy(registry.hostname, registry.port)
    via_proxy = urlunsplit(registry._replace(netloc=f"127.0.0.1:{proxy.port}"))
    prefix = f"fault{uuid.uuid4().hex[:8]}"
    try:
        with scratch_database(local_stack) as dsn:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE before_outage (id int PRIMARY KEY, v text)")
            config = bridge_config(
                local_stack,
                dsn,
                prefix,
                **{"schema.registry.url": via_proxy, "errors.retry.delay.max.ms": "2000"},
            )
            bridge = RunningBridge(config)
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("INSERT INTO before_outage VALUES (1, 'a')")
                    bridge.wait_confirmed(mark(dsn))
                    proxy.down()
                    # A new table and a changed one need the registry; rows of both and of a
                    # known table go on being written during the outage.
                    conn.execute("CREATE TABLE during_outage (id int PRIMARY KEY, n numeric(10,3))")
                    conn.execute("INSERT INTO during_outage SELECT i, i / 3.0 FROM "
                                 "generate_series(1, 100) i")  # fmt: skip
                    conn.execute("ALTER TABLE before_outage ADD COLUMN extra int")
                    conn.execute("INSERT INTO before_outage VALUES (2, 'b', 2)")
                    conn.execute("UPDATE before_outage SET v = 'changed' WHERE id = 1")
                    target = mark(dsn)
                    deadline = time.monotonic() + OUTAGE_S
                    waited = False
                    while time.monotonic() < deadline:
                        assert bridge.error is None, f"the bridge stopped: {bridge.error!r}"
                        waited = waited or "schema registry" in WAITING_FOR
                        time.sleep(0.5)
                    assert waited, "the bridge never said it was waiting for the registry"
                    assert bridge.pipeline.tracker.flush_lsn < target  # nothing confirmed past
                    proxy.up()
                    bridge.wait_confirmed(target, timeout=120)
            finally:
                bridge.stop()
            rebuilt = rebuild_tables(
                local_stack.bootstrap_servers, local_stack.registry_url, prefix
            )
            for table in ("public.before_outage", "public.during_outage"):
                assert normalized(rebuilt[table]) == source_rows(dsn, table, ("id",)), table
    finally:
        proxy.close()
