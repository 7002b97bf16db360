"""Every hop secured at once, on ``pgbridge dev up --secure``'s stack (bridge.devstack.secure):
PostgreSQL (TLS only, SCRAM) → ``pgbridge run`` with the stack's pgbridge-secure.toml → Kafka
(SASL_SSL) and Apicurio (HTTPS only, basic auth, its storage in the secured PostgreSQL) → a
consumer with its own credentials, and the Spark apply job reading the same secured Kafka and
registry with the settings of the same file (what ``--security-config`` loads) → Delta. Then
wrong registry credentials: a typed error naming the setting, promptly, no secret shown.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bridge.config import load_client_security
from bridge.config.basics import reveal
from bridge.devstack.secure import SecureStack
from bridge.devstack.stack import StackInfo
from bridge.devstack.tls import make_tls_files
from bridge.sink.registry import DESERIALIZER_CONF
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import BridgeProcess, mark, wait_for, wait_slot_confirmed
from tests.integration.test_delta_e2e import apply_config, assert_delta_equals_source

# make test-long only (a second, secured stack of its own: 66 CPU-s of make test's ~1,700): make
# test keeps each secured hop on its own (test_secure_kafka.py: SASL_SSL and SCRAM logins;
# test_secure_postgres.py: TLS and SCRAM to PostgreSQL) and the registry's basic-auth settings
# reaching its client (tests/test_config.py); HTTPS to the registry is only here.
pytestmark = [pytest.mark.integration, pytest.mark.long]


@pytest.fixture(scope="module")
def secure_stack() -> Iterator[SecureStack]:
    """``pgbridge dev up --secure`` in a directory of its own."""
    base = Path(tempfile.mkdtemp(prefix="pgbridge-secure-stack-", dir="/tmp"))
    stack = SecureStack(base)
    try:
        stack.up()  # raises StackError naming the part and its log: the tests error, never skip
        yield stack
    finally:
        stack.destroy()


def configured(stack: SecureStack, work: Path, prefix: str, **extra: str) -> Path:
    """The secured stack's pgbridge-secure.toml, plus this test's names and bounds."""
    values = {
        "topic.prefix": prefix,
        "slot.name": prefix,
        "publication.name": f"{prefix}_pub",
        "table.include.list": f"public\\\\.{prefix}_t",
        "state.dir": str(work / "state"),
        "status.update.interval.ms": "500",
        "errors.max.retries": "2",
        "errors.retry.delay.initial.ms": "200",
        "errors.retry.delay.max.ms": "500",
        **extra,
    }
    work.mkdir(parents=True, exist_ok=True)
    path = work / "pgbridge.toml"
    base = [
        line
        for line in (stack.dir / "pgbridge-secure.toml").read_text().splitlines(keepends=True)
        if not any(line.startswith(f'"{k}" =') for k in values)  # this test's value instead
    ]
    path.write_text("".join(base) + "".join(f'"{k}" = "{v}"\n' for k, v in values.items()))
    return path


def start_run(config_path: Path, log: Path) -> tuple[subprocess.Popen[bytes], BridgeProcess]:
    """``pgbridge run -c config_path`` as a process, its output in ``log``."""
    args = [sys.executable, "-m", "bridge.cli", "run", "-c", str(config_path)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    process = BridgeProcess.__new__(BridgeProcess)
    process.proc, process.log_path = proc, str(log)
    return proc, process


def read_secured(stack: SecureStack, topic: str, count: int) -> dict[int, dict[str, Any]]:
    """The table as a consumer with its own credentials rebuilds it: id -> row."""
    client = SchemaRegistryClient(stack.registry.client_config())
    deserializer = AvroDeserializer(client, conf=DESERIALIZER_CONF)
    consumer = Consumer(
        {**stack.kafka.client_config(), "group.id": f"sec-{uuid.uuid4().hex[:6]}",
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    consumer.subscribe([topic])
    rows: dict[int, dict[str, Any]] = {}
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < count and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1):
                if message.error() is not None or message.value() is None:
                    continue
                seen += 1
                value = deserializer(
                    message.value(), SerializationContext(topic, MessageField.VALUE)
                )
                if value["op"] == "d":
                    rows.pop(value["before"]["id"], None)
                else:
                    rows[value["after"]["id"]] = value["after"]
    finally:
        consumer.close()
    assert seen == count, f"{topic}: {seen} of {count} records"
    return rows


def test_every_hop_secured_end_to_end_to_delta(
    local_stack: StackInfo,
    secure_stack: SecureStack,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    prefix = f"all{uuid.uuid4().hex[:8]}"
    table = f"{prefix}_t"
    dsn = secure_stack.postgres.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, n numeric(8,2))")
        conn.execute(f"INSERT INTO {table} SELECT i, 'old', i / 3.0 FROM generate_series(1, 300) i")
    config_path = configured(secure_stack, tmp_path / "conf", prefix)
    proc, process = start_run(config_path, tmp_path / "bridge.log")
    try:
        wait_for(lambda: "to topics" in process.log(), process, "streaming")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE {table} SET v = 'new' WHERE id <= 50")
            conn.execute(f"DELETE FROM {table} WHERE id > 280")
            walsender = conn.execute(
                "SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s ON s.pid = r.pid"
            ).fetchall()
        assert walsender and all(ssl for (ssl,) in walsender)
        wait_slot_confirmed(dsn, prefix, mark(dsn), process)
        assert process.terminate() == 0, process.log()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    text = process.log()
    for secret in secure_stack.passwords.values():
        assert secret not in text
    rows = read_secured(secure_stack, f"{prefix}.public.{table}", 300 + 50 + 20)
    with psycopg.connect(dsn) as conn:
        expected = {r[0]: r[1] for r in conn.execute(f"SELECT id, v FROM {table}").fetchall()}
    assert {k: r["v"] for k, r in rows.items()} == expected
    # The apply job: Kafka's and the registry's security from the same file.
    kafka, registry = load_client_security(config_path, {})
    config = replace(
        apply_config(local_stack, prefix, tmp_path / "apply"),
        bootstrap_servers=secure_stack.kafka.bootstrap_servers,
        registry_url=secure_stack.registry.url,
        kafka_options=tuple((k, reveal(v)) for k, v in kafka),
        registry_options=tuple((k, reveal(v)) for k, v in registry),
    )
    spark = request.getfixturevalue("spark")
    run_apply(config, spark=spark)
    assert_delta_equals_source(spark, config, dsn, {f"public.{table}": ("id",)})


@pytest.mark.parametrize(
    "case", ["wrong credentials", "untrusted certificate", "http to the https port"]
)
def test_a_refused_registry_connection_stops_promptly_with_the_cause(
    secure_stack: SecureStack, tmp_path: Path, case: str
) -> None:
    prefix = f"allx{uuid.uuid4().hex[:8]}"
    with psycopg.connect(secure_stack.postgres.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {prefix}_t (id int PRIMARY KEY)")
        conn.execute(f"INSERT INTO {prefix}_t VALUES (1)")
    path = configured(secure_stack, tmp_path / "conf", prefix)
    text = path.read_text()
    if case == "wrong credentials":
        wrong = tmp_path / "wrong-user-info"
        wrong.write_text("bridge:not-it\n")
        text = text.replace(str(secure_stack.dir / "secrets" / "registry-user-info"), str(wrong))
    elif case == "untrusted certificate":
        other = make_tls_files(tmp_path / "other", ca_name="someone else's CA")
        text = text.replace(
            f'"schema.registry.ssl.ca.location" = "{secure_stack.tls.ca_cert}"',
            f'"schema.registry.ssl.ca.location" = "{other.ca_cert}"',
        )
    else:
        # Retried as an outage would be (a proxy can answer so too): configured() bounds the
        # retries, and each says what to check.
        text = text.replace('"schema.registry.url" = "https://', '"schema.registry.url" = "http://')
    path.write_text(text)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "run", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    expected = {
        "wrong credentials": "HTTP 401 Unauthorized (check schema.registry.basic.auth.user.info",
        "untrusted certificate": "not trusted: check schema.registry.ssl.ca.location",
        "http to the https port": "reached with http://? check schema.registry.url",
    }[case]
    assert expected in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "not-it" not in output
    for secret in secure_stack.passwords.values():
        assert secret not in output
    assert time.monotonic() - started < 120


def test_least_privilege_role_snapshots_and_streams_over_the_secured_stack(
    secure_stack: SecureStack, tmp_path: Path
) -> None:
    """docs/configuration.md's least-privilege role, exactly: REPLICATION, CONNECT, SELECT on the
    table, the publication and signal table made by an administrator. Over TLS with SCRAM it passes
    ``pgbridge check``, snapshots, streams and runs an incremental snapshot through the signal
    table, and a consumer rebuilds the source from the topic."""
    prefix = f"lp{uuid.uuid4().hex[:8]}"
    table, signal, role = f"{prefix}_t", f"{prefix}_signal", f"{prefix}_role"
    password = uuid.uuid4().hex
    admin = secure_stack.postgres.dsn()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN REPLICATION PASSWORD '{password}'")
        conn.execute(f"GRANT CONNECT ON DATABASE postgres TO {role}")
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {table} SELECT i, 'old' FROM generate_series(1, 300) i")
        conn.execute(f"GRANT SELECT ON {table} TO {role}")
        conn.execute(
            f"CREATE TABLE {signal} (id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, "
            "data varchar(8192))"
        )
        conn.execute(f"GRANT SELECT, INSERT, DELETE ON {signal} TO {role}")
        conn.execute(
            f"CREATE PUBLICATION {prefix}_pub FOR TABLE {table}, {signal} "
            "WITH (publish_via_partition_root = true)"
        )
    secret = tmp_path / "role-password"
    secret.write_text(password + "\n")
    secret.chmod(0o600)
    config_path = configured(
        secure_stack,
        tmp_path / "conf",
        prefix,
        **{
            "database.user": role,
            "database.password.file": str(secret),
            "publication.autocreate.mode": "disabled",
            "signal.data.collection": f"public.{signal}",
            "table.include.list": f"public\\\\.{table}",
        },
    )
    checked = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "check", "-c", str(config_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    proc, process = start_run(config_path, tmp_path / "bridge.log")
    try:
        wait_for(lambda: "to topics" in process.log(), process, "streaming")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"UPDATE {table} SET v = 'new' WHERE id <= 50")
            conn.execute(f"DELETE FROM {table} WHERE id > 280")
        snapshot = subprocess.run(
            [sys.executable, "-m", "bridge.cli", "snapshot", "-c", str(config_path),
             f"public.{table}"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert snapshot.returncode == 0, snapshot.stdout + snapshot.stderr
        wait_for(lambda: "complete: 280 rows" in process.log(), process, "incremental snapshot")
        wait_slot_confirmed(admin, prefix, mark(admin), process)
        assert process.terminate() == 0, process.log()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert password not in process.log()
    # 300 snapshot rows, 50 updates, 20 deletes, 280 rows of the incremental snapshot.
    rows = read_secured(secure_stack, f"{prefix}.public.{table}", 300 + 50 + 20 + 280)
    with psycopg.connect(admin) as conn:
        expected = {r[0]: r[1] for r in conn.execute(f"SELECT id, v FROM {table}").fetchall()}
        assert conn.execute(f"SELECT count(*) FROM {signal}").fetchone() == (1,)  # the request
    assert {k: r["v"] for k, r in rows.items()} == expected
    # Without INSERT on the signal table, asking for a snapshot is a typed error naming the
    # grant, not a traceback.
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"REVOKE INSERT ON {signal} FROM {role}")
    refused = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "snapshot", "-c", str(config_path), f"public.{table}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0
    assert f"GRANT SELECT, INSERT, DELETE ON public.{signal}" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
