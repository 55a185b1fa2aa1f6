"""The server side of an experiment, shared by ``fedleak run`` and ``flwr run``.

:func:`run_federation` builds the configured strategy (optionally inside one
of Flower's central-DP wrappers), the seeded initial model and the server-side
evaluation, and runs the rounds on the given Grid while a :class:`RunRecorder`
times them and appends them to ``rounds.jsonl``. The round loop is
``Strategy.start``'s (train exchange, aggregation, evaluate exchange, server
evaluation), run here so that a run can stop between rounds
(:class:`~fedleak.runtime.lifecycle.RunControl`), write checkpoints
(:mod:`~fedleak.runtime.checkpoint`) and resume from one.
:func:`finish_run` turns the outcome into ``results.json`` and ``curves.png``
(the latter not for an interrupted run).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
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
from fedleak.defenses import NOISE_SEED_KEY
from fedleak.files import append_jsonl, write_atomic, write_json_atomic
from fedleak.runtime.checkpoint import (
    Checkpoint,
    ClientStates,
    RoundCheckpoints,
    restore_strategy_state,
)
from fedleak.runtime.engine import (
    FLOWER_POLL_INTERVAL,
    EngineGrid,
    StoppableGrid,
)
from fedleak.runtime.idle_priority import to_idle_priority, to_normal_priority
from fedleak.runtime.lifecycle import RunControl, RunStopped
from fedleak.runtime.noise import NoiseStream
from fedleak.strategies import ModelAveraging, SecureAggregation, SyncSGD
from fedleak.training import (
    arrays_from_records,
    evaluate,
    native_threads,
    set_arrays,
)

from .config import ExperimentConfig
from .results import SCHEMA_VERSION, plot_curves, strict_json

__all__ = [
    "RunRecorder",
    "build_strategy",
    "finish_run",
    "initial_arrays",
    "num_sampled",
    "run_federation",
    "timing_summary",
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
    :class:`~fedleak.runtime.engine.EngineGrid` whose timed exchanges
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
        self.status = "running"
        self.arrays: ArrayRecord | None = None
        self.completed_round = 0
        self.resumed_from: int | None = None
        self.noise: dict[str, Any] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._pending: (
            tuple[
                int,
                dict[str, Any] | None,
                Future[tuple[dict[str, Any], float]],
                threading.Event,
            ]
            | None
        ) = None
        self._priority = threading.Lock()  # orders the evaluator's policy changes
        self._evaluator_tid: int | None = None

    def resume(self, checkpoint_round: int) -> None:
        """Go on after ``checkpoint_round``: keep the rows up to it, drop later ones.

        Rows of ``rounds.jsonl`` after the checkpoint (rounds finished after it
        and lost with the run) are removed from the file, so it lists every
        round once.
        """
        self.resumed_from = checkpoint_round
        self.completed_round = checkpoint_round
        if self.run_dir is None:
            return
        path = self.run_dir / "rounds.jsonl"
        kept: list[str] = []
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a kill
                    continue
                if not isinstance(row, dict) or row.get("round", -1) > checkpoint_round:
                    continue
                kept.append(line)
                self.rows[int(row["round"])] = row
                if isinstance(row.get("timing"), dict):
                    self.timings[int(row["round"])] = row["timing"]
        text = "".join(line + "\n" for line in kept)

        def write(tmp: Path) -> None:
            tmp.write_text(text, encoding="utf-8")

        write_atomic(path, write)
        self._last_mark = time.perf_counter()

    def attach(self, grid: EngineGrid, engine: str) -> None:
        """Take each round's message exchanges from ``grid`` (run by ``engine``)."""
        self.grid = grid
        self.engine = {
            "engine": engine,
            **grid.settings(),
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
            # token ids (text tasks) stay integers for the embedding layer, as
            # in the clients' data (fedleak.task)
            integer = np.issubdtype(np.asarray(x).dtype, np.integer)
            self._test = (
                torch.tensor(x, dtype=torch.int64 if integer else torch.float32),
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

    def _round_timing(
        self, mark: float, evaluate_s: float, blocked_s: float
    ) -> dict[str, Any]:
        """Return the timing row of the span from the last mark to ``mark``.

        ``evaluate_s`` is the evaluation of this round's model,
        ``blocked_s`` the part of the span the server spent evaluating or
        waiting for an evaluation (equal unless evaluations overlap rounds).
        """
        assert self._last_mark is not None
        exchanges = self.grid.take_exchanges() if self.grid is not None else []
        compute = [c for e in exchanges for c in e.compute_s]
        wall = mark - self._last_mark
        wait = sum(e.wait_s for e in exchanges)
        return {
            "wall_s": wall,
            "wait_s": wait,
            "exchanges": len(exchanges),
            "replies": sum(e.num_replies for e in exchanges),
            "client_compute_s": sum(compute),
            "client_compute_max_s": max(compute, default=0.0),
            "evaluate_s": evaluate_s,
            "evaluate_blocked_s": blocked_s,
            "server_s": wall - wait - blocked_s,
        }

    def _timed_metrics(self, arrays: ArrayRecord) -> tuple[dict[str, Any], float]:
        started = time.perf_counter()
        metrics = self.server_metrics(arrays)
        return metrics, time.perf_counter() - started

    def _record(
        self, server_round: int, metrics: dict[str, Any], timing: dict[str, Any] | None
    ) -> None:
        row: dict[str, Any] = {"round": server_round, "server": metrics}
        if timing is not None:
            row["timing"] = timing
            self.timings[server_round] = timing
        self.rows[server_round] = row
        if self.run_dir is not None:
            append_jsonl(self.run_dir / "rounds.jsonl", row)
        if self.on_round is not None:
            self.on_round(server_round, row)

    def evaluate_fn(
        self, server_round: int, arrays: ArrayRecord
    ) -> MetricRecord | None:
        """Record and evaluate one round (the hook of ``Strategy.start``)."""
        entered = time.perf_counter()
        self.flush()
        self.arrays = arrays
        due = self.config.evaluation.due(server_round, self.config.rounds)
        metrics = self.server_metrics(arrays) if due else {}
        evaluated = time.perf_counter()
        timing = None
        if server_round > 0 and self._last_mark is not None:
            spent = evaluated - entered
            timing = self._round_timing(evaluated, spent, spent)
        self._last_mark = evaluated
        self._record(server_round, metrics, timing)
        return MetricRecord(metrics) if metrics else None

    def end_round(self, server_round: int, arrays: ArrayRecord) -> None:
        """Close round ``server_round`` and evaluate ``arrays`` in the background.

        The round's span ends now, when its model exists; the evaluation of
        the model (if due) runs on a worker thread while the next round
        trains, on idle CPU time only until :meth:`flush` waits for it
        (:mod:`fedleak.runtime.idle_priority`), and its row is written by
        the next :meth:`end_round` or by :meth:`flush`, rounds in order. The
        span's ``evaluate_blocked_s`` is the time spent here waiting for the
        previous round's evaluation.
        Same numbers as :meth:`evaluate_fn`: the evaluation reads only
        ``arrays``, which no later round changes.
        """
        entered = time.perf_counter()
        self.flush()
        now = time.perf_counter()
        self.arrays = arrays
        timing = None
        if self._last_mark is not None:
            timing = self._round_timing(now, 0.0, now - entered)
        self._last_mark = now
        if not self.config.evaluation.due(server_round, self.config.rounds):
            self._record(server_round, {}, timing)
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                1, thread_name_prefix="fedleak-evaluate"
            )
        urgent = threading.Event()
        future = self._executor.submit(self._background_metrics, arrays, urgent)
        self._pending = (server_round, timing, future, urgent)

    def _background_metrics(
        self, arrays: ArrayRecord, urgent: threading.Event
    ) -> tuple[dict[str, Any], float]:
        """:meth:`_timed_metrics` on idle CPU time, unless the server already waits.

        (:mod:`fedleak.runtime.idle_priority`; :meth:`flush` gives the thread
        its normal priority back when it waits for the result.)
        """
        with self._priority:
            self._evaluator_tid = threading.get_native_id()
            if urgent.is_set():
                to_normal_priority(self._evaluator_tid)
            else:
                to_idle_priority()
        return self._timed_metrics(arrays)

    def flush(self) -> None:
        """Wait for the evaluation :meth:`end_round` started, if any; write its row."""
        if self._pending is None:
            return
        server_round, timing, future, urgent = self._pending
        self._pending = None
        if not future.done():  # the evaluation is the critical path now
            with self._priority:
                urgent.set()
                if self._evaluator_tid is not None:
                    to_normal_priority(self._evaluator_tid)
        metrics, evaluate_s = future.result()
        if timing is not None:
            timing["evaluate_s"] = evaluate_s
        self._record(server_round, metrics, timing)

    def close(self) -> None:
        """Write any pending evaluation's row; stop the evaluation thread."""
        try:
            self.flush()
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None


def _engine_grid(
    grid: Grid, config: ExperimentConfig, control: RunControl | None
) -> EngineGrid:
    """Return the grid the strategy talks through (``[federation] engine``).

    A grid that is already an :class:`~fedleak.runtime.engine.EngineGrid` is
    used as it is; otherwise it is wrapped with the engine's poll interval
    (fedleak's ``poll_interval``, or Flower's own), in a
    :class:`~fedleak.runtime.engine.StoppableGrid` when stop requests can
    come.
    """
    federation = config.federation
    poll = (
        federation.poll_interval
        if federation.engine == "fedleak"
        else FLOWER_POLL_INTERVAL
    )
    if isinstance(grid, EngineGrid):
        return grid
    if control is not None:
        return StoppableGrid(grid, poll, control)
    return EngineGrid(grid, poll)


def _round_configs(
    config: ExperimentConfig, recorder: RunRecorder
) -> tuple[ConfigRecord, ConfigRecord]:
    """Return the ``ConfigRecord`` of every train and of every evaluate message.

    Training messages carry the task, the client settings (with the run
    directory, where adversaries write what they observe) and, with
    ``[privacy] noise_seed``, the seed of the clients' DP-SGD noise.
    """
    run_dir = "" if recorder.run_dir is None else str(recorder.run_dir.resolve())
    train_config = ConfigRecord(
        {**config.task().to_config(), **config.client_config(run_dir)}
    )
    if config.privacy.noise_seed is not None:  # the clients' DP-SGD noise too
        train_config[NOISE_SEED_KEY] = config.privacy.noise_seed
    return train_config, ConfigRecord(config.task().to_config())


def _starting_point(
    config: ExperimentConfig,
    strategy: Strategy,
    noise: NoiseStream,
    recorder: RunRecorder,
    result: Result,
    resume: Checkpoint | None,
) -> tuple[ArrayRecord, int]:
    """Return the global model to start from and the first round to run.

    A fresh run starts at round 1 from :func:`initial_arrays`. A resumed run
    starts after ``resume.round`` from the checkpoint's model, with the
    strategy's state, the noise stream, the clients' metrics so far and the
    recorder's rows put back as they were.
    """
    if resume is None:
        return initial_arrays(config), 1
    arrays = resume.array_record()
    restore_strategy_state(strategy, resume.strategy)
    noise.load(resume.noise_state)
    result.train_metrics_clientapp.update(
        {r: MetricRecord(m) for r, m in resume.train_metrics.items()}
    )
    result.evaluate_metrics_clientapp.update(
        {r: MetricRecord(m) for r, m in resume.evaluate_metrics.items()}
    )
    recorder.resume(resume.round)
    return arrays, resume.round + 1


@dataclass(frozen=True)
class _RoundExchanges:
    """One round of ``Strategy.start`` (Flower 1.41): train, then evaluate.

    The strategy's calls that may draw Flower's DP-wrapper noise run inside
    :meth:`NoiseStream.active`.
    """

    strategy: Strategy
    grid: EngineGrid
    noise: NoiseStream
    train_config: ConfigRecord
    evaluate_config: ConfigRecord
    timeout: float | None

    def run(
        self, server_round: int, arrays: ArrayRecord, result: Result
    ) -> ArrayRecord:
        """Run round ``server_round`` from ``arrays``; return the new global model.

        The clients' aggregated metrics go into ``result`` once both
        exchanges are done (a round abandoned on a stop leaves none).
        """
        model = arrays
        with self.noise.active():
            messages = self.strategy.configure_train(
                server_round, model, self.train_config, self.grid
            )
        replies = self.grid.send_and_receive(messages, timeout=self.timeout)
        with self.noise.active():
            new_arrays, train_metrics = self.strategy.aggregate_train(
                server_round, replies
            )
        if new_arrays is not None:
            model = new_arrays
        replies = self.grid.send_and_receive(
            self.strategy.configure_evaluate(
                server_round, model, self.evaluate_config, self.grid
            ),
            timeout=self.timeout,
        )
        evaluate_metrics = self.strategy.aggregate_evaluate(server_round, replies)
        if train_metrics is not None:
            result.train_metrics_clientapp[server_round] = train_metrics
        if evaluate_metrics is not None:
            result.evaluate_metrics_clientapp[server_round] = evaluate_metrics
        return model


def run_federation(
    grid: Grid,
    config: ExperimentConfig,
    recorder: RunRecorder,
    *,
    control: RunControl | None = None,
    clients: ClientStates | None = None,
    resume: Checkpoint | None = None,
) -> Result:
    """Run the experiment's strategy on ``grid`` (the body of the ServerApp).

    The strategy sees ``grid`` through an
    :class:`~fedleak.runtime.engine.EngineGrid` (``[federation] engine``
    and ``poll_interval``), which the recorder reads the round timing from;
    torch runs on ``[federation] server_threads`` threads meanwhile. Rounds
    follow ``Strategy.start`` (Flower 1.41) step by step.

    Parameters
    ----------
    grid, config, recorder
        The ServerApp's Grid, the experiment and its recorder.
    control : RunControl, optional
        Stop requests: the loop ends after the round in progress (or abandons
        it once the grace is over) and ``recorder.status`` becomes
        ``"interrupted"``.
    clients : ClientStates, optional
        The simulated clients' states, saved in checkpoints.
    resume : Checkpoint, optional
        Go on after ``resume.round`` from this checkpoint.

    Notes
    -----
    DP noise of Flower's wrappers comes from NumPy's OS-seeded global
    generator unless ``[privacy] noise_seed`` is set (:class:`NoiseStream`);
    fedleak never seeds the global generator itself. The clients' DP-SGD
    noise comes from fresh OS entropy, or from ``noise_seed`` sent to them as
    :data:`~fedleak.defenses.NOISE_SEED_KEY`
    (:meth:`fedleak.clients.defenses.DefendedClient.noise_rng`).
    """
    strategy = build_strategy(config)
    noise = NoiseStream(config.privacy.noise_seed)
    recorder.noise = {
        "source": "noise_seed" if noise.reproducible else "os-entropy",
        "reproducible": noise.reproducible,
    }
    engine_grid = _engine_grid(grid, config, control)
    recorder.attach(engine_grid, config.federation.engine)
    rounds = _RoundExchanges(
        strategy,
        engine_grid,
        noise,
        *_round_configs(config, recorder),
        timeout=config.federation.round_timeout,
    )
    result = Result()
    arrays, first = _starting_point(config, strategy, noise, recorder, result, resume)
    checkpoints = RoundCheckpoints(
        recorder.run_dir,
        config.federation.checkpoint_every,
        config.rounds,
        strategy,
        noise,
        clients,
        first - 1,
    )
    overlap = config.evaluation.overlap
    with native_threads(config.federation.server_threads):
        try:
            if first == 1:
                recorder.evaluate_fn(0, arrays)
            for server_round in range(first, config.rounds + 1):
                if control is not None and control.requested:
                    break
                model = rounds.run(server_round, arrays, result)
                if overlap:
                    recorder.end_round(server_round, model)
                else:
                    recorder.evaluate_fn(server_round, model)
                arrays = model
                recorder.completed_round = server_round
                if checkpoints.due(server_round):
                    recorder.flush()  # a checkpoint's rows are all on disk
                checkpoints.after_round(server_round, model, result)
        except RunStopped:
            pass  # the round in progress is abandoned; its rows were not written
        finally:
            recorder.close()
    stopped = recorder.completed_round < config.rounds
    if stopped:
        checkpoints.after_stop(recorder.completed_round)
    recorder.status = "interrupted" if stopped else "completed"
    result.arrays = arrays
    return result


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
    run_dir: Path,
    config: ExperimentConfig,
    result: Result,
    recorder: RunRecorder,
    status: str | None = None,
) -> dict[str, Any]:
    """Write ``model.npz``, ``results.json`` and ``curves.png``; return the results.

    ``results.json`` covers the rounds completed (all of them unless the run
    was interrupted) and is strict JSON: a non-finite number becomes
    ``null`` and its place is listed under ``"non_finite"``
    (:func:`~fedleak.experiments.results.strict_json`). ``status``
    overrides ``recorder.status`` (``"completed"``, ``"interrupted"`` or
    ``"failed"``). An interrupted run gets no ``curves.png``: importing
    matplotlib and drawing took 0.5 s on an idle 2-core machine and 6.6 s
    under load, a third of the time from Ctrl-C to exit; the resumed run
    draws it.
    """
    rounds = []
    for r in range(1, recorder.completed_round + 1):
        row = dict(recorder.rows.get(r, {"round": r, "server": {}}))
        row["train"] = _plain(result.train_metrics_clientapp.get(r))
        row["evaluate"] = _plain(result.evaluate_metrics_clientapp.get(r))
        row.pop("timing", None)
        rounds.append(row)
    last = rounds[-1]["server"] if rounds else {}
    results: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "name": config.name,
        "status": status or recorder.status,
        "completed_rounds": recorder.completed_round,
        "resumed_from": recorder.resumed_from,
        "seed": config.seed,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "versions": {
            "fedleak": fedleak.__version__,
            "flwr": version("flwr"),
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "config": config.model_dump(mode="json"),
        "privacy": {
            "noise": recorder.noise.get("source", "os-entropy"),
            "noise_reproducible": bool(recorder.noise.get("reproducible", False)),
            "noise_seed": config.privacy.noise_seed,
        },
        "final": {"round": recorder.completed_round, **last},
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
    results, non_finite = strict_json(results)
    results["non_finite"] = non_finite
    write_json_atomic(run_dir / "results.json", results)
    if results["status"] != "interrupted":  # drawing costs seconds; resume draws it
        plot_curves(
            rounds, run_dir / "curves.png", f"{config.name} ({config.strategy.name})"
        )
    return results
