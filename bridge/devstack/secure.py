"""``pgbridge dev up --secure``: the local stack with security on every hop, beside the plain one.

- PostgreSQL: TLS only (``hostssl``), SCRAM passwords;
- Kafka: one SASL_SSL listener, PLAIN logins;
- Apicurio Registry: HTTPS only, HTTP basic authentication on its APIs, its storage in the
  secured PostgreSQL (over TLS, with a password);

all with certificates from a throwaway CA made here (:mod:`bridge.devstack.tls`) and random
passwords kept in ``<stack>/secure/secrets`` (mode 0600). ``up`` writes
``<stack>/secure/pgbridge-secure.toml``, a pgbridge configuration that reaches all three with
verification on (``database.sslmode = verify-full``, CA files, passwords from files): the
command line to try it, and what the secured tests run with.
"""

from __future__ import annotations

import json
import secrets
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import psycopg

from bridge.devstack.kafka import KafkaBroker
from bridge.devstack.paths import stack_dir
from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.devstack.registry import ApicurioRegistry
from bridge.devstack.tls import TlsFiles, make_tls_files

__all__ = ["SecureStack", "SecureStackInfo"]

_REGISTRY_DATABASE = "apicurio"


@dataclass(frozen=True, slots=True)
class SecureStackInfo:
    postgres_dsn: str  # without the password
    bootstrap_servers: str
    registry_url: str
    config_file: str  # pgbridge-secure.toml
    ca_file: str


class SecureStack:
    def __init__(self, directory: Path | None = None, postgres_major: str | None = None) -> None:
        self.dir = (directory or stack_dir() / "secure").resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)  # PostgreSQL runs as a non-root account
        self.postgres_major = postgres_major or "18"
        self.tls = self._tls()
        self.passwords = {name: self._secret(name) for name in ("postgres", "kafka", "registry")}
        self.postgres = PostgresCluster(
            ensure_postgres_binaries(self.postgres_major),
            self.dir / "postgres",
            password=self.passwords["postgres"],
            tls=self.tls,
        )
        self.kafka = KafkaBroker(
            self.dir / "kafka",
            tls=self.tls,
            sasl_users={"broker": self._secret("kafka-broker"), "bridge": self.passwords["kafka"]},
        )

    def _tls(self) -> TlsFiles:
        directory = self.dir / "tls"
        files = TlsFiles(directory / "ca.crt", directory / "server.crt", directory / "server.key")
        if not files.server_key.exists():
            files = make_tls_files(directory, ca_name="pgbridge secure dev stack CA")
        return files

    def _secret(self, name: str) -> str:
        path = self.dir / "secrets" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.parent.chmod(0o700)
            path.write_text(secrets.token_urlsafe(18) + "\n")
            path.chmod(0o600)
        return path.read_text().strip()

    @property
    def registry(self) -> ApicurioRegistry:
        jdbc = (
            f"jdbc:postgresql://127.0.0.1:{self.postgres.port}/{_REGISTRY_DATABASE}"
            f"?sslmode=verify-full&sslrootcert={self.tls.ca_cert}"
        )
        return ApicurioRegistry(
            self.dir / "registry",
            jdbc,
            tls=self.tls,
            users={"bridge": self.passwords["registry"]},
            jdbc_password=self.passwords["postgres"],
        )

    def up(self) -> SecureStackInfo:
        self.postgres.start()
        with psycopg.connect(self.postgres.dsn(), autocommit=True) as conn:
            if not conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (_REGISTRY_DATABASE,)
            ).fetchone():
                conn.execute(f"CREATE DATABASE {_REGISTRY_DATABASE}")
        registry = self.registry
        self.kafka.launch()
        registry.launch()
        self.kafka.wait_ready()
        registry.wait_ready()
        info = SecureStackInfo(
            postgres_dsn=self.postgres.dsn(password="<in secrets/postgres>"),
            bootstrap_servers=self.kafka.bootstrap_servers,
            registry_url=registry.url,
            config_file=str(self._write_config(registry)),
            ca_file=str(self.tls.ca_cert),
        )
        (self.dir / "secure-stack.json").write_text(json.dumps(asdict(info), indent=2))
        return info

    def _write_config(self, registry: ApicurioRegistry) -> Path:
        secrets_dir = self.dir / "secrets"
        user_info = secrets_dir / "registry-user-info"
        user_info.write_text(f"bridge:{self.passwords['registry']}\n")
        user_info.chmod(0o600)
        ca = self.tls.ca_cert
        path = self.dir / "pgbridge-secure.toml"
        path.write_text(
            "# Written by `pgbridge dev up --secure`: every hop with TLS and authentication.\n"
            f'"database.hostname" = "127.0.0.1"\n"database.port" = {self.postgres.port}\n'
            '"database.user" = "postgres"\n"database.dbname" = "postgres"\n'
            f'"database.password.file" = "{secrets_dir / "postgres"}"\n'
            f'"database.sslmode" = "verify-full"\n"database.sslrootcert" = "{ca}"\n'
            f'"kafka.bootstrap.servers" = "{self.kafka.bootstrap_servers}"\n'
            '"kafka.security.protocol" = "SASL_SSL"\n"kafka.sasl.mechanism" = "PLAIN"\n'
            '"kafka.sasl.username" = "bridge"\n'
            f'"kafka.sasl.password.file" = "{secrets_dir / "kafka"}"\n'
            f'"kafka.ssl.ca.location" = "{ca}"\n'
            f'"schema.registry.url" = "{registry.url}"\n'
            f'"schema.registry.basic.auth.user.info.file" = "{user_info}"\n'
            f'"schema.registry.ssl.ca.location" = "{ca}"\n'
        )
        return path

    def down(self) -> None:
        self.registry.stop()
        self.kafka.stop()
        self.postgres.stop()

    def destroy(self) -> None:
        self.down()
        shutil.rmtree(self.dir, ignore_errors=True)
