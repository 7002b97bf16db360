"""Register key and value schemas in a Confluent-compatible schema registry.

Subjects follow the topic-name strategy (``<topic>-key`` / ``<topic>-value``). Before the first
registration under a subject its compatibility level is set (per subject, so it holds whatever
the registry's global default is). Registrations are cached by (subject, schema): a Relation
message that the server resends after every reconnect, unchanged, costs no request; a changed
Relation registers a new version. A change the subject's level refuses is registered anyway by
default (logged and counted: PostgreSQL has made it already), or, with
``schema.incompatible.change.handling.mode=fail``, raises :class:`IncompatibleSchemaError`
naming the table, the columns that changed and the registry's own reason — before anything of
the transaction is produced.

Transient faults (connection refused, timeouts, 5xx, 429) are retried under the bridge's
:class:`~bridge.retry.RetryPolicy`, so a registry outage while a new table or a changed schema
appears makes the bridge wait, not exit; everything else the registry refuses is permanent.

Uses confluent-kafka's :class:`SchemaRegistryClient`; works against Confluent Schema Registry
and Apicurio's Confluent-compatible API alike.
"""

from __future__ import annotations

import collections
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import OAuthTokenError, SchemaRegistryError

from bridge.config.basics import COMPATIBILITY_LEVELS
from bridge.errors import ConfigError, PgBridgeError
from bridge.retry import RetryPolicy
from bridge.schema import ATTNUM, RelationSchemas
from bridge.schema_versions import carry_renames, column_changes, key_renames

logger = logging.getLogger(__name__)


#: confluent-kafka's registry client sends requests without a timeout unless told: one stuck
#: connection would block the bridge (or the apply job) forever. Timed-out requests are retried
#: by the client (``max.retries``) before an error reaches the caller.
REQUEST_TIMEOUT_S: Final = 30

#: Deserializer settings for consumers of pgbridge topics: the subjects follow the topic-name
#: strategy. (confluent-kafka 2.15's default first asks the registry's associations API per
#: topic, which Confluent-compatible registries such as Apicurio do not implement.)
DESERIALIZER_CONF: Final = {"subject.name.strategy.type": "TOPIC"}


def registry_client(conf: Mapping[str, Any] | str) -> SchemaRegistryClient:
    """A ``SchemaRegistryClient`` for a URL or a client configuration, with a request timeout."""
    settings: dict[str, Any] = {"url": conf} if isinstance(conf, str) else dict(conf)
    settings.setdefault("timeout", REQUEST_TIMEOUT_S)
    return SchemaRegistryClient(settings)


class RegistryError(PgBridgeError):
    """The registry refused or failed a request; ``subject`` and ``status`` say which and how.
    ``final``: no answer came, for a reason waiting does not change (an untrusted certificate,
    TLS spoken to a plain port)."""

    def __init__(
        self, subject: str, message: str, status: int | None = None, *, final: bool = False
    ) -> None:
        hint = _STATUS_HINTS.get(status or 0)
        where = f"schema registry, subject {subject}"
        super().__init__(
            f"{where}: HTTP {status} {hint}: {message}" if hint else f"{where}: {message}"
        )
        self.subject = subject
        self.status = status
        self.final = final


#: Statuses whose cause is a setting rather than the schema: said in the error's text.
_STATUS_HINTS = {
    401: "Unauthorized (check schema.registry.basic.auth.user.info or "
    "schema.registry.bearer.auth.*)",
    403: "Forbidden (the registry user lacks the right to write this subject)",
}


class IncompatibleSchemaError(RegistryError):
    """A table's new schema breaks the subject's compatibility level.

    ``table``: the table; ``columns``: (field, change) pairs that differ from the latest
    registered version (``added``, ``removed``, ``type changed``); ``reason``: the registry's
    message.
    """

    def __init__(
        self, subject: str, table: str, columns: list[tuple[str, str]], reason: str
    ) -> None:
        shown = ", ".join(f"{name} ({change})" for name, change in columns) or "unknown columns"
        RegistryError.__init__(
            self, subject, f"incompatible change to table {table}: {shown}: {reason}", 409
        )
        self.table = table
        self.columns = columns
        self.reason = reason


def token_error(subject: str, exc: OAuthTokenError) -> RegistryError:
    """A failed token request (schema.registry.bearer.auth.credentials.source = OAUTHBEARER) as
    a :class:`RegistryError`: a refused client is final (reported as the registry's 401 would
    be), an unreachable token endpoint may clear (no status: retried)."""
    text = str(exc)
    refused = any(word in text for word in ("invalid_client", "unauthorized_client", "401"))
    return RegistryError(
        subject,
        f"no token from schema.registry.bearer.auth.issuer.endpoint.url: {text}",
        401 if refused else None,
    )


def transport_error(subject: str, exc: Exception) -> RegistryError:
    """A request that got no answer (the client raises plain errors) as a
    :class:`RegistryError`: final where the TLS setup is the cause, with the key to check;
    otherwise (refused, reset, timed out) one that may clear."""
    text = f"{type(exc).__name__}: {exc}"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return RegistryError(
            subject,
            f"{text} (the registry's certificate is not trusted: check "
            "schema.registry.ssl.ca.location)",
            final=True,
        )
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text:
        return RegistryError(
            subject,
            f"{text} (TLS spoken to a port that answers without it: schema.registry.url with "
            "http://?)",
            final=True,
        )
    if "Server disconnected without sending a response" in text:
        # Also what a TLS-only port does with plain HTTP; a proxy in front of a registry that
        # restarts can do the same, so it is waited on, saying what to check.
        text += " (an https:// registry reached with http://? check schema.registry.url)"
    return RegistryError(subject, text)


def is_transient(exc: Exception) -> bool:
    """Whether a registry failure may clear by itself: no answer at all (connection refused,
    timeout, reset), a server error, or throttling. A 4xx answer is final, and so is a TLS
    setup that cannot work."""
    if isinstance(exc, IncompatibleSchemaError):
        return False
    if isinstance(exc, RegistryError):
        if exc.final:
            return False
        return exc.status is None or exc.status >= 500 or exc.status == 429
    return False


@dataclass(frozen=True, slots=True)
class RegisteredSchemas:
    """Schema ids to frame records with; ``key_id`` is None for a keyless table."""

    key_id: int | None
    value_id: int


def canonical(schema: Mapping[str, Any]) -> str:
    """A stable JSON text of a schema (the cache key and what is sent)."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


#: Schema changes registered past the subject's compatibility level (``evolve``), by subject:
#: exported as ``pgbridge_schema_changes_forced_total`` (bridge.ops.metrics).
FORCED_SCHEMA_CHANGES: collections.Counter[str] = collections.Counter()

#: What a refused schema change does (``schema.incompatible.change.handling.mode``).
INCOMPATIBLE_CHANGE_MODES: Final = ("evolve", "fail")


class SchemaRegistrar:
    """Registers schemas with per-subject compatibility and a cache by schema.

    ``compatibility`` is the level set on every subject this registrar writes to;
    ``subject_compatibility`` overrides it for given subjects. Not thread-safe: one per sink.

    ``incompatible_changes`` says what a schema the registry refuses under the subject's level
    does. PostgreSQL has already made the change, and the WAL after it can only be described by
    the new schema, so ``evolve`` (the default) registers it anyway: the subject's level is set
    to NONE for that one registration and restored, the refusal is logged with the columns
    that changed and counted. The refusal then concerns only that subject, and no other table
    waits. ``fail`` is Debezium's behaviour: :class:`IncompatibleSchemaError` stops the bridge
    with the slot where it was.
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        *,
        compatibility: str = "BACKWARD",
        subject_compatibility: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        incompatible_changes: str = "evolve",
    ) -> None:
        """``retry``: how transient faults are retried (default: no retry, fail at once);
        :attr:`on_wait` runs between retries (the pipeline sets it)."""
        levels = {"": compatibility, **(subject_compatibility or {})}
        for subject, level in levels.items():
            if level.upper() not in COMPATIBILITY_LEVELS:
                key = "compatibility" if not subject else f"subject_compatibility[{subject}]"
                raise ConfigError(key, f"must be one of {', '.join(COMPATIBILITY_LEVELS)}")
        if incompatible_changes not in INCOMPATIBLE_CHANGE_MODES:
            raise ConfigError(
                "schema.incompatible.change.handling.mode",
                f"must be one of {', '.join(INCOMPATIBLE_CHANGE_MODES)}",
            )
        self.incompatible_changes = incompatible_changes
        self.client = client
        self.compatibility = compatibility.upper()
        self.subject_compatibility = {
            s: level.upper() for s, level in (subject_compatibility or {}).items()
        }
        self._ids: dict[tuple[str, str], int] = {}
        self._configured: set[str] = set()
        # Value subjects' last version registered (or found) here, for telling renames; and
        # each built schema's version as registered (with what carry_renames added), so the
        # same table version is the same schema id whenever it comes back.
        self._latest: dict[str, Mapping[str, Any] | None] = {}
        self._annotated: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.retry = retry or RetryPolicy(max_retries=0)
        self.on_wait: Callable[[], None] | None = None

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> SchemaRegistrar:
        return cls(registry_client(url), **kwargs)

    def level_for(self, subject: str) -> str:
        return self.subject_compatibility.get(subject, self.compatibility)

    def register(self, subject: str, schema: Mapping[str, Any], *, table: str = "?") -> int:
        """Register (or find) ``schema`` under ``subject`` and return its id."""
        text = canonical(schema)
        cached = self._ids.get((subject, text))
        if cached is not None:
            return cached
        try:
            schema_id = self._register_retrying(subject, text, schema, table)
        except IncompatibleSchemaError as refused:
            if self.incompatible_changes == "fail":
                raise
            schema_id = self._register_past_refusal(subject, text, schema, table, refused)
        self._ids[(subject, text)] = schema_id
        logger.info("registered schema id %d under %s", schema_id, subject)
        return schema_id

    def _register_retrying(
        self, subject: str, text: str, schema: Mapping[str, Any], table: str
    ) -> int:
        return self.retry.run(
            "schema registry",
            f"registering {subject}",
            lambda: self._register_once(subject, text, schema, table),
            is_transient,
            on_wait=self.on_wait,
        )

    def _register_past_refusal(
        self,
        subject: str,
        text: str,
        schema: Mapping[str, Any],
        table: str,
        refused: IncompatibleSchemaError,
    ) -> int:
        """``evolve``: the refused version registered with the subject's level at NONE, then
        the level put back (also when the registration fails)."""
        level = self.level_for(subject)
        logger.warning(
            "%s; registering it anyway (schema.incompatible.change.handling.mode=evolve): "
            "consumers of %s read the new version from here on",
            refused,
            subject,
        )
        self._set_level(subject, "NONE")
        try:
            schema_id = self._register_retrying(subject, text, schema, table)
        finally:
            self._set_level(subject, level)
        FORCED_SCHEMA_CHANGES[subject] += 1
        return schema_id

    def _register_once(self, subject: str, text: str, schema: Mapping[str, Any], table: str) -> int:
        self._configure(subject)
        try:
            schema_id = self.client.register_schema(subject, Schema(text, "AVRO"))
        except SchemaRegistryError as exc:
            if exc.http_status_code == 409:
                raise IncompatibleSchemaError(
                    subject, table, self._changes(subject, schema), exc.error_message
                ) from exc
            raise RegistryError(subject, exc.error_message, exc.http_status_code) from exc
        except OAuthTokenError as exc:
            raise token_error(subject, exc) from exc
        except Exception as exc:  # connection refused, timeouts: the client raises plain errors
            raise transport_error(subject, exc) from exc
        return int(schema_id)

    def register_relation(self, schemas: RelationSchemas) -> RegisteredSchemas:
        """Register a table's key and value schemas (key first: a value is never produced with
        a key schema that failed)."""
        value = self._with_renames(schemas.value_subject, schemas.value_schema)
        key_id = None
        if schemas.key_schema is not None:
            key = key_renames(schemas.key_schema, value)
            key_id = self.register(schemas.key_subject, key, table=schemas.table)
        value_id = self.register(schemas.value_subject, value, table=schemas.table)
        self._latest[schemas.value_subject] = value
        return RegisteredSchemas(key_id, value_id)

    def _with_renames(self, subject: str, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        """``schema`` with the renames since the subject's previous version (see
        :func:`bridge.schema_versions.carry_renames`); as it was the first time for a schema seen
        before. Schemas without column numbers are left as they are."""
        built = (subject, canonical(schema))
        known = self._annotated.get(built)
        if known is not None:
            return known
        if '"' + ATTNUM + '"' not in built[1]:
            return schema
        if subject not in self._latest:
            self._latest[subject] = self._latest_registered(subject)
        annotated = carry_renames(self._latest[subject], dict(schema))
        self._annotated[built] = annotated
        return annotated

    def _latest_registered(self, subject: str) -> Mapping[str, Any] | None:
        """The subject's latest version in the registry (None: no such subject yet)."""

        def fetch() -> Mapping[str, Any] | None:
            try:
                latest = self.client.get_latest_version(subject)
            except SchemaRegistryError as exc:
                if exc.http_status_code == 404:
                    return None
                raise RegistryError(subject, exc.error_message, exc.http_status_code) from exc
            except OAuthTokenError as exc:
                raise token_error(subject, exc) from exc
            except Exception as exc:
                raise transport_error(subject, exc) from exc
            parsed = json.loads(latest.schema.schema_str or "null")
            return parsed if isinstance(parsed, dict) else None

        return self.retry.run(
            "schema registry",
            f"reading the latest version of {subject}",
            fetch,
            is_transient,
            on_wait=self.on_wait,
        )

    def _configure(self, subject: str) -> None:
        if subject in self._configured:
            return
        self._set_level(subject, self.level_for(subject))
        self._configured.add(subject)

    def _set_level(self, subject: str, level: str) -> None:
        try:
            self.client.set_compatibility(subject_name=subject, level=level)
        except SchemaRegistryError as exc:
            raise RegistryError(
                subject,
                f"cannot set compatibility {level}: {exc.error_message}",
                exc.http_status_code,
            ) from exc
        except OAuthTokenError as exc:
            raise token_error(subject, exc) from exc
        except Exception as exc:
            raise transport_error(subject, exc) from exc

    def _changes(self, subject: str, schema: Mapping[str, Any]) -> list[tuple[str, str]]:
        """What differs from the latest registered version; best effort, for the message."""
        try:
            latest = self.client.get_latest_version(subject)
            old = json.loads(latest.schema.schema_str or "{}")
        except Exception:  # the error being reported matters more than this detail
            logger.debug("could not fetch the latest version of %s", subject, exc_info=True)
            return []
        return column_changes(old, schema)
