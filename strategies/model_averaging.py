"""Federated learning with model averaging (seed 000, Alg. 2)."""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid

from fedleak import protocol
from fedleak.errors import ConfigError
from fedleak.federated import average_models

from .base import PartitionAwareStrategy, numpy_to_arrays

__all__ = ["ModelAveraging"]


class ModelAveraging(PartitionAwareStrategy):
    """Model-averaging server, seed 000 Alg. 2 (McMahan et al.'s FedAvg).

    Each round ``m = max(floor(C * K), min_train_nodes)`` of the ``K``
    connected clients are sampled with a seeded RNG (Alg. 2, lines 3 and 5);
    each runs ``local_epochs`` epochs of SGD over its whole local data
    (message mode :data:`fedleak.protocol.MODE_MODEL`) and returns its model
    ``theta_k`` and ``n_k`` (``num-examples``). The server sets (line 8)::

        theta_t = sum_k n_k / n * theta_k,     n = sum_k n_k

    computed in float64 and cast back to each array's dtype (integer arrays
    are rounded). A reply that misses an array of the model, has a wrong shape,
    a non-finite value or a non-positive ``n_k`` is rejected and counted in
    ``num-rejected``.

    Replies are models, so Flower's central-DP wrappers (which clip
    ``theta_k - theta_{t-1}``) compose with this strategy, e.g.
    ``DifferentialPrivacyServerSideFixedClipping(ModelAveraging(...), ...)``.

    Parameters
    ----------
    fraction_train : float, default=1.0
        The client fraction ``C``.
    local_epochs : int, optional
        ``E``, sent to clients as ``local-epochs`` when given.
    learning_rate : float, optional
        The clients' step size ``eta``, sent as ``lr`` when given.
    **kwargs
        Sampling and waiting options of :class:`PartitionAwareStrategy`.
    """

    def __init__(
        self,
        *,
        fraction_train: float = 1.0,
        local_epochs: int | None = None,
        learning_rate: float | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(fraction_train=fraction_train, **kwargs)  # type: ignore[arg-type]
        if fraction_train == 0.0:
            raise ConfigError("fraction_train (C) must be > 0 for model averaging")
        if local_epochs is not None and (
            isinstance(local_epochs, bool)
            or not isinstance(local_epochs, int)
            or local_epochs < 1
        ):
            raise ConfigError(
                f"local_epochs must be an integer >= 1, got {local_epochs!r}"
            )
        if learning_rate is not None and not learning_rate > 0:
            raise ConfigError(f"learning_rate must be > 0, got {learning_rate!r}")
        self.local_epochs = local_epochs
        self.learning_rate = learning_rate

    def __repr__(self) -> str:
        return (
            f"ModelAveraging(fraction_train={self.fraction_train}, "
            f"local_epochs={self.local_epochs}, learning_rate={self.learning_rate})"
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send the global model to a seeded sample of ``m`` clients."""
        extra: dict[str, object] = {protocol.TRAIN_MODE: protocol.MODE_MODEL}
        if self.local_epochs is not None:
            extra[protocol.LOCAL_EPOCHS] = self.local_epochs
        if self.learning_rate is not None:
            extra[protocol.LEARNING_RATE] = self.learning_rate
        return self.configure_train_round(server_round, arrays, config, grid, extra)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Set ``theta_t = sum_k n_k/n theta_k`` (Alg. 2, line 8)."""
        model = self.global_model(server_round)
        local_models, metrics = self.accept_replies(
            server_round, replies, complete=True
        )
        if not local_models:
            log(INFO, "aggregate_train: no usable model in round %d", server_round)
            return None, metrics
        averaged = average_models(model, local_models)
        return numpy_to_arrays(averaged), metrics

    def summary(self) -> None:
        """Log the strategy's settings."""
        log(
            INFO,
            "\t├──> ModelAveraging: C %.2f, local epochs %s, client lr %s",
            self.fraction_train,
            self.local_epochs,
            self.learning_rate,
        )
        super().summary()
