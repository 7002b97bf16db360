"""Log sequence numbers and PostgreSQL timestamps as the replication protocol carries them."""

from __future__ import annotations

import datetime as _dt

# PostgreSQL's epoch for TimestampTz on the wire: microseconds since 2000-01-01 00:00:00 UTC.
PG_EPOCH = _dt.datetime(2000, 1, 1, tzinfo=_dt.UTC)
_PG_EPOCH_UNIX_MICROS = 946_684_800_000_000

_MAX_LSN = (1 << 64) - 1


class Lsn(int):
    """A WAL position: an unsigned 64-bit integer that prints as PostgreSQL does (``16/B374D848``).

    A subclass of ``int`` so it compares, hashes and sorts for free and costs nothing to build on
    the hot path; arithmetic on it returns plain ints.
    """

    __slots__ = ()

    def __new__(cls, value: int = 0) -> Lsn:
        if not 0 <= value <= _MAX_LSN:
            raise ValueError(f"LSN out of range: {value}")
        return super().__new__(cls, value)

    @classmethod
    def parse(cls, text: str) -> Lsn:
        """Parse PostgreSQL's ``XXX/XXX`` notation."""
        hi, sep, lo = text.strip().partition("/")
        if not sep or not hi or not lo:
            raise ValueError(f"not an LSN: {text!r}")
        try:
            return cls((int(hi, 16) << 32) | int(lo, 16))
        except ValueError:
            raise ValueError(f"not an LSN: {text!r}") from None

    def __str__(self) -> str:
        return f"{int(self) >> 32:X}/{int(self) & 0xFFFFFFFF:X}"

    def __repr__(self) -> str:
        return f"Lsn('{self}')"


INVALID_LSN = Lsn(0)


def pg_timestamp_to_datetime(micros: int) -> _dt.datetime:
    """A protocol TimestampTz (microseconds since 2000-01-01 UTC) as an aware UTC datetime."""
    return PG_EPOCH + _dt.timedelta(microseconds=micros)


def pg_timestamp_to_unix_micros(micros: int) -> int:
    """A protocol TimestampTz as microseconds since the Unix epoch (what Avro timestamps carry)."""
    return micros + _PG_EPOCH_UNIX_MICROS


def unix_micros_to_pg_timestamp(unix_micros: int) -> int:
    """Microseconds since the Unix epoch as a protocol TimestampTz."""
    return unix_micros - _PG_EPOCH_UNIX_MICROS
