"""What a bench leaves on the local stack, removed at its end: its database with the
replication slots in it (a slot left behind retains WAL without bound, and PostgreSQL refuses
to drop a database that still has one), and the topics of its runs."""

from __future__ import annotations

import time
import uuid

import psycopg
from confluent_kafka.admin import AdminClient

from bridge.devstack.stack import StackInfo

__all__ = ["TOPIC_PREFIXES", "delete_topics", "drop_database", "topic_prefix"]


def drop_database(stack: StackInfo, dbname: str) -> None:
    with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
        for (slot,) in admin.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (dbname,)
        ).fetchall():
            admin.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = %s AND active_pid IS NOT NULL",
                (slot,),
            )
            time.sleep(0.5)
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def delete_topics(stack: StackInfo, prefixes: list[str]) -> None:
    """Every topic named ``<prefix>.…`` for one of ``prefixes`` (the runs' topic.prefix)."""
    if not prefixes:
        return
    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    names = [
        name
        for name in admin.list_topics(timeout=30).topics
        if any(name.startswith(f"{prefix}.") for prefix in prefixes)
    ]
    for future in admin.delete_topics(names, operation_timeout=60).values() if names else ():
        future.result()


#: The topic prefixes this process's runs used (see :func:`topic_prefix`).
TOPIC_PREFIXES: list[str] = []


def topic_prefix(kind: str) -> str:
    """A new ``topic.prefix`` for one run, remembered for :func:`delete_topics`."""
    prefix = f"{kind}{uuid.uuid4().hex[:6]}"
    TOPIC_PREFIXES.append(prefix)
    return prefix
