"""`--ray-address`: the same experiment on an existing Ray cluster (slow)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fedleak.experiments.results import check_results

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
PORT = "6391"


@pytest.fixture
def ray_head():
    env = {**os.environ, "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
    # Ray's socket paths must stay under ~107 characters: a short temp folder
    temp_dir = tempfile.mkdtemp(prefix="ray")
    start = subprocess.run(
        [
            str(BIN / "ray"),
            "start",
            "--head",
            f"--port={PORT}",
            "--num-cpus=2",
            "--include-dashboard=false",
            f"--temp-dir={temp_dir}",
            "--disable-usage-stats",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    if start.returncode != 0:
        pytest.skip(f"cannot start a local Ray head: {start.stderr[-500:]}")
    try:
        yield f"127.0.0.1:{PORT}"
    finally:
        subprocess.run(
            [str(BIN / "ray"), "stop", "--force"], capture_output=True, timeout=120
        )
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_run_on_an_existing_ray_cluster(tmp_path, ray_head):
    config = tmp_path / "cluster.toml"
    config.write_text(
        "name = 'cluster'\nrounds = 2\n[model]\nname = 'mlp'\n"
        "[federation]\nnum_clients = 3\n"
    )
    out = tmp_path / "out"
    result = subprocess.run(
        [
            str(BIN / "fedleak"),
            "run",
            str(config),
            "--out",
            str(out),
            "--ray-address",
            ray_head,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert check_results(results) == []
    assert all(row["train"]["num-replies"] == 3 for row in results["rounds"])
