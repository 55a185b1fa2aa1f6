"""DP noise of ``fedleak run`` is private by default; ``noise_seed`` reproduces it.

Issue of record: ``run_federation`` seeded NumPy's global generator with the
experiment's seed for Flower's DP wrappers, so two runs with the default seed
added the same noise, and anyone who knew the seed could subtract it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

# these tests check NumPy's global (legacy) generator on purpose
# ruff: noqa: NPY002
from cli_process import run_fedleak as fedleak

from fedleak.errors import ConfigError
from fedleak.experiments.config import validate
from fedleak.experiments.server import NoiseStream

ROOT = Path(__file__).resolve().parents[1]

DP_EXPERIMENT = """\
name = "dp-noise"
seed = 0
rounds = 2
[data]
dataset = "digits"
[model]
name = "mlp"
[strategy]
name = "model-averaging"
learning_rate = 0.05
[federation]
num_clients = 2
[privacy]
wrapper = "server-fixed-clipping"
noise_multiplier = 1.0
clipping_norm = 1.0
"""


def test_no_fedleak_code_seeds_a_global_generator():
    pattern = re.compile(r"np\.random\.seed\(|\brandom\.seed\(|numpy\.random\.seed\(")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("fedleak", "strategies", "clients")
        for path in (ROOT / folder).rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_the_noise_stream_leaves_the_global_generator_as_it_was():
    before = np.random.get_state(legacy=True)
    stream = NoiseStream(seed=11)
    with stream.active():
        first = np.random.normal(size=4)
    after = np.random.get_state(legacy=True)
    assert before[0] == after[0] and np.array_equal(before[1], after[1])
    assert before[2] == after[2]
    again = NoiseStream(seed=11)
    with again.active():
        assert np.array_equal(np.random.normal(size=4), first)
    with stream.active():  # the stream goes on where it stopped
        assert not np.array_equal(np.random.normal(size=4), first)


def test_without_a_noise_seed_the_global_generator_is_untouched():
    before = np.random.get_state(legacy=True)
    stream = NoiseStream(seed=None)
    with stream.active():
        inside = np.random.get_state(legacy=True)
    assert np.array_equal(before[1], inside[1]) and not stream.reproducible


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_dp_parameters_are_refused(value):
    for section, key in (
        ("defenses", "dp_noise_multiplier"),
        ("privacy", "noise_multiplier"),
        ("privacy", "clipping_norm"),
    ):
        with pytest.raises(ConfigError, match=f"{section}.{key}"):
            validate({section: {key: float(value)}}, "exp.toml", "exp")


def run_dp(tmp_path: Path, name: str, extra: str = "") -> tuple[dict, dict]:
    config = tmp_path / f"{name}.toml"
    config.write_text(DP_EXPERIMENT + extra)
    out = tmp_path / name
    result = fedleak("run", str(config), "--out", str(out), cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    with np.load(out / "model.npz") as model:
        arrays = {k: model[k] for k in model.files}
    return json.loads((out / "results.json").read_text()), arrays


@pytest.mark.slow
def test_same_seed_runs_add_different_noise_unless_a_noise_seed_is_set(tmp_path):
    first, model_1 = run_dp(tmp_path, "a")
    _, model_2 = run_dp(tmp_path, "b")
    assert first["privacy"]["noise"] == "os-entropy"
    assert first["privacy"]["noise_reproducible"] is False
    # the noise has standard deviation 1.0 * 1.0 / 2 per entry: equal models
    # would mean equal noise
    assert any(not np.array_equal(model_1[k], model_2[k]) for k in model_1)

    seeded = "noise_seed = 42\n"
    third, model_3 = run_dp(tmp_path, "c", seeded)
    _, model_4 = run_dp(tmp_path, "d", seeded)
    assert third["privacy"] == {
        "noise": "noise_seed",
        "noise_reproducible": True,
        "noise_seed": 42,
    }
    for key in model_3:
        np.testing.assert_array_equal(model_3[key], model_4[key])
