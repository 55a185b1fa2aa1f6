"""The wheel installs everything under the one top-level name `fedleak`."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(REPO),
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "-w",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (path,) = out.glob("fedleak-*.whl")
    return zipfile.ZipFile(path)


def test_wheel_adds_no_top_level_module_but_fedleak(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"fedleak"}
    top_level = [n for n in wheel.namelist() if n.endswith("top_level.txt")]
    if top_level:
        assert wheel.read(top_level[0]).decode().split() == ["fedleak"]


def test_wheel_holds_every_source_module_and_the_bundled_configs(wheel):
    names = set(wheel.namelist())
    folders = {
        "fedleak": "fedleak",
        "strategies": "fedleak/strategies",
        "clients": "fedleak/clients",
        "attacks": "fedleak/attacks",
        "sim_configs": "fedleak/sim_configs",
    }
    for folder, installed in folders.items():
        for source in (REPO / folder).rglob("*"):
            if (
                source.suffix in {".py", ".toml", ".typed"}
                and "__pycache__" not in source.parts
            ):
                relative = source.relative_to(REPO / folder).as_posix()
                assert f"{installed}/{relative}" in names, (
                    f"{folder}/{relative} missing from the wheel"
                )
    assert "fedleak/py.typed" in names
    assert "fedleak/sim_configs/quickstart.toml" in names
