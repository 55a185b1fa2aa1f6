"""Component models (VAE, RBM) and the DPGM estimator (Alg. 3, Sec. 5.1.4)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError

from fedleak.dpgm.components import BernoulliRBM, make_component
from fedleak.dpgm.estimator import DPGM, calibrate_sigma_g
from fedleak.errors import ConfigError, DataError
from fedleak.privacy.accounting import dpgm_epsilon

torch.set_num_threads(1)


def _tiny(n: int = 120, m: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    protos = (rng.random((2, m)) < 0.4).astype(np.float32)
    return np.abs(protos[rng.integers(0, 2, n)] - (rng.random((n, m)) < 0.05)).astype(
        np.float32
    )


def test_rbm_loss_gradient_is_the_contrastive_divergence_update() -> None:
    rbm = BernoulliRBM(6, 4, cd_steps=1, seed=0)
    x = torch.bernoulli(
        torch.full((5, 6), 0.5), generator=torch.Generator().manual_seed(1)
    )
    generator = torch.Generator().manual_seed(2)
    loss = rbm.per_sample_loss(x, generator).sum()
    grad_w, grad_b = torch.autograd.grad(
        loss, [rbm.hidden.weight, rbm.visible_bias.weight]
    )
    # replay the same chain to get v_k, then the textbook CD-1 gradient
    replay = torch.Generator().manual_seed(2)
    v_k = torch.bernoulli(rbm.gibbs(x, 1, replay), generator=replay)
    w, c = rbm.hidden.weight.detach(), rbm.hidden.bias.detach()
    h0, hk = torch.sigmoid(x @ w.T + c), torch.sigmoid(v_k @ w.T + c)
    expected = -(h0.T @ x - hk.T @ v_k)
    torch.testing.assert_close(grad_w, expected)
    torch.testing.assert_close(grad_b.squeeze(0), -(x - v_k).sum(0))


def test_components_have_the_seed_sizes_and_density_prior() -> None:
    vae = make_component("vae", 20, density_prior=0.1, seed=0)
    sizes = [p.shape for p in vae.module.parameters()]
    assert (200, 20) in sizes and (2, 200) in sizes
    output_bias = dict(vae.module.named_parameters())["to_output.bias"]
    assert float(output_bias[0].detach()) == pytest.approx(math.log(0.1 / 0.9))
    two = make_component("vae2", 20, seed=0)
    assert sum(p.numel() for p in two.module.parameters()) > sum(
        p.numel() for p in vae.module.parameters()
    )
    rbm = make_component("rbm", 20, density_prior=0.1, seed=0)
    assert dict(rbm.module.named_parameters())["hidden.weight"].shape == (200, 20)
    generator = torch.Generator().manual_seed(0)
    assert rbm.per_sample_loss(torch.ones(3, 20), generator).shape == (3,)
    samples = rbm.sample(4, generator, binary=True)
    assert samples.shape == (4, 20)
    assert set(np.unique(samples.numpy()).tolist()) <= {0.0, 1.0}
    with pytest.raises(ConfigError):
        make_component("gan", 20)  # type: ignore[arg-type]


def test_dpgm_fit_is_deterministic_for_a_seed_and_reports_epsilon() -> None:
    x = _tiny()
    kwargs: dict[str, Any] = dict(
        sigma_g=1.2, epochs=2, batch_size=20, hidden=16, seed=3, sigma_c=4.0
    )
    a = DPGM(1, **kwargs).fit(x)
    b = DPGM(1, **kwargs).fit(x)
    np.testing.assert_array_equal(a.sample(30), b.sample(30))
    assert a.steps_ == 12
    expected = dpgm_epsilon(
        q=20 / 120,
        sgd_steps=12,
        sigma_g=1.2,
        sigma_c=4.0,
        kmeans_iterations=0,
        sigma_k=None,
        delta=1 / 120,
    )
    assert a.epsilon_ == pytest.approx(expected)
    assert a.delta_ == pytest.approx(1 / 120)
    assert len(a.clip_norms_) == 12


def test_dpgm_meets_a_target_epsilon_and_weighs_components_by_noisy_size() -> None:
    x = _tiny(200)
    public = _tiny(10, seed=9)
    model = DPGM(
        2,
        component="rbm",
        epsilon=8.0,
        epochs=1,
        batch_size=25,
        hidden=8,
        kmeans_iterations=3,
        sigma_k=40.0,
        rff_dim=20,
        seed=0,
        adaptive_clipping=False,
    ).fit(x, public=public)
    assert model.epsilon_ <= 8.0
    assert model.epsilon_ > 7.0
    # Sec. 5.1.4: the weights are the released noisy cluster sizes, normalised
    sizes = np.maximum(model.clustering_.noisy_sizes, 0.0)
    np.testing.assert_allclose(model.weights_, sizes / sizes.sum())
    out = model.sample(50)
    assert out.shape == (50, 16)
    assert model.sample_component(1, 3).shape == (3, 16)


def test_dpgm_refuses_an_unmeetable_budget_before_training() -> None:
    x = _tiny()
    with pytest.raises(ConfigError, match=r"cannot meet epsilon=0\.5"):
        DPGM(2, epsilon=0.5, sigma_k=2.0, epochs=1, batch_size=10).fit(x, public=x[:4])
    with pytest.raises(ConfigError, match="public"):
        DPGM(2, sigma_g=1.0).fit(x)
    with pytest.raises(ConfigError, match="exactly one"):
        DPGM(1, sigma_g=1.0, epsilon=1.0).fit(x)
    with pytest.raises(DataError):
        DPGM(1, sigma_g=1.0).fit(x * 3)
    with pytest.raises(NotFittedError, match="fit"):
        DPGM(1, sigma_g=1.0).sample(3)


def test_calibrated_sigma_g_is_tight() -> None:
    common: dict[str, Any] = dict(
        q=0.05,
        sgd_steps=100,
        delta=1e-4,
        sigma_c=None,
        kmeans_iterations=0,
        sigma_k=None,
    )
    sigma = calibrate_sigma_g(2.0, **common)
    assert dpgm_epsilon(sigma_g=sigma, **common) <= 2.0
    assert dpgm_epsilon(sigma_g=sigma * 0.99, **common) > 2.0


def test_progress_callback_sees_the_training() -> None:
    seen = []
    DPGM(
        1,
        sigma_g=1.0,
        epochs=1,
        batch_size=30,
        adaptive_clipping=False,
        hidden=8,
        seed=0,
        progress=lambda phase, done, total: seen.append((phase, done, total)),
    ).fit(_tiny())
    assert seen[-1] == ("train", 4, 4)


# ------------------------------------------------ Alg. 5 and Sec. 5.1.4 sampling


class _ConstantComponent:
    """Stands in for a trained component: every record it generates is ``value``."""

    def __init__(self, value: float, m: int) -> None:
        self.value, self.m = value, m

    def sample(self, n: int, generator: torch.Generator, *, binary: bool = True):
        return torch.full((n, self.m), self.value)


def _fitted_mixture(weights: list[float], m: int = 4) -> DPGM:
    model = DPGM(len(weights), sigma_g=1.0)
    model.components_ = [_ConstantComponent(float(b), m) for b in range(len(weights))]  # type: ignore[list-item]
    model.weights_ = np.asarray(weights)
    model.n_features_in_, model.n_samples_fit_ = m, 100
    model._sample_rng = np.random.default_rng(0)
    return model


def test_sampling_picks_components_in_proportion_to_the_weights() -> None:
    """Sec. 5.1.4: a record comes from component b with probability w_b.

    4000 records from weights (0.7, 0.2, 0.1): each share has a standard
    error of at most sqrt(0.25 / 4000) = 0.008; the tolerance 0.03 is about
    four of them, while uniform picking (1/3 each) misses by 0.23 or more.
    """
    out = _fitted_mixture([0.7, 0.2, 0.1]).sample(4000, seed=5)
    shares = np.bincount(out[:, 0].astype(int), minlength=3) / 4000
    np.testing.assert_allclose(shares, [0.7, 0.2, 0.1], atol=0.03)
    assert (out == out[:, :1]).all()  # whole rows come from one component
    # a zero weight is never picked
    never = _fitted_mixture([0.5, 0.0, 0.5]).sample(2000, seed=1)
    assert not (never[:, 0] == 1).any()


class _CountingDPSGD:
    """Records, per component, the steps taken and the batch sizes seen."""

    steps: ClassVar[dict[int, list[int]]] = {}

    def __init__(self, module: torch.nn.Module, **_: Any) -> None:
        self.key = id(module)
        _CountingDPSGD.steps.setdefault(self.key, [])

    def step(self, per_sample_loss: Any):
        size = 0 if per_sample_loss is None else int(per_sample_loss().shape[0])
        _CountingDPSGD.steps[self.key].append(size)
        return SimpleNamespace(clip_norm=1.0)

    def close(self) -> None:
        return None


def test_training_picks_a_component_by_cluster_size_and_batches_at_rate_q(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Alg. 5: step t trains model b with probability |X_b| / |X|, on a
    Poisson batch of rate L / |X_b| (so each record is used with rate L / |X|).

    Clusters of 240 and 60 of 300 records, 20 epochs of L = 30: 200 steps,
    the larger cluster's share 0.8 has standard error sqrt(0.16 / 200) = 0.028;
    the tolerance 0.12 is four of them, and uniform picking (0.5) fails it.
    Mean batch sizes (L = 30) are compared within 4 standard errors too.
    """
    n, m = 300, 6
    labels = np.repeat([0, 1], [240, 60])
    clustering = SimpleNamespace(labels=labels, noisy_sizes=np.array([250.0, 50.0]))
    monkeypatch.setattr(
        "fedleak.dpgm.estimator.private_kernel_kmeans", lambda *a, **k: clustering
    )
    _CountingDPSGD.steps = {}
    monkeypatch.setattr("fedleak.dpgm.estimator.DPSGD", _CountingDPSGD)
    x = _tiny(n, m)
    model = DPGM(
        2,
        component="rbm",
        sigma_g=1.0,
        epochs=20,
        batch_size=30,
        hidden=4,
        adaptive_clipping=False,
        seed=0,
    ).fit(x, public=x[:5])
    np.testing.assert_allclose(model.weights_, [250 / 300, 50 / 300])
    sizes = [_CountingDPSGD.steps[id(c.module)] for c in model.components_]
    assert model.steps_ == 200 == len(sizes[0]) + len(sizes[1])
    assert len(sizes[0]) / 200 == pytest.approx(0.8, abs=0.12)
    for cluster, batches in zip((240, 60), sizes, strict=True):
        # Binomial(cluster, 30 / cluster) batches: std sqrt(30 (1 - 30/cluster))
        se = math.sqrt(30 * (1 - 30 / cluster) / len(batches))
        assert np.mean(batches) == pytest.approx(30, abs=4 * se + 0.5)
