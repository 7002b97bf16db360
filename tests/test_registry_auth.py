"""The schema registry's bearer-token keys: checked together at load time with typed errors
naming the key, given to confluent-kafka's SchemaRegistryClient under its own names (for
``pgbridge run`` and the apply job alike), the token and the client secret masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.config import BridgeConfig, load_client_security, load_config
from bridge.config.registry_auth import LOGICAL_CLUSTER_PLACEHOLDER
from bridge.errors import ConfigError

REQUIRED = {
    "database.dbname": "shop",
    "topic.prefix": "shop",
    "kafka.bootstrap.servers": "broker:9093",
    "schema.registry.url": "https://registry:8081",
}
OAUTH = {
    "schema.registry.bearer.auth.credentials.source": "oauthbearer",
    "schema.registry.bearer.auth.issuer.endpoint.url": "https://idp/realms/x/token",
    "schema.registry.bearer.auth.client.id": "pgbridge",
    "schema.registry.bearer.auth.client.secret": "cl1ent-s3cret",
}


def _load(settings: dict[str, str]) -> BridgeConfig:
    return load_config(None, {}, {**REQUIRED, **settings})


def _error(settings: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        _load(settings)
    return raised.value


def test_oauthbearer_settings_reach_the_registry_client() -> None:
    config = _load(OAUTH)
    assert config.registry.client_config() == {
        "url": "https://registry:8081",
        "bearer.auth.credentials.source": "OAUTHBEARER",
        "bearer.auth.issuer.endpoint.url": "https://idp/realms/x/token",
        "bearer.auth.client.id": "pgbridge",
        "bearer.auth.client.secret": "cl1ent-s3cret",
        "bearer.auth.scope": "",
        "bearer.auth.logical.cluster": LOGICAL_CLUSTER_PLACEHOLDER,
    }
    assert "cl1ent-s3cret" not in repr(config)


def test_a_static_token_reaches_the_registry_client_masked() -> None:
    config = _load(
        {
            "schema.registry.bearer.auth.credentials.source": "STATIC_TOKEN",
            "schema.registry.bearer.auth.token": "eyJ.t0ken.sig",
            "schema.registry.bearer.auth.logical.cluster": "lsrc-123",
        }
    )
    conf = config.registry.client_config()
    assert conf["bearer.auth.token"] == "eyJ.t0ken.sig"
    assert conf["bearer.auth.logical.cluster"] == "lsrc-123"
    assert "eyJ.t0ken.sig" not in repr(config)


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        (
            {**OAUTH, "schema.registry.bearer.auth.client.secret": ""},
            "schema.registry.bearer.auth.client.secret",
        ),
        (
            {"schema.registry.bearer.auth.credentials.source": "STATIC_TOKEN"},
            "schema.registry.bearer.auth.token",
        ),
        ({"schema.registry.bearer.auth.token": "t"}, "schema.registry.bearer.auth.token"),
        (
            {**OAUTH, "schema.registry.bearer.auth.token": "t"},
            "schema.registry.bearer.auth.token",
        ),
        (
            {**OAUTH, "schema.registry.basic.auth.user.info": "u:p"},
            "schema.registry.basic.auth.user.info",
        ),
        (
            {**OAUTH, "schema.registry.bearer.auth.credentials.source": "KERBEROS"},
            "schema.registry.bearer.auth.credentials.source",
        ),
    ],
)
def test_inconsistent_bearer_settings_are_refused_naming_the_key(
    settings: dict[str, str], key: str
) -> None:
    assert _error(settings).key == key


def test_the_apply_job_takes_the_same_bearer_settings_from_the_file(tmp_path: Path) -> None:
    secret = tmp_path / "client-secret"
    secret.write_text("fr0m-a-file\n")
    secret.chmod(0o600)
    path = tmp_path / "pgbridge.toml"
    path.write_text(
        '"schema.registry.bearer.auth.credentials.source" = "OAUTHBEARER"\n'
        '"schema.registry.bearer.auth.issuer.endpoint.url" = "https://idp/token"\n'
        '"schema.registry.bearer.auth.client.id" = "spark"\n'
        f'"schema.registry.bearer.auth.client.secret.file" = "{secret}"\n'
    )
    _, registry = load_client_security(path, {})
    options = dict(registry)
    assert options["bearer.auth.credentials.source"] == "OAUTHBEARER"
    assert options["bearer.auth.client.id"] == "spark"
    assert repr(options["bearer.auth.client.secret"]) == "***"
    assert options["bearer.auth.client.secret"].reveal() == "fr0m-a-file"  # type: ignore[union-attr]
