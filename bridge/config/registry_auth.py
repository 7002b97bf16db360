"""The schema registry's bearer-token authentication: first-class keys, checked together, as
``SchemaRegistryClient`` settings.

The keys are confluent-kafka's own registry-client names after ``schema.registry.``
(``bearer.auth.credentials.source`` and the rest), so a Confluent user recognises them:

- ``OAUTHBEARER``: the client fetches a token from an OpenID Connect token endpoint with the
  client credentials grant (``…issuer.endpoint.url``, ``…client.id``, ``…client.secret``,
  ``…scope``) and renews it before it expires;
- ``STATIC_TOKEN``: a token issued elsewhere (``…bearer.auth.token``), sent as it is.

confluent-kafka also sends ``bearer.auth.logical.cluster`` (and the optional
``…identity.pool.id``) as headers that only Confluent Cloud reads; the client requires the
first, so it defaults to a placeholder that other registries (Apicurio, Karapace) ignore.
Bearer and basic authentication exclude each other.
"""

from __future__ import annotations

from collections.abc import Mapping

from bridge.config.basics import Secret
from bridge.errors import ConfigError

__all__ = ["REGISTRY_BEARER_KEYS", "registry_bearer_properties"]

_PREFIX = "schema.registry."
#: First-class key -> SchemaRegistryClient setting (the same name without the prefix).
REGISTRY_BEARER_KEYS: dict[str, str] = {
    key: key.removeprefix(_PREFIX)
    for key in (
        "schema.registry.bearer.auth.credentials.source",
        "schema.registry.bearer.auth.token",
        "schema.registry.bearer.auth.issuer.endpoint.url",
        "schema.registry.bearer.auth.client.id",
        "schema.registry.bearer.auth.client.secret",
        "schema.registry.bearer.auth.scope",
        "schema.registry.bearer.auth.logical.cluster",
        "schema.registry.bearer.auth.identity.pool.id",
    )
}
_NEEDS = {
    "OAUTHBEARER": (
        "schema.registry.bearer.auth.issuer.endpoint.url",
        "schema.registry.bearer.auth.client.id",
        "schema.registry.bearer.auth.client.secret",
    ),
    "STATIC_TOKEN": ("schema.registry.bearer.auth.token",),
}
_OAUTH_ONLY = (
    "schema.registry.bearer.auth.issuer.endpoint.url",
    "schema.registry.bearer.auth.client.id",
    "schema.registry.bearer.auth.client.secret",
    "schema.registry.bearer.auth.scope",
)
#: What ``bearer.auth.logical.cluster`` is when not set (Confluent Cloud: the lsrc-… id).
LOGICAL_CLUSTER_PLACEHOLDER = "pgbridge"


def registry_bearer_properties(
    values: Mapping[str, object],
) -> tuple[tuple[str, str | Secret], ...]:
    """The checked bearer settings as SchemaRegistryClient settings (secrets stay
    :class:`Secret`); empty without ``schema.registry.bearer.auth.credentials.source``."""
    given = {k: values.get(k) for k in REGISTRY_BEARER_KEYS if values.get(k) not in (None, "")}
    source_key = "schema.registry.bearer.auth.credentials.source"
    source = given.pop(source_key, None)
    if source is None:
        if given:
            key = next(iter(given))
            raise ConfigError(key, f"is set but {source_key} is not (OAUTHBEARER or STATIC_TOKEN)")
        return ()
    source = str(source)
    for key in _NEEDS[source]:
        if key not in given:
            raise ConfigError(key, f"is required with {source_key} = {source}")
    if source == "STATIC_TOKEN":
        for key in _OAUTH_ONLY:
            if key in given:
                raise ConfigError(key, f"is for OAUTHBEARER, not {source_key} = STATIC_TOKEN")
    elif "schema.registry.bearer.auth.token" in given:
        raise ConfigError(
            "schema.registry.bearer.auth.token", f"is for STATIC_TOKEN, not {source_key} = {source}"
        )
    if values.get("schema.registry.basic.auth.user.info") is not None:
        raise ConfigError(
            "schema.registry.basic.auth.user.info",
            f"and {source_key} are both set: the registry takes one kind of authentication",
        )
    properties: list[tuple[str, str | Secret]] = [("bearer.auth.credentials.source", source)]
    if source == "OAUTHBEARER":
        given.setdefault("schema.registry.bearer.auth.scope", "")
    given.setdefault("schema.registry.bearer.auth.logical.cluster", LOGICAL_CLUSTER_PLACEHOLDER)
    for key, value in given.items():
        properties.append(
            (REGISTRY_BEARER_KEYS[key], value if isinstance(value, Secret) else str(value))
        )
    return tuple(properties)
