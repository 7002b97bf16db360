"""Warnings of pgbridge's dependencies that say nothing a user can act on, silenced where a
process of pgbridge's starts: the CLI, and Spark's Python workers (bridge.spark)."""

from __future__ import annotations

__all__ = ["quiet_dependency_warnings"]


def quiet_dependency_warnings() -> None:
    # confluent-kafka 2.15's registry client imports authlib's deprecated httpx integration,
    # which warns on every start; authlib forces its warning to "always" when imported, so the
    # filter goes in after that import.
    import warnings

    from authlib.deprecate import AuthlibDeprecationWarning

    warnings.filterwarnings("ignore", category=AuthlibDeprecationWarning)
