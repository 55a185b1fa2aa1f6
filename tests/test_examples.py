"""The two example Flower apps in ``examples/`` run in Flower's simulation (slow).

They run through ``run_simulation`` (secure against plain FedAvg, below) and
through Flower's CLI, ``flwr run <example> local``, as Flower users run them.

Each runs secure FedAvg (``SecureAggregation`` + ``secagg_mod``) and plain
FedAvg on the same simulated federation of 4 nodes, with the example's own
ClientApp and its ServerApp's ``run``; the secured model must equal the plain
one to the fixed-point error (the clients train deterministically, so the two
runs differ only by that rounding, carried through 3 rounds), keep the
model's dtype and learn (evaluation accuracy well above chance).
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation
from flwr_processes import flower_env, free_port, kill_local_superlink, write_connection

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

pytestmark = pytest.mark.slow


def _run_example(folder: str, package: str) -> dict[str, Any]:
    sys.path.insert(0, str(EXAMPLES / folder))
    try:
        client = importlib.import_module(f"{package}.client_app")
        server = importlib.import_module(f"{package}.server_app")
        results: dict[str, Any] = {}
        both = ServerApp()

        @both.main()
        def main(grid: Grid, context: Context) -> None:
            results["secure"] = server.run(grid, context, secure=True)
            results["plain"] = server.run(grid, context, secure=False)

        run_simulation(
            server_app=both,
            client_app=client.app,
            num_supernodes=4,
            backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
        )
        return results
    finally:
        sys.path.remove(str(EXAMPLES / folder))


@pytest.mark.parametrize(
    ("folder", "package", "dtype"),
    [
        ("message-api-app", "fedleak_msg_example", np.float64),
        ("numpyclient-app", "fedleak_numpy_example", np.float32),
    ],
)
def test_example_app_secure_equals_plain_fedavg_in_simulation(folder, package, dtype):
    results = _run_example(folder, package)
    secure = results["secure"].arrays.to_numpy_ndarrays()
    plain = results["plain"].arrays.to_numpy_ndarrays()
    for s, p in zip(secure, plain, strict=True):
        assert s.dtype == dtype
        assert np.max(np.abs(p)) > 0.05  # the model moved
        np.testing.assert_allclose(s, p, atol=1e-4)
    accuracy = results["secure"].evaluate_metrics_clientapp[3]["accuracy"]
    assert accuracy > 0.8  # ten classes: chance is 0.1
    train = results["secure"].train_metrics_clientapp[3]
    assert train["num-replies"] == 4 and train["secagg-clipped"] == 0


@pytest.mark.skipif(
    not Path("/proc").exists(), reason="needs /proc to stop the local SuperLink"
)
@pytest.mark.parametrize(
    ("folder", "dtype"),
    [("message-api-app", np.float64), ("numpyclient-app", np.float32)],
)
def test_example_app_runs_with_flwr_run_in_simulation(tmp_path, folder, dtype):
    """``flwr run <example> local`` as a Flower user runs it (offline).

    The CLI starts a local simulation SuperLink (on free ports, so parallel
    runs never share one) with runtime dependency installation off; the
    example's ServerApp records every round's model in ``rounds-file``.
    """
    app = tmp_path / "app"
    shutil.copytree(
        EXAMPLES / folder, app, ignore=shutil.ignore_patterns("__pycache__")
    )
    home = tmp_path / "flwr-home"
    write_connection(home, "local", ":local:")
    rounds_file = tmp_path / "rounds.jsonl"
    env = flower_env(
        home,
        FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(free_port()),
        FLWR_LOCAL_CONTROL_API_PORT=str(free_port()),
    )
    try:
        result = subprocess.run(
            [
                str(Path(sys.executable).with_name("flwr")),
                "run",
                str(app),
                "local",
                "--stream",
                "--run-config",
                f"num-nodes=4 num-server-rounds=2 rounds-file='{rounds_file}'",
                "--federation-config",
                "num-supernodes=4 client-resources-num-cpus=1",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        kill_local_superlink(home)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    records = [json.loads(line) for line in rounds_file.read_text().splitlines()]
    assert [r["round"] for r in records[:-1]] == [0, 1, 2]
    assert all(d == np.dtype(dtype).name for d in records[-2]["dtypes"])
    train = records[-1]["train-metrics"]
    assert [train[r]["num-replies"] for r in ("1", "2")] == [4, 4]
    assert records[-1]["evaluate-metrics"]["2"]["accuracy"] > 0.8
    # every line of the ServerApp comes through once
    assert output.count("[ROUND 1/2]") == 1
    assert output.count("final evaluation:") == 1
