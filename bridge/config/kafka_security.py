"""Kafka's TLS and SASL settings: first-class keys, checked together, as client properties.

The keys (``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``) carry librdkafka's
and the Java client's own names after the ``kafka.`` prefix, so a Debezium or Kafka Connect
user recognises them. :func:`librdkafka_properties` checks that they make sense together (a
SASL protocol has a mechanism and its credentials, files exist, a client certificate has its
key) and turns them into the properties the producer and the admin client share;
:func:`java_properties` gives the same settings in the Java client's form, for Spark's Kafka
source (``kafka.``-prefixed options) and Kafka Connect.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from bridge.config.basics import Secret, reveal
from bridge.errors import ConfigError

__all__ = ["KAFKA_SECURITY_KEYS", "java_properties", "librdkafka_properties"]

Properties = tuple[tuple[str, str | Secret], ...]

#: First-class key -> librdkafka property (the same name without ``kafka.``).
KAFKA_SECURITY_KEYS: dict[str, str] = {
    key: key.removeprefix("kafka.")
    for key in (
        "kafka.security.protocol",
        "kafka.sasl.mechanism",
        "kafka.sasl.username",
        "kafka.sasl.password",
        "kafka.sasl.oauthbearer.token.endpoint.url",
        "kafka.sasl.oauthbearer.client.id",
        "kafka.sasl.oauthbearer.client.secret",
        "kafka.sasl.oauthbearer.scope",
        "kafka.ssl.ca.location",
        "kafka.ssl.certificate.location",
        "kafka.ssl.key.location",
        "kafka.ssl.key.password",
        "kafka.ssl.endpoint.identification.algorithm",
    )
}

_FILES = ("kafka.ssl.ca.location", "kafka.ssl.certificate.location", "kafka.ssl.key.location")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def librdkafka_properties(values: Mapping[str, object]) -> Properties:
    """The checked settings as librdkafka properties (secrets stay :class:`Secret`)."""
    protocol = str(values.get("kafka.security.protocol") or "PLAINTEXT")
    sasl = protocol.startswith("SASL_")
    tls = protocol in ("SSL", "SASL_SSL")
    given = {k: values.get(k) for k in KAFKA_SECURITY_KEYS if values.get(k) is not None}
    for key in given:
        if key.startswith("kafka.sasl.") and not sasl:
            raise ConfigError(key, f"is set but kafka.security.protocol is {protocol}: use "
                              "SASL_SSL (or SASL_PLAINTEXT on a trusted network)")  # fmt: skip
        if key.startswith("kafka.ssl.") and not tls and key != _ALGORITHM:
            raise ConfigError(key, f"is set but kafka.security.protocol is {protocol}: use "
                              "SSL or SASL_SSL")  # fmt: skip
    if sasl:
        mechanism = given.get("kafka.sasl.mechanism")
        if mechanism is None:
            raise ConfigError(
                "kafka.sasl.mechanism",
                f"is required with {protocol}: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER",
            )
        if mechanism == "OAUTHBEARER":
            _require(given, "kafka.sasl.oauthbearer.token.endpoint.url", mechanism)
            _require(given, "kafka.sasl.oauthbearer.client.id", mechanism)
            _require(given, "kafka.sasl.oauthbearer.client.secret", mechanism)
        else:
            _require(given, "kafka.sasl.username", str(mechanism))
            _require(given, "kafka.sasl.password", str(mechanism))
    for key in _FILES:
        location = given.get(key)
        if location is not None and not Path(str(location)).is_file():
            raise ConfigError(key, f"no such file: {location}")
    if ("kafka.ssl.certificate.location" in given) != ("kafka.ssl.key.location" in given):
        raise ConfigError(
            "kafka.ssl.key.location",
            "a client certificate needs its key (kafka.ssl.certificate.location and "
            "kafka.ssl.key.location go together)",
        )
    properties: list[tuple[str, str | Secret]] = [("security.protocol", protocol)]
    for key, value in given.items():
        if key == "kafka.security.protocol" or (key == _ALGORITHM and not tls):
            continue
        prop = KAFKA_SECURITY_KEYS[key]
        prop = "sasl.mechanisms" if prop == "sasl.mechanism" else prop
        properties.append((prop, value if isinstance(value, Secret) else str(value)))
    if given.get("kafka.sasl.mechanism") == "OAUTHBEARER":
        properties.append(("sasl.oauthbearer.method", "oidc"))
    return tuple(properties)


def java_properties(values: Mapping[str, object]) -> Properties:
    """The same settings for the Java client (Spark's Kafka source prefixes them with
    ``kafka.``): a JAAS line for SASL, PEM trust and key stores for TLS."""
    librdkafka = dict(librdkafka_properties(values))
    protocol = str(librdkafka["security.protocol"])
    out: list[tuple[str, str | Secret]] = [("security.protocol", protocol)]
    mechanism = librdkafka.get("sasl.mechanisms")
    if mechanism in _LOGIN_MODULES:
        user = reveal(librdkafka["sasl.username"])
        password = reveal(librdkafka["sasl.password"])
        jaas = (
            f'{_LOGIN_MODULES[str(mechanism)]} required username="{_escape(user)}" '
            f'password="{_escape(password)}";'
        )
        out += [("sasl.mechanism", str(mechanism)), ("sasl.jaas.config", Secret(jaas))]
    elif mechanism == "OAUTHBEARER":
        secret = reveal(librdkafka["sasl.oauthbearer.client.secret"])
        client = reveal(librdkafka["sasl.oauthbearer.client.id"])
        scope = librdkafka.get("sasl.oauthbearer.scope")
        jaas = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'clientId="{_escape(client)}" clientSecret="{_escape(secret)}"'
            + (f' scope="{_escape(reveal(scope))}"' if scope else "")
            + ";"
        )
        out += [
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.jaas.config", Secret(jaas)),
            ("sasl.oauthbearer.token.endpoint.url", str(
                librdkafka["sasl.oauthbearer.token.endpoint.url"])),
            ("sasl.login.callback.handler.class", "org.apache.kafka.common.security.oauthbearer."
             "OAuthBearerLoginCallbackHandler"),
        ]  # fmt: skip
    if "ssl.ca.location" in librdkafka:
        out += [
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", str(librdkafka["ssl.ca.location"])),
        ]
    if "ssl.certificate.location" in librdkafka:
        # Java takes a PEM key store inline: the certificate chain and the (secret) key.
        chain = Path(str(librdkafka["ssl.certificate.location"])).read_text()
        key = Path(str(librdkafka["ssl.key.location"])).read_text()
        out += [
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.certificate.chain", chain),
            ("ssl.keystore.key", Secret(key)),
        ]
        if "ssl.key.password" in librdkafka:
            out.append(("ssl.key.password", librdkafka["ssl.key.password"]))
    algorithm = librdkafka.get("ssl.endpoint.identification.algorithm")
    if algorithm == "none":
        out.append(("ssl.endpoint.identification.algorithm", ""))
    return tuple(out)


_ALGORITHM = "kafka.ssl.endpoint.identification.algorithm"


def _require(given: Mapping[str, object], key: str, mechanism: str) -> None:
    if given.get(key) is None:
        raise ConfigError(key, f"is required with kafka.sasl.mechanism = {mechanism}")


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
