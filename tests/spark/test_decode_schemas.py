"""SchemaCache: inlining referenced schemas and telling "unknown id" from "registry down"."""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
import pytest
from confluent_kafka.schema_registry import SchemaRegistryError

from bridge.retry import RetryPolicy
from bridge.spark.decode import SchemaCache
from bridge.spark.errors import RegistryUnavailableError


@dataclass
class _Ref:
    name: str
    subject: str
    version: int


@dataclass
class _Schema:
    schema_str: str
    references: list[_Ref]
    schema_type: str = "AVRO"


@dataclass
class _Registered:
    schema: _Schema


class _Client:
    """A stand-in for get_schema/get_version only (unit test of the cache's own logic)."""

    def __init__(self, by_id: dict[int, _Schema], by_subject: dict[str, _Schema]) -> None:
        self.by_id, self.by_subject, self.calls = by_id, by_subject, 0

    def get_schema(self, schema_id: int) -> _Schema:
        self.calls += 1
        if schema_id == 503:
            raise SchemaRegistryError(503, 50301, "unavailable")
        if schema_id not in self.by_id:
            raise SchemaRegistryError(404, 40403, "not found")
        return self.by_id[schema_id]

    def get_version(self, subject: str, version: int) -> _Registered:
        return _Registered(self.by_subject[subject])


SOURCE = {
    "type": "record",
    "name": "Source",
    "namespace": "io.x",
    "fields": [{"name": "a", "type": "long"}],
}
ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "fields": [
        {"name": "source", "type": "io.x.Source"},
        {"name": "again", "type": ["null", "io.x.Source"]},
    ],
}


def _cache() -> tuple[SchemaCache, _Client]:
    client = _Client(
        {1: _Schema(json.dumps(ENVELOPE), [_Ref("io.x.Source", "source", 1)])},
        {"source": _Schema(json.dumps(SOURCE), [])},
    )
    return SchemaCache(
        client, RetryPolicy(max_retries=2, initial_delay_ms=1, max_delay_ms=1)
    ), client


def test_schema_cache_inlines_reference_at_first_use_only() -> None:
    cache, _ = _cache()
    text = cache.schema_json(1)
    assert text is not None
    fields = json.loads(text)["fields"]
    assert fields[0]["type"] == SOURCE
    assert fields[1]["type"] == ["null", "io.x.Source"]


def test_schema_cache_fetches_each_id_once() -> None:
    cache, client = _cache()
    cache.schema_json(1)
    cache.schema_json(1)
    assert client.calls == 1


def test_schema_cache_unknown_id_is_none() -> None:
    cache, _ = _cache()
    assert cache.schema_json(7) is None
    assert cache.field_names(7) is None


def test_schema_cache_registry_error_is_retried_then_raises_unavailable() -> None:
    cache, client = _cache()
    with pytest.raises(RegistryUnavailableError) as info:
        cache.schema_json(503)
    assert info.value.schema_id == 503
    assert client.calls == 3  # the first try and errors.max.retries = 2


class _FlakyClient(_Client):
    """Refuses connections ``failures`` times (as httpx does with the registry down)."""

    def __init__(self, failures: int, status: int | None = None) -> None:
        super().__init__({1: _Schema(json.dumps(SOURCE), [])}, {})
        self.failures, self.status = failures, status

    def get_schema(self, schema_id: int) -> _Schema:
        if self.failures:
            self.failures -= 1
            self.calls += 1
            if self.status is not None:
                raise SchemaRegistryError(self.status, self.status * 100, "no")
            raise httpx.ConnectError("[Errno 111] Connection refused")
        return super().get_schema(schema_id)


def test_schema_cache_waits_out_a_registry_that_refuses_connections() -> None:
    client = _FlakyClient(failures=5)
    cache = SchemaCache(client, RetryPolicy(initial_delay_ms=1, max_delay_ms=1))
    assert json.loads(cache.schema_json(1) or "null") == SOURCE
    assert client.calls == 6


def test_schema_cache_a_final_answer_is_not_retried() -> None:
    client = _FlakyClient(failures=5, status=401)
    cache = SchemaCache(client, RetryPolicy(initial_delay_ms=1, max_delay_ms=1))
    with pytest.raises(RegistryUnavailableError) as info:
        cache.schema_json(1)
    assert (info.value.status, client.calls) == (401, 1)


def test_schema_cache_field_names_of_key_record() -> None:
    cache, _ = _cache()
    cache._schemas[9] = json.dumps(SOURCE)
    assert cache.field_names(9) == ("a",)


@pytest.mark.parametrize(
    ("status", "final", "transient"),
    [
        (None, False, True),  # no answer: wait
        (503, False, True),
        (429, False, True),
        (401, False, False),
        (None, True, False),  # no answer for a reason waiting does not change
    ],
)
def test_registry_unavailable_is_transient_unless_final_or_a_refusal(
    status: int | None, final: bool, transient: bool
) -> None:
    error = RegistryUnavailableError(7, "down", status, final=final)
    assert error.transient is transient
    assert str(error) == "schema id 7: down"
