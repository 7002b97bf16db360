"""A Kafka cluster of several KRaft nodes on loopback (``pgbridge dev up --brokers 3``): what
production Kafka is, for the fault tests (a partition leader killed, a broker restarted).

Each node is a :class:`~bridge.devstack.kafka.KafkaBroker` (broker and controller in one
process) in ``<dir>/kafka-<n>``; all vote in the controller quorum. Topics are created with
replication factor ``brokers`` and ``min.insync.replicas = 2`` by default (so are Kafka's own
offsets and transaction state): a write is acknowledged once two replicas hold it.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bridge.devstack.kafka import KafkaBroker

__all__ = ["KafkaCluster"]


class KafkaCluster:
    part = "kafka"

    def __init__(
        self,
        base_dir: Path,
        brokers: int = 3,
        heap: str = "512m",
        jvm_options: Sequence[str] = (),
        settings: Sequence[str] = (),
    ) -> None:
        """``settings``: ``key=value`` lines added to every broker's properties."""
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.base_dir = base_dir.resolve()
        self.brokers = [
            KafkaBroker(
                self.base_dir / f"kafka-{n}",
                heap,
                node_id=n,
                cluster=self,
                jvm_options=jvm_options,
                settings=settings,
            )
            for n in range(1, brokers + 1)
        ]
        self.log_path = self.brokers[0].log_path

    # -- what its nodes ask (bridge.devstack.kafka.KafkaNodes) -------------------------------

    def nodes(self) -> list[tuple[int, int]]:
        return [(b.node_id, b.port("controller_port")) for b in self.brokers]

    def cluster_id(self) -> str:
        path = self.base_dir / "cluster.id"
        if not path.exists():
            self.base_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))
        return path.read_text().strip()

    # -- what the stack asks of its Kafka ------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap_servers for b in self.brokers)

    def launch(self) -> None:
        self.nodes()  # every port chosen before any node writes its quorum
        for broker in self.brokers:
            broker.launch()

    def wait_ready(self) -> None:
        for broker in self.brokers:
            broker.wait_ready()

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def stop(self) -> None:
        """Every node at once. One after the other, the last ones wait out their stop timeout:
        a broker's controlled shutdown needs the controller quorum, which the nodes stopped
        before it took away (measured on 3 nodes: 32 s one after the other, 6 s at once)."""
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(lambda broker: broker.stop(), self.brokers))

    def is_running(self) -> bool:
        return all(b.is_running() for b in self.brokers)

    def client_config(self) -> dict[str, str | int | float | bool]:
        return {"bootstrap.servers": self.bootstrap_servers}

    # -- faults ----------------------------------------------------------------------------------

    def broker(self, node_id: int) -> KafkaBroker:
        return next(b for b in self.brokers if b.node_id == node_id)

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The node that leads ``topic``'s ``partition`` now."""
        from confluent_kafka.admin import AdminClient

        metadata = AdminClient(self.client_config()).list_topics(topic, timeout=10)
        return int(metadata.topics[topic].partitions[partition].leader)
