"""``pgbridge check``'s verdicts without a stack: an unreachable database is one finding (not a
traceback), and the rendering says how many problems would stop the bridge."""

from __future__ import annotations

from bridge.config import load_config
from bridge.ops.check import Finding, _postgres, render

REQUIRED = {
    "topic.prefix": "shop",
    "kafka.bootstrap.servers": "127.0.0.1:1",
    "schema.registry.url": "http://127.0.0.1:1",
}


def test_check_unreachable_database_is_one_finding_naming_it() -> None:
    config = load_config(
        None, {}, REQUIRED | {"database.dsn": "host=127.0.0.1 port=1 dbname=shop user=x"}
    )
    (finding,) = _postgres(config)
    assert finding.part == "postgres" and not finding.ok
    assert finding.what.startswith("cannot connect:") and "127.0.0.1" in finding.what


def test_check_render_counts_problems() -> None:
    ok = Finding("kafka", True, "1 broker(s) answer")
    bad = Finding("postgres", False, "role x lacks REPLICATION: ALTER ROLE x REPLICATION")
    assert render([ok]).splitlines() == [
        "ok   kafka: 1 broker(s) answer",
        "everything pgbridge needs is in place",
    ]
    assert render([ok, bad]).splitlines()[1:] == [
        "FAIL postgres: role x lacks REPLICATION: ALTER ROLE x REPLICATION",
        "1 problem(s) would stop pgbridge",
    ]


def test_check_says_how_incremental_snapshots_get_their_signals() -> None:
    """Never a reason not to start, but said: the signal table, signed messages (14+), or
    nothing on 13 without a table (tables DDL rewrote then are not copied again)."""
    from bridge.ops.check import _signals

    def said(version: int, **overrides: str) -> list[tuple[bool, str]]:
        out: list[tuple[bool, str]] = []
        config = load_config(None, {}, REQUIRED | {"database.dbname": "shop", **overrides})
        _signals(version, config, lambda ok, what: out.append((ok, what)))
        return out

    assert said(180000) == [
        (True, "incremental snapshots' signals travel as signed logical messages")
    ]
    ((ok, what),) = said(130000)
    assert ok and "PostgreSQL 13" in what and "set signal.data.collection" in what
    ((ok, what),) = said(130000, **{"signal.data.collection": "public.sig"})
    assert ok and what.endswith("through the signal table public.sig")
