"""One property classifier per number of observed participants (Ch. 7.2.7, Fig. 7.9)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fedleak.attacks.property.classifier import (
    BatchPropertyClassifier,
    ObservationLog,
    PropertyObservations,
    load_observations,
)
from fedleak.attacks.property.scoring import analyse_run
from sklearn.metrics import roc_auc_score


def _phase(k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Labelled rows whose property lives in feature ``k - 1`` only."""
    rng = np.random.default_rng(seed)
    y = np.tile([1, 0], n // 2)
    x = rng.normal(size=(n, 3))
    x[:, k - 1] += 3.0 * (2 * y - 1)  # the property's signal
    x[:, 2 - k] -= 3.0 * (2 * y - 1)  # the other phase's feature, reversed
    return x, y


def _observations(*, counts: bool = True) -> tuple[PropertyObservations, np.ndarray]:
    aux1, lab1 = _phase(1, 80, 1)
    aux2, lab2 = _phase(2, 80, 2)
    obs1, truth1 = _phase(1, 40, 3)
    obs2, truth2 = _phase(2, 40, 4)
    observations = PropertyObservations(
        observed_rounds=np.arange(80),
        observed=np.vstack([obs1, obs2]),
        aux_rounds=np.repeat(np.arange(80), 2),
        aux=np.vstack([aux1, aux2]),
        aux_labels=np.concatenate([lab1, lab2]),
        meta={},
        aux_participants=np.repeat([1, 2], 80) if counts else None,
        observed_participants=np.repeat([1, 2], 40) if counts else None,
    )
    return observations, np.concatenate([truth1, truth2])


def test_a_classifier_per_count_reads_each_phase_by_its_own_signal():
    obs, truth = _observations()
    clf = BatchPropertyClassifier(kind="logistic", random_state=0)
    by_count = obs.scores_by_participants(clf)
    pooled = obs.scores(obs.fit(clf))
    assert roc_auc_score(truth, by_count) > 0.99
    # one classifier over both phases: the signals cancel
    assert roc_auc_score(truth, pooled) < 0.8
    # the per-count scores are exactly those of a classifier fitted on the count
    phase2 = BatchPropertyClassifier(kind="logistic", random_state=0).fit(
        obs.aux[80:], obs.aux_labels[80:]
    )
    np.testing.assert_allclose(by_count[40:], phase2.property_scores(obs.observed[40:]))
    assert not hasattr(clf, "estimator_")  # the caller's classifier stays unfitted


def test_without_counts_or_with_one_label_the_pooled_classifier_scores():
    obs, _ = _observations(counts=False)
    clf = BatchPropertyClassifier(kind="logistic", random_state=0)
    np.testing.assert_allclose(
        obs.scores_by_participants(clf), obs.scores(obs.fit(clf))
    )
    obs, _ = _observations()
    labels = obs.aux_labels.copy()
    labels[80:] = 1  # count 2 has positives only: no classifier of its own
    one_label = PropertyObservations(
        obs.observed_rounds,
        obs.observed,
        obs.aux_rounds,
        obs.aux,
        labels,
        {},
        obs.aux_participants,
        obs.observed_participants,
    )
    scores = one_label.scores_by_participants(clf)
    pooled = one_label.scores(one_label.fit(clf))
    np.testing.assert_allclose(scores[40:], pooled[40:])
    assert not np.allclose(scores[:40], pooled[:40])
    empty = PropertyObservations(
        np.zeros(0, dtype=np.int64),
        np.zeros((0, 3)),
        obs.aux_rounds,
        obs.aux,
        obs.aux_labels,
        {},
    )
    assert empty.scores_by_participants(clf).shape == (0,)


def _write(folder, rounds_and_counts, *, with_count=True):
    log = ObservationLog(folder)
    rng = np.random.default_rng(0)
    for server_round, count in rounds_and_counts:
        meta = {"pooling": "max"}
        if with_count:
            meta["emulated_participants"] = count
        log.write_round(
            server_round,
            observed=None if server_round == 1 else rng.normal(size=3),
            observed_round=server_round - 1,
            aux=rng.normal(size=(2, 3)),
            aux_labels=np.array([1, 0]),
            meta=meta,
        )


def test_the_log_gives_each_row_the_count_of_its_round(tmp_path):
    _write(tmp_path / "adv", [(1, 1), (2, 1), (3, 2), (4, 2)])
    obs = load_observations(tmp_path / "adv")
    assert obs.aux_participants.tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
    assert obs.observed_participants.tolist() == [1, 2, 2]  # round 1 observed none
    _write(tmp_path / "old", [(1, 1), (2, 1)], with_count=False)
    old = load_observations(tmp_path / "old")
    assert old.aux_participants is None and old.observed_participants is None


def test_analyse_run_scores_by_count_on_request(tmp_path):
    _write(tmp_path / "adversary", [(r, 1 if r <= 6 else 2) for r in range(1, 13)])
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "truth.jsonl").write_text(
        "".join(
            json.dumps({"round": r, "fraction": 0.8 if r >= 6 else 0.0}) + "\n"
            for r in range(1, 12)
        ),
        encoding="utf-8",
    )
    pooled = analyse_run(tmp_path, classifier="logistic")
    per_count = analyse_run(tmp_path, classifier="logistic", by_participants=True)
    obs = load_observations(tmp_path / "adversary")
    clf = BatchPropertyClassifier(kind="logistic", random_state=0)
    expected = obs.scores_by_participants(clf)
    order = np.argsort(obs.observed_rounds, kind="stable")
    assert per_count["scores"] == pytest.approx(expected[order].tolist())
    assert per_count["scores"] != pytest.approx(pooled["scores"])
