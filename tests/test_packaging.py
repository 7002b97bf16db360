"""A built wheel is all a user who does not clone the repository needs: the static Avro schemas
inside the package, the C accelerator compiled, ``pgbridge --version``.

Integration: building the wheel takes setuptools from PyPI (pip's build isolation).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bridge import __version__

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]


def test_packaging_wheel_carries_schemas_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(REPO)],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("pgbridge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    schemas = sorted(p.name for p in (REPO / "schemas").glob("*.avsc"))
    assert schemas and all(f"bridge/avro_schemas/{name}" in names for name in schemas)
    assert any(n.startswith("bridge/native/_speedups") and n.endswith(".so") for n in names)

    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    probe = (
        "import bridge, bridge.native, bridge.schema as s; print(bridge.__file__); "
        "print(s.static_schema('source')['name'], s.static_schema('heartbeat_value')['name']); "
        "print(bridge.native.ENABLED)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    where, source, heartbeat, native = out.stdout.split()
    assert where.startswith(str(site))  # the installed copy, not the checkout
    assert (source, heartbeat) == ("Source", "Heartbeat")  # read from the installed package
    assert native == "True"  # the accelerator was compiled into the wheel
    version = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "--version"], cwd=tmp_path, env=env,
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert version.stdout.strip() == f"pgbridge {__version__}"
