"""Differential-privacy toolkit: mechanisms, accountants, DP-SGD (seeds 000, 001).

Import what you need from here; torch is only loaded by the DP-SGD names,
on first use.
"""

from __future__ import annotations

from typing import Any

from .accounting import (
    DEFAULT_LAMBDAS,
    GaussianEvent,
    MomentsAccountant,
    SampledGaussianEvent,
    SharedBatchEvent,
    dpgm_epsilon,
    dpgm_log_moment,
    epsilon_from_log_moments,
    gaussian_log_moment,
    kmeans_log_moment,
    sgm_epsilon,
    sgm_log_moment,
    sgm_noise_multiplier,
    shared_batch_log_moment,
)
from .dpnorm import dp_norm
from .mechanisms import gaussian_mechanism, gaussian_sigma, laplace_mechanism
from .randomness import check_rng, noise_generator

__all__ = [
    "DEFAULT_LAMBDAS",
    "AdaptiveClipping",
    "DPSGD",
    "DPTrainResult",
    "FixedClipping",
    "GaussianEvent",
    "MomentsAccountant",
    "SampledGaussianEvent",
    "SharedBatchEvent",
    "check_rng",
    "noise_generator",
    "dp_norm",
    "dp_sgd_train",
    "dpgm_epsilon",
    "dpgm_log_moment",
    "epsilon_from_log_moments",
    "gaussian_log_moment",
    "gaussian_mechanism",
    "gaussian_sigma",
    "kmeans_log_moment",
    "laplace_mechanism",
    "sgm_epsilon",
    "sgm_log_moment",
    "sgm_noise_multiplier",
    "shared_batch_log_moment",
]

_TORCH_NAMES = {
    "AdaptiveClipping",
    "DPSGD",
    "DPTrainResult",
    "FixedClipping",
    "dp_sgd_train",
}


def __getattr__(name: str) -> Any:
    """Load the torch-based DP-SGD names on first use (PEP 562)."""
    if name in _TORCH_NAMES:
        from . import dpsgd

        return getattr(dpsgd, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
