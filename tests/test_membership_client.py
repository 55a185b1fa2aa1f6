"""The embedding-membership adversary ClientApp behaviour and a Flower run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fedleak.clients.defenses import DefendedClient, defended_behaviour
from fedleak.clients.honest import HonestClient
from fedleak.clients.membership import (
    BAGS_FILE,
    EmbeddingMembershipAdversary,
    load_membership_attack,
    membership_behaviour,
)
from fedleak.clients.secagg import QUANTISATION_STATE
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict

from fedleak import protocol
from fedleak.data.text import load_text_task
from fedleak.defenses import EMBEDDING_KEY, ClientDefenses
from fedleak.errors import DataError
from fedleak.task import TaskSpec

torch.set_num_threads(1)
SPEC = TaskSpec(
    dataset="checkins-synthetic", model="text-cnn", num_partitions=2, batch_size=8
)


def _context(partition: int) -> Context:
    return Context(
        run_id=1,
        node_id=partition + 1,
        node_config={"partition-id": partition, "num-partitions": 2},
        state=RecordDict(),
        run_config={},
    )


def _config(run_dir: Path, server_round: int) -> ConfigRecord:
    return ConfigRecord(
        {
            **SPEC.to_config(),
            protocol.SERVER_ROUND: server_round,
            protocol.TRAIN_MODE: protocol.MODE_GRADIENT,
            "adversary.kind": "embedding-membership",
            "adversary.partition": 1,
            "experiment.run-dir": str(run_dir),
        }
    )


def _numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


def test_adversary_reads_the_targets_batch_words(tmp_path: Path) -> None:
    theta = {
        k: v.detach().numpy().copy() for k, v in SPEC.new_model().state_dict().items()
    }
    target_ctx, adv_ctx = _context(0), _context(1)
    target_state, adv_state = ConfigRecord(), ConfigRecord()
    target_batches = []
    for server_round in (1, 2, 3):
        config = _config(tmp_path, server_round)
        arrays = ArrayRecord({k: Array(v) for k, v in theta.items()})
        target = membership_behaviour(SPEC, 0, config) or HonestClient(SPEC, 0)
        adversary = membership_behaviour(SPEC, 1, config)
        assert isinstance(adversary, EmbeddingMembershipAdversary)
        assert type(target) is HonestClient
        target.bind(target_ctx, config)
        adversary.bind(adv_ctx, config)
        before = dict(target_state)
        g_target, _ = target.gradient_reply(arrays, target_state)
        replay = HonestClient(SPEC, 0).next_batch(ConfigRecord(before))
        target_batches.append(set(target.data.x_train[replay].unique().tolist()))
        g_adv, _ = adversary.gradient_reply(arrays, adv_state)
        gt, ga = _numpy(g_target), _numpy(g_adv)
        theta = {  # SyncSGD's step, float64 then back to float32
            k: (v.astype(np.float64) - 0.05 * (gt[k] + ga[k])).astype(v.dtype)
            for k, v in theta.items()
        }
    lines = (tmp_path / "adversary" / BAGS_FILE).read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["round"] for r in rows] == [1, 2]
    for row, words in zip(rows, target_batches, strict=False):
        assert set(row["bag"]) == words - {0}
    vocab = load_text_task("checkins-synthetic", seed=0).vocab_size
    attack = load_membership_attack(tmp_path, vocab)
    assert len(attack.bags) == 2
    (tmp_path / "adversary" / BAGS_FILE).write_text('{"round": 1}\n')
    with pytest.raises(DataError, match="line 1"):
        load_membership_attack(tmp_path, vocab)


def test_defended_client_uploads_only_the_top_fraction(tmp_path: Path) -> None:
    config = ConfigRecord(
        {
            **_config(tmp_path, 1),
            "defenses.share_fraction": 0.05,
            "defenses.vocab_top_n": 20,
        }
    )
    defenses = ClientDefenses.from_config(config)
    assert defenses.active
    client = DefendedClient(SPEC, 0, defenses)
    client.bind(_context(0), config)
    assert int(client.data.x_train.max()) < 20 + 2
    theta = {k: v.detach().numpy() for k, v in SPEC.new_model().state_dict().items()}
    out, metrics = client.gradient_reply(
        ArrayRecord({k: Array(v) for k, v in theta.items()}), ConfigRecord()
    )
    grads = _numpy(out)
    total = sum(v.size for v in grads.values())
    assert sum(np.count_nonzero(v) for v in grads.values()) <= int(
        np.ceil(0.05 * total)
    )
    assert not grads[EMBEDDING_KEY][22:].any()
    assert metrics[protocol.NUM_EXAMPLES] == 8
    inactive = ConfigRecord({"defenses.share_fraction": 1.0})
    assert defended_behaviour(SPEC, 0, inactive) is None


def test_defended_client_draws_a_random_share_from_its_run_seed(tmp_path: Path) -> None:
    """The random choice follows the run seed, partition and round: replayable."""
    config = ConfigRecord(
        {
            **_config(tmp_path, 1),
            "defenses.share_fraction": 0.05,
            "defenses.share_selection": "random",
        }
    )
    defenses = ClientDefenses.from_config(config)
    assert defenses.share_selection == "random"
    theta = {k: v.detach().numpy() for k, v in SPEC.new_model().state_dict().items()}
    arrays = ArrayRecord({k: Array(v) for k, v in theta.items()})

    def upload(partition: int, server_round: int) -> dict[str, np.ndarray]:
        client = DefendedClient(SPEC, partition, defenses)
        round_config = ConfigRecord({**config, protocol.SERVER_ROUND: server_round})
        client.bind(_context(partition), round_config)
        return _numpy(client.gradient_reply(arrays, ConfigRecord())[0])

    first, again = upload(0, 1), upload(0, 1)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    later = upload(0, 2)
    assert any(
        not np.array_equal(first[k] != 0, later[k] != 0) for k in first
    )  # another round, another choice
    total = sum(v.size for v in first.values())
    assert sum(np.count_nonzero(v) for v in first.values()) <= int(
        np.ceil(0.05 * total)
    )
    # the largest-magnitude choice would keep the batch's embedding rows whole;
    # a random 5% keeps few of their coordinates
    rows = np.flatnonzero(np.abs(first[EMBEDDING_KEY]).sum(axis=1))
    assert rows.size > 0
    assert (
        np.count_nonzero(first[EMBEDDING_KEY][rows])
        < 0.5 * first[EMBEDDING_KEY][rows].size
    )


@pytest.mark.slow
@pytest.mark.in_default_run
def test_flower_run_has_recall_one(tmp_path: Path) -> None:
    from fedleak.experiments import run_experiment
    from fedleak.experiments.config import validate

    raw = {
        "name": "membership-e2e",
        "seed": 0,
        "rounds": 3,
        "data": {"dataset": "checkins-synthetic"},
        "model": {"name": "text-cnn"},
        "strategy": {"name": "sync-sgd", "learning_rate": 0.01},
        "client": {"batch_size": 64},
        "federation": {"num_clients": 2},
        "evaluation": {"server": False},
        "adversary": {"kind": "embedding-membership", "partition": 1},
    }
    run_experiment(validate(raw, "test", "test"), out=tmp_path)
    spec = TaskSpec(
        dataset="checkins-synthetic", model="text-cnn", num_partitions=2, batch_size=64
    )
    text = load_text_task("checkins-synthetic", seed=0)
    attack = load_membership_attack(tmp_path, text.vocab_size)
    assert len(attack.bags) == 2  # rounds 1 and 2, read in rounds 2 and 3
    client, state = HonestClient(spec, 0), ConfigRecord()
    used = sorted({i for _ in range(2) for i in client.next_batch(state).tolist()})
    scores = attack.evaluate(client.data.x_train.numpy()[used], text.x_test[:200])
    assert scores.recall == 1.0
    assert scores.precision > 0.8


def _two_model_averaging_rounds(
    tmp_path: Path,
    aggregate: Any,
    quantisation: ConfigRecord | None = None,
) -> tuple[set[int], set[int], bool]:
    """Target and adversary train rounds 1 and 2; ``aggregate`` forms the model.

    ``aggregate(theta, (w_target, target_model), (w_adv, adversary_model))``
    returns the new global model; ``quantisation`` is what the
    secure-aggregation client mod tells the adversary during its training.
    Returns the bag read for round 1, the target's words, and whether the
    aggregate moved every embedding row (rounding alone) in some round.
    """
    spec = TaskSpec(
        dataset="checkins-synthetic", model="text-cnn", num_partitions=6, batch_size=64
    )
    theta = {
        k: v.detach().numpy().copy() for k, v in spec.new_model().state_dict().items()
    }
    adv_ctx = _context(1)
    target = HonestClient(spec, 0)
    moved_everywhere = False
    for server_round in (1, 2):
        config = ConfigRecord(
            {
                **_config(tmp_path, server_round),
                **spec.to_config(),
                protocol.TRAIN_MODE: protocol.MODE_MODEL,
            }
        )
        arrays = ArrayRecord({k: Array(v) for k, v in theta.items()})
        adversary = membership_behaviour(spec, 1, config)
        assert adversary is not None
        adversary.bind(adv_ctx, config)
        target.bind(_context(0), config)
        mt, nt = target.model_reply(arrays, config, server_round)
        if quantisation is not None:
            adv_ctx.state[QUANTISATION_STATE] = quantisation
        ma, na = adversary.model_reply(arrays, config, server_round)
        if quantisation is not None:
            del adv_ctx.state[QUANTISATION_STATE]
        wt, wa = nt[protocol.NUM_EXAMPLES], na[protocol.NUM_EXAMPLES]
        assert isinstance(wt, int) and isinstance(wa, int)
        new = aggregate(theta, (wt, _numpy(mt)), (wa, _numpy(ma)))
        change = new[EMBEDDING_KEY] != theta[EMBEDDING_KEY]
        moved_everywhere = moved_everywhere or bool(change[1:].any(axis=1).all())
        theta = new
    rows = (tmp_path / "adversary" / BAGS_FILE).read_text().splitlines()
    bag = set(json.loads(rows[0])["bag"])
    words = set(np.unique(target.data.x_train.numpy()).tolist()) - {0}
    return bag, words, moved_everywhere


@pytest.mark.slow
def test_adversary_under_model_averaging_sees_the_union_of_local_steps(
    tmp_path: Path,
) -> None:
    def weighted_mean(theta: Any, target: Any, adversary: Any) -> dict[str, Any]:
        (wt, t), (wa, a) = target, adversary
        return {  # ModelAveraging's weighted mean in float64
            k: ((wt * t[k].astype(np.float64) + wa * a[k]) / (wt + wa)).astype(v.dtype)
            for k, v in theta.items()
        }

    bag, words, _ = _two_model_averaging_rounds(tmp_path, weighted_mean)
    assert bag == words  # one local epoch: every word of the target's partition


@pytest.mark.slow
def test_model_averaging_under_secure_aggregation_allows_for_fixed_point(
    tmp_path: Path,
) -> None:
    """The masked weighted sum moves every row by its rounding; no hand setting."""
    scale = 2.0**14  # a coarse fixed point: its rounding dwarfs float32 ulps

    def code(w: int, v: np.ndarray) -> np.ndarray:
        return np.round(w * v.astype(np.float64) * scale)

    def masked_mean(theta: Any, target: Any, adversary: Any) -> dict[str, Any]:
        (wt, t), (wa, a) = target, adversary
        return {  # the decoded masked weighted sum over the total weight
            k: ((code(wt, t[k]) + code(wa, a[k])) / scale / (wt + wa)).astype(v.dtype)
            for k, v in theta.items()
        }

    quantisation = ConfigRecord(
        {"round": 1, "scale": scale, "clip": 8.0, "group-size": 2, "weighted": True}
    )
    bag, words, moved_everywhere = _two_model_averaging_rounds(
        tmp_path, masked_mean, quantisation
    )
    assert moved_everywhere  # rounding alone moves rows nobody touched
    assert bag == words


@pytest.mark.slow
def test_flower_model_averaging_under_secure_aggregation_needs_no_tolerance(
    tmp_path: Path,
) -> None:
    from fedleak.experiments import run_experiment
    from fedleak.experiments.config import validate

    raw = {
        "name": "membership-ma-secagg",
        "seed": 0,
        "rounds": 2,
        "data": {"dataset": "checkins-synthetic"},
        "model": {"name": "text-cnn"},
        "strategy": {"name": "model-averaging", "learning_rate": 0.05},
        "client": {"batch_size": 64},
        "federation": {"num_clients": 3},
        "evaluation": {"server": False},
        # 32-bit words: a coarse fixed point (scale 2^13), whose rounding of
        # the weighted sum moves every embedding row by several float32 ulps
        "secure_aggregation": {"enabled": True, "modulus_bits": 32},
        "adversary": {"kind": "embedding-membership", "partition": 2},
    }
    run_experiment(validate(raw, "test", "test"), out=tmp_path)
    spec = TaskSpec(
        dataset="checkins-synthetic", model="text-cnn", num_partitions=3, batch_size=64
    )
    rows = (tmp_path / "adversary" / BAGS_FILE).read_text().splitlines()
    assert len(rows) == 1  # round 1, read in round 2
    bag = set(json.loads(rows[0])["bag"])
    others = [HonestClient(spec, p).data.x_train.numpy() for p in (0, 1)]
    words = set(np.unique(np.concatenate(others)).tolist()) - {0}
    assert bag == words  # one local epoch each: the union of their words
