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
    ``num-rejected``. A client that has not joined yet replies ``n_k = 0``
    with :data:`fedleak.protocol.ABSTAINED` and is left out: with ``K = 3``
    and one abstaining reply the round is the 2-client average, bit for bit
    (seed 000 Fig. 7.9: ``K = 2`` before the target joins).

    The round metric :data:`fedleak.protocol.AGGREGATED_EXAMPLES` is ``n``;
    with ``announce_weight`` the next round's train config carries it as
    :data:`fedleak.protocol.PREVIOUS_AGGREGATED_EXAMPLES`, so a client can
    read its own share ``n_k / n`` of ``theta_t - theta_{t-1}`` exactly. The
    seed's participant-adversary knows this share (Ch. 7.2.7: it knows ``K``
    and the equal ``n_k``); announcing ``n`` makes that knowledge explicit
    and keeps it right when ``K`` changes. Pass ``announce_weight=False`` to
    withhold it (Flower's ``FedAvg`` does not send it).

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
    announce_weight : bool, default=True
        Send the previous round's ``n`` to the clients (see above).
    **kwargs
        Sampling and waiting options of :class:`PartitionAwareStrategy`.
    """

    def __init__(
        self,
        *,
        fraction_train: float = 1.0,
        local_epochs: int | None = None,
        learning_rate: float | None = None,
        announce_weight: bool = True,
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
        self.announce_weight = bool(announce_weight)
        self._aggregated: tuple[int, float] | None = None  # (round, n)

    def __repr__(self) -> str:
        return (
            f"ModelAveraging(fraction_train={self.fraction_train}, "
            f"local_epochs={self.local_epochs}, learning_rate={self.learning_rate})"
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send the global model to a seeded sample of ``m`` clients.

        With ``announce_weight``, the config carries ``n`` of the previous
        round's average when that round produced one.
        """
        extra: dict[str, object] = {protocol.TRAIN_MODE: protocol.MODE_MODEL}
        if self.local_epochs is not None:
            extra[protocol.LOCAL_EPOCHS] = self.local_epochs
        if self.learning_rate is not None:
            extra[protocol.LEARNING_RATE] = self.learning_rate
        previous = self._aggregated
        if (
            self.announce_weight
            and previous is not None
            and previous[0] == server_round - 1
        ):
            extra[protocol.PREVIOUS_AGGREGATED_EXAMPLES] = previous[1]
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
        total = float(sum(weight for _, weight in local_models))
        metrics[protocol.AGGREGATED_EXAMPLES] = total
        self._aggregated = (server_round, total)
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
