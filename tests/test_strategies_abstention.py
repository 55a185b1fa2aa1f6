"""A client that has not joined yet (weight 0, ``abstained``) takes no part.

Seed 000 Fig. 7.9: ``K = 2`` until the target joins, then ``K = 3``. With
three sampled clients of which one abstains, every aggregate must be the
aggregate of the other two, bit for bit in the clear and within the
fixed-point bound under secure aggregation; a zero weight without the flag,
a negative weight, or the flag with a positive weight stay malformed.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
from fedleak.clients import add_identify_handler
from fedleak.clients.secagg import make_secagg_mod
from fedleak.strategies import (
    ModelAveraging,
    SecureAggregation,
    SyncSGD,
    arrays_to_numpy,
    numpy_to_arrays,
)
from flower_fakes import FakeGrid, LocalGrid, reply
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import Strategy

from fedleak import protocol

pytestmark = pytest.mark.usefixtures("task_identity")

THREE = {9001: 2, 17: 0, 4242: 1}  # node id -> partition id
TWO = {17: 0, 4242: 1}
ABSTAIN = {protocol.NUM_EXAMPLES: 0, protocol.ABSTAINED: 1}


def model(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.normal(size=(3, 4)).astype(np.float32),
        "b": rng.normal(size=(4,)).astype(np.float32),
    }


def configure(strategy: Strategy, grid, server_round: int = 1):  # type: ignore[no-untyped-def]
    return list(
        strategy.configure_train(
            server_round, numpy_to_arrays(model()), ConfigRecord(), grid
        )
    )


def joined_replies(sizes: dict[int, int]) -> list:  # type: ignore[type-arg]
    return [
        reply(node, model(seed=node), {protocol.NUM_EXAMPLES: n, "train-loss": 0.5})
        for node, n in sizes.items()
    ]


# ------------------------------------------------------------ in the clear
def test_model_averaging_with_an_abstaining_third_equals_two_clients_bit_for_bit():
    sizes = {17: 30, 4242: 90}
    three = ModelAveraging(min_available_nodes=3)
    configure(three, FakeGrid(THREE))
    # the abstainer sends the global model back, as the late-joining target does
    arrays, metrics = three.aggregate_train(
        1, [*joined_replies(sizes), reply(9001, model(), ABSTAIN)]
    )
    two = ModelAveraging(min_available_nodes=2)
    configure(two, FakeGrid(TWO))
    expected, expected_metrics = two.aggregate_train(1, joined_replies(sizes))
    got, want = arrays_to_numpy(arrays), arrays_to_numpy(expected)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes()
    assert metrics["num-replies"] == 2 and metrics["num-abstained"] == 1
    assert metrics["num-rejected"] == 0
    assert metrics[protocol.AGGREGATED_EXAMPLES] == 120.0
    assert metrics["train-loss"] == expected_metrics["train-loss"]


def test_sync_sgd_mean_leaves_the_abstainer_out_of_k_bit_for_bit():
    sizes = {17: 16, 4242: 16}
    three = SyncSGD(0.3, reduction="mean", min_available_nodes=3)
    configure(three, FakeGrid(THREE))
    zero = {k: np.zeros_like(v) for k, v in model().items()}
    arrays, metrics = three.aggregate_train(
        1, [*joined_replies(sizes), reply(9001, zero, ABSTAIN)]
    )
    two = SyncSGD(0.3, reduction="mean", min_available_nodes=2)
    configure(two, FakeGrid(TWO))
    expected, _ = two.aggregate_train(1, joined_replies(sizes))
    got, want = arrays_to_numpy(arrays), arrays_to_numpy(expected)
    for name in want:
        assert got[name].tobytes() == want[name].tobytes()
    # the mean over 3 (the abstainer counted) would differ
    theta = model()
    over3 = theta["w"] - 0.3 * (model(17)["w"] + model(4242)["w"]) / 3
    assert not np.allclose(got["w"], over3)
    assert metrics["num-replies"] == 2 and metrics["num-abstained"] == 1


def test_an_abstaining_reply_needs_no_arrays():
    strategy = ModelAveraging(min_available_nodes=3)
    configure(strategy, FakeGrid(THREE))
    arrays, metrics = strategy.aggregate_train(
        1, [*joined_replies({17: 5, 4242: 5}), reply(9001, None, ABSTAIN)]
    )
    assert arrays is not None
    assert metrics["num-abstained"] == 1 and metrics["num-rejected"] == 0


def test_a_round_where_everyone_abstains_keeps_the_model():
    strategy = ModelAveraging(min_available_nodes=3)
    configure(strategy, FakeGrid(THREE))
    arrays, metrics = strategy.aggregate_train(
        1, [reply(node, model(), ABSTAIN) for node in THREE]
    )
    assert arrays is None
    assert metrics["num-replies"] == 0 and metrics["num-abstained"] == 3
    assert protocol.AGGREGATED_EXAMPLES not in metrics


@pytest.mark.parametrize(
    ("metrics", "reason"),
    [
        # a client that has joined cannot weigh 0: it must say it abstains
        (
            {protocol.NUM_EXAMPLES: 0},
            "reply from node 9001 has num-examples=0; expected a positive number"
            " (a client that sits the round out also sets abstained=1)",
        ),
        (
            {protocol.NUM_EXAMPLES: -3},
            "reply from node 9001 has num-examples=-3; expected a positive number",
        ),
        (
            {protocol.NUM_EXAMPLES: 12, protocol.ABSTAINED: 1},
            "reply from node 9001 abstains (abstained=1) but has num-examples=12;"
            " an abstaining reply must weigh 0",
        ),
        (
            {protocol.NUM_EXAMPLES: 0, protocol.ABSTAINED: 2},
            "reply from node 9001 has abstained=2; expected 1 (sits the round out)"
            " or 0",
        ),
    ],
)
def test_zero_or_negative_weights_and_inconsistent_flags_are_rejected(
    metrics, reason, caplog
):
    strategy = ModelAveraging(min_available_nodes=3)
    configure(strategy, FakeGrid(THREE))
    with caplog.at_level(logging.WARNING, logger="flwr"):
        arrays, round_metrics = strategy.aggregate_train(
            1, [*joined_replies({17: 5, 4242: 5}), reply(9001, model(9), metrics)]
        )
    assert round_metrics["num-rejected"] == 1
    assert round_metrics["num-abstained"] == 0
    assert round_metrics["num-replies"] == 2
    # the whole reason, to the end of its line
    assert re.search(re.escape(reason) + "$", caplog.text, re.MULTILINE), caplog.text
    assert arrays is not None


def test_the_flag_set_to_zero_is_an_ordinary_reply():
    strategy = SyncSGD(0.1, min_available_nodes=3)
    configure(strategy, FakeGrid(THREE))
    grad = {k: np.ones_like(v) for k, v in model().items()}
    _, metrics = strategy.aggregate_train(
        1, [reply(9001, grad, {protocol.NUM_EXAMPLES: 4, protocol.ABSTAINED: 0})]
    )
    assert metrics["num-replies"] == 1 and metrics["num-abstained"] == 0


def test_model_averaging_announces_the_previous_rounds_n():
    strategy = ModelAveraging(min_available_nodes=3)
    grid = FakeGrid(THREE)
    first = configure(strategy, grid, 1)
    assert all(
        protocol.PREVIOUS_AGGREGATED_EXAMPLES not in m.content[protocol.CONFIG_KEY]
        for m in first
    )
    strategy.aggregate_train(
        1, [*joined_replies({17: 30, 4242: 90}), reply(9001, model(), ABSTAIN)]
    )
    second = configure(strategy, grid, 2)
    for message in second:
        config = message.content[protocol.CONFIG_KEY]
        assert config[protocol.PREVIOUS_AGGREGATED_EXAMPLES] == 120.0
    # only the round right before is announced: round 2 produced nothing
    strategy.aggregate_train(2, [reply(n, model(), ABSTAIN) for n in THREE])
    third = configure(strategy, grid, 3)
    assert all(
        protocol.PREVIOUS_AGGREGATED_EXAMPLES not in m.content[protocol.CONFIG_KEY]
        for m in third
    )


def test_model_averaging_withholds_n_when_asked():
    strategy = ModelAveraging(min_available_nodes=3, announce_weight=False)
    grid = FakeGrid(THREE)
    configure(strategy, grid, 1)
    _, metrics = strategy.aggregate_train(1, joined_replies({17: 3, 4242: 4}))
    assert metrics[protocol.AGGREGATED_EXAMPLES] == 7.0  # still a round metric
    for message in configure(strategy, grid, 2):
        assert (
            protocol.PREVIOUS_AGGREGATED_EXAMPLES
            not in message.content[protocol.CONFIG_KEY]
        )


# ------------------------------------------------- under secure aggregation
SIX = {9001 + 7 * p: p for p in range(6)}


def update(partition: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(100 + partition)
    return {k: rng.normal(size=v.shape).astype(np.float32) for k, v in model().items()}


def secure_app(abstaining: set[int]) -> ClientApp:
    """Partitions in ``abstaining`` sit the round out (the global model back)."""
    app = ClientApp(mods=[make_secagg_mod(accept_thesis=True)])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        if partition in abstaining:
            arrays = msg.content.array_records[protocol.ARRAYS_KEY]
            metrics = MetricRecord(ABSTAIN)
        else:
            arrays = ArrayRecord({k: Array(v) for k, v in update(partition).items()})
            metrics = MetricRecord(
                {protocol.NUM_EXAMPLES: 10 + partition, "train-loss": 0.1}
            )
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    return add_identify_handler(app)


def secure_round(strategy: Strategy, abstaining: set[int]):  # type: ignore[no-untyped-def]
    grid = LocalGrid(secure_app(abstaining), SIX)
    messages = configure(strategy, grid)
    arrays, metrics = strategy.aggregate_train(1, grid.send_and_receive(messages))
    return (None if arrays is None else arrays_to_numpy(arrays)), metrics


@pytest.mark.parametrize("mode", ["double-masking", "thesis"])
def test_secure_model_averaging_with_abstainers_is_the_others_mean(mode):
    secure = SecureAggregation(
        ModelAveraging(min_available_nodes=6), clip=8.0, mode=mode
    )
    new, metrics = secure_round(secure, {2, 5})
    joined = [0, 1, 3, 4]
    n = sum(10 + p for p in joined)
    bound = secure.fixed_point(6).max_abs_error(6) / n + 1e-6  # float32 cast
    for name in model():
        expected = sum((10 + p) * update(p)[name].astype(np.float64) for p in joined)
        assert np.max(np.abs(new[name] - expected / n)) <= bound
    # every member stays in its masking group: nobody dropped, nothing refused
    assert metrics["num-replies"] == 6 and metrics["secagg-dropped"] == 0
    assert metrics["secagg-refusals"] == 0 and metrics["secagg-clipped"] == 0
    assert metrics[protocol.AGGREGATED_EXAMPLES] == float(n)


def test_secure_sync_sgd_mean_divides_by_the_members_that_took_part():
    secure = SecureAggregation(
        SyncSGD(0.5, reduction="mean", min_available_nodes=6), clip=8.0
    )
    new, metrics = secure_round(secure, {1})
    joined = [0, 2, 3, 4, 5]
    bound = secure.fixed_point(6).max_abs_error(6) * 0.5 / len(joined) + 1e-6
    for name, theta in model().items():
        total = sum(update(p)[name].astype(np.float64) for p in joined)
        expected = theta.astype(np.float64) - 0.5 * total / len(joined)
        assert np.max(np.abs(new[name] - expected)) <= bound
    assert metrics["secagg-dropped"] == 0


def test_secure_round_where_everyone_abstains_keeps_the_model():
    secure = SecureAggregation(ModelAveraging(min_available_nodes=6), clip=8.0)
    new, metrics = secure_round(secure, set(range(6)))
    assert new is None
    assert metrics["secagg-dropped"] == 0 and metrics["secagg-refusals"] == 0


def test_secure_abstention_with_a_positive_weight_is_an_error_reply():
    app = ClientApp(mods=[make_secagg_mod()])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        weight = {protocol.NUM_EXAMPLES: 10}
        if partition == 3:
            weight[protocol.ABSTAINED] = 1  # says it sits out, yet weighs 10
        return Message(
            RecordDict(
                {
                    "arrays": ArrayRecord(
                        {k: Array(v) for k, v in update(partition).items()}
                    ),
                    "metrics": MetricRecord(weight),
                }
            ),
            reply_to=msg,
        )

    grid = LocalGrid(add_identify_handler(app), SIX)
    secure = SecureAggregation(ModelAveraging(min_available_nodes=6), clip=8.0)
    messages = configure(secure, grid)
    replies = grid.send_and_receive(messages)
    errors = [r for r in replies if r.has_error()]
    assert len(errors) == 1
    assert "must have num-examples=0, got 10" in errors[0].error.reason
    new, metrics = secure.aggregate_train(1, replies)
    # the five others still aggregate (node 3 counts as dropped)
    assert new is not None and metrics["num-replies"] == 5
