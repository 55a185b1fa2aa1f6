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
    torch_generator,
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


# ------------------------------------------------------------ domains and wiring


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"noise_multiplier": -1.0},
            r"^noise_multiplier must be a finite number >= 0; got -1\.0\.$",
        ),
        (
            {"noise_multiplier": math.inf},
            r"^noise_multiplier must be a finite number >= 0",
        ),
        (
            {"expected_batch_size": 0},
            r"^expected_batch_size must be an integer >= 1; got 0\.$",
        ),
        ({"lr": 0.0}, r"^lr must be a finite number > 0; got 0\.0\.$"),
        (
            {"neighbouring": "swap"},
            r"^neighbouring must be one of 'add_remove', 'replace_one'; got 'swap'\.$",
        ),
        (
            {"secure_mode": True, "rng": 3},
            r"^Passing seed is prohibited in secure mode\.$",
        ),
        (
            {"per_sample": "loop"},
            r"^per_sample must be one of 'ghost', 'hooks'; got 'loop'\.$",
        ),
    ],
)
def test_dpsgd_refuses_bad_settings_naming_them(
    kwargs: dict[str, Any], message: str
) -> None:
    settings: dict[str, Any] = dict(
        noise_multiplier=1.0,
        clipping=FixedClipping(1.0),
        expected_batch_size=4,
        lr=0.1,
        rng=0,
    )
    settings.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        DPSGD(_mlp(), **settings)


def test_dpsgd_refuses_modules_it_cannot_privatise() -> None:
    common: dict[str, Any] = dict(
        noise_multiplier=1.0, clipping=FixedClipping(1.0), expected_batch_size=4, lr=0.1
    )
    batch_norm = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    with pytest.raises(
        ConfigError,
        match=r"^the module has layers DP-SGD cannot handle: .*BatchNorm.*\. Replace "
        r"them \(opacus\.validators\.ModuleValidator\.fix\) first\.$",
    ):
        DPSGD(batch_norm, **common)
    frozen = nn.Linear(4, 2)
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(
        ConfigError, match=r"^the module has no trainable parameters\.$"
    ):
        DPSGD(frozen, **common)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: FixedClipping(0.0),
            r"^max_grad_norm must be a finite number > 0; got 0\.0\.$",
        ),
        (
            lambda: FixedClipping(math.inf),
            r"^max_grad_norm must be a finite number > 0",
        ),
        (
            lambda: AdaptiveClipping(0.0),
            r"^sigma_c must be a finite number > 0; got 0\.0\.$",
        ),
        (lambda: AdaptiveClipping(math.inf), r"^sigma_c must be a finite number > 0"),
        (
            lambda: AdaptiveClipping(1.0, c_max=0.0),
            r"^c_max must be a finite number > 0; got 0\.0\.$",
        ),
        (
            lambda: AdaptiveClipping(1.0, bins=0),
            r"^bins must be an integer >= 1; got 0\.$",
        ),
    ],
)
def test_clipping_settings_are_checked(make: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_clipping_boundaries_are_accepted() -> None:
    assert AdaptiveClipping(1e-9, c_max=1e-9, bins=1).bins == 1
    assert AdaptiveClipping(4.0).c_max == 10.0 and AdaptiveClipping(4.0).bins == 100
    assert FixedClipping(1e-9).max_grad_norm == 1e-9


def test_dpsgd_wires_its_options() -> None:
    from opacus.grad_sample import (
        GradSampleModule,
        GradSampleModuleFastGradientClipping,
    )

    common: dict[str, Any] = dict(
        noise_multiplier=0.0, clipping=FixedClipping(1.0), lr=0.25, rng=0
    )
    adam = DPSGD(_mlp(), expected_batch_size=1, optimizer="adam", **common)
    assert isinstance(adam.optimizer, torch.optim.Adam)
    assert adam.optimizer.param_groups[0]["lr"] == 0.25
    sgd = DPSGD(_mlp(), expected_batch_size=1, **common)
    assert type(sgd.optimizer) is torch.optim.SGD
    assert sgd.optimizer.param_groups[0]["lr"] == 0.25
    assert isinstance(sgd._grad_sample, GradSampleModuleFastGradientClipping)
    hooks = DPSGD(_mlp(), expected_batch_size=1, per_sample="hooks", **common)
    assert type(hooks._grad_sample) is GradSampleModule
    assert sgd.noise_scale == 0.0 and sgd.expected_batch_size == 1
    assert sgd.steps_taken == 0
    sgd.step(None)
    sgd.step(None)
    assert sgd.steps_taken == 2
    for trainer in (adam, sgd, hooks):
        trainer.close()


@pytest.mark.parametrize("per_sample", ["ghost", "hooks"])
def test_small_gradients_are_not_scaled_up(
    per_sample: Literal["ghost", "hooks"],
) -> None:
    """The clipping factor is min(1, C / ||g||): below the bound, the plain sum."""
    x, y = _digits(6)
    model, reference = _mlp(), _mlp()
    loss = nn.functional.cross_entropy(reference(x), y, reduction="sum")
    expected = torch.autograd.grad(loss, list(reference.parameters()))
    trainer = DPSGD(
        model,
        noise_multiplier=0.0,
        clipping=FixedClipping(1e3),
        expected_batch_size=3,
        lr=1.0,
        rng=0,
        per_sample=per_sample,
    )
    before = [p.detach().clone() for p in model.parameters()]
    report = trainer.step(
        lambda: nn.functional.cross_entropy(model(x), y, reduction="none")
    )
    assert report.batch_size == 6 and report.clip_norm == 1e3
    assert report.mean_loss == pytest.approx(float(loss.detach()) / 6, rel=1e-5)
    for b, p, e in zip(before, model.parameters(), expected, strict=True):
        torch.testing.assert_close(b - p.detach(), e / 3, rtol=1e-4, atol=1e-6)
    # afterwards no per-sample state is left on the parameters
    trainer.close()
    assert all(getattr(p, "grad_sample", None) is None for p in model.parameters())


def test_step_refuses_a_batch_loss_that_is_not_per_record() -> None:
    x, y = _digits(4)
    model = _mlp()
    trainer = DPSGD(
        model,
        noise_multiplier=1.0,
        clipping=FixedClipping(1.0),
        expected_batch_size=4,
        lr=0.1,
        rng=0,
    )
    with pytest.raises(
        ConfigError,
        match=r"^per_sample_loss must return one loss per record \(a 1-d tensor\)\.$",
    ):
        trainer.step(lambda: nn.functional.cross_entropy(model(x), y))
    trainer.close()


def test_noise_below_one_multiplier_is_still_added() -> None:
    """sigma = 0.5 (add/remove): the empty step's update has std 0.5 C / L."""
    layer = nn.Linear(200, 50, bias=False)
    nn.init.zeros_(layer.weight)
    trainer = DPSGD(
        layer,
        noise_multiplier=0.5,
        clipping=FixedClipping(2.0),
        expected_batch_size=1,
        lr=1.0,
        rng=0,
    )
    report = trainer.step(None)
    assert report.batch_size == 0 and math.isnan(report.mean_loss)
    # 10,000 draws: relative standard error of the std 0.7%
    assert float(layer.weight.detach().std()) == pytest.approx(1.0, rel=0.05)


def test_torch_generator_is_seeded_from_the_numpy_generator() -> None:
    # seeds 2 and 4 draw differently from a range one narrower: the exact range shows
    for s in (2, 4, 7):
        seed = int(np.random.default_rng(s).integers(0, 2**63 - 1))
        assert torch_generator(np.random.default_rng(s)).initial_seed() == seed
    assert torch_generator(np.random.default_rng(8)).initial_seed() != seed


def test_dp_sgd_train_reports_progress_losses_and_its_settings() -> None:
    x, y = _digits(40)
    seen: list[tuple[int, int]] = []
    result = dp_sgd_train(
        _mlp(),
        x,
        y,
        epochs=2,
        batch_size=10,
        lr=0.1,
        noise_multiplier=1.3,
        max_grad_norm=1.0,
        seed=0,
        delta=1e-3,
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(i, 8) for i in range(1, 9)]
    assert result.delta == 1e-3 and result.sample_rate == 0.25
    assert result.noise_multiplier == 1.3 and result.steps == 8
    assert result.epsilon == pytest.approx(sgm_epsilon(0.25, 1.3, 8, 1e-3))
    assert len(result.losses) == 2 and all(np.isfinite(result.losses))
    assert result.clip_norms == [1.0] * 8
    # a batch size equal to the data set and a single record are valid
    one = dp_sgd_train(
        _mlp(),
        x[:1],
        y[:1],
        epochs=1,
        batch_size=1,
        lr=0.1,
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        seed=0,
        delta=0.5,
    )
    assert one.steps == 1 and one.sample_rate == 1.0 and one.delta == 0.5


def test_dp_sgd_train_secure_mode_refuses_a_seed_with_the_remedy() -> None:
    x, y = _digits(10)
    with pytest.raises(
        ConfigError,
        match=r"^Passing seed is prohibited in secure mode: pass seed=None with "
        r"secure_mode=True\.$",
    ):
        dp_sgd_train(
            _mlp(),
            x,
            y,
            epochs=1,
            batch_size=5,
            lr=0.1,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            seed=1,
            secure_mode=True,
        )
    with pytest.raises(
        ConfigError, match=r"^batch_size must be an integer in \[1, 10\]; got 11\.$"
    ):
        dp_sgd_train(
            _mlp(),
            x,
            y,
            epochs=1,
            batch_size=11,
            lr=0.1,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            seed=0,
        )
    with pytest.raises(ConfigError, match=r"^epochs must be an integer >= 1; got 0\.$"):
        dp_sgd_train(
            _mlp(),
            x,
            y,
            epochs=0,
            batch_size=5,
            lr=0.1,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            seed=0,
        )


class _RecordingDPSGD:
    """Stands in for DPSGD: records the settings dp_sgd_train passes."""

    made: list[dict[str, Any]] = []  # noqa: RUF012

    def __init__(self, module: nn.Module, **kwargs: Any) -> None:
        _RecordingDPSGD.made.append(kwargs)

    def step(self, per_sample_loss: Any) -> Any:
        from fedleak.privacy.dpsgd import StepReport

        return StepReport(batch_size=0, clip_norm=1.0, mean_loss=float("nan"))

    def close(self) -> nn.Module:
        return nn.Linear(1, 1)


def test_dp_sgd_train_passes_its_settings_to_the_trainer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("fedleak.privacy.dpsgd.DPSGD", _RecordingDPSGD)
    _RecordingDPSGD.made = []
    x, y = _digits(20)
    clipping = AdaptiveClipping(3.0)
    result = dp_sgd_train(
        _mlp(),
        x,
        y,
        epochs=1,
        batch_size=5,
        lr=0.3,
        noise_multiplier=1.1,
        max_grad_norm=9.0,
        seed=None,
        clipping=clipping,
        optimizer="adam",
        secure_mode=True,
        per_sample="hooks",
    )
    (settings,) = _RecordingDPSGD.made
    assert settings["noise_multiplier"] == 1.1 and settings["clipping"] is clipping
    assert settings["expected_batch_size"] == 5 and settings["lr"] == 0.3
    assert settings["optimizer"] == "adam" and settings["per_sample"] == "hooks"
    assert settings["secure_mode"] is True and settings["rng"] is None
    assert math.isnan(result.losses[0])  # every step reported an empty batch
    _RecordingDPSGD.made = []
    dp_sgd_train(
        _mlp(),
        x,
        y,
        epochs=1,
        batch_size=5,
        lr=0.3,
        noise_multiplier=1.1,
        max_grad_norm=9.0,
        seed=4,
    )
    (settings,) = _RecordingDPSGD.made
    assert settings["clipping"] == FixedClipping(9.0)
    assert settings["optimizer"] == "sgd" and settings["per_sample"] == "ghost"
    assert settings["secure_mode"] is False
    assert isinstance(settings["rng"], np.random.Generator)


def test_dp_sgd_train_without_noise_spends_an_infinite_epsilon() -> None:
    x, y = _digits(20)
    result = dp_sgd_train(
        _mlp(),
        x,
        y,
        epochs=1,
        batch_size=10,
        lr=0.1,
        noise_multiplier=0.0,
        max_grad_norm=1.0,
        seed=0,
    )
    assert result.epsilon == math.inf
    with pytest.raises(
        DataError,
        match=r"^x and y must be non-empty with the same length; got 20 and 19\.$",
    ):
        dp_sgd_train(
            _mlp(),
            x,
            y[:19],
            epochs=1,
            batch_size=10,
            lr=0.1,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            seed=0,
        )


@pytest.mark.parametrize("per_sample", ["ghost", "hooks"])
def test_a_trainable_layer_the_loss_does_not_use_is_refused(
    per_sample: Literal["ghost", "hooks"],
) -> None:
    x, y = _digits(4)
    model = nn.ModuleDict({"used": nn.Linear(64, 10), "unused": nn.Linear(3, 3)})
    trainer = DPSGD(
        model,
        noise_multiplier=1.0,
        clipping=FixedClipping(1.0),
        expected_batch_size=4,
        lr=0.1,
        rng=0,
        per_sample=per_sample,
    )
    with pytest.raises(
        ConfigError,
        match=r"^a trainable parameter got no per-sample gradient; every trainable "
        r"layer must be used by the loss\.$",
    ):
        trainer.step(
            lambda: nn.functional.cross_entropy(model["used"](x), y, reduction="none")
        )


def test_dpsgd_hands_its_settings_to_dpnorm_and_the_noise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Secure mode reaches both random draws (DPNorm's and the gradient
    noise's), and DPNorm gets the clipping's C_max, bins and the generator."""
    import fedleak.privacy.dpsgd as module

    calls: dict[str, list[Any]] = {"norm": [], "noise": []}
    real_norm, real_noise = module.dp_norm, module.noise_normal

    def norm(*args: Any, **kwargs: Any) -> float:
        calls["norm"].append(kwargs)
        return real_norm(*args, **kwargs)

    def noise(*args: Any, **kwargs: Any) -> Any:
        calls["noise"].append(kwargs)
        return real_noise(*args, **kwargs)

    monkeypatch.setattr(module, "dp_norm", norm)
    monkeypatch.setattr(module, "noise_normal", noise)
    x, y = _digits(8)
    model = _mlp()
    secure = DPSGD(
        model,
        noise_multiplier=1.0,
        clipping=AdaptiveClipping(2.0, c_max=4.0, bins=8),
        expected_batch_size=8,
        lr=0.1,
        secure_mode=True,
    )
    secure.step(lambda: nn.functional.cross_entropy(model(x), y, reduction="none"))
    (kwargs,) = calls["norm"]
    assert kwargs["secure_mode"] is True and kwargs["rng"] is None
    assert kwargs["c_max"] == 4.0 and kwargs["bins"] == 8
    assert all(k["secure_mode"] is True for k in calls["noise"]) and calls["noise"]
    assert secure.close() is model
    calls["norm"].clear()
    generator = np.random.default_rng(3)
    seeded = DPSGD(
        _mlp(),
        noise_multiplier=1.0,
        clipping=AdaptiveClipping(2.0),
        expected_batch_size=8,
        lr=0.1,
        rng=generator,
    )
    seeded.step(None)
    assert (
        calls["norm"][0]["rng"] is generator
        and calls["norm"][0]["secure_mode"] is False
    )


def test_empty_adaptive_steps_draw_the_bound_from_pure_noise() -> None:
    """An empty Poisson batch: DPNorm sees no norm at all, so the bound is the
    noise's argmax over the w bins (not the first bin a zero norm would fill)."""
    bounds = []
    for seed in range(5):
        trainer = DPSGD(
            _mlp(),
            noise_multiplier=1.0,
            clipping=AdaptiveClipping(1e-3),
            expected_batch_size=8,
            lr=0.1,
            rng=seed,
        )
        bounds.append(trainer.step(None).clip_norm)
    assert len(set(bounds)) > 1 and all(0 < b <= 10.0 for b in bounds)


def test_empty_step_update_is_the_replayed_noise_over_l() -> None:
    layer = nn.Linear(5, 3, bias=False)
    nn.init.zeros_(layer.weight)
    trainer = DPSGD(
        layer,
        noise_multiplier=2.0,
        clipping=FixedClipping(3.0),
        expected_batch_size=4,
        lr=1.0,
        rng=np.random.default_rng(0),
    )
    trainer.step(None)
    draw = np.random.default_rng(0).normal(0.0, 2.0 * 3.0, (3, 5))
    np.testing.assert_allclose(layer.weight.detach().numpy(), -draw / 4, rtol=1e-6)


def test_unsupported_layers_are_all_named() -> None:
    from opacus.validators import ModuleValidator

    model = nn.Sequential(
        nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 4), nn.BatchNorm1d(4)
    )
    problems = "; ".join(str(p) for p in ModuleValidator.validate(model))
    with pytest.raises(ConfigError) as refused:
        DPSGD(
            model,
            noise_multiplier=1.0,
            clipping=FixedClipping(1.0),
            expected_batch_size=4,
            lr=0.1,
        )
    assert str(refused.value) == (
        "the module has layers DP-SGD cannot handle: "
        + problems
        + ". Replace them (opacus.validators.ModuleValidator.fix) first."
    )


@pytest.mark.parametrize("per_sample", ["ghost", "hooks"])
def test_a_tiny_gradient_is_kept_as_it_is(
    per_sample: Literal["ghost", "hooks"],
) -> None:
    """min(1, C / (||g|| + 1e-6)): a gradient far below the bound, even one of
    norm below 1e-6, enters the sum unscaled."""
    model = nn.Linear(1, 1, bias=False)
    nn.init.ones_(model.weight)
    x = torch.ones(1, 1)
    target = torch.full((1,), 1.0 + 2e-7)
    trainer = DPSGD(
        model,
        noise_multiplier=0.0,
        clipping=FixedClipping(1.0),
        expected_batch_size=1,
        lr=1.0,
        rng=0,
        per_sample=per_sample,
    )
    trainer.step(lambda: (model(x).squeeze(1) - target) ** 2)
    assert abs(float(model.weight) - 1.0) < 1e-5


def test_the_noise_follows_noise_rng_and_the_batches_follow_the_seed() -> None:
    """Seed 000 Alg. 5 with the noise drawn from ``noise_rng`` when given.

    The Poisson batches follow ``seed`` and the Gaussian noise ``noise_rng``:
    the same two generators give the same model, another noise generator a
    different one, and a model trained without noise does not depend on it.
    """
    x, y = _digits(120)

    def train(noise_seed: int, sigma: float = 1.0) -> list[torch.Tensor]:
        model = _mlp()
        dp_sgd_train(
            model, x, y, epochs=1, batch_size=30, lr=0.1, noise_multiplier=sigma,
            max_grad_norm=1.0, seed=3, noise_rng=np.random.default_rng(noise_seed),
        )  # fmt: skip
        return [p.detach().clone() for p in model.parameters()]

    first, again, other = train(1), train(1), train(2)
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert any(not torch.equal(a, b) for a, b in zip(first, other, strict=True))
    quiet = [train(1, sigma=0.0), train(2, sigma=0.0)]
    for a, b in zip(*quiet, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_dp_sgd_train_secure_mode_refuses_a_noise_generator_with_the_reason() -> None:
    x, y = _digits(40)
    with pytest.raises(
        ConfigError,
        match=r"^Passing noise_rng is prohibited in secure mode: the noise comes from "
        r"the OS CSPRNG\.$",
    ):
        dp_sgd_train(
            _mlp(), x, y, epochs=1, batch_size=8, lr=0.1, noise_multiplier=1.0,
            max_grad_norm=1.0, seed=None, noise_rng=np.random.default_rng(0),
            secure_mode=True,
        )  # fmt: skip
