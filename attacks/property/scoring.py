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
from pathlib import Path
from typing import Any

import numpy as np

from fedleak.errors import DataError

from .classifier import (
    BatchPropertyClassifier,
    dataset_score,
    load_observations,
    score_series,
    single_batch_auc,
)

__all__ = ["analyse_run", "load_truth"]


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
