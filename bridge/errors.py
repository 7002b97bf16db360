"""The project's error hierarchy.

Every error pgbridge raises on purpose derives from :class:`PgBridgeError`, so callers can tell
"pgbridge refused this input or state, with a reason" from a bug. Subclasses carry the context a
user needs to act (where, what, which part) as attributes, not only in the message text.

Standard library only: the pure decoder imports this module.
"""

from __future__ import annotations


class PgBridgeError(Exception):
    """Base class of every error pgbridge raises deliberately."""


class ConfigError(PgBridgeError):
    """A setting is missing or invalid; ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class StackError(PgBridgeError):
    """A part of the local development stack failed to start or stop.

    ``part`` names the service (postgres, kafka, registry, spark-jars) and ``log_path`` where
    to look.
    """

    def __init__(self, part: str, message: str, log_path: str | None = None) -> None:
        where = f" (log: {log_path})" if log_path else ""
        super().__init__(f"{part}: {message}{where}")
        self.part = part
        self.log_path = log_path
