"""DPGM: differentially private mixture of generative models (seeds 000, 001).

Seed 000 Ch. 5 / seed 001: private kernel k-means with random Fourier
features (Alg. 4), DPNorm (Alg. 6), DP-SGD with adaptive clipping (Alg. 5),
the mixture of VAEs or RBMs (Alg. 3), sampling (Sec. 5.1.4), counting-query
evaluation and the MWEM baseline (Sec. 5.3.3).
"""

from __future__ import annotations

from .kmeans import (
    KMeansResult,
    clustering_accuracy,
    dp_kmeans,
    kmeans_epsilon,
    kmeans_sigma,
    private_kernel_kmeans,
)
from .mwem import MWEMResult, mwem
from .queries import (
    QueryWorkload,
    answer_queries,
    group_errors,
    random_item_queries,
    relative_errors,
)
from .rff import RandomFourierFeatures, median_gamma
from .synthetic import cdr_like, transit_like

__all__ = [
    "DPGM",
    "BernoulliRBM",
    "KMeansResult",
    "MWEMResult",
    "QueryWorkload",
    "RandomFourierFeatures",
    "VAEComponent",
    "answer_queries",
    "calibrate_sigma_g",
    "cdr_like",
    "clustering_accuracy",
    "dp_kmeans",
    "group_errors",
    "kmeans_epsilon",
    "kmeans_sigma",
    "make_component",
    "median_gamma",
    "mwem",
    "private_kernel_kmeans",
    "random_item_queries",
    "relative_errors",
    "transit_like",
]

_TORCH_NAMES = {
    "DPGM": "estimator",
    "calibrate_sigma_g": "estimator",
    "BernoulliRBM": "components",
    "VAEComponent": "components",
    "make_component": "components",
}


def __getattr__(name: str) -> object:
    """Load the torch-based names on first use (PEP 562)."""
    if name in _TORCH_NAMES:
        from importlib import import_module

        return getattr(import_module(f".{_TORCH_NAMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
