"""An Apache Kafka 4.x broker in KRaft mode (broker and controller in one process): alone, or
one node of a cluster (:mod:`bridge.devstack.kafka_cluster`).

Its classpath is resolved from Maven Central with a small POM (``poms/kafka.xml``); storage is
formatted once with ``kafka.tools.StorageTool`` and the broker runs as ``kafka.Kafka``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import subprocess
import uuid
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Protocol

from bridge.devstack import maven
from bridge.devstack.paths import cache_dir
from bridge.devstack.process import port_open
from bridge.devstack.service import Service, find_java
from bridge.devstack.tls import TlsFiles
from bridge.errors import StackError

logger = logging.getLogger(__name__)

#: The SCRAM mechanisms a secured broker accepts besides PLAIN, for every SASL user.
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def ensure_kafka_classpath() -> Path:
    """The broker's jars, keyed by the POM's content so that a version bump fetches anew."""
    pom = resources.files("bridge.devstack").joinpath("poms/kafka.xml")
    pom_text = pom.read_bytes()
    lib = cache_dir() / "kafka" / hashlib.sha256(pom_text).hexdigest()[:12]
    if (lib / ".complete").exists():
        return lib
    with resources.as_file(pom) as pom_path:
        maven.copy_dependencies("kafka", Path(pom_path), lib)
    (lib / ".complete").touch()
    return lib


#: JVM options for a broker that lives minutes (the tests' throwaway brokers and clusters): the
#: client compiler only and the serial collector. Measured, 3 brokers on 2 cores: 13.5 -> 7.6
#: CPU-s to start (ready in 10.2 -> 6.4 s), 3.3 -> 2.1 CPU-s under a light load; a long-lived
#: broker (the stack's) keeps the JVM's defaults, whose optimising compiler pays off later.
SHORT_LIVED_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class KafkaNodes(Protocol):
    """What a node of a cluster needs to know of it."""

    def nodes(self) -> list[tuple[int, int]]:
        """Every node's (node.id, controller port)."""
        ...

    def cluster_id(self) -> str:
        """The id every node's storage is formatted with."""
        ...


class KafkaBroker(Service):
    part = "kafka"
    start_timeout = 90.0

    def __init__(
        self,
        base_dir: Path,
        heap: str = "768m",
        *,
        tls: TlsFiles | None = None,
        sasl_users: dict[str, str] | None = None,
        oauth_jwks_url: str | None = None,
        node_id: int = 1,
        cluster: KafkaNodes | None = None,
        jvm_options: Sequence[str] = (),
        settings: Sequence[str] = (),
    ) -> None:
        """``settings``: ``key=value`` lines added to the broker's properties (they win over
        the stack's). With ``tls`` and ``sasl_users`` (user -> password), the broker's one client
        listener is SASL_SSL with the PLAIN and SCRAM (:data:`SCRAM_MECHANISMS`) mechanisms:
        TLS with the given certificate, and a login required (the first user is the broker's
        own, between its roles). With ``oauth_jwks_url`` too (an OpenID Connect realm's keys,
        :mod:`bridge.devstack.keycloak`), OAUTHBEARER logins with that realm's tokens."""
        super().__init__(base_dir)
        self.heap = heap
        self.jvm_options = tuple(jvm_options)
        self.settings = tuple(settings)
        self.tls = tls
        self.sasl_users = sasl_users
        self.oauth_jwks_url = oauth_jwks_url
        if (tls is None) != (sasl_users is None) or (sasl_users is not None and not sasl_users):
            raise ValueError("a secured broker needs both tls and at least one SASL user")
        if oauth_jwks_url and not sasl_users:
            raise ValueError("OAUTHBEARER needs the secured listener (tls and SASL users)")
        self._lib: Path | None = None
        self._java: str | None = None
        self.node_id = node_id
        self.cluster = cluster
        #: Variables added to the broker's environment (the tests' fault shims).
        self.extra_environment: dict[str, str] = {}

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **self.extra_environment}

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port('port')}"

    def install(self) -> None:
        self._lib = ensure_kafka_classpath()
        self._java = find_java(17, self.part)

    def _config_path(self) -> Path:
        return self.base_dir / "server.properties"

    def client_config(self) -> dict[str, str | int | float | bool]:
        """librdkafka settings that reach this broker (as its first SASL user when secured)."""
        conf: dict[str, str | int | float | bool] = {"bootstrap.servers": self.bootstrap_servers}
        if self.tls is not None and self.sasl_users:
            user, password = next(iter(self.sasl_users.items()))
            conf.update(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": user,
                    "sasl.password": password,
                    "ssl.ca.location": str(self.tls.ca_cert),
                }
            )
        return conf

    def _listener_settings(self, port: int, controller: int) -> list[str]:
        if self.tls is None or not self.sasl_users:
            return [
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
            ]
        # Kafka reads PEM key stores: the key and its certificate in one file.
        keystore = self.base_dir / "broker-keystore.pem"
        keystore.write_bytes(self.tls.server_key.read_bytes() + self.tls.server_cert.read_bytes())
        keystore.chmod(0o600)
        broker, broker_password = next(iter(self.sasl_users.items()))
        users = " ".join(f'user_{u}="{p}"' for u, p in self.sasl_users.items())
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{broker}" password="{broker_password}" {users};'
        )
        return [
            f"listeners=SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners=SASL_SSL://127.0.0.1:{port}",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=SASL_SSL",
            # PLAIN for the broker itself; SCRAM logins from the credentials stored at format
            # time (prepare()), for clients that do not send their password.
            f"sasl.enabled.mechanisms=PLAIN,{','.join(SCRAM_MECHANISMS)}"
            + (",OAUTHBEARER" if self.oauth_jwks_url else ""),
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
            *(
                f"listener.name.sasl_ssl.{m.lower()}.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                for m in SCRAM_MECHANISMS
            ),
            *self._oauth_settings(),
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.tls.ca_cert}",
        ]

    def prepare(self) -> None:
        port, controller = self.port("port"), self.port("controller_port")
        data = self.base_dir / "data"
        nodes = self.cluster.nodes() if self.cluster else [(self.node_id, controller)]
        voters = ",".join(f"{node}@127.0.0.1:{at}" for node, at in nodes)
        # Alone: every internal topic on the one broker. In a cluster: replicated on all,
        # a write acknowledged by two (what production clusters run).
        replicas = len(nodes)
        isr = min(2, replicas)
        self._config_path().write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    f"node.id={self.node_id}",
                    f"controller.quorum.voters={voters}",
                    *self._listener_settings(port, controller),
                    "controller.listener.names=CONTROLLER",
                    f"log.dirs={data}",
                    "num.partitions=1",
                    f"default.replication.factor={replicas}",
                    f"min.insync.replicas={isr}",
                    f"offsets.topic.replication.factor={replicas}",
                    f"transaction.state.log.replication.factor={replicas}",
                    f"transaction.state.log.min.isr={isr}",
                    f"share.coordinator.state.topic.replication.factor={replicas}",
                    f"share.coordinator.state.topic.min.isr={isr}",
                    "group.initial.rebalance.delay.ms=0",
                    # Topics are created by pgbridge with the settings it was asked for.
                    "auto.create.topics.enable=false",
                    *self.settings,
                ]
            )
            + "\n"
        )
        (self.base_dir / "log4j2.properties").write_text(_LOG4J2)
        if not (data / "meta.properties").exists():
            cluster_id = (
                self.cluster.cluster_id()
                if self.cluster
                else base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            )
            proc = subprocess.run(
                [
                    *self._java_cmd(),
                    "kafka.tools.StorageTool",
                    "format",
                    # One argument: a random id may start with "-", which the tool's parser
                    # would take for an option (it failed the stack about once in 64 starts).
                    f"--cluster-id={cluster_id}",
                    "-c",
                    str(self._config_path()),
                    *self._scram_credentials(),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                raise StackError(self.part, f"formatting storage failed: {proc.stderr.strip()}")

    def _oauth_settings(self) -> list[str]:
        """OAUTHBEARER on the SASL_SSL listener: tokens validated against the realm's keys."""
        if not self.oauth_jwks_url:
            return []
        prefix = "listener.name.sasl_ssl.oauthbearer."
        return [
            f"{prefix}sasl.jaas.config="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            f"{prefix}sasl.server.callback.handler.class="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            f"{prefix}sasl.oauthbearer.jwks.endpoint.url={self.oauth_jwks_url}",
        ]

    def _scram_credentials(self) -> list[str]:
        """StorageTool arguments storing each SASL user's SCRAM credentials (KRaft keeps them in
        the cluster metadata; they can only be added at format time without a running broker)."""
        args: list[str] = []
        for user, password in (self.sasl_users or {}).items():
            for mechanism in SCRAM_MECHANISMS:
                args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        return args

    def _java_cmd(self) -> list[str]:
        assert self._lib is not None and self._java is not None, "install() first"
        return [
            self._java,
            f"-Xmx{self.heap}",
            *self.jvm_options,
            f"-Dlog4j2.configurationFile={self.base_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.base_dir}",
            # Kafka 4 fetches OAuth keys only from URLs allowed by this property.
            *(
                [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.oauth_jwks_url}"]
                if self.oauth_jwks_url
                else []
            ),
            "-cp",
            f"{self._lib}/*",
        ]

    def command(self) -> list[str]:
        return [*self._java_cmd(), "kafka.Kafka", str(self._config_path())]

    def ready(self) -> bool:
        if not port_open(self.port("port")):
            return False
        from confluent_kafka.admin import AdminClient  # heavy import, only when checking

        try:
            md = AdminClient(self.client_config()).list_topics(timeout=2)
        except Exception:  # the broker is still starting: any client error means "not yet"
            return False
        return bool(md.brokers)
