"""The text property experiment's K sweep, labels and diagnostics."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from fedleak.attacks.property import text as text_attack

from fedleak.bench import property as bench
from fedleak.bench.property import _Settings, _text_plan, _text_row, auc_by_fifth
from fedleak.bench.text_steps import (
    TEXT_SUMMED_STEP,
    TEXT_TWO_PARTY_LEARNING_RATE,
    on_text_fraction_sweep,
    on_text_k_sweep,
    text_label,
    text_learning_rate,
)
from fedleak.errors import DataError


def _settings(tmp_path, quick: bool) -> _Settings:
    return _Settings(tmp_path / "t.json", quick, 7, None, None, None, False, print)


def test_the_k_sweep_holds_the_summed_step_at_the_two_party_size():
    assert TEXT_TWO_PARTY_LEARNING_RATE == 0.3 and TEXT_SUMMED_STEP == 0.6
    assert text_learning_rate(2) == TEXT_TWO_PARTY_LEARNING_RATE
    assert [text_learning_rate(k) for k in (4, 8)] == [0.15, 0.075]


@pytest.mark.parametrize(
    ("params", "label", "on_sweep"),
    [
        ({"participants": 2, "batch_fraction": 1.0}, "startrek-K2-f1.0", True),
        (
            {"participants": 2, "batch_fraction": 1.0, "learning_rate": 0.3},
            "startrek-K2-f1.0",
            True,
        ),
        (
            {"participants": 4, "batch_fraction": 1.0, "learning_rate": 0.15},
            "startrek-K4-f1.0-lr0.15",
            True,
        ),
        (
            {"participants": 8, "batch_fraction": 1.0, "learning_rate": 0.075},
            "startrek-K8-f1.0-lr0.075",
            True,
        ),
        (
            {"participants": 8, "batch_fraction": 1.0, "learning_rate": 0.3},
            "startrek-K8-f1.0",
            False,
        ),
        # records made before the sweep held the step ran K > 2 at 0.3
        ({"participants": 4, "batch_fraction": 1.0}, "startrek-K4-f1.0", False),
        (
            {"participants": 4, "batch_fraction": 0.5, "learning_rate": 0.15},
            "startrek-K4-f0.5-lr0.15",
            False,
        ),
    ],
)
def test_labels_and_sweep_membership(params, label, on_sweep):
    params = {"property": "startrek", **params}
    assert text_label(params) == label
    assert on_text_k_sweep(params) is on_sweep


@pytest.mark.parametrize(
    ("params", "on_sweep"),
    [
        ({"participants": 2, "batch_fraction": 0.3}, True),  # before rates
        ({"participants": 2, "batch_fraction": 0.3, "learning_rate": 0.3}, True),
        ({"participants": 2, "batch_fraction": 0.3, "learning_rate": 0.1}, False),
        ({"participants": 4, "batch_fraction": 0.3, "learning_rate": 0.3}, False),
    ],
)
def test_fraction_sweep_membership(params, on_sweep):
    assert on_text_fraction_sweep(params) is on_sweep


def test_the_sweep_tolerates_rounding_only():
    def on(rate: float) -> bool:
        params = {"participants": 4, "batch_fraction": 1.0, "learning_rate": rate}
        return on_text_k_sweep(params)

    assert on(0.6 / 4) and on((0.6 + 1e-10) / 4)
    assert not on((0.6 + 1e-9) / 4) and not on((0.6 - 1e-9) / 4)


def test_the_plan_runs_the_k_sweep_at_the_held_step_and_k8_at_both(tmp_path):
    plan = _text_plan(_settings(tmp_path, quick=False))
    labels = [text_label(params) for _, params in plan]
    assert labels == [
        "startrek-K2-f1.0",
        "linux-K2-f1.0",
        "food-K2-f1.0",
        "love-K2-f1.0",
        "startrek-K2-f0.1",
        "startrek-K2-f0.3",
        "startrek-K2-f0.5",
        "startrek-K4-f1.0-lr0.15",
        "startrek-K8-f1.0-lr0.075",
        "startrek-K8-f1.0",
    ]
    assert all(category == params["property"] for category, params in plan)
    quick = _text_plan(_settings(tmp_path, quick=True))
    assert [text_label(p) for _, p in quick] == ["startrek-K2-f1.0"]
    assert quick[0][1]["learning_rate"] == 0.3


def test_a_text_row_passes_the_learning_rate_and_records_the_diagnostics(
    tmp_path, monkeypatch
):
    calls = []
    truth = np.array([0, 1] * 10)
    scores = np.where(truth == 1, 0.9, 0.1).astype(float)
    scores[:4] = scores[:4][::-1]  # the first fifth ranked wrongly

    task_seen = []

    def fake(task, category, **kwargs):
        task_seen.append(task)
        calls.append((category, kwargs))
        return SimpleNamespace(
            auc=0.8,
            scores=scores,
            truth=truth,
            top_words=("spock", "kirk"),
            correlation=0.1,
            test_accuracy=0.85,
            accuracy_curve={"plateau": True},
            auxiliary_cv_auc=0.97,
        )

    monkeypatch.setattr(text_attack, "run_text_property_attack", fake)
    params = {
        "property": "startrek",
        "participants": 8,
        "batch_fraction": 1.0,
        "learning_rate": 0.075,
    }
    said: list[str] = []
    settings = _Settings(
        tmp_path / "t.json", False, 7, None, None, None, False, said.append
    )
    task = object()
    row = _text_row(settings, task, "startrek", params, 20)
    ((category, kwargs),) = calls
    assert category == "startrek"
    assert kwargs == {
        "rounds": 20,
        "participants": 8,
        "batch_fraction": 1.0,
        "learning_rate": 0.075,
        "seed": 7,
        "cross_validate": True,
    }
    assert task_seen == [task]
    assert row == {
        "label": "startrek-K8-f1.0-lr0.075",
        "params": {**params, "secure_aggregation": False},
        "rounds": 20,
        "num_clients": 8,
        "auc": 0.8,
        "dataset_score": pytest.approx(float(np.mean(scores))),
        "top_words": ["spock", "kirk"],
        "correlation": 0.1,
        "wall_s": row["wall_s"],
        "median_round_s": pytest.approx(row["wall_s"] / 20),
        "test_accuracy": 0.85,
        "accuracy": {"plateau": True},
        "auxiliary_cv_auc": 0.97,
        "auc_by_fifth": [0.0, 1.0, 1.0, 1.0, 1.0],
        "series": {"rounds": list(range(1, 21)), "scores": scores.tolist()},
        "truth": truth.tolist(),
    }
    assert 0.0 <= row["wall_s"] < 60.0
    assert said == [
        "text: startrek-K8-f1.0-lr0.075 (20 rounds)",
        "  AUC 0.800, top words spock, kirk",
    ]


def test_auc_by_fifth_scores_each_fifth_of_the_rounds_in_order():
    truth = np.array([0, 1] * 10)
    perfect = truth.astype(float)
    assert auc_by_fifth(truth, perfect) == [1.0] * 5
    backwards = perfect.copy()
    backwards[16:] = 1.0 - backwards[16:]
    assert auc_by_fifth(truth, backwards) == [1.0, 1.0, 1.0, 1.0, 0.0]
    # a fifth with one kind of batch has no AUC
    one_kind = np.array([0] * 4 + [0, 1] * 8)
    assert auc_by_fifth(one_kind, one_kind.astype(float)) == [None, 1.0, 1.0, 1.0, 1.0]
    # uneven lengths: the first fifths take the extra rounds
    assert len(auc_by_fifth(np.array([0, 1] * 6 + [0]), np.zeros(13))) == 5


def test_auxiliary_cv_auc_is_high_on_separable_bags_and_chance_on_noise():
    rng = np.random.default_rng(3)
    labels = np.array([0, 1] * 60)
    noise = rng.random((120, 30)) < 0.2
    separable = noise.copy()
    separable[:, 0] = labels == 1  # one word marks the property
    assert text_attack.auxiliary_cv_auc(separable.astype(float), labels) > 0.99
    chance = text_attack.auxiliary_cv_auc(noise.astype(float), labels, seed=1)
    assert 0.3 < chance < 0.7
    again = text_attack.auxiliary_cv_auc(noise.astype(float), labels, seed=1)
    assert again == chance  # seeded folds


def test_bench_module_uses_the_shared_text_constants():
    assert bench.TEXT_TWO_PARTY_LEARNING_RATE is TEXT_TWO_PARTY_LEARNING_RATE


def test_auxiliary_cv_auc_is_five_seeded_folds_of_the_logistic_classifier():
    from fedleak.attacks.property.classifier import BatchPropertyClassifier
    from sklearn.base import clone
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold

    rng = np.random.default_rng(5)
    labels = np.array([0, 1] * 40)
    features = (rng.random((80, 12)) < 0.3).astype(float)
    features[:, 0] += 0.4 * labels * rng.random(80)  # a weak, noisy signal

    def by_hand(folds: int, seed: int, kind: str) -> float:
        unfitted = BatchPropertyClassifier(kind=kind, random_state=seed)
        scores = np.empty(labels.size)
        split = StratifiedKFold(folds, shuffle=True, random_state=seed)
        for train, test in split.split(features, labels):
            fitted = clone(unfitted).fit(features[train], labels[train])
            scores[test] = fitted.property_scores(features[test])
        return float(roc_auc_score(labels, scores))

    expected = by_hand(5, 0, "logistic")
    assert text_attack.auxiliary_cv_auc(features, labels) == expected
    # each choice matters on these data: folds, the split's seed, the classifier
    assert by_hand(6, 0, "logistic") != expected
    assert by_hand(5, 1, "logistic") != expected
    assert by_hand(5, 0, "random-forest") != expected
    assert text_attack.auxiliary_cv_auc(features, labels, seed=1) == by_hand(
        5, 1, "logistic"
    )
    assert text_attack.auxiliary_cv_auc(features, labels, folds=6) == by_hand(
        6, 0, "logistic"
    )


def test_auxiliary_cv_auc_uses_fewer_folds_for_a_short_run():
    # four rounds give four bags of each label: four folds, not five
    labels = np.array([0, 1] * 4)
    features = np.eye(8)[:, :4] + labels[:, None]
    auc = text_attack.auxiliary_cv_auc(features, labels)
    assert auc == text_attack.auxiliary_cv_auc(features, labels, folds=4)
    assert auc > 0.9
    with pytest.raises(
        DataError,
        match=r"^cross-validating the property classifier needs the adversary's bags "
        r"with and without the property; got one label only$",
    ):
        text_attack.auxiliary_cv_auc(features, np.ones(8, dtype=int))
