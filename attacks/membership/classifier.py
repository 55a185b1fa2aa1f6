"""Membership inference against classifiers: shadow models and loss threshold.

Shadow-model attack (Shokri et al.; seed 004 Ch. 4.3.1)
    The adversary trains ``k`` shadow models that copy the target's
    architecture and training procedure, each on its own training set
    ``D_train_i`` with a disjoint ``D_test_i`` drawn from data statistically
    similar to the target's. Each shadow model's prediction vectors
    ``p(x)`` on ``D_train_i`` are labelled "in", on ``D_test_i`` "out"; one
    binary attack model per class ``y`` maps ``p(x)`` to in/out
    (:class:`ShadowModelAttack`). The target's predictions on candidate
    records are then scored by the attack model of their class.
Loss-threshold attack (Yeom et al.)
    A record is a member if its loss ``-log p_y(x)`` is below the average
    training loss (:class:`LossThresholdAttack`); the score is
    ``log p_y(x)``.
LDP vs CDP (seed 004 Ch. 4.3.1 "Evaluating CDP and LDP under MI", Fig.
4.2-4.3)
    For CDP, target and shadow models are trained with an equally configured
    DP-SGD (:class:`DPSGDProcedure`, which uses
    :func:`fedleak.privacy.dpsgd.dp_sgd_train` and its accountant); for LDP,
    the training inputs of target and shadows are perturbed by a local
    randomiser first (:class:`LocallyRandomizedProcedure` with
    :func:`fedleak.privacy.ldp.randomized_response` or
    :func:`fedleak.privacy.ldp.laplace_pixelization`). Both are compared by
    the attack's precision and recall, averaged over classes as in the
    seed, and by :func:`mitigation_efficiency` (Eq. 4.2).

A *training procedure* is any callable ``train(x, y, seed) -> TrainedModel``;
the attack needs nothing else, so it applies to scikit-learn models as well as
torch ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.exceptions import NotFittedError
from sklearn.metrics import roc_auc_score
from sklearn.utils.validation import check_is_fitted
from torch import nn

from fedleak.errors import DataError
from fedleak.training import evaluate, train_epochs
from fedleak.validation import check_int

from .metrics import membership_advantage, precision_recall

__all__ = [
    "AttackEvaluation",
    "DPSGDProcedure",
    "LocallyRandomizedProcedure",
    "LossThresholdAttack",
    "SGDProcedure",
    "ShadowModelAttack",
    "TorchClassifier",
    "TrainProcedure",
    "TrainedModel",
    "class_averaged_precision_recall",
    "evaluate_membership",
    "loss_scores",
    "mitigation_efficiency",
]


class TrainedModel(Protocol):
    """A trained classifier the attacker can query for prediction vectors."""

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Return class probabilities ``(n, num_classes)``."""
        ...


class TrainProcedure(Protocol):
    """Trains a fresh model: ``train(x, y, seed) -> TrainedModel``."""

    def __call__(self, x: np.ndarray, y: np.ndarray, seed: int) -> TrainedModel:
        """Train a new model on ``(x, y)``; ``seed`` fixes weights and batches."""
        ...


@dataclass
class TorchClassifier:
    """A trained torch classifier wrapped for black-box queries.

    Attributes
    ----------
    model : torch.nn.Module
        Maps inputs to logits.
    epsilon : float
        Privacy spent in training (``inf`` if not private).
    """

    model: nn.Module
    epsilon: float = math.inf

    @torch.no_grad()
    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Return softmax probabilities of the model on ``x``."""
        self.model.eval()
        logits = self.model(torch.tensor(np.asarray(x), dtype=torch.float32))
        out: np.ndarray = torch.softmax(logits, dim=1).numpy().astype(np.float64)
        return out

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        """Return the accuracy on ``(x, y)``."""
        result = evaluate(
            self.model,
            torch.as_tensor(np.asarray(x), dtype=torch.float32),
            torch.as_tensor(np.asarray(y), dtype=torch.long),
        )
        return result.accuracy


ModelFactory = Callable[[int], nn.Module]
"""``factory(seed) -> fresh model`` with seeded initial weights."""


@dataclass(frozen=True)
class SGDProcedure:
    """Non-private training: plain SGD epochs (:func:`fedleak.training.train_epochs`).

    Attributes
    ----------
    factory : callable
        ``factory(seed)`` builds the untrained model.
    epochs, batch_size : int
        Passes and mini-batch size; many epochs on few records overfit.
    lr : float
        SGD step size.
    """

    factory: ModelFactory
    epochs: int = 50
    batch_size: int = 32
    lr: float = 0.1

    def __call__(self, x: np.ndarray, y: np.ndarray, seed: int) -> TorchClassifier:
        """Train a fresh model on ``(x, y)``."""
        model = self.factory(seed)
        train_epochs(
            model,
            torch.as_tensor(np.asarray(x), dtype=torch.float32),
            torch.as_tensor(np.asarray(y), dtype=torch.long),
            epochs=self.epochs,
            batch_size=self.batch_size,
            learning_rate=self.lr,
            generator=torch.Generator().manual_seed(seed),
        )
        return TorchClassifier(model)


@dataclass(frozen=True)
class DPSGDProcedure:
    """Central DP training with DP-SGD (:func:`fedleak.privacy.dpsgd.dp_sgd_train`).

    The epsilon it spends (RDP accounting at ``delta``, default ``1/n``) is
    stored on the returned :class:`TorchClassifier`.

    Attributes
    ----------
    factory : callable
        ``factory(seed)`` builds the untrained model.
    noise_multiplier : float
        ``z``; the seed evaluates ``z in {2, 4, 6, 8, 16}``.
    max_grad_norm : float
        Clipping norm ``C``.
    epochs, batch_size : int
        Epochs and expected (Poisson) batch size.
    lr : float
        Learning rate.
    optimizer : {"sgd", "adam"}
        DP-SGD or DP-Adam (seed 004 Ch. 4.1).
    delta : float, optional
        Target delta.
    """

    factory: ModelFactory
    noise_multiplier: float
    max_grad_norm: float = 1.0
    epochs: int = 50
    batch_size: int = 32
    lr: float = 0.1
    optimizer: Literal["sgd", "adam"] = "sgd"
    delta: float | None = None

    def __call__(self, x: np.ndarray, y: np.ndarray, seed: int) -> TorchClassifier:
        """Train a fresh model on ``(x, y)`` with DP-SGD."""
        from fedleak.privacy.dpsgd import dp_sgd_train  # imports opacus: only when used

        model = self.factory(seed)
        result = dp_sgd_train(
            model,
            torch.as_tensor(np.asarray(x), dtype=torch.float32),
            torch.as_tensor(np.asarray(y), dtype=torch.long),
            epochs=self.epochs,
            batch_size=min(self.batch_size, len(x)),
            lr=self.lr,
            noise_multiplier=self.noise_multiplier,
            max_grad_norm=self.max_grad_norm,
            seed=seed,
            delta=self.delta,
            optimizer=self.optimizer,
        )
        return TorchClassifier(model, epsilon=result.epsilon)


Randomizer = Callable[[np.ndarray, np.random.Generator], np.ndarray]
"""A local randomiser ``LR(x, rng) -> x'`` applied to every training record."""


@dataclass(frozen=True)
class LocallyRandomizedProcedure:
    """LDP training: perturb the inputs with a local randomiser, then train.

    Seed 004 Fig. 4.3: target and shadow models are trained on ``LR(D)``;
    the model is queried with the original records.

    Attributes
    ----------
    base : TrainProcedure
        How the model is trained on the perturbed data (usually non-private).
    randomizer : callable
        ``LR(x, rng)``, e.g. ``lambda x, rng: randomized_response(x, eps, rng)``.
    epsilon : float
        The randomiser's per-record epsilon, recorded on the result.
    """

    base: TrainProcedure
    randomizer: Randomizer
    epsilon: float

    def __call__(self, x: np.ndarray, y: np.ndarray, seed: int) -> TrainedModel:
        """Train on ``(LR(x), y)``; the randomiser is seeded from ``seed``."""
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x4C4450]))
        model = self.base(self.randomizer(np.asarray(x), rng), y, seed)
        if isinstance(model, TorchClassifier):
            model.epsilon = self.epsilon
        return model


def _probs_and_labels(
    probs: np.ndarray, labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    if p.ndim != 2 or p.shape[0] != y.shape[0]:
        raise DataError(
            f"need prediction vectors (n, num_classes) and n labels, got {p.shape} and "
            f"{y.shape[0]} labels"
        )
    if y.size and (y.min() < 0 or y.max() >= p.shape[1]):
        raise DataError(f"labels must lie in [0, {p.shape[1]})")
    return p, y


def loss_scores(
    probs: np.ndarray, labels: np.ndarray, *, floor: float = 1e-12
) -> np.ndarray:
    """Return ``log p_y(x)``, the negated cross-entropy loss of each record."""
    p, y = _probs_and_labels(probs, labels)
    scores: np.ndarray = np.log(np.maximum(p[np.arange(y.shape[0]), y], floor))
    return scores


@dataclass
class LossThresholdAttack:
    """Loss-threshold attack of Yeom et al.: member iff loss <= mean training loss.

    Not a scikit-learn estimator: it has one number, set by :meth:`calibrate`
    or given directly, and it scores a target's prediction vectors rather
    than records. :meth:`predict` before either raises
    :class:`sklearn.exceptions.NotFittedError`.

    Attributes
    ----------
    threshold : float, optional
        Threshold on the score ``log p_y(x)``; set by :meth:`calibrate` from
        records known (or, via a shadow model, assumed) to be members.
    """

    threshold: float | None = None

    def calibrate(
        self, member_probs: np.ndarray, member_labels: np.ndarray
    ) -> LossThresholdAttack:
        """Set the threshold to minus the average training loss of known members."""
        scores = loss_scores(member_probs, member_labels)
        if scores.size == 0:
            raise DataError("calibration needs at least one member record")
        self.threshold = float(scores.mean())
        return self

    def scores(self, probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Membership scores ``log p_y(x)``."""
        return loss_scores(probs, labels)

    def predict(self, probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Member decisions: score at least the threshold.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            If the threshold is neither calibrated nor given.
        """
        if self.threshold is None:
            raise NotFittedError(
                "This LossThresholdAttack has no threshold yet: call calibrate() "
                "(or give threshold) before predict()."
            )
        return self.scores(probs, labels) >= self.threshold


def _default_attack_model() -> ClassifierMixin:
    model: ClassifierMixin = HistGradientBoostingClassifier(
        max_iter=100, random_state=0
    )
    return model


def _attack_features(probs: np.ndarray) -> np.ndarray:
    """Prediction vector plus its log (helps on near-saturated confidences)."""
    return np.concatenate([probs, np.log(np.maximum(probs, 1e-12))], axis=1)


class ShadowModelAttack(BaseEstimator):  # type: ignore[misc]
    """Shadow-model attack of Shokri et al. with one attack model per class.

    A scikit-learn estimator: the constructor stores its parameters as given
    (``get_params``/``set_params``/``clone`` work), they are checked when the
    attack is trained, :meth:`fit` returns ``self``, and :meth:`scores`
    before :meth:`fit` raises :class:`sklearn.exceptions.NotFittedError`.

    Parameters
    ----------
    train : TrainProcedure
        Trains a shadow model (the same architecture and hyper-parameters as
        the target; for CDP/LDP the same private procedure).
    num_classes : int
        Number of classes of the task.
    num_shadows : int, default=4
        ``k`` shadow models.
    shadow_size : int, default=500
        Records in each shadow training set (and as many in its test set);
        match the target's training-set size.
    attack_model : scikit-learn classifier, optional
        Prototype of the per-class attack model (cloned per class); ``None``
        means scikit-learn's ``HistGradientBoostingClassifier(max_iter=100,
        random_state=0)``.
    seed : int, default=0
        Seeds the shadow splits and the shadow models.

    Attributes
    ----------
    models_ : dict of int to classifier or float
        The attack model of every class, or the constant probability of
        "in" for a class whose training triples were all "in" or all "out".
    """

    def __init__(
        self,
        train: TrainProcedure,
        num_classes: int,
        num_shadows: int = 4,
        shadow_size: int = 500,
        attack_model: ClassifierMixin | None = None,
        seed: int = 0,
    ) -> None:
        self.train = train
        self.num_classes = num_classes
        self.num_shadows = num_shadows
        self.shadow_size = shadow_size
        self.attack_model = attack_model
        self.seed = seed

    def shadow_records(
        self, x_shadow: np.ndarray, y_shadow: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Train the shadow models; return attack training triples ``(p(x), y, in)``.

        Each shadow model ``i`` draws ``D_train_i`` and a disjoint
        ``D_test_i`` of ``shadow_size`` records each from the shadow data;
        different shadows may overlap (seed 004 Ch. 4.3.1).
        """
        check_int("num_classes", self.num_classes, low=2)
        check_int("num_shadows", self.num_shadows, low=1)
        check_int("shadow_size", self.shadow_size, low=1)
        x = np.asarray(x_shadow)
        y = np.asarray(y_shadow).astype(np.int64)
        if x.shape[0] != y.shape[0]:
            raise DataError(f"got {x.shape[0]} shadow records and {y.shape[0]} labels")
        if x.shape[0] < 2 * self.shadow_size:
            raise DataError(
                f"the shadow data has {x.shape[0]} records; each shadow model needs "
                f"2 * shadow_size = {2 * self.shadow_size} (lower shadow_size)"
            )
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0x5348]))
        probs, labels, member = [], [], []
        for _ in range(self.num_shadows):
            perm = rng.permutation(x.shape[0])
            inside, outside = (
                perm[: self.shadow_size],
                perm[self.shadow_size : 2 * self.shadow_size],
            )
            shadow = self.train(x[inside], y[inside], int(rng.integers(2**31)))
            for idx, is_in in ((inside, True), (outside, False)):
                probs.append(shadow.predict_proba(x[idx]))
                labels.append(y[idx])
                member.append(np.full(idx.shape[0], is_in))
        return np.concatenate(probs), np.concatenate(labels), np.concatenate(member)

    def fit(self, x_shadow: np.ndarray, y_shadow: np.ndarray) -> ShadowModelAttack:
        """Train the shadow models and one attack model per class."""
        probs, labels, member = self.shadow_records(x_shadow, y_shadow)
        return self.fit_attack_models(probs, labels, member)

    def fit_attack_models(
        self, probs: np.ndarray, labels: np.ndarray, member: np.ndarray
    ) -> ShadowModelAttack:
        """Fit the per-class attack models on ``(p(x), y, in/out)`` triples.

        A class whose triples are all "in" or all "out" gets that constant
        probability as its model.
        """
        num_classes = check_int("num_classes", self.num_classes, low=2)
        prototype = (
            _default_attack_model() if self.attack_model is None else self.attack_model
        )
        p, y = _probs_and_labels(probs, labels)
        is_in = np.asarray(member).astype(bool)
        models: dict[int, ClassifierMixin | float] = {}
        for cls in range(num_classes):
            rows = y == cls
            if not rows.any():
                models[cls] = 0.5
            elif is_in[rows].all() or not is_in[rows].any():
                models[cls] = float(is_in[rows][0])
            else:
                model = clone(prototype)
                model.fit(_attack_features(p[rows]), is_in[rows])
                models[cls] = model
        self.models_ = models
        return self

    def scores(self, probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Probability of "in" from the attack model of each record's class.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit` (or :meth:`fit_attack_models`).
        """
        check_is_fitted(self, "models_")
        p, y = _probs_and_labels(probs, labels)
        out = np.empty(y.shape[0])
        for cls in np.unique(y):
            rows = y == cls
            model = self.models_[int(cls)]
            if isinstance(model, float):
                out[rows] = model
            else:
                out[rows] = model.predict_proba(_attack_features(p[rows]))[:, 1]
        return out

    def predict(self, probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Member decisions: probability of "in" above one half."""
        return self.scores(probs, labels) > 0.5


def class_averaged_precision_recall(
    decisions: np.ndarray, is_member: np.ndarray, labels: np.ndarray
) -> tuple[float, float]:
    """Precision and recall averaged over classes (seed 004 Ch. 4.3.1, after Shokri).

    A class in which the attack labels no record "in" has no precision; it
    is left out of the precision average (counting it as 0 would punish an
    attack for abstaining). Precision is 0 if no class has any "in"
    decision.
    """
    pred = np.asarray(decisions).astype(bool)
    truth = np.asarray(is_member).astype(bool)
    y = np.asarray(labels)
    precisions, recalls = [], []
    for cls in np.unique(y):
        rows = y == cls
        precision, recall = precision_recall(pred[rows], truth[rows])
        if pred[rows].any():
            precisions.append(precision)
        if truth[rows].any():
            recalls.append(recall)
    if not recalls:
        raise DataError("no member records to evaluate")
    return float(np.mean(precisions)) if precisions else 0.0, float(np.mean(recalls))


@dataclass(frozen=True)
class AttackEvaluation:
    """One target under one attack: utility and MI success.

    Attributes
    ----------
    epsilon : float
        The target's privacy parameter (``inf`` without DP).
    train_accuracy, test_accuracy : float
        Target accuracy on its training records and on held-out test data.
    precision, recall : float
        Attack precision and recall, averaged over classes.
    auc : float
        AUC of the attack scores.
    advantage : float
        ``TPR - FPR`` of the attack's decisions.
    """

    epsilon: float
    train_accuracy: float
    test_accuracy: float
    precision: float
    recall: float
    auc: float
    advantage: float


def evaluate_membership(
    target: TrainedModel,
    attack: ShadowModelAttack | LossThresholdAttack,
    members: tuple[np.ndarray, np.ndarray],
    nonmembers: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    *,
    epsilon: float = math.inf,
) -> AttackEvaluation:
    """Attack a trained target on its members and as many non-members.

    Parameters
    ----------
    target : TrainedModel
        The model under attack (queried with the original records).
    attack : ShadowModelAttack or LossThresholdAttack
        A fitted attack.
    members, nonmembers : tuple of arrays
        ``(x, y)`` of training records and of records never trained on.
    test : tuple of arrays
        ``(x, y)`` of held-out data for the target's test accuracy.
    epsilon : float, default=inf
        Recorded on the result.

    Returns
    -------
    AttackEvaluation
    """
    x = np.concatenate([members[0], nonmembers[0]])
    y = np.concatenate([members[1], nonmembers[1]]).astype(np.int64)
    truth = np.repeat([True, False], [len(members[0]), len(nonmembers[0])])
    probs = target.predict_proba(x)
    scores = attack.scores(probs, y)
    decisions = attack.predict(probs, y)
    precision, recall = class_averaged_precision_recall(decisions, truth, y)

    def accuracy(data: tuple[np.ndarray, np.ndarray]) -> float:
        return float(np.mean(target.predict_proba(data[0]).argmax(axis=1) == data[1]))

    return AttackEvaluation(
        epsilon=float(epsilon),
        train_accuracy=accuracy(members),
        test_accuracy=accuracy(test),
        precision=precision,
        recall=recall,
        auc=float(roc_auc_score(truth, scores)),
        advantage=membership_advantage(decisions, truth),
    )


def mitigation_efficiency(
    *,
    accuracy_original: float,
    accuracy_private: float,
    precision_original: float,
    precision_private: float,
    num_classes: int,
    precision_base: float = 0.5,
) -> float:
    """Relative privacy-accuracy trade-off phi of seed 004 Eq. (4.2).

    ``phi = [(acc_orig - acc_base) - (acc_orig - acc_eps)] / (acc_orig - acc_base)``
    divided by
    ``[(prec_orig - prec_base) - (prec_orig - prec_eps)] / (prec_orig - prec_base)``
    with ``acc_base = 1 / C`` and ``prec_base = 0.5``; values below the
    baselines are clipped to them. ``phi > 1`` means the relative gain in
    privacy exceeds the relative loss in accuracy. The same formula applies
    to recall.
    """
    acc_base = 1.0 / num_classes
    if accuracy_original <= acc_base or precision_original <= precision_base:
        raise DataError(
            "mitigation efficiency needs an original model above both baselines "
            f"(accuracy > {acc_base:.3f}, precision > {precision_base}); got "
            f"{accuracy_original:.3f} and {precision_original:.3f}"
        )
    acc_eps = max(accuracy_private, acc_base)
    prec_eps = max(precision_private, precision_base)
    kept_accuracy = (acc_eps - acc_base) / (accuracy_original - acc_base)
    kept_precision = (prec_eps - precision_base) / (precision_original - precision_base)
    if kept_precision == 0:
        return math.inf
    return kept_accuracy / kept_precision
