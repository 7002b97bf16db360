"""The implementation switches (bridge.native.switches): one place decides which path runs."""

from __future__ import annotations

import pytest

from bridge.native.switches import NATIVE, NATIVE_BATCHES, NATIVE_READS, READER_THREAD, enabled


@pytest.mark.parametrize("switch", [NATIVE, READER_THREAD, NATIVE_BATCHES, NATIVE_READS])
def test_a_switch_is_on_unless_set_to_zero(switch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (NATIVE, READER_THREAD, NATIVE_BATCHES, NATIVE_READS):
        monkeypatch.delenv(name, raising=False)
    assert enabled(switch)
    monkeypatch.setenv(switch, "1")
    assert enabled(switch)
    monkeypatch.setenv(switch, "0")
    assert not enabled(switch)


@pytest.mark.parametrize("part", [READER_THREAD, NATIVE_BATCHES, NATIVE_READS])
def test_no_c_part_runs_on_the_pure_python_path(part: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(part, raising=False)
    monkeypatch.setenv(NATIVE, "0")
    assert not enabled(part)


def test_an_unknown_switch_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="PGBRIDGE_NATIV"):
        enabled("PGBRIDGE_NATIV")


def test_nothing_else_reads_the_switches() -> None:
    """One place (psycopg's PSYCOPG_IMPL): the switches' names appear in no other module."""
    from pathlib import Path

    import bridge

    root = Path(bridge.__file__).parent
    readers = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "switches.py"
        and any(f'"{name}"' in p.read_text() for name in (NATIVE, READER_THREAD, NATIVE_BATCHES))
    )
    assert readers == []
