"""The common membership-inference interface: scores, decisions and metrics.

Every attack of this package reduces to a membership score ``f(x)`` per
candidate record, higher meaning "more likely a training member" (seed 004
Ch. 4.2.2; seed 000 Ch. 6.1.2 sorts discriminator outputs the same way).
This module turns scores into decisions and decisions into numbers:

Decisions
    :func:`top_n_decision` labels the ``n`` highest scores as members when the
    training-set size ``n`` is known (seed 000 Ch. 6.1.1, seed 004 Attack
    Type 1); :func:`threshold_decision` labels scores above a threshold.
Metrics
    :func:`top_n_accuracy` (the fraction of true members among the ``n``
    chosen, the accuracy of seed 000 Ch. 6.1.1 and seed 004 Ch. 4.2.2),
    precision, recall, AUC and the membership advantage ``TPR - FPR``
    (Yeom et al.); :func:`evaluate_scores` gathers them in an
    :class:`MIMetrics`.
Single and set MI (seed 004 Attack Types 1 and 2)
    :func:`single_mi_accuracy` and :func:`set_mi_decision` /
    :func:`set_mi_accuracy`: which of two equally large sets was used for
    training, by the majority of the top records, ties broken at random.

AUC and the ROC curve come from scikit-learn; the top-n rule with a random
tie-break and the set-MI majority are the seeds' own and are written here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from sklearn.metrics import precision_score, recall_score, roc_auc_score, roc_curve

from fedleak.errors import DataError
from fedleak.validation import check_int

__all__ = [
    "MIMetrics",
    "evaluate_scores",
    "ScoreFunction",
    "max_membership_advantage",
    "membership_advantage",
    "mi_trials",
    "precision_recall",
    "set_mi_accuracy",
    "set_mi_decision",
    "single_mi_accuracy",
    "threshold_decision",
    "top_n_accuracy",
    "top_n_decision",
]


def _scores(scores: np.ndarray, name: str = "scores") -> np.ndarray:
    arr = np.asarray(scores, dtype=np.float64).reshape(-1)
    if np.isnan(arr).any():
        raise DataError(f"{name} contain NaN; an attack must score every record")
    return arr


def _membership(is_member: np.ndarray, n: int) -> np.ndarray:
    labels = np.asarray(is_member).reshape(-1)
    if labels.shape[0] != n:
        raise DataError(f"got {labels.shape[0]} membership labels for {n} scores")
    if labels.size and not np.isin(labels, (0, 1)).all():
        raise DataError("membership labels must be boolean or 0/1")
    return labels.astype(bool)


def top_n_decision(scores: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Label the ``n`` records with the highest scores as members.

    Ties at the cut-off are broken uniformly at random (a random permutation
    before a stable sort), so equal scores never favour the records listed
    first.

    Parameters
    ----------
    scores : numpy.ndarray
        Membership scores, shape ``(m,)``.
    n : int
        Number of records to label as members, ``0 <= n <= m``.
    rng : numpy.random.Generator
        Source of the tie-break.

    Returns
    -------
    numpy.ndarray
        Boolean mask of shape ``(m,)`` with exactly ``n`` True entries.
    """
    arr = _scores(scores)
    check_int("n", n, low=0, high=arr.shape[0])
    order = rng.permutation(arr.shape[0])
    ranked = order[np.argsort(-arr[order], kind="stable")]
    decision = np.zeros(arr.shape[0], dtype=bool)
    decision[ranked[:n]] = True
    return decision


def threshold_decision(scores: np.ndarray, threshold: float) -> np.ndarray:
    """Label records whose score is at least ``threshold`` as members."""
    return _scores(scores) >= threshold


def top_n_accuracy(
    scores: np.ndarray,
    is_member: np.ndarray,
    rng: np.random.Generator,
    n: int | None = None,
) -> float:
    """Fraction of true members among the ``n`` highest-scored records.

    The accuracy of seed 000 Ch. 6.1.1 and of single MI in seed 004 Ch.
    4.2.2; ``n`` defaults to the number of true members (the attacker knows
    the training-set size). Random guessing scores ``members / records`` in
    expectation (10% when the target trained on a random 10% subset).
    """
    arr = _scores(scores)
    members = _membership(is_member, arr.shape[0])
    count = int(members.sum()) if n is None else int(n)
    if count == 0:
        raise DataError("top-n accuracy needs at least one record chosen (n >= 1)")
    chosen = top_n_decision(arr, count, rng)
    return float(members[chosen].mean())


def precision_recall(
    decisions: np.ndarray, is_member: np.ndarray
) -> tuple[float, float]:
    """Return (precision, recall) of member decisions (scikit-learn; 0 if undefined)."""
    pred = np.asarray(decisions).reshape(-1).astype(bool)
    members = _membership(is_member, pred.shape[0])
    precision = float(precision_score(members, pred, zero_division=0))
    recall = float(recall_score(members, pred, zero_division=0))
    return precision, recall


def membership_advantage(decisions: np.ndarray, is_member: np.ndarray) -> float:
    """Membership advantage ``TPR - FPR`` of decisions (Yeom et al., seed 002)."""
    pred = np.asarray(decisions).reshape(-1).astype(bool)
    members = _membership(is_member, pred.shape[0])
    if members.all() or not members.any():
        raise DataError("membership advantage needs both members and non-members")
    return float(pred[members].mean() - pred[~members].mean())


def max_membership_advantage(scores: np.ndarray, is_member: np.ndarray) -> float:
    """Largest ``TPR - FPR`` over all thresholds of the scores' ROC curve."""
    arr = _scores(scores)
    members = _membership(is_member, arr.shape[0])
    if members.all() or not members.any():
        raise DataError("membership advantage needs both members and non-members")
    fpr, tpr, _ = roc_curve(members, arr)
    return float(np.max(tpr - fpr))


@dataclass(frozen=True)
class MIMetrics:
    """Metrics of one attack on one candidate set.

    Attributes
    ----------
    accuracy : float
        Fraction of true members among the top ``num_members`` scores.
    baseline : float
        Expected accuracy of random guessing, ``num_members / num_records``.
    precision, recall : float
        Of the top-``num_members`` decision (equal to each other and to
        ``accuracy`` for that rule) or of the threshold decision if one was
        given.
    auc : float
        Area under the ROC curve of the scores.
    advantage : float
        ``TPR - FPR`` of the same decision.
    max_advantage : float
        Best ``TPR - FPR`` over all thresholds.
    num_members, num_records : int
        Sizes of the candidate set.
    """

    accuracy: float
    baseline: float
    precision: float
    recall: float
    auc: float
    advantage: float
    max_advantage: float
    num_members: int
    num_records: int

    def as_dict(self) -> dict[str, float | int]:
        """Return the metrics as a plain dictionary (for JSON)."""
        return asdict(self)


def evaluate_scores(
    scores: np.ndarray,
    is_member: np.ndarray,
    rng: np.random.Generator,
    *,
    threshold: float | None = None,
) -> MIMetrics:
    """Compute all metrics of scores against the true membership.

    Parameters
    ----------
    scores : numpy.ndarray
        Membership scores of the candidate records.
    is_member : numpy.ndarray
        True membership (boolean), same length.
    rng : numpy.random.Generator
        Source of the top-n tie-break.
    threshold : float, optional
        If given, precision, recall and advantage are those of the threshold
        decision; otherwise of the top-n decision.

    Returns
    -------
    MIMetrics
    """
    arr = _scores(scores)
    members = _membership(is_member, arr.shape[0])
    n_members = int(members.sum())
    if n_members == 0 or n_members == arr.shape[0]:
        raise DataError("evaluation needs both members and non-members")
    top = top_n_decision(arr, n_members, rng)
    decision = top if threshold is None else threshold_decision(arr, threshold)
    precision, recall = precision_recall(decision, members)
    return MIMetrics(
        accuracy=float(members[top].mean()),
        baseline=n_members / arr.shape[0],
        precision=precision,
        recall=recall,
        auc=float(roc_auc_score(members, arr)),
        advantage=membership_advantage(decision, members),
        max_advantage=max_membership_advantage(arr, members),
        num_members=n_members,
        num_records=int(arr.shape[0]),
    )


def single_mi_accuracy(
    member_scores: np.ndarray, nonmember_scores: np.ndarray, rng: np.random.Generator
) -> float:
    """Accuracy of single MI (seed 004 Attack Type 1).

    ``M`` training and ``M`` test records are presented; the adversary labels
    the ``M`` highest-scored as training data; the accuracy is the fraction of
    true training records among them (random guessing: 0.5).
    """
    members = _scores(member_scores, "member_scores")
    others = _scores(nonmember_scores, "nonmember_scores")
    if members.shape[0] != others.shape[0] or members.shape[0] == 0:
        raise DataError(
            f"single MI needs two equally large non-empty sets, got "
            f"{members.shape[0]} and {others.shape[0]} records"
        )
    scores = np.concatenate([members, others])
    labels = np.repeat([True, False], members.shape[0])
    return top_n_accuracy(scores, labels, rng)


def set_mi_decision(
    scores_a: np.ndarray, scores_b: np.ndarray, rng: np.random.Generator
) -> int:
    """Decide which of two sets was used for training (seed 004 Attack Type 2).

    The regulator takes the ``M`` highest-scored records of the union of the
    two sets (each of size ``M``) and picks the set most of them stem from; if
    both sets have the same number of representatives, it picks one at random.
    Ties between equal scores at the cut-off are broken at random as well.

    Returns
    -------
    int
        ``0`` for ``scores_a``, ``1`` for ``scores_b``.
    """
    a = _scores(scores_a, "scores_a")
    b = _scores(scores_b, "scores_b")
    if a.shape[0] != b.shape[0] or a.shape[0] == 0:
        raise DataError(
            f"set MI needs two equally large non-empty sets, got {a.shape[0]} and "
            f"{b.shape[0]} records"
        )
    m = a.shape[0]
    top = top_n_decision(np.concatenate([a, b]), m, rng)
    from_a = int(top[:m].sum())
    from_b = m - from_a
    if from_a == from_b:
        return int(rng.integers(2))
    return 0 if from_a > from_b else 1


ScoreFunction = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``score(member_idx, nonmember_idx) -> (member_scores, nonmember_scores)``."""


def mi_trials(
    score: ScoreFunction,
    num_members: int,
    num_nonmembers: int,
    *,
    set_size: int,
    trials: int,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """Mean single-MI accuracy and set-MI success over random record choices.

    Each trial draws ``set_size`` member and ``set_size`` non-member indices
    without replacement and asks ``score`` for their scores, so attacks
    whose scores depend on the presented records (the Monte Carlo attack's
    epsilon heuristics do) are scored per trial. The single-MI accuracy
    (Attack Type 1) and the set-MI decision (Attack Type 2, the two sets
    shown in random order) are computed on the same draw; seed 004 Ch. 4.2.3
    repeats the attack over subsets for statistical significance.

    Parameters
    ----------
    score : callable
        ``score(member_idx, nonmember_idx) -> (member_scores, nonmember_scores)``.
    num_members, num_nonmembers : int
        Sizes of the member and non-member pools.
    set_size : int
        ``M``, records per set.
    trials : int
        Number of repetitions.
    rng : numpy.random.Generator
        Source of the subsets, the order and the tie-breaks.

    Returns
    -------
    single_accuracy : float
        Mean fraction of members among the top ``M`` (0.5 by chance).
    set_accuracy : float
        Fraction of trials in which the member set was identified (0.5 by
        chance).
    """
    smaller = min(num_members, num_nonmembers)
    check_int("set_size (at most the smaller set)", set_size, low=1, high=smaller)
    check_int("trials", trials, low=1)
    single, wins = 0.0, 0
    for _ in range(trials):
        idx_in = rng.choice(num_members, size=set_size, replace=False)
        idx_out = rng.choice(num_nonmembers, size=set_size, replace=False)
        s_in, s_out = score(idx_in, idx_out)
        single += single_mi_accuracy(s_in, s_out, rng)
        if rng.random() < 0.5:
            wins += set_mi_decision(s_in, s_out, rng) == 0
        else:
            wins += set_mi_decision(s_out, s_in, rng) == 1
    return single / trials, wins / trials


def set_mi_accuracy(
    member_scores: np.ndarray,
    nonmember_scores: np.ndarray,
    *,
    set_size: int,
    trials: int,
    rng: np.random.Generator,
) -> float:
    """Set-MI success rate over random sets drawn from fixed score pools.

    The scores of each record are fixed (as for a discriminator or a
    reconstruction error); see :func:`mi_trials` for scores that depend on
    the presented records.
    """
    pool_in = _scores(member_scores, "member_scores")
    pool_out = _scores(nonmember_scores, "nonmember_scores")

    def score(i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return pool_in[i], pool_out[j]

    return mi_trials(
        score,
        pool_in.shape[0],
        pool_out.shape[0],
        set_size=set_size,
        trials=trials,
        rng=rng,
    )[1]
