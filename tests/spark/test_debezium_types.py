"""The apply job on a real local Spark reads both schema forms of pgbridge's topics alike:
``schema.logical.types=connect`` (Debezium's semantic names only) lands in Delta with the same
native column types and values as the default ``avro`` form."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from bridge.spark.semantic import restore_logical_types
from bridge.types import TypeMapper, TypeOptions
from bridge.types.base import builtin_oid
from tests.spark.batches import PREFIX, Batches, _Schemas, col
from tests.spark.envelopes import TableVersion

pytestmark = pytest.mark.integration


class _RegistrySchemas(_Schemas):
    """Ids on first use, the cached text as SchemaCache makes it from a registry answer."""

    def id_of(self, schema: dict[str, Any]) -> int:
        text = json.dumps(schema)
        if text not in self.ids:
            self.ids[text] = len(self.ids) + 1
            self._schemas[self.ids[text]] = json.dumps(restore_logical_types(schema))
        return self.ids[text]


def _table(name: str, logical_types: str) -> TableVersion:
    """Debezium's form is ``connect`` with timestamptz as its ZonedTimestamp string."""
    mapper = TypeMapper(
        TypeOptions(
            logical_types=logical_types,  # type: ignore[arg-type]
            timestamptz_handling="string" if logical_types == "connect" else "instant",
        )
    )

    def opt(type_name: str) -> list[Any]:
        return ["null", mapper.column_type(builtin_oid(type_name)).avro]

    columns = [
        col("id", "int"),
        col("d", opt("date")),
        col("ts", opt("timestamp")),
        col("u", opt("uuid")),
        col("tz", opt("timestamptz")),
    ]
    return TableVersion(PREFIX, "public", name, columns, key=["id"])


def test_connect_form_lands_in_delta_like_avro_form(spark: Any, tmp_path: Path) -> None:
    batches = Batches(spark, tmp_path)
    batches.schemas = _RegistrySchemas()
    ident = str(uuid.UUID(int=7))
    micros = 1_709_251_199_999_999  # 2024-02-29 23:59:59.999999
    # timestamptz: the instant mode's microseconds, Debezium's ZonedTimestamp text
    instants = {
        "avro": (micros, 2**63 - 1, -(2**63), -62_135_596_800_000_000, 2**63 - 2),
        "connect": (
            "2024-02-29T23:59:59.999999Z",
            "infinity",
            "-infinity",
            "0001-01-01T00:00:00Z",
            "+294276-12-31T23:59:59.999999Z",  # PostgreSQL's last instant: clamped, as instant is
        ),
    }
    for name, form in (("as_avro", "avro"), ("as_connect", "connect")):
        table = _table(name, form)
        tz = instants[form]
        empty = {"d": None, "ts": None, "u": None}
        first = {"id": 1, "d": 19_782, "ts": micros, "u": ident, "tz": tz[0]}
        batches.add(table, "c", (10, 0), after=first)
        batches.add(table, "c", (10, 1), after={"id": 2, **empty, "tz": None})
        for i, value in enumerate(tz[1:], start=3):
            batches.add(table, "c", (10, i), after={"id": i, **empty, "tz": value})
    batches.apply(0)
    results = {}
    for name in ("as_avro", "as_connect"):
        df = spark.read.format("delta").load(batches.config.table_path("public", name))
        # microseconds: infinity's int64 extremes are beyond Python's datetime
        picked = df.selectExpr("id", "d", "ts", "u", "tz", "unix_micros(tz) AS tz_us")
        data = sorted((r.asDict() for r in picked.drop("tz").collect()), key=lambda r: int(r["id"]))
        results[name] = (dict(picked.dtypes), data)
    assert results["as_connect"] == results["as_avro"]
    types, data = results["as_connect"]
    assert types == {
        "id": "int",
        "d": "date",
        "ts": "timestamp_ntz",
        "u": "string",
        "tz": "timestamp",
        "tz_us": "bigint",
    }
    assert data[0]["d"] == dt.date(2024, 2, 29)
    assert data[0]["ts"] == dt.datetime(2024, 2, 29, 23, 59, 59, 999_999)
    assert [r["tz_us"] for r in data] == [micros, None, *instants["avro"][1:]]
    assert not Path(batches.config.dead_letter_location).exists()  # nothing dead-lettered
