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


#: What each lower layer of the streaming core must not import (at module level, in a
#: function, or for type checking alike): arrows point down the path a change travels, so a
#: layer can be read, tested and replaced without the ones above it.
_NOT_BELOW = {
    "native": {"pgoutput", "types", "source", "events", "schema", "sink", "snapshot", "spark"},
    "pgoutput": {"types", "source", "events", "schema", "sink", "snapshot", "spark", "pipeline"},
    "types": {"source", "events", "schema", "sink", "snapshot", "spark", "pipeline"},
    "source": {"events", "snapshot", "spark", "pipeline", "ops", "runner"},
    "sink": {"snapshot", "spark", "pipeline", "ops", "runner"},
    "spark": {"pipeline", "source", "events", "ops", "runner"},
}


def _bridge_imports(path: Path) -> set[str]:
    """The ``bridge`` packages and modules one file imports (first name after ``bridge.``)."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "bridge":
                names = [f"bridge.{alias.name}" for alias in node.names]
        found.update(n.split(".")[1] for n in names if n.startswith("bridge.") and "." in n)
    return found


def test_no_layer_of_the_core_imports_one_above_it() -> None:
    upward = []
    for layer, above in _NOT_BELOW.items():
        for path in sorted((REPO / "bridge" / layer).rglob("*.py")):
            for name in sorted(_bridge_imports(path) & above):
                upward.append(f"{path.relative_to(REPO)} imports bridge.{name}")
    assert not upward, "imports against the core's direction:\n" + "\n".join(upward)
