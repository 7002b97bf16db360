"""The 3-node Kafka cluster's configuration (``pgbridge dev up --brokers 3``), without starting
it: every node votes in one quorum, topics and Kafka's own state are replicated on all three
with two in sync; a single broker keeps its one-replica settings."""

from __future__ import annotations

from pathlib import Path

from bridge.devstack.kafka import KafkaBroker
from bridge.devstack.kafka_cluster import KafkaCluster
from bridge.devstack.stack import LocalStack


def _write_config(broker: KafkaBroker) -> dict[str, str]:
    """The server.properties prepare() writes (storage formatting skipped: data exists)."""
    data = broker.base_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "meta.properties").write_text("formatted")
    broker.prepare()
    text = (broker.base_dir / "server.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_three_nodes_vote_in_one_quorum_with_replicated_topics(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, brokers=3)
    configs = [_write_config(b) for b in cluster.brokers]
    voters = {c["controller.quorum.voters"] for c in configs}
    assert len(voters) == 1 and voters.pop().count("@127.0.0.1:") == 3
    assert sorted(c["node.id"] for c in configs) == ["1", "2", "3"]
    for config in configs:
        assert config["default.replication.factor"] == "3"
        assert config["min.insync.replicas"] == "2"
        assert config["transaction.state.log.replication.factor"] == "3"
        assert config["transaction.state.log.min.isr"] == "2"
    assert len(cluster.bootstrap_servers.split(",")) == 3
    assert cluster.cluster_id() == KafkaCluster(tmp_path, brokers=3).cluster_id()


def test_a_single_broker_keeps_one_replica_and_the_stack_remembers_its_brokers(
    tmp_path: Path,
) -> None:
    config = _write_config(KafkaBroker(tmp_path / "kafka"))
    assert config["controller.quorum.voters"].startswith("1@127.0.0.1:")
    assert config["default.replication.factor"] == "1" and config["min.insync.replicas"] == "1"
    assert isinstance(LocalStack(tmp_path / "stack").kafka, KafkaBroker)
    assert isinstance(LocalStack(tmp_path / "stack3", brokers=3).kafka, KafkaCluster)
