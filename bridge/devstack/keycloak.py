"""Keycloak, the OpenID Connect provider of the tests of bearer-token (OAuth 2.0 client
credentials) authentication: a registry that accepts only tokens it issued.

The ``keycloak-quarkus-dist`` zip comes from Maven Central and runs in development mode (its
storage in memory, plain HTTP on loopback). Once it answers, one realm is created through its
admin API (as a bootstrap administrator with a random password): a confidential client per
entry of ``clients`` (client id -> secret) with service accounts (the client credentials
grant), and ``registry-api``, the client a resource server names itself with. Nothing is
written into the cached distribution but Keycloak's own build of it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from bridge.devstack import maven
from bridge.devstack.paths import cache_dir
from bridge.devstack.service import Service, find_java

logger = logging.getLogger(__name__)

KEYCLOAK_VERSION = "26.4.7"
_ARTIFACT = f"org.keycloak:keycloak-quarkus-dist:{KEYCLOAK_VERSION}:zip"
REALM = "pgbridge"
RESOURCE_CLIENT = "registry-api"


def ensure_keycloak() -> Path:
    target = cache_dir() / "keycloak" / KEYCLOAK_VERSION
    if (target / "bin" / "kc.sh").exists():
        return target

    def unpack(archive: Path, directory: Path) -> None:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(directory)
        (top,) = directory.iterdir()  # keycloak-<version>/
        for child in top.iterdir():
            child.rename(directory / child.name)
        top.rmdir()
        for script in (directory / "bin").glob("*.sh"):
            script.chmod(0o755)  # zip entries lose their mode in extractall

    return maven.install_artifact("keycloak", _ARTIFACT, target, unpack)


class KeycloakServer(Service):
    part = "keycloak"
    start_timeout = 180.0

    def __init__(self, base_dir: Path, clients: dict[str, str]) -> None:
        super().__init__(base_dir)
        self.clients = clients
        self._admin_password = secrets.token_urlsafe(18)
        self._home: Path | None = None
        self._java: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port('port')}"

    @property
    def issuer(self) -> str:
        """The realm's issuer URL (what a resource server validates tokens against)."""
        return f"{self.base_url}/realms/{REALM}"

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    @property
    def jwks_url(self) -> str:
        """The realm's public keys (what a resource server verifies signatures with)."""
        return f"{self.issuer}/protocol/openid-connect/certs"

    def install(self) -> None:
        self._home = ensure_keycloak()
        self._java = find_java(17, self.part)

    def start(self) -> None:
        super().start()
        self._create_realm()

    def _realm(self) -> dict[str, object]:
        clients: list[dict[str, object]] = [
            {
                "clientId": client,
                "enabled": True,
                "publicClient": False,
                "secret": secret,
                "serviceAccountsEnabled": True,
                "standardFlowEnabled": False,
                "directAccessGrantsEnabled": False,
                "protocol": "openid-connect",
            }
            for client, secret in self.clients.items()
        ]
        clients.append({"clientId": RESOURCE_CLIENT, "enabled": True, "bearerOnly": True})
        return {"realm": REALM, "enabled": True, "clients": clients}

    def _create_realm(self) -> None:
        form = urllib.parse.urlencode(
            {
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": "admin",
                "password": self._admin_password,
            }
        ).encode()
        url = f"{self.base_url}/realms/master/protocol/openid-connect/token"
        with urllib.request.urlopen(url, data=form, timeout=30) as resp:
            token = json.loads(resp.read())["access_token"]
        request = urllib.request.Request(
            f"{self.base_url}/admin/realms",
            data=json.dumps(self._realm()).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60):
            pass
        logger.info("keycloak realm %s with clients %s", REALM, ", ".join(self.clients))

    def environment(self) -> dict[str, str]:
        assert self._java is not None, "install() first"
        env = dict(os.environ)
        java = Path(shutil.which(self._java) or self._java).resolve()  # may be "java" on PATH
        env["JAVA_HOME"] = str(java.parent.parent)
        # The client JIT only: a test's short-lived server, whose start is mostly class loading
        # and schema setup, then a few token requests. C2's compilations were ~40% of its
        # start's CPU (idle machine: 58 -> 34 CPU-s, 31 -> 28 s), on cores the tests share.
        env["JAVA_OPTS_APPEND"] = "-Xmx512m -XX:TieredStopAtLevel=1"
        env["KC_BOOTSTRAP_ADMIN_USERNAME"] = "admin"
        env["KC_BOOTSTRAP_ADMIN_PASSWORD"] = self._admin_password
        return env

    def command(self) -> list[str]:
        assert self._home is not None, "install() first"
        return [
            str(self._home / "bin" / "kc.sh"),
            "start-dev",
            "--http-host=127.0.0.1",
            f"--http-port={self.port('port')}",
            # Its management interface (health, metrics) defaults to 9000: keep it per service.
            f"--http-management-port={self.port('management_port')}",
            "--db=dev-mem",  # nothing shared through the cached distribution's data/
        ]

    def ready(self) -> bool:
        try:
            url = f"{self.base_url}/realms/master/.well-known/openid-configuration"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False
