"""The two example Flower apps in ``examples/`` run in Flower's simulation (slow).

Each runs secure FedAvg (``SecureAggregation`` + ``secagg_mod``) and plain
FedAvg on the same simulated federation of 4 nodes, with the example's own
ClientApp and its ServerApp's ``run``; the secured model must equal the plain
one to the fixed-point error (the clients train deterministically, so the two
runs differ only by that rounding, carried through 3 rounds), keep the
model's dtype and learn (evaluation accuracy well above chance).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

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
