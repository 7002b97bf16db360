"""pgbridge logging in to Kafka with OAUTHBEARER: tokens from a Keycloak realm (client
credentials grant), validated by a SASL_SSL broker against the realm's keys. Keycloak and the
broker are real, from Maven Central, started for this module.

What a user relies on: with ``kafka.sasl.mechanism = OAUTHBEARER``, the token endpoint, a
client id and its secret from a file, ``pgbridge run`` publishes every change and the Spark
apply job (Spark's Kafka source, logging in with its own client) makes Delta equal to the
source; a wrong client secret stops pgbridge promptly with a typed error, the secret never
shown.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from bridge.config import load_client_security
from bridge.config.settings import reveal
from bridge.devstack.kafka import KafkaBroker
from bridge.devstack.keycloak import KeycloakServer
from bridge.devstack.stack import StackInfo
from bridge.devstack.tls import make_tls_files
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import (
    assert_refused,
    bridge_settings,
    mark,
    scratch_database,
    streaming_bridge,
    wait_slot_confirmed,
)
from tests.integration.test_delta_e2e import apply_config, assert_delta_equals_source

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def oauth_broker(keycloak: KeycloakServer) -> Iterator[tuple[KeycloakServer, KafkaBroker]]:
    base = Path(tempfile.mkdtemp(prefix="pgbridge-kafka-oauth-"))
    broker = KafkaBroker(
        base / "broker",
        tls=make_tls_files(base / "tls"),
        sasl_users={"broker": uuid.uuid4().hex},
        oauth_jwks_url=keycloak.jwks_url,
    )
    broker.start()  # raises StackError naming its log: the tests error, never skip
    try:
        yield keycloak, broker
    finally:
        broker.stop()


def _settings(
    stack: StackInfo,
    keycloak: KeycloakServer,
    broker: KafkaBroker,
    dsn: str,
    prefix: str,
    tmp_path: Path,
    secret: str,
) -> dict[str, str]:
    assert broker.tls is not None
    secret_file = tmp_path / "oauth-client-secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    return {
        **bridge_settings(stack, dsn, prefix),
        "kafka.bootstrap.servers": broker.bootstrap_servers,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauthbearer.token.endpoint.url": keycloak.token_endpoint,
        "kafka.sasl.oauthbearer.client.id": "pgbridge",
        "kafka.sasl.oauthbearer.client.secret.file": str(secret_file),
        "kafka.ssl.ca.location": str(broker.tls.ca_cert),
        "state.dir": str(tmp_path / "state"),
        "errors.max.retries": "2",
        "errors.retry.delay.initial.ms": "200",
        "errors.retry.delay.max.ms": "500",
        "kafka.delivery.timeout.ms": "15000",
    }


def test_changes_reach_kafka_and_delta_with_oauthbearer_logins(
    local_stack: StackInfo,
    oauth_broker: tuple[KeycloakServer, KafkaBroker],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    keycloak, broker = oauth_broker
    prefix = f"oauth{uuid.uuid4().hex[:8]}"
    secret = keycloak.clients["pgbridge"]
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO t SELECT i, 'before' FROM generate_series(1, 100) i")
        values = _settings(local_stack, keycloak, broker, dsn, prefix, tmp_path, secret)
        with streaming_bridge(values, str(tmp_path / "bridge.log")) as process:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO t SELECT i, 'after' FROM generate_series(101, 150) i")
                conn.execute("UPDATE t SET v = 'changed' WHERE id <= 10")
            wait_slot_confirmed(dsn, values["slot.name"], mark(dsn), process)
        assert secret not in process.log()
        # The apply job logs in with its own client (the Java client's OAUTHBEARER login
        # handler), its settings from a pgbridge configuration file.
        config_file = tmp_path / "apply.toml"
        apply_settings = {
            **{k: v for k, v in values.items() if k.startswith(("kafka.sasl.", "kafka.ssl."))},
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.oauthbearer.client.id": "reader",
            "kafka.sasl.oauthbearer.client.secret": keycloak.clients["reader"],
        }
        apply_settings.pop("kafka.sasl.oauthbearer.client.secret.file")
        config_file.write_text("".join(f'"{k}" = "{v}"\n' for k, v in apply_settings.items()))
        kafka, _ = load_client_security(config_file, {})
        config = replace(
            apply_config(local_stack, prefix, tmp_path / "apply"),
            bootstrap_servers=broker.bootstrap_servers,
            kafka_options=tuple((k, reveal(v)) for k, v in kafka),
        )
        spark = request.getfixturevalue("spark")
        run_apply(config, spark=spark)
        assert_delta_equals_source(spark, config, dsn, {"public.t": ("id",)})


def test_a_refused_oauth_client_stops_promptly_with_the_cause(
    local_stack: StackInfo, oauth_broker: tuple[KeycloakServer, KafkaBroker], tmp_path: Path
) -> None:
    keycloak, broker = oauth_broker
    prefix = f"oauthx{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
            conn.execute("INSERT INTO t VALUES (1)")
        values = _settings(local_stack, keycloak, broker, dsn, prefix, tmp_path, "wrong-secret")
        assert_refused(
            values,
            "_AUTHENTICATION: Failed to acquire SASL OAUTHBEARER token",
            [keycloak.clients["pgbridge"], "wrong-secret"],
        )
