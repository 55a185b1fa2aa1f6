"""ServerApp: Flower's Message-API FedAvg inside fedleak's SecureAggregation."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from fedleak.strategies import SecureAggregation
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Result, Strategy

from fedleak_msg_example.task import initial_model

app = ServerApp()


class RoundLog:
    """Append the global model of every round to a JSON-lines file.

    One line per round (round 0 is the initial model) with the seconds the
    round took, then a last line with the metrics of the run: enough to check
    what the server aggregated, and how fast, after the run.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self._last = time.monotonic()

    def _write(self, line: dict[str, Any]) -> None:
        with self.path.open("a") as file:
            file.write(json.dumps(line) + "\n")

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Record the global model after ``server_round`` (Flower's evaluate_fn)."""
        now = time.monotonic()
        model = arrays.to_numpy_ndarrays()
        self._write(
            {
                "round": server_round,
                "seconds": now - self._last,
                "dtypes": [str(a.dtype) for a in model],
                "arrays": [a.tolist() for a in model],
            }
        )
        self._last = now
        return None

    def finish(self, result: Result) -> None:
        """Record the train and evaluate metrics of every round."""

        def plain(metrics: dict[int, MetricRecord]) -> dict[str, Any]:
            return {str(r): dict(m) for r, m in metrics.items()}

        self._write(
            {
                "train-metrics": plain(result.train_metrics_clientapp),
                "evaluate-metrics": plain(result.evaluate_metrics_clientapp),
            }
        )


def run(grid: Grid, context: Context, *, secure: bool = True) -> Result:
    """Run ``num-server-rounds`` rounds of (secure) FedAvg on ``grid``."""
    config = context.run_config
    num_nodes = int(config.get("num-nodes", 4))
    strategy: Strategy = FedAvg(
        fraction_train=1.0,
        min_train_nodes=num_nodes,
        min_available_nodes=num_nodes,
        fraction_evaluate=1.0,
        min_evaluate_nodes=num_nodes,
    )
    if secure:
        strategy = SecureAggregation(
            strategy,
            clip=8.0,
            metric_names=["train-loss"],
            node_wait_timeout=float(config.get("node-wait-timeout", 120.0)),
            on_too_few_nodes=str(config.get("on-too-few-nodes", "stop")),  # type: ignore[arg-type]
        )
    rounds_file = str(config.get("rounds-file", ""))
    round_log = RoundLog(rounds_file) if rounds_file else None
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(initial_model()),
        num_rounds=int(config.get("num-server-rounds", 3)),
        train_config=ConfigRecord(),
        evaluate_fn=round_log,
    )
    if round_log is not None:
        round_log.finish(result)
    return result


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point of ``flwr run``."""
    result = run(grid, context, secure=bool(context.run_config.get("secure", True)))
    print("final evaluation:", result.evaluate_metrics_clientapp)
