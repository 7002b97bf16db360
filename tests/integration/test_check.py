"""``pgbridge check`` on the real stack: what works, and each missing privilege or unreachable
part named with what to change, in bounded time, before anything is created."""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bridge.cli import main
from bridge.devstack.stack import StackInfo
from tests.integration.bridge_harness import bridge_settings, scratch_database

pytestmark = pytest.mark.integration


def run_check(settings: dict[str, str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list]:
    args = ["check", "--json"]
    for key, value in settings.items():
        args += ["--set", f"{key}={value}"]
    code = main(args)
    return code, json.loads(capsys.readouterr().out)


def failed(findings: list[dict[str, object]]) -> list[str]:
    return [f"{f['part']}: {f['what']}" for f in findings if not f["ok"]]


def test_check_everything_in_place_with_the_stack(
    local_stack: StackInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = f"check{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        code, findings = run_check(bridge_settings(local_stack, dsn, prefix), capsys)
        assert code == 0, failed(findings)
        assert {f["part"] for f in findings} == {"postgres", "kafka", "schema registry"}
        assert "incremental snapshots' signals travel as signed logical messages" in {
            f["what"] for f in findings
        }
        with psycopg.connect(dsn, autocommit=True) as conn:  # nothing was created
            assert conn.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
            assert conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"
            ).fetchone() == (0,)


def test_check_names_each_missing_privilege_and_unreachable_part(
    local_stack: StackInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    """A role without REPLICATION and without SELECT on one captured table, Kafka and the
    registry at ports where nothing listens: every problem is one finding saying what to
    change, the exit code says so, and it takes seconds, not a hang."""
    prefix = f"check{uuid.uuid4().hex[:8]}"
    role = f"limited_{uuid.uuid4().hex[:6]}"
    with scratch_database(local_stack) as dsn:
        dbname = conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
            conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO {role}')
            conn.execute("CREATE TABLE open_rows (id int PRIMARY KEY)")
            conn.execute("CREATE TABLE secret_rows (id int PRIMARY KEY)")
            conn.execute(f"GRANT SELECT ON open_rows TO {role}")
            conn.execute(f"CREATE PUBLICATION {prefix}_pub FOR TABLE open_rows, secret_rows")
        try:
            settings = bridge_settings(
                local_stack, make_conninfo(dsn, user=role, password="pw"), prefix
            )
            settings["publication.autocreate.mode"] = "disabled"
            started = time.monotonic()
            code, findings = run_check(settings, capsys)
            assert code == 4
            problems = failed(findings)
            assert any(
                f"role {role} lacks REPLICATION: ALTER ROLE {role} REPLICATION" in p
                for p in problems
            ), problems
            assert any("no SELECT on public.secret_rows" in p for p in problems), problems
            assert any(
                p.startswith("postgres: replication connection refused") for p in problems
            ), problems
            assert not any("open_rows" in p for p in problems), problems

            settings = bridge_settings(local_stack, dsn, prefix) | {
                "kafka.bootstrap.servers": "127.0.0.1:1",
                "schema.registry.url": "http://127.0.0.1:1",
            }
            code, findings = run_check(settings, capsys)
            assert code == 4
            problems = failed(findings)
            assert [p.split(":")[0] for p in problems] == ["kafka", "schema registry"], problems
            assert time.monotonic() - started < 90
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"DROP OWNED BY {role}")
    with psycopg.connect(local_stack.postgres_dsn(), autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
