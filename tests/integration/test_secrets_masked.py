"""Secrets never leave pgbridge: a real `pgbridge run` with every kind of secret set (a password
inside the DSN from the environment, the registry's credentials from the environment, a Kafka
password from a ``.file``) streams changes, and nothing it prints or serves contains one of
them: its logs (JSON lines, INFO and DEBUG), ``--print-config``, ``status --json``,
``check --json`` and the Prometheus metrics.

The local stack accepts these credentials without checking them (trust authentication, a
registry without authentication, a PLAINTEXT listener), so the run works while every secret
is present in the configuration.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from bridge.devstack.process import free_port
from bridge.devstack.stack import StackInfo
from tests.integration.bridge_harness import (
    mark,
    scrape_metrics,
    scratch_database,
    slot_confirmed,
)

pytestmark = pytest.mark.integration

SECRETS = ("pg-S3cret-in-dsn", "reg-S3cret-user-info", "kafka-S3cret-from-file")


def _slot_active(dsn: str, slot: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return bool(row and row[0])


def _cli(args: list[str], env: dict[str, str], flags: list[str]) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args, *flags],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return result.stdout + "\n" + result.stderr


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_no_secret_in_logs_print_config_status_check_or_metrics(
    local_stack: StackInfo, tmp_path: Path, level: str
) -> None:
    prefix = f"sec{uuid.uuid4().hex[:8]}"
    kafka_password = tmp_path / "kafka-password"
    kafka_password.write_text(SECRETS[2] + "\n")
    kafka_password.chmod(0o600)
    port = free_port()
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, owner text)")
        env = {
            **os.environ,
            "PGBRIDGE_DATABASE_DSN": f"{dsn} password={SECRETS[0]}",
            "PGBRIDGE_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": f"reader:{SECRETS[1]}",
        }
        slot = prefix
        flags: list[str] = []
        for key, value in {
            "topic.prefix": prefix,
            "slot.name": slot,
            "publication.name": f"{prefix}_pub",
            "kafka.bootstrap.servers": local_stack.bootstrap_servers,
            "schema.registry.url": local_stack.registry_url,
            "kafka.producer.sasl.password.file": str(kafka_password),
            "metrics.port": str(port),
            "log.format": "json",
            "log.level": level,
            "status.update.interval.ms": "500",
        }.items():
            flags += ["--set", f"{key}={value}"]
        outputs: dict[str, str] = {}
        outputs["check --json"] = _cli(["check", "--json"], env, flags)
        outputs["run --print-config"] = _cli(["run", "--print-config"], env, flags)
        log_path = tmp_path / "run.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bridge.cli", "run", *flags],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            # Streaming, so that the rows below are changes: an active slot is not enough (it
            # is active while it is created, and on a busy server the slot's consistent point,
            # waiting for other transactions, can come after these rows: the initial snapshot
            # then copies them and no change event is counted; seen in CI).
            while not (_slot_active(dsn, slot) and "streaming slot" in log_path.read_text()):
                assert proc.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "the bridge never started streaming"
                time.sleep(0.3)
            with psycopg.connect(dsn, autocommit=True) as conn:
                for i in range(20):
                    conn.execute("INSERT INTO accounts VALUES (%s, %s)", (i, f"owner {i}"))
            target = mark(dsn)
            deadline = time.monotonic() + 120
            while slot_confirmed(dsn, slot) < target:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, "the bridge never confirmed the workload"
                time.sleep(0.3)
            outputs["metrics"] = scrape_metrics(port, "pgbridge_events_total{")
            outputs["status --json"] = _cli(["status", "--json"], env, flags)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        outputs["run log"] = log_path.read_text()

    # Not vacuous: each output is what it should be, and shows that secrets were set.
    assert "pgbridge_events_total{" in outputs["metrics"]  # events were published
    status = outputs["status --json"]
    assert json.loads(status[: status.rindex("}") + 1])["slot"]["active"] is True
    assert "database.dsn" in outputs["run --print-config"]
    assert "***" in outputs["run --print-config"]
    assert "kafka.producer.sasl.password" in outputs["run --print-config"]
    assert '"level"' in outputs["run log"] or '"levelname"' in outputs["run log"]
    for name, text in outputs.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} appears in {name}"
