"""Dates and times: date, time, timetz, timestamp, timestamptz, interval.

Values become integers on the hot path (days, microseconds), which both Debezium's semantic
types and Avro's logical types are defined on, so no ``datetime`` has to be built for binary
values and none is limited to Python's years 1..9999.

- ``date``: ``io.debezium.time.Date`` + Avro ``date`` (days since 1970-01-01).
- ``time``: ``io.debezium.time.MicroTime`` + Avro ``time-micros``; ``24:00:00`` is 86400000000.
- ``timetz``: ``io.debezium.time.ZonedTime``, an ISO-8601 string normalised to UTC, as Debezium.
- ``timestamp``: ``io.debezium.time.MicroTimestamp`` + Avro ``local-timestamp-micros`` (a wall
  clock reading, no zone: Spark reads it as TIMESTAMP_NTZ).
- ``timestamptz``: see :attr:`TypeOptions.timestamptz_handling`; by default
  ``io.debezium.time.MicroTimestamp`` + Avro ``timestamp-micros``, the UTC instant.
- ``interval``: ``io.debezium.time.MicroDuration`` or ``io.debezium.time.Interval``.

``infinity`` / ``-infinity`` map to the type's largest / smallest value (int32 or int64
extremes), the same sentinels PostgreSQL itself stores, so they round-trip and sort correctly.
BC dates and years above 9999 are exact (proleptic Gregorian, year 0 = 1 BC like PostgreSQL).

Out of range: timestamps after 292277-12-31 (PostgreSQL allows 294276) and intervals beyond
about ±292,000 years do not fit a long of microseconds. They are clamped to int64 max - 1 /
min + 1 (the extremes stay the infinity sentinels), counted and warned about once
(:mod:`bridge.types.lossy`). The string modes (``timestamptz_handling="string"``,
``interval_handling="string"``) are exact for every value.

``time_precision="connect"`` (Debezium's ``time.precision.mode=connect``) gives Kafka Connect's
own ``Date`` / ``Time`` (int milliseconds, ``time-millis``) / ``Timestamp`` (long milliseconds,
``timestamp-millis``) for ``date``, ``time`` and ``timestamp``: sub-millisecond digits are
truncated towards the past, as Debezium does. ``timestamptz`` keeps its own handling (Debezium
too gives it ``ZonedTimestamp`` in every precision mode).

Text values are read with psycopg's C loaders; the values those refuse (infinities, BC, years
past 9999) go through a small parser of PostgreSQL's ISO output. The replication connection
must use ``DateStyle=ISO`` and ``IntervalStyle=postgres`` (the server defaults).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Final

from psycopg import DataError
from psycopg.pq import Format

from bridge.native import ops
from bridge.types.base import ColumnType, TypeRegistry, TypeRequest, connect, psycopg_loader, simple
from bridge.types.errors import ConversionError
from bridge.types.lossy import CLAMPED, record_lossy

INT32_MAX: Final = 2**31 - 1
INT32_MIN: Final = -(2**31)
INT64_MAX: Final = 2**63 - 1
INT64_MIN: Final = -(2**63)

US_PER_SECOND: Final = 1_000_000
US_PER_DAY: Final = 86_400 * US_PER_SECOND
#: Debezium's average month, 365.25 / 12 days, exactly 2,629,800 seconds.
US_PER_AVG_MONTH: Final = 2_629_800 * US_PER_SECOND

PG_EPOCH_DAYS: Final = 10_957  # 2000-01-01 - 1970-01-01
PG_EPOCH_US: Final = PG_EPOCH_DAYS * US_PER_DAY
_UNIX_ORDINAL: Final = date(1970, 1, 1).toordinal()
_EPOCH: Final = datetime(1970, 1, 1)
_EPOCH_UTC: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US: Final = timedelta(microseconds=1)

DATE_SCHEMA: Final = connect("int", "io.debezium.time.Date", logical="date")
TIME_SCHEMA: Final = connect("long", "io.debezium.time.MicroTime", logical="time-micros")
TIMETZ_SCHEMA: Final = connect("string", "io.debezium.time.ZonedTime")
TIMESTAMP_SCHEMA: Final = connect(
    "long", "io.debezium.time.MicroTimestamp", logical="local-timestamp-micros"
)
TIMESTAMPTZ_INSTANT_SCHEMA: Final = connect(
    "long", "io.debezium.time.MicroTimestamp", logical="timestamp-micros"
)
TIMESTAMPTZ_STRING_SCHEMA: Final = connect("string", "io.debezium.time.ZonedTimestamp")
MICRO_DURATION_SCHEMA: Final = connect("long", "io.debezium.time.MicroDuration")
INTERVAL_STRING_SCHEMA: Final = connect("string", "io.debezium.time.Interval")
# time.precision.mode=connect: Kafka Connect's logical types, as Confluent's AvroConverter
# writes them.
CONNECT_DATE_SCHEMA: Final = connect("int", "org.apache.kafka.connect.data.Date", logical="date")
CONNECT_TIME_SCHEMA: Final = connect(
    "int", "org.apache.kafka.connect.data.Time", logical="time-millis"
)
CONNECT_TIMESTAMP_SCHEMA: Final = connect(
    "long", "org.apache.kafka.connect.data.Timestamp", logical="timestamp-millis"
)


# --- calendar arithmetic (proleptic Gregorian, astronomical years) ---------------------------


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 for any proleptic Gregorian date (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """Inverse of :func:`days_from_civil`: (astronomical year, month, day)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


_DATE_RE: Final = re.compile(rb"(\d+)-(\d\d)-(\d\d)")
_TS_RE: Final = re.compile(
    rb"(\d+)-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
    rb"(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?( BC)?$"
)
_TIME_RE: Final = re.compile(
    rb"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?$"
)


def _frac(group: bytes | None) -> int:
    return int(group.ljust(6, b"0")) if group else 0


def _offset_seconds(sign: bytes | None, h: bytes | None, m: bytes | None, s: bytes | None) -> int:
    if sign is None or h is None:
        return 0
    seconds = int(h) * 3600 + (int(m) if m else 0) * 60 + (int(s) if s else 0)
    return -seconds if sign == b"-" else seconds


def _year(raw_year: bytes, bc: bool) -> int:
    year = int(raw_year)
    return 1 - year if bc else year


def clamp_long(value: int, type_name: str) -> int:
    """``value`` if it fits Avro's long, else int64 max - 1 / min + 1, recorded as lossy.

    Timestamps after year 292277 (PostgreSQL allows 294276) and intervals beyond ±292,000
    years do not fit in microseconds since 1970. The int64 extremes themselves are not used:
    they are the ±infinity sentinels, and a finite value must not turn into infinity."""
    if INT64_MIN < value < INT64_MAX:
        return value
    record_lossy(type_name, CLAMPED)
    return INT64_MAX - 1 if value > 0 else INT64_MIN + 1


# --- date ------------------------------------------------------------------------------------

_date_text: Final = psycopg_loader("date", Format.TEXT)


def date_from_text(raw: bytes) -> int:
    try:
        return int(_date_text(raw).toordinal() - _UNIX_ORDINAL)
    except DataError:
        pass
    if raw == b"infinity":
        return INT32_MAX
    if raw == b"-infinity":
        return INT32_MIN
    m = _DATE_RE.match(raw)
    if m is None:
        raise ConversionError("date", "unparseable date (DateStyle must be ISO)", raw=raw)
    return days_from_civil(_year(m[1], raw.endswith(b" BC")), int(m[2]), int(m[3]))


def date_from_binary(raw: bytes) -> int:
    days = int.from_bytes(raw, "big", signed=True)
    if days in (INT32_MAX, INT32_MIN):
        return days
    return days + PG_EPOCH_DAYS


# --- time, timetz ----------------------------------------------------------------------------


def time_from_text(raw: bytes) -> int:
    # psycopg's time loader rejects 24:00:00, a valid PostgreSQL time; the format is fixed.
    m = _TIME_RE.match(raw)
    if m is None:
        raise ConversionError("time", "unparseable time", raw=raw)
    return ((int(m[1]) * 60 + int(m[2])) * 60 + int(m[3])) * US_PER_SECOND + _frac(m[4])


def time_from_binary(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def format_time_utc(micros: int) -> str:
    """ISO-8601 time with ``Z``, trailing fraction zeros removed, like Java's ISO_OFFSET_TIME."""
    micros %= US_PER_DAY
    seconds, us = divmod(micros, US_PER_SECOND)
    minutes, s = divmod(seconds, 60)
    h, mi = divmod(minutes, 60)
    frac = f".{us:06d}".rstrip("0") if us else ""
    return f"{h:02d}:{mi:02d}:{s:02d}{frac}Z"


def timetz_from_text(raw: bytes) -> str:
    m = _TIME_RE.match(raw)
    if m is None:
        raise ConversionError("timetz", "unparseable time with time zone", raw=raw)
    local = ((int(m[1]) * 60 + int(m[2])) * 60 + int(m[3])) * US_PER_SECOND + _frac(m[4])
    offset = _offset_seconds(m[5], m[6], m[7], m[8])
    return format_time_utc(local - offset * US_PER_SECOND)


def timetz_from_binary(raw: bytes) -> str:
    local = int.from_bytes(raw[:8], "big", signed=True)
    # PostgreSQL stores the zone as seconds *west* of UTC.
    zone_west = int.from_bytes(raw[8:12], "big", signed=True)
    return format_time_utc(local + zone_west * US_PER_SECOND)


# --- timestamp, timestamptz ----------------------------------------------------------------

_ts_text: Final = psycopg_loader("timestamp", Format.TEXT)
_tstz_text: Final = psycopg_loader("timestamptz", Format.TEXT)


def _timestamp_exact(raw: bytes, type_name: str) -> int:
    """Microseconds since 1970 (UTC for a zoned value) of a finite ISO timestamp, any year,
    unbounded (a Python int)."""
    m = _TS_RE.match(raw)
    if m is None:
        raise ConversionError(type_name, "unparseable timestamp (DateStyle must be ISO)", raw=raw)
    days = days_from_civil(_year(m[1], m[12] is not None), int(m[2]), int(m[3]))
    seconds = (int(m[4]) * 60 + int(m[5])) * 60 + int(m[6])
    seconds -= _offset_seconds(m[8], m[9], m[10], m[11])
    return days * US_PER_DAY + seconds * US_PER_SECOND + _frac(m[7])


def _timestamp_fallback(raw: bytes, type_name: str) -> int:
    if raw == b"infinity":
        return INT64_MAX
    if raw == b"-infinity":
        return INT64_MIN
    return clamp_long(_timestamp_exact(raw, type_name), type_name)


def timestamp_from_text(raw: bytes) -> int:
    try:
        return int((_ts_text(raw) - _EPOCH) // _ONE_US)
    except DataError:
        return _timestamp_fallback(raw, "timestamp")


def timestamptz_from_text(raw: bytes) -> int:
    try:
        return int((_tstz_text(raw) - _EPOCH_UTC) // _ONE_US)
    except DataError:
        return _timestamp_fallback(raw, "timestamp with time zone")


def _binary_timestamp(type_name: str) -> Callable[[bytes], int]:
    def convert(raw: bytes) -> int:
        us = int.from_bytes(raw, "big", signed=True)
        if us in (INT64_MAX, INT64_MIN):
            return us
        # The C accelerator declines the same values (>=), so both paths clamp alike.
        if us >= INT64_MAX - PG_EPOCH_US:
            return clamp_long(us + PG_EPOCH_US, type_name)
        return us + PG_EPOCH_US

    return convert


timestamp_from_binary: Final = _binary_timestamp("timestamp")
timestamptz_from_binary: Final = _binary_timestamp("timestamp with time zone")


def format_timestamp_utc(micros: int, pad: int = 0) -> str:
    """Debezium's ZonedTimestamp text of a finite instant: ISO-8601 in UTC with ``Z``, any
    year, exact (no int64 sentinels here: callers spell infinities themselves). The fraction
    has no trailing zeros, or, with ``pad`` (1..6), always that many digits (Debezium's array
    items: Java's ``appendFraction(p, p)``, which cuts the digits beyond)."""
    days, us_of_day = divmod(micros, US_PER_DAY)
    year, month, day = civil_from_days(days)
    seconds, us = divmod(us_of_day, US_PER_SECOND)
    minutes, s = divmod(seconds, 60)
    h, mi = divmod(minutes, 60)
    digits = f".{us:06d}"
    frac = digits[: pad + 1] if 0 < pad <= 6 else (digits.rstrip("0") if us else "")
    # ISO-8601 expanded years (Java's formatter): a sign beyond 9999 and before year 0.
    y = f"{year:04d}" if 0 <= year <= 9999 else f"{year:+05d}"
    return f"{y}-{month:02d}-{day:02d}T{h:02d}:{mi:02d}:{s:02d}{frac}Z"


def zoned_from_text(raw: bytes, pad: int = 0) -> str:
    """ZonedTimestamp text of a timestamptz text value, exact for every value (no clamping)."""
    if raw == b"infinity" or raw == b"-infinity":
        return raw.decode()
    try:
        micros = int((_tstz_text(raw) - _EPOCH_UTC) // _ONE_US)
    except DataError:
        micros = _timestamp_exact(raw, "timestamp with time zone")
    return format_timestamp_utc(micros, pad)


def zoned_from_binary(raw: bytes, pad: int = 0) -> str:
    """ZonedTimestamp text of a timestamptz binary value, exact for every value."""
    us = int.from_bytes(raw, "big", signed=True)
    if us == INT64_MAX:
        return "infinity"
    if us == INT64_MIN:
        return "-infinity"
    return format_timestamp_utc(us + PG_EPOCH_US, pad)


def timestamptz_array_element(request: TypeRequest) -> ColumnType:
    """The items of a ``timestamptz[]``: as the scalar, except that Debezium writes an array's
    ZonedTimestamp items with the fraction padded to the column's precision (6 unless
    declared: ``2024-01-02T03:04:05.500000Z``; measured beside Debezium 3.3), where a scalar's
    has no trailing zeros. The width travels in :attr:`ColumnType.fraction_digits`."""
    scalar = _timestamptz(request)
    if scalar.avro is not TIMESTAMPTZ_STRING_SCHEMA:
        return scalar
    pad = request.typmod if 0 <= request.typmod <= 6 else 6
    if pad == 0:  # Java's formatter then writes no fraction: as the scalar
        return scalar
    return ColumnType(
        "timestamp with time zone",
        TIMESTAMPTZ_STRING_SCHEMA,
        lambda raw: zoned_from_text(raw, pad),
        lambda raw: zoned_from_binary(raw, pad),
        native=(ops.ZONED_PADDED, ops.ZONED_PADDED),
        fraction_digits=pad,
    )


def _timestamptz(request: TypeRequest) -> ColumnType:
    if request.options.timestamptz_handling == "string":
        return ColumnType(
            "timestamp with time zone",
            TIMESTAMPTZ_STRING_SCHEMA,
            zoned_from_text,
            zoned_from_binary,
            native=(ops.ZONED, ops.ZONED),
        )
    return ColumnType(
        "timestamp with time zone",
        TIMESTAMPTZ_INSTANT_SCHEMA,
        timestamptz_from_text,
        timestamptz_from_binary,
        native=(ops.TIMESTAMPTZ, ops.TIMESTAMPTZ),
    )


# --- time.precision.mode=connect: milliseconds -----------------------------------------------


def _millis(micros: int) -> int:
    # Floor, like java.time's toEpochMilli; the infinity sentinels stay sentinels.
    if micros in (INT64_MAX, INT64_MIN):
        return micros
    return micros // 1000


def _date(request: TypeRequest) -> ColumnType:
    if request.options.time_precision == "connect":
        # Days since 1970 either way; only the semantic name differs.
        return ColumnType("date", CONNECT_DATE_SCHEMA, date_from_text, date_from_binary)
    return ColumnType(
        "date", DATE_SCHEMA, date_from_text, date_from_binary, native=(ops.DATE, ops.DATE)
    )


def _time(request: TypeRequest) -> ColumnType:
    if request.options.time_precision == "connect":
        return ColumnType(
            "time",
            CONNECT_TIME_SCHEMA,
            lambda raw: time_from_text(raw) // 1000,
            lambda raw: time_from_binary(raw) // 1000,
        )
    return ColumnType(
        "time", TIME_SCHEMA, time_from_text, time_from_binary, native=(ops.TIME, ops.TIME)
    )


def _timestamp(request: TypeRequest) -> ColumnType:
    if request.options.time_precision == "connect":
        # Milliseconds never leave Avro's long (year 294276 is about 9.2e15 ms): exact
        # conversions without the clamping of the microsecond converters.
        return ColumnType(
            "timestamp",
            CONNECT_TIMESTAMP_SCHEMA,
            lambda raw: _millis(_timestamp_text_exact(raw)),
            lambda raw: _millis(_timestamp_binary_exact(raw)),
        )
    return ColumnType(
        "timestamp",
        TIMESTAMP_SCHEMA,
        timestamp_from_text,
        timestamp_from_binary,
        native=(ops.TIMESTAMP, ops.TIMESTAMP),
    )


def _timestamp_text_exact(raw: bytes) -> int:
    if raw == b"infinity":
        return INT64_MAX
    if raw == b"-infinity":
        return INT64_MIN
    try:
        return int((_ts_text(raw) - _EPOCH) // _ONE_US)
    except DataError:
        return _timestamp_exact(raw, "timestamp")


def _timestamp_binary_exact(raw: bytes) -> int:
    us = int.from_bytes(raw, "big", signed=True)
    return us if us in (INT64_MAX, INT64_MIN) else us + PG_EPOCH_US


# --- interval --------------------------------------------------------------------------------

_INTERVAL_RE: Final = re.compile(
    rb"([+-]?\d+) (year|years|mon|mons|day|days)\b|([+-])?(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
)


#: PostgreSQL 17's infinite intervals, as (months, days, microseconds) (every field at its
#: extreme, as interval_send sends them).
INTERVAL_INFINITY: Final = (INT32_MAX, INT32_MAX, INT64_MAX)
INTERVAL_MINUS_INFINITY: Final = (INT32_MIN, INT32_MIN, INT64_MIN)


def interval_parts_from_text(raw: bytes) -> tuple[int, int, int]:
    """(months, days, microseconds) from ``IntervalStyle=postgres`` output."""
    if raw == b"infinity":
        return INTERVAL_INFINITY
    if raw == b"-infinity":
        return INTERVAL_MINUS_INFINITY
    months = days = micros = 0
    end = 0
    for m in _INTERVAL_RE.finditer(raw):
        if raw[end : m.start()].strip():
            break
        end = m.end()
        if m[1] is not None:
            n, unit = int(m[1]), m[2]
            if unit.startswith(b"year"):
                months += 12 * n
            elif unit.startswith(b"mon"):
                months += n
            else:
                days += n
        else:
            t = ((int(m[4]) * 60 + int(m[5])) * 60 + int(m[6])) * US_PER_SECOND + _frac(m[7])
            micros += -t if m[3] == b"-" else t
    if end != len(raw) or not raw:
        raise ConversionError(
            "interval", "unparseable interval (IntervalStyle must be postgres)", raw=raw
        )
    return months, days, micros


def interval_parts_from_binary(raw: bytes) -> tuple[int, int, int]:
    micros = int.from_bytes(raw[0:8], "big", signed=True)
    days = int.from_bytes(raw[8:12], "big", signed=True)
    months = int.from_bytes(raw[12:16], "big", signed=True)
    return months, days, micros


def micro_duration(parts: tuple[int, int, int]) -> int:
    """MicroDuration microseconds, clamped to int64 max - 1 / min + 1 beyond a long;
    ``infinity`` / ``-infinity`` (PostgreSQL 17+) are int64 max / min, as for timestamps."""
    if parts == INTERVAL_INFINITY:
        return INT64_MAX
    if parts == INTERVAL_MINUS_INFINITY:
        return INT64_MIN
    months, days, micros = parts
    return clamp_long(months * US_PER_AVG_MONTH + days * US_PER_DAY + micros, "interval")


def _trunc_divmod(value: int, divisor: int) -> tuple[int, int]:
    q = abs(value) // divisor
    r = abs(value) - q * divisor
    return (-q, -r) if value < 0 else (q, r)


def iso_interval(parts: tuple[int, int, int]) -> str:
    """ISO-8601 duration like Debezium's ``io.debezium.time.Interval``: PnYnMnDTnHnMnS. Exact
    for every interval; ISO 8601 has no infinity, so PostgreSQL 17's infinite intervals are
    ``infinity`` / ``-infinity``, as ``ZonedTimestamp`` spells infinite timestamps."""
    if parts == INTERVAL_INFINITY:
        return "infinity"
    if parts == INTERVAL_MINUS_INFINITY:
        return "-infinity"
    months, days, micros = parts
    years, months = _trunc_divmod(months, 12)
    hours, rest = _trunc_divmod(micros, 3600 * US_PER_SECOND)
    minutes, rest = _trunc_divmod(rest, 60 * US_PER_SECOND)
    # Seconds keep their fraction, without trailing zeros ("6.5", "-0.25", "0").
    sec = format(Decimal(rest).scaleb(-6).normalize(), "f") if rest else "0"
    return f"P{years}Y{months}M{days}DT{hours}H{minutes}M{sec}S"


def _interval(request: TypeRequest) -> ColumnType:
    if request.options.interval_handling == "string":
        return ColumnType(
            "interval",
            INTERVAL_STRING_SCHEMA,
            lambda raw: iso_interval(interval_parts_from_text(raw)),
            lambda raw: iso_interval(interval_parts_from_binary(raw)),
        )
    return ColumnType(
        "interval",
        MICRO_DURATION_SCHEMA,
        lambda raw: micro_duration(interval_parts_from_text(raw)),
        lambda raw: micro_duration(interval_parts_from_binary(raw)),
        native=(ops.INTERVAL, ops.INTERVAL),
    )


def register_types(registry: TypeRegistry) -> None:
    registry.add_builtin("date", _date)
    registry.add_builtin("time", _time)
    registry.add_builtin(
        "timetz", simple("time with time zone", TIMETZ_SCHEMA, timetz_from_text, timetz_from_binary)
    )
    registry.add_builtin("timestamp", _timestamp)
    registry.add_builtin("timestamptz", _timestamptz)
    registry.add_builtin("interval", _interval)
