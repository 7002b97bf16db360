"""CONTRIBUTING.md's layout map names every part of the package, so it cannot fall behind the
tree (#34: "the layout map in the docs matches the tree")."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _layout_map() -> str:
    text = (REPO / "CONTRIBUTING.md").read_text()
    blocks = re.findall(r"```\n(bridge/.*?)```", text, flags=re.S)
    assert blocks, "CONTRIBUTING.md has no layout map (code blocks of bridge/ paths)"
    return "\n".join(blocks)


def test_every_module_and_package_of_bridge_is_in_the_layout_map() -> None:
    layout = _layout_map()
    package = REPO / "bridge"
    parts = [p for p in package.iterdir() if p.suffix == ".py" and p.name != "__init__.py"]
    parts += [p for p in package.iterdir() if (p / "__init__.py").exists()]
    missing = []
    for part in sorted(parts):
        name = f"bridge/{part.name}/" if part.is_dir() else f"bridge/{part.name}"
        # A module may share a line with its neighbour ("bridge/ops/metrics.py, observe.py").
        if name not in layout and not re.search(rf"\b{re.escape(part.name)}\b", layout):
            missing.append(name)
    assert not missing, f"CONTRIBUTING.md's layout map does not name {missing}"


def test_the_layout_map_names_no_module_that_is_gone() -> None:
    layout = _layout_map()
    named = re.findall(r"^(bridge/[\w/]+(?:\.py)?)", layout, flags=re.M)
    gone = [name for name in named if not (REPO / name).exists()]
    assert not gone, f"CONTRIBUTING.md's layout map names {gone}, which are not in the tree"
