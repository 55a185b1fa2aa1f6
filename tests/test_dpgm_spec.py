"""DPGM's components, calibration and estimator settings against their
specification (seed 000 Alg. 3-6, Sec. 5.1.4): defaults, initialisation,
seeding, the bisection's tightness and the messages of bad settings."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError

from fedleak.dpgm.components import BernoulliRBM, VAEComponent, make_component
from fedleak.dpgm.estimator import DPGM, calibrate_sigma_g
from fedleak.errors import ConfigError, DataError
from fedleak.privacy.accounting import dpgm_epsilon

torch.set_num_threads(1)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_rbm_defaults_and_initialisation() -> None:
    rbm = BernoulliRBM(7)
    assert rbm.hidden.out_features == 200 and rbm.cd_steps == 1
    assert rbm.sample_steps == 500
    assert rbm.visible_bias.bias is None  # b is a plain vector, no extra offset
    expected = 0.01 * torch.randn((200, 7), generator=_gen(0))  # N(0, 0.01^2), seed 0
    torch.testing.assert_close(rbm.hidden.weight.detach(), expected)
    assert (
        not rbm.hidden.bias.detach().any()
        and not rbm.visible_bias.weight.detach().any()
    )
    other = BernoulliRBM(7, 3, cd_steps=2, sample_steps=4, seed=5)
    torch.testing.assert_close(
        other.hidden.weight.detach(), 0.01 * torch.randn((3, 7), generator=_gen(5))
    )
    assert (other.cd_steps, other.sample_steps) == (2, 4)
    BernoulliRBM(1, 1, cd_steps=1, sample_steps=1)  # the smallest valid sizes
    for bad in (
        dict(n_visible=0),
        dict(n_hidden=0),
        dict(cd_steps=0),
        dict(sample_steps=0),
    ):
        args: dict[str, Any] = dict(n_visible=3, n_hidden=2, cd_steps=1, sample_steps=1)
        args.update(bad)
        n_visible = args.pop("n_visible")
        n_hidden = args.pop("n_hidden")
        (name,) = bad
        with pytest.raises(
            ConfigError, match=rf"^{name} must be an integer >= 1; got 0\.$"
        ):
            BernoulliRBM(n_visible, n_hidden, **args)


def test_components_use_the_generator_they_are_given() -> None:
    x = torch.bernoulli(torch.full((6, 5), 0.5), generator=_gen(1))
    for kind in ("vae", "rbm"):
        component = make_component(kind, 5, hidden=4, seed=2)
        a = component.per_sample_loss(x, _gen(3))
        assert a.shape == (6,)
        torch.testing.assert_close(a, component.per_sample_loss(x, _gen(3)))
        assert not torch.equal(a, component.per_sample_loss(x, _gen(4))), kind
        s = component.sample(20, _gen(3), binary=True)
        torch.testing.assert_close(s, component.sample(20, _gen(3), binary=True))
        assert not torch.equal(s, component.sample(20, _gen(4), binary=True))
        assert set(torch.unique(s).tolist()) <= {0.0, 1.0}
        p = component.sample(20, _gen(3), binary=False)
        assert ((p > 0) & (p < 1)).all()  # probabilities, not draws


def test_make_component_passes_its_sizes_and_prior() -> None:
    vae = make_component("vae", 9, hidden=6, latent_dim=3, seed=4)
    assert isinstance(vae, VAEComponent)
    reference = VAEComponent(9, (6,), 3, seed=4)
    for (name, p), (_, q) in zip(
        vae.module.named_parameters(), reference.module.named_parameters(), strict=True
    ):
        torch.testing.assert_close(p, q, msg=name)
    rbm = make_component("rbm", 9, hidden=6, density_prior=0.2, seed=4)
    torch.testing.assert_close(
        rbm.module.hidden.weight.detach(),
        BernoulliRBM(9, 6, seed=4).hidden.weight.detach(),
    )
    assert rbm.module.visible_bias.weight.detach().unique().tolist() == [
        pytest.approx(math.log(0.2 / 0.8))
    ]
    for bad in (0.0, 1.0):
        with pytest.raises(
            ConfigError, match=r"^density_prior must be in \(0, 1\); got"
        ):
            make_component("vae", 9, density_prior=bad)
    with pytest.raises(
        ConfigError, match=r"^kind must be one of 'vae', 'vae2', 'rbm'; got 'gan'\.$"
    ):
        make_component("gan", 9)  # type: ignore[arg-type]


def test_calibrated_sigma_g_is_within_the_tolerance_of_the_target() -> None:
    """The bisection returns the bracket's upper end: the spend is at most the
    target, and 0.2% less noise (twice the default relative width) exceeds it."""
    common: dict[str, Any] = dict(
        q=0.02,
        sgd_steps=300,
        delta=1e-5,
        sigma_c=None,
        kmeans_iterations=0,
        sigma_k=None,
    )
    for target in (0.5, 2.0, 8.0):
        sigma = calibrate_sigma_g(target, **common)
        assert dpgm_epsilon(sigma_g=sigma, **common) <= target
        assert dpgm_epsilon(sigma_g=sigma * (1 - 2e-3), **common) > target
    coarse = calibrate_sigma_g(2.0, tolerance=0.1, **common)
    assert dpgm_epsilon(sigma_g=coarse * 0.8, **common) > 2.0
    lam = np.arange(2.0, 20.0)
    custom = calibrate_sigma_g(2.0, lambdas=lam, **common)
    assert dpgm_epsilon(sigma_g=custom, lambdas=lam, **common) <= 2.0
    assert dpgm_epsilon(sigma_g=custom * (1 - 2e-3), lambdas=lam, **common) > 2.0
    with pytest.raises(
        ConfigError, match=r"^epsilon must be a finite number > 0; got 0\.0\.$"
    ):
        calibrate_sigma_g(0.0, **common)
    with pytest.raises(
        ConfigError,
        match=r"^DPGM cannot meet epsilon=0\.1 at delta=1e-05: with 20 k-means "
        r"iterations at sigma_k=2\.0 and DPNorm at sigma_c=None over 300 steps, the "
        r"spend is already \d+\.\d{3} before any gradient noise\. Raise sigma_k",
    ):
        calibrate_sigma_g(0.1, **{**common, "kmeans_iterations": 20, "sigma_k": 2.0})


def _tiny(n: int = 60, m: int = 8) -> np.ndarray:
    rng = np.random.default_rng(0)
    return (rng.random((n, m)) < 0.3).astype(np.float32)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(k=0, sigma_g=1.0), r"^k must be an integer in \[1, 60\]; got 0\.$"),
        (dict(k=61, sigma_g=1.0), r"^k must be an integer in \[1, 60\]; got 61\.$"),
        (
            dict(k=1, sigma_g=1.0, component="gan"),
            r"^component must be one of 'vae', 'vae2', 'rbm'; got 'gan'\.$",
        ),
        (dict(k=1), r"^give exactly one of epsilon \(a target budget\) and sigma_g"),
        (
            dict(k=1, sigma_g=1.0, epochs=0),
            r"^epochs must be an integer >= 1; got 0\.$",
        ),
        (
            dict(k=1, sigma_g=1.0, batch_size=0),
            r"^batch_size must be an integer in \[1, 60\]; got 0\.$",
        ),
        (
            dict(k=1, sigma_g=1.0, batch_size=61),
            r"^batch_size must be an integer in \[1, 60\]; got 61\.$",
        ),
        (
            dict(k=1, sigma_g=1.0, batch_size=10, kmeans_iterations=-1),
            r"^kmeans_iterations must be an integer >= 0; got -1\.$",
        ),
        (
            dict(k=1, sigma_g=1.0, batch_size=10, delta=1.0),
            r"^delta must be in \(0, 1\); got 1\.0\.$",
        ),
        (
            dict(k=1, sigma_g=1.0, batch_size=10, delta=0.0),
            r"^delta must be in \(0, 1\); got 0\.0\.$",
        ),
        (
            dict(k=1, sigma_g=0.0, batch_size=10),
            r"^sigma_g must be a finite number > 0; got 0\.0\.$",
        ),
        (
            dict(k=2, sigma_g=1.0, batch_size=10),
            r"^private kernel k-means starts its centres on public records",
        ),
    ],
)
def test_dpgm_refuses_bad_settings_before_training(
    kwargs: dict[str, Any], message: str
) -> None:
    kwargs = dict(kwargs)  # the parameters are shared between runs
    k = kwargs.pop("k")
    with pytest.raises(ConfigError, match=message):
        DPGM(k, **kwargs).fit(_tiny())


def test_dpgm_refuses_bad_data_and_early_calls() -> None:
    with pytest.raises(
        DataError, match=r"^X must be 2-d with >= 2 records; got shape \(1, 8\)\.$"
    ):
        DPGM(1, sigma_g=1.0).fit(_tiny()[:1])
    with pytest.raises(DataError, match=r"^X must hold values in \[0, 1\]"):
        DPGM(1, sigma_g=1.0, batch_size=10).fit(_tiny() - 0.5)
    # scikit-learn's convention: NotFittedError before fit
    unfitted = (
        r"^This DPGM instance is not fitted yet\. Call 'fit' with appropriate "
        r"arguments before using this estimator\.$"
    )
    with pytest.raises(NotFittedError, match=unfitted):
        DPGM(1, sigma_g=1.0).sample(2)
    with pytest.raises(NotFittedError, match=unfitted):
        DPGM(1, sigma_g=1.0).sample_component(0, 2)


def test_dpgm_defaults_and_fitted_attributes() -> None:
    model = DPGM()
    assert (model.k, model.component, model.sigma_k, model.sigma_c) == (
        10,
        "vae",
        60.0,
        8.0,
    )
    assert model.adaptive_clipping and model.max_grad_norm == 1.0
    assert (model.c_max, model.bins, model.epochs, model.batch_size) == (
        10.0,
        100,
        20,
        64,
    )
    assert (model.kmeans_iterations, model.rff_dim, model.hidden, model.latent_dim) == (
        20,
        200,
        200,
        2,
    )
    x = _tiny()
    fitted = DPGM(
        1, component="rbm", sigma_g=1.5, epochs=2, batch_size=20, hidden=4, seed=1
    ).fit(x)
    assert fitted.sigma_g_ == 1.5 and fitted.steps_ == 6 and fitted.delta_ == 1 / 60
    assert fitted.n_features_in_ == 8 and fitted.n_samples_fit_ == 60
    assert fitted.clustering_ is None and fitted.weights_.tolist() == [1.0]
    assert fitted.epsilon_ == pytest.approx(
        dpgm_epsilon(
            q=20 / 60,
            sgd_steps=6,
            sigma_g=1.5,
            sigma_c=8.0,
            kmeans_iterations=0,
            sigma_k=60.0,
            delta=1 / 60,
        )
    )
    assert fitted.sample().shape == (60, 8)  # |X| records by default
    assert fitted.sample(0).shape == (0, 8)
    with pytest.raises(ConfigError, match=r"^n must be an integer >= 0; got -1\.$"):
        fitted.sample(-1)
    with pytest.raises(
        ConfigError, match=r"^b must be an integer in \[0, 0\]; got 1\.$"
    ):
        fitted.sample_component(1, 2)
    np.testing.assert_array_equal(fitted.sample(5, seed=3), fitted.sample(5, seed=3))
    np.testing.assert_array_equal(
        fitted.sample_component(0, 5, seed=3), fitted.sample_component(0, 5, seed=3)
    )
    probabilities = fitted.sample(50, binary=False, seed=1)
    assert ((probabilities > 0) & (probabilities < 1)).any()


class _RecordingDPSGD:
    """Stands in for DPSGD: records its settings, steps without training."""

    made: list[dict[str, Any]] = []  # noqa: RUF012

    def __init__(self, module: torch.nn.Module, **kwargs: Any) -> None:
        _RecordingDPSGD.made.append(kwargs)

    def step(self, per_sample_loss: Any) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(clip_norm=0.5)

    def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("component", "adaptive", "lr", "optimizer"),
    [
        ("vae", True, 1e-3, "adam"),
        ("rbm", False, 0.05, "sgd"),
        ("vae2", False, 1e-3, "adam"),
    ],
)
def test_dpgm_configures_dp_sgd_as_alg_5(
    monkeypatch: pytest.MonkeyPatch,
    component: str,
    adaptive: bool,
    lr: float,
    optimizer: str,
) -> None:
    from fedleak.privacy.dpsgd import AdaptiveClipping, FixedClipping

    _RecordingDPSGD.made = []
    monkeypatch.setattr("fedleak.dpgm.estimator.DPSGD", _RecordingDPSGD)
    seen: list[tuple[str, int, int]] = []
    model = DPGM(
        1,
        component=component,  # type: ignore[arg-type]
        sigma_g=1.7,
        epochs=3,
        batch_size=6,
        hidden=4,
        adaptive_clipping=adaptive,
        max_grad_norm=0.7,
        sigma_c=3.0,
        c_max=5.0,
        bins=20,
        seed=0,
        progress=lambda *a: seen.append(a),
    ).fit(_tiny())
    (settings,) = _RecordingDPSGD.made
    assert settings["noise_multiplier"] == 1.7
    assert settings["expected_batch_size"] == 6
    assert settings["lr"] == lr and settings["optimizer"] == optimizer
    assert settings["neighbouring"] == "replace_one"  # N(0, 2 sigma^2 C^2): Alg. 5
    expected = AdaptiveClipping(3.0, 5.0, 20) if adaptive else FixedClipping(0.7)
    assert settings["clipping"] == expected
    assert model.clip_norms_ == [0.5] * 30
    # progress every 10 steps and at the end
    assert seen == [("train", d, 30) for d in (10, 20, 30)]
    explicit = DPGM(
        1,
        component=component,
        sigma_g=1.0,
        lr=0.3,
        epochs=1,
        batch_size=6,  # type: ignore[arg-type]
        hidden=4,
        seed=0,
    )
    _RecordingDPSGD.made = []
    explicit.fit(_tiny())
    assert _RecordingDPSGD.made[0]["lr"] == 0.3


@pytest.mark.parametrize("adaptive", [True, False])
def test_dpgm_calibrates_sigma_g_to_its_target_epsilon(
    monkeypatch: pytest.MonkeyPatch, adaptive: bool
) -> None:
    monkeypatch.setattr("fedleak.dpgm.estimator.DPSGD", _RecordingDPSGD)
    lam = np.arange(1.0, 40.0)
    model = DPGM(
        1,
        epsilon=3.0,
        epochs=2,
        batch_size=12,
        hidden=4,
        adaptive_clipping=adaptive,
        sigma_c=5.0,
        delta=1e-3,
        lambdas=lam,
        kmeans_iterations=7,
        sigma_k=9.0,
        seed=0,
    ).fit(_tiny())
    expected = calibrate_sigma_g(
        3.0,
        q=12 / 60,
        sgd_steps=10,
        delta=1e-3,
        sigma_c=5.0 if adaptive else None,
        kmeans_iterations=0,
        sigma_k=9.0,
        lambdas=lam,
    )
    assert model.sigma_g_ == expected and model.delta_ == 1e-3
    assert model.epsilon_ <= 3.0
    assert model.epsilon_ == pytest.approx(
        dpgm_epsilon(
            q=12 / 60,
            sgd_steps=10,
            sigma_g=expected,
            sigma_c=5.0 if adaptive else None,
            kmeans_iterations=0,
            sigma_k=9.0,
            delta=1e-3,
            lambdas=lam,
        )
    )
