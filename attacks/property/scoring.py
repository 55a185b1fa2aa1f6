"""Offline scoring of a finished property-inference run (seed 000 Ch. 7.1.4).

The property adversaries of a Flower run (:mod:`fedleak.clients.property`)
log their labelled auxiliary gradients and their observations of the
others' aggregate every round, and the scripted target logs what its
batches really held; :func:`analyse_run` trains Alg. 7's batch property
classifier on the former and scores the latter against the truth, so a run
is re-scored without re-training.

Run directory layout read here::

    <run dir>/adversary/round-NNNNNN.npz   (ObservationLog)
    <run dir>/target/truth.jsonl           ({"round", "fraction", ...} per line)
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.metrics import roc_auc_score

from fedleak.errors import DataError

from .classifier import (
    BatchPropertyClassifier,
    PropertyObservations,
    cross_validated_scores,
    dataset_score,
    load_observations,
    score_series,
    single_batch_auc,
)

__all__ = ["analyse_run", "load_truth", "phase_diagnostics"]


def load_truth(path: str | Path) -> dict[int, float]:
    """Read the target's ``truth.jsonl``: round -> fraction of its batch with it.

    Raises
    ------
    DataError
        If the file does not exist.
    """
    truth: dict[int, float] = {}
    file = Path(path)
    if not file.is_file():
        raise DataError(f"{file}: no target truth (was a [target] client in the run?)")
    for line in file.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            truth[int(row["round"])] = float(row["fraction"])
    return truth


def analyse_run(
    run_dir: str | Path,
    *,
    classifier: str = "random-forest",
    seed: int = 0,
    smooth: int = 1,
    normalize: bool = False,
    by_participants: bool = False,
    fit_until: int | None = None,
) -> dict[str, Any]:
    """Train ``f_prop`` on a finished run's logged auxiliary gradients and score it.

    Parameters
    ----------
    run_dir : path
        A run directory holding ``adversary/`` (and ``target/truth.jsonl``).
    classifier : {"random-forest", "logistic"}, default="random-forest"
        :class:`fedleak.attacks.property.BatchPropertyClassifier` kind.
    seed : int, default=0
        The classifier's ``random_state``.
    smooth : int, default=1
        Moving-average window of the returned score series.
    normalize : bool, default=False
        Classify the direction of the updates only (see
        :class:`~fedleak.attacks.property.BatchPropertyClassifier`).
    by_participants : bool, default=False
        One classifier per number of other participants the adversary
        observed (a late join changes it; see
        :meth:`~fedleak.attacks.property.classifier.PropertyObservations.scores_by_participants`).
    fit_until : int, optional
        Fit on the auxiliary gradients of rounds ``<= fit_until`` only (every
        observed round is still scored): shows whether the emulations of
        later rounds, e.g. once the clients' records are memorised, mislead
        the classifier.

    Returns
    -------
    dict
        ``auc`` (single-batch AUC, None if the truth has one class),
        ``dataset_score`` (mean score), ``rounds``, ``scores``, ``truth``
        (fraction of the target's batch with the property per round, None
        where unknown), ``aux_gradients`` (labelled examples used) and
        ``features`` (their dimension).
    """
    folder = Path(run_dir)
    obs = load_observations(folder / "adversary")
    if fit_until is not None:
        obs = _aux_until(obs, fit_until)
    unfitted = BatchPropertyClassifier(
        kind=classifier, random_state=seed, normalize=normalize
    )
    scores = (
        obs.scores_by_participants(unfitted)
        if by_participants
        else obs.scores(obs.fit(unfitted))
    )
    truth_file = folder / "target" / "truth.jsonl"
    truth = load_truth(truth_file) if truth_file.is_file() else {}
    fractions = [truth.get(int(r)) for r in obs.observed_rounds]
    known = [i for i, f in enumerate(fractions) if f is not None]
    labels = np.asarray([1 if (fractions[i] or 0.0) > 0 else 0 for i in known])
    auc = (
        single_batch_auc(labels, scores[known])
        if known and np.unique(labels).size == 2
        else None
    )
    rounds, series = score_series(obs.observed_rounds, scores, window=smooth)
    return {
        "auc": auc,
        "dataset_score": dataset_score(scores) if scores.size else None,
        "rounds": [int(r) for r in rounds],
        "scores": [float(s) for s in series],
        "truth": fractions,
        "aux_gradients": int(obs.aux.shape[0]),
        "features": int(obs.aux.shape[1]),
    }


def _aux_until(obs: PropertyObservations, last_round: int) -> PropertyObservations:
    """Return ``obs`` with the auxiliary gradients of rounds ``<= last_round`` only.

    Raises :class:`DataError` when that leaves fewer than both labels.
    """
    keep = obs.aux_rounds <= last_round
    if np.unique(obs.aux_labels[keep]).size < 2:
        raise DataError(
            f"fit_until={last_round} leaves auxiliary gradients of "
            f"{np.unique(obs.aux_labels[keep]).size} label(s); the classifier needs "
            "both (the log's first round is "
            f"{int(obs.aux_rounds.min()) if obs.aux_rounds.size else 'none'})"
        )
    participants = obs.aux_participants
    return replace(
        obs,
        aux=obs.aux[keep],
        aux_rounds=obs.aux_rounds[keep],
        aux_labels=obs.aux_labels[keep],
        aux_participants=None if participants is None else participants[keep],
    )


def phase_diagnostics(
    run_dir: str | Path,
    *,
    classifier: str = "random-forest",
    seed: int = 0,
    normalize: bool = False,
    folds: int = 5,
) -> dict[str, dict[str, float | None]]:
    """Say, per number of others observed, how well the adversary's examples fit.

    For each count ``k`` of other participants (a late join changes it;
    :meth:`~fedleak.attacks.property.classifier.PropertyObservations.scores_by_participants`)
    this compares the labelled auxiliary aggregates the adversary emulated
    with the aggregates it observed: a classifier that separates its own
    examples but scores observations far from either label is being asked
    about updates unlike those it was trained on.

    Parameters
    ----------
    run_dir : path
        A run directory holding ``adversary/``.
    classifier, seed, normalize
        As :func:`analyse_run`.
    folds : int, default=5
        Stratified folds of the cross-validated scores.

    Returns
    -------
    dict
        ``str(k)`` -> ``aux_cv_auc`` (cross-validated AUC of ``f_prop`` on
        the auxiliary aggregates of ``k``; None with one label or too few
        examples), ``aux_median_property`` and ``aux_median_none``
        (median cross-validated score of each label), ``observed_median``
        (median score of the observed aggregates of ``k``, by ``f_prop``
        fitted on every auxiliary aggregate of ``k``), ``norm_ratio`` and
        ``norm_ratio_last_fifth`` (median over the rounds of ``k``, and over
        their last fifth, of an observed aggregate's feature norm over the
        median norm of the auxiliary ones of its round: below 1 the observed
        updates are smaller than those the adversary emulates), and
        ``label_norm_ratio`` and ``label_norm_ratio_last_fifth`` (the same
        medians of a round's emulated aggregate with the property over the
        one without: far above 1 the two labels differ by size as well as by
        the property, e.g. when the property's records are renderings the
        model never trained on and the others are records it has memorised).
    """
    obs = load_observations(Path(run_dir) / "adversary")
    unfitted = BatchPropertyClassifier(
        kind=classifier, random_state=seed, normalize=normalize
    )
    return {
        str(int(k)): _phase(obs, int(k), unfitted, folds)
        for k in np.unique(_counts(obs.observed_participants, obs.observed))
    }


def _counts(counts: np.ndarray | None, rows: np.ndarray) -> np.ndarray:
    """Return the recorded participant counts (one count, 1, for logs without)."""
    return np.ones(rows.shape[0], dtype=int) if counts is None else counts


def _phase(
    obs: PropertyObservations, k: int, unfitted: BatchPropertyClassifier, folds: int
) -> dict[str, float | None]:
    mine = _counts(obs.aux_participants, obs.aux) == k
    seen = _counts(obs.observed_participants, obs.observed) == k
    x, y = obs.aux[mine], obs.aux_labels[mine]
    ratio, ratio_last = _norm_ratios(obs, seen, mine)
    label_ratio, label_ratio_last = _label_norm_ratios(obs, mine)
    out: dict[str, float | None] = {
        "aux_cv_auc": None,
        "aux_median_property": None,
        "aux_median_none": None,
        "observed_median": None,
        "norm_ratio": ratio,
        "norm_ratio_last_fifth": ratio_last,
        "label_norm_ratio": label_ratio,
        "label_norm_ratio_last_fifth": label_ratio_last,
    }
    smallest = int(np.bincount(y, minlength=2).min()) if y.size else 0
    if smallest < 2:
        return out
    cv = cross_validated_scores(unfitted, x, y, folds=folds, seed=0)
    fitted = clone(unfitted).fit(x, y)
    out.update(
        aux_cv_auc=float(roc_auc_score(y, cv)),
        aux_median_property=float(np.median(cv[y == 1])),
        aux_median_none=float(np.median(cv[y == 0])),
        observed_median=(
            float(np.median(fitted.property_scores(obs.observed[seen])))
            if seen.any()
            else None
        ),
    )
    return out


def _norm_ratios(
    obs: PropertyObservations, seen: np.ndarray, mine: np.ndarray
) -> tuple[float | None, float | None]:
    """Median per-round ratio of observed to auxiliary feature norms.

    Each observed row is divided by the median norm of the auxiliary rows of
    its own round (same model); returns the median over the phase and over
    its last fifth of rounds (None without rows to compare).
    """
    aux_norms = np.linalg.norm(obs.aux[mine], axis=1)
    aux_rounds = obs.aux_rounds[mine]
    ratios: list[float] = []
    for row, r in zip(obs.observed[seen], obs.observed_rounds[seen], strict=True):
        same = aux_norms[aux_rounds == r]
        scale = float(np.median(same)) if same.size else 0.0
        if scale > 0.0:
            ratios.append(float(np.linalg.norm(row)) / scale)
    return _median_and_last_fifth(ratios)


def _label_norm_ratios(
    obs: PropertyObservations, mine: np.ndarray
) -> tuple[float | None, float | None]:
    """Median per-round ratio of the property emulations' norm to the others'.

    For each round with auxiliary rows of both labels among ``mine``: the
    median feature norm of its rows with the property over that of its rows
    without; returns the median over the rounds and over their last fifth
    (None without such a round, or where every ratio's divisor is zero).
    """
    norms = np.linalg.norm(obs.aux[mine], axis=1)
    rounds, labels = obs.aux_rounds[mine], obs.aux_labels[mine]
    ratios: list[float] = []
    for r in np.unique(rounds):
        here = rounds == r
        with_it, without = norms[here & (labels == 1)], norms[here & (labels == 0)]
        if with_it.size and without.size and np.median(without) > 0.0:
            ratios.append(float(np.median(with_it) / np.median(without)))
    return _median_and_last_fifth(ratios)


def _median_and_last_fifth(ratios: list[float]) -> tuple[float | None, float | None]:
    """Return the median of ``ratios`` and of their last fifth (Nones if empty)."""
    if not ratios:
        return None, None
    last = ratios[-max(len(ratios) // 5, 1) :]
    return float(np.median(ratios)), float(np.median(last))
