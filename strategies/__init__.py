"""Flower Message-API server strategies (installed as ``fedleak.strategies``).

Both strategies subclass :class:`flwr.serverapp.strategy.Strategy`, so they drop
into any ServerApp (``strategy.start(grid=..., ...)``) and compose with Flower's
own wrappers such as ``DifferentialPrivacyServerSideFixedClipping``.
"""

from .base import PartitionAwareStrategy, RoundReplies, arrays_to_numpy, numpy_to_arrays
from .model_averaging import ModelAveraging
from .secure_aggregation import SecureAggregation
from .sync_sgd import SyncSGD

__all__ = [
    "ModelAveraging",
    "PartitionAwareStrategy",
    "RoundReplies",
    "SecureAggregation",
    "SyncSGD",
    "arrays_to_numpy",
    "numpy_to_arrays",
]
