"""One property classifier per number of observed participants (Ch. 7.2.7, Fig. 7.9)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from fedleak.attacks.property.classifier import (
    BatchPropertyClassifier,
    ObservationLog,
    PropertyObservations,
    load_observations,
)
from fedleak.attacks.property.scoring import analyse_run, phase_diagnostics
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


def test_one_observation_or_counts_on_one_side_only():
    obs, _ = _observations()
    clf = BatchPropertyClassifier(kind="logistic", random_state=0)
    # a single observed aggregate is scored by its count's classifier
    one = replace(
        obs,
        observed_rounds=obs.observed_rounds[-1:],
        observed=obs.observed[-1:],
        observed_participants=obs.observed_participants[-1:],
    )
    phase2 = BatchPropertyClassifier(kind="logistic", random_state=0).fit(
        obs.aux[80:], obs.aux_labels[80:]
    )
    scores = one.scores_by_participants(clf)
    assert scores.shape == (1,)
    np.testing.assert_allclose(scores, phase2.property_scores(obs.observed[-1:]))
    # counts for the observations but not the auxiliary rows (or the
    # reverse): the pooled classifier scores every row
    for side in ("aux_participants", "observed_participants"):
        half = replace(obs, **{side: None})
        np.testing.assert_allclose(
            half.scores_by_participants(clf), half.scores(half.fit(clf))
        )


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


def test_analyse_run_fits_on_the_early_rounds_on_request(tmp_path):
    from fedleak.errors import DataError

    _write(tmp_path / "adversary", [(r, 1 if r <= 6 else 2) for r in range(1, 13)])
    obs = load_observations(tmp_path / "adversary")
    clf = BatchPropertyClassifier(kind="logistic", random_state=0)
    order = np.argsort(obs.observed_rounds, kind="stable")
    early = analyse_run(tmp_path, classifier="logistic", fit_until=5)
    # fitted on rounds 1-5's auxiliary gradients, every observed round scored
    expected = obs.scores(obs.fit(clf, max_round=5))[order]
    assert early["scores"] == pytest.approx(expected.tolist())
    assert len(early["scores"]) == 11
    assert early["scores"] != pytest.approx(
        analyse_run(tmp_path, classifier="logistic")["scores"]
    )
    # the run's last round or beyond: the same as fitting on everything
    assert analyse_run(tmp_path, classifier="logistic", fit_until=12)["scores"] == (
        pytest.approx(analyse_run(tmp_path, classifier="logistic")["scores"])
    )
    # per count: count 2's classifier sees rounds 7-8 only
    by_count = analyse_run(
        tmp_path, classifier="logistic", by_participants=True, fit_until=8
    )
    mine = (obs.aux_participants == 2) & (obs.aux_rounds <= 8)
    two = BatchPropertyClassifier(kind="logistic", random_state=0).fit(
        obs.aux[mine], obs.aux_labels[mine]
    )
    rows = obs.observed_participants[order] == 2
    assert np.asarray(by_count["scores"])[rows] == pytest.approx(
        two.property_scores(obs.observed[order][rows])
    )
    with pytest.raises(DataError) as refused:
        analyse_run(tmp_path, classifier="logistic", fit_until=0)
    assert str(refused.value) == (
        "fit_until=0 leaves auxiliary gradients of 0 label(s); the classifier "
        "needs both (the log's first round is 1)"
    )
    # a log without counts keeps none
    _write(
        tmp_path / "old" / "adversary", [(r, 1) for r in range(1, 9)], with_count=False
    )
    old = load_observations(tmp_path / "old" / "adversary")
    assert analyse_run(tmp_path / "old", classifier="logistic", fit_until=4)[
        "scores"
    ] == pytest.approx(old.scores(old.fit(clf, max_round=4)).tolist())


def test_aux_until_keeps_the_early_rows_and_names_an_empty_log():
    from fedleak.attacks.property.scoring import _aux_until

    from fedleak.errors import DataError

    obs, _ = _observations()  # aux rounds 0-79, two rows each
    early = _aux_until(obs, 9)
    assert early.aux_rounds.tolist() == sorted(list(range(10)) * 2)
    np.testing.assert_array_equal(early.aux, obs.aux[:20])
    np.testing.assert_array_equal(early.aux_labels, obs.aux_labels[:20])
    np.testing.assert_array_equal(early.aux_participants, obs.aux_participants[:20])
    np.testing.assert_array_equal(early.observed, obs.observed)  # all scored
    empty = replace(
        obs,
        aux=obs.aux[:0],
        aux_rounds=obs.aux_rounds[:0],
        aux_labels=obs.aux_labels[:0],
        aux_participants=obs.aux_participants[:0],
    )
    with pytest.raises(DataError) as refused:
        _aux_until(empty, 5)
    assert str(refused.value).endswith("needs both (the log's first round is none)")


def _diagnostics_log(folder, *, with_count=True, one_label_in=None):
    """Rounds 1-10 observe one other, 11-20 two; aux rows pos [3, 1, 0], neg [-3, 1, 0].

    One other: the observed aggregate is a negative at half its property
    coordinate, [-1.5, 1, 0] (norm ratio sqrt(3.25 / 10)).
    Two others: an update unlike either label, [0, 0, 5], a tenth of that in
    rounds 17-20 (the last fifth of its rounds is 19-20).
    """
    log = ObservationLog(folder)
    rng = np.random.default_rng(3)
    positive, negative = np.array([3.0, 1.0, 0.0]), np.array([-3.0, 1.0, 0.0])
    for server_round in range(1, 21):
        count = 1 if server_round <= 10 else 2
        meta = {"pooling": "max"}
        if with_count:
            meta["emulated_participants"] = count
        if count == 1:
            observed = np.array([-1.5, 1.0, 0.0])
        else:
            observed = np.array([0.0, 0.0, 5.0 if server_round < 17 else 0.5])
        labels = np.array([1, 0])
        if one_label_in == count:
            labels = np.array([1, 1])
        log.write_round(
            server_round,
            observed=observed,
            observed_round=server_round,
            aux=np.stack([positive, negative]) + rng.normal(scale=0.01, size=(2, 3)),
            aux_labels=labels,
            meta=meta,
        )


def test_phase_diagnostics_compare_the_emulated_and_the_observed_aggregates(tmp_path):
    _diagnostics_log(tmp_path / "adversary")
    found = phase_diagnostics(tmp_path, classifier="logistic", folds=5)
    assert set(found) == {"1", "2"}
    one, two = found["1"], found["2"]
    # the adversary's own examples separate perfectly in each phase
    assert one["aux_cv_auc"] == 1.0 and two["aux_cv_auc"] == 1.0
    assert one["aux_median_property"] > 0.8 > 0.2 > one["aux_median_none"]
    # one other: the observed updates look like negatives
    assert one["observed_median"] < 0.5
    aux_norm = np.sqrt(10.0)
    assert one["norm_ratio"] == pytest.approx(np.sqrt(3.25) / aux_norm, rel=0.01)
    assert one["norm_ratio_last_fifth"] == pytest.approx(
        np.sqrt(3.25) / aux_norm, rel=0.01
    )
    # both labels' emulations have the same size
    assert one["label_norm_ratio"] == pytest.approx(1.0, abs=0.02)
    assert two["label_norm_ratio_last_fifth"] == pytest.approx(1.0, abs=0.02)
    # two others: the whole phase's median, then the last fifth's (rounds 19-20)
    assert two["norm_ratio"] == pytest.approx(5.0 / aux_norm, rel=0.01)
    assert two["norm_ratio_last_fifth"] == pytest.approx(0.5 / aux_norm, rel=0.01)
    assert 0.0 <= two["observed_median"] <= 1.0


def test_phase_diagnostics_without_counts_or_with_one_label(tmp_path):
    _diagnostics_log(tmp_path / "old" / "adversary", with_count=False)
    (only,) = phase_diagnostics(tmp_path / "old", classifier="logistic").items()
    assert only[0] == "1"  # logs without counts: one phase
    assert only[1]["aux_cv_auc"] == 1.0
    _diagnostics_log(tmp_path / "one" / "adversary", one_label_in=2)
    two = phase_diagnostics(tmp_path / "one", classifier="logistic")["2"]
    assert two["aux_cv_auc"] is None and two["observed_median"] is None
    assert two["aux_median_property"] is None and two["aux_median_none"] is None
    assert two["norm_ratio"] == pytest.approx(5.0 / np.sqrt(10.0), rel=0.01)


def _ratio_observations() -> PropertyObservations:
    """Count 1 in rounds 1-10, count 2 in rounds 11-14; aux norms vary by round.

    Round r's two aux rows have norm r / 20 (some below 1); round 5's are zero
    (no scale: skipped); the observation of round 0 has no aux rows (skipped).
    An observation of round r has the ratio 0.5 to them in count 1 and 2 in
    count 2, except rounds 9 and 13 (ratio 4) and 10 and 14 (ratio 8).
    """
    rounds = list(range(1, 15))
    aux_rows, aux_rounds, aux_counts, labels = [], [], [], []
    for r in rounds:
        norm = 0.0 if r == 5 else r / 20
        for label in (1, 0):
            aux_rows.append([norm, 0.0])
            aux_rounds.append(r)
            aux_counts.append(1 if r <= 10 else 2)
            labels.append(label)
    observed, observed_rounds, observed_counts = [[9.0, 0.0]], [0], [1]
    for r in rounds:
        count = 1 if r <= 10 else 2
        ratio = 0.5 if count == 1 else 2.0
        if r in (9, 13):
            ratio = 4.0
        if r in (10, 14):
            ratio = 8.0
        observed.append([0.0, ratio * r / 20])
        observed_rounds.append(r)
        observed_counts.append(count)
    return PropertyObservations(
        observed_rounds=np.asarray(observed_rounds),
        observed=np.asarray(observed),
        aux_rounds=np.asarray(aux_rounds),
        aux=np.asarray(aux_rows),
        aux_labels=np.asarray(labels),
        meta={},
        aux_participants=np.asarray(aux_counts),
        observed_participants=np.asarray(observed_counts),
    )


def test_norm_ratios_compare_each_observation_with_its_own_rounds_aux_rows():
    from fedleak.attacks.property.scoring import _norm_ratios

    obs = _ratio_observations()
    one = obs.observed_participants == 1
    # count 1: rounds 1-4, 6-8 at 0.5, 9 at 4, 10 at 8 (rounds 0 and 5 skipped);
    # its last fifth is its last 9 // 5 = 1 ratio
    assert _norm_ratios(obs, one, obs.aux_participants == 1) == (0.5, 8.0)
    # count 2: rounds 11-12 at 2, 13 at 4, 14 at 8; a last fifth of one ratio
    two = obs.observed_participants == 2
    assert _norm_ratios(obs, two, obs.aux_participants == 2) == (3.0, 8.0)
    # rounds 0-11 as one count: ten ratios, a last fifth of two (8 and 2)
    many = replace(
        obs,
        observed_rounds=obs.observed_rounds[:12],
        observed=obs.observed[:12],
        aux_participants=np.ones_like(obs.aux_participants),
        observed_participants=np.ones(12, dtype=int),
    )
    all_seen = np.ones(12, dtype=bool)
    median, last = _norm_ratios(many, all_seen, np.ones(obs.aux.shape[0], bool))
    assert median == pytest.approx(0.5) and last == pytest.approx(5.0)
    # nothing to compare
    none = np.zeros(obs.observed.shape[0], dtype=bool)
    assert _norm_ratios(obs, none, obs.aux_participants == 1) == (None, None)


def test_label_norm_ratios_compare_each_rounds_two_labels():
    from fedleak.attacks.property.scoring import _label_norm_ratios, _phase

    # round r: the property's row has norm r, the other's 1 (ratio r); round
    # 4's row without it is zero (skipped); round 11 has no row without it
    rows, rounds, labels = [], [], []
    for r in range(1, 12):
        rows.append([float(r), 0.0])
        rounds.append(r)
        labels.append(1)
        if r != 11:
            rows.append([0.0, 0.0 if r == 4 else 1.0])
            rounds.append(r)
            labels.append(0)
    obs = PropertyObservations(
        observed_rounds=np.asarray([1]),
        observed=np.asarray([[1.0, 0.0]]),
        aux_rounds=np.asarray(rounds),
        aux=np.asarray(rows),
        aux_labels=np.asarray(labels),
        meta={},
        aux_participants=np.asarray([1 if r <= 6 else 2 for r in rounds]),
        observed_participants=np.asarray([1]),
    )
    everything = np.ones(len(rows), dtype=bool)
    # ratios 1, 2, 3, 5, ..., 10: median 6; the last fifth is one ratio, 10
    assert _label_norm_ratios(obs, everything) == (6.0, 10.0)
    # rounds 1-6 only: 1, 2, 3, 5, 6
    assert _label_norm_ratios(obs, obs.aux_participants == 1) == (3.0, 6.0)
    # two property rows in a round: their median over the other's
    doubled = replace(
        obs,
        aux=np.vstack([obs.aux, [[5.0, 0.0]]]),
        aux_rounds=np.append(obs.aux_rounds, 1),
        aux_labels=np.append(obs.aux_labels, 1),
        aux_participants=np.append(obs.aux_participants, 1),
    )
    assert _label_norm_ratios(doubled, doubled.aux_participants == 1) == (3.0, 6.0)
    assert _label_norm_ratios(doubled, doubled.aux_rounds == 1) == (3.0, 3.0)
    # no round with both labels and a non-zero divisor
    assert _label_norm_ratios(obs, obs.aux_rounds == 4) == (None, None)
    assert _label_norm_ratios(obs, obs.aux_rounds == 11) == (None, None)
    clf = BatchPropertyClassifier(kind="logistic", random_state=0)
    found = _phase(obs, 2, clf, 5)
    assert found["label_norm_ratio"] == 8.5  # rounds 7-10
    assert found["label_norm_ratio_last_fifth"] == 10.0


def test_a_phase_without_aux_rows_or_observations_gives_nones():
    from fedleak.attacks.property.scoring import _phase

    obs = _ratio_observations()
    clf = BatchPropertyClassifier(kind="logistic", random_state=0)
    missing = _phase(obs, 3, clf, 5)  # no row of count 3 at all
    assert set(missing) == {
        "aux_cv_auc",
        "aux_median_property",
        "aux_median_none",
        "observed_median",
        "norm_ratio",
        "norm_ratio_last_fifth",
        "label_norm_ratio",
        "label_norm_ratio_last_fifth",
    }
    assert set(missing.values()) == {None}
    only_aux = replace(
        obs,
        observed_rounds=obs.observed_rounds[:1],
        observed=obs.observed[:1],
        observed_participants=np.asarray([1]),
    )
    found = _phase(only_aux, 2, clf, 5)  # aux rows of count 2, no observation
    assert found["aux_cv_auc"] is not None and found["observed_median"] is None
    assert found["norm_ratio"] is None
    # negatives only: no classifier
    negatives = replace(obs, aux_labels=np.zeros_like(obs.aux_labels))
    assert _phase(negatives, 2, clf, 5)["aux_cv_auc"] is None


def test_phase_diagnostics_use_the_given_classifier_seed_and_folds(tmp_path):
    from sklearn.model_selection import StratifiedKFold

    _write(tmp_path / "adversary", [(r, 1) for r in range(1, 41)])
    obs = load_observations(tmp_path / "adversary")
    cases: list[dict[str, Any]] = [
        {},
        {"seed": 3, "normalize": True, "folds": 4},
        {"classifier": "logistic"},
    ]
    for kwargs in cases:
        found = phase_diagnostics(tmp_path, **kwargs)["1"]
        clf = BatchPropertyClassifier(
            kind=kwargs.get("classifier", "random-forest"),
            random_state=kwargs.get("seed", 0),
            normalize=kwargs.get("normalize", False),
        )
        x, y = obs.aux, obs.aux_labels
        cv = np.empty(y.size)
        folds = StratifiedKFold(kwargs.get("folds", 5), shuffle=True, random_state=0)
        for train, test in folds.split(x, y):
            cv[test] = clf.fit(x[train], y[train]).property_scores(x[test])
        assert found["aux_cv_auc"] == pytest.approx(roc_auc_score(y, cv))
        assert found["aux_median_property"] == pytest.approx(np.median(cv[y == 1]))
        observed = clf.fit(x, y).property_scores(obs.observed)
        assert found["observed_median"] == pytest.approx(np.median(observed))
    # two examples of each label still make two folds
    _write(tmp_path / "small" / "adversary", [(1, 1), (2, 1)])
    assert phase_diagnostics(tmp_path / "small")["1"]["aux_cv_auc"] is not None
