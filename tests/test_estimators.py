"""scikit-learn conventions of fedleak's estimators.

Every fedleak class with ``fit`` that can follow scikit-learn's estimator
contract does: the constructor stores its parameters verbatim (so
``get_params``, ``set_params`` and ``clone`` round-trip), ``fit`` validates
them and returns ``self``, the same seed gives the same numbers, and using the
estimator before ``fit`` raises :class:`sklearn.exceptions.NotFittedError`.
The torch-backed attacks that are documented as not estimators still raise
``NotFittedError`` when used untrained.
"""

from __future__ import annotations

import numpy as np
import pytest
from fedleak.attacks.membership.classifier import (
    LossThresholdAttack,
    ShadowModelAttack,
)
from fedleak.attacks.membership.generative import (
    AttackerConfig,
    BlackBoxAttack,
    DiscriminativeAttack,
)
from fedleak.attacks.property.classifier import BatchPropertyClassifier
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression

from fedleak.dpgm import DPGM
from fedleak.errors import ConfigError
from fedleak.synth import LabelTransfer, LatentSynthesizer


def _binary_records(n: int = 80, m: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    protos = (rng.random((2, m)) < 0.4).astype(np.float32)
    flips = rng.random((n, m)) < 0.05
    return np.abs(protos[rng.integers(0, 2, n)] - flips).astype(np.float32)


def _logistic_procedure(x: np.ndarray, y: np.ndarray, seed: int) -> LogisticRegression:
    return LogisticRegression(max_iter=200, random_state=seed).fit(x, y)


def _shadow_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(60, 4))
    return x, (x[:, 0] + 0.3 * rng.normal(size=60) > 0).astype(np.int64)


def _same(a: object, b: object) -> bool:
    """Equal values, or estimators of one type with equal parameters."""
    if isinstance(a, BaseEstimator):
        return type(a) is type(b) and a.get_params() == b.get_params()
    return a is b or a == b


#: (unfitted estimator, a parameter to change, its new value)
ESTIMATORS = [
    pytest.param(
        DPGM(1, sigma_g=2.0, epochs=1, batch_size=20, hidden=8, seed=3),
        "epochs",
        2,
        id="DPGM",
    ),
    pytest.param(
        LatentSynthesizer(hidden=(8,), latent_dim=2, epochs=1, batch_size=16),
        "latent_dim",
        3,
        id="LatentSynthesizer",
    ),
    pytest.param(
        LabelTransfer(), "classifier", LogisticRegression(), id="LabelTransfer"
    ),
    pytest.param(
        ShadowModelAttack(_logistic_procedure, 2, num_shadows=1, shadow_size=20),
        "num_shadows",
        2,
        id="ShadowModelAttack",
    ),
    pytest.param(BatchPropertyClassifier(), "n_estimators", 7, id="BatchProperty"),
]


@pytest.mark.parametrize(("estimator", "name", "value"), ESTIMATORS)
def test_parameters_round_trip(estimator, name, value):
    assert isinstance(estimator, BaseEstimator)
    params = estimator.get_params()
    twin = clone(estimator)
    assert twin is not estimator
    assert type(twin) is type(estimator)
    for key, original in params.items():
        assert _same(twin.get_params()[key], original), key
    # a changed parameter is seen by get_params and survives clone
    twin.set_params(**{name: value})
    assert _same(twin.get_params()[name], value)
    assert _same(clone(twin).get_params()[name], value)
    assert not _same(twin.get_params()[name], params[name])
    assert _same(estimator.get_params()[name], params[name])  # the original is intact
    with pytest.raises(ValueError):
        twin.set_params(no_such_parameter=1)


def test_constructors_store_parameters_verbatim():
    hidden = [8, 4]  # a list stays the very list given
    synth = LatentSynthesizer(hidden=hidden)
    assert synth.get_params()["hidden"] is hidden
    prototype = LogisticRegression()
    assert LabelTransfer(prototype).classifier is prototype
    assert ShadowModelAttack(_logistic_procedure, 2).attack_model is None
    # an invalid value is stored as given and refused by fit, not __init__
    bad = DPGM(0, sigma_g=1.0)
    assert bad.k == 0
    with pytest.raises(ConfigError, match="k must be an integer"):
        bad.fit(_binary_records())
    bad_rule = LatentSynthesizer(sensitivity_rule="nope")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="sensitivity_rule must be one of"):
        bad_rule.fit(np.zeros((4, 2)), np.zeros(4, dtype=int))
    bad_shadow = ShadowModelAttack(_logistic_procedure, 1)
    with pytest.raises(ConfigError, match="num_classes must be an integer >= 2"):
        bad_shadow.fit(*_shadow_data())


# ------------------------------------------------------------ NotFittedError
def test_dpgm_not_fitted():
    model = DPGM(1, sigma_g=1.0)
    with pytest.raises(NotFittedError):
        model.sample(3)
    with pytest.raises(NotFittedError):
        model.sample_component(0, 3)


def test_latent_synthesizer_not_fitted():
    with pytest.raises(NotFittedError):
        LatentSynthesizer().synthesize(np.zeros((2, 4)), np.zeros(2, dtype=int), 1.0)
    with pytest.raises(NotFittedError):
        _ = LatentSynthesizer().sensitivity


def test_label_transfer_not_fitted():
    with pytest.raises(NotFittedError):
        LabelTransfer().predict(np.zeros((2, 2)))


def test_attacks_not_fitted():
    probs = np.array([[0.9, 0.1], [0.2, 0.8]])
    labels = np.array([0, 1])
    with pytest.raises(NotFittedError):
        ShadowModelAttack(_logistic_procedure, 2).scores(probs, labels)
    with pytest.raises(NotFittedError):
        LossThresholdAttack().predict(probs, labels)
    with pytest.raises(NotFittedError):
        BatchPropertyClassifier().predict_proba(np.zeros((2, 3)))
    with pytest.raises(NotFittedError):
        BatchPropertyClassifier(kind="logistic").top_features()
    images = np.zeros((2, 1, 8, 8), dtype=np.float32)
    small = AttackerConfig(latent_dim=4, base_channels=4, batch_size=2)
    with pytest.raises(NotFittedError):
        BlackBoxAttack((1, 8, 8), config=small).scores(images)
    with pytest.raises(NotFittedError):
        DiscriminativeAttack((1, 8, 8), config=small).scores(images)


def test_not_fitted_error_is_still_a_value_error():
    # callers that caught the old ConfigError (a ValueError) keep working
    with pytest.raises(ValueError):
        DPGM(1, sigma_g=1.0).sample(1)


# ------------------------------------------------ fit returns self, same seed
def test_dpgm_fit_returns_self_and_clones_reproduce_it():
    x = _binary_records()
    model = DPGM(1, sigma_g=2.0, epochs=1, batch_size=20, hidden=8, seed=3)
    assert model.fit(x) is model
    twin = clone(model).fit(x)
    np.testing.assert_array_equal(model.sample(10, seed=1), twin.sample(10, seed=1))
    assert model.epsilon_ == twin.epsilon_
    assert not hasattr(clone(model), "components_")  # clone is unfitted


def test_latent_synthesizer_fit_returns_self_and_clones_reproduce_it():
    rng = np.random.default_rng(0)
    x = rng.random((30, 6)).astype(np.float32)
    y = (x[:, 0] > 0.5).astype(np.int64)
    model = LatentSynthesizer(hidden=(8,), latent_dim=2, epochs=1, batch_size=16)
    assert model.fit(x, y, seed=4) is model
    twin = clone(model).fit(x, y, seed=4)
    a = model.synthesize(x, y, 2.0, seed=5)
    b = twin.synthesize(x, y, 2.0, seed=5)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    assert model.sensitivity == model.sensitivity_ == twin.sensitivity_


def test_shadow_attack_fit_returns_self_and_clones_reproduce_it():
    x, y = _shadow_data()
    attack = ShadowModelAttack(_logistic_procedure, 2, num_shadows=2, shadow_size=20)
    assert attack.fit(x, y) is attack
    twin = clone(attack).fit(x, y)
    probs = _logistic_procedure(x, y, 0).predict_proba(x)
    np.testing.assert_array_equal(attack.scores(probs, y), twin.scores(probs, y))


def test_batch_property_classifier_fit_returns_self():
    rng = np.random.default_rng(0)
    y = np.tile([0, 1], 20)
    x = rng.normal(size=(40, 5)) + y[:, None]
    clf = BatchPropertyClassifier(n_estimators=5)
    assert clf.fit(x, y) is clf
    np.testing.assert_array_equal(
        clone(clf).fit(x, y).predict_proba(x), clf.predict_proba(x)
    )
