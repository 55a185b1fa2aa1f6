"""ClientApp: a legacy NumPyClient, unchanged but for ``mods=[secagg_mod]``."""

from __future__ import annotations

import numpy as np
from fedleak.clients import secagg_mod
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.common import Context

from fedleak_numpy_example.task import accuracy, load_partition, train


class DigitsClient(NumPyClient):
    """Softmax regression on one partition of the digits."""

    def __init__(self, partition_id: int, num_partitions: int) -> None:
        self.partition_id = partition_id
        self.x, self.y = load_partition(partition_id, num_partitions)

    def fit(self, parameters, config):  # type: ignore[no-untyped-def]
        """Train one epoch from the received model."""
        seed = 1000 * self.partition_id + int(config.get("server-round", 0))
        trained, loss = train(parameters, self.x, self.y, epochs=1, lr=0.5, seed=seed)
        trained = [t.astype(p.dtype) for t, p in zip(trained, parameters, strict=True)]
        return trained, len(self.x), {"train-loss": loss}

    def evaluate(self, parameters, config):  # type: ignore[no-untyped-def]
        """Error rate and accuracy of the received model."""
        acc = accuracy([np.asarray(p) for p in parameters], self.x, self.y)
        return 1.0 - acc, len(self.x), {"accuracy": acc}


def client_fn(context: Context):  # type: ignore[no-untyped-def]
    """Build this node's client (as Flower's examples do)."""
    return DigitsClient(
        int(context.node_config["partition-id"]),
        int(context.node_config["num-partitions"]),
    ).to_client()


# the secure-aggregation mod also lets this legacy client answer Message-API
# strategies and fedleak's identify query
app = ClientApp(client_fn=client_fn, mods=[secagg_mod])
