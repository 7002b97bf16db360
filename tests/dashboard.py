"""The Grafana dashboard in the repository (dev-stack/grafana/pgbridge-dashboard.json): the metric
names its queries use, and which of them a scrape of /metrics exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parent.parent / "dev-stack/grafana/pgbridge-dashboard.json"

#: What a Prometheus sample name adds to its family's name.
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created", "_info")


def queried_families() -> set[str]:
    """The metric families the dashboard's queries read (sample suffixes removed)."""
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    names: set[str] = set()
    for panel in document["panels"]:
        for target in panel.get("targets", []):
            names.update(re.findall(r"\bpgbridge_[a-z_]+", target["expr"]))
    return {_family(name) for name in names}


def _family(sample: str) -> str:
    for suffix in _SUFFIXES:
        if sample.endswith(suffix):
            return sample.removesuffix(suffix)
    return sample


def exported_families(scrape: str) -> set[str]:
    """The families a Prometheus text exposition declares (``# TYPE`` lines; a labelled metric
    with no samples yet is declared too)."""
    return {_family(line.split()[2]) for line in scrape.splitlines() if line.startswith("# TYPE ")}


def of_apply(families: set[str]) -> set[str]:
    return {f for f in families if f.startswith("pgbridge_apply_")}


def of_run(families: set[str]) -> set[str]:
    return {f for f in families if not f.startswith("pgbridge_apply_")}
