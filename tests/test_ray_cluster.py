"""`--ray-address`: the same experiment on an existing Ray cluster (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedleak.experiments.results import check_results

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


@pytest.mark.in_default_run
def test_run_on_an_existing_ray_cluster(tmp_path, ray_cluster, monkeypatch):
    # the address comes from --ray-address alone, not from the environment
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
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
            ray_cluster,
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
