"""Property adversaries and the scripted target, on plain tensors and in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fedleak.attacks.property.classifier import gradient_features, load_observations
from fedleak.attacks.property.gradients import (
    PropertyHead,
    derive_averaging_aggregate,
    derive_sgd_aggregate,
    emulated_sgd_pair,
    last_linear,
    multitask_gradient,
    summed_batch_gradient,
)
from fedleak.clients.property import (
    ActivePropertyAdversary,
    PassivePropertyAdversary,
    PropertyTarget,
    auxiliary_pools,
    held_out_records,
)
from fedleak.strategies import ModelAveraging, SyncSGD
from flower_fakes import LocalGrid
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from property_setup import client_context, property_experiment

from fedleak import protocol
from fedleak.errors import ConfigError, DataError
from fedleak.experiments.config import ExperimentConfig
from fedleak.experiments.runner import make_experiment_client_app
from fedleak.settings import TargetSchedule
from fedleak.task import training_pool
from fedleak.training import batch_gradient


def experiment(**sections: Any) -> ExperimentConfig:
    return property_experiment("property-test", sections)


def message_config(
    config: ExperimentConfig, run_dir: Path, **extra: Any
) -> ConfigRecord:
    return ConfigRecord(
        {
            **config.task().to_config(),
            **config.client_config(str(run_dir)),
            protocol.TRAIN_MODE: protocol.MODE_GRADIENT,
            **extra,
        }
    )


context = client_context


# ------------------------------------------------------------ config


def test_config_sections_validate_and_flatten():
    config = experiment(
        adversary={"property": {"alpha": 0.3, "aux_records": "held-out"}},
        target={"property_rounds": [3, 9]},
    )
    flat = config.client_config("/runs/x")
    assert flat["adversary.kind"] == "passive-property"
    assert flat["adversary.property.alpha"] == 0.3
    assert flat["adversary.property.aux_records"] == "held-out"
    assert experiment().client_config("/r")["adversary.property.aux_records"] == "own"
    with pytest.raises(ConfigError, match=r"adversary.property.aux_records"):
        experiment(adversary={"property": {"aux_records": "fresh"}})
    assert flat["target.property_rounds"] == [3, 9]
    assert flat["protocol.learning-rate"] == 0.1
    assert flat["experiment.run-dir"] == "/runs/x"
    with pytest.raises(ConfigError, match=r"adversary.property.alpah: unknown key"):
        experiment(adversary={"property": {"alpah": 0.3}})
    with pytest.raises(ConfigError, match="cannot be the target"):
        experiment(adversary={"partition": 0})
    with pytest.raises(ConfigError, match=r"target\.property_rounds"):
        experiment(target={"property_rounds": [5, 2]})
    with pytest.raises(ConfigError, match="sync-sgd"):
        experiment(
            adversary={"kind": "active-property"},
            strategy={"name": "model-averaging"},
        )


# ---------------------------------------------------------- schedule


def test_target_schedule_every_m_window_join_and_control():
    every2 = TargetSchedule(property_every=2)
    assert [every2.has_property(r) for r in range(1, 7)] == [0, 1, 0, 1, 0, 1]
    window = TargetSchedule(property_every=1, property_rounds=(3, 5))
    assert [window.has_property(r) for r in range(1, 7)] == [0, 0, 1, 1, 0, 0]
    late = TargetSchedule(property_every=1, join_round=4)
    assert [late.joined(r) for r in (3, 4)] == [False, True]
    assert not late.has_property(3) and late.has_property(4)
    assert not TargetSchedule(property_every=1, control=True).has_property(2)


def test_target_batches_follow_the_schedule_and_the_truth_is_logged(tmp_path):
    config = experiment(target={"property_every": 2, "batch_fraction": 0.5})
    spec = config.task()
    target = PropertyTarget(spec, 0)
    arrays = ArrayRecord(spec.new_model().state_dict())
    state = ConfigRecord({"epoch": 0, "cursor": 0})
    for server_round in (1, 2):
        cfg = message_config(config, tmp_path, **{protocol.SERVER_ROUND: server_round})
        target.bind(context(0), cfg)
        _, metrics = target.gradient_reply(arrays, state)
        assert metrics[protocol.NUM_EXAMPLES] == 16
    lines = (tmp_path / "target" / "truth.jsonl").read_text().splitlines()
    assert '"fraction": 0.0' in lines[0] and '"fraction": 0.5' in lines[1]


def test_a_target_that_has_not_joined_uploads_zeros(tmp_path):
    config = experiment(target={"join_round": 3})
    spec = config.task()
    target = PropertyTarget(spec, 0)
    target.bind(context(0), message_config(config, tmp_path, **{"server-round": 2}))
    arrays = ArrayRecord(spec.new_model().state_dict())
    out, _ = target.gradient_reply(arrays, ConfigRecord({"epoch": 0, "cursor": 0}))
    assert all(not v.numpy().any() for v in out.values())


# ------------------------------------------------------ plain tensors


def test_derived_sgd_aggregate_inverts_the_server_step():
    rng = np.random.default_rng(0)
    before = {"w": rng.normal(size=(4, 3)).astype(np.float32)}
    grads = [{"w": rng.normal(size=(4, 3)).astype(np.float32)} for _ in range(3)]
    total = sum(g["w"].astype(np.float64) for g in grads)
    after = {"w": (before["w"] - 0.1 * total).astype(np.float32)}
    derived = derive_sgd_aggregate(before, after, grads[1], 0.1)
    np.testing.assert_allclose(derived["w"], grads[0]["w"] + grads[2]["w"], atol=1e-5)
    mean_after = {"w": (before["w"] - 0.1 * total / 3).astype(np.float32)}
    derived = derive_sgd_aggregate(before, mean_after, grads[1], 0.1, scale=3)
    np.testing.assert_allclose(derived["w"], grads[0]["w"] + grads[2]["w"], atol=1e-5)


def test_derived_averaging_aggregate_removes_the_adversary_share():
    before = {"w": np.zeros(3), "steps": np.array(4)}
    models = [np.array([1.0, 2.0, 3.0]), np.array([3.0, 0.0, 0.0]), np.ones(3)]
    after = {"w": sum(models) / 3}
    derived = derive_averaging_aggregate(
        before, after, {"w": models[1], "steps": np.array(5)}, 1 / 3
    )
    assert list(derived) == ["w"]
    np.testing.assert_allclose(derived["w"], (models[0] + models[2]) / 3)


def test_summed_batch_gradient_is_the_sum_of_batch_gradients():
    config = experiment()
    spec = config.task()
    model = spec.new_model()
    pools = auxiliary_pools(spec, 1)
    x, y = pools.x_nonprop[:48], pools.y_nonprop[:48]
    summed = summed_batch_gradient(model, x, y, 16)
    parts = [
        batch_gradient(model, x[i : i + 16], y[i : i + 16])[0] for i in (0, 16, 32)
    ]
    for name, value in summed.items():
        np.testing.assert_allclose(value, sum(p[name] for p in parts), atol=1e-5)
    with pytest.raises(DataError):
        summed_batch_gradient(model, x[:20], y[:20], 16)


def test_emulated_pairs_share_the_property_free_batches():
    spec = experiment().task()
    model = spec.new_model()
    pools = auxiliary_pools(spec, 1)
    rng = np.random.default_rng(1)
    pos, neg = emulated_sgd_pair(
        model, pools, batch_size=8, participants=3, prop_fraction=1.0, rng=rng
    )
    assert pos.keys() == neg.keys()
    assert not np.allclose(pos["net.1.weight"], neg["net.1.weight"])
    # same seed, same pair
    again = emulated_sgd_pair(
        model,
        pools,
        batch_size=8,
        participants=3,
        prop_fraction=1.0,
        rng=np.random.default_rng(1),
    )
    np.testing.assert_array_equal(again[0]["net.1.weight"], pos["net.1.weight"])


def test_auxiliary_pools_are_the_partition_with_and_without_the_property():
    spec = experiment().task()
    pools = auxiliary_pools(spec, 1)
    assert pools.x_prop.shape[0] == pools.x_nonprop.shape[0] == 120
    torch.testing.assert_close(pools.y_prop, pools.y_nonprop)
    # the watermark's corner is a checkerboard of 0 and 1; elsewhere unchanged
    corner = pools.x_prop[:, 0, -2:, -2:]
    assert torch.all((corner == 0) | (corner == 1))
    torch.testing.assert_close(pools.x_prop[:, :, :6], pools.x_nonprop[:, :, :6])


def _pool_rows(spec: Any) -> tuple[dict[bytes, int], set[int], np.ndarray]:
    """Row bytes -> pool index, the indices some client holds, has_property."""
    x, _, has_property, parts = training_pool(spec)
    rows = {r.tobytes(): i for i, r in enumerate(x.reshape(x.shape[0], -1))}
    assert len(rows) == x.shape[0]  # every record tells itself apart
    return rows, set(np.concatenate(parts).tolist()), has_property


def test_held_out_auxiliary_pools_are_records_no_client_holds():
    spec = experiment().task()
    pools = auxiliary_pools(spec, 1, "held-out")
    assert pools.x_prop.shape[0] == pools.x_nonprop.shape[0] == 120
    torch.testing.assert_close(pools.y_prop, pools.y_nonprop)
    corner = pools.x_prop[:, 0, -2:, -2:]  # rendered with the watermark
    assert torch.all((corner == 0) | (corner == 1))
    torch.testing.assert_close(pools.x_prop[:, :, :6], pools.x_nonprop[:, :, :6])
    rows, held, has_property = _pool_rows(spec)
    picked = [rows[r.tobytes()] for r in pools.x_nonprop.numpy().reshape(120, -1)]
    assert len(set(picked)) == 120 and not set(picked) & held
    assert not has_property[picked].any()
    _, y_pool, _, _ = training_pool(spec)
    np.testing.assert_array_equal(pools.y_nonprop.numpy(), y_pool[picked])
    # the own pools are the partition's records, which a client holds
    own = auxiliary_pools(spec, 1).x_nonprop.numpy().reshape(-1, 64)
    assert {rows[r.tobytes()] for r in own} <= held
    # seeded: the same draw again, another for another partition
    again, _ = held_out_records(spec, 1, 120)
    np.testing.assert_array_equal(again, pools.x_nonprop.numpy())
    other, _ = held_out_records(spec, 2, 120)
    assert not np.array_equal(other, again)


def test_held_out_auxiliary_pools_refuse_a_short_pool_and_an_unknown_source():
    spec = experiment(data={"property_partition_size": 230}).task()
    with pytest.raises(
        DataError,
        match=r"^held-out auxiliary records: the training pool has 144 records "
        r"without the property outside every partition, the adversary needs 230; "
        r"use adversary.property.aux_records = 'own' or smaller partitions$",
    ):
        auxiliary_pools(spec, 1, "held-out")
    # exactly as many as there are is enough: every free record, once
    rows, held, has_property = _pool_rows(experiment().task())
    free = [
        i for i in range(has_property.size) if i not in held and not has_property[i]
    ]
    x_all, _ = held_out_records(experiment().task(), 1, len(free))
    assert sorted(rows[r.tobytes()] for r in x_all.reshape(len(free), -1)) == free
    with pytest.raises(DataError, match=f"has {len(free)} records"):
        held_out_records(experiment().task(), 1, len(free) + 1)
    assert auxiliary_pools(spec, 1).x_nonprop.shape[0] == 230
    with pytest.raises(ConfigError, match=r"auxiliary records 'fresh': choose from"):
        auxiliary_pools(spec, 1, "fresh")


def test_own_property_pools_are_the_adversary_records_as_trained_on():
    import fedleak.clients.property as property_clients

    property_clients._auxiliary_pools.cache_clear()  # build them here, not cached
    config = experiment(
        data={"property_adversary_fraction": 0.25},
        adversary={"property": {"aux_records": "own-property"}},
    )
    spec = config.task()
    assert (spec.property_adversary, spec.property_adversary_fraction) == (1, 0.25)
    _, y, has_property, parts = training_pool(spec)
    assert [int(has_property[p].sum()) for p in parts] == [60, 30, 0]
    pools = auxiliary_pools(spec, 1, "own-property")
    assert pools.x_prop.shape[0] == 30 and pools.x_nonprop.shape[0] == 90
    rows, _, _ = _pool_rows(spec)
    prop = [rows[r.tobytes()] for r in pools.x_prop.numpy().reshape(30, -1)]
    plain = [rows[r.tobytes()] for r in pools.x_nonprop.numpy().reshape(90, -1)]
    assert set(prop) | set(plain) == set(parts[1].tolist())  # its own, unrendered
    assert has_property[prop].all() and not has_property[plain].any()
    np.testing.assert_array_equal(pools.y_prop.numpy(), y[prop])
    np.testing.assert_array_equal(pools.y_nonprop.numpy(), y[plain])
    # without the data option the adversary holds none: refused, naming it
    with pytest.raises(
        DataError,
        match=r"holds 0 records with the property and 120 without; it needs both "
        r"\(set data\.property_adversary_fraction in \(0, 1\)\)$",
    ):
        auxiliary_pools(experiment().task(), 1, "own-property")
    # only a property adversary may hold them
    with pytest.raises(ConfigError, match=r"data\.property_adversary_fraction: only"):
        experiment(
            data={"property_adversary_fraction": 0.25},
            adversary={"kind": "none"},
        )
    # the split without the option is the one it always was
    assert experiment().task().property_adversary == -1


def test_multitask_gradient_alpha_zero_is_the_plain_gradient():
    spec = experiment().task()
    model = spec.new_model()
    pools = auxiliary_pools(spec, 1)
    x, y = pools.x_nonprop[:16], pools.y_nonprop[:16]
    xp, _, p = pools.batch(16, 0.5, np.random.default_rng(0))
    head = PropertyHead(64, seed=0)
    shared, head_grads, _ = multitask_gradient(model, head, (x, y), (xp, p), 0.0)
    plain, _, _ = batch_gradient(model, x, y)
    for name in plain:
        np.testing.assert_array_equal(shared[name], plain[name])
    assert all(not g.any() for g in head_grads.values())
    with pytest.raises(ConfigError):
        multitask_gradient(model, head, (x, y), (xp, p), 1.5)


# ------------------------------------------------- the adversaries' uploads


def _uploads(
    cls: type[PassivePropertyAdversary], config: ExperimentConfig, run_dir: Path
) -> list[dict[str, np.ndarray]]:
    spec = config.task()
    ctx = context(1)
    arrays = ArrayRecord(spec.new_model().state_dict())
    state = ConfigRecord({"epoch": 0, "cursor": 0})
    uploads = []
    for server_round in (1, 2, 3):
        adversary = cls(spec, 1)
        adversary.bind(
            ctx,
            message_config(config, run_dir, **{protocol.SERVER_ROUND: server_round}),
        )
        out, _ = adversary.gradient_reply(arrays, state)
        uploads.append({k: v.numpy() for k, v in out.items()})
    return uploads


def test_alpha_zero_reproduces_the_passive_uploads_exactly(tmp_path):
    passive = _uploads(PassivePropertyAdversary, experiment(), tmp_path / "p")
    active_config = experiment(adversary={"kind": "active-property"})
    active = _uploads(ActivePropertyAdversary, active_config, tmp_path / "a")
    for p, a in zip(passive, active, strict=True):
        assert p.keys() == a.keys()
        for name in p:
            np.testing.assert_array_equal(p[name], a[name])
    stronger = experiment(
        adversary={"kind": "active-property", "property": {"alpha": 0.5}}
    )
    pushed = _uploads(ActivePropertyAdversary, stronger, tmp_path / "s")
    assert not np.allclose(pushed[0]["net.1.weight"], passive[0]["net.1.weight"])


def test_passive_adversary_emulates_with_the_configured_records(tmp_path, monkeypatch):
    import fedleak.clients.property as property_clients

    sources: list[str] = []
    real = property_clients.auxiliary_pools

    def spy(spec: Any, partition_id: int, source: str = "own") -> Any:
        sources.append(source)
        return real(spec, partition_id, source)

    monkeypatch.setattr(property_clients, "auxiliary_pools", spy)
    own = _uploads(PassivePropertyAdversary, experiment(), tmp_path / "own")
    held_config = experiment(adversary={"property": {"aux_records": "held-out"}})
    held = _uploads(PassivePropertyAdversary, held_config, tmp_path / "held")
    assert sources == ["own"] * 3 + ["held-out"] * 3
    for a, b in zip(own, held, strict=True):  # the honest upload is the same
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    own_obs = load_observations(tmp_path / "own" / "adversary")
    held_obs = load_observations(tmp_path / "held" / "adversary")
    assert own_obs.aux.shape == held_obs.aux.shape == (6, own_obs.aux.shape[1])
    assert not np.allclose(own_obs.aux, held_obs.aux)


@pytest.mark.parametrize("source", ["own", "held-out"])
def test_active_upload_uses_one_batch_for_both_terms(tmp_path, source):
    """Ch. 7.1.5: the upload is the gradient of (1 - alpha) L(x, y) + alpha L(x, p).

    As in the seed, the main and the property term are computed on one
    auxiliary batch (x, y, p), drawn from the adversary's pools with the
    round's seed; the expected gradient is recomputed here from that batch.
    alpha = 0.25 is not its own mirror, so weights swapped onto the main term
    fail, and so does a main term on a different (honest) batch.
    """
    alpha = 0.25
    config = experiment(
        adversary={
            "kind": "active-property",
            "property": {"alpha": alpha, "aux_records": source},
        }
    )
    upload = _uploads(ActivePropertyAdversary, config, tmp_path / "a")[0]
    spec = config.task()
    adversary = ActivePropertyAdversary(spec, 1)
    adversary.bind(
        context(1),
        message_config(config, tmp_path / "b", **{protocol.SERVER_ROUND: 1}),
    )
    x, y, p = auxiliary_pools(spec, 1, source).batch(
        spec.batch_size, 0.5, adversary.rng(0xAC7, 1)
    )
    model = spec.new_model()
    head = PropertyHead(last_linear(model).in_features, seed=spec.seed)
    expected, _, _ = multitask_gradient(model, head, (x, y), (x, p), alpha)
    swapped, _, _ = multitask_gradient(model, head, (x, y), (x, p), 1.0 - alpha)
    assert upload.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(upload[name], expected[name], rtol=1e-4, atol=1e-6)
    assert not np.allclose(upload["net.1.weight"], swapped["net.1.weight"])


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


@pytest.mark.parametrize(
    "strategy", ["sync-sgd", pytest.param("model-averaging", marks=pytest.mark.slow)]
)
def test_derived_aggregate_equals_the_others_sum_in_a_3_client_federation(
    tmp_path, strategy, task_identity
):
    config = experiment(
        strategy={"name": strategy, "learning_rate": 0.1},
        adversary={"property": {"pooling": "raw"}},
    )
    uploads: dict[tuple[int, int], dict[str, np.ndarray]] = {}
    grid = LocalGrid(_recording_app(uploads), {101: 0, 102: 1, 103: 2})
    server = (
        SyncSGD(0.1, min_available_nodes=3, seed=5)
        if strategy == "sync-sgd"
        else ModelAveraging(min_available_nodes=3, seed=5, learning_rate=0.1)
    )
    initial = ArrayRecord(config.task().new_model().state_dict())
    train_config = ConfigRecord(
        {**config.task().to_config(), **config.client_config(str(tmp_path))}
    )
    models: dict[int, dict[str, np.ndarray]] = {}

    def remember(server_round: int, arrays: ArrayRecord) -> None:
        models[server_round] = {k: v.numpy() for k, v in arrays.items()}

    server.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=3,
        train_config=train_config,
        evaluate_fn=remember,
    )
    obs = load_observations(tmp_path / "adversary")
    assert obs.observed_rounds.tolist() == [1, 2]
    for row, server_round in enumerate(obs.observed_rounds.tolist()):
        if strategy == "sync-sgd":
            truth = {
                n: uploads[(0, server_round)][n] + uploads[(2, server_round)][n]
                for n in uploads[(1, server_round)]
            }
        else:
            start = models[server_round - 1]
            truth = {
                n: (uploads[(0, server_round)][n] - start[n]) / 3
                + (uploads[(2, server_round)][n] - start[n]) / 3
                for n in uploads[(1, server_round)]
            }
        expected = gradient_features(truth, "raw")
        scale = np.abs(expected).max()
        np.testing.assert_allclose(obs.observed[row], expected, atol=1e-5 * scale)
    # every round logged a labelled pair per aux pair
    assert obs.aux.shape == (6, obs.observed.shape[1])
    assert obs.aux_labels.tolist() == [1, 0] * 3
