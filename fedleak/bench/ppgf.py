"""``fedleak bench ppgf``: seed 003's framework against membership inference.

Analogue of seed 003 Tables 3-6 on small CPU-sized subsets. The data owner
holds ``members`` source records; a downstream classifier (an MLP) is
trained on

``source``
    the source records themselves (seed 003's BS baseline);
``reconstruction``
    the VAE's non-private reconstructions (N-PPGF, ``epsilon = inf``);
``ppgf``
    the private synthetic data of :class:`fedleak.synth.latent.LatentSynthesizer`
    at each d_x privacy level ``epsilon`` (labels by label transfer);
``reference``
    disjoint records (none of the members): a control whose AUC is the
    chance level of this particular member/non-member split;
``dp-sgd``
    the source records with DP-SGD (:func:`fedleak.privacy.dpsgd.dp_sgd_train`)
    at the same epsilon (``delta = 1e-5``, noise multiplier from
    :func:`fedleak.privacy.accounting.sgm_noise_multiplier`), seed 003's
    matched-budget comparison (Table 4). The two epsilons are different
    notions; each PPGF row also gives ``epsilon_dp = epsilon * sensitivity``,
    the indistinguishability of any two source records.

Each model is then attacked on the source members and as many non-members:

* black box: the shadow-model attack of Shokri et al.
  (:class:`fedleak.attacks.membership.classifier.ShadowModelAttack`), shadows trained
  on disjoint raw data with the same procedure (the attacker does not know the
  framework, seed 003 Section 3.2);
* loss threshold: Yeom et al.
  (:class:`~fedleak.attacks.membership.classifier.LossThresholdAttack`),
  threshold calibrated on the shadow models' members;
* white-box style: the norm of the per-record gradient of the loss with respect
  to all weights (smaller for members), the signal the white-box attack of
  Nasr et al. used in seed 003 Section 5.3.2 reads from the last layers.

Reported per model: train/test accuracy, and AUC, precision, recall and
advantage of each attack. Plots: ``FILE-utility.png`` (test accuracy vs
epsilon) and ``FILE-mi.png`` (AUC vs epsilon).

JSON schema, version 1::

    {"schema_version": 1, "bench": "ppgf", "created": str, "versions": {...},
     "parameters": {...}, "seed": int,
     "setup": {"latent_sensitivity": float, "vae_fit_s": float,
               "shadow_fit_s": float},
     "rows": [{"method", "epsilon", "epsilon_dp", "noise_multiplier",
               "train_accuracy", "test_accuracy", "label_agreement",
               "black_box": {"auc", "precision", "recall", "advantage"},
               "loss_threshold": {...}, "white_box": {"auc"}, "wall_s"}],
     "summary": {...}, "plots": [str], "complete": bool, "wall_s": float}

The file is rewritten after every trained model (``"complete": false``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch
import typer
from numpy.typing import NDArray
from rich.table import Table
from torch import nn

from fedleak.attacks.membership.classifier import (
    DPSGDProcedure,
    LossThresholdAttack,
    SGDProcedure,
    ShadowModelAttack,
    TorchClassifier,
    evaluate_membership,
)
from fedleak.attacks.membership.gradient_norm import gradient_norm_scores
from fedleak.errors import ConfigError, DataError
from fedleak.files import write_figure
from fedleak.privacy.accounting import sgm_noise_multiplier
from fedleak.synth.latent import LatentSynthesizer

from .console import fmt, say, written
from .console import out as console
from .options import OutOption, SeedOption
from .record import BenchRecord, record_path

__all__ = ["run_ppgf_bench"]

DELTA_DPSGD = 1e-5


def _split(
    dataset: str, members: int, seed: int
) -> tuple[dict[str, tuple[NDArray[np.float32], NDArray[np.int64]]], tuple[int, ...]]:
    from fedleak.data import load_dataset

    ds = load_dataset(dataset)
    x = np.concatenate([ds.x_train, ds.x_test])
    y = np.concatenate([ds.y_train, ds.y_test]).astype(np.int64)
    need = 2 * members + 2 * members + min(2000, members)
    if need > len(x):
        raise ConfigError(
            f"{dataset} has {len(x)} records; {members} members need {need} "
            "(members, non-members, shadow data, test); lower --members"
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9961]))
    perm = rng.permutation(len(x))
    cuts = np.cumsum([members, members, 2 * members, min(2000, members)])
    parts = np.split(perm[: cuts[-1]], cuts[:-1])
    names = ("members", "nonmembers", "shadow", "test")
    return (
        {
            k: (x[idx].astype(np.float32), y[idx])
            for k, idx in zip(names, parts, strict=True)
        },
        tuple(int(s) for s in ds.x_train.shape[1:]),
    )


def _auc_of(attack: str) -> Callable[[dict[str, Any]], float]:
    def get(row: dict[str, Any]) -> float:
        return float(row[attack]["auc"])

    return get


def _method_panel(
    ax: Any, rows: list[dict[str, Any]], value: Callable[[dict[str, Any]], float]
) -> None:
    """Draw ``value`` vs epsilon for PPGF and DP-SGD, and the unprivate levels.

    The reference, source and reconstruction models have no epsilon: each is
    a grey horizontal line at its value.
    """
    for method, color in (("ppgf", "tab:red"), ("dp-sgd", "tab:blue")):
        sel = sorted(
            (r for r in rows if r["method"] == method), key=lambda r: r["epsilon"]
        )
        ax.plot(
            [r["epsilon"] for r in sel],
            [value(r) for r in sel],
            "o-",
            color=color,
            label=method,
        )
    for method, style in (
        ("reference", "-."),
        ("source", ":"),
        ("reconstruction", "--"),
    ):
        sel = [r for r in rows if r["method"] == method]
        if sel:
            ax.axhline(value(sel[0]), linestyle=style, color="gray", label=method)


def _plot(rows: list[dict[str, Any]], out: Path) -> list[str]:
    """Draw the utility and the MI AUC plots next to ``out``; return their paths."""

    def utility(fig: Any) -> None:
        ax = fig.subplots()
        _method_panel(ax, rows, lambda r: r["test_accuracy"])
        ax.set(
            xscale="log",
            xlabel="epsilon",
            ylabel="test accuracy",
            title="downstream utility",
            ylim=(0, 1),
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)

    def membership(fig: Any) -> None:
        axes = fig.subplots(1, 3, sharey=True)
        for ax, (attack, title) in zip(
            axes,
            (
                ("black_box", "shadow model (black box)"),
                ("loss_threshold", "loss threshold"),
                ("white_box", "gradient norm (white box)"),
            ),
            strict=True,
        ):
            _method_panel(ax, rows, _auc_of(attack))
            ax.axhline(0.5, color="black", linewidth=0.6)
            ax.set(xscale="log", xlabel="epsilon", title=title)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("MI AUC")
        axes[0].legend(fontsize=8)

    return [
        write_figure(out.with_name(f"{out.stem}-utility.png"), utility, (6, 4)),
        write_figure(out.with_name(f"{out.stem}-mi.png"), membership, (14, 3.8)),
    ]


def run_ppgf_bench(
    out: str | Path,
    *,
    quick: bool = False,
    dataset: str | None = None,
    epsilons: Sequence[float] | None = None,
    members: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the PPGF bench and write ``out`` (JSON) and its plots.

    Parameters
    ----------
    out : str or pathlib.Path
        JSON file to write.
    quick : bool, default=False
        CI-sized: digits, 200 members, epsilons (2, 10), 10 epochs.
    dataset : str, optional
        ``"fashion-mnist"`` (default when installed, as in seed 003) or
        ``"digits"``.
    epsilons : sequence of float, optional
        d_x privacy levels of the PPGF rows (and the DP-SGD epsilons).
    members : int, optional
        Source records (default 2,000; 200 with ``quick``).
    seed : int, default=0
        Root seed.
    progress : callable, optional
        Receives one line of text per trained model.

    Returns
    -------
    dict
        The JSON document.
    """
    from fedleak.data import find_data_dir

    out = record_path(out)
    if dataset is None:
        dataset = "digits"
        if not quick:
            try:
                find_data_dir("fashion-mnist")
                dataset = "fashion-mnist"
            except DataError:
                pass
    if dataset not in ("digits", "fashion-mnist", "mnist"):
        raise ConfigError(
            f"dataset must be digits, fashion-mnist or mnist; got {dataset!r}"
        )
    n_members = members or (200 if quick else 2000)
    eps_grid = (
        tuple(epsilons)
        if epsilons
        else ((2.0, 10.0) if quick else (1.0, 2.0, 5.0, 10.0, 20.0))
    )
    if any(not e > 0 or math.isinf(e) for e in eps_grid):
        raise ConfigError(f"epsilons must be finite and > 0; got {list(eps_grid)}")
    torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
    # dp-accounting logs one warning per unconverged fractional RDP order.
    absl_logger = logging.getLogger("absl")
    absl_level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)
    try:
        return _run(out, quick, dataset, eps_grid, n_members, seed, progress)
    finally:
        absl_logger.setLevel(absl_level)


@dataclass(frozen=True)
class _Plan:
    """The sizes and settings of one PPGF bench run."""

    quick: bool
    dataset: str
    eps_grid: tuple[float, ...]
    n_members: int
    seed: int
    dim: int
    hidden: int
    epochs: int
    batch: int
    lr: float = 0.1

    @property
    def small(self) -> bool:
        """Digits-sized inputs (64 features or fewer)."""
        return self.dim <= 64


@dataclass
class _Attacker:
    """The attacker's shadow-model and loss-threshold attacks, fitted once."""

    shadow: ShadowModelAttack
    loss: LossThresholdAttack
    fit_s: float


def _factory(plan: _Plan) -> Callable[[int], nn.Module]:
    def factory(s: int) -> nn.Module:
        state = torch.random.get_rng_state()
        torch.manual_seed(s)
        model = nn.Sequential(
            nn.Linear(plan.dim, plan.hidden), nn.ReLU(), nn.Linear(plan.hidden, 10)
        )
        torch.random.set_rng_state(state)
        return model

    return factory


def _fit_attacker(
    plan: _Plan, procedure: SGDProcedure, shadow_data: tuple[Any, Any]
) -> _Attacker:
    """Fit the shadow models on disjoint raw data with the target's procedure."""
    t0 = time.perf_counter()
    shadow = ShadowModelAttack(
        procedure,
        num_classes=10,
        num_shadows=1 if plan.quick else 2,
        shadow_size=plan.n_members,
        seed=plan.seed,
    )
    s_probs, s_labels, s_member = shadow.shadow_records(*shadow_data)
    shadow.fit_attack_models(s_probs, s_labels, s_member)
    loss_attack = LossThresholdAttack().calibrate(s_probs[s_member], s_labels[s_member])
    return _Attacker(shadow, loss_attack, time.perf_counter() - t0)


def _fit_synthesizer(
    plan: _Plan, members: tuple[Any, Any]
) -> tuple[LatentSynthesizer, float]:
    """Fit the data owner's VAE and label model on the members."""
    t0 = time.perf_counter()
    small = plan.small
    synth = LatentSynthesizer(
        hidden=(128,) if small else (400,),
        latent_dim=8 if small else 20,
        epochs=60 if small else (10 if plan.quick else 30),
        batch_size=32 if small else 64,
        lr=3e-3 if small else 1e-3,
    ).fit(members[0], members[1], seed=plan.seed)
    return synth, time.perf_counter() - t0


def _attack_row(
    target: TorchClassifier,
    eps: float,
    attacker: _Attacker,
    flat: dict[str, tuple[Any, Any]],
    n_members: int,
) -> dict[str, Any]:
    """Accuracy and the three attacks' figures on one trained target."""
    from sklearn.metrics import roc_auc_score

    row: dict[str, Any] = {}
    for key, attack in (
        ("black_box", attacker.shadow),
        ("loss_threshold", attacker.loss),
    ):
        ev = evaluate_membership(
            target,
            attack,
            flat["members"],
            flat["nonmembers"],
            flat["test"],
            epsilon=eps,
        )
        row["train_accuracy"], row["test_accuracy"] = (
            ev.train_accuracy,
            ev.test_accuracy,
        )
        row[key] = {
            "auc": ev.auc,
            "precision": ev.precision,
            "recall": ev.recall,
            "advantage": ev.advantage,
        }
    xq = np.concatenate([flat["members"][0], flat["nonmembers"][0]])
    yq = np.concatenate([flat["members"][1], flat["nonmembers"][1]])
    truth = np.repeat([True, False], [n_members, n_members])
    row["white_box"] = {
        "auc": float(roc_auc_score(truth, gradient_norm_scores(target.model, xq, yq)))
    }
    return row


def _train_target(
    method: str,
    eps: float,
    plan: _Plan,
    procedure: SGDProcedure,
    sets: tuple[dict[str, tuple[Any, Any]], dict[str, tuple[Any, Any]]],
    synth: LatentSynthesizer,
) -> tuple[TorchClassifier, dict[str, Any]]:
    """Train the downstream model of one row; return it and the row's extras.

    ``sets`` holds the splits as images and flattened.
    """
    splits, flat = sets
    n_members, model_seed = plan.n_members, plan.seed + 101
    extra: dict[str, Any] = {
        "epsilon_dp": None,
        "noise_multiplier": None,
        "label_agreement": None,
    }
    if method == "reference":
        # Trained on disjoint data: its AUC is the chance level of this
        # particular member/non-member split (a split-bias control).
        ref_x, ref_y = flat["shadow"]
        target = procedure(ref_x[:n_members], ref_y[:n_members], model_seed)
    elif method == "source":
        target = procedure(*flat["members"], model_seed)
    elif method == "dp-sgd":
        steps = plan.epochs * math.ceil(n_members / plan.batch)
        z = sgm_noise_multiplier(eps, DELTA_DPSGD, plan.batch / n_members, steps)
        target = DPSGDProcedure(
            procedure.factory,
            noise_multiplier=z,
            epochs=plan.epochs,
            batch_size=plan.batch,
            lr=plan.lr,
            delta=DELTA_DPSGD,
        )(*flat["members"], model_seed)
        extra.update(noise_multiplier=z, epsilon_dp=target.epsilon)
    else:
        data = synth.synthesize(*splits["members"], eps, seed=plan.seed + 7)
        target = procedure(data.x.reshape(n_members, -1), data.y, model_seed)
        extra.update(
            label_agreement=data.label_agreement,
            epsilon_dp=None if math.isinf(eps) else data.epsilon_dp,
        )
    if not isinstance(target, TorchClassifier):
        raise TypeError(f"expected a TorchClassifier, got {type(target).__name__}")
    return target, extra


def _header(
    plan: _Plan, shape: tuple[int, ...], synth: LatentSynthesizer, attacker: _Attacker
) -> dict[str, Any]:
    return {
        "parameters": {
            "quick": plan.quick,
            "dataset": plan.dataset,
            "image_shape": list(shape),
            "members": plan.n_members,
            "epsilons": list(plan.eps_grid),
            "target": (
                f"MLP {plan.dim}-{plan.hidden}-10, SGD lr {plan.lr}, batch "
                f"{plan.batch}, {plan.epochs} epochs"
            ),
            "vae": (
                f"{plan.dim}-{synth.hidden}-{synth.latent_dim}, {synth.epochs} epochs"
            ),
            "dpsgd_delta": DELTA_DPSGD,
            "shadow_models": attacker.shadow.num_shadows,
        },
        "seed": plan.seed,
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def by(method: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["method"] == method]

    source = by("source")[0]
    reference = by("reference")[0]
    attacks = ("black_box", "loss_threshold", "white_box")
    summary = {
        "reference_auc": {a: reference[a]["auc"] for a in attacks},
        "ppgf_max_abs_auc_gap_vs_reference": max(
            abs(r[a]["auc"] - reference[a]["auc"]) for r in by("ppgf") for a in attacks
        ),
        "source_test_accuracy": source["test_accuracy"],
        "source_max_auc": max(source[a]["auc"] for a in attacks),
        "reconstruction_max_auc": max(
            by("reconstruction")[0][a]["auc"] for a in attacks
        ),
        "ppgf_max_abs_auc_gap": max(
            abs(r[a]["auc"] - 0.5) for r in by("ppgf") for a in attacks
        ),
        "dpsgd_max_abs_auc_gap": max(
            abs(r[a]["auc"] - 0.5) for r in by("dp-sgd") for a in attacks
        ),
        "accuracy_ratio_ppgf_vs_dpsgd": {
            str(p["epsilon"]): p["test_accuracy"] / d["test_accuracy"]
            for p, d in zip(by("ppgf"), by("dp-sgd"), strict=True)
        },
        "accuracy_ratio_vs_source": {
            f"{r['method']}@{r['epsilon']}": r["test_accuracy"]
            / source["test_accuracy"]
            for r in rows
        },
        "median_ppgf_s": float(np.median([r["wall_s"] for r in by("ppgf")])),
        "median_dpsgd_s": float(np.median([r["wall_s"] for r in by("dp-sgd")])),
    }
    summary["ppgf_vs_dpsgd_time_ratio"] = (
        summary["median_ppgf_s"] / summary["median_dpsgd_s"]
    )
    return summary


def _run(
    out: Path,
    quick: bool,
    dataset: str,
    eps_grid: tuple[float, ...],
    n_members: int,
    seed: int,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    started = time.perf_counter()
    splits, shape = _split(dataset, n_members, seed)
    flat = {k: (v[0].reshape(len(v[0]), -1), v[1]) for k, v in splits.items()}
    dim = flat["members"][0].shape[1]
    plan = _Plan(
        quick=quick,
        dataset=dataset,
        eps_grid=eps_grid,
        n_members=n_members,
        seed=seed,
        dim=dim,
        hidden=64 if dim <= 64 else 128,
        epochs=10 if quick else 30,
        batch=32 if quick else 64,
    )
    say = progress or (lambda _text: None)
    procedure = SGDProcedure(
        _factory(plan), epochs=plan.epochs, batch_size=plan.batch, lr=plan.lr
    )
    attacker = _fit_attacker(plan, procedure, flat["shadow"])
    say(f"shadow models: {attacker.fit_s:.1f}s")
    synth, vae_s = _fit_synthesizer(plan, splits["members"])
    say(
        f"VAE + label transfer fitted: {vae_s:.1f}s, "
        f"sensitivity {synth.sensitivity:.2f}"
    )
    doc = BenchRecord("ppgf", out)
    rows = doc.start_rows(
        {
            **_header(plan, shape, synth, attacker),
            "setup": {
                "latent_sensitivity": synth.sensitivity,
                "vae_fit_s": vae_s,
                "shadow_fit_s": attacker.fit_s,
            },
        }
    )
    runs: list[tuple[str, float]] = [
        ("reference", math.inf),
        ("source", math.inf),
        ("reconstruction", math.inf),
    ]
    runs += [("ppgf", e) for e in eps_grid] + [("dp-sgd", e) for e in eps_grid]
    for method, eps in runs:
        t0 = time.perf_counter()
        target, extra = _train_target(
            method, eps, plan, procedure, (splits, flat), synth
        )
        row = {
            "method": method,
            "epsilon": eps,
            **extra,
            **_attack_row(target, eps, attacker, flat, n_members),
        }
        row["wall_s"] = time.perf_counter() - t0
        doc.add_row(row, started)
        say(
            f"{method} eps={eps}: test acc {row['test_accuracy']:.3f}, AUC black-box "
            f"{row['black_box']['auc']:.3f}, loss {row['loss_threshold']['auc']:.3f}, "
            f"white-box {row['white_box']['auc']:.3f} ({row['wall_s']:.1f}s)"
        )
    return doc.finish_rows(started, _summary(rows), _plot(rows, out))


def command(
    out: OutOption = Path("bench-ppgf.json"),
    quick: Annotated[
        bool,
        typer.Option("--quick", help="CI-sized: digits, few epsilons and epochs."),
    ] = False,
    dataset: Annotated[
        str | None,
        typer.Option(help="fashion-mnist (default when installed) or digits."),
    ] = None,
    epsilon: Annotated[
        list[float] | None,
        typer.Option("--epsilon", help="d_x privacy levels (repeatable)."),
    ] = None,
    members: Annotated[
        int | None, typer.Option(help="Source (member) records.")
    ] = None,
    seed: SeedOption = 0,
) -> None:
    """Seed 003's framework: accuracy and MI AUC vs epsilon, next to DP-SGD."""
    report = run_ppgf_bench(
        out,
        quick=quick,
        dataset=dataset,
        epsilons=tuple(epsilon) if epsilon else None,
        members=members,
        seed=seed,
        progress=say,
    )
    table = Table(
        "training data",
        "eps",
        "train acc",
        "test acc",
        "shadow AUC",
        "loss AUC",
        "grad AUC",
        "label agr.",
        "s",
    )
    for row in report["rows"]:
        table.add_row(
            row["method"],
            fmt(row["epsilon"], 2),
            fmt(row["train_accuracy"]),
            fmt(row["test_accuracy"]),
            fmt(row["black_box"]["auc"]),
            fmt(row["loss_threshold"]["auc"]),
            fmt(row["white_box"]["auc"]),
            fmt(row.get("label_agreement")),
            fmt(row["wall_s"], 1),
        )
    console.print(table)
    console.print(f"summary: {report['summary']}", highlight=False)
    for plot in report["plots"]:
        console.print(f"written: {plot}", highlight=False)
    written(out)
