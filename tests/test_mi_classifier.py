"""Shadow-model and loss-threshold attacks; LDP vs CDP helpers (seed 004 Ch. 4.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from fedleak.attacks.membership.classifier import (
    DPSGDProcedure,
    LocallyRandomizedProcedure,
    LossThresholdAttack,
    SGDProcedure,
    ShadowModelAttack,
    class_averaged_precision_recall,
    evaluate_membership,
    loss_scores,
    mitigation_efficiency,
)
from sklearn.exceptions import NotFittedError

from fedleak.errors import DataError
from fedleak.privacy.ldp import randomized_response

torch.set_num_threads(1)

NUM_CLASSES = 3


def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, NUM_CLASSES)
    )


def _random_labelled(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Binary features with random labels: only memorisation fits them."""
    rng = np.random.default_rng(seed)
    return (rng.random((n, 16)) < 0.5).astype(np.float32), rng.integers(
        0, NUM_CLASSES, n
    )


PROCEDURE = SGDProcedure(_mlp, epochs=80, batch_size=10, lr=0.3)


@pytest.fixture(scope="module")
def data() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {
        # 100 records each: the members' AUCs (0.92 shadow, 0.95 loss at seed
        # 10) have standard errors near 0.02, five or more below them to the bounds
        "members": _random_labelled(100, 1),
        "nonmembers": _random_labelled(100, 2),
        "other": _random_labelled(100, 3),
        "shadow": _random_labelled(300, 4),
        # never trained on by any target: the null case's two arbitrary halves
        "unseen_a": _random_labelled(200, 5),
        "unseen_b": _random_labelled(200, 6),
    }


@pytest.fixture(scope="module")
def targets(data: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, object]:
    return {
        "overfit": PROCEDURE(*data["members"], seed=10),
        "unseen": PROCEDURE(*data["other"], seed=11),
    }


@pytest.mark.slow
def test_shadow_attack_beats_chance_only_on_members(data, targets) -> None:
    attack = ShadowModelAttack(
        PROCEDURE, NUM_CLASSES, num_shadows=2, shadow_size=100, seed=0
    ).fit(*data["shadow"])
    hit = evaluate_membership(
        targets["overfit"],
        attack,
        data["members"],
        data["nonmembers"],
        data["nonmembers"],
    )
    miss = evaluate_membership(
        targets["unseen"], attack, data["unseen_a"], data["unseen_b"], data["unseen_b"]
    )
    assert hit.train_accuracy == 1.0
    assert hit.auc > 0.8 and hit.precision > 0.7
    # Null case: two halves of 200 records no target saw. The AUC of
    # exchangeable scores has standard error sqrt(401 / (12 * 200^2)) = 0.029
    # and the advantage sqrt(2 * 0.25 / 200) = 0.05: the bounds sit at
    # seven and six of them.
    assert 0.3 < miss.auc < 0.7 and abs(miss.advantage) < 0.3


@pytest.mark.slow
def test_loss_threshold_attack_beats_chance_only_on_members(data, targets) -> None:
    attack = LossThresholdAttack()
    attack.calibrate(
        targets["overfit"].predict_proba(data["members"][0]), data["members"][1]
    )
    hit = evaluate_membership(
        targets["overfit"],
        attack,
        data["members"],
        data["nonmembers"],
        data["nonmembers"],
    )
    assert hit.auc > 0.85 and hit.advantage > 0.3
    attack.calibrate(
        targets["unseen"].predict_proba(data["other"][0]), data["other"][1]
    )
    miss = evaluate_membership(
        targets["unseen"], attack, data["unseen_a"], data["unseen_b"], data["unseen_b"]
    )
    assert 0.3 < miss.auc < 0.7 and abs(miss.advantage) < 0.3  # as above: 7 and 6 SE


def test_loss_scores_and_threshold() -> None:
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    labels = np.array([0, 0, 1])
    np.testing.assert_allclose(loss_scores(probs, labels), np.log([0.9, 0.2, 0.5]))
    attack = LossThresholdAttack().calibrate(probs[:1], labels[:1])
    assert attack.threshold == pytest.approx(math.log(0.9))
    np.testing.assert_array_equal(attack.predict(probs, labels), [True, False, False])
    with pytest.raises(NotFittedError):
        LossThresholdAttack().predict(probs, labels)
    with pytest.raises(DataError):
        loss_scores(probs, np.array([0, 2, 1]))


def test_one_attack_model_per_class() -> None:
    rng = np.random.default_rng(0)
    # class 0: "in" records are confident, class 1: the reverse; class 2 all "out"
    conf = rng.random(300)
    labels = np.repeat([0, 1, 2], 100)
    member = np.where(labels == 0, conf > 0.5, conf < 0.5) & (labels != 2)
    probs = np.stack([conf, 1 - conf, np.zeros(300)], axis=1)
    attack = ShadowModelAttack(
        PROCEDURE, 3, num_shadows=1, shadow_size=1
    ).fit_attack_models(probs, labels, member)
    assert set(attack.models_) == {0, 1, 2} and attack.models_[2] == 0.0
    pred = attack.predict(probs, labels)
    assert (
        np.mean(pred == member) > 0.95
    )  # a single shared model could not fit both rules
    with pytest.raises(NotFittedError):
        ShadowModelAttack(PROCEDURE, 3).scores(probs, labels)
    with pytest.raises(DataError):
        ShadowModelAttack(PROCEDURE, 3, shadow_size=100).fit(probs[:150], labels[:150])


def test_class_averaged_precision_recall() -> None:
    decisions = np.array([1, 1, 0, 1, 0, 0], dtype=bool)
    member = np.array([1, 0, 1, 1, 1, 0], dtype=bool)
    labels = np.array([0, 0, 0, 1, 1, 1])
    precision, recall = class_averaged_precision_recall(decisions, member, labels)
    assert precision == pytest.approx((0.5 + 1.0) / 2)
    assert recall == pytest.approx((0.5 + 0.5) / 2)
    # class 1 abstains: no precision for it, recall 0
    abstain = np.array([1, 1, 0, 0, 0, 0], dtype=bool)
    precision, recall = class_averaged_precision_recall(abstain, member, labels)
    assert precision == pytest.approx(0.5) and recall == pytest.approx(0.25)


def test_mitigation_efficiency_eq_4_2() -> None:
    # keeps 80% of the accuracy above 1/C, removes 75% of the precision above 0.5
    phi = mitigation_efficiency(
        accuracy_original=0.9,
        accuracy_private=0.74,
        precision_original=0.9,
        precision_private=0.6,
        num_classes=5,
    )
    assert phi == pytest.approx((0.54 / 0.7) / (0.1 / 0.4))
    # decreases below the baselines are clipped
    assert (
        mitigation_efficiency(
            accuracy_original=0.9,
            accuracy_private=0.1,
            precision_original=0.9,
            precision_private=0.3,
            num_classes=5,
        )
        == math.inf
    )
    with pytest.raises(DataError):
        mitigation_efficiency(
            accuracy_original=0.1,
            accuracy_private=0.1,
            precision_original=0.9,
            precision_private=0.3,
            num_classes=5,
        )


def test_ldp_and_cdp_procedures_record_epsilon(data) -> None:
    x, y = data["members"]
    ldp = LocallyRandomizedProcedure(
        SGDProcedure(_mlp, epochs=1, batch_size=10),
        lambda bits, rng: randomized_response(bits, 1.0, rng),
        epsilon=16.0,
    )
    assert ldp(x, y, seed=0).epsilon == 16.0
    cdp = DPSGDProcedure(_mlp, noise_multiplier=2.0, epochs=2, batch_size=10)
    model = cdp(x, y, seed=0)
    assert 0 < model.epsilon < math.inf
    np.testing.assert_allclose(model.predict_proba(x).sum(axis=1), 1.0, rtol=1e-5)
