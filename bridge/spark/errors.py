"""Errors of the apply job.

Bad *records* never raise: they go to the dead-letter table with a reason. These errors are for
conditions that make a whole micro-batch impossible to apply correctly, so the batch fails and
Spark retries it from the checkpoint instead of committing a wrong result.
"""

from __future__ import annotations

from bridge.errors import PgBridgeError


class ApplyError(PgBridgeError):
    """Base of the apply job's errors."""


class RegistryUnavailableError(ApplyError):
    """The schema registry could not answer a schema id's lookup, so the batch fails.

    The driver waits out a transient fault first (no answer, 5xx, 429: ``status`` None or that
    code), under bridge.retry's policy; only a final answer or exhausted retries get here.
    ``final``: no answer for a reason waiting does not change (an untrusted certificate), or an
    answer that is not a schema. A definite "no such schema id" (404) is not this error; those
    records are dead-lettered.
    """

    def __init__(
        self, schema_id: int, message: str, status: int | None = None, *, final: bool = False
    ) -> None:
        super().__init__(f"schema id {schema_id}: {message}")
        self.schema_id = schema_id
        self.status = status
        self.final = final

    @property
    def transient(self) -> bool:
        if self.final:
            return False
        return self.status is None or self.status >= 500 or self.status == 429


class TableApplyError(ApplyError):
    """A change batch cannot be applied to its Delta table (``table`` is ``schema.table``)."""

    def __init__(self, table: str, message: str) -> None:
        super().__init__(f"{table}: {message}")
        self.table = table
