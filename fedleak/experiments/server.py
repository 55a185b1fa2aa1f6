"""The server side of an experiment, shared by ``fedleak run`` and ``flwr run``.

:func:`run_federation` builds the configured strategy (optionally inside one
of Flower's central-DP wrappers), the seeded initial model and the server-side
evaluation, and drives ``Strategy.start`` on the given Grid while a
:class:`RunRecorder` times the rounds and appends them to ``rounds.jsonl``.
:func:`finish_run` turns the outcome into ``results.json`` and ``curves.png``.
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w
import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    Result,
    Strategy,
)

import fedleak
from fedleak.errors import ConfigError
from fedleak.files import append_jsonl, write_atomic, write_json_atomic
from fedleak.strategies import ModelAveraging, SecureAggregation, SyncSGD
from fedleak.training import evaluate, set_arrays

from .config import ExperimentConfig
from .results import SCHEMA_VERSION, plot_curves

__all__ = [
    "RunRecorder",
    "build_strategy",
    "finish_run",
    "initial_arrays",
    "make_run_dir",
    "num_sampled",
    "run_federation",
    "write_config",
]

RoundCallback = Callable[[int, dict[str, Any]], None]


def num_sampled(config: ExperimentConfig) -> int:
    """Clients sampled per round: ``max(floor(C * K), 1)`` (seed 000 Alg. 2, line 3)."""
    k = config.federation.num_clients
    return min(k, max(math.floor(config.strategy.fraction_train * k + 1e-9), 1))


def build_strategy(config: ExperimentConfig) -> Strategy:
    """Build the configured strategy, wrapped in a Flower DP wrapper if asked."""
    s, k = config.strategy, config.federation.num_clients
    common: dict[str, Any] = {
        "fraction_train": s.fraction_train,
        "fraction_evaluate": s.fraction_evaluate,
        "min_available_nodes": k,
        "seed": config.seed,
        # a node whose identify reply comes after the timeout is still being
        # served when its next message arrives; the late reply's Context then
        # overwrites the newer one (Flower's last writer wins), losing e.g.
        # its secure-aggregation key on a loaded machine
        "identify_timeout": config.federation.round_timeout,
    }
    strategy: Strategy
    if s.name == "sync-sgd":
        strategy = SyncSGD(s.learning_rate, reduction=s.reduction, **common)
    elif s.name == "model-averaging":
        strategy = ModelAveraging(
            local_epochs=s.local_epochs, learning_rate=s.learning_rate, **common
        )
    else:
        strategy = FedAvg(
            fraction_train=s.fraction_train,
            fraction_evaluate=s.fraction_evaluate,
            min_train_nodes=num_sampled(config),
            min_evaluate_nodes=max(1, math.floor(s.fraction_evaluate * k + 1e-9)),
            min_available_nodes=k,
        )
    sa = config.secure_aggregation
    if sa.enabled:
        secure: Strategy = SecureAggregation(
            strategy,
            mode=sa.mode,
            threshold=sa.threshold,
            clip=sa.clip,
            modulus_bits=sa.modulus_bits or None,
            max_weight=sa.max_weight or None,
            group_size=sa.group_size or None,
            min_online=sa.min_online,
            metric_names=sa.metric_names,
            seed=config.seed,
        )
        return secure
    p = config.privacy
    if p.wrapper == "server-fixed-clipping":
        strategy = DifferentialPrivacyServerSideFixedClipping(
            strategy, p.noise_multiplier, p.clipping_norm, num_sampled(config)
        )
    elif p.wrapper == "server-adaptive-clipping":
        strategy = DifferentialPrivacyServerSideAdaptiveClipping(
            strategy,
            p.noise_multiplier,
            num_sampled(config),
            initial_clipping_norm=p.clipping_norm,
        )
    return strategy


def initial_arrays(config: ExperimentConfig) -> ArrayRecord:
    """Return the seeded initial global model."""
    return ArrayRecord(config.task().new_model().state_dict())


def _plain(record: MetricRecord | None) -> dict[str, Any]:
    return {} if record is None else {k: v for k, v in record.items()}


class RunRecorder:
    """Times rounds, evaluates the global model on the server, records rows.

    Its :meth:`evaluate_fn` is passed to ``Strategy.start``, which calls it
    before round 1 (round 0) and after every round; the time between the end
    of one call and the start of the next is that round's wall time.

    Parameters
    ----------
    config : ExperimentConfig
        The experiment (task, evaluation settings).
    run_dir : pathlib.Path, optional
        Where ``rounds.jsonl`` goes; None records in memory only.
    on_round : callable, optional
        ``on_round(round, row)`` after every round (progress display).
    """

    def __init__(
        self,
        config: ExperimentConfig,
        run_dir: Path | None = None,
        on_round: RoundCallback | None = None,
    ) -> None:
        self.config = config
        self.run_dir = run_dir
        self.on_round = on_round
        self.rows: dict[int, dict[str, Any]] = {}
        self.round_seconds: dict[int, float] = {}
        self._last_exit: float | None = None
        self.started = time.perf_counter()
        self._model: torch.nn.Module | None = None
        self._test: tuple[torch.Tensor, torch.Tensor] | None = None

    def _test_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._test is None:
            data = self.config.task().load()
            x, y = data.x_test, data.y_test
            limit = self.config.evaluation.max_test_examples
            if 0 < limit < len(y):
                keep = np.sort(
                    np.random.default_rng([self.config.seed, 0x7E57]).permutation(
                        len(y)
                    )[:limit]
                )
                x, y = x[keep], y[keep]
            self._test = (
                torch.tensor(x, dtype=torch.float32),
                torch.tensor(y, dtype=torch.int64),
            )
        return self._test

    def server_metrics(self, arrays: ArrayRecord) -> dict[str, Any]:
        """Test loss and accuracy of the global ``arrays`` on the held-out set."""
        if self._model is None:
            self._model = self.config.task().new_model()
        set_arrays(self._model, {k: v.numpy() for k, v in arrays.items()})
        x, y = self._test_set()
        result = evaluate(self._model, x, y)
        return {"test-accuracy": result.accuracy, "test-loss": result.loss}

    def evaluate_fn(
        self, server_round: int, arrays: ArrayRecord
    ) -> MetricRecord | None:
        """Record and evaluate one round (the hook of ``Strategy.start``)."""
        entered = time.perf_counter()
        if server_round > 0 and self._last_exit is not None:
            self.round_seconds[server_round] = entered - self._last_exit
        metrics = self.server_metrics(arrays) if self.config.evaluation.server else {}
        row: dict[str, Any] = {"round": server_round, "server": metrics}
        if server_round > 0:
            row["round_s"] = self.round_seconds.get(server_round)
        self.rows[server_round] = row
        if self.run_dir is not None:
            append_jsonl(self.run_dir / "rounds.jsonl", row)
        if self.on_round is not None:
            self.on_round(server_round, row)
        self._last_exit = time.perf_counter()
        return MetricRecord(metrics) if metrics else None


def run_federation(
    grid: Grid, config: ExperimentConfig, recorder: RunRecorder
) -> Result:
    """Run the experiment's strategy on ``grid`` (the body of the ServerApp).

    Flower's DP wrappers draw their noise from NumPy's global RNG; it is
    seeded here with the run seed so DP runs are reproducible too.
    """
    np.random.seed(config.seed % 2**32)  # noqa: NPY002 - Flower DP draws from it
    strategy = build_strategy(config)
    run_dir = "" if recorder.run_dir is None else str(recorder.run_dir.resolve())
    train_config = ConfigRecord(
        {**config.task().to_config(), **config.client_config(run_dir)}
    )
    return strategy.start(
        grid=grid,
        initial_arrays=initial_arrays(config),
        num_rounds=config.rounds,
        timeout=config.federation.round_timeout,
        train_config=train_config,
        evaluate_config=ConfigRecord(config.task().to_config()),
        evaluate_fn=recorder.evaluate_fn,
    )


def make_run_dir(
    config: ExperimentConfig, out: str | Path | None, base: str | Path = "runs"
) -> Path:
    """Create the run directory: ``out`` or ``<base>/<name>/<timestamp>``."""
    if out is not None:
        path = Path(out)
        if any((path / name).exists() for name in ("results.json", "rounds.jsonl")):
            raise ConfigError(
                f"{path} already holds a run (results.json or rounds.jsonl); "
                "choose another --out folder so nothing is overwritten"
            )
    else:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        path = Path(base) / config.name / stamp
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_config(path: Path, config: ExperimentConfig) -> None:
    """Write the resolved experiment as TOML, atomically."""
    text = tomli_w.dumps(config.model_dump(mode="json"))

    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    write_atomic(path, write)


def finish_run(
    run_dir: Path, config: ExperimentConfig, result: Result, recorder: RunRecorder
) -> dict[str, Any]:
    """Write ``results.json`` and ``curves.png``; return the results dict."""
    rounds = []
    for r in range(1, config.rounds + 1):
        row = dict(recorder.rows.get(r, {"round": r, "server": {}}))
        row["train"] = _plain(result.train_metrics_clientapp.get(r))
        row["evaluate"] = _plain(result.evaluate_metrics_clientapp.get(r))
        row.pop("round_s", None)
        rounds.append(row)
    last = rounds[-1]["server"] if rounds else {}
    seconds = [recorder.round_seconds[r] for r in sorted(recorder.round_seconds)]
    results: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "name": config.name,
        "seed": config.seed,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "versions": {
            "fedleak": fedleak.__version__,
            "flwr": version("flwr"),
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "config": config.model_dump(mode="json"),
        "final": {"round": config.rounds, **last},
        "rounds": rounds,
        "timing": {
            "total_s": time.perf_counter() - recorder.started,
            "first_round_s": seconds[0] if seconds else None,
            "median_round_s": statistics.median(seconds) if seconds else None,
            "median_round_after_first_s": (
                statistics.median(seconds[1:]) if len(seconds) > 1 else None
            ),
            "round_s": seconds,
        },
    }
    arrays = {k: v.numpy() for k, v in result.arrays.items()}
    if arrays:

        def save_model(tmp: Path) -> None:
            with open(tmp, "wb") as handle:
                savez: Any = np.savez
                savez(handle, **arrays)

        write_atomic(run_dir / "model.npz", save_model)
    write_json_atomic(run_dir / "results.json", results)
    plot_curves(
        rounds, run_dir / "curves.png", f"{config.name} ({config.strategy.name})"
    )
    return results
