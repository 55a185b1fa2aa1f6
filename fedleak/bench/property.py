"""``fedleak bench property <experiment>``: the property-inference experiments.

Seed 000 Ch. 7.2.3-7.2.7 on Fashion-MNIST with label-independent image
properties (:mod:`fedleak.data.properties`). Every experiment runs its
experiment file (``sim_configs/property_<experiment>.toml``) as Flower
simulations with the adversary and the scripted target as clients
(:mod:`fedleak.clients.property`), then trains the batch property classifier
offline on the adversary's logged auxiliary gradients and scores its logged
observations (:func:`~fedleak.attacks.property.scoring.analyse_run`). Each
run's directory is kept under ``FILE-runs/<label>/`` so it can be re-scored
without re-training (running the same benchmark with the same ``FILE`` again
replaces them).

Experiments (thesis figure in brackets):

``two-party``
    single-batch AUC for several properties (Table 7.3), the watermark also
    under :class:`~fedleak.strategies.SecureAggregation`;
``fraction``
    AUC vs the fraction of the batch with the property (Fig. 7.4);
``rounds``
    per-round scores when the property occurs only in some rounds (Fig. 7.5),
    and of a run whose target never has it (``absent``, the seed's ID 2);
``active``
    AUC vs alpha of the active attack (Fig. 7.6);
``multi-party``
    AUC vs the number of participants under synchronized SGD (Fig. 7.7);
``model-averaging``
    property and control trials with K = 3 and 5 under model averaging, box
    plots of the per-round scores and whole-dataset AUC (Fig. 7.8);
``join``
    per-round scores when the target joins mid-training (Fig. 7.9): ``K = 2``
    before the join (the target abstains), ``K = 3`` after;
``text``
    the Yelp analogue on Debian's fortunes (Table 7.4, Figs. 7.4(b) and
    7.7(b)): embedding-gradient bags of words, logistic regression, the top
    words per property (:mod:`fedleak.attacks.property.text`, in-process).
    The K sweep holds ``lr * K`` at the two-party run's 0.6 and K = 8 also
    runs at the two-party ``lr`` (:data:`fedleak.bench.text_steps.TEXT_SUMMED_STEP`
    says why); every row gives its AUC per fifth of the rounds and the
    classifier's cross-validated AUC on the adversary's own bags.

The thesis trains for 500-3,000 iterations; ``scale`` in the JSON records
the rounds used against the thesis' (the text experiment runs its 3,000 by
default, the others their experiment file's ``rounds``).

JSON record::

    {...the common header (fedleak.bench.record)...,
     "experiment": str, "quick": bool, "seed": int,
     "config_file": str, "scale": {"rounds": int, "thesis_iterations": int,
     "factor": float},
     "runs": [{"label": str, "params": {...}, "auc": float|null,
               "dataset_score": float, "wall_s": float,
               "test_accuracy": float|null,
               "accuracy": {"rounds", "test_accuracy", "last_fifth",
                            "previous_fifth", "plateau"},
               "run_dir": str (relative to the JSON's folder), ...}],
     "summary": {...experiment-specific medians and ratios...},
     "plots": [str, ...], "wall_s": float}
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Final

import numpy as np
import typer
from rich.table import Table

from fedleak import protocol
from fedleak.attacks.property.classifier import single_batch_auc
from fedleak.attacks.property.scoring import analyse_run, phase_diagnostics
from fedleak.curves import run_curve
from fedleak.errors import ConfigError
from fedleak.experiments.config import ExperimentConfig, load_config
from fedleak.files import write_figure
from fedleak.runtime.checkpoint import CHECKPOINT_NAME
from fedleak.task import client_data

from .console import fmt, say, written
from .console import out as console
from .options import OutOption, SeedOption, VerboseOption
from .record import BenchRecord, record_path
from .text_steps import (
    TEXT_SUMMED_STEP,
    TEXT_TWO_PARTY_LEARNING_RATE,
    on_text_fraction_sweep,
    on_text_k_sweep,
    text_label,
    text_learning_rate,
)

__all__ = [
    "EXPERIMENTS",
    "NORMALIZED_EXPERIMENTS",
    "command",
    "join_participants",
    "run_property_bench",
]

#: Experiments whose classifier sees unit-norm features: under model
#: averaging the observed aggregate is a mean whose scale depends on the
#: number of participants (1/2 before a late joiner joins, 1/3 after), so
#: the classifier judges the update's direction only.
NORMALIZED_EXPERIMENTS: Final = frozenset({"model-averaging", "join"})

#: Experiments whose number of participants changes during the run (a late
#: join): one classifier per number of others the adversary observed
#: (:meth:`fedleak.attacks.property.PropertyObservations.scores_by_participants`).
BY_PARTICIPANTS_EXPERIMENTS: Final = frozenset({"join"})
_TEXT_ROUNDS: Final = 3000  # the thesis' Yelp-author iterations
ProgressFn = Callable[[str], None]

#: Iterations the thesis trains for in each experiment (for ``scale``).
_THESIS_ITERATIONS: Final[dict[str, int]] = {
    "two-party": 3000,
    "fraction": 3000,
    "rounds": 2500,
    "active": 3000,
    "multi-party": 3000,
    "model-averaging": 500,
    "join": 500,
    "text": 3000,
}


# ---------------------------------------------------------------- runs


@dataclass(frozen=True)
class _Settings:
    out: Path
    quick: bool
    seed: int
    rounds: int | None
    trials: int | None
    secagg: bool | None
    verbose: bool
    say: ProgressFn
    properties: tuple[str, ...] = ()
    extend: bool = False
    overrides: tuple[str, ...] = ()
    participants: tuple[int, ...] = ()


def _config_path(experiment: str) -> Path:
    name = f"property_{experiment.replace('-', '_')}.toml"
    local = Path("sim_configs") / name
    if local.is_file():
        return local
    bundled = resources.files("fedleak.sim_configs") / name
    if bundled.is_file():
        return Path(str(bundled))
    raise ConfigError(f"experiment file {name} not found (nor bundled with fedleak)")


def _run(
    s: _Settings,
    experiment: str,
    label: str,
    overrides: Sequence[str],
    params: dict[str, Any],
    *,
    secagg: bool = False,
) -> dict[str, Any]:
    """Run one simulation and analyse it; return the JSON row."""
    from fedleak.experiments.runner import run_experiment

    extra = [f"seed={s.seed}"]
    if s.rounds is not None:
        extra.append(f"rounds={s.rounds}")
    path = _config_path(experiment)
    config = load_config(path, [*s.overrides, *extra, *overrides])
    if secagg:  # refused at load for fewer than 3 clients (a 2-member sum)
        config = load_config(
            path,
            [*s.overrides, *extra, *overrides, "secure_aggregation.enabled=true"],
        )
    run_dir = s.out.with_name(s.out.stem + "-runs") / label
    shorter = _shorter_run(run_dir, config) if s.extend else None
    started = time.perf_counter()
    if shorter is not None:
        growth = (
            f"extended from {shorter} to {config.rounds} rounds"
            if shorter < config.rounds
            else f"{config.rounds} rounds, read if completed"
        )
        s.say(f"{experiment}: {label} ({growth}, K={_k(config)})")
        results, ran = _extend(run_dir, config, shorter, s.verbose)
    else:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        s.say(f"{experiment}: {label} ({config.rounds} rounds, K={_k(config)})")
        results = run_experiment(config, out=run_dir, verbose=s.verbose).results
        ran = True
    # a run only read keeps the simulation time of its last session
    wall = time.perf_counter() - started if ran else results["timing"]["total_s"]
    analysis = analyse_run(
        run_dir,
        seed=s.seed,
        normalize=experiment in NORMALIZED_EXPERIMENTS,
        by_participants=experiment in BY_PARTICIPANTS_EXPERIMENTS,
    )
    final = results.get("final", {})
    row = {
        "label": label,
        "params": {**params, "secure_aggregation": secagg},
        "rounds": config.rounds,
        "num_clients": _k(config),
        "auc": analysis["auc"],
        "dataset_score": analysis["dataset_score"],
        "aux_gradients": analysis["aux_gradients"],
        "features": analysis["features"],
        "wall_s": wall,
        "median_round_s": results["timing"]["median_round_after_first_s"],
        "test_accuracy": final.get("test-accuracy"),
        "accuracy": run_curve(results),
        "extended_from": results.get("extended_from"),
        "run_dir": str(run_dir.relative_to(s.out.parent)),  # next to the JSON
        "series": {"rounds": analysis["rounds"], "scores": analysis["scores"]},
        "truth": analysis["truth"],
    }
    auc = "n/a" if row["auc"] is None else f"{row['auc']:.3f}"
    s.say(f"  AUC {auc}, mean score {row['dataset_score']:.3f}, {wall:.0f} s")
    return row


def _shorter_run(run_dir: Path, config: ExperimentConfig) -> int | None:
    """Return the rounds of ``run_dir``'s run if ``config`` only adds rounds to it.

    None where there is no run there, or its experiment differs from
    ``config`` in anything but the number of rounds, or it has more rounds.
    """
    saved = run_dir / "config.toml"
    if not saved.is_file() or not (run_dir / CHECKPOINT_NAME).is_file():
        return None
    try:
        previous = load_config(saved)
    except ConfigError:
        return None
    if previous.rounds > config.rounds:
        return None
    if previous.model_copy(update={"rounds": config.rounds}) != config:
        return None
    return previous.rounds


def _extend(
    run_dir: Path, config: ExperimentConfig, shorter: int, verbose: bool
) -> tuple[dict[str, Any], bool]:
    """Extend the run in ``run_dir`` to ``config.rounds``; return its results.

    The run goes on from its last checkpoint (``fedleak run --resume RUN
    --rounds N``), which gives the numbers of a run started with
    ``config.rounds`` (tested); its row's ``wall_s`` is the extension's
    time. A run already at ``config.rounds`` and completed is only read
    (the returned flag, *ran*, is then False; its row's ``wall_s`` is its last
    session's simulation time); its ``extended_from`` is then the round its
    last session went on from (``resumed_from``; None for a run never
    resumed). An extension stopped
    part-way leaves ``config.rounds`` in the run's ``config.toml`` beside the
    shorter run's completed ``results.json``: that run goes on from its last
    checkpoint.
    """
    from fedleak.experiments.runner import resume_experiment

    results_path = run_dir / "results.json"
    if shorter == config.rounds and results_path.is_file():
        results: dict[str, Any] = json.loads(results_path.read_text("utf-8"))
        done = results.get("completed_rounds")
        if results.get("status") == "completed" and done == config.rounds:
            return {**results, "extended_from": results.get("resumed_from")}, False
    results = resume_experiment(run_dir, rounds=config.rounds, verbose=verbose).results
    return {**results, "extended_from": shorter}, True


def _k(config: ExperimentConfig) -> int:
    return config.federation.num_clients


# ---------------------------------------------------------------- plots


def _plot_path(s: _Settings, name: str) -> Path:
    return s.out.with_name(f"{s.out.stem}-{name}.png")


def _plot_lines(
    s: _Settings,
    name: str,
    title: str,
    xlabel: str,
    curves: dict[str, tuple[list[float], list[float | None]]],
) -> str:
    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for label, (xs, ys) in curves.items():
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set(xlabel=xlabel, ylabel="single-batch AUC", title=title, ylim=(0.4, 1.02))
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        ax.grid(alpha=0.3)
        ax.legend()

    return write_figure(_plot_path(s, name), draw, (5.5, 3.8))


def _plot_series(
    s: _Settings, name: str, title: str, rows: list[dict[str, Any]], marks: list[int]
) -> str:
    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for row in rows:
            xs, ys = row["series"]["rounds"], row["series"]["scores"]
            ax.plot(xs, ys, lw=1.0, label=row["label"])
            truth = row["truth"]
            if truth:
                on = [x for x, f in zip(xs, truth, strict=True) if f]
                ax.scatter(on, [1.03] * len(on), s=4, color="tab:red")
        for mark in marks:
            ax.axvline(mark, color="grey", ls="--", lw=0.8)
        ax.set(xlabel="round", ylabel="P(property)", title=title, ylim=(-0.02, 1.07))
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right")

    return write_figure(_plot_path(s, name), draw, (7.0, 3.8))


# ------------------------------------------------------------ experiments


def _two_party(s: _Settings) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    properties = list(s.properties) or (
        ["watermark"] if s.quick else ["watermark", "inverted", "blurred"]
    )
    rows = []
    for kind in properties:
        rows.append(
            _run(
                s,
                "two-party",
                kind,
                [f"data.property_kind={kind!r}"],
                {"property": kind},
            )
        )
    # the secure-aggregation run repeats the first property (the watermark
    # by default), so the two AUCs compare like with like
    first = properties[0]
    if s.secagg:
        rows.append(
            _run(
                s,
                "two-party",
                f"{first}-secagg",
                [f"data.property_kind={first!r}"],
                {"property": first},
                secagg=True,
            )
        )
    plain = next(r for r in rows if r["label"] == first)
    summary: dict[str, Any] = {"auc": {r["label"]: r["auc"] for r in rows}}
    if first == "watermark":
        summary["watermark_auc"] = plain["auc"]
    secure = [r for r in rows if r["params"]["secure_aggregation"]]
    if secure:
        summary["secagg_property"] = first
        summary["secagg_auc"] = secure[0]["auc"]
        if first == "watermark":
            summary["watermark_secagg_auc"] = secure[0]["auc"]
        summary["secagg_auc_difference"] = abs(secure[0]["auc"] - plain["auc"])
        summary["secagg_vs_plain_wall"] = secure[0]["wall_s"] / plain["wall_s"]

    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        labels = [r["label"] for r in rows]
        bars = ax.bar(labels, [r["auc"] or 0.0 for r in rows], color="tab:blue")
        ax.bar_label(bars, fmt="%.3f")
        ax.axhline(0.9, color="tab:red", ls="--", lw=0.8)
        ax.set(ylabel="single-batch AUC", title="two-party sync-SGD", ylim=(0, 1.02))

    return rows, summary, [write_figure(_plot_path(s, "auc"), draw, (5.5, 3.8))]


def _sweep(
    s: _Settings,
    experiment: str,
    key: str,
    values: Sequence[float],
    param: str,
    extra: Callable[[float], list[str]] | None = None,
) -> list[dict[str, Any]]:
    rows = []
    for value in values:
        overrides = [f"{key}={value}", *(extra(value) if extra else [])]
        rows.append(_run(s, experiment, f"{param}-{value}", overrides, {param: value}))
        if s.secagg:
            rows.append(
                _run(
                    s,
                    experiment,
                    f"{param}-{value}-secagg",
                    overrides,
                    {param: value},
                    secagg=True,
                )
            )
    return rows


def _curves(
    rows: list[dict[str, Any]], param: str
) -> dict[str, tuple[list[float], list[float | None]]]:
    curves: dict[str, tuple[list[float], list[float | None]]] = {}
    for row in rows:
        name = "secure aggregation" if row["params"]["secure_aggregation"] else "plain"
        xs, ys = curves.setdefault(name, ([], []))
        xs.append(float(row["params"][param]))
        ys.append(row["auc"])
    return curves


def _fraction(s: _Settings) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    values = [0.3, 0.9] if s.quick else [0.1, 0.3, 0.5, 0.7, 0.9]
    rows = _sweep(s, "fraction", "target.batch_fraction", values, "fraction")
    plot = _plot_lines(
        s,
        "fraction",
        "AUC vs fraction of the batch with the property",
        "fraction of the batch",
        _curves(rows, "fraction"),
    )
    return rows, {"auc": {r["label"]: r["auc"] for r in rows}}, [plot]


def _window_overrides(s: _Settings) -> list[str]:
    """Return the overrides that scale Fig. 7.5's property window to ``--rounds``.

    The experiment file holds the thesis' window (iterations 500-1,500 of
    2,500); a run of other length keeps it at the same fractions of the run.
    """
    if s.quick:
        return ["target.property_rounds=[10, 25]"]
    if s.rounds is None:
        return []
    config = load_config(_config_path("rounds"))
    start, stop = (b * s.rounds // config.rounds for b in config.target.property_rounds)
    if start < 1 or stop <= start:
        raise ConfigError(
            f"--rounds {s.rounds} is too few for the property window "
            f"{list(config.target.property_rounds)} of {config.rounds} rounds"
        )
    return [f"target.property_rounds=[{start}, {stop}]"]


def _rounds(s: _Settings) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    overrides = _window_overrides(s)
    rows = [_run(s, "rounds", "window", overrides, {})]
    if s.secagg:
        rows.append(_run(s, "rounds", "window-secagg", overrides, {}, secagg=True))
    # the seed's third classifier (Fig. 7.5(b), ID 2): a property the target
    # never has; the same classifier scores a run whose target never uses a
    # record with it, and should score low in every round
    absent = _run(s, "rounds", "absent", [*overrides, "target.control=true"], {})
    config = load_config(_config_path("rounds"), overrides)
    window = list(config.target.property_rounds)
    summary: dict[str, Any] = {
        "property_rounds": window,
        "absent": {
            "median_score": statistics.median(absent["series"]["scores"]),
            "max_score": max(absent["series"]["scores"]),
        },
    }
    for row in rows:
        xs, ys = row["series"]["rounds"], row["series"]["scores"]
        inside = [y for x, y in zip(xs, ys, strict=True) if window[0] <= x < window[1]]
        outside = [
            y for x, y in zip(xs, ys, strict=True) if not window[0] <= x < window[1]
        ]
        summary[row["label"]] = {
            "auc": row["auc"],
            "median_score_inside": statistics.median(inside) if inside else None,
            "median_score_outside": statistics.median(outside) if outside else None,
        }
    rows.append(absent)
    plot = _plot_series(
        s, "rounds", "score per round (property in window)", rows, window
    )
    return rows, summary, [plot]


def _active(s: _Settings) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    values = [0.0, 0.7] if s.quick else [0.0, 0.3, 0.6, 0.9]
    rows = _sweep(s, "active", "adversary.property.alpha", values, "alpha")
    base = rows[0]["auc"]
    summary = {
        "auc": {r["label"]: r["auc"] for r in rows},
        "auc_gain_vs_passive": {
            r["label"]: (None if r["auc"] is None or base is None else r["auc"] - base)
            for r in rows
        },
    }
    plot = _plot_lines(
        s, "alpha", "active attack: AUC vs alpha", "alpha", _curves(rows, "alpha")
    )
    return rows, summary, [plot]


def _multi_party(
    s: _Settings,
) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    values = [2, 4] if s.quick else [2, 3, 5, 8]
    rows = _sweep(
        s,
        "multi-party",
        "federation.num_clients",
        values,
        "participants",
    )
    plot = _plot_lines(
        s,
        "participants",
        "multi-party sync-SGD: AUC vs participants",
        "participants K",
        _curves(rows, "participants"),
    )
    return rows, {"auc": {r["label"]: r["auc"] for r in rows}}, [plot]


THESIS_TRIALS = 8
"""Property and control trials per arm of Fig. 7.8 (seed 000 Ch. 7.2.7)."""


WINDOWS: Final = 5
"""Windows of rounds over which Fig. 7.8's trials are compared once more."""


def _model_averaging(
    s: _Settings,
) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    """Property and control trials of K = 3 and 5 under model averaging (Fig. 7.8).

    Besides each K's whole-dataset AUC over all rounds, the summary gives it
    per window of rounds (``auc_by_window``, :func:`window_aucs`: an overlap
    present from the first window is not a late-training effect), with the
    classifier fitted on the emulations of the first fifth, two fifths, ...
    of the rounds only (``auc_by_fit_rounds``: whether later emulations
    mislead it), and the
    ``diagnostics`` of every run
    (:func:`~fedleak.attacks.property.scoring.phase_diagnostics`): how well
    the adversary's classifier separates its own emulated aggregates, where
    it scores the observed ones, and how the emulations' norms compare.
    """
    ks = list(s.participants) or ([3] if s.quick else [3, 5])
    trials = s.trials or (1 if s.quick else THESIS_TRIALS)
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"trials": trials}
    for k in ks:
        for kind, fraction in (("property", 0.8), ("control", 0.0)):
            for trial in range(trials):
                trial_seed = s.seed + 1000 * trial
                overrides = [
                    f"federation.num_clients={k}",
                    f"data.property_target_fraction={fraction}",
                    f"seed={trial_seed}",
                ]
                rows.append(
                    _run(
                        s,
                        "model-averaging",
                        f"K{k}-{kind}-{trial}",
                        overrides,
                        {"participants": k, "trial": kind, "index": trial},
                        secagg=bool(s.secagg),
                    )
                )
        mine = [r for r in rows if r["params"]["participants"] == k]
        labels = np.asarray([r["params"]["trial"] == "property" for r in mine])
        means = np.asarray([r["dataset_score"] for r in mine])
        summary[f"K{k}"] = {
            "mean_score_property": float(means[labels].mean()),
            "mean_score_control": float(means[~labels].mean()),
            "whole_dataset_auc": single_batch_auc(labels.astype(int), means),
            "auc_by_window": window_aucs(mine, labels, WINDOWS),
            "auc_by_fit_rounds": _fit_round_aucs(s, mine, labels),
        }
    summary["diagnostics"] = {
        row["label"]: phase_diagnostics(
            s.out.parent / row["run_dir"],
            seed=s.seed,
            normalize="model-averaging" in NORMALIZED_EXPERIMENTS,
        )
        for row in rows
    }

    def draw(fig: Any) -> None:
        for i, k in enumerate(ks):
            ax = fig.add_subplot(1, len(ks), i + 1)
            mine = [r for r in rows if r["params"]["participants"] == k]
            ax.boxplot(
                [r["series"]["scores"] for r in mine],
                tick_labels=[
                    ("P" if r["params"]["trial"] == "property" else "C")
                    + str(r["params"]["index"])
                    for r in mine
                ],
            )
            ax.set(title=f"model averaging, K = {k}", ylabel="P(property)", ylim=(0, 1))
            ax.grid(alpha=0.3)

    plot = write_figure(_plot_path(s, "boxplots"), draw, (5.0 * len(ks), 3.8))
    return rows, summary, [plot]


def window_aucs(
    rows: Sequence[dict[str, Any]], labels: np.ndarray, windows: int
) -> list[dict[str, Any]]:
    """Whole-dataset AUC of the trials over each window of rounds (Fig. 7.8).

    The scored rounds of all ``rows`` (their ``series``) are split into
    ``windows`` runs of consecutive rounds, as equal in count as they can be;
    in each, a trial's score is the mean of its scores there and the AUC
    separates the trials whose ``labels`` are true (property) from the rest.

    Returns
    -------
    list of dict
        ``first_round``, ``last_round`` and ``whole_dataset_auc`` per window
        (None for a window where a trial has no score).
    """
    rounds = np.unique(np.concatenate([r["series"]["rounds"] for r in rows]))
    found: list[dict[str, Any]] = []
    for part in np.array_split(rounds, windows):
        if part.size == 0:
            continue
        means: list[float] = []
        for row in rows:
            at = np.asarray(row["series"]["rounds"])
            inside = (at >= part[0]) & (at <= part[-1])
            if not inside.any():
                break
            means.append(float(np.mean(np.asarray(row["series"]["scores"])[inside])))
        auc = (
            single_batch_auc(labels.astype(int), np.asarray(means))
            if len(means) == len(rows)
            else None
        )
        found.append(
            {
                "first_round": int(part[0]),
                "last_round": int(part[-1]),
                "whole_dataset_auc": auc,
            }
        )
    return found


def _fit_round_aucs(
    s: _Settings, rows: Sequence[dict[str, Any]], labels: np.ndarray
) -> list[dict[str, Any]]:
    """Trial AUC with ``f_prop`` fitted on the first ``i / WINDOWS`` of the rounds.

    Each run is scored again (every round) by a classifier fitted on the
    auxiliary gradients of rounds ``<= round(i * rounds / WINDOWS)`` only
    (:func:`~fedleak.attacks.property.scoring.analyse_run`'s ``fit_until``),
    its mean score is its trial score, and the AUC separates the property
    trials from the controls. The last entry fits on every round.
    """
    rounds = int(rows[0]["rounds"])
    found: list[dict[str, Any]] = []
    for i in range(1, WINDOWS + 1):
        last = round(i * rounds / WINDOWS)
        means = [
            analyse_run(
                s.out.parent / row["run_dir"],
                seed=s.seed,
                normalize="model-averaging" in NORMALIZED_EXPERIMENTS,
                fit_until=last,
            )["dataset_score"]
            for row in rows
        ]
        found.append(
            {
                "fit_last_round": last,
                "whole_dataset_auc": single_batch_auc(
                    labels.astype(int), np.asarray(means)
                ),
            }
        )
    return found


def _run_results(s: _Settings, row: dict[str, Any]) -> dict[str, Any]:
    """Read the ``results.json`` of a row's run (next to the bench's JSON)."""
    results: dict[str, Any] = json.loads(
        (s.out.parent / row["run_dir"] / "results.json").read_text(encoding="utf-8")
    )
    return results


def _aggregated_weights(results: dict[str, Any]) -> dict[int, float]:
    """Return ``n`` of every round's model average (``aggregated-examples``)."""
    weights: dict[int, float] = {}
    for entry in results.get("rounds", []):
        value = entry.get("train", {}).get(protocol.AGGREGATED_EXAMPLES)
        if isinstance(value, int | float):
            weights[int(entry["round"])] = float(value)
    return weights


def join_participants(
    weights: dict[int, float], sizes: Sequence[int], target: int, join: int
) -> dict[str, Any]:
    """Say how many clients the server averaged before and after the join.

    A round counts ``K - 1`` participants when its average's weight ``n``
    (``aggregated-examples``) is the records of every client but the target,
    and ``K`` when it is every client's records (the weight of one abstaining
    or absent client is 0). The join model is ``"K=<before>-><after>"``,
    e.g. ``"K=2->3"`` for three clients (seed 000 Fig. 7.9; ``"K=3->3"``
    when the target's records were averaged before it joined), or None
    when a phase is mixed, empty or matches neither.

    Parameters
    ----------
    weights : dict of int to float
        Round -> ``n`` of its average.
    sizes : sequence of int
        Every client's record count ``n_k``, by partition id.
    target : int
        The late joiner's partition id.
    join : int
        Its first round.

    Returns
    -------
    dict
        ``participants_before``, ``participants_after`` (int or None) and
        ``join_model`` (str or None).
    """
    everyone = float(sum(sizes))
    counts = {everyone - sizes[target]: len(sizes) - 1, everyone: len(sizes)}

    def phase(rounds: list[int]) -> int | None:
        found = {counts.get(weights[r]) for r in rounds}
        return found.pop() if len(found) == 1 else None

    before = phase([r for r in weights if r < join])
    after = phase([r for r in weights if r >= join])
    model = None if before is None or after is None else f"K={before}->{after}"
    return {
        "participants_before": before,
        "participants_after": after,
        "join_model": model,
    }


def _join(s: _Settings) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    """Run the late-joiner experiment (seed 000 Ch. 7.2.7, Fig. 7.9).

    Before ``target.join_round`` the target abstains (weight 0), so the
    server averages the adversary and the honest client (``K = 2``); from
    the join on all three (``K = 3``). The summary checks this on the run's
    own records (:func:`join_participants`) and reports the median
    per-round score before and after the join.

    How the comparison is kept fair: the adversary's view before the join
    is the honest client's update alone and after it the sum of two, at
    scale ``1/2`` then ``1/3``. (1) The adversary reads its own share
    ``n_adv / n`` from the ``n`` the server announces, so the view holds no
    part of its own update in either phase. (2) Its labelled aggregates
    emulate as many others as it observed in that round (one before, two
    after), with one positive and one negative per round, so each phase's
    observations have training examples of their own kind and the phase
    cannot stand in for the label. (3) Features are scaled to unit norm
    (:data:`NORMALIZED_EXPERIMENTS`), so the 1/2 vs 1/3 scale is invisible.
    (4) One classifier per number of others observed
    (:data:`BY_PARTICIPANTS_EXPERIMENTS`): the aggregate of two others is a
    mixture the aggregate of one is not, and the adversary knows the count
    each round. Since the two phases are then scored by different
    classifiers, (5) a control run whose target joins with as many records,
    none with the property (``data.property_target_fraction = 0``; the
    other partitions then hold other records of the same pools), is scored
    the same way: its scores after the join show what the join and the
    change of classifier alone do.

    The summary's ``diagnostics`` compare, per phase and run, the labelled
    aggregates the adversary emulated with those it observed
    (:func:`~fedleak.attacks.property.scoring.phase_diagnostics`), and
    ``train_loss_before_join`` is the clients' train loss in the last round
    before the join: the clients' records, trained on every round, end up
    memorised and their updates shrink; the adversary's emulations without
    the property train on its own records (memorised as well), those with
    it on watermarked renderings the model never trained on, so the two
    labels come to differ in size (``label_norm_ratio``) and the real
    updates resemble neither.
    """
    overrides = ["target.join_round=5"] if s.quick else []
    rows = [_run(s, "join", "join", overrides, {}, secagg=bool(s.secagg))]
    # the control target joins with as many records, none with the property
    # (``target.control`` would keep only its few records without it, and
    # the adversary, reading the count from the announced n, would see one
    # other participant instead of two)
    control = _run(
        s, "join", "control", [*overrides, "data.property_target_fraction=0.0"], {}
    )
    config = load_config(_config_path("join"), overrides)
    join = config.target.join_round
    spec = config.task()
    sizes = [client_data(spec, p).num_train for p in range(_k(config))]
    results = _run_results(s, rows[0])
    summary = {
        "join_round": join,
        **_phase_medians(rows[0], join, ""),
        **_phase_medians(control, join, "control_"),
        **join_participants(
            _aggregated_weights(results), sizes, spec.property_target, join
        ),
        "train_loss_before_join": _train_loss(results, join - 1),
        "diagnostics": {
            row["label"]: phase_diagnostics(
                s.out.parent / row["run_dir"],
                seed=s.seed,
                normalize="join" in NORMALIZED_EXPERIMENTS,
            )
            for row in (rows[0], control)
        },
    }
    rows.append(control)
    plot = _plot_series(s, "join", "score per round (target joins)", rows, [join])
    return rows, summary, [plot]


def _train_loss(results: dict[str, Any], round_: int) -> float | None:
    """Return the clients' mean train loss of round ``round_`` (None if absent)."""
    for entry in results.get("rounds", []):
        if int(entry["round"]) == round_:
            value = entry.get("train", {}).get("train-loss")
            return float(value) if isinstance(value, int | float) else None
    return None


def _phase_medians(row: dict[str, Any], join: int, prefix: str) -> dict[str, Any]:
    """Median per-round score before and after the join round of one run."""
    xs, ys = row["series"]["rounds"], row["series"]["scores"]
    before = [y for x, y in zip(xs, ys, strict=True) if x < join]
    after = [y for x, y in zip(xs, ys, strict=True) if x >= join]
    return {
        f"{prefix}median_score_before": statistics.median(before) if before else None,
        f"{prefix}median_score_after": statistics.median(after) if after else None,
    }


def _text_params(
    category: str, participants: int, fraction: float, learning_rate: float
) -> tuple[str, dict[str, Any]]:
    return (
        category,
        {
            "property": category,
            "participants": participants,
            "batch_fraction": fraction,
            "learning_rate": learning_rate,
        },
    )


def _text_plan(s: _Settings) -> list[tuple[str, dict[str, Any]]]:
    """Return the text runs, (category, params): Table 7.4, Figs. 7.4(b), 7.7(b).

    Two-party runs of every category, the fraction sweep and the K sweep of
    startrek (``lr = TEXT_SUMMED_STEP / K``), and K = 8 at the two-party
    ``lr`` (:data:`TEXT_SUMMED_STEP` says why).
    """
    two_party = TEXT_TWO_PARTY_LEARNING_RATE
    categories = ["startrek"] if s.quick else ["startrek", "linux", "food", "love"]
    plan = [_text_params(c, 2, 1.0, two_party) for c in categories]
    if not s.quick:
        plan += [_text_params("startrek", 2, f, two_party) for f in (0.1, 0.3, 0.5)]
        plan += [
            _text_params("startrek", k, 1.0, text_learning_rate(k)) for k in (4, 8)
        ]
        plan.append(_text_params("startrek", 8, 1.0, two_party))
    return plan


def _text_row(
    s: _Settings, task: Any, category: str, params: dict[str, Any], rounds: int
) -> dict[str, Any]:
    """Run the in-process text attack of one plan entry; return its JSON row."""
    from fedleak.attacks.property.text import run_text_property_attack

    label = text_label(params)
    s.say(f"text: {label} ({rounds} rounds)")
    started = time.perf_counter()
    result = run_text_property_attack(
        task,
        category,
        rounds=rounds,
        participants=params["participants"],
        batch_fraction=params["batch_fraction"],
        learning_rate=params["learning_rate"],
        seed=s.seed,
        cross_validate=True,
    )
    wall = time.perf_counter() - started
    s.say(f"  AUC {result.auc:.3f}, top words {', '.join(result.top_words)}")
    return {
        "label": label,
        "params": {**params, "secure_aggregation": False},
        "rounds": rounds,
        "num_clients": params["participants"],
        "auc": result.auc,
        "dataset_score": float(np.mean(result.scores)),
        "top_words": list(result.top_words),
        "correlation": result.correlation,
        "wall_s": wall,
        "median_round_s": wall / rounds,
        "test_accuracy": result.test_accuracy,
        "accuracy": result.accuracy_curve,
        "auxiliary_cv_auc": result.auxiliary_cv_auc,
        "auc_by_fifth": auc_by_fifth(result.truth, result.scores),
        "series": {
            "rounds": list(range(1, rounds + 1)),
            "scores": [float(x) for x in result.scores],
        },
        "truth": [int(t) for t in result.truth],
    }


def auc_by_fifth(truth: np.ndarray, scores: np.ndarray) -> list[float | None]:
    """Return the single-batch AUC over each fifth of the rounds, in order.

    None for a fifth that lacks one of the two kinds of batch.
    """
    out: list[float | None] = []
    for part in np.array_split(np.arange(len(truth)), 5):
        labels = np.asarray(truth)[part]
        if np.unique(labels).size < 2:
            out.append(None)
        else:
            out.append(single_batch_auc(labels, np.asarray(scores)[part]))
    return out


def _two_party_full_batch(row: dict[str, Any]) -> bool:
    params = row["params"]
    return bool(params["participants"] == 2 and params["batch_fraction"] == 1.0)


def _plot_text_words(
    s: _Settings, rows: list[dict[str, Any]], table: dict[str, list[str]]
) -> str:
    def draw(fig: Any) -> None:
        ax = fig.add_subplot(1, 1, 1)
        ax.axis("off")
        auc_of = {
            r["params"]["property"]: r["auc"] for r in rows if _two_party_full_batch(r)
        }
        cells = [[c, f"{auc_of[c]:.3f}", ", ".join(w)] for c, w in table.items()]
        grid = ax.table(
            cellText=cells,
            colLabels=["property (category)", "AUC", "top words"],
            loc="center",
            cellLoc="left",
        )
        grid.auto_set_column_width([0, 1, 2])
        ax.set_title("fortunes: words with the largest coefficients")

    return write_figure(
        _plot_path(s, "text-words"), draw, (8.0, 0.6 + 0.4 * len(table))
    )


def _plot_text_sweeps(s: _Settings, rows: list[dict[str, Any]]) -> list[str]:
    """AUC vs fraction and vs participants of the startrek runs (Figs. 7.4b, 7.7b)."""
    startrek = [r for r in rows if r["params"]["property"] == "startrek"]
    fractions = [r for r in startrek if on_text_fraction_sweep(r["params"])]
    held = [r for r in startrek if on_text_k_sweep(r["params"])]
    literal = [
        r
        for r in startrek
        if r["params"]["batch_fraction"] == 1.0
        and r["params"]["learning_rate"] == TEXT_TWO_PARTY_LEARNING_RATE
    ]
    return [
        _plot_lines(
            s,
            "text-fraction",
            "fortunes (startrek): AUC vs fraction",
            "fraction of the batch",
            {
                "plain": (
                    [r["params"]["batch_fraction"] for r in fractions],
                    [r["auc"] for r in fractions],
                )
            },
        ),
        _plot_lines(
            s,
            "text-participants",
            "fortunes (startrek): AUC vs participants",
            "participants K",
            {
                f"lr = {TEXT_SUMMED_STEP:g} / K": (
                    [r["params"]["participants"] for r in held],
                    [r["auc"] for r in held],
                ),
                f"lr = {TEXT_TWO_PARTY_LEARNING_RATE:g}": (
                    [r["params"]["participants"] for r in literal],
                    [r["auc"] for r in literal],
                ),
            },
        ),
    ]


def _text(s: _Settings) -> tuple[list[dict[str, Any]], dict[str, Any], list[str]]:
    from fedleak.attacks.property.text import fortunes_property_task

    task = fortunes_property_task(seed=s.seed)
    rounds = s.rounds or _TEXT_ROUNDS
    rows = [
        _text_row(s, task, category, params, rounds)
        for category, params in _text_plan(s)
    ]
    table = {
        r["params"]["property"]: r["top_words"]
        for r in rows
        if _two_party_full_batch(r)
    }
    summary = {"auc": {r["label"]: r["auc"] for r in rows}, "top_words": table}
    plots = [_plot_text_words(s, rows, table)]
    if not s.quick:
        plots += _plot_text_sweeps(s, rows)
    return rows, summary, plots


Experiment = Callable[
    [_Settings], tuple[list[dict[str, Any]], dict[str, Any], list[str]]
]

EXPERIMENTS: Final[dict[str, Experiment]] = {
    "two-party": _two_party,
    "fraction": _fraction,
    "rounds": _rounds,
    "active": _active,
    "multi-party": _multi_party,
    "model-averaging": _model_averaging,
    "join": _join,
    "text": _text,
}

#: Rounds of the ``--quick`` (CI-sized) setting per experiment.
QUICK_ROUNDS: Final[dict[str, int]] = {
    "two-party": 40,
    "fraction": 30,
    "rounds": 35,
    "active": 30,
    "multi-party": 30,
    "model-averaging": 4,
    "join": 8,
    "text": 30,
}


def _scale(
    experiment: str, rounds: int | None, config_file: Path | None
) -> dict[str, Any]:
    """Give the rounds run against the thesis' iterations (the record's field)."""
    used = rounds or (
        _TEXT_ROUNDS if config_file is None else load_config(config_file).rounds
    )
    thesis = _THESIS_ITERATIONS[experiment]
    return {"rounds": used, "thesis_iterations": thesis, "factor": used / thesis}


def _classifier_facts(experiment: str) -> dict[str, Any]:
    """Describe the adversary's classifier of the experiment (the record's field)."""
    return {
        "kind": "random-forest",
        "n_estimators": 50,
        "normalize": experiment in NORMALIZED_EXPERIMENTS,
        "by_participants": experiment in BY_PARTICIPANTS_EXPERIMENTS,
    }


def _checked_experiment(
    experiment: str, overrides: Sequence[str], participants: Sequence[int] = ()
) -> Path | None:
    """Check the experiment's name, the overrides and the K values before any run.

    Returns the experiment file (None for ``text``, which has none).
    """
    if experiment not in EXPERIMENTS:
        raise ConfigError(
            f"unknown property experiment {experiment!r}; choose one of "
            f"{list(EXPERIMENTS)}"
        )
    config_file = None if experiment == "text" else _config_path(experiment)
    if overrides and config_file is None:
        raise ConfigError(
            "--set overrides an experiment file's keys; the text experiment has none"
        )
    if config_file is not None:
        load_config(config_file, list(overrides))  # a bad key fails here
    if participants and (experiment != "model-averaging" or min(participants) < 2):
        raise ConfigError(
            "--participants chooses model-averaging's numbers of clients K >= 2; "
            f"got {list(participants)} for {experiment}"
        )
    return config_file


def run_property_bench(
    experiment: str,
    out: str | Path,
    *,
    quick: bool = False,
    seed: int = 0,
    rounds: int | None = None,
    trials: int | None = None,
    secagg: bool | None = None,
    properties: Sequence[str] = (),
    extend: bool = False,
    overrides: Sequence[str] = (),
    participants: Sequence[int] = (),
    verbose: bool = False,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Run one property-inference experiment and write its JSON and plots.

    Parameters
    ----------
    experiment : str
        A key of :data:`EXPERIMENTS`.
    out : path
        The JSON file; plots go next to it (``FILE-<plot>.png``) and run
        directories under ``FILE-runs/``.
    quick : bool, default=False
        CI-sized: fewer rounds (:data:`QUICK_ROUNDS`) and sweep points.
    seed : int, default=0
        Run seed (trials derive theirs from it).
    rounds : int, optional
        Override the rounds of every run.
    trials : int, optional
        Trials per arm of ``model-averaging`` (the thesis: 8).
    secagg : bool, optional
        Also run with secure aggregation (``True``); it needs at least 3
        clients, so the 2-client experiments refuse it at config load.
    properties : sequence of str, optional
        ``two-party``: the properties to run (default watermark, inverted and
        blurred; the watermark alone with ``quick``).
    extend : bool, default=False
        Go on with a shorter run of the same experiment under ``FILE-runs/``
        (:func:`_extend`) instead of starting over.
    overrides : sequence of str, optional
        ``key=value`` overrides of every run's experiment file (as ``fedleak
        run --set``), e.g. ``adversary.property.aux_records=held-out``; the
        keys the bench sets per run (clients, fractions, seeds, schedules)
        keep the bench's values. Checked before any run; ``text`` has no
        experiment file and refuses them.
    participants : sequence of int, optional
        ``model-averaging``: the numbers of clients K to run (default 3 and
        5, the thesis'; 3 alone with ``quick``), each at least 2.
    verbose : bool, default=False
        Show Flower's and Ray's logs.
    progress : callable, optional
        Receives one line per step.

    Returns
    -------
    dict
        The report written to ``out``.
    """
    config_file = _checked_experiment(experiment, overrides, participants)
    out = record_path(out, make_folder=True)
    if quick and rounds is None:
        rounds = QUICK_ROUNDS[experiment]
    settings = _Settings(
        out=out,
        quick=quick,
        seed=seed,
        rounds=rounds,
        trials=trials,
        secagg=secagg,
        verbose=verbose,
        say=progress or (lambda _: None),
        properties=tuple(properties),
        extend=extend,
        overrides=tuple(overrides),
        participants=tuple(participants),
    )
    started = time.perf_counter()
    rows, summary, plots = EXPERIMENTS[experiment](settings)
    return BenchRecord("property", out).finish(
        started,
        {
            "experiment": experiment,
            "quick": quick,
            "seed": seed,
            "config_file": None if config_file is None else str(config_file),
            "overrides": list(overrides),
            "scale": _scale(experiment, rounds, config_file),
            "classifier": _classifier_facts(experiment),
            "runs": rows,
            "summary": summary,
            "median_wall_s_per_run": statistics.median(r["wall_s"] for r in rows),
            "plots": [Path(p).name for p in plots],  # next to the JSON
        },
    )


def command(
    experiment: Annotated[
        str,
        typer.Argument(help="Experiment: " + ", ".join(EXPERIMENTS) + "."),
    ],
    out: OutOption = Path("bench-property.json"),
    quick: Annotated[
        bool, typer.Option("--quick", help="CI-sized: few rounds and points.")
    ] = False,
    seed: SeedOption = 0,
    rounds: Annotated[
        int | None, typer.Option(help="Override the rounds of every run.")
    ] = None,
    trials: Annotated[
        int | None,
        typer.Option(help="model-averaging: trials per arm [default: 8, the thesis']."),
    ] = None,
    secagg: Annotated[
        bool | None,
        typer.Option(
            "--secagg/--no-secagg",
            help="Also run under secure aggregation (needs >= 3 clients).",
        ),
    ] = None,
    properties: Annotated[
        list[str] | None,
        typer.Option(
            "--property",
            help="two-party: watermark, inverted or blurred (repeatable).",
        ),
    ] = None,
    extend: Annotated[
        bool,
        typer.Option(
            "--extend",
            help="Go on with the runs already under FILE-runs/ that have fewer "
            "rounds (same experiment) instead of starting over.",
        ),
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a key of every run's experiment file, e.g. --set "
            "adversary.property.aux_records=held-out (repeatable); keys the "
            "bench sets per run keep its values.",
        ),
    ] = None,
    participants: Annotated[
        list[int] | None,
        typer.Option(
            "--participants",
            help="model-averaging: a number of clients K to run (repeatable) "
            "[default: 3 and 5, the thesis'].",
        ),
    ] = None,
    verbose: VerboseOption = False,
) -> None:
    """Property inference against Flower clients: AUC, scores and plots."""
    report = run_property_bench(
        experiment,
        out,
        quick=quick,
        seed=seed,
        rounds=rounds,
        trials=trials,
        secagg=secagg,
        properties=properties or (),
        extend=extend,
        overrides=set_ or (),
        participants=participants or (),
        verbose=verbose,
        progress=say,
    )
    table = Table("run", "rounds", "K", "AUC", "mean score", "test acc", "wall s")
    for row in report["runs"]:
        table.add_row(
            row["label"],
            str(row["rounds"]),
            str(row["num_clients"]),
            fmt(row["auc"]),
            fmt(row["dataset_score"]),
            fmt(row["test_accuracy"]),
            f"{row['wall_s']:.1f}",
        )
    console.print(table)
    # the per-run diagnostics are for the JSON, too long for a terminal
    shown = {k: v for k, v in report["summary"].items() if k != "diagnostics"}
    console.print(f"summary: {shown}", highlight=False)
    if "diagnostics" in report["summary"]:
        console.print("per-run diagnostics: the JSON's summary", highlight=False)
    for plot in report["plots"]:
        console.print(f"written: {out.with_name(plot)}", highlight=False)
    written(out)
