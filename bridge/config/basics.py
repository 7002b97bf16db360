"""What every part of the configuration shares: its constants and name rules, the
:class:`Secret` wrapper, and the environment name of a key."""

from __future__ import annotations

import hmac
import re
from typing import Final, TypeVar

from bridge.native.switches import SWITCHES

_T = TypeVar("_T")

ENV_PREFIX: Final = "PGBRIDGE_"
PRODUCER_PREFIX: Final = "kafka.producer."
TOPIC_CONFIG_PREFIX: Final = "topic.creation.default."
#: ``snapshot.select.statement.overrides.<schema>.<table>``: that table's snapshot query.
SELECT_OVERRIDE_PREFIX: Final = "snapshot.select.statement.overrides."
SECRET_FILE_SUFFIX: Final = ".file"

# Variables the devstack and test tooling export; not configuration keys (see bridge.devstack).
RESERVED_ENV: Final = frozenset(
    {
        "PGBRIDGE_PG_DSN",
        "PGBRIDGE_BOOTSTRAP_SERVERS",
        "PGBRIDGE_REGISTRY_URL",
        "PGBRIDGE_SPARK_JARS",
        "PGBRIDGE_STACK_DIR",
        "PGBRIDGE_KEEP_STACK",
        "PGBRIDGE_CACHE",
        "PGBRIDGE_JAVA_HOME",
        "PGBRIDGE_PG_VERSIONS",
        "PGBRIDGE_CONFIG",
        *SWITCHES,  # implementation switches (bridge.native.switches)
        "PGBRIDGE_STACK",  # the test fixtures' stack kind
        "PGBRIDGE_SPARK_MASTER",
        "PGBRIDGE_APPLY_PAUSE_AFTER_MERGE",  # a crash tests' failpoint
        "PGBRIDGE_DB_PASSWORD",  # docker-compose.yml's variable
    }
)

# Kafka topic names: legal characters and maximum length, as the broker enforces them.
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Replication slot names, as PostgreSQL requires.
_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")
#: Schema registry compatibility levels (Confluent's names; Apicurio's ccompat API accepts them).
COMPATIBILITY_LEVELS: Final = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)
_SECRET_WORDS = ("password", "secret", "sasl", "token", "user.info", "credentials")


class Secret:
    """A string that must not be shown: ``repr``/``str`` give ``***``; :meth:`reveal` the value.

    Equality compares in constant time so a config comparison does not leak length/prefixes.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself: pass it to the client that needs it, never to a logger."""
        return self._value

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(self._value)


def env_name(key: str) -> str:
    """The environment variable for a dotted key: ``topic.prefix`` -> ``PGBRIDGE_TOPIC_PREFIX``."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def reveal(value: object) -> str:
    """A setting's text for a client that needs it: a :class:`Secret` revealed, else as is."""
    return value.reveal() if isinstance(value, Secret) else str(value)
