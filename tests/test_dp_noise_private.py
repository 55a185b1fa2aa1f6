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
import torch

# these tests check NumPy's global (legacy) generator on purpose
# ruff: noqa: NPY002
from cli_process import run_fedleak as fedleak
from fedleak.clients.defenses import DefendedClient
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict

from fedleak import protocol
from fedleak.defenses import NOISE_SEED_KEY, ClientDefenses
from fedleak.errors import ConfigError
from fedleak.experiments.config import validate
from fedleak.privacy.dpsgd import dp_sgd_train
from fedleak.privacy.randomness import noise_generator
from fedleak.runtime.noise import NoiseStream
from fedleak.task import TaskSpec

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


# --- the clients' record-level DP-SGD noise ---------------------------------

SPEC = TaskSpec(dataset="digits", num_partitions=2, model="mlp", batch_size=32, seed=5)


def defended(noise_multiplier: float, noise_seed: int | None, mode: str):
    config = ConfigRecord(
        {
            **SPEC.to_config(),
            protocol.SERVER_ROUND: 3,
            protocol.TRAIN_MODE: mode,
            protocol.LOCAL_EPOCHS: 1,
            "defenses.dp_noise_multiplier": noise_multiplier,
            "defenses.dp_max_grad_norm": 1.0,
        }
    )
    if noise_seed is not None:
        config[NOISE_SEED_KEY] = noise_seed
    client = DefendedClient(SPEC, 0, ClientDefenses.from_config(config))
    context = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 2},
        state=RecordDict(),
        run_config={},
    )
    client.bind(context, config)
    return client, config


def initial() -> ArrayRecord:
    return ArrayRecord(SPEC.new_model().state_dict())


def flat(record: ArrayRecord) -> np.ndarray:
    return np.concatenate([a.numpy().ravel() for a in record.values()])


def gradient(noise_multiplier: float, noise_seed: int | None) -> np.ndarray:
    client, _ = defended(noise_multiplier, noise_seed, protocol.MODE_GRADIENT)
    out, _ = client.gradient_reply(initial(), ConfigRecord())
    return flat(out)


def trained(noise_multiplier: float, noise_seed: int | None) -> np.ndarray:
    client, config = defended(noise_multiplier, noise_seed, protocol.MODE_MODEL)
    out, _ = client.model_reply(initial(), config, 3)
    return flat(out)


def test_the_noise_generator_is_fresh_unless_seeded():
    assert noise_generator(None).integers(2**63) != noise_generator(None).integers(
        2**63
    )
    assert noise_generator(7, 1, 2).integers(2**63) == noise_generator(
        7, 1, 2
    ).integers(2**63)
    assert noise_generator(7, 1, 2).integers(2**63) != noise_generator(
        7, 1, 3
    ).integers(2**63)
    with pytest.raises(ConfigError, match="noise_seed"):
        noise_generator(-1)


def test_client_dp_sgd_gradient_noise_is_fresh_by_default_and_seeded_on_request():
    # same experiment seed, same batch: two clients differ by their noise only,
    # N(0, (1.0 * 1.0)^2) / 32 per coordinate each, so the difference has std
    # sqrt(2) / 32; over the MLP's ~20k coordinates the empirical std sits
    # within 3% of it (a standard error of 0.5%), a shared batch or stream not
    expected = np.sqrt(2.0) * 1.0 / SPEC.batch_size
    difference = gradient(1.0, None) - gradient(1.0, None)
    assert difference.size > 10_000
    assert abs(difference.std() / expected - 1.0) < 0.03, difference.std()
    np.testing.assert_array_equal(gradient(0.0, None), gradient(0.0, None))
    np.testing.assert_array_equal(gradient(1.0, 42), gradient(1.0, 42))
    assert not np.array_equal(gradient(1.0, 42), gradient(1.0, 43))


def test_client_dp_sgd_training_samples_by_the_seed_and_noises_by_entropy():
    # without noise the Poisson batches alone decide the model: the same
    # experiment seed gives the same model, so batch sampling stays seeded
    np.testing.assert_array_equal(trained(0.0, None), trained(0.0, None))
    assert not np.array_equal(trained(1.0, None), trained(1.0, None))
    np.testing.assert_array_equal(trained(1.0, 42), trained(1.0, 42))


def test_dp_sgd_refuses_a_noise_generator_in_secure_mode():
    x, y = torch.zeros(8, 4), torch.zeros(8, dtype=torch.int64)
    with pytest.raises(ConfigError, match="secure mode"):
        dp_sgd_train(
            torch.nn.Linear(4, 2), x, y, epochs=1, batch_size=4, lr=0.1,
            noise_multiplier=1.0, max_grad_norm=1.0, seed=None,
            noise_rng=noise_generator(None), secure_mode=True,
        )  # fmt: skip


CLIENT_DP = """\
[defenses]
dp_noise_multiplier = 1.0
dp_max_grad_norm = 1.0
"""


@pytest.mark.slow
def test_client_dp_sgd_runs_add_different_noise_unless_a_noise_seed_is_set(tmp_path):
    no_wrapper = '[privacy]\nwrapper = "none"\n'
    base = DP_EXPERIMENT.split("[privacy]")[0].replace("rounds = 2", "rounds = 1")

    def run(name: str, extra: str) -> tuple[dict, dict]:
        config = tmp_path / f"{name}.toml"
        config.write_text(base + CLIENT_DP + extra)
        out = tmp_path / name
        result = fedleak(
            "run", str(config), "--out", str(out), cwd=tmp_path, timeout=300
        )
        assert result.returncode == 0, result.stderr
        with np.load(out / "model.npz") as model:
            arrays = {k: model[k] for k in model.files}
        return json.loads((out / "results.json").read_text()), arrays

    first, model_1 = run("a", no_wrapper)
    _, model_2 = run("b", no_wrapper)
    assert first["privacy"]["noise"] == "os-entropy"
    assert any(not np.array_equal(model_1[k], model_2[k]) for k in model_1)
    seeded = no_wrapper + "noise_seed = 42\n"
    third, model_3 = run("c", seeded)
    _, model_4 = run("d", seeded)
    assert third["privacy"]["noise_reproducible"] is True
    for key in model_3:
        np.testing.assert_array_equal(model_3[key], model_4[key])
