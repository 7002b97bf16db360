"""pgbridge logging in with OAuth 2.0 tokens from a Keycloak realm (client credentials grant):
to Kafka (OAUTHBEARER, validated by a SASL_SSL broker against the realm's keys) and to a schema
registry that accepts only bearer tokens (Apicurio Registry as an OpenID Connect resource
server; its storage in the stack's PostgreSQL). Keycloak, the broker and the registry are real,
from Maven Central; one realm serves the module (Keycloak takes 15-30 s of a core to start).

What a user relies on: with ``kafka.sasl.mechanism = OAUTHBEARER``, the token endpoint, a
client id and its secret from a file, ``pgbridge run`` publishes every change and the Spark
apply job (Spark's Kafka source, logging in with its own client) makes Delta equal to the
source. With ``schema.registry.bearer.auth.credentials.source = OAUTHBEARER`` and a client
secret from a file, ``pgbridge run`` fetches its token from the realm, registers its schemas and
publishes every row; a consumer and the apply job's schema lookup read them with their own
client's token. A wrong client secret, and a registry reached without a token, each stop it
promptly with a typed error naming the setting, the secret never shown.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.config import load_client_security
from bridge.config.basics import reveal
from bridge.devstack.kafka import SHORT_LIVED_JVM_OPTIONS, KafkaBroker
from bridge.devstack.keycloak import KeycloakServer
from bridge.devstack.registry import ApicurioRegistry
from bridge.devstack.stack import StackInfo
from bridge.devstack.tls import make_tls_files
from bridge.spark.decode import SchemaCache
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import (
    assert_refused,
    bridge_settings,
    mark,
    read_topic,
    scratch_database,
    streaming_bridge,
    wait_slot_confirmed,
)
from tests.integration.test_delta_e2e import apply_config, assert_delta_equals_source

# make test-long only (a deployment mode with services of its own: Keycloak, an OAuth broker and
# registry, 88 CPU-s of make test's ~1,700): make test keeps the OAuth settings reaching the
# Kafka, Spark and registry clients (tests/test_kafka_security.py, tests/test_registry_auth.py)
# and a login refused by a SASL_SSL broker (test_secure_kafka.py); a real token exchange is
# only here.
pytestmark = [pytest.mark.integration, pytest.mark.long]


@pytest.fixture(scope="module")
def oauth_broker(keycloak: KeycloakServer) -> Iterator[tuple[KeycloakServer, KafkaBroker]]:
    base = Path(tempfile.mkdtemp(prefix="pgbridge-kafka-oauth-"))
    broker = KafkaBroker(
        base / "broker",
        tls=make_tls_files(base / "tls"),
        sasl_users={"broker": uuid.uuid4().hex},
        oauth_jwks_url=keycloak.jwks_url,
        jvm_options=SHORT_LIVED_JVM_OPTIONS,
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


class OidcRegistry:
    def __init__(self, keycloak: KeycloakServer, registry: ApicurioRegistry) -> None:
        self.keycloak = keycloak
        self.registry = registry

    def secret(self, client: str) -> str:
        return self.keycloak.clients[client]

    def settings(self, client: str, directory: Path, secret: str | None = None) -> dict[str, str]:
        """pgbridge's keys for ``client``, its secret (or ``secret``) in a file there."""
        secret_file = directory / f"{client}-secret"
        secret_file.write_text((secret or self.secret(client)) + "\n")
        secret_file.chmod(0o600)
        return {
            "schema.registry.url": self.registry.url,
            "schema.registry.bearer.auth.credentials.source": "OAUTHBEARER",
            "schema.registry.bearer.auth.issuer.endpoint.url": self.keycloak.token_endpoint,
            "schema.registry.bearer.auth.client.id": client,
            "schema.registry.bearer.auth.client.secret.file": str(secret_file),
        }

    def client_config(self, client: str, secret: str) -> dict[str, Any]:
        return {
            "url": self.registry.url,
            "bearer.auth.credentials.source": "OAUTHBEARER",
            "bearer.auth.issuer.endpoint.url": self.keycloak.token_endpoint,
            "bearer.auth.client.id": client,
            "bearer.auth.client.secret": secret,
            "bearer.auth.scope": "",
            "bearer.auth.logical.cluster": "-",
        }


@pytest.fixture(scope="module")
def oidc_registry(local_stack: StackInfo, keycloak: KeycloakServer) -> Iterator[OidcRegistry]:
    base = Path(tempfile.mkdtemp(prefix="pgbridge-oidc-"))
    database = f"apicurio_oidc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(local_stack.postgres_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    registry = ApicurioRegistry(
        base / "registry",
        f"jdbc:postgresql://127.0.0.1:{local_stack.postgres_port}/{database}",
        oidc_issuer=keycloak.issuer,
    )
    try:
        registry.start()  # raises StackError naming its log: the tests error, never skip
        try:
            yield OidcRegistry(keycloak, registry)
        finally:
            registry.stop()
    finally:
        with psycopg.connect(local_stack.postgres_dsn(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database}")


def test_changes_reach_kafka_through_a_bearer_token_registry(
    local_stack: StackInfo, oidc_registry: OidcRegistry, tmp_path: Path
) -> None:
    prefix = f"oidc{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO t SELECT i, 'before' FROM generate_series(1, 100) i")
        values = {
            **bridge_settings(local_stack, dsn, prefix),
            **oidc_registry.settings("pgbridge", tmp_path),
            "state.dir": str(tmp_path / "state"),
        }
        with streaming_bridge(values, str(tmp_path / "bridge.log")) as process:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO t SELECT i, 'after' FROM generate_series(101, 150) i")
            wait_slot_confirmed(dsn, values["slot.name"], mark(dsn), process)
    assert oidc_registry.secret("pgbridge") not in process.log()
    # A consumer with its own client and token decodes every row.
    reader = oidc_registry.client_config("reader", oidc_registry.secret("reader"))
    records = read_topic(local_stack.bootstrap_servers, reader, f"{prefix}.public.t")
    rows = {value["after"]["id"]: value["after"]["v"] for _, value in records if value}
    assert rows == {i: "before" if i <= 100 else "after" for i in range(1, 151)}
    # The apply job's schema lookup, configured from the same kind of file.
    config_file = tmp_path / "apply.toml"
    settings = oidc_registry.settings("reader", tmp_path)
    config_file.write_text(
        "".join(f'"{k}" = "{v}"\n' for k, v in settings.items() if k != "schema.registry.url")
    )
    _, registry_options = load_client_security(config_file, {})
    options = {k: v if isinstance(v, str) else v.reveal() for k, v in registry_options}
    cache = SchemaCache.for_url(oidc_registry.registry.url, options)
    names = cache.field_names(_value_schema_id(local_stack, f"{prefix}.public.t"))
    assert names is not None and "after" in names


def _value_schema_id(stack: StackInfo, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": stack.bootstrap_servers, "group.id": uuid.uuid4().hex}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = consumer.poll(10)
        assert message is not None and message.error() is None and message.value()
        return int.from_bytes(message.value()[1:5], "big")
    finally:
        consumer.close()


@pytest.mark.parametrize("case", ["wrong client secret", "no token"])
def test_a_refused_registry_client_stops_promptly_with_the_cause(
    local_stack: StackInfo, oidc_registry: OidcRegistry, tmp_path: Path, case: str
) -> None:
    prefix = f"oidcx{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
            conn.execute("INSERT INTO t VALUES (1)")
        values = {
            **bridge_settings(local_stack, dsn, prefix),
            "state.dir": str(tmp_path / "state"),
            "errors.max.retries": "2",
            "errors.retry.delay.initial.ms": "200",
            "errors.retry.delay.max.ms": "500",
        }
        if case == "wrong client secret":
            values.update(oidc_registry.settings("pgbridge", tmp_path, secret="wrong"))
        else:
            values["schema.registry.url"] = oidc_registry.registry.url
        expected = {
            "wrong client secret": "no token from schema.registry.bearer.auth.issuer.endpoint.url",
            "no token": "HTTP 401 Unauthorized (check schema.registry.basic.auth.user.info or",
        }[case]
        assert_refused(values, expected, [oidc_registry.secret("pgbridge")])
