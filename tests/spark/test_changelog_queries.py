"""The changelog mode's two streaming queries awaited as one (bridge.spark.job.ChangelogQueries):
a catch-up run ingests everything before compacting; in a running job the first query to fail
stops the other and its error reaches the caller (which restarts both from their checkpoints)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.spark import changelog
from bridge.spark.config import ApplyConfig
from bridge.spark.job import ChangelogQueries


class FakeQuery:
    def __init__(self, name: str, log: list[str], error: Exception | None = None) -> None:
        self.name, self.log, self.error = name, log, error
        self.isActive = error is None
        self.recentProgress: list[Any] = [name]

    def awaitTermination(self, timeout: float | None = None) -> None:
        self.log.append(f"await {self.name}")
        if self.error is not None:
            raise self.error
        self.isActive = False

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")
        self.isActive = False


def _config(**extra: Any) -> ApplyConfig:
    return ApplyConfig(
        topic_prefix="pg",
        bootstrap_servers="k:9092",
        registry_url="http://r",
        delta_base="/d",
        checkpoint_location="/c",
        dead_letter_location="/x",
        mode="changelog",
        **extra,
    )


def _patch(monkeypatch: pytest.MonkeyPatch, log: list[str], ingest_error: Exception | None) -> None:
    def ingest(spark: Any, config: ApplyConfig, writer: Any = None) -> FakeQuery:
        log.append("start ingest")
        return FakeQuery("ingest", log, ingest_error)

    def compactor(spark: Any, config: ApplyConfig, applier: Any = None) -> FakeQuery:
        log.append("start compactor")
        return FakeQuery("compactor", log)

    monkeypatch.setattr(changelog, "start_ingest", ingest)
    monkeypatch.setattr(changelog, "start_compactor", compactor)


def test_catch_up_run_ingests_everything_then_compacts(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    _patch(monkeypatch, log, None)
    ChangelogQueries(None, _config(available_now=True)).awaitTermination()
    assert log == ["start ingest", "await ingest", "start compactor", "await compactor"]


def test_running_job_stops_both_queries_when_one_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    _patch(monkeypatch, log, RuntimeError("broker gone"))
    queries = ChangelogQueries(None, _config())
    assert log == ["start ingest", "start compactor"]
    assert queries.recentProgress == ["ingest", "compactor"]
    with pytest.raises(RuntimeError, match="broker gone"):
        queries.awaitTermination()
    assert "stop compactor" in log


def test_topic_lag_from_a_progress_report() -> None:
    """Records behind per topic: latest offsets minus the batch's end, summed over partitions;
    a source that is not Kafka's (the changelog's Delta source) is passed over."""
    from bridge.spark.topic_lag import topic_lag

    kafka = {
        "latestOffset": {"pg.public.a": {"0": 120, "1": 80}, "pg.public.b": {"0": 5}},
        "endOffset": {"pg.public.a": {"0": 100, "1": 80}, "pg.public.b": {"0": 5}},
    }
    as_text = {k: json.dumps(v) for k, v in kafka.items()}  # offsets Spark could not parse
    delta = {"latestOffset": {"sourceVersion": 1, "reservoirVersion": 7}, "endOffset": None}
    assert topic_lag([kafka, delta]) == {"pg.public.a": 20, "pg.public.b": 0}
    assert topic_lag([as_text]) == {"pg.public.a": 20, "pg.public.b": 0}
