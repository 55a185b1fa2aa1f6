"""Seed 003's latent d_x-privacy framework: the mechanism, sensitivity, label transfer."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from sklearn.datasets import load_digits
from sklearn.exceptions import NotFittedError

from fedleak.errors import ConfigError, DataError
from fedleak.synth.latent import (
    LabelTransfer,
    LatentSynthesizer,
    dx_noise,
    dx_privatize,
    empirical_sensitivity,
    synthesize,
)


@pytest.mark.parametrize("k,epsilon", [(1, 0.5), (2, 2.0), (20, 0.7)])
def test_radius_is_gamma_k_over_epsilon(k: int, epsilon: float) -> None:
    noise = dx_noise(4000, k, epsilon, np.random.default_rng(k))
    radius = np.linalg.norm(noise, axis=1)
    ks = stats.kstest(radius, stats.gamma(a=k, scale=1 / epsilon).cdf)
    assert ks.pvalue > 0.01
    # A wrong shape (k - 1) or scale (epsilon) is rejected by the same test.
    assert (
        stats.kstest(radius, stats.gamma(a=k + 1, scale=1 / epsilon).cdf).pvalue < 0.01
    )
    assert stats.kstest(radius, stats.gamma(a=k, scale=1.5 / epsilon).cdf).pvalue < 0.01


@pytest.mark.parametrize("k", [2, 3, 20])
def test_direction_is_isotropic(k: int) -> None:
    noise = dx_noise(4000, k, 1.0, np.random.default_rng(100 + k))
    unit = noise / np.linalg.norm(noise, axis=1, keepdims=True)
    # Each coordinate of a uniform point on S^(k-1): (u_1 + 1) / 2 ~ Beta((k-1)/2, (k-1)/2).
    beta = stats.beta((k - 1) / 2, (k - 1) / 2)
    for axis in (0, k - 1):
        assert stats.kstest((unit[:, axis] + 1) / 2, beta.cdf).pvalue > 0.005
    # Second moments: E[u u^T] = I / k.
    np.testing.assert_allclose(unit.T @ unit / len(unit), np.eye(k) / k, atol=0.03)
    assert np.abs(unit.mean(axis=0)).max() < 0.05


def test_one_dimensional_mechanism_is_laplace() -> None:
    # k = 1: density proportional to exp(-epsilon |z' - z|), i.e. Laplace(1/epsilon).
    z = np.full((5000, 1), 3.0)
    out = dx_privatize(z, 2.0, np.random.default_rng(0))
    assert stats.kstest(out[:, 0], stats.laplace(loc=3.0, scale=0.5).cdf).pvalue > 0.01


def test_mechanism_seeding_and_infinite_epsilon() -> None:
    z = np.random.default_rng(0).normal(size=(10, 4))
    a = dx_privatize(z, 1.0, np.random.default_rng(5))
    b = dx_privatize(z, 1.0, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(
        dx_privatize(z, math.inf, np.random.default_rng(5)), z
    )
    scaled = dx_noise(3000, 4, 1.0, np.random.default_rng(1), scale=10.0)
    assert np.linalg.norm(scaled, axis=1).mean() == pytest.approx(40.0, rel=0.05)
    with pytest.raises(ConfigError, match=r"epsilon must be in \(0, inf\]"):
        dx_noise(3, 2, 0.0, np.random.default_rng(0))
    with pytest.raises(DataError, match="2-d"):
        dx_privatize(np.zeros(3), 1.0, np.random.default_rng(0))


def test_empirical_sensitivity() -> None:
    codes = np.random.default_rng(0).standard_normal((20000, 20))
    assert empirical_sensitivity(codes) == pytest.approx(6 * math.sqrt(20), rel=0.02)
    small = codes[:300]
    exact = max(np.linalg.norm(a - b) for a in small for b in small)
    assert empirical_sensitivity(small, "max_pairwise") == pytest.approx(exact)
    with pytest.raises(ConfigError, match="rule"):
        empirical_sensitivity(small, "range")  # type: ignore[arg-type]


def test_label_transfer_labels_noisy_codes() -> None:
    rng = np.random.default_rng(0)
    centres = np.array([[4.0, 0.0], [-4.0, 0.0], [0.0, 4.0]])
    labels = rng.integers(3, size=600)
    codes = centres[labels] + rng.normal(size=(600, 2))
    model = LabelTransfer().fit(codes, labels)
    noisy = dx_privatize(codes, 5.0, rng)
    assert np.mean(model.predict(noisy) == labels) > 0.9


@pytest.mark.slow
def test_synthesizer_on_digits() -> None:
    x, y = load_digits(return_X_y=True)
    x = (x[:400] / 16).reshape(-1, 8, 8).astype(np.float32)
    y = y[:400]
    synth = LatentSynthesizer(
        hidden=(64,), latent_dim=4, epochs=60, batch_size=32, lr=3e-3
    )
    synth.fit(x, y, seed=0)
    assert synth.sensitivity > 0
    clean = synth.synthesize(x, y, math.inf, seed=1)
    private = synth.synthesize(x, y, 0.05, seed=1)
    assert clean.x.shape == x.shape and clean.y.shape == y.shape
    assert private.x.min() >= 0.0 and private.x.max() <= 1.0
    assert clean.label_agreement > 0.5 > private.label_agreement
    assert np.abs(clean.x - x).mean() < np.abs(private.x - x).mean()
    assert private.epsilon_dp == pytest.approx(0.05 * synth.sensitivity)
    again = synth.synthesize(x, y, 0.05, seed=1)
    np.testing.assert_array_equal(again.x, private.x)
    x_syn, y_syn = synthesize(
        x[:100], y[:100], 1.0, seed=3, hidden=(32,), latent_dim=3, epochs=2
    )
    assert x_syn.shape == (100, 8, 8) and y_syn.dtype == np.int64
    scaled = LatentSynthesizer(
        hidden=(32,), latent_dim=3, epochs=2, scale_by_sensitivity=True
    )
    data = scaled.fit(x, y, seed=0).synthesize(x, y, 2.0, seed=0)
    assert data.noise_scale == pytest.approx(scaled.sensitivity)
    assert data.epsilon_dp == pytest.approx(2.0)


def test_synthesizer_input_errors() -> None:
    with pytest.raises(NotFittedError, match="fit"):
        LatentSynthesizer().synthesize(np.zeros((2, 4)), np.zeros(2, dtype=int), 1.0)
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        LatentSynthesizer(epochs=1).fit(np.full((4, 4), 2.0), np.zeros(4, dtype=int))


@pytest.mark.slow
def test_bench_ppgf_quick_writes_json_and_plots(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from fedleak.cli import app

    out = tmp_path / "ppgf.json"
    result = CliRunner().invoke(app, ["bench", "ppgf", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 1 and doc["benchmark"] == "ppgf"
    assert doc["complete"] is True
    assert doc["setup"]["latent_sensitivity"] > 0
    methods = [r["method"] for r in doc["rows"]]
    assert methods == [
        "reference",
        "source",
        "reconstruction",
        "ppgf",
        "ppgf",
        "dp-sgd",
        "dp-sgd",
    ]
    for row in doc["rows"]:
        for attack in ("black_box", "loss_threshold", "white_box"):
            assert 0.0 <= row[attack]["auc"] <= 1.0
        assert 0.0 <= row["test_accuracy"] <= 1.0
    dpsgd = [r for r in doc["rows"] if r["method"] == "dp-sgd"]
    assert [r["epsilon_dp"] for r in dpsgd] == pytest.approx([2.0, 10.0], rel=0.02)
    assert set(doc["summary"]["accuracy_ratio_ppgf_vs_dpsgd"]) == {"2.0", "10.0"}
    assert all((tmp_path / p.split("/")[-1]).exists() for p in doc["plots"])
