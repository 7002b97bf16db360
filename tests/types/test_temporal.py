"""date, time, timetz, timestamp, timestamptz, interval."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.types import ConversionError, TypeMapper, TypeOptions
from bridge.types.temporal import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
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


def test_interval_huge_is_refused_in_numeric_mode_but_kept_as_string() -> None:
    vector = find("interval", "'178000000 years'")
    with pytest.raises(ConversionError, match="out of range"):
        vector.column_type().from_binary(vector.binary)
    assert vector.both(TypeOptions(interval_handling="string"))[1] == "P178000000Y0M0DT0H0M0S"


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
