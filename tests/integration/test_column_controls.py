"""Debezium's column controls on the real stack: a column left out, masked, hashed (in the key
too) or cut never reaches Kafka in clear — not in the initial snapshot, not in the stream, not
in an incremental snapshot, not in a key, not in the dead-letter or messages topics — and a
consumer rebuilding the tables from the topics gets exactly the controlled values of the
source's rows."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.column_controls import hasher
from bridge.devstack.stack import StackInfo
from tests.integration.bridge_harness import (
    BridgeProcess,
    bridge_settings,
    mark,
    raw_records,
    read_topic,
    rebuild_tables,
    scratch_database,
    source_rows,
    table_differences,
    topics_with_prefix,
    wait_for,
    wait_slot_confirmed,
)
from tests.integration.test_incremental_snapshot import cli, tables_done

pytestmark = pytest.mark.integration

SALT = "pepper-" + uuid.uuid4().hex[:6]
SCHEMA = """
CREATE TABLE users (id int PRIMARY KEY, email varchar(40), name text, ssn text, bio text,
                    photo bytea, age int);
CREATE TABLE accounts (email text PRIMARY KEY, balance int);
INSERT INTO users SELECT i, 'user' || i || '@mail.example', 'Secret Name ' || i,
    'ssn-' || lpad(i::text, 6, '0'), 'private bio ' || i || repeat(md5(i::text), 400),
    decode(lpad(to_hex(i), 8, '0'), 'hex'), 20 + i % 50
  FROM generate_series(1, 400) i;
INSERT INTO accounts SELECT 'acct' || i || '@mail.example', i FROM generate_series(1, 50) i;
"""
CONTROLS = {
    "column.exclude.list": "public.users.ssn",
    "column.mask.with.6.chars": "public.users.name,public.users.bio",
    f"column.mask.hash.SHA-256.with.salt.{SALT}": r"public\.users\.email,public.accounts.email",
    "column.truncate.to.3.chars": "public.users.photo",
}
#: What must never appear in any record, key or value: pieces of every controlled value.
SECRETS = (b"Secret Name", b"ssn-0", b"private bio", b"@mail.example")


def controlled(row: dict[str, Any]) -> dict[str, Any]:
    """A source row of users as the topic must carry it."""
    digest = hasher("sha256", SALT.encode(), 1)
    return {
        "id": row["id"],
        "email": None if row["email"] is None else digest(row["email"])[:40],
        "name": None if row["name"] is None else "******",
        "bio": None if row["bio"] is None else "******",
        "photo": None if row["photo"] is None else bytes(row["photo"][:3]),
        "age": row["age"],
    }


def test_controlled_columns_never_reach_kafka_in_clear_and_rebuild_as_controlled(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    prefix = f"cols{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)
        settings = bridge_settings(
            local_stack, dsn, prefix, **{"state.dir": str(tmp_path), **CONTROLS}
        )
        process = BridgeProcess(settings, str(tmp_path / "bridge.log"))
        try:
            wait_for(lambda: "to topics" in process.log(), process, "streaming")
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            with psycopg.connect(dsn, autocommit=True) as conn:  # the stream
                conn.execute(
                    "INSERT INTO users SELECT i, 'user' || i || '@mail.example', "
                    "'Secret Name ' || i, 'ssn-x' || i, 'private bio ' || i, "
                    "'\\x0a0b0c0d'::bytea, i FROM generate_series(401, 450) i"
                )
                conn.execute("UPDATE users SET name = 'Secret Name changed' WHERE id <= 20")
                # bio is TOASTed: unchanged, not sent
                conn.execute("UPDATE users SET age = age + 1 WHERE id BETWEEN 21 AND 40")
                conn.execute("UPDATE users SET name = NULL, email = NULL WHERE id = 41")
                conn.execute("DELETE FROM users WHERE id BETWEEN 42 AND 45")
                conn.execute(
                    "UPDATE accounts SET email = 'moved@mail.example' WHERE email LIKE 'acct1@%'"
                )
                conn.execute("DELETE FROM accounts WHERE email LIKE 'acct2@%'")
            # An incremental snapshot of both tables reads them again under the same controls.
            cli(settings, "public.users", "public.accounts")
            wait_for(
                lambda: tables_done(tmp_path, settings, "public.users", "public.accounts"),
                process,
                "the incremental snapshot",
                timeout=240,
            )
            wait_slot_confirmed(dsn, settings["slot.name"], mark(dsn), process)
            assert process.terminate() == 0, process.log()[-3000:]
        finally:
            if process.proc.poll() is None:
                process.kill()

        # Nothing in clear, anywhere: every topic of the bridge, keys and values.
        topics = topics_with_prefix(local_stack.bootstrap_servers, prefix)
        assert f"{prefix}.public.users" in topics and f"{prefix}.public.accounts" in topics
        for topic in topics:
            for key, value in raw_records(local_stack.bootstrap_servers, topic):
                for part in (key or b"", value or b""):
                    leaked = [s for s in SECRETS if s in part]
                    assert not leaked, f"{topic}: {leaked} in a record"

        users = read_topic(
            local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.users"
        )
        snapshots = {v["source"]["snapshot"] for _, v in users if v is not None and v["op"] == "r"}
        # the initial snapshot's rows ("first", "true", "last"...) and the incremental one's
        assert "incremental" in snapshots and snapshots - {"incremental"}
        assert {v["op"] for _, v in users if v is not None} >= {"r", "c", "u", "d"}
        for _, value in users:
            for image in (value or {}).get("before"), (value or {}).get("after"):
                assert image is None or "ssn" not in image

        rebuilt = rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)
        expected_users = {
            k: controlled(row) for k, row in source_rows(dsn, "users", ("id",)).items()
        }
        got_users = rebuilt["public.users"]
        assert got_users == expected_users, table_differences(got_users, expected_users)
        digest = hasher("sha256", SALT.encode(), 1)
        expected_accounts = {
            (digest(email),): {"email": digest(email), "balance": balance}
            for (email,), row in source_rows(dsn, "accounts", ("email",)).items()
            for balance in [row["balance"]]
        }
        got_accounts = rebuilt["public.accounts"]
        assert got_accounts == expected_accounts, table_differences(got_accounts, expected_accounts)
