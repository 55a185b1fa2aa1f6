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
from fedleak.training import arrays_from_records, evaluate, set_arrays, torch_threads

from .config import ExperimentConfig
from .engine import FLOWER_POLL_INTERVAL, EngineGrid, engine_active
from .results import SCHEMA_VERSION, plot_curves

__all__ = [
    "RunRecorder",
    "build_strategy",
    "finish_run",
    "initial_arrays",
    "make_run_dir",
    "num_sampled",
    "run_federation",
    "timing_summary",
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
    before round 1 (round 0) and after every round. A round's wall time runs
    from the end of one server evaluation to the end of the next, so the
    rounds tile the run; :meth:`attach` gives it the
    :class:`~fedleak.experiments.engine.EngineGrid` whose timed exchanges
    split each round into waiting for replies, the clients' reported
    compute, the server's evaluation and the server's other work (sampling,
    building messages, aggregation, bookkeeping).

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
        self.timings: dict[int, dict[str, Any]] = {}
        self.engine: dict[str, Any] = {}
        self.grid: EngineGrid | None = None
        self._last_mark: float | None = None
        self.started = time.perf_counter()
        self._model: torch.nn.Module | None = None
        self._test: tuple[torch.Tensor, torch.Tensor] | None = None

    def attach(self, grid: EngineGrid, engine: str) -> None:
        """Take each round's message exchanges from ``grid`` (run by ``engine``)."""
        self.grid = grid
        self.engine = {
            "engine": engine,
            "poll_interval": grid.poll_interval,
            "wake_ups": grid.in_memory and engine_active(),
        }

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
        set_arrays(self._model, arrays_from_records(arrays))
        x, y = self._test_set()
        result = evaluate(self._model, x, y)
        return {"test-accuracy": result.accuracy, "test-loss": result.loss}

    def _round_timing(self, evaluated: float, evaluate_s: float) -> dict[str, Any]:
        assert self._last_mark is not None
        exchanges = self.grid.take_exchanges() if self.grid is not None else []
        compute = [c for e in exchanges for c in e.compute_s]
        wall = evaluated - self._last_mark
        wait = sum(e.wait_s for e in exchanges)
        return {
            "wall_s": wall,
            "wait_s": wait,
            "exchanges": len(exchanges),
            "replies": sum(e.num_replies for e in exchanges),
            "client_compute_s": sum(compute),
            "client_compute_max_s": max(compute, default=0.0),
            "evaluate_s": evaluate_s,
            "server_s": wall - wait - evaluate_s,
        }

    def evaluate_fn(
        self, server_round: int, arrays: ArrayRecord
    ) -> MetricRecord | None:
        """Record and evaluate one round (the hook of ``Strategy.start``)."""
        entered = time.perf_counter()
        metrics = self.server_metrics(arrays) if self.config.evaluation.server else {}
        evaluated = time.perf_counter()
        row: dict[str, Any] = {"round": server_round, "server": metrics}
        if server_round > 0 and self._last_mark is not None:
            row["timing"] = self._round_timing(evaluated, evaluated - entered)
            self.timings[server_round] = row["timing"]
        self._last_mark = evaluated
        self.rows[server_round] = row
        if self.run_dir is not None:
            append_jsonl(self.run_dir / "rounds.jsonl", row)
        if self.on_round is not None:
            self.on_round(server_round, row)
        return MetricRecord(metrics) if metrics else None


def run_federation(
    grid: Grid, config: ExperimentConfig, recorder: RunRecorder
) -> Result:
    """Run the experiment's strategy on ``grid`` (the body of the ServerApp).

    The strategy sees ``grid`` through an
    :class:`~fedleak.experiments.engine.EngineGrid` (``[federation] engine``
    and ``poll_interval``), which the recorder reads the round timing from;
    torch runs on ``[federation] server_threads`` threads meanwhile.
    Flower's DP wrappers draw their noise from NumPy's global RNG; it is
    seeded here with the run seed so DP runs are reproducible too.
    """
    np.random.seed(config.seed % 2**32)  # noqa: NPY002 - Flower DP draws from it
    strategy = build_strategy(config)
    federation = config.federation
    poll = (
        federation.poll_interval
        if federation.engine == "fedleak"
        else FLOWER_POLL_INTERVAL
    )
    engine_grid = grid if isinstance(grid, EngineGrid) else EngineGrid(grid, poll)
    recorder.attach(engine_grid, federation.engine)
    run_dir = "" if recorder.run_dir is None else str(recorder.run_dir.resolve())
    train_config = ConfigRecord(
        {**config.task().to_config(), **config.client_config(run_dir)}
    )
    with torch_threads(federation.server_threads):
        return strategy.start(
            grid=engine_grid,
            initial_arrays=initial_arrays(config),
            num_rounds=config.rounds,
            timeout=federation.round_timeout,
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


def timing_summary(recorder: RunRecorder) -> dict[str, Any]:
    """Return the ``timing`` section of ``results.json`` (see :mod:`.results`)."""
    ordered = [recorder.timings[r] for r in sorted(recorder.timings)]
    seconds = [t["wall_s"] for t in ordered]
    after_first = ordered[1:]
    medians = (
        {
            key: statistics.median(t[key] for t in after_first)
            for key in (ordered[0] if ordered else {})
        }
        if after_first
        else {}
    )
    return {
        "total_s": time.perf_counter() - recorder.started,
        "first_round_s": seconds[0] if seconds else None,
        "median_round_s": statistics.median(seconds) if seconds else None,
        "median_round_after_first_s": medians.get("wall_s"),
        "round_s": seconds,
        "median_after_first": medians,
        "rounds": [
            {"round": r, **recorder.timings[r]} for r in sorted(recorder.timings)
        ],
        "engine": dict(recorder.engine),
    }


def finish_run(
    run_dir: Path, config: ExperimentConfig, result: Result, recorder: RunRecorder
) -> dict[str, Any]:
    """Write ``results.json`` and ``curves.png``; return the results dict."""
    rounds = []
    for r in range(1, config.rounds + 1):
        row = dict(recorder.rows.get(r, {"round": r, "server": {}}))
        row["train"] = _plain(result.train_metrics_clientapp.get(r))
        row["evaluate"] = _plain(result.evaluate_metrics_clientapp.get(r))
        row.pop("timing", None)
        rounds.append(row)
    last = rounds[-1]["server"] if rounds else {}
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
        "timing": timing_summary(recorder),
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
