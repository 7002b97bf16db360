"""Apicurio Registry 3.x, used through its Confluent-compatible API (``/apis/ccompat/v7``).

The ``all`` tarball of ``io.apicurio:apicurio-registry-app`` comes from Maven Central and runs as
``quarkus-run.jar``. Its storage is a database in the stack's own PostgreSQL, so registered
schemas survive a restart just as the Kafka topics that reference them do.
"""

from __future__ import annotations

import base64
import logging
import ssl
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

from bridge.devstack import maven
from bridge.devstack.keycloak import RESOURCE_CLIENT
from bridge.devstack.paths import cache_dir
from bridge.devstack.service import Service, find_java
from bridge.devstack.tls import TlsFiles

logger = logging.getLogger(__name__)

APICURIO_VERSION = "3.3.3"
_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
#: Apicurio 3.3 is compiled for Java 21.
_JAVA_MAJOR = 21


def ensure_apicurio() -> Path:
    target = cache_dir() / "apicurio" / APICURIO_VERSION
    if (target / "quarkus-run.jar").exists():
        return target

    def unpack(tarball: Path, directory: Path) -> None:
        with tarfile.open(tarball) as tf:
            tf.extractall(directory, filter="tar")

    return maven.install_artifact("registry", _ARTIFACT, target, unpack)


class ApicurioRegistry(Service):
    part = "registry"
    start_timeout = 120.0
    repick_taken_ports = True

    def __init__(
        self,
        base_dir: Path,
        jdbc_url: str,
        heap: str = "512m",
        *,
        tls: TlsFiles | None = None,
        users: dict[str, str] | None = None,
        jdbc_password: str | None = None,
        oidc_issuer: str | None = None,
    ) -> None:
        """With ``tls``: HTTPS only (plain HTTP refused); with ``users`` (user -> password):
        HTTP basic authentication required on every API path (Quarkus' embedded users); with
        ``oidc_issuer`` (an OpenID Connect realm's URL, :mod:`bridge.devstack.keycloak`): a
        bearer token that realm issued required instead (Quarkus OIDC, as a resource server)."""
        if users and oidc_issuer:
            raise ValueError("basic users or an OIDC issuer, not both")
        super().__init__(base_dir)
        self.jdbc_url = jdbc_url
        self.heap = heap
        self.tls = tls
        self.users = users
        self.jdbc_password = jdbc_password
        self.oidc_issuer = oidc_issuer
        self._home: Path | None = None
        self._java: str | None = None

    @property
    def url(self) -> str:
        """What ``SchemaRegistryClient`` and Spark take as the registry URL."""
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port('port')}/apis/ccompat/v7"

    def _security_options(self) -> list[str]:
        options: list[str] = []
        if self.tls is not None:
            options += [
                f"-Dquarkus.http.ssl-port={self.port('port')}",
                f"-Dquarkus.http.port={self.port('plain_port')}",
                f"-Dquarkus.http.ssl.certificate.files={self.tls.server_cert}",
                f"-Dquarkus.http.ssl.certificate.key-files={self.tls.server_key}",
                "-Dquarkus.http.insecure-requests=disabled",
            ]
        else:
            options.append(f"-Dquarkus.http.port={self.port('port')}")
        if self.users:
            options += [
                "-Dquarkus.http.auth.basic=true",
                "-Dquarkus.security.users.embedded.enabled=true",
                "-Dquarkus.security.users.embedded.plain-text=true",
                "-Dquarkus.http.auth.permission.api.paths=/apis/*",
                "-Dquarkus.http.auth.permission.api.policy=authenticated",
            ]
            for user, password in self.users.items():
                options += [
                    f"-Dquarkus.security.users.embedded.users.{user}={password}",
                    f"-Dquarkus.security.users.embedded.roles.{user}=sr-admin",
                ]
        if self.oidc_issuer:
            options += [
                "-Dquarkus.oidc.tenant-enabled=true",
                f"-Dquarkus.oidc.auth-server-url={self.oidc_issuer}",
                f"-Dquarkus.oidc.client-id={RESOURCE_CLIENT}",
                "-Dquarkus.http.auth.permission.api.paths=/apis/*",
                "-Dquarkus.http.auth.permission.api.policy=authenticated",
            ]
        return options

    def client_config(self) -> dict[str, str]:
        """``SchemaRegistryClient`` settings that reach this registry (as its first user)."""
        conf = {"url": self.url}
        if self.tls is not None:
            conf["ssl.ca.location"] = str(self.tls.ca_cert)
        if self.users:
            user, password = next(iter(self.users.items()))
            conf["basic.auth.user.info"] = f"{user}:{password}"
        return conf

    def install(self) -> None:
        self._home = ensure_apicurio()
        self._java = find_java(_JAVA_MAJOR, self.part)

    def command(self) -> list[str]:
        assert self._home is not None and self._java is not None, "install() first"
        return [
            self._java,
            f"-Xmx{self.heap}",
            *self._security_options(),
            "-Dquarkus.http.host=127.0.0.1",
            # Its management interface (health, metrics) defaults to *:9000: keep it per stack.
            f"-Dquarkus.management.port={self.port('management_port')}",
            "-Dquarkus.management.host=127.0.0.1",
            "-Dquarkus.log.level=WARN",
            '-Dquarkus.log.category."io.apicurio".level=INFO',
            "-Dapicurio.storage.kind=sql",
            "-Dapicurio.storage.sql.kind=postgresql",
            f"-Dapicurio.datasource.url={self.jdbc_url}",
            "-Dapicurio.datasource.username=postgres",
            f"-Dapicurio.datasource.password={self.jdbc_password or 'unused-trust-auth'}",
            "-jar",
            str(self._home / "quarkus-run.jar"),
        ]

    def ready(self) -> bool:
        request = urllib.request.Request(f"{self.url}/subjects")
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        if self.users:
            user, password = next(iter(self.users.items()))
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as resp:
                return bool(resp.status == 200)
        except urllib.error.HTTPError as exc:
            # Behind OIDC, this check has no token: a refusal is the registry answering.
            return self.oidc_issuer is not None and exc.code == 401
        except (urllib.error.URLError, OSError):
            return False
