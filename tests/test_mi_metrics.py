"""The common MI interface: decisions, metrics, single and set MI (seed 004 Ch. 4.2)."""

from __future__ import annotations

import numpy as np
import pytest
from fedleak.attacks.membership.metrics import (
    evaluate_scores,
    max_membership_advantage,
    membership_advantage,
    mi_trials,
    precision_recall,
    set_mi_accuracy,
    set_mi_decision,
    single_mi_accuracy,
    threshold_decision,
    top_n_accuracy,
    top_n_decision,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import precision_score, recall_score, roc_auc_score

from fedleak.errors import ConfigError, DataError

SCORES = np.array([0.9, 0.8, 0.75, 0.4, 0.35, 0.3, 0.2, 0.1, 0.05, 0.6])
MEMBERS = np.array([1, 1, 0, 1, 0, 0, 0, 0, 0, 1], dtype=bool)


def test_metrics_match_scikit_learn() -> None:
    rng = np.random.default_rng(0)
    m = evaluate_scores(SCORES, MEMBERS, rng, threshold=0.5)
    pred = SCORES >= 0.5
    assert m.precision == pytest.approx(precision_score(MEMBERS, pred))
    assert m.recall == pytest.approx(recall_score(MEMBERS, pred))
    assert m.auc == pytest.approx(roc_auc_score(MEMBERS, SCORES))
    tpr, fpr = pred[MEMBERS].mean(), pred[~MEMBERS].mean()
    assert m.advantage == pytest.approx(tpr - fpr)
    # top-4: 0.9, 0.8, 0.75, 0.6 -> three members
    assert m.accuracy == pytest.approx(0.75)
    assert m.baseline == pytest.approx(0.4)
    assert precision_recall(pred, MEMBERS) == (m.precision, m.recall)
    assert membership_advantage(pred, MEMBERS) == m.advantage


@given(st.lists(st.floats(-5, 5), min_size=4, max_size=40), st.integers(0, 2**31))
@settings(max_examples=40, deadline=None)
def test_max_advantage_bounds_every_threshold(values: list[float], seed: int) -> None:
    scores = np.array(values)
    labels = np.random.default_rng(seed).random(scores.shape[0]) < 0.5
    if labels.all() or not labels.any():
        labels[0], labels[-1] = True, False
    best = max_membership_advantage(scores, labels)
    for t in scores:
        assert (
            membership_advantage(threshold_decision(scores, t), labels) <= best + 1e-12
        )


def test_top_n_breaks_ties_at_random_and_is_seeded() -> None:
    scores = np.zeros(10)
    picks = [
        np.flatnonzero(top_n_decision(scores, 3, np.random.default_rng(s)))
        for s in range(20)
    ]
    assert all(p.shape == (3,) for p in picks)
    assert len({tuple(p) for p in picks}) > 5  # not always the first three
    again = np.flatnonzero(top_n_decision(scores, 3, np.random.default_rng(0)))
    np.testing.assert_array_equal(picks[0], again)


def test_top_n_accuracy_and_errors() -> None:
    rng = np.random.default_rng(0)
    assert top_n_accuracy(SCORES, MEMBERS, rng, n=2) == 1.0
    with pytest.raises(ConfigError):
        top_n_decision(SCORES, 11, rng)
    with pytest.raises(DataError):
        evaluate_scores(SCORES, np.ones(10, dtype=bool), rng)
    with pytest.raises(DataError):
        evaluate_scores(np.array([np.nan, 1.0]), np.array([True, False]), rng)


def test_single_mi_on_hand_made_scores() -> None:
    rng = np.random.default_rng(0)
    assert single_mi_accuracy(
        np.array([3.0, 2.0, 0.0]), np.array([1.0, -1.0, 0.5]), rng
    ) == pytest.approx(2 / 3)


def test_set_mi_majority_and_tie_break() -> None:
    a = np.array([5.0, 4.0, 0.0])  # top-3 of the union: 5, 4, 3 -> two from a
    b = np.array([3.0, 1.0, -1.0])
    assert all(set_mi_decision(a, b, np.random.default_rng(s)) == 0 for s in range(10))
    assert all(set_mi_decision(b, a, np.random.default_rng(s)) == 1 for s in range(10))
    # an even split of the top records (2 vs 2) is a coin flip
    tie_a = np.array([4.0, 2.0, 0.0, -1.0])
    tie_b = np.array([3.0, 1.0, -2.0, -3.0])
    decisions = [
        set_mi_decision(tie_a, tie_b, np.random.default_rng(s)) for s in range(200)
    ]
    assert 0.35 < np.mean(decisions) < 0.65
    # equal scores everywhere: ties at the cut-off are random too
    flat = [
        set_mi_decision(np.ones(3), np.ones(3), np.random.default_rng(s))
        for s in range(200)
    ]
    assert 0.35 < np.mean(flat) < 0.65
    with pytest.raises(DataError):
        set_mi_decision(np.ones(3), np.ones(2), np.random.default_rng(0))


def test_set_mi_accuracy_separable_and_chance() -> None:
    rng = np.random.default_rng(1)
    members, others = rng.normal(1.0, 1.0, 200), rng.normal(0.0, 1.0, 200)
    assert set_mi_accuracy(members, others, set_size=50, trials=100, rng=rng) > 0.95
    acc = set_mi_accuracy(others, others, set_size=50, trials=300, rng=rng)  # same pool
    assert 0.4 < acc < 0.6
    with pytest.raises(ConfigError):
        set_mi_accuracy(members, others, set_size=201, trials=1, rng=rng)


def test_mi_trials_passes_the_presented_indices() -> None:
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def score(i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seen.append((i, j))
        return np.ones(i.shape[0]), np.zeros(j.shape[0])

    single, set_acc = mi_trials(
        score, 30, 40, set_size=5, trials=7, rng=np.random.default_rng(0)
    )
    assert (single, set_acc) == (1.0, 1.0)
    assert len(seen) == 7
    assert all(len(set(i)) == 5 and i.max() < 30 and j.max() < 40 for i, j in seen)
