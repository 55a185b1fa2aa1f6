"""The late joiner of seed 000 Fig. 7.9: ``K = 2`` before the join, ``K = 3`` after.

The target abstains (weight 0) until ``target.join_round``; the server
averages the others only; the model-averaging adversary reads its own share
from the ``n`` the server announces, so before the join it observes exactly
the one other participant's update, and it emulates as many others as it
observed. The bench's summary says which join model the run used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fedleak.attacks.property.classifier import gradient_features, load_observations
from fedleak.clients.property import (
    AveragingView,
    PropertyAttackContext,
    PropertyTarget,
)
from fedleak.strategies import ModelAveraging
from flower_fakes import LocalGrid
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from property_setup import client_context, property_experiment

from fedleak import protocol
from fedleak.bench.property import join_participants
from fedleak.experiments.config import ExperimentConfig
from fedleak.experiments.runner import make_experiment_client_app
from fedleak.task import client_data

JOIN: dict[str, dict[str, Any]] = {
    "strategy": {"name": "model-averaging"},
    "adversary": {"property": {"pooling": "raw"}},
    "target": {"property_every": 0, "join_round": 3},
}


def experiment(**sections: Any) -> ExperimentConfig:
    return property_experiment("property-join-test", JOIN, sections)


context = client_context


def message_config(
    config: ExperimentConfig, run_dir: Path, mode: str, server_round: int
) -> ConfigRecord:
    return ConfigRecord(
        {
            **config.task().to_config(),
            **config.client_config(str(run_dir)),
            protocol.TRAIN_MODE: mode,
            protocol.SERVER_ROUND: server_round,
        }
    )


# ------------------------------------------------------------- the target
@pytest.mark.parametrize("mode", [protocol.MODE_GRADIENT, protocol.MODE_MODEL])
def test_a_target_that_has_not_joined_abstains_then_trains(tmp_path, mode):
    config = experiment()
    spec = config.task()
    arrays = ArrayRecord(spec.new_model().state_dict())
    state = ConfigRecord({"epoch": 0, "cursor": 0})
    replies = {}
    for server_round in (2, 3):
        target = PropertyTarget(spec, 0)
        cfg = message_config(config, tmp_path, mode, server_round)
        target.bind(context(0), cfg)
        if mode == protocol.MODE_GRADIENT:
            replies[server_round] = target.gradient_reply(arrays, state)
        else:
            replies[server_round] = target.model_reply(arrays, cfg, server_round)
    out, metrics = replies[2]
    assert dict(metrics) == {protocol.NUM_EXAMPLES: 0, protocol.ABSTAINED: 1}
    # arrays that change nothing even where the flag is ignored
    for name, value in out.items():
        if mode == protocol.MODE_GRADIENT:
            assert not value.numpy().any()
        else:
            np.testing.assert_array_equal(value.numpy(), arrays[name].numpy())
    _, joined = replies[3]
    assert protocol.ABSTAINED not in joined
    assert joined[protocol.NUM_EXAMPLES] > 0
    truth = (tmp_path / "target" / "truth.jsonl").read_text().splitlines()
    assert '"joined": false' in truth[0] and '"joined": true' in truth[1]


# ------------------------------------------------------------ the adversary
def test_the_view_follows_the_announced_weight():
    settings = PropertyAttackContext.from_config(
        ConfigRecord(
            {**experiment().client_config("/r"), **experiment().task().to_config()}
        )
    )
    before = AveragingView.of(settings, 240.0, 120)  # the adversary + one other
    assert before == AveragingView(own_weight=0.5, others=1, emulated=1)
    assert before.total == 2
    after = AveragingView.of(settings, 360.0, 120)
    assert after == AveragingView(own_weight=1 / 3, others=2, emulated=2)
    # no announcement: the seed's assumption, K = 3 equal clients
    assert AveragingView.of(settings, None, 120) == after
    assert AveragingView.of(settings, 0, 120) == after
    alone = AveragingView.of(settings, 120, 120)
    assert alone.others == 0 and alone.emulated == 1
    fixed = PropertyAttackContext.from_config(
        ConfigRecord(
            {
                **experiment(
                    adversary={"property": {"emulate": 4, "pooling": "raw"}}
                ).client_config("/r"),
            }
        )
    )
    forced = AveragingView.of(fixed, 240.0, 120)
    assert forced.emulated == 4 and forced.others == 1 and forced.total == 5


def _recording_app(uploads: dict[tuple[int, int], dict[str, np.ndarray]]) -> Any:
    app = make_experiment_client_app()

    def handle(message: Message, ctx: Context) -> Message:
        out = app(message, ctx)
        config = message.content.config_records.get(protocol.CONFIG_KEY)
        if config is not None and message.metadata.message_type == "train":
            arrays = out.content.array_records[protocol.ARRAYS_KEY]
            key = (int(ctx.node_config["partition-id"]), int(config["server-round"]))
            uploads[key] = {k: v.numpy().astype(np.float64) for k, v in arrays.items()}
        return out

    return handle


@pytest.mark.slow
@pytest.mark.in_default_run
def test_before_the_join_the_adversary_observes_exactly_the_other_client(
    tmp_path, task_identity
):
    config = experiment()
    spec = config.task()
    assert len({client_data(spec, p).num_train for p in range(3)}) == 1
    uploads: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    grid = LocalGrid(_recording_app(uploads), {101: 0, 102: 1, 103: 2})
    server = ModelAveraging(min_available_nodes=3, seed=5, learning_rate=0.1)
    models: dict[int, dict[str, np.ndarray]] = {}

    def remember(server_round: int, arrays: ArrayRecord) -> None:
        models[server_round] = {k: v.numpy() for k, v in arrays.items()}

    server.start(
        grid=grid,
        initial_arrays=ArrayRecord(spec.new_model().state_dict()),
        num_rounds=4,
        train_config=ConfigRecord(
            {**spec.to_config(), **config.client_config(str(tmp_path))}
        ),
        evaluate_fn=remember,
    )
    # the server averaged 2 clients before the join (round 3), then 3
    for server_round in (1, 2):
        start = models[server_round - 1]
        expected = {
            n: ((uploads[(1, server_round)][n] + uploads[(2, server_round)][n]) / 2)
            for n in start
        }
        for name, value in expected.items():
            np.testing.assert_allclose(
                models[server_round][name], value, rtol=1e-6, atol=1e-7
            )
    obs = load_observations(tmp_path / "adversary")
    assert obs.observed_rounds.tolist() == [1, 2, 3]
    for row, server_round in enumerate(obs.observed_rounds.tolist()):
        start = models[server_round - 1]
        joined = [2] if server_round < 3 else [0, 2]
        k = len(joined) + 1
        truth = {
            n: sum((uploads[(p, server_round)][n] - start[n]) / k for p in joined)
            for n in uploads[(1, server_round)]
        }
        expected = gradient_features(truth, "raw")
        scale = np.abs(expected).max()
        np.testing.assert_allclose(obs.observed[row], expected, atol=1e-5 * scale)
    # round r logs the view of round r - 1 and emulates as many others
    views = []
    for server_round in (1, 2, 3, 4):
        with np.load(tmp_path / "adversary" / f"round-{server_round:06d}.npz") as f:
            meta = json.loads(str(f["meta"]))
        views.append((meta["observed_participants"], meta["emulated_participants"]))
    # round 1: nothing announced yet (K - 1 = 2); rounds 2-3 see round 1-2's
    # two-client average (1 other); round 4 sees round 3's three clients
    assert views == [(2, 2), (1, 1), (1, 1), (2, 2)]


# ------------------------------------------------------------- the bench
def test_join_participants_reads_k_from_the_aggregate_weights():
    sizes = [100, 100, 100]
    k2_to_3 = {1: 200.0, 2: 200.0, 3: 300.0, 4: 300.0}
    assert join_participants(k2_to_3, sizes, 0, 3) == {
        "participants_before": 2,
        "participants_after": 3,
        "join_model": "K=2->3",
    }
    # the former model: the target's records averaged in before it joined
    zero_update = {1: 300.0, 2: 300.0, 3: 300.0, 4: 300.0}
    assert join_participants(zero_update, sizes, 0, 3)["join_model"] == "K=3->3"
    # unequal partitions: the target's own size is what is missing before
    assert (
        join_participants({1: 250.0, 2: 250.0, 3: 300.0}, [50, 100, 150], 0, 3)[
            "join_model"
        ]
        == "K=2->3"
    )
    mixed = join_participants({1: 200.0, 2: 300.0, 3: 300.0}, sizes, 0, 3)
    assert mixed["participants_before"] is None and mixed["join_model"] is None
    empty = join_participants({3: 300.0}, sizes, 0, 3)
    assert empty["participants_before"] is None and empty["join_model"] is None
    odd = join_participants({1: 150.0, 3: 300.0}, sizes, 0, 3)
    assert odd["join_model"] is None
