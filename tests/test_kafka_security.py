"""Kafka's TLS and SASL keys: checked together at load time with typed errors naming the key,
given to librdkafka (producer and admin client alike) and in the Java client's form for Spark,
secrets masked wherever the configuration is shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import BridgeConfig, load_config
from bridge.config.basics import Secret
from bridge.config.kafka_security import java_properties
from bridge.errors import ConfigError
from bridge.sink.kafka_client import admin_config, producer_config

REQUIRED = {
    "database.dbname": "shop",
    "topic.prefix": "shop",
    "kafka.bootstrap.servers": "broker:9093",
    "schema.registry.url": "https://registry:8081",
}


def _load(settings: dict[str, str]) -> BridgeConfig:
    return load_config(None, {}, {**REQUIRED, **settings})


def _error(settings: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        _load(settings)
    return raised.value


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, str]:
    files = {}
    for name in ("ca", "cert", "key"):
        path = tmp_path / f"{name}.pem"
        path.write_text(f"-----BEGIN {name.upper()}-----\n{name}\n-----END {name.upper()}-----\n")
        files[name] = str(path)
    return files


def test_sasl_ssl_scram_reaches_the_producer_and_the_admin_client(
    tmp_path: Path, pem: dict[str, str]
) -> None:
    password = tmp_path / "kafka-password"
    password.write_text("k4fka-s3cret\n")
    config = _load(
        {
            "kafka.security.protocol": "sasl_ssl",
            "kafka.sasl.mechanism": "scram-sha-512",
            "kafka.sasl.username": "pgbridge",
            "kafka.sasl.password.file": str(password),
            "kafka.ssl.ca.location": pem["ca"],
        }
    )
    for conf in (producer_config(config.kafka), admin_config(config.kafka)):
        assert conf["security.protocol"] == "SASL_SSL"
        assert conf["sasl.mechanisms"] == "SCRAM-SHA-512"
        assert conf["sasl.username"] == "pgbridge"
        assert conf["sasl.password"] == "k4fka-s3cret"
        assert conf["ssl.ca.location"] == pem["ca"]
        assert conf["ssl.endpoint.identification.algorithm"] == "https"
    assert "k4fka-s3cret" not in config.describe() and "k4fka-s3cret" not in repr(config)
    assert dict(config.kafka.security)["sasl.password"] == Secret("k4fka-s3cret")


def test_plaintext_by_default_with_no_tls_or_sasl_property() -> None:
    conf = producer_config(_load({}).kafka)
    assert conf["security.protocol"] == "PLAINTEXT"
    assert not any(k.startswith(("sasl.", "ssl.")) for k in conf)


@pytest.mark.parametrize(
    ("settings", "key", "words"),
    [
        ({"kafka.security.protocol": "SASL_SSL"}, "kafka.sasl.mechanism", "is required"),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
             "kafka.sasl.username": "u"},
            "kafka.sasl.password",
            "is required with kafka.sasl.mechanism = PLAIN",
        ),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER",
             "kafka.sasl.oauthbearer.client.id": "c", "kafka.sasl.oauthbearer.client.secret": "s"},
            "kafka.sasl.oauthbearer.token.endpoint.url",
            "is required",
        ),
        ({"kafka.sasl.username": "u"}, "kafka.sasl.username", "PLAINTEXT"),
        ({"kafka.ssl.ca.location": "/etc/ca.pem"}, "kafka.ssl.ca.location", "SSL or SASL_SSL"),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.ca.location": "/nonexistent/ca.pem"},
            "kafka.ssl.ca.location",
            "no such file",
        ),
        ({"kafka.security.protocol": "TLS"}, "kafka.security.protocol", "is not one of"),
        ({"kafka.sasl.mechanism": "GSSAPI"}, "kafka.sasl.mechanism", "is not one of"),
    ],
)  # fmt: skip
def test_inconsistent_settings_are_a_typed_error_naming_the_key(
    settings: dict[str, str], key: str, words: str
) -> None:
    error = _error(settings)
    assert error.key == key and words in str(error)


def test_a_client_certificate_needs_its_key(pem: dict[str, str]) -> None:
    error = _error(
        {"kafka.security.protocol": "SSL", "kafka.ssl.certificate.location": pem["cert"]}
    )
    assert error.key == "kafka.ssl.key.location"


def test_one_property_set_two_ways_is_refused() -> None:
    error = _error(
        {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "u",
            "kafka.sasl.password": "p",
            "kafka.producer.sasl.username": "other",
        }
    )
    assert error.key == "kafka.producer.sasl.username"
    # The older spelling alone still works (the protocol too).
    config = _load(
        {"kafka.producer.security.protocol": "SASL_SSL", "kafka.producer.sasl.mechanism": "PLAIN"}
    )
    assert producer_config(config.kafka)["security.protocol"] == "SASL_SSL"


def test_java_form_for_spark_has_jaas_truststore_and_inline_keystore(pem: dict[str, str]) -> None:
    values = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.username": 'pg"bridge',
        "kafka.sasl.password": Secret("pa\\ss"),
        "kafka.ssl.ca.location": pem["ca"],
        "kafka.ssl.certificate.location": pem["cert"],
        "kafka.ssl.key.location": pem["key"],
        "kafka.ssl.endpoint.identification.algorithm": "none",
    }
    java = dict(java_properties(values))
    jaas = java["sasl.jaas.config"]
    assert isinstance(jaas, Secret) and "pa\\\\ss" not in repr(jaas)
    assert jaas.reveal() == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="pg\\"bridge" password="pa\\\\ss";'
    )
    assert java["sasl.mechanism"] == "SCRAM-SHA-256"
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == ("PEM", pem["ca"])
    assert java["ssl.keystore.type"] == "PEM"
    assert java["ssl.keystore.certificate.chain"] == Path(pem["cert"]).read_text()
    key = java["ssl.keystore.key"]
    assert isinstance(key, Secret) and key.reveal() == Path(pem["key"]).read_text()
    assert java["ssl.endpoint.identification.algorithm"] == ""


def test_java_form_for_oauthbearer_uses_the_oidc_login_handler() -> None:
    java = dict(
        java_properties(
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "OAUTHBEARER",
                "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp/token",
                "kafka.sasl.oauthbearer.client.id": "pgbridge",
                "kafka.sasl.oauthbearer.client.secret": Secret("oidc-secret"),
                "kafka.sasl.oauthbearer.scope": "kafka",
            }
        )
    )
    jaas = java["sasl.jaas.config"]
    assert isinstance(jaas, Secret)
    assert 'clientSecret="oidc-secret"' in jaas.reveal() and 'scope="kafka"' in jaas.reveal()
    assert java["sasl.oauthbearer.token.endpoint.url"] == "https://idp/token"
    assert str(java["sasl.login.callback.handler.class"]).endswith(
        "OAuthBearerLoginCallbackHandler"
    )


def test_apply_job_takes_kafka_and_registry_security_from_a_pgbridge_file(
    tmp_path: Path, pem: dict[str, str]
) -> None:
    import argparse

    from bridge.spark.arguments import add_apply_arguments, config_from_args

    secret = tmp_path / "pw"
    secret.write_text("k4fka-s3cret")
    toml = tmp_path / "pgbridge.toml"
    toml.write_text(
        "\n".join(
            [
                '"topic.prefix" = "shop"',  # bridge keys are ignored here
                '"kafka.security.protocol" = "SASL_SSL"',
                '"kafka.sasl.mechanism" = "PLAIN"',
                '"kafka.sasl.username" = "apply"',
                f'"kafka.sasl.password.file" = "{secret}"',
                f'"kafka.ssl.ca.location" = "{pem["ca"]}"',
                '"schema.registry.basic.auth.user.info" = "reader:r3g-s3cret"',
            ]
        )
    )
    parser = argparse.ArgumentParser()
    add_apply_arguments(parser)
    args = parser.parse_args(
        ["--topic-prefix", "shop", "--bootstrap-servers", "b:9093", "--registry-url",
         "https://r/apis/ccompat/v7", "--delta-base", "/d", "--checkpoint", "/c",
         "--dead-letter", "/x", "--security-config", str(toml)]
    )  # fmt: skip
    config = config_from_args(args)
    options = config.kafka_source_options()
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "PLAIN"
    assert 'password="k4fka-s3cret"' in options["kafka.sasl.jaas.config"]
    assert options["kafka.ssl.truststore.location"] == pem["ca"]
    assert dict(config.registry_options)["basic.auth.user.info"] == "reader:r3g-s3cret"
    assert "s3cret" not in repr(config)


def test_apply_job_security_ignores_unrelated_environment_variables() -> None:
    from bridge.config import load_client_security

    kafka, registry = load_client_security(
        None,
        {"PGBRIDGE_NATIVE": "0", "PGBRIDGE_TOPIC_PREFIX": "shop", "PGBRIDGE_UNRELATED": "1",
         "PGBRIDGE_KAFKA_SECURITY_PROTOCOL": "ssl"},
    )  # fmt: skip
    assert dict(kafka)["security.protocol"] == "SSL" and registry == ()
