"""Learning curves: whether a model's test accuracy has stopped rising.

seed 000's attacks are measured on trained models; a record whose model was
still improving when the attack ran measures a different model from the
seed's. Every bench that trains keeps its model's test accuracy over the run
and summarises it here, so the reproduction report can say whether each
figure comes from a model at its plateau.

The rule is early stopping's: a run is at its plateau when the mean accuracy
of its last fifth is not above that of its best earlier fifth by
:data:`PLATEAU_TOLERANCE` or more, i.e. more training of the same kind no
longer raises it. An earlier rule compared the last two fifths both ways; it
called every DP-SGD run off its plateau, because their accuracy wanders by
+-0.03 around a level reached long before (record-level DP, sigma 4, 2,208
rounds: best fifth 0.90 at a quarter of the run, last two fifths 0.85 and
0.88), and a single dip at the last evaluation moved a fifth of 4 points by
0.025. A last fifth that fell that far below the best is not hidden: the
summary's ``below_best`` gives the fall.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CURVE_POINTS",
    "PLATEAU_TOLERANCE",
    "evaluation_interval",
    "run_curve",
    "summarise_curve",
]

PLATEAU_TOLERANCE = 0.02
"""Rise of the last fifth's mean accuracy over the best earlier fifth's from
which a run is still rising (not at its plateau); a fall at least this large
is reported as ``below_best``."""

CURVE_POINTS = 40
"""Test-accuracy evaluations spread evenly over an in-process run (the last
round among them), from which :func:`summarise_curve` judges the plateau: 8
a fifth. With 20 (4 a fifth) one evaluation's dip at the plateau (0.81 among
0.90-0.93 at the last round of the vocabulary-300 membership run) moved its
fifth's mean by 0.03, more than the tolerance."""


def evaluation_interval(rounds: int) -> int:
    """Return the rounds between two of a run's :data:`CURVE_POINTS` evaluations.

    A run evaluates after every round divisible by it and after its last
    one; a run shorter than :data:`CURVE_POINTS` evaluates every round.
    """
    return max(rounds // CURVE_POINTS, 1)


def summarise_curve(
    points: Sequence[tuple[int, float]], every: int = 1
) -> dict[str, Any]:
    """Summarise ``(round, test accuracy)`` points of one run.

    Parameters
    ----------
    points : sequence of (int, float)
        The measured points, in round order.
    every : int, default=1
        Keep every ``every``-th point of the curve (and the last) in the
        summary; the plateau is judged on all of them.

    Returns
    -------
    dict
        ``rounds`` and ``test_accuracy`` (the thinned curve); ``last_fifth``,
        ``previous_fifth`` and ``best_earlier_fifth`` (mean accuracy over the
        last fifth of the points, the fifth before it, and the best of the
        fifths before the last, counted back from it); ``plateau``: whether
        the last fifth is less than :data:`PLATEAU_TOLERANCE` above the best
        earlier fifth; ``below_best``: how far the last fifth lies below the
        best earlier one (0 when not below). With fewer than ten points a
        fifth is one point. With no points, empty lists and ``plateau`` None
        (not measured).
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    if not points:
        return {"rounds": [], "test_accuracy": [], "plateau": None}
    keep = [p for i, p in enumerate(points) if i % every == 0 or i == len(points) - 1]
    accuracy = [a for _, a in points]
    fifth = max(len(points) // 5, 1)
    last = statistics.fmean(accuracy[-fifth:])
    earlier = [
        statistics.fmean(accuracy[end - fifth : end])
        for end in range(len(accuracy) - fifth, fifth - 1, -fifth)
    ] or [accuracy[0]]
    best = max(earlier)
    return {
        "rounds": [int(r) for r, _ in keep],
        "test_accuracy": [float(a) for _, a in keep],
        "last_fifth": last,
        "previous_fifth": earlier[0],
        "best_earlier_fifth": best,
        "plateau": last - best < PLATEAU_TOLERANCE,
        "below_best": max(best - last, 0.0),
    }


def run_curve(results: Mapping[str, Any], every: int = 25) -> dict[str, Any]:
    """Summarise the global model's test accuracy over a fedleak run.

    Parameters
    ----------
    results : mapping
        The run's ``results.json`` (``rounds[i].server["test-accuracy"]``,
        present in the rounds the server evaluated).
    every : int, default=25
        Keep every ``every``-th evaluation of the curve (and the last).

    Returns
    -------
    dict
        :func:`summarise_curve` of the server's evaluations.
    """
    points = [
        (int(r["round"]), float(r["server"]["test-accuracy"]))
        for r in results.get("rounds", [])
        if "test-accuracy" in r.get("server", {})
    ]
    return summarise_curve(points, every)
