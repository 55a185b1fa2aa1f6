"""Auditing DP-SGD with the differential-identifiability adversary (seed 002).

Modules (Flower-free):

``adversary``
    The DI adversary: posterior beliefs, membership advantage and the
    empirical epsilon of a DP-SGD run on neighbouring datasets.
``neighbours``
    Neighbouring datasets: dissimilarities and dataset sensitivity.

Every public name of those modules is importable from this package.
"""

from fedleak._lazy import lazy_exports

_WHERE = {
    "AuditReport": "adversary",
    "DIAdversary": "adversary",
    "DISSIMILARITIES": "neighbours",
    "DITrace": "adversary",
    "Dissimilarity": "neighbours",
    "Neighbours": "neighbours",
    "dissimilarity": "neighbours",
    "most_dissimilar_neighbours": "neighbours",
    "neighbours_at": "neighbours",
    "posterior_update": "adversary",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
__all__ = sorted(_WHERE)
