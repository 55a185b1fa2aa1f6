"""ClientApp: Flower's Message API, unchanged but for ``mods=[secagg_mod]``."""

from __future__ import annotations

from fedleak.clients import add_identify_handler, secagg_mod
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedleak_msg_example.task import accuracy, load_partition, train

app = ClientApp(mods=[secagg_mod])


def _data(context: Context):  # type: ignore[no-untyped-def]
    return load_partition(
        int(context.node_config["partition-id"]),
        int(context.node_config["num-partitions"]),
    )


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    """Train the received model on this node's digits."""
    x, y = _data(context)
    model = msg.content["arrays"].to_numpy_ndarrays()
    server_round = int(msg.content["config"].get("server-round", 0))
    seed = 1000 * int(context.node_config["partition-id"]) + server_round
    trained, loss = train(model, x, y, epochs=1, lr=0.5, seed=seed)
    metrics = MetricRecord({"train-loss": loss, "num-examples": len(x)})
    content = RecordDict({"arrays": ArrayRecord(trained), "metrics": metrics})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate_fn(msg: Message, context: Context) -> Message:
    """Accuracy of the received model on this node's digits."""
    x, y = _data(context)
    model = msg.content["arrays"].to_numpy_ndarrays()
    metrics = MetricRecord({"accuracy": accuracy(model, x, y), "num-examples": len(x)})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)


# optional: lets fedleak's strategies sample reproducibly by partition id
add_identify_handler(app)
