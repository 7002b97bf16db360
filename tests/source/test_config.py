"""Unit tests for the source configuration's validation."""

from __future__ import annotations

import pytest

from bridge.errors import ConfigError
from bridge.source.config import (
    PublicationConfig,
    PublicationMode,
    ReconnectPolicy,
    SourceConfig,
)


def config(**overrides: object) -> SourceConfig:
    base: dict[str, object] = {
        "dsn": "host=x",
        "slot_name": "pgbridge",
        "publication": PublicationConfig("p"),
    }
    base.update(overrides)
    return SourceConfig(**base)  # type: ignore[arg-type]


def test_source_config_defaults_are_valid() -> None:
    cfg = config()
    assert cfg.status_interval == 10.0
    assert cfg.binary is False
    assert cfg.publication.mode is PublicationMode.ALL_TABLES


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"slot_name": "Bad-Name"}, "source.slot_name"),
        ({"dsn": ""}, "source.dsn"),
        ({"status_interval": 0}, "source.status_interval"),
        ({"spill_threshold": -1}, "source.spill_threshold"),
        ({"server_options": (("bad key", "1"),)}, "source.server_options"),
    ],
)
def test_source_config_rejects_invalid_values(overrides: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(**overrides)
    assert info.value.key == key


def test_publication_config_filters_need_filtered_mode() -> None:
    with pytest.raises(ConfigError, match="filtered"):
        PublicationConfig("p", PublicationMode.ALL_TABLES, include_schemas=("public",))


def test_publication_config_rejects_table_without_schema() -> None:
    with pytest.raises(ConfigError) as info:
        PublicationConfig("p", PublicationMode.FILTERED, include_tables=("orders",))
    assert info.value.key == "publication.include_tables"


def test_reconnect_policy_backs_off_exponentially_to_the_cap() -> None:
    policy = ReconnectPolicy(initial_delay=0.5, max_delay=4.0)
    assert [policy.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_reconnect_policy_rejects_initial_above_max() -> None:
    with pytest.raises(ConfigError):
        ReconnectPolicy(initial_delay=5, max_delay=1)
