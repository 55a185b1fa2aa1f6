"""Secure aggregation in real Flower simulations on Ray (slow)."""

from __future__ import annotations

import numpy as np
import pytest

from fedleak.experiments import run_experiment
from fedleak.experiments.config import validate

pytestmark = pytest.mark.slow


def config(
    strategy: str,
    secure: bool,
    clients: int = 4,
    rounds: int = 3,
    mode: str = "double-masking",
    **faults,
) -> dict:
    return {
        "name": f"sa-{strategy}-{secure}-{mode}",
        "seed": 3,
        "rounds": rounds,
        "data": {"dataset": "digits"},
        "model": {"name": "mlp"},
        "strategy": {"name": strategy, "learning_rate": 0.1},
        "client": {"batch_size": 16},
        "federation": {"num_clients": clients},
        "secure_aggregation": {
            "enabled": secure,
            "metric_names": ["train-loss"],
            "mode": mode,
        },
        "faults": faults,
    }


def final_model(raw: dict, out) -> tuple[dict[str, np.ndarray], dict]:
    outcome = run_experiment(validate(raw, "test", "test"), out=out)
    with np.load(out / "model.npz") as model:
        return {k: model[k] for k in model.files}, outcome.results


@pytest.mark.parametrize(
    ("strategy", "mode"),
    [
        ("sync-sgd", "double-masking"),
        ("model-averaging", "double-masking"),
        ("model-averaging", "thesis"),
    ],
)
def test_secure_runs_give_the_plain_model_to_fixed_point_precision(
    tmp_path, strategy, mode
):
    plain, _ = final_model(config(strategy, False), tmp_path / "plain")
    secure, results = final_model(
        config(strategy, True, mode=mode), tmp_path / "secure"
    )
    for name, value in plain.items():
        assert np.max(np.abs(secure[name] - value)) < 1e-5, name
    for row in results["rounds"]:
        assert row["train"]["num-replies"] == 4
        assert row["train"]["secagg-clipped"] == 0
        assert row["train"]["secagg-refusals"] == 0
        assert row["train"]["secagg-bytes-up-upload"] > 0
        assert (row["train"].get("secagg-bytes-up-shares", 0) > 0) == (
            mode == "double-masking"
        )
        assert np.isfinite(row["train"]["train-loss"])


@pytest.mark.in_default_run
def test_two_clients_crashing_mid_round_leave_the_survivors_sum(tmp_path):
    # 8 clients: a double-masked group of 8 (t = 5) tolerates 2 dropouts
    faults = {"crash_clients": [1, 3], "crash_rounds": [2]}
    plain, _ = final_model(
        config("sync-sgd", False, clients=8, **faults), tmp_path / "plain"
    )
    secure, results = final_model(
        config("sync-sgd", True, clients=8, **faults), tmp_path / "secure"
    )
    for name, value in plain.items():
        assert np.max(np.abs(secure[name] - value)) < 1e-5, name
    crashed = results["rounds"][1]["train"]
    assert crashed["secagg-dropped"] == 2
    assert crashed["num-errors"] == 2
    assert crashed["num-replies"] == 6
    assert crashed["secagg-bytes-up-recover"] > 0
    assert results["rounds"][0]["train"]["secagg-dropped"] == 0
