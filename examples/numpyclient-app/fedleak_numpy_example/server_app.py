"""ServerApp: Flower's Message-API FedAvg inside fedleak's SecureAggregation."""

from __future__ import annotations

from fedleak.strategies import SecureAggregation
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Result

from fedleak_numpy_example.task import initial_model

app = ServerApp()


def run(grid: Grid, context: Context, *, secure: bool = True) -> Result:
    """Run ``num-server-rounds`` rounds of (secure) FedAvg on ``grid``."""
    config = context.run_config
    num_nodes = int(config.get("num-nodes", 4))
    strategy = FedAvg(
        fraction_train=1.0,
        min_train_nodes=num_nodes,
        min_available_nodes=num_nodes,
        fraction_evaluate=1.0,
        min_evaluate_nodes=num_nodes,
    )
    if secure:
        strategy = SecureAggregation(strategy, clip=8.0, metric_names=["train-loss"])
    return strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(initial_model()),
        num_rounds=int(config.get("num-server-rounds", 3)),
        train_config=ConfigRecord(),
    )


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point of ``flwr run``."""
    result = run(grid, context, secure=bool(context.run_config.get("secure", True)))
    print("final evaluation:", result.evaluate_metrics_clientapp)
