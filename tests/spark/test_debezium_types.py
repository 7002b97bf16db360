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
from tests.spark.envelopes import TableVersion
from tests.spark.test_apply_batches import PREFIX, Batches, _Schemas, col

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
    mapper = TypeMapper(TypeOptions(logical_types=logical_types))  # type: ignore[arg-type]

    def opt(type_name: str) -> list[Any]:
        return ["null", mapper.column_type(builtin_oid(type_name)).avro]

    columns = [
        col("id", "int"),
        col("d", opt("date")),
        col("ts", opt("timestamp")),
        col("u", opt("uuid")),
    ]
    return TableVersion(PREFIX, "public", name, columns, key=["id"])


def test_connect_form_lands_in_delta_like_avro_form(spark: Any, tmp_path: Path) -> None:
    batches = Batches(spark, tmp_path)
    batches.schemas = _RegistrySchemas()
    ident = str(uuid.UUID(int=7))
    micros = 1_709_251_199_999_999  # 2024-02-29 23:59:59.999999
    row = {"id": 1, "d": 19_782, "ts": micros, "u": ident}
    for name, form in (("as_avro", "avro"), ("as_connect", "connect")):
        batches.add(_table(name, form), "c", (10, 0), after=row)
        batches.add(
            _table(name, form), "c", (10, 1), after={"id": 2, "d": None, "ts": None, "u": None}
        )
    batches.apply(0)
    results = {}
    for name in ("as_avro", "as_connect"):
        df = spark.read.format("delta").load(batches.config.table_path("public", name))
        picked = df.select("id", "d", "ts", "u")
        data = sorted((r.asDict() for r in picked.collect()), key=lambda r: int(r["id"]))
        results[name] = (dict(picked.dtypes), data)
    assert results["as_connect"] == results["as_avro"]
    types, data = results["as_connect"]
    assert types == {"id": "int", "d": "date", "ts": "timestamp_ntz", "u": "string"}
    assert data[0]["d"] == dt.date(2024, 2, 29)
    assert data[0]["ts"] == dt.datetime(2024, 2, 29, 23, 59, 59, 999_999)
    assert not Path(batches.config.dead_letter_location).exists()  # nothing dead-lettered
