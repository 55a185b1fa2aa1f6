"""The property classifier's features in the in-process simulation (Ch. 7.1.4)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fedleak.attacks.property.simulation import property_features, simulate_property

from fedleak.defenses import EMBEDDING_KEY
from fedleak.errors import ConfigError


def _updates() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    a = {EMBEDDING_KEY: rng.normal(size=(6, 4)), "fc.weight": rng.normal(size=(2, 3))}
    louder = np.ones((6, 1))
    louder[1] = 5.0  # word 1 moved five times as far
    b = {EMBEDDING_KEY: a[EMBEDDING_KEY] * louder, "fc.weight": a["fc.weight"]}
    return a, b


def test_bag_of_words_is_blind_to_magnitudes_the_embedding_features_are_not():
    """Every row moved in both updates (as under DP noise): the bags are equal."""
    a, b = _updates()
    np.testing.assert_array_equal(
        property_features(a, "bow"), property_features(b, "bow")
    )
    np.testing.assert_array_equal(property_features(a, "bow"), np.ones(6))
    assert not np.array_equal(
        property_features(a, "embedding"), property_features(b, "embedding")
    )
    np.testing.assert_allclose(
        property_features(a, "embedding"), np.abs(a[EMBEDDING_KEY]).max(axis=1)
    )


def test_max_features_pool_every_layer():
    a, _ = _updates()
    pooled = property_features(a, "max")
    assert pooled.shape == (6 + 2,)  # one per word row, one per output unit
    np.testing.assert_allclose(pooled[6:], a["fc.weight"].max(axis=1))


def test_unknown_features_are_refused():
    nothing: Any = None
    with pytest.raises(ConfigError, match="features"):
        simulate_property(
            nothing, np.zeros(0, bool), nothing, rounds=1, seed=0, features="words"
        )


def _server_change(lr: float) -> tuple[dict[str, np.ndarray], ...]:
    rng = np.random.default_rng(1)
    shape = {EMBEDDING_KEY: (5, 3), "fc.weight": (2, 3)}
    params = {k: rng.normal(size=s) for k, s in shape.items()}
    own = {k: rng.normal(size=s).astype(np.float32) for k, s in shape.items()}
    others = {k: rng.normal(size=s) for k, s in shape.items()}
    others[EMBEDDING_KEY][:3] = 0.0  # rows only the adversary touched: the fit's
    new = {k: params[k] - lr * (own[k] + others[k]) for k in shape}
    return params, new, own, others


@pytest.mark.parametrize("estimate", [float("inf"), float("nan"), -1e300])
def test_others_update_survives_a_wild_scale_estimate(monkeypatch, estimate):
    """Under record-level DP noise the own-scale fit can be anything: the
    others' gradient stays finite, and a non-finite fit falls back to the
    server's step (the adversary knows sync-SGD's rule)."""
    from fedleak.attacks.property import simulation as sim

    params, new, own, others = _server_change(0.3)
    monkeypatch.setattr(sim, "contribution_scale", lambda *_: estimate)
    read = sim._others_update(params, new, own, 0.3)
    assert all(np.isfinite(v).all() for v in read.values())
    if not np.isfinite(estimate):
        for k in others:
            np.testing.assert_allclose(read[k], others[k], rtol=1e-6, atol=1e-12)


def test_others_update_uses_the_fitted_scale_when_it_is_finite():
    from fedleak.attacks.property import simulation as sim

    params, new, own, others = _server_change(0.3)
    read = sim._others_update(params, new, own, 0.3)
    for k in others:
        np.testing.assert_allclose(read[k], others[k], rtol=1e-5, atol=1e-6)


def test_non_finite_observed_features_are_refused_by_name():
    from types import SimpleNamespace

    from fedleak.attacks.property import simulation as sim

    from fedleak.errors import DataError

    rounds = SimpleNamespace(
        features=("embedding",),
        aux_x={"embedding": [np.zeros(3), np.ones(3)] * 4},
        aux_y=[0, 1] * 4,
    )
    observed = [np.ones(3), np.array([1.0, np.inf, 0.0]), np.zeros(3)]
    with pytest.raises(DataError, match="1 of 3 observed updates"):
        sim._property_auc(rounds, "embedding", observed, [1, 0, 1], 0)  # type: ignore[arg-type]


def test_a_string_is_not_a_sequence_of_feature_sets():
    from fedleak.attacks.property.simulation import simulate_property_attacks

    nothing: Any = None
    for bad in ("max", (), ("max", "words")):
        with pytest.raises(ConfigError, match="features"):
            simulate_property_attacks(
                nothing, np.zeros(0, bool), nothing, rounds=1, seed=0, features=bad
            )


def test_both_classifiers_score_the_same_rounds():
    """One simulation with two feature sets gives each the AUC its own run gives."""
    from fedleak.attacks.membership.simulation import MembershipSetup
    from fedleak.attacks.property.simulation import simulate_property_attacks

    from fedleak.bench.defenses import StandIn, _dataset

    data, top = _dataset(True, 0, StandIn(0.2))
    setup = MembershipSetup(
        model="text-cnn", embedding_dim=8, cnn_hidden=None, batch_size=10, epochs=1
    )
    both = simulate_property_attacks(
        data, top, setup, rounds=12, seed=3, features=("embedding", "max")
    )
    assert set(both) == {"embedding", "max"}
    for kind in both:
        alone = simulate_property(data, top, setup, rounds=12, seed=3, features=kind)
        assert both[kind] == alone
    assert both["embedding"] != both["max"]


def test_after_round_sees_every_round_and_changes_nothing():
    """The callback gets rounds 1..R and each round's parameters; AUCs unchanged."""
    from fedleak.attacks.membership.simulation import MembershipSetup
    from fedleak.attacks.property.simulation import simulate_property_attacks

    from fedleak.bench.defenses import StandIn, _dataset

    data, top = _dataset(True, 0, StandIn(0.2))
    setup = MembershipSetup(
        model="text-cnn", embedding_dim=8, cnn_hidden=None, batch_size=10, epochs=1
    )
    seen: list[tuple[int, dict[str, np.ndarray]]] = []
    watched = simulate_property_attacks(
        data,
        top,
        setup,
        rounds=6,
        seed=3,
        features=("embedding",),
        after_round=lambda t, params: seen.append((t, params)),
    )
    assert [t for t, _ in seen] == [1, 2, 3, 4, 5, 6]
    # the parameters move from round to round
    first, last = seen[0][1], seen[-1][1]
    assert set(first) == set(last)
    assert any(not np.array_equal(first[k], last[k]) for k in first)
    plain = simulate_property_attacks(
        data, top, setup, rounds=6, seed=3, features=("embedding",)
    )
    assert watched == plain
