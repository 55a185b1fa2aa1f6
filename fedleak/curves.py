"""Learning curves: whether a model's test accuracy has stopped rising.

seed 000's attacks are measured on trained models; a record whose model was
still improving when the attack ran measures a different model from the
seed's. Every bench that trains keeps its model's test accuracy over the run
and summarises it here, so the reproduction report can say whether each
figure comes from a model at its plateau.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["PLATEAU_TOLERANCE", "run_curve", "summarise_curve"]

PLATEAU_TOLERANCE = 0.02
"""Largest change of the mean accuracy between the last two fifths of a run
that still counts as a plateau."""


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
        ``rounds`` and ``test_accuracy`` (the thinned curve), ``last_fifth``
        and ``previous_fifth`` (mean accuracy over the last and the previous
        fifth of the points) and ``plateau``: whether the two differ by less
        than :data:`PLATEAU_TOLERANCE`. With no points, empty lists and
        ``plateau`` None (not measured).
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    if not points:
        return {"rounds": [], "test_accuracy": [], "plateau": None}
    keep = [p for i, p in enumerate(points) if i % every == 0 or i == len(points) - 1]
    fifth = max(len(points) // 5, 1)
    last = statistics.fmean(a for _, a in points[-fifth:])
    before = points[-2 * fifth : -fifth] or points[:1]
    previous = statistics.fmean(a for _, a in before)
    return {
        "rounds": [int(r) for r, _ in keep],
        "test_accuracy": [float(a) for _, a in keep],
        "last_fifth": last,
        "previous_fifth": previous,
        "plateau": abs(last - previous) < PLATEAU_TOLERANCE,
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
