"""date, time, timetz, timestamp, timestamptz, interval."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.types import ColumnType, ConversionError, TypeMapper, TypeOptions
from bridge.types.lossy import LOSSY_VALUES
from bridge.types.temporal import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    PG_EPOCH_US,
    US_PER_AVG_MONTH,
    US_PER_DAY,
    civil_from_days,
    days_from_civil,
    timestamptz_from_text,
)
from tests.types.vectors import find, roundtrip, schema_of

H = 3600 * 1_000_000


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("'2024-02-29'", (date(2024, 2, 29) - date(1970, 1, 1)).days),
        ("'1970-01-01'", 0),
        ("'0001-01-01'", -719_162),
        ("'infinity'", INT32_MAX),
        ("'-infinity'", INT32_MIN),
        ("'4713-01-01 BC'", days_from_civil(-4712, 1, 1)),
        ("'5874897-12-31'", days_from_civil(5_874_897, 12, 31)),
    ],
)
def test_date_from_text_and_binary(literal: str, expected: int) -> None:
    assert find("date", literal).both() == (expected, expected)


def test_date_schema_is_debezium_date_with_avro_date() -> None:
    ct = find("date", "'2024-02-29'").column_type()
    assert ct.avro == {
        "type": "int",
        "connect.version": 1,
        "connect.name": "io.debezium.time.Date",
        "logicalType": "date",
    }
    assert roundtrip(ct.avro, ct.from_text(b"2024-02-29")) == date(2024, 2, 29)


@pytest.mark.parametrize(
    ("type_sql", "literal", "expected"),
    [
        ("time", "'00:00:00'", 0),
        ("time", "'23:59:59.999999'", US_PER_DAY - 1),
        ("time", "'24:00:00'", US_PER_DAY),
        ("time(3)", "'12:34:56.789'", 12 * H + 34 * 60_000_000 + 56_789_000),
    ],
)
def test_time_is_microseconds_of_day(type_sql: str, literal: str, expected: int) -> None:
    assert find(type_sql, literal).both() == (expected, expected)


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("'12:00:00+05:30'", "06:30:00Z"),
        ("'00:30:00.5-02'", "02:30:00.5Z"),
        ("'23:59:59+14:59'", "09:00:59Z"),
    ],
)
def test_timetz_is_zoned_time_in_utc(literal: str, expected: str) -> None:
    vector = find("timetz", literal)
    assert vector.both() == (expected, expected)
    assert schema_of(vector.column_type())["connect.name"] == "io.debezium.time.ZonedTime"


def test_timestamp_is_local_micro_timestamp() -> None:
    vector = find("timestamp", "'2024-01-02 03:04:05.678901'")
    ct = vector.column_type()
    assert schema_of(ct)["connect.name"] == "io.debezium.time.MicroTimestamp"
    assert schema_of(ct)["logicalType"] == "local-timestamp-micros"
    text, binary = vector.both()
    assert text == binary
    assert roundtrip(ct.avro, binary) == datetime(2024, 1, 2, 3, 4, 5, 678901)


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("'infinity'", INT64_MAX),
        ("'-infinity'", INT64_MIN),
        ("'1969-12-31 23:59:59.999999'", -1),
        ("'0044-03-15 12:00:00 BC'", days_from_civil(-43, 3, 15) * US_PER_DAY + 12 * H),
    ],
)
def test_timestamp_edges(literal: str, expected: int) -> None:
    assert find("timestamp", literal).both() == (expected, expected)


def test_timestamptz_instant_is_utc_timestamp_micros() -> None:
    vector = find("timestamptz", "'2024-01-02 03:04:05.678901+05:30'")
    ct = vector.column_type()
    assert schema_of(ct)["logicalType"] == "timestamp-micros"
    text, binary = vector.both()
    assert text == binary
    assert roundtrip(ct.avro, binary) == datetime(2024, 1, 1, 21, 34, 5, 678901, tzinfo=UTC)


def test_timestamptz_text_honours_any_offset() -> None:
    # The walsender prints in its TimeZone; seconds offsets exist for historical zones.
    assert timestamptz_from_text(b"2024-01-01 12:00:00+05:30:15") == timestamptz_from_text(
        b"2024-01-01 06:29:45+00"
    )
    assert timestamptz_from_text(b"0100-01-01 00:00:00-01 BC") == (
        days_from_civil(-99, 1, 1) * US_PER_DAY + H
    )


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("'2024-01-02 03:04:05.678901+05:30'", "2024-01-01T21:34:05.678901Z"),
        ("'infinity'", "infinity"),
        ("'-infinity'", "-infinity"),
        ("'1000-06-01 00:00:00+00 BC'", "-0999-06-01T00:00:00Z"),
        ("'12345-01-01 00:00:00+00'", "+12345-01-01T00:00:00Z"),
    ],
)
def test_timestamptz_string_mode_is_zoned_timestamp(literal: str, expected: str) -> None:
    options = TypeOptions(timestamptz_handling="string")
    vector = find("timestamptz", literal)
    assert (
        schema_of(vector.column_type(options))["connect.name"] == "io.debezium.time.ZonedTimestamp"
    )
    assert vector.both(options) == (expected, expected)


@pytest.mark.parametrize(
    ("literal", "micros", "iso"),
    [
        (
            "'1 year 2 mons 3 days 04:05:06.789'",
            14 * US_PER_AVG_MONTH + 3 * US_PER_DAY + 4 * H + 5 * 60_000_000 + 6_789_000,
            "P1Y2M3DT4H5M6.789S",
        ),
        (
            "'-1 year -2 mons +3 days -04:05:06'",
            -14 * US_PER_AVG_MONTH + 3 * US_PER_DAY - (4 * H + 5 * 60_000_000 + 6_000_000),
            "P-1Y-2M3DT-4H-5M-6S",
        ),
        ("'0'", 0, "P0Y0M0DT0H0M0S"),
        ("'-0.5 seconds'", -500_000, "P0Y0M0DT0H0M-0.5S"),
        ("'1 day -00:00:01'", US_PER_DAY - 1_000_000, "P0Y0M1DT0H0M-1S"),
    ],
)
def test_interval_micro_duration_and_iso_string(literal: str, micros: int, iso: str) -> None:
    vector = find("interval", literal)
    assert vector.both() == (micros, micros)
    assert vector.both(TypeOptions(interval_handling="string")) == (iso, iso)


# Forms captured from PostgreSQL 18 (DateStyle ISO, IntervalStyle postgres, TimeZone UTC):
# (text, binary hex) of each value.
PG_MAX_TIMESTAMP = (b"294276-12-31 23:59:59.999999", "7fffff5bb3b29fff")
PG_MAX_TIMESTAMPTZ = (b"294276-12-31 23:59:59.999999+00", "7fffff5bb3b29fff")
PG_MIN_TIMESTAMP = (b"4714-11-24 00:00:00 BC", "fd0f7cc1411fa000")
PG_MIN_TIMESTAMPTZ = (b"4714-11-24 00:00:00+00 BC", "fd0f7cc1411fa000")
PG_MAX_MICROS = 9_224_318_015_999_999_999  # 294276-12-31 23:59:59.999999 since 1970: > int64 max
PG_MIN_MICROS = -210_866_803_200_000_000  # 4714-11-24 00:00:00 BC
INTERVALS = {  # literal: (text, binary hex)
    "'-178000000 years'": (b"-178000000 years", "00000000000000000000000080af3a00"),
    "'-178000000 years 3 mons'": (b"-177999999 years -9 mons", "00000000000000000000000080af3a03"),
    "'178000000 years'": (b"178000000 years", "0000000000000000000000007f50c600"),
    "'2562047788:00:54.775807'": (b"2562047788:00:54.775807", "7fffffffffffffff0000000000000000"),
    "'infinity'": (b"infinity", "7fffffffffffffff7fffffff7fffffff"),
    "'-infinity'": (b"-infinity", "80000000000000008000000080000000"),
    "'2147483647 days 2147483647 mons 2562047788:00:54.775806'": (
        b"178956970 years 7 mons 2147483647 days 2562047788:00:54.775806",
        "7ffffffffffffffe7fffffff7fffffff",
    ),
}


def _both(ct: ColumnType, pair: tuple[bytes, str]) -> tuple[Any, Any]:
    return ct.from_text(pair[0]), ct.from_binary(bytes.fromhex(pair[1]))


@pytest.mark.parametrize(("oid", "pair"), [(1114, PG_MAX_TIMESTAMP), (1184, PG_MAX_TIMESTAMPTZ)])
def test_timestamp_beyond_avro_long_is_clamped_below_infinity(
    oid: int, pair: tuple[bytes, str], caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL's maximum timestamp does not fit microseconds since 1970 in a long: it is
    int64 max - 1 (max itself is infinity), counted per type, warned about once."""
    ct = TypeMapper().column_type(oid)
    name = ct.pg_name
    before = LOSSY_VALUES[(name, "clamped")]
    assert _both(ct, pair) == (INT64_MAX - 1, INT64_MAX - 1)
    assert _both(ct, pair) == (INT64_MAX - 1, INT64_MAX - 1)
    assert LOSSY_VALUES[(name, "clamped")] == before + 4
    warnings = [r for r in caplog.records if r.name == "bridge.types.lossy" and name in r.message]
    assert len(warnings) <= 1  # once per process and type: maybe already logged by another test


def test_timestamp_just_below_the_sentinel_is_clamped_not_infinity() -> None:
    # The one finite value whose microseconds since 1970 equal int64 max exactly.
    raw = (INT64_MAX - PG_EPOCH_US).to_bytes(8, "big", signed=True)
    assert TypeMapper().column_type(1114).from_binary(raw) == INT64_MAX - 1
    raw = (INT64_MAX - PG_EPOCH_US - 1).to_bytes(8, "big", signed=True)
    assert TypeMapper().column_type(1114).from_binary(raw) == INT64_MAX - 1


@pytest.mark.parametrize(("oid", "pair"), [(1114, PG_MIN_TIMESTAMP), (1184, PG_MIN_TIMESTAMPTZ)])
def test_timestamp_minimum_is_exact(oid: int, pair: tuple[bytes, str]) -> None:
    assert _both(TypeMapper().column_type(oid), pair) == (PG_MIN_MICROS, PG_MIN_MICROS)


@pytest.mark.parametrize(
    ("pair", "expected"),
    [
        (PG_MAX_TIMESTAMPTZ, "+294276-12-31T23:59:59.999999Z"),
        (PG_MIN_TIMESTAMPTZ, "-4713-11-24T00:00:00Z"),
        ((b"infinity", "7fffffffffffffff"), "infinity"),
        ((b"-infinity", "8000000000000000"), "-infinity"),
        # The finite value at int64 max microseconds since 1970 is not infinity.
        (
            (b"294247-01-10 04:00:54.775807+00", f"{INT64_MAX - PG_EPOCH_US:016x}"),
            "+294247-01-10T04:00:54.775807Z",
        ),
    ],
)
def test_timestamptz_string_mode_is_lossless_at_the_extremes(
    pair: tuple[bytes, str], expected: str
) -> None:
    ct = TypeMapper(TypeOptions(timestamptz_handling="string")).column_type(1184)
    before = sum(LOSSY_VALUES.values())
    assert _both(ct, pair) == (expected, expected)
    assert sum(LOSSY_VALUES.values()) == before


@pytest.mark.parametrize(
    ("literal", "micros", "iso"),
    [
        ("'-178000000 years'", INT64_MIN + 1, "P-178000000Y0M0DT0H0M0S"),
        ("'-178000000 years 3 mons'", INT64_MIN + 1, "P-177999999Y-9M0DT0H0M0S"),
        ("'178000000 years'", INT64_MAX - 1, "P178000000Y0M0DT0H0M0S"),
        # Finite, but exactly the infinity sentinel: one microsecond less.
        ("'2562047788:00:54.775807'", INT64_MAX - 1, "P0Y0M0DT2562047788H0M54.775807S"),
        ("'infinity'", INT64_MAX, "infinity"),
        ("'-infinity'", INT64_MIN, "-infinity"),
        (
            "'2147483647 days 2147483647 mons 2562047788:00:54.775806'",
            INT64_MAX - 1,
            "P178956970Y7M2147483647DT2562047788H0M54.775806S",
        ),
    ],
)
def test_interval_extremes_clamp_in_numeric_mode_and_stay_exact_as_string(
    literal: str, micros: int, iso: str
) -> None:
    pair = INTERVALS[literal]
    assert _both(TypeMapper().column_type(1186), pair) == (micros, micros)
    as_string = TypeMapper(TypeOptions(interval_handling="string")).column_type(1186)
    assert _both(as_string, pair) == (iso, iso)


def test_interval_clamp_is_counted() -> None:
    before = LOSSY_VALUES[("interval", "clamped")]
    _both(TypeMapper().column_type(1186), INTERVALS["'178000000 years'"])
    assert LOSSY_VALUES[("interval", "clamped")] == before + 2


def test_time_precision_connect_gives_connect_millisecond_types() -> None:
    mapper = TypeMapper(TypeOptions(time_precision="connect"))
    date_ct, time_ct, ts_ct = (mapper.column_type(oid) for oid in (1082, 1083, 1114))
    assert schema_of(date_ct) == {
        "type": "int",
        "connect.version": 1,
        "connect.name": "org.apache.kafka.connect.data.Date",
        "logicalType": "date",
    }
    assert schema_of(time_ct)["connect.name"] == "org.apache.kafka.connect.data.Time"
    assert schema_of(time_ct)["logicalType"] == "time-millis"
    assert schema_of(time_ct)["type"] == "int"
    assert schema_of(ts_ct)["connect.name"] == "org.apache.kafka.connect.data.Timestamp"
    assert schema_of(ts_ct)["logicalType"] == "timestamp-millis"
    assert date_ct.native == time_ct.native == ts_ct.native == (0, 0)
    assert find("date", "'2024-02-29'").both(mapper.options) == (19782, 19782)
    assert find("time", "'23:59:59.999999'").both(mapper.options) == (86_399_999, 86_399_999)
    assert find("time", "'24:00:00'").both(mapper.options) == (86_400_000, 86_400_000)
    ms = 1_704_164_645_678  # 2024-01-02 03:04:05.678 (the .000901 is dropped)
    assert find("timestamp", "'2024-01-02 03:04:05.678901'").both(mapper.options) == (ms, ms)
    # Before 1970 milliseconds are floored, as java.time does: -1 µs is -1 ms.
    assert find("timestamp", "'1969-12-31 23:59:59.999999'").both(mapper.options) == (-1, -1)
    assert roundtrip(ts_ct.avro, ms) == datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def test_time_precision_connect_timestamps_are_exact_over_postgresql_range() -> None:
    ct = TypeMapper(TypeOptions(time_precision="connect")).column_type(1114)
    top, bottom = PG_MAX_MICROS // 1000, PG_MIN_MICROS // 1000
    assert _both(ct, PG_MAX_TIMESTAMP) == (top, top)
    assert _both(ct, PG_MIN_TIMESTAMP) == (bottom, bottom)
    infinity = (b"infinity", "7fffffffffffffff")
    assert _both(ct, infinity) == (INT64_MAX, INT64_MAX)


def test_temporal_text_garbage_is_a_conversion_error() -> None:
    mapper = TypeMapper()
    for oid, raw in ((1082, b"yesterday"), (1114, b"soon"), (1083, b"noon"), (1186, b"a while")):
        with pytest.raises(ConversionError):
            mapper.column_type(oid).from_text(raw)


@given(st.integers(min_value=-2_000_000_000, max_value=2_000_000_000))
def test_civil_days_roundtrip(days: int) -> None:
    assert days_from_civil(*civil_from_days(days)) == days


@given(st.dates())
def test_days_from_civil_matches_python(d: date) -> None:
    assert days_from_civil(d.year, d.month, d.day) == (d - date(1970, 1, 1)).days
