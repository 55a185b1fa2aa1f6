"""Library functions leave their callers' objects alone.

A function that takes a dict, list, array or estimator from its caller and
writes into it surprises the caller (the experiment mapping reused for a
second run, the classifier prototype reused for a second attack); fedleak
copies instead, or says "in place" in the name or the docstring.
"""

from __future__ import annotations

import copy
import types

import numpy as np
import pytest
from fedleak.attacks.property.classifier import (
    BatchPropertyClassifier,
    PropertyObservations,
)
from hypothesis import given
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression
from sklearn.utils.validation import check_is_fitted

from fedleak.experiments import apply_overrides
from fedleak.privacy.accounting import (
    GaussianEvent,
    MomentsAccountant,
    SampledGaussianEvent,
)
from fedleak.synth.latent import LabelTransfer


# ------------------------------------------------------------ apply_overrides
def test_apply_overrides_leaves_the_nested_input_untouched():
    raw = {
        "rounds": 3,
        "strategy": {"name": "sync-sgd", "dp": {"sigma": 1.0}},
        "faults": {"crash_clients": [1, 2]},
    }
    before = copy.deepcopy(raw)
    result = apply_overrides(
        raw,
        [
            "rounds=5",
            "strategy.dp.sigma=2.0",
            "strategy.extra.deep=1",
            "faults.crash_clients=[3]",
        ],
    )
    assert raw == before
    assert result["rounds"] == 5
    assert result["strategy"]["dp"] == {"sigma": 2.0}
    assert result["strategy"]["extra"] == {"deep": 1}
    assert result["faults"]["crash_clients"] == [3]
    # no part of the result is shared with the input
    result["strategy"]["name"] = "changed"
    result["faults"]["crash_clients"].append(9)
    assert raw == before


def test_apply_overrides_copies_lists_it_does_not_override():
    raw = {"faults": {"crash_clients": [1, 2], "crash_rounds": [1]}}
    result = apply_overrides(raw, ["rounds=2"])
    result["faults"]["crash_clients"].append(3)
    assert raw["faults"]["crash_clients"] == [1, 2]


def test_apply_overrides_turns_read_only_mappings_into_dicts():
    inner = types.MappingProxyType({"sigma": 1.0})
    raw = types.MappingProxyType({"strategy": types.MappingProxyType({"dp": inner})})
    result = apply_overrides(raw, ["strategy.dp.sigma=3.0"])
    assert result == {"strategy": {"dp": {"sigma": 3.0}}}
    assert inner["sigma"] == 1.0


keys = st.text(alphabet="abc", min_size=1, max_size=2)
leaves = st.integers(-5, 5) | st.lists(st.integers(0, 3), max_size=3)
nested = st.recursive(
    st.dictionaries(keys, leaves, max_size=3),
    lambda children: st.dictionaries(keys, children | leaves, max_size=3),
    max_leaves=10,
)


@given(raw=nested, data=st.data(), value=st.integers())
def test_apply_overrides_never_changes_its_input(raw, data, value):
    # walk into existing sections (where a shallow copy would leak the write),
    # then override an existing or a new key there
    path, node = [], raw
    while isinstance(node, dict) and node and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(node)))
        path.append(key)
        node = node[key]
    path.append(data.draw(keys))
    before = copy.deepcopy(raw)
    try:
        result = apply_overrides(raw, [f"{'.'.join(path)}={value}"])
    except ValueError:  # a path through a non-section: refused, input intact
        assert raw == before
        return
    assert raw == before
    node = result
    for part in path[:-1]:
        node = node[part]
    assert node[path[-1]] == value


# --------------------------------------------------------- MomentsAccountant
def test_moments_accountant_ledger_is_read_only():
    acc = MomentsAccountant().compose(SampledGaussianEvent(0.01, 1.1), 100)
    ledger = acc.ledger
    assert ledger == ((SampledGaussianEvent(0.01, 1.1), 100),)
    assert isinstance(ledger, tuple)
    with pytest.raises(AttributeError):
        acc.ledger = []  # type: ignore[misc]
    epsilon = acc.get_epsilon(1e-5)
    # a caller holding an old view cannot change what the accountant spent
    acc.compose(GaussianEvent(5.0))
    assert ledger == ((SampledGaussianEvent(0.01, 1.1), 100),)
    assert len(acc.ledger) == 2
    assert acc.get_epsilon(1e-5) > epsilon


def test_moments_accountant_ledger_is_not_a_constructor_argument():
    with pytest.raises(TypeError):
        MomentsAccountant(ledger=[(GaussianEvent(1.0), 10**6)])  # type: ignore[call-arg]


# ------------------------------------------------- estimators given by callers
def test_label_transfer_fits_a_copy_of_the_callers_classifier():
    rng = np.random.default_rng(0)
    codes = rng.normal(size=(60, 3))
    labels = (codes[:, 0] > 0).astype(int)
    prototype = LogisticRegression(C=0.5, max_iter=500)
    model = LabelTransfer(prototype).fit(codes, labels)
    assert not hasattr(prototype, "coef_")  # the caller's object is untouched
    assert model.classifier is prototype
    assert model.classifier_ is not prototype
    assert model.classifier_.C == 0.5
    assert (model.predict(codes) == labels).mean() > 0.9


def test_property_observations_fit_trains_a_clone():
    rng = np.random.default_rng(1)
    labels = np.tile([0, 1], 40)
    aux = rng.normal(size=(80, 6)) + 2.0 * labels[:, None]
    observations = PropertyObservations(
        observed_rounds=np.arange(1, 5),
        observed=rng.normal(size=(4, 6)),
        aux_rounds=np.repeat(np.arange(1, 21), 4),
        aux=aux,
        aux_labels=labels,
        meta={},
    )
    prototype = BatchPropertyClassifier(kind="logistic")
    fitted = observations.fit(prototype)
    assert fitted is not prototype
    assert not hasattr(prototype, "estimator_")
    check_is_fitted(fitted)
    assert fitted.get_params() == prototype.get_params()
    # the same prototype serves twice and gives the same classifier
    again = observations.fit(prototype)
    np.testing.assert_array_equal(
        again.property_scores(aux), fitted.property_scores(aux)
    )
