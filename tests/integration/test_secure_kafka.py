"""pgbridge against a Kafka broker that accepts only SASL_SSL (TLS with a certificate from a
private CA, SASL PLAIN and SCRAM logins): a second single-node KRaft broker of the stack's Kafka
version, started for this module, with the stack's PostgreSQL and registry.

What a user relies on: with ``kafka.security.protocol = SASL_SSL``, the CA and a password from
a file, ``pgbridge run`` publishes every change there and a consumer with its own login reads
them, with a PLAIN or a SCRAM login; a wrong password, an untrusted broker certificate and a
client without TLS each stop it promptly with a typed error naming the cause, the password never
shown.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer

from bridge.devstack.kafka import SHORT_LIVED_JVM_OPTIONS, KafkaBroker
from bridge.devstack.stack import StackInfo
from bridge.devstack.tls import make_tls_files
from tests.integration.bridge_harness import (
    assert_refused,
    bridge_settings,
    mark,
    scratch_database,
    streaming_bridge,
    wait_slot_confirmed,
)

pytestmark = pytest.mark.integration

BRIDGE_PASSWORD = "kafka-" + uuid.uuid4().hex[:10]


@pytest.fixture(scope="module")
def secure_broker() -> Iterator[KafkaBroker]:
    base = Path(tempfile.mkdtemp(prefix="pgbridge-secure-kafka-"))
    broker = KafkaBroker(
        base / "broker",
        tls=make_tls_files(base / "tls"),
        sasl_users={"broker": uuid.uuid4().hex, "bridge": BRIDGE_PASSWORD},
        jvm_options=SHORT_LIVED_JVM_OPTIONS,
    )
    broker.start()  # raises StackError naming its log: the tests error, never skip
    try:
        yield broker
    finally:
        broker.stop()


def secured(
    stack: StackInfo,
    broker: KafkaBroker,
    dsn: str,
    prefix: str,
    tmp_path: Path,
    password: str,
    mechanism: str = "PLAIN",
) -> dict[str, str]:
    assert broker.tls is not None
    secret = tmp_path / "kafka-password"
    secret.write_text(password + "\n")
    values = bridge_settings(stack, dsn, prefix)
    values.update(
        {
            "kafka.bootstrap.servers": broker.bootstrap_servers,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.username": "bridge",
            "kafka.sasl.password.file": str(secret),
            "kafka.ssl.ca.location": str(broker.tls.ca_cert),
            "state.dir": str(tmp_path / "state"),
            "errors.max.retries": "2",
            "errors.retry.delay.initial.ms": "200",
            "errors.retry.delay.max.ms": "500",
            "kafka.delivery.timeout.ms": "15000",
        }
    )
    return values


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_changes_reach_a_sasl_ssl_broker(
    local_stack: StackInfo, secure_broker: KafkaBroker, tmp_path: Path, mechanism: str
) -> None:
    prefix = f"seck{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO t SELECT i, 'before' FROM generate_series(1, 200) i")
        values = secured(
            local_stack, secure_broker, dsn, prefix, tmp_path, BRIDGE_PASSWORD, mechanism
        )
        with streaming_bridge(values, str(tmp_path / "bridge.log")) as process:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO t SELECT i, 'after' FROM generate_series(201, 300) i")
            wait_slot_confirmed(dsn, values["slot.name"], mark(dsn), process)
    assert BRIDGE_PASSWORD not in process.log()
    consumer = Consumer(
        {
            **secure_broker.client_config(),
            "group.id": f"check-{prefix}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([f"{prefix}.public.t"])
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < 300 and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1):
                if message.error() is None and message.value() is not None:
                    seen += 1
    finally:
        consumer.close()
    assert seen == 300  # 200 snapshot rows and 100 streamed inserts


@pytest.mark.parametrize(
    "case", ["wrong password", "wrong SCRAM password", "untrusted certificate", "plaintext client"]
)
def test_a_refused_kafka_login_stops_promptly_with_the_cause(
    local_stack: StackInfo, secure_broker: KafkaBroker, tmp_path: Path, case: str
) -> None:
    prefix = f"seckx{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
            conn.execute("INSERT INTO t VALUES (1)")
        password = "wrong" if case.startswith("wrong") else BRIDGE_PASSWORD
        mechanism = "SCRAM-SHA-256" if "SCRAM" in case else "PLAIN"
        values = secured(local_stack, secure_broker, dsn, prefix, tmp_path, password, mechanism)
        if case == "plaintext client":  # no TLS, no login: at a SASL_SSL listener
            values["kafka.security.protocol"] = "PLAINTEXT"
            for key in [k for k in values if k.startswith(("kafka.sasl.", "kafka.ssl."))]:
                del values[key]
        if case == "untrusted certificate":
            other = make_tls_files(tmp_path / "other", ca_name="someone else's CA")
            values["kafka.ssl.ca.location"] = str(other.ca_cert)
        expected = {
            "wrong password": "Authentication failed",
            "wrong SCRAM password": "invalid credentials with SASL mechanism SCRAM-SHA-256",
            "untrusted certificate": "certificate verify failed",
            "plaintext client": "SECURITY_PROTOCOL_MISMATCH",
        }[case]
        assert_refused(values, expected, [BRIDGE_PASSWORD])
