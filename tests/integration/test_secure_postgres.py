"""pgbridge against a PostgreSQL that accepts only TLS with SCRAM: a throwaway cluster of the
stack's major version (``hostssl`` entries only, ``password_encryption = scram-sha-256``, a
server certificate from a private CA), with the stack's Kafka and registry.

What a user relies on: with ``sslmode = verify-full``, the CA and a password from a file,
``pgbridge run`` snapshots existing rows and streams (replication connection included) over TLS;
a wrong password, a plaintext connection and an untrusted server certificate each stop it
promptly with a typed error that names the cause, never a retry loop or a traceback.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.devstack.stack import StackInfo
from bridge.devstack.tls import TlsFiles, make_tls_files
from tests.integration.bridge_harness import (
    mark,
    normalized,
    rebuild_tables,
    run_until_exit,
    source_rows,
    streaming_bridge,
    wait_slot_confirmed,
)

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def secure(local_stack: StackInfo) -> Iterator[PostgresCluster]:
    base = Path(tempfile.mkdtemp(prefix="pgbridge-secure-pg-", dir="/tmp"))
    base.chmod(0o755)  # PostgreSQL runs as a non-root account
    tls = make_tls_files(base / "tls")
    cluster = PostgresCluster(
        ensure_postgres_binaries(local_stack.postgres_major),
        base_dir=base / "cluster",
        password=PASSWORD,
        tls=tls,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


def settings(
    stack: StackInfo, cluster: PostgresCluster, tmp_path: Path, prefix: str, **extra: str
) -> dict[str, str]:
    assert cluster.tls is not None
    password_file = tmp_path / "pg-password"
    password_file.write_text(PASSWORD + "\n")
    values = {
        "database.hostname": "127.0.0.1",
        "database.port": str(cluster.port),
        "database.user": "postgres",
        "database.dbname": "postgres",
        "database.password.file": str(password_file),
        "database.sslmode": "verify-full",
        "database.sslrootcert": str(cluster.tls.ca_cert),
        "topic.prefix": prefix,
        "slot.name": prefix,
        "publication.name": f"{prefix}_pub",
        "kafka.bootstrap.servers": stack.bootstrap_servers,
        "schema.registry.url": stack.registry_url,
        "status.update.interval.ms": "500",
        "state.dir": str(tmp_path / "state"),
        "errors.max.retries": "2",
        "errors.retry.delay.initial.ms": "100",
        "errors.retry.delay.max.ms": "200",
    }
    values.update(extra)
    return values


def test_snapshot_and_stream_over_tls_with_scram(
    local_stack: StackInfo, secure: PostgresCluster, tmp_path: Path
) -> None:
    prefix = f"sec{uuid.uuid4().hex[:8]}"
    dsn = secure.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {prefix}_t (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {prefix}_t SELECT i, 'old' FROM generate_series(1, 500) i")
    values = settings(
        local_stack, secure, tmp_path, prefix, **{"table.include.list": f"public\\.{prefix}_t"}
    )
    with streaming_bridge(values, str(tmp_path / "bridge.log")) as process:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE {prefix}_t SET v = 'new' WHERE id <= 100")
            conn.execute(f"DELETE FROM {prefix}_t WHERE id > 450")
            walsender = conn.execute(
                "SELECT s.ssl, s.version FROM pg_stat_replication r "
                "JOIN pg_stat_ssl s ON s.pid = r.pid WHERE r.application_name LIKE 'pgbridge%%'"
            ).fetchall()
        assert walsender and all(ssl for ssl, _ in walsender), walsender
        wait_slot_confirmed(dsn, prefix, mark(dsn), process)
    assert PASSWORD not in process.log()
    rebuilt = rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)
    expected = source_rows(dsn, f"public.{prefix}_t", ("id",))
    assert normalized(rebuilt[f"public.{prefix}_t"]) == expected


@pytest.mark.parametrize(
    ("case", "extra", "says"),
    [
        (
            "wrong password",
            {"database.password": "not-the-password"},
            "password authentication failed",
        ),
        ("plaintext", {"database.sslmode": "disable"}, "no encryption"),
        ("untrusted certificate", {}, "certificate verify failed"),
    ],
)
def test_refused_connections_stop_promptly_with_the_cause(
    local_stack: StackInfo,
    secure: PostgresCluster,
    tmp_path: Path,
    case: str,
    extra: dict[str, str],
    says: str,
) -> None:
    prefix = f"secx{uuid.uuid4().hex[:8]}"
    values = settings(local_stack, secure, tmp_path, prefix, **extra)
    if "database.password" in extra:
        del values["database.password.file"]
    if case == "untrusted certificate":
        other: TlsFiles = make_tls_files(tmp_path / "other-ca", ca_name="someone else's CA")
        values["database.sslrootcert"] = str(other.ca_cert)
    check = [sys.executable, "-m", "bridge.cli", "check"]
    for key, value in values.items():
        check += ["--set", f"{key}={value}"]
    checked = subprocess.run(check, capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode != 0 and says in checked.stdout, checked.stdout[-2000:]
    assert "FAIL postgres" in checked.stdout
    code, output, seconds = run_until_exit(values)
    assert code != 0, output[-2000:]
    assert says in output, output[-2000:]
    assert "Traceback" not in output, output[-3000:]
    assert seconds < 45, f"{case}: took {seconds:.0f} s to give up"
    assert PASSWORD not in output


def test_a_certificate_for_another_host_or_expired_is_refused(
    local_stack: StackInfo, secure: PostgresCluster, tmp_path: Path
) -> None:
    """verify-full checks the name: the right CA, the server reached by an address the
    certificate does not name. Then a server whose certificate expired."""
    assert secure.tls is not None
    values = settings(local_stack, secure, tmp_path, f"secn{uuid.uuid4().hex[:8]}")
    for key in ("database.hostname", "database.port", "database.user", "database.dbname"):
        del values[key]
    values["database.dsn"] = (
        f"host=db.example.invalid hostaddr=127.0.0.1 port={secure.port} user=postgres "
        "dbname=postgres"
    )
    code, output, seconds = run_until_exit(values)
    assert code != 0 and "does not match host name" in output, output[-2000:]
    assert "database.hostname" in output and "Traceback" not in output
    assert seconds < 45

    base = Path(tempfile.mkdtemp(prefix="pgbridge-expired-pg-", dir="/tmp"))
    base.chmod(0o755)
    expired = make_tls_files(base / "tls", server_expired=True)
    cluster = PostgresCluster(
        ensure_postgres_binaries(local_stack.postgres_major),
        base_dir=base / "cluster",
        password=PASSWORD,
        tls=expired,
    )
    try:
        cluster.start()
        values = settings(local_stack, cluster, tmp_path, f"secx{uuid.uuid4().hex[:8]}")
        code, output, seconds = run_until_exit(values)
    finally:
        cluster.destroy()
    assert code != 0 and "certificate verify failed" in output, output[-2000:]
    assert "PostgreSQL refused the connection" in output and "Traceback" not in output
    assert seconds < 45
