"""The run directory: atomic writes, ``results.json`` and the per-round plot.

A run writes into ``runs/<name>/<timestamp>/`` (or the ``--out`` folder):

``config.toml``
    The resolved experiment (defaults filled in, overrides applied).
``rounds.jsonl``
    One JSON object per finished round, appended as the run goes, so an
    interrupted run keeps what it computed.
``results.json``
    Written once at the end of the run, however it ends (schema below).
``model.npz``
    The final global model (``numpy.load`` gives the state-dict arrays): the
    model after the last completed round.
``checkpoint.npz``
    What ``fedleak run --resume`` needs to go on
    (:mod:`~fedleak.runtime.checkpoint`).
``curves.png``
    Test accuracy and losses per round.

Every file is written to a temporary name in the same folder and renamed into
place, so a reader never sees a half-written file.

``results.json`` schema, version 3::

    {
      "schema_version": 3,
      "name": str, "seed": int, "created": ISO-8601 str,
      "status": "completed" | "interrupted" | "failed",
      "completed_rounds": int, "resumed_from": int | null,
      "privacy": {"noise": "os-entropy" | "noise_seed",
                  "noise_reproducible": bool, "noise_seed": int | null},
      "non_finite": [str, ...],
      "versions": {"fedleak": str, "flwr": str, "torch": str, "numpy": str},
      "config": {...the resolved experiment...},
      "final": {"round": int, "test-accuracy": float, "test-loss": float},
      "rounds": [{"round": int,
                  "server": {"test-accuracy": float, "test-loss": float},
                  "train": {...aggregated client metrics, num-replies, ...},
                  "evaluate": {...federated evaluation metrics...}}],
      "timing": {"total_s": float, "first_round_s": float,
                 "median_round_s": float, "median_round_after_first_s": float,
                 "round_s": [float, ...],
                 "rounds": [{"round": int, "wall_s": float, "wait_s": float,
                             "exchanges": int, "replies": int,
                             "client_compute_s": float,
                             "client_compute_max_s": float,
                             "evaluate_s": float,
                             "evaluate_blocked_s": float, "server_s": float}],
                 "median_after_first": {...medians of the keys above...},
                 "engine": {"engine": str, "poll_interval": float,
                            "wake_ups": bool, "actor_batch": int,
                            "actor_channels": bool}}
    }

A round's ``wall_s`` runs from the end of the previous round to the end of
its own, so the rounds tile the run; a round ends when its server evaluation
does, or, with ``[evaluation] overlap = true``, when its model exists:
the evaluation of round r's model then runs on a background thread during
round r+1. ``wait_s`` is the time spent waiting for replies (all message
exchanges of the round), ``evaluate_s`` the server's evaluation of the
round's model, ``evaluate_blocked_s`` the part of the round the server spent
evaluating or waiting for an evaluation (``evaluate_s`` itself without
overlap), ``server_s`` the rest of the server's work (sampling, building
messages, aggregation, recording); ``client_compute_s`` sums the handler
times the clients reported (``client_compute_max_s`` is the largest).
Records written before ``evaluate_blocked_s`` existed lack it. Version 1
(before the engine timing) had no ``timing.rounds``,
``median_after_first`` or ``engine``, and its ``round_s`` left out the
server evaluation; version 2 had no ``status``, ``completed_rounds``,
``resumed_from``, ``privacy`` or ``non_finite``. :func:`check_results`
accepts all three.

``rounds`` holds the completed rounds (fewer than the configured ones when
``status`` is ``"interrupted"`` or ``"failed"``; ``final.round`` is the last
of them). ``privacy.noise`` says where DP noise came from: ``"os-entropy"``
(the default: not reproducible, private) or ``"noise_seed"`` (the
experiment's ``[privacy] noise_seed``; reproducible, not private). The file is
strict JSON: a number that was NaN or infinite (a diverged loss) is written as
``null`` and its path (``"rounds[3].server.test-loss"``) listed in
``non_finite``.

Everything except ``created`` and ``timing`` is a deterministic function of
the experiment file (same seed, same numbers).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedleak.files import write_atomic

__all__ = [
    "READABLE_SCHEMA_VERSIONS",
    "ROUND_TIMING_KEYS",
    "SCHEMA_VERSION",
    "check_results",
    "count_usable_rounds",
    "plot_curves",
    "strict_json",
]

SCHEMA_VERSION = 3
READABLE_SCHEMA_VERSIONS = (1, 2, 3)
STATUSES = ("completed", "interrupted", "failed")
ROUND_TIMING_KEYS = (
    "round",
    "wall_s",
    "wait_s",
    "exchanges",
    "replies",
    "client_compute_s",
    "client_compute_max_s",
    "evaluate_s",
    "server_s",
)


def plot_curves(
    rounds: Sequence[Mapping[str, Any]], path: str | Path, title: str
) -> bool:
    """Plot test accuracy and losses per round into a PNG, atomically.

    Returns
    -------
    bool
        False when there was nothing to plot (no per-round metric).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(section: str, key: str) -> tuple[list[int], list[float]]:
        xs, ys = [], []
        for row in rounds:
            value = row.get(section, {}).get(key)
            if isinstance(value, int | float):
                xs.append(int(row["round"]))
                ys.append(float(value))
        return xs, ys

    acc = series("server", "test-accuracy")
    losses = {
        "test loss": series("server", "test-loss"),
        "train loss (clients)": series("train", "train-loss"),
    }
    if not acc[0] and not any(xs for xs, _ in losses.values()):
        return False
    fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(10, 3.8))
    marker = "." if len(rounds) <= 60 else None
    if acc[0]:
        ax_acc.plot(*acc, marker=marker, color="tab:blue")
    ax_acc.set(xlabel="round", ylabel="test accuracy", title="accuracy", ylim=(0, 1.02))
    ax_acc.grid(alpha=0.3)
    for label, (xs, ys) in losses.items():
        if xs:
            ax_loss.plot(xs, ys, marker=marker, label=label)
    ax_loss.set(xlabel="round", ylabel="cross-entropy", title="loss")
    ax_loss.grid(alpha=0.3)
    if ax_loss.lines:
        ax_loss.legend()
    fig.suptitle(title)
    fig.tight_layout()
    write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return True


def strict_json(obj: Any, path: str = "") -> tuple[Any, list[str]]:
    """Return ``obj`` with every non-finite float replaced by ``None``, and where.

    JSON has no NaN or infinity (``json.dumps`` writes ``NaN``, which strict
    parsers reject). Paths are written ``key.sub[index]``.

    Examples
    --------
    >>> strict_json({"a": [1.0, float("nan")], "b": float("inf")})
    ({'a': [1.0, None], 'b': None}, ['a[1]', 'b'])
    """
    if isinstance(obj, float) and not math.isfinite(obj):
        return None, [path]
    found: list[str] = []
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            out[key], inner = strict_json(value, f"{path}.{key}" if path else str(key))
            found += inner
        return out, found
    if isinstance(obj, list | tuple):
        items = []
        for index, value in enumerate(obj):
            item, inner = strict_json(value, f"{path}[{index}]")
            items.append(item)
            found += inner
        return items, found
    return obj, found


def check_results(obj: Any) -> list[str]:
    """Return the ways ``obj`` departs from the ``results.json`` schema (empty if none).

    Checks the keys and types of schema versions 1 to 3 (version 2 added
    the per-round timing, version 3 the status, privacy and non-finite
    entries) and that ``rounds`` holds rounds 1..R in order.
    """
    problems: list[str] = []
    if not isinstance(obj, dict):
        return ["results must be a JSON object"]
    expected: dict[str, type | tuple[type, ...]] = {
        "schema_version": int,
        "name": str,
        "seed": int,
        "created": str,
        "versions": dict,
        "config": dict,
        "final": dict,
        "rounds": list,
        "timing": dict,
    }
    for key, kind in expected.items():
        if key not in obj:
            problems.append(f"missing key {key!r}")
        elif not isinstance(obj[key], kind):
            problems.append(f"{key!r} must be {kind}")
    if problems:
        return problems
    if obj["schema_version"] not in READABLE_SCHEMA_VERSIONS:
        problems.append(
            f"schema_version {obj['schema_version']} not in {READABLE_SCHEMA_VERSIONS}"
        )
    for key in ("fedleak", "flwr", "torch", "numpy"):
        if not isinstance(obj["versions"].get(key), str):
            problems.append(f"versions.{key} missing")
    rounds = obj["rounds"]
    if [row.get("round") for row in rounds] != list(range(1, len(rounds) + 1)):
        problems.append("rounds must hold rounds 1..R in order")
    for row in rounds:
        for section in ("server", "train", "evaluate"):
            if not isinstance(row.get(section), dict):
                problems.append(
                    f"round {row.get('round')}: {section!r} must be an object"
                )
    if obj["final"].get("round") != len(rounds):
        problems.append("final.round must equal the number of rounds")
    timing_keys = ["total_s", "round_s"]
    if obj["schema_version"] >= 2:
        timing_keys += ["rounds", "median_after_first", "engine"]
    for key in timing_keys:
        if key not in obj["timing"]:
            problems.append(f"timing.{key} missing")
    if obj["schema_version"] >= 3:
        if obj.get("status") not in STATUSES:
            problems.append(f"status must be one of {list(STATUSES)}")
        if not isinstance(obj.get("privacy"), dict):
            problems.append("'privacy' must be an object")
        if not isinstance(obj.get("non_finite"), list):
            problems.append("'non_finite' must be a list")
    if obj["schema_version"] >= 2 and isinstance(obj["timing"].get("rounds"), list):
        per_round = obj["timing"]["rounds"]
        if any(set(ROUND_TIMING_KEYS) - set(row) for row in per_round):
            problems.append(f"timing.rounds rows must hold {list(ROUND_TIMING_KEYS)}")
    return problems


def count_usable_rounds(results: Mapping[str, Any]) -> int:
    """Count the rounds in which at least one client reply was aggregated.

    A round with ``num-replies`` (fedleak's strategies) counts when it is
    positive; a round of another strategy counts when it reported any
    training metric.
    """
    usable = 0
    for row in results.get("rounds", []):
        train = row.get("train", {})
        replies = train.get("num-replies")
        if (isinstance(replies, int) and replies > 0) or (replies is None and train):
            usable += 1
    return usable
