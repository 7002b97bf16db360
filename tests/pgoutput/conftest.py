"""Test configuration for the pgoutput tests: ``slow`` tests run only when asked for.

The project's pytest options do not deselect ``slow`` tests, so the million-input fuzz run would
otherwise run on every ``pytest``. Select it with ``-m slow``.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: select with -m slow")
    for item in items:
        if "slow" in item.keywords and item.path.is_relative_to(config.rootpath / "tests/pgoutput"):
            item.add_marker(skip)
