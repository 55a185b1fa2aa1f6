"""DP-SGD (seed 000 Alg. 5): clipping, noise, DPNorm, accounting, determinism."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn

from fedleak.errors import ConfigError, DataError
from fedleak.privacy.accounting import (
    epsilon_from_log_moments,
    sgm_epsilon,
    shared_batch_log_moment,
)
from fedleak.privacy.dpnorm import norm_histogram
from fedleak.privacy.dpsgd import (
    DPSGD,
    AdaptiveClipping,
    FixedClipping,
    dp_sgd_train,
)

torch.set_num_threads(1)


def _digits(n: int = 600) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = load_digits(return_X_y=True)
    return torch.tensor(x[:n] / 16, dtype=torch.float32), torch.tensor(y[:n])


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


@pytest.mark.parametrize("per_sample", ["ghost", "hooks"])
def test_noise_free_step_equals_the_mean_of_clipped_per_sample_gradients(
    per_sample: Literal["ghost", "hooks"],
) -> None:
    x, y = _digits(16)
    model = _mlp()
    reference = _mlp()
    clip = 0.05
    expected = [torch.zeros_like(p) for p in reference.parameters()]
    for i in range(16):
        reference.zero_grad()
        loss = nn.functional.cross_entropy(reference(x[i : i + 1]), y[i : i + 1])
        grads = list(torch.autograd.grad(loss, list(reference.parameters())))
        norm = torch.sqrt(torch.stack([(g**2).sum() for g in grads]).sum())
        factor = min(1.0, clip / (float(norm) + 1e-6))
        for acc, g in zip(expected, grads, strict=True):
            acc += factor * g
    trainer = DPSGD(
        model,
        noise_multiplier=0.0,
        clipping=FixedClipping(clip),
        expected_batch_size=8,
        lr=1.0,
        rng=0,
        per_sample=per_sample,
    )
    before = [p.detach().clone() for p in model.parameters()]
    trainer.step(lambda: nn.functional.cross_entropy(model(x), y, reduction="none"))
    for b, p, e in zip(before, model.parameters(), expected, strict=True):
        torch.testing.assert_close(b - p.detach(), e / 8, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    ("neighbouring", "factor"), [("add_remove", 1.0), ("replace_one", math.sqrt(2))]
)
def test_empty_batch_step_adds_noise_of_std_factor_sigma_c_over_l(
    neighbouring: Literal["add_remove", "replace_one"], factor: float
) -> None:
    layer = nn.Linear(100, 50, bias=False)
    nn.init.zeros_(layer.weight)
    trainer = DPSGD(
        layer,
        noise_multiplier=2.0,
        clipping=FixedClipping(3.0),
        expected_batch_size=4,
        lr=1.0,
        neighbouring=neighbouring,
        rng=1,
    )
    trainer.step(None)
    std = float(layer.weight.detach().std())
    assert std == pytest.approx(factor * 2.0 * 3.0 / 4, rel=0.05)


def test_adaptive_clipping_picks_a_bound_on_the_dpnorm_grid() -> None:
    x, y = _digits(200)
    model = _mlp()
    norms = [
        float(
            torch.cat(
                [
                    g.reshape(-1)
                    for g in torch.autograd.grad(
                        nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]),
                        list(model.parameters()),
                    )
                ]
            ).norm()
        )
        for i in range(200)
    ]
    trainer = DPSGD(
        model,
        noise_multiplier=1.0,
        clipping=AdaptiveClipping(sigma_c=0.1, c_max=10.0, bins=100),
        expected_batch_size=200,
        lr=0.1,
        rng=0,
    )
    report = trainer.step(
        lambda: nn.functional.cross_entropy(model(x), y, reduction="none")
    )
    assert report.batch_size == 200
    # Alg. 6 on the per-sample gradient norms: with sigma_C = 0.1 (count noise
    # std 0.14) the released bound is a most populated bin of the histogram
    counts = norm_histogram(norms, 10.0, 100)
    modes = {(j + 1) / 10 for j in np.flatnonzero(counts == counts.max())}
    assert min(abs(report.clip_norm - m) for m in modes) < 1e-9
    trainer.close()


def test_dp_sgd_train_learns_reports_epsilon_and_is_deterministic() -> None:
    x, y = _digits(600)
    kwargs: dict[str, Any] = dict(
        epochs=3, batch_size=60, lr=0.5, noise_multiplier=1.0, max_grad_norm=1.0, seed=5
    )
    model = _mlp(1)
    result = dp_sgd_train(model, x, y, **kwargs)
    assert result.steps == 30
    assert result.delta == pytest.approx(1 / 600)
    assert result.epsilon == pytest.approx(sgm_epsilon(0.1, 1.0, 30, 1 / 600))
    accuracy = float((model(x).argmax(1) == y).float().mean())
    assert accuracy > 0.5
    again = _mlp(1)
    dp_sgd_train(again, x, y, **kwargs)
    for a, b in zip(model.parameters(), again.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    # the hooks are gone: a plain forward/backward works without per-sample state
    loss = nn.functional.cross_entropy(model(x[:3]), y[:3])
    assert all(
        g is not None for g in torch.autograd.grad(loss, list(model.parameters()))
    )
    assert getattr(next(model.parameters()), "grad_sample", None) is None


def test_dp_sgd_train_with_adaptive_clipping_accounts_for_the_shared_batch() -> None:
    x, y = _digits(300)
    fixed = dp_sgd_train(
        _mlp(),
        x,
        y,
        epochs=1,
        batch_size=50,
        lr=0.2,
        noise_multiplier=1.5,
        max_grad_norm=1.0,
        seed=0,
    )
    adaptive = dp_sgd_train(
        _mlp(),
        x,
        y,
        epochs=1,
        batch_size=50,
        lr=0.2,
        noise_multiplier=1.5,
        max_grad_norm=1.0,
        seed=0,
        clipping=AdaptiveClipping(sigma_c=4.0),
    )
    assert adaptive.epsilon > fixed.epsilon
    # Theorem 4: DPNorm and the gradient noise share each Poisson batch
    lambdas = np.arange(1, 33, dtype=float)
    moments = adaptive.steps * shared_batch_log_moment(50 / 300, (4.0, 1.5), lambdas)
    expected, _ = epsilon_from_log_moments(moments, 1 / 300, lambdas)
    assert adaptive.epsilon == pytest.approx(expected, rel=1e-9)
    # one DPNorm bound per step, each an upper bin end j * C_max / w of (0, 10]
    assert len(adaptive.clip_norms) == adaptive.steps == 6
    grid = np.asarray(adaptive.clip_norms) * 10
    np.testing.assert_allclose(grid, np.round(grid), atol=1e-9)
    assert all(0 < c <= 10.0 for c in adaptive.clip_norms)
    assert fixed.clip_norms == [1.0] * 6


def test_bad_inputs_are_refused() -> None:
    x, y = _digits(50)
    with pytest.raises(DataError):
        dp_sgd_train(
            _mlp(),
            x,
            y[:10],
            epochs=1,
            batch_size=10,
            lr=0.1,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            seed=0,
        )
    with pytest.raises(ConfigError, match="secure mode"):
        DPSGD(
            _mlp(),
            noise_multiplier=1.0,
            clipping=FixedClipping(1.0),
            expected_batch_size=8,
            lr=0.1,
            rng=3,
            secure_mode=True,
        )
    with pytest.raises(ConfigError, match="cannot handle"):
        DPSGD(
            nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)),
            noise_multiplier=1.0,
            clipping=FixedClipping(1.0),
            expected_batch_size=8,
            lr=0.1,
            rng=0,
        )
    with pytest.raises(ConfigError):
        FixedClipping(0.0)


def test_secure_mode_trains_without_a_seed() -> None:
    x, y = _digits(100)
    result = dp_sgd_train(
        _mlp(),
        x,
        y,
        epochs=1,
        batch_size=20,
        lr=0.1,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        seed=None,
        secure_mode=True,
    )
    assert result.steps == 5 and np.isfinite(result.epsilon)
    with pytest.raises(ConfigError, match="secure mode"):
        dp_sgd_train(
            _mlp(),
            x,
            y,
            epochs=1,
            batch_size=20,
            lr=0.1,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            seed=1,
            secure_mode=True,
        )
