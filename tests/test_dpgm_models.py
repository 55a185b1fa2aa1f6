"""Component models (VAE, RBM) and the DPGM estimator (Alg. 3, Sec. 5.1.4)."""

from __future__ import annotations

import math
from typing import Any

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


@pytest.mark.slow
def test_dpgm_meets_a_target_epsilon_and_samples_in_proportion() -> None:
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
    assert model.weights_.sum() == pytest.approx(1.0)
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
