"""Server math and sampling of SyncSGD and ModelAveraging on hand-made replies."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from fedleak.strategies import ModelAveraging, SyncSGD, arrays_to_numpy, numpy_to_arrays
from flower_fakes import FakeGrid, error_reply, reply
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping

from fedleak import protocol
from fedleak.errors import ConfigError, ProtocolError

pytestmark = pytest.mark.usefixtures("task_identity")

NODES = {
    9001: 2,
    17: 0,
    4242: 1,
    5: 3,
}  # node id -> partition id (ids are random in Flower)


def model(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.normal(size=(3, 4)).astype(np.float32),
        "b": rng.normal(size=(4,)).astype(np.float32),
    }


def start_round(strategy, arrays, grid, server_round=1):
    messages = list(
        strategy.configure_train(
            server_round, numpy_to_arrays(arrays), ConfigRecord({"k": 1}), grid
        )
    )
    return messages


# ----------------------------------------------------------------- SyncSGD
@pytest.mark.parametrize("lr", [0.1, 0.037])
def test_sync_sgd_applies_theta_minus_lr_times_sum_of_gradients(lr):
    theta = model()
    grid = FakeGrid(NODES)
    strategy = SyncSGD(lr, min_available_nodes=4)
    messages = start_round(strategy, theta, grid)
    assert len(messages) == 4
    grads = {node: model(seed=node) for node in NODES}
    replies = [reply(node, grads[node], {protocol.NUM_EXAMPLES: 32}) for node in NODES]
    arrays, metrics = strategy.aggregate_train(1, replies)
    new = arrays_to_numpy(arrays)
    for name in theta:
        total = sum(
            grads[n][name].astype(np.float64) for n in sorted(NODES, key=NODES.get)
        )
        expected = (theta[name].astype(np.float64) - lr * total).astype(np.float32)
        np.testing.assert_array_equal(new[name], expected)
        assert new[name].dtype == np.float32
    assert metrics["num-replies"] == 4 and metrics["num-errors"] == 0


def test_sync_sgd_mean_reduction_divides_by_number_of_gradients():
    theta = model()
    grid = FakeGrid(NODES)
    strategy = SyncSGD(0.5, reduction="mean", min_available_nodes=4)
    start_round(strategy, theta, grid)
    g = {name: np.ones_like(v) for name, v in theta.items()}
    arrays, _ = strategy.aggregate_train(1, [reply(n, g) for n in NODES])
    np.testing.assert_allclose(
        arrays_to_numpy(arrays)["w"], theta["w"] - 0.5, rtol=1e-6
    )


def test_sync_sgd_messages_ask_for_gradients_and_carry_config():
    grid = FakeGrid(NODES)
    strategy = SyncSGD(0.1, min_available_nodes=4)
    messages = start_round(strategy, model(), grid, server_round=7)
    for message in messages:
        config = message.content[protocol.CONFIG_KEY]
        assert config[protocol.TRAIN_MODE] == protocol.MODE_GRADIENT
        assert config[protocol.SERVER_ROUND] == 7
        assert config["k"] == 1
        assert message.metadata.message_type == "train"
    # messages go out in partition order
    assert [NODES[m.metadata.dst_node_id] for m in messages] == [0, 1, 2, 3]


def test_sync_sgd_skips_and_counts_errors_missing_and_malformed(caplog):
    theta = model()
    grid = FakeGrid(NODES)
    strategy = SyncSGD(1.0, min_available_nodes=4)
    start_round(strategy, theta, grid)
    good = {name: np.full_like(v, 2.0) for name, v in theta.items()}
    bad_shape = {"w": np.zeros((4, 3), np.float32)}
    replies = [
        reply(17, good),
        error_reply(
            9001, "Traceback (most recent call last):\n  ...\nValueError: disk full"
        ),
        reply(4242, bad_shape),
        # node 5 never replies
    ]
    with caplog.at_level(logging.WARNING, logger="flwr"):
        arrays, metrics = strategy.aggregate_train(1, replies)
    new = arrays_to_numpy(arrays)
    np.testing.assert_allclose(new["w"], theta["w"] - 2.0, rtol=1e-6)
    assert metrics["num-sampled"] == 4
    assert metrics["num-replies"] == 1
    assert metrics["num-errors"] == 1
    assert metrics["num-missing"] == 1
    assert metrics["num-rejected"] == 1
    assert "shape" in caplog.text
    assert "error reply from node 9001: ValueError: disk full" in caplog.text
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    "bad",
    [
        {"unknown": np.zeros(4, np.float32)},
        {"w": np.full((3, 4), np.nan, np.float32)},
    ],
)
def test_sync_sgd_rejects_unknown_or_non_finite_gradients(bad):
    theta = model()
    grid = FakeGrid(NODES)
    strategy = SyncSGD(1.0, min_available_nodes=4)
    start_round(strategy, theta, grid)
    arrays, metrics = strategy.aggregate_train(1, [reply(17, bad)])
    assert arrays is None
    assert metrics["num-rejected"] == 1


def test_sync_sgd_partial_gradient_leaves_other_arrays_unchanged():
    theta = model()
    grid = FakeGrid(NODES)
    strategy = SyncSGD(1.0, min_available_nodes=4)
    start_round(strategy, theta, grid)
    arrays, _ = strategy.aggregate_train(1, [reply(17, {"b": np.ones(4, np.float32)})])
    new = arrays_to_numpy(arrays)
    np.testing.assert_array_equal(new["w"], theta["w"])
    np.testing.assert_allclose(new["b"], theta["b"] - 1.0, rtol=1e-6)


def test_sync_sgd_rejects_reply_without_weight():
    theta = model()
    grid = FakeGrid(NODES)
    strategy = SyncSGD(1.0, min_available_nodes=4)
    start_round(strategy, theta, grid)
    _, metrics = strategy.aggregate_train(1, [reply(17, theta, {"loss": 1.0})])
    assert metrics["num-rejected"] == 1


def test_aggregate_before_configure_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="before configure_train"):
        SyncSGD(0.1).aggregate_train(3, [])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"learning_rate": -0.1},
        {"learning_rate": 0.0},
        {"learning_rate": 0.1, "reduction": "max"},
        {"learning_rate": 0.1, "fraction_train": 1.5},
        {"learning_rate": 0.1, "min_available_nodes": 0},
    ],
)
def test_sync_sgd_rejects_bad_arguments(kwargs):
    with pytest.raises(ConfigError):
        SyncSGD(**kwargs)


# ----------------------------------------------------------- ModelAveraging
def test_model_averaging_is_the_nk_weighted_mean():
    theta = model()
    grid = FakeGrid(NODES)
    strategy = ModelAveraging(min_available_nodes=4, local_epochs=2, learning_rate=0.01)
    messages = start_round(strategy, theta, grid)
    config = messages[0].content[protocol.CONFIG_KEY]
    assert config[protocol.TRAIN_MODE] == protocol.MODE_MODEL
    assert config[protocol.LOCAL_EPOCHS] == 2 and config[protocol.LEARNING_RATE] == 0.01
    locals_ = {node: model(seed=node) for node in NODES}
    sizes = {9001: 10, 17: 300, 4242: 7, 5: 55}
    replies = [
        reply(
            node,
            locals_[node],
            {protocol.NUM_EXAMPLES: sizes[node], "train-loss": float(node)},
        )
        for node in NODES
    ]
    arrays, metrics = strategy.aggregate_train(1, replies)
    new = arrays_to_numpy(arrays)
    n = sum(sizes.values())
    for name in theta:
        expected = sum(
            sizes[k] / n * locals_[k][name].astype(np.float64) for k in NODES
        )
        np.testing.assert_allclose(
            new[name], expected.astype(np.float32), rtol=1e-6, atol=1e-7
        )
    expected_loss = sum(sizes[k] * k for k in NODES) / n
    assert metrics["train-loss"] == pytest.approx(expected_loss)
    assert metrics["num-replies"] == 4


def test_model_averaging_rounds_integer_arrays():
    theta = {"w": np.zeros(2, np.float32), "count": np.array([0], np.int64)}
    grid = FakeGrid(NODES)
    strategy = ModelAveraging(min_available_nodes=4)
    start_round(strategy, theta, grid)
    replies = [
        reply(
            17,
            {"w": np.ones(2, np.float32), "count": np.array([3])},
            {protocol.NUM_EXAMPLES: 1},
        ),
        reply(
            5,
            {"w": np.ones(2, np.float32), "count": np.array([4])},
            {protocol.NUM_EXAMPLES: 2},
        ),
    ]
    arrays, _ = strategy.aggregate_train(1, replies)
    new = arrays_to_numpy(arrays)
    assert new["count"].dtype == np.int64 and new["count"][0] == 4  # rint(11/3)


def test_model_averaging_rejects_incomplete_models():
    theta = model()
    grid = FakeGrid(NODES)
    strategy = ModelAveraging(min_available_nodes=4)
    start_round(strategy, theta, grid)
    partial = {"w": theta["w"]}
    arrays, metrics = strategy.aggregate_train(
        1, [reply(17, partial), reply(5, theta, {protocol.NUM_EXAMPLES: 0})]
    )
    assert arrays is None
    assert metrics["num-rejected"] == 2


def test_model_averaging_samples_fraction_c_with_at_least_one():
    grid = FakeGrid({i + 100: i for i in range(10)})
    assert (
        len(
            start_round(
                ModelAveraging(fraction_train=0.3, min_available_nodes=10),
                model(),
                grid,
            )
        )
        == 3
    )
    assert (
        len(
            start_round(
                ModelAveraging(fraction_train=0.01, min_available_nodes=10),
                model(),
                grid,
            )
        )
        == 1
    )


# ---------------------------------------------------------------- sampling
def sampled_partitions(seed, nodes, rounds=5):
    strategy = ModelAveraging(
        fraction_train=0.3, min_available_nodes=len(nodes), seed=seed
    )
    grid = FakeGrid(nodes)
    out = []
    for r in range(1, rounds + 1):
        messages = start_round(strategy, model(), grid, server_round=r)
        out.append([nodes[m.metadata.dst_node_id] for m in messages])
    return out


def test_sampling_is_reproducible_for_a_seed_whatever_the_node_ids():
    rng = np.random.default_rng(1)
    run_a = {int(i): p for p, i in enumerate(rng.integers(1, 2**62, size=10))}
    run_b = {int(i): p for p, i in enumerate(rng.integers(1, 2**62, size=10))}
    assert set(run_a) != set(run_b)
    first = sampled_partitions(3, run_a)
    assert first == sampled_partitions(3, run_b)
    assert first != sampled_partitions(4, run_a)
    assert len({tuple(r) for r in first}) > 1  # rounds differ from each other


def test_identify_query_is_sent_once_per_node():
    grid = FakeGrid(NODES)
    strategy = SyncSGD(0.1, min_available_nodes=4)
    for r in (1, 2, 3):
        start_round(strategy, model(), grid, server_round=r)
    queries = [
        m
        for m in grid.sent
        if m.metadata.message_type == protocol.IDENTIFY_MESSAGE_TYPE
    ]
    assert len(queries) == 4
    assert strategy.partition_of == NODES
    assert strategy.sampled_partitions(3) == [0, 1, 2, 3]


def test_nodes_without_identity_are_ordered_by_node_id_after_the_others(caplog):
    grid = FakeGrid(NODES, no_identity=[17, 5])
    strategy = SyncSGD(0.1, min_available_nodes=4)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        messages = start_round(strategy, model(), grid)
    assert [m.metadata.dst_node_id for m in messages] == [4242, 9001, 5, 17]
    assert "not reproducible" in caplog.text


def test_strategy_waits_for_the_expected_nodes_before_round_one():
    grid = FakeGrid(NODES, appear_after=3)
    messages = start_round(SyncSGD(0.1, min_available_nodes=4), model(), grid)
    assert len(messages) == 4
    assert grid.calls > 3


def test_strategy_fails_clearly_when_nodes_never_come():
    grid = FakeGrid(NODES)
    strategy = SyncSGD(0.1, min_available_nodes=5, node_wait_timeout=0.2)
    with pytest.raises(ProtocolError, match="only 4 of the 5 expected nodes"):
        start_round(strategy, model(), grid)


# ------------------------------------------------------------- evaluation
def test_federated_evaluation_averages_metrics_and_counts_failures():
    grid = FakeGrid(NODES)
    strategy = ModelAveraging(min_available_nodes=4, fraction_evaluate=0.5)
    messages = list(
        strategy.configure_evaluate(2, numpy_to_arrays(model()), ConfigRecord(), grid)
    )
    assert len(messages) == 2 and all(
        m.metadata.message_type == "evaluate" for m in messages
    )
    nodes = [m.metadata.dst_node_id for m in messages]
    replies = [
        reply(
            nodes[0],
            None,
            {protocol.NUM_EXAMPLES: 30, "eval-accuracy": 0.5},
            "evaluate",
        ),
        reply(
            nodes[1],
            None,
            {protocol.NUM_EXAMPLES: 10, "eval-accuracy": 0.9},
            "evaluate",
        ),
    ]
    metrics = strategy.aggregate_evaluate(2, replies)
    assert metrics["eval-accuracy"] == pytest.approx(0.6)
    assert metrics["num-replies"] == 2


def test_evaluation_disabled_sends_nothing():
    grid = FakeGrid(NODES)
    strategy = SyncSGD(0.1, min_available_nodes=4)
    assert (
        list(strategy.configure_evaluate(1, ArrayRecord(), ConfigRecord(), grid)) == []
    )


# ---------------------------------------------------- composition with Flower DP
def test_flower_dp_fixed_clipping_wraps_model_averaging():
    theta = model()
    grid = FakeGrid(NODES)
    inner = ModelAveraging(min_available_nodes=4)
    wrapped = DifferentialPrivacyServerSideFixedClipping(
        inner, noise_multiplier=0.0, clipping_norm=0.5, num_sampled_clients=4
    )
    messages = list(
        wrapped.configure_train(1, numpy_to_arrays(theta), ConfigRecord(), grid)
    )
    assert len(messages) == 4
    far = {name: v + 10.0 for name, v in theta.items()}
    arrays, _ = wrapped.aggregate_train(1, [reply(n, far) for n in NODES])
    new = arrays_to_numpy(arrays)
    delta = np.concatenate([(new[k] - theta[k]).ravel() for k in theta])
    assert np.linalg.norm(delta) == pytest.approx(0.5, rel=1e-4)  # clipped update
