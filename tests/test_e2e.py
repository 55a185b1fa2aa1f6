"""End-to-end Flower simulations on Ray (slow: seconds each)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedleak.experiments import run_experiment
from fedleak.experiments.config import validate
from fedleak.experiments.results import check_results

pytestmark = pytest.mark.slow

FEDLEAK = str(Path(sys.executable).with_name("fedleak"))


def tiny(strategy: str, rounds: int = 2, **sections: dict) -> dict:
    raw: dict = {
        "name": f"e2e-{strategy}",
        "seed": 11,
        "rounds": rounds,
        "data": {"dataset": "digits"},
        "model": {"name": "mlp"},
        "strategy": {"name": strategy, "learning_rate": 0.1},
        "client": {"batch_size": 16},
        "federation": {"num_clients": 3},
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return raw


def run(raw: dict, out: Path) -> dict:
    outcome = run_experiment(validate(raw, "test", "test"), out=out)
    on_disk = json.loads((out / "results.json").read_text())
    assert check_results(on_disk) == []
    assert on_disk["final"] == outcome.results["final"]
    return on_disk


@pytest.mark.parametrize("strategy", ["sync-sgd", "model-averaging"])
def test_three_clients_two_rounds(tmp_path, strategy):
    results = run(tiny(strategy), tmp_path / "run")
    assert len(results["rounds"]) == 2
    for row in results["rounds"]:
        assert row["train"]["num-replies"] == 3
        assert row["train"]["num-errors"] == 0
        assert row["train"]["num-missing"] == 0
        assert 0.0 <= row["server"]["test-accuracy"] <= 1.0
    assert (tmp_path / "run" / "curves.png").stat().st_size > 1000
    assert (tmp_path / "run" / "config.toml").exists()
    rounds_log = (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in rounds_log] == [0, 1, 2]
    model = np.load(tmp_path / "run" / "model.npz")
    assert "net.1.weight" in model


@pytest.mark.in_default_run
def test_same_seed_same_numbers(tmp_path):
    raw = tiny("sync-sgd", rounds=3)
    first = run(raw, tmp_path / "a")
    second = run(raw, tmp_path / "b")
    assert first["rounds"] == second["rounds"]
    assert first["final"] == second["final"]


@pytest.mark.parametrize(
    "strategy",
    [pytest.param("sync-sgd", marks=pytest.mark.in_default_run), "model-averaging"],
)
def test_the_fast_engine_changes_no_result(tmp_path, strategy):
    """Same seed, same numbers with fedleak's engine (batches through actor
    channels or Ray calls, or one message per actor call) and with Flower's
    polling."""
    fast = run(tiny(strategy, rounds=3), tmp_path / "fast")
    calls = run(
        tiny(strategy, rounds=3, federation={"actor_channels": False}),
        tmp_path / "calls",
    )
    single = run(
        tiny(strategy, rounds=3, federation={"actor_batch": 1}), tmp_path / "single"
    )
    slow = run(
        tiny(strategy, rounds=3, federation={"engine": "flower"}), tmp_path / "slow"
    )
    for other, folder in ((calls, "calls"), (single, "single"), (slow, "slow")):
        assert fast["rounds"] == other["rounds"], folder
        assert fast["final"] == other["final"], folder
        fast_model = np.load(tmp_path / "fast" / "model.npz")
        other_model = np.load(tmp_path / folder / "model.npz")
        for name in fast_model:
            assert np.array_equal(fast_model[name], other_model[name]), name
    assert single["timing"]["engine"]["actor_batch"] == 1
    assert single["timing"]["engine"]["actor_channels"] is False  # nothing to batch
    assert calls["timing"]["engine"]["actor_channels"] is False
    assert fast["timing"]["engine"] == {
        "engine": "fedleak",
        "poll_interval": 0.002,
        "wake_ups": True,
        "actor_batch": 16,
        "actor_channels": True,
    }
    assert slow["timing"]["engine"] == {
        "engine": "flower",
        "poll_interval": 0.1,
        "wake_ups": False,
        "actor_batch": 1,
        "actor_channels": False,
    }


def test_results_split_every_round_into_waiting_compute_and_server_work(tmp_path):
    results = run(tiny("sync-sgd", rounds=3), tmp_path / "run")
    timing = results["timing"]
    assert [row["round"] for row in timing["rounds"]] == [1, 2, 3]
    assert timing["round_s"] == [row["wall_s"] for row in timing["rounds"]]
    for row in timing["rounds"]:
        # a train exchange with 3 replies and the (empty) evaluate exchange;
        # round 1 also asks for the partition ids: one node alone first (the
        # probe), then the other 2
        first = row["round"] == 1
        assert row["exchanges"] == (4 if first else 2)
        assert row["replies"] == (6 if first else 3)
        assert 0 < row["client_compute_max_s"] <= row["client_compute_s"]
        # waiting for replies and evaluating are disjoint spans inside the
        # round's wall time
        assert row["wait_s"] > 0 and row["evaluate_s"] > 0
        assert row["wait_s"] + row["evaluate_blocked_s"] <= row["wall_s"]
        assert row["server_s"] == pytest.approx(
            row["wall_s"] - row["wait_s"] - row["evaluate_blocked_s"]
        )
    lines = (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in lines]
    assert "timing" not in logged[0] and [r["timing"] for r in logged[1:]] == [
        {k: v for k, v in row.items() if k != "round"} for row in timing["rounds"]
    ]
    assert all("timing" not in row for row in results["rounds"])


def test_flower_dp_wrapper_around_model_averaging_completes(tmp_path):
    raw = tiny(
        "model-averaging",
        privacy={
            "wrapper": "server-fixed-clipping",
            "noise_multiplier": 0.1,
            "clipping_norm": 1.0,
        },
    )
    results = run(raw, tmp_path / "dp")
    assert results["config"]["privacy"]["wrapper"] == "server-fixed-clipping"
    assert all(row["train"]["num-replies"] == 3 for row in results["rounds"])


def test_fedleak_run_command_writes_valid_results(tmp_path):
    config = tmp_path / "cli.toml"
    config.write_text(
        "name = 'cli'\nrounds = 2\nseed = 5\n[model]\nname = 'mlp'\n"
        "[strategy]\nname = 'fedavg'\nlearning_rate = 0.1\n[federation]\nnum_clients = 3\n"
    )
    out = tmp_path / "out"
    result = subprocess.run(
        [FEDLEAK, "run", str(config), "--out", str(out), "--set", "rounds=3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert check_results(results) == []
    assert results["config"]["rounds"] == 3
    assert "final test accuracy" in result.stdout
    assert "DEPRECATED" not in result.stderr


def test_evaluating_every_second_round_changes_no_training(tmp_path):
    every_round = run(tiny("sync-sgd", rounds=5), tmp_path / "all")
    sparse = run(tiny("sync-sgd", rounds=5, evaluation={"every": 2}), tmp_path / "two")
    evaluated = [r["round"] for r in sparse["rounds"] if "test-accuracy" in r["server"]]
    assert evaluated == [2, 4, 5]  # every second round, and the last
    for dense_row, sparse_row in zip(
        every_round["rounds"], sparse["rounds"], strict=True
    ):
        assert sparse_row["train"] == dense_row["train"]
        if sparse_row["server"]:
            assert sparse_row["server"] == dense_row["server"]
    assert sparse["final"] == every_round["final"]
    log = (tmp_path / "two" / "rounds.jsonl").read_text().splitlines()
    assert "test-accuracy" in json.loads(log[0])["server"]  # round 0: the start


def test_evaluating_in_the_background_changes_no_result(tmp_path):
    serial = run(tiny("sync-sgd", rounds=4), tmp_path / "a")
    overlapped = run(
        tiny("sync-sgd", rounds=4, evaluation={"overlap": True}), tmp_path / "b"
    )
    assert serial["config"]["evaluation"]["overlap"] is False  # the default
    assert overlapped["rounds"] == serial["rounds"]
    assert overlapped["final"] == serial["final"]
    for name, values in np.load(tmp_path / "a" / "model.npz").items():
        assert np.array_equal(np.load(tmp_path / "b" / "model.npz")[name], values)
    for row in serial["timing"]["rounds"]:  # no overlap: blocked = evaluating
        assert row["evaluate_blocked_s"] == row["evaluate_s"] > 0
    logged = (tmp_path / "b" / "rounds.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in logged] == [0, 1, 2, 3, 4]
