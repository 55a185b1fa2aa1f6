"""Flower's own tooling: `flwr run .` runs a fedleak experiment (slow)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedleak.experiments.results import check_results

REPO = Path(__file__).resolve().parents[1]
FLWR = str(Path(sys.executable).with_name("flwr"))

pytestmark = pytest.mark.slow


def _kill_local_superlink(flwr_home: Path) -> None:
    """Stop the SuperLink that `flwr run` started (its command line names FLWR_HOME)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "flower-superlink" in cmdline and str(flwr_home) in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGTERM)


@pytest.mark.skipif(
    not Path("/proc").exists(), reason="needs /proc to stop the SuperLink"
)
@pytest.mark.in_default_run
def test_flwr_run_dot_runs_the_configured_experiment(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO / "pyproject.toml", project)
    shutil.copytree(REPO / "sim_configs", project / "sim_configs")
    flwr_home = tmp_path / "flwr-home"
    flwr_home.mkdir()
    (flwr_home / "config.toml").write_text(
        '[superlink]\ndefault = "local"\n[superlink.local]\naddress = ":local:"\n'
    )
    out = tmp_path / "out"
    env = {
        **os.environ,
        "FLWR_HOME": str(flwr_home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    }
    try:
        result = subprocess.run(
            [
                FLWR,
                "run",
                ".",
                "local",
                "--stream",
                "--run-config",
                f"overrides='rounds=2 model.name=\"mlp\" federation.num_clients=3' out='{out}'",
                "--federation-config",
                "num-supernodes=3",
            ],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        _kill_local_superlink(flwr_home)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert check_results(results) == []
    assert results["config"]["federation"]["num_clients"] == 3
    assert all(row["train"]["num-replies"] == 3 for row in results["rounds"])
    # fedleak's engine reached Flower's simulation process (flower_app installs
    # it when Flower imports the ClientApp, before the engine's threads start)
    assert results["timing"]["engine"] == {
        "engine": "fedleak",
        "poll_interval": 0.002,
        "wake_ups": True,
        "actor_batch": 16,
        "actor_channels": True,
    }
