"""Flower server strategies and a federated-analytics server (``fedleak.strategies``).

Three Message-API strategies, each a :class:`flwr.serverapp.strategy.Strategy`
that drops into any ServerApp (``strategy.start(grid=..., ...)``) and composes
with Flower's own wrappers such as ``DifferentialPrivacyServerSideFixedClipping``:

- :class:`SyncSGD` -- the parameter server of seed 000 Alg. 1 (one mini-batch
  gradient per client, ``theta -= lr * sum_k g_k``);
- :class:`ModelAveraging` -- seed 000 Alg. 2 (client fraction ``C``, local
  epochs, ``theta = sum_k n_k / n theta_k``);
- :class:`SecureAggregation` -- pairwise-mask secure aggregation (seed 000
  Ch. 4.1) around ``SyncSGD``, ``ModelAveraging`` or Flower's ``FedAvg``;
  clients run :func:`fedleak.clients.secagg_mod`.

:class:`PartitionAwareStrategy` is their shared base (waiting for the
expected nodes, seeded sampling by partition id, counted failures).

:class:`SketchAnalytics` is no strategy: it runs one federated-analytics
query (masked Count-Min / Count Sketch aggregation, seed 000 Ch. 4.1.2) over
a Flower ``Grid`` from a ServerApp's ``main``; it loads on first use.
"""

from fedleak._lazy import lazy_exports

from .base import PartitionAwareStrategy, RoundReplies, arrays_to_numpy, numpy_to_arrays
from .model_averaging import ModelAveraging
from .secure_aggregation import SecureAggregation
from .sync_sgd import SyncSGD

_LAZY = {
    "SketchAnalytics": "sketch_analytics",
    "SketchAnalyticsResult": "sketch_analytics",
}

__getattr__, _ = lazy_exports(__name__, _LAZY)

__all__ = [
    "ModelAveraging",
    "PartitionAwareStrategy",
    "RoundReplies",
    "SecureAggregation",
    "SketchAnalytics",
    "SketchAnalyticsResult",
    "SyncSGD",
    "arrays_to_numpy",
    "numpy_to_arrays",
]


def __dir__() -> list[str]:
    return list(__all__)
