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


def first_line(error: BaseException) -> str:
    """The gist of an error (Spark's carry a JVM stack trace after the first lines).

    py4j's errors open with "An error occurred while calling o123.collectToPython." and name
    the Java exception on the next line: that line is the gist, prefixed by the call.
    """
    text = str(error).strip() or repr(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith(_PY4J_CALL):
        return f"{lines[0]} {lines[1].removeprefix(': ')}"[:500]
    return lines[0][:500] if lines else repr(error)


_PY4J_CALL = "An error occurred while calling "
