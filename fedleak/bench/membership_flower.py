"""Table 7.2 through Flower: the membership bench's runs as Flower simulations.

``fedleak bench membership --engine flower`` runs each (dataset, batch size)
of the bench as a two-client synchronized-SGD simulation on Flower's Ray
engine (:func:`fedleak.experiments.run_experiment`): client 0 is the target,
client 1 the :class:`~fedleak.clients.membership.EmbeddingMembershipAdversary`
that writes the bag of the target's words of every round it observes. The
bags are then scored as in the in-process bench (seed 000 Ch. 7.2.2): the
target's records against as many held-out records.

The data is the bench's own (``checkins-synthetic-large``), the model and the
server step are the bench's setup, so the rows can be set beside the
in-process ones; the draws (model initialisation, batch order, split) are
the federation's, not the in-process simulation's, so the numbers agree in
distribution, not bit for bit.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedleak.attacks.membership.false_flags import false_flags_by_size
from fedleak.attacks.membership.simulation import (
    MembershipSetup,
    model_auc,
)
from fedleak.curves import evaluation_interval, run_curve
from fedleak.errors import ConfigError

__all__ = ["FLOWER_DATASETS", "flower_membership_config", "run_flower_membership"]

FLOWER_DATASETS: dict[str, str] = {"checkins": "checkins-synthetic-large"}
"""Bench dataset -> the federation dataset that holds the same records."""


def flower_membership_config(
    dataset: str, setup: MembershipSetup, *, rounds: int, seed: int
) -> Any:
    """Return the :class:`~fedleak.experiments.config.ExperimentConfig` of one run.

    Raises
    ------
    ConfigError
        If ``dataset`` has no federation counterpart or ``setup`` uses a
        setting the Flower run does not model (defenses, participant noise,
        server weight decay or momentum, a CNN without its hidden layer).
    """
    from fedleak.experiments.config import validate

    if dataset not in FLOWER_DATASETS:
        raise ConfigError(
            f"bench membership --engine flower: no federation dataset for "
            f"{dataset!r}; choose among {sorted(FLOWER_DATASETS)}"
        )
    unsupported = [
        name
        for name, off in (
            ("defenses", not setup.defenses.active),
            ("participant_noise", setup.participant_noise is None),
            ("server_weight_decay", setup.server_weight_decay == 0.0),
            ("server_momentum", setup.server_momentum == 0.0),
            ("cnn_hidden", setup.cnn_hidden == 128),
        )
        if not off
    ]
    if unsupported:
        raise ConfigError(
            "bench membership --engine flower runs the undefended setup only; "
            f"not modelled: {', '.join(unsupported)}"
        )
    raw = {
        "name": f"membership-{dataset}-b{setup.batch_size}",
        "seed": seed,
        "rounds": rounds,
        "data": {"dataset": FLOWER_DATASETS[dataset], "partition": "iid"},
        "model": {
            "name": setup.model,
            "embedding_dim": setup.embedding_dim or 0,
            "dropout": setup.dropout,
        },
        "strategy": {
            "name": "sync-sgd",
            "learning_rate": setup.learning_rate,
            "reduction": "sum",
        },
        "client": {"batch_size": setup.batch_size},
        "federation": {"num_clients": 2},
        # the server's test accuracy at CURVE_POINTS rounds: the plateau
        "evaluation": {"server": True, "every": evaluation_interval(rounds)},
        "adversary": {"kind": "embedding-membership", "partition": 1},
    }
    return validate(raw, "bench membership --engine flower", "generated")


def run_flower_membership(
    dataset: str,
    setup: MembershipSetup,
    *,
    rounds: int,
    seed: int,
    run_dir: Path,
    max_eval_records: int | None = None,
) -> dict[str, Any]:
    """Run one Flower simulation and score its adversary's bags.

    Parameters
    ----------
    dataset : str
        A key of :data:`FLOWER_DATASETS`.
    setup : MembershipSetup
        The bench's model, batch size and server step.
    rounds : int
        Rounds of the simulation (the adversary reads ``rounds - 1`` bags:
        each round's change is seen at the start of the next).
    seed : int
        Run seed of the federation and of the evaluation sample.
    run_dir : Path
        The run directory (config, results, model, bags).
    max_eval_records : int, optional
        Score at most this many members and as many non-members.

    Returns
    -------
    dict
        The row's measurements, with the keys of the in-process rows.
    """
    from fedleak.clients.honest import HonestClient
    from fedleak.clients.membership import load_membership_attack
    from fedleak.data.text import load_text_task
    from fedleak.experiments import run_experiment
    from fedleak.training import evaluate, set_arrays

    config = flower_membership_config(dataset, setup, rounds=rounds, seed=seed)
    started = time.perf_counter()
    outcome = run_experiment(config, out=run_dir)
    if outcome.results.get("status") != "completed":
        raise RuntimeError(
            f"the Flower run in {run_dir} ended {outcome.results.get('status')!r}"
        )
    task = config.task()
    text = load_text_task(task.dataset, seed=seed)
    members = HonestClient(task, 0).data.x_train.numpy()
    n_eval = min(members.shape[0], text.x_test.shape[0])
    if max_eval_records is not None:
        n_eval = min(n_eval, max_eval_records)
    pick = np.random.default_rng([seed, 0xE7A1])
    members = members[np.sort(pick.choice(members.shape[0], n_eval, replace=False))]
    others = text.x_test[
        np.sort(pick.choice(text.x_test.shape[0], n_eval, replace=False))
    ]
    attack = load_membership_attack(run_dir, text.vocab_size)
    scores = attack.evaluate(members, others)
    model = task.new_model()
    with np.load(run_dir / "model.npz") as final:
        set_arrays(model, {k: final[k] for k in final.files})
    x_test = torch.from_numpy(np.array(text.x_test))
    y_test = torch.from_numpy(np.array(text.y_test))
    return {
        **scores.as_dict(),
        "model_accuracy": evaluate(model, x_test, y_test).accuracy,
        "model_auc": model_auc(model, x_test, y_test),
        "rounds": rounds,
        "record_epsilon": None,
        "participant_epsilon": None,
        "accuracy_curve": run_curve(outcome.results, every=1),
        "false_flags": false_flags_by_size(attack, others),
        "engine": "flower",
        "run_dir": run_dir.name,
        "wall_s": time.perf_counter() - started,
    }
