"""The strategies' contract, case by case: every refusal and warning with its
full text, the node identification and its one-node probe, the seeded
sampling streams, the reply ordering and counting, and the summaries.

Hand-made replies and scripted grids (:mod:`flower_fakes`); no Flower
simulation.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
import pytest
from fedleak.strategies import (
    ModelAveraging,
    PartitionAwareStrategy,
    RoundReplies,
    SyncSGD,
    arrays_to_numpy,
    numpy_to_arrays,
)
from fedleak.strategies import base as strategy_base
from fedleak.strategies.base import _last_line
from flower_fakes import FakeGrid, error_reply, reply
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

from fedleak import protocol
from fedleak.errors import ConfigError, ProtocolError
from fedleak.federated import average_models, sgd_step

pytestmark = pytest.mark.usefixtures("task_identity")

NODES = {9001: 2, 17: 0, 4242: 1, 5: 3}  # node id -> partition id


def _model() -> dict[str, np.ndarray]:
    return {"w": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)}


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


class _RecordingGrid(FakeGrid):
    """A FakeGrid that keeps each batch of identify queries and its timeout."""

    def __init__(self, partitions: dict[int, int], **kwargs: object) -> None:
        super().__init__(partitions, **kwargs)  # type: ignore[arg-type]
        self.batches: list[tuple[list[int], float | None]] = []

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        messages = list(messages)
        kinds = {m.metadata.message_type for m in messages}
        if kinds <= {protocol.IDENTIFY_MESSAGE_TYPE}:  # an empty batch too
            self.batches.append(([m.metadata.dst_node_id for m in messages], timeout))
        return super().send_and_receive(messages, timeout=timeout)


class _Bare(PartitionAwareStrategy):
    """The smallest subclass: the base class's defaults, unchanged."""

    def configure_train(self, server_round, arrays, config, grid):  # type: ignore[no-untyped-def]
        return self.configure_train_round(server_round, arrays, config, grid, {})

    def aggregate_train(self, server_round, replies):  # type: ignore[no-untyped-def]
        return None, None


class _Clock:
    """A stand-in for the ``time`` module: each sleep advances the clock by
    ``poll`` seconds (exact in binary), whatever was asked for."""

    def __init__(self, poll: float = 0.125) -> None:
        self.now = 1000.0
        self.poll = poll
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += self.poll


# ------------------------------------------------------------ construction


def test_base_defaults() -> None:
    s = _Bare()
    assert (s.fraction_train, s.min_train_nodes) == (1.0, 1)
    assert (s.fraction_evaluate, s.min_evaluate_nodes) == (0.0, 1)
    assert (s.min_available_nodes, s.seed) == (2, 0)
    assert (s.node_wait_timeout, s.identify_timeout) == (300.0, 60.0)
    assert s.weighted_by_key == protocol.NUM_EXAMPLES and s.identify_nodes is True


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fraction_train": 1.5}, r"^fraction_train must be in \[0, 1\]; got 1\.5\.$"),
        (
            {"fraction_evaluate": -0.1},
            r"^fraction_evaluate must be in \[0, 1\]; got -0\.1\.$",
        ),
        ({"min_train_nodes": 0}, r"^min_train_nodes must be an integer >= 1; got 0\.$"),
        (
            {"min_evaluate_nodes": 0},
            r"^min_evaluate_nodes must be an integer >= 1; got 0\.$",
        ),
        (
            {"min_available_nodes": 0},
            r"^min_available_nodes must be an integer >= 1; got 0\.$",
        ),
        ({"seed": -1}, r"^seed must be an integer >= 0; got -1\.$"),
        (
            {"node_wait_timeout": 0.0},
            r"^node_wait_timeout and identify_timeout must be > 0$",
        ),
        (
            {"identify_timeout": 0.0},
            r"^node_wait_timeout and identify_timeout must be > 0$",
        ),
    ],
)
def test_base_refusals_name_the_argument(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _Bare(**kwargs)  # type: ignore[arg-type]


def test_base_accepts_its_boundaries() -> None:
    s = _Bare(
        min_train_nodes=1,
        min_evaluate_nodes=1,
        min_available_nodes=1,
        seed=0,
        node_wait_timeout=0.5,
        identify_timeout=0.5,
    )
    assert (s.min_available_nodes, s.node_wait_timeout, s.identify_timeout) == (
        1,
        0.5,
        0.5,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"fraction_train": 0.0},
            r"^fraction_train \(C\) must be > 0 for model averaging$",
        ),
        ({"local_epochs": 0}, r"^local_epochs must be an integer >= 1, got 0$"),
        ({"local_epochs": True}, r"^local_epochs must be an integer >= 1, got True$"),
        ({"local_epochs": 1.5}, r"^local_epochs must be an integer >= 1, got 1\.5$"),
        ({"learning_rate": 0.0}, r"^learning_rate must be > 0, got 0\.0$"),
    ],
)
def test_model_averaging_refusals(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelAveraging(**kwargs)  # type: ignore[arg-type]


def test_model_averaging_accepts_one_local_epoch() -> None:
    assert ModelAveraging(local_epochs=1, learning_rate=1e-9).local_epochs == 1


def test_sync_sgd_refusals() -> None:
    with pytest.raises(ConfigError, match=r"^learning_rate must be > 0, got 0$"):
        SyncSGD(0)
    with pytest.raises(
        ConfigError, match=r"^reduction must be 'sum' or 'mean', got 'max'$"
    ):
        SyncSGD(0.1, reduction="max")  # type: ignore[arg-type]


def test_sgd_step_and_average_refusals_in_full() -> None:
    theta = {"w": np.zeros(2, np.float32)}
    grads = [{"w": np.ones(2)}]
    for lr in (float("inf"), 0.0):
        with pytest.raises(
            ConfigError, match=rf"^learning_rate must be > 0 and finite, got {lr}$"
        ):
            sgd_step(theta, grads, lr)
    with pytest.raises(ConfigError, match=r"^noise_std needs a noise_rng$"):
        sgd_step(theta, grads, 0.1, noise_std=1.0)
    with pytest.raises(ConfigError, match=r"^server momentum needs a momentum buffer$"):
        sgd_step(theta, grads, 0.1, momentum=0.9)
    with pytest.raises(
        ConfigError, match=r"^model averaging needs at least one local model$"
    ):
        average_models(theta, [])


def test_sgd_step_sums_gradients_after_one_that_lacks_the_array() -> None:
    theta = {"w": np.zeros(2, np.float32), "b": np.zeros(1, np.float32)}
    grads = [{"b": np.ones(1)}, {"w": np.ones(2)}, {"w": np.ones(2), "b": np.ones(1)}]
    new = sgd_step(theta, grads, 0.5)
    np.testing.assert_array_equal(new["w"], [-1.0, -1.0])
    np.testing.assert_array_equal(new["b"], [-1.0])


def test_sgd_step_noise_needs_both_the_scale_and_the_generator() -> None:
    """A generator alone adds no noise (and draws nothing)."""
    theta = {"w": np.zeros(2, np.float32)}
    rng = np.random.default_rng(3)
    new = sgd_step(theta, [{"w": np.ones(2)}], 1.0, noise_rng=rng)
    np.testing.assert_array_equal(new["w"], [-1.0, -1.0])
    assert rng.random() == np.random.default_rng(3).random()


def test_sgd_step_momentum_buffer_needs_a_coefficient() -> None:
    """A buffer without momentum is left alone; with it, ``m = mu m + s``."""
    theta = {"w": np.zeros(1, np.float32)}
    buffer = {"w": np.array([4.0])}
    new = sgd_step(theta, [{"w": np.ones(1)}], 1.0, momentum_buffer=buffer)
    np.testing.assert_array_equal(new["w"], [-1.0])
    np.testing.assert_array_equal(buffer["w"], [4.0])
    sgd_step(theta, [{"w": np.ones(1)}], 1.0, momentum=0.5, momentum_buffer=buffer)
    np.testing.assert_array_equal(buffer["w"], [3.0])  # 0.5 * 4 + 1


def test_float16_models_are_stepped_and_averaged_in_float64() -> None:
    """A float16 model's arithmetic is float64: 2048 + 1 is 2048 in float16,
    the float64 sum keeps it until the final cast (2049 rounds to even, 2050
    survives)."""
    theta = {"w": np.array([2048.0], np.float16)}
    grads = [{"w": np.array([-1.0], np.float16)}, {"w": np.array([-1.0], np.float16)}]
    assert sgd_step(theta, grads, 1.0)["w"][0] == 2050.0
    decayed = sgd_step(theta, [{"w": np.zeros(1, np.float16)}], 1.0, weight_decay=-1e-3)
    assert decayed["w"][0] == np.float16(2048.0 * (1 + 1e-3))
    models = [({"w": np.array([2048.0], np.float16)}, 1.0)] * 2 + [
        ({"w": np.array([2056.0], np.float16)}, 2.0)
    ]
    assert average_models(theta, models)["w"][0] == 2052.0


# ----------------------------------------------------------------- waiting


def test_waiting_polls_every_50_ms_and_announces_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = _Clock()
    monkeypatch.setattr(strategy_base, "time", clock)
    grid = FakeGrid(NODES, appear_after=4)
    with caplog.at_level(logging.INFO, logger="flwr"):
        nodes = SyncSGD(0.1, min_available_nodes=4).wait_for_nodes(grid)
    assert nodes == list(NODES)
    assert clock.sleeps == [0.05] * 4
    waits = [m for m in _messages(caplog, logging.INFO) if m.startswith("Waiting")]
    assert waits == ["Waiting for nodes: 0 of 4 connected"]


def test_exactly_the_expected_nodes_need_no_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr(strategy_base, "time", clock)
    assert SyncSGD(0.1, min_available_nodes=4).wait_for_nodes(FakeGrid(NODES))
    assert clock.sleeps == []


def test_waiting_fails_after_the_timeout_naming_the_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr(strategy_base, "time", clock)
    strategy = SyncSGD(0.1, min_available_nodes=5, node_wait_timeout=1.0)
    with pytest.raises(
        ProtocolError,
        match=r"^only 4 of the 5 expected nodes connected within 1 s; start more "
        r"SuperNodes or lower min_available_nodes$",
    ):
        strategy.wait_for_nodes(FakeGrid(NODES))
    # polls of 1/8 s: at the deadline itself (8 polls) it still looks once more
    assert len(clock.sleeps) == 9


# ---------------------------------------------------------- identification


def test_identification_probes_one_node_then_asks_the_rest() -> None:
    grid = _RecordingGrid(NODES)
    strategy = SyncSGD(0.1, min_available_nodes=4, identify_timeout=7.5)
    strategy.ordered_nodes(grid)
    first, *others = list(NODES)
    assert grid.batches == [([first], 7.5), (others, 7.5)]
    assert strategy.partition_of == NODES
    grid.partitions = {**NODES, 77: 4}
    strategy.ordered_nodes(grid)  # a new node later: asked alone, no probe
    assert grid.batches[2:] == [([77], 7.5)]
    grid.partitions = {**NODES, 77: 4, 78: 5, 79: 6}
    strategy.ordered_nodes(grid)  # new nodes later: asked together, no probe
    assert grid.batches[3:] == [([78, 79], 7.5)]


def test_a_single_first_node_is_the_probe() -> None:
    """One node at first is asked alone (no separate probe, no empty batch);
    nodes that join later are asked together."""
    grid = _RecordingGrid({17: 0})
    strategy = SyncSGD(0.1, min_available_nodes=1)
    strategy.ordered_nodes(grid)
    grid.partitions = {17: 0, 4242: 1, 5: 3}
    strategy.ordered_nodes(grid)
    assert [b[0] for b in grid.batches] == [[17], [4242, 5]]
    assert strategy.partition_of == {17: 0, 4242: 1, 5: 3}


def test_identity_answers_that_are_not_partition_ids_are_ignored() -> None:
    """A negative or fractional partition id, or a reply without the identity
    record, leaves the node unidentified."""

    class Odd(_RecordingGrid):
        def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
            out = super().send_and_receive(messages, timeout=timeout)
            return [
                Message(RecordDict(), metadata=r.metadata)
                if r.metadata.src_node_id == 5
                else r
                for r in out
            ]

    grid = Odd({9001: -1, 17: 0, 4242: 2.5, 5: 3})  # type: ignore[dict-item]
    strategy = SyncSGD(0.1, min_available_nodes=4)
    assert strategy.ordered_nodes(grid) == [17, 5, 4242, 9001]
    assert strategy.partition_of == {9001: None, 17: 0, 4242: None, 5: None}


@pytest.mark.parametrize("count", [1, 2])
def test_small_federations_are_probed_only_when_there_is_a_rest(count: int) -> None:
    nodes = dict(list(NODES.items())[:count])
    grid = _RecordingGrid(nodes)
    strategy = SyncSGD(0.1, min_available_nodes=count)
    strategy.ordered_nodes(grid)
    ids = list(nodes)
    assert [b[0] for b in grid.batches] == ([ids] if count == 1 else [ids[:1], ids[1:]])


def test_an_app_without_the_handler_is_asked_once_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    grid = _RecordingGrid(NODES, no_identity=list(NODES))
    strategy = SyncSGD(0.1, min_available_nodes=4)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        ordered = strategy.ordered_nodes(grid)
        grid.partitions = {**NODES, 3: 4}
        strategy.ordered_nodes(grid)  # a late node is not asked either
    assert [b[0] for b in grid.batches] == [[9001]]
    assert strategy.partition_of == dict.fromkeys([*NODES, 3])
    assert ordered == sorted(NODES)
    assert _messages(caplog, logging.WARNING) == [
        f"The ClientApp has no handler for {protocol.IDENTIFY_MESSAGE_TYPE} "
        "(register it with fedleak.clients.add_identify_handler(app), or use "
        "fedleak.clients.legacy_client_mod / secagg_mod for client_fn apps); "
        "nodes are ordered by node id instead (sampling is not reproducible "
        "across runs). Pass identify=False to skip the query"
    ]


@pytest.mark.parametrize(
    "reason",
    ["Invalid message type: query.fedleak_identify", "No query function registered"],
)
def test_both_refusal_texts_mean_no_handler(reason: str) -> None:
    class Refusing(FakeGrid):
        def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
            self.sent.extend(messages)
            return [error_reply(m.metadata.dst_node_id, reason) for m in messages]

    grid = Refusing(NODES)
    strategy = SyncSGD(0.1, min_available_nodes=4)
    strategy.ordered_nodes(grid)
    assert strategy.partition_of == dict.fromkeys(NODES)
    assert [m.metadata.dst_node_id for m in grid.sent] == [9001]  # the probe only


def test_a_failing_node_is_not_a_missing_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An identify reply that failed for another reason (or with no reason)
    leaves that node unidentified, the others are still asked, and one
    warning counts the nodes without a partition id."""

    class Flaky(_RecordingGrid):
        def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
            out = super().send_and_receive(messages, timeout=timeout)
            broken = {9001: "boom", 5: ""}
            return [
                error_reply(r.metadata.src_node_id, broken[r.metadata.src_node_id])
                if r.metadata.src_node_id in broken
                else r
                for r in out
            ]

    grid = Flaky(NODES)
    strategy = SyncSGD(0.1, min_available_nodes=4)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        ordered = strategy.ordered_nodes(grid)
    assert [b[0] for b in grid.batches] == [[9001], [17, 4242, 5]]
    assert strategy.partition_of == {9001: None, 17: 0, 4242: 1, 5: None}
    assert ordered == [17, 4242, 5, 9001]
    assert (
        _messages(caplog, logging.WARNING)
        == [
            "1 node(s) gave no partition id (register fedleak.clients."
            "add_identify_handler on their ClientApp); they are ordered by node id, "
            "which changes between runs, so sampling is not reproducible",
        ]
        * 2
    )


def test_identify_false_asks_nobody_and_orders_by_node_id() -> None:
    grid = _RecordingGrid(NODES)
    strategy = SyncSGD(0.1, min_available_nodes=4, identify=False)
    assert strategy.ordered_nodes(grid) == sorted(NODES)
    assert grid.batches == [] and strategy.partition_of == dict.fromkeys(NODES)


def test_two_nodes_claiming_one_partition_are_both_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Within one batch and across batches, the first claim of a partition id
    keeps it; a later claimer is ordered by node id."""
    claims = {9001: 0, 17: 1, 4242: 1, 5: 2}
    strategy = SyncSGD(0.1, min_available_nodes=4)
    grid = FakeGrid(claims)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        ordered = strategy.ordered_nodes(grid)
        grid.partitions = {**claims, 8: 0}
        strategy.ordered_nodes(grid)
    assert strategy.partition_of == {9001: 0, 17: 1, 4242: None, 5: 2, 8: None}
    assert ordered == [9001, 17, 5, 4242]
    warnings = _messages(caplog, logging.WARNING)
    assert warnings[0] == "Two nodes claim partition 1; ordering by node id"
    assert "Two nodes claim partition 0; ordering by node id" in warnings


def test_unidentified_nodes_go_after_identified_ones_whatever_the_numbers() -> None:
    """Partition ids larger than the unidentified nodes' ids still come first."""
    grid = FakeGrid({50: 7, 3: 0, 60: 8}, no_identity=[3])
    strategy = SyncSGD(0.1, min_available_nodes=3)
    assert strategy.ordered_nodes(grid) == [50, 60, 3]


# ---------------------------------------------------------------- sampling


def test_train_and_evaluation_samples_are_the_documented_streams() -> None:
    """``default_rng([seed, round, 0])`` picks the training sample,
    ``[seed, round, 1]`` the evaluation sample, each without replacement."""
    nodes = {100 + i: i for i in range(10)}
    strategy = ModelAveraging(
        fraction_train=0.5, fraction_evaluate=0.5, min_available_nodes=10, seed=4
    )
    grid = FakeGrid(nodes)
    for r in range(1, 13):
        train = [
            m.metadata.dst_node_id
            for m in strategy.configure_train(
                r, numpy_to_arrays(_model()), ConfigRecord(), grid
            )
        ]
        evaluate = [
            m.metadata.dst_node_id
            for m in strategy.configure_evaluate(
                r, numpy_to_arrays(_model()), ConfigRecord(), grid
            )
        ]
        for stream, got in ((0, train), (1, evaluate)):
            rng = np.random.default_rng([4, r, stream])
            expected = np.sort(rng.choice(10, size=5, replace=False))
            assert got == [100 + int(i) for i in expected], (r, stream)
            assert len(set(got)) == 5
        assert strategy.sampled_partitions(r) == [n - 100 for n in train]
        assert strategy.sampled_partitions(r, "evaluate") == [n - 100 for n in evaluate]


def test_sample_nodes_defaults_to_training(caplog: pytest.LogCaptureFixture) -> None:
    strategy = ModelAveraging(fraction_train=0.5, min_available_nodes=4)
    with caplog.at_level(logging.INFO, logger="flwr"):
        sampled = strategy.sample_nodes(3, FakeGrid(NODES))
    assert len(sampled) == 2
    assert strategy.sampled_partitions(3) == [NODES[n] for n in sampled]
    assert strategy.sampled_partitions(3, "evaluate") == []
    assert strategy.sampled_partitions(99) == []
    assert "configure_train: sampled 2 of 4 nodes" in _messages(caplog, logging.INFO)


def test_messages_carry_the_round_as_group_and_in_the_config() -> None:
    strategy = ModelAveraging(min_available_nodes=4, fraction_evaluate=1.0)
    grid = FakeGrid(NODES)
    train = list(
        strategy.configure_train(
            7, numpy_to_arrays(_model()), ConfigRecord({"k": 1}), grid
        )
    )
    evaluate = list(
        strategy.configure_evaluate(7, numpy_to_arrays(_model()), ConfigRecord(), grid)
    )
    for message in [*train, *evaluate]:
        assert message.metadata.group_id == "7"
        config = message.content.config_records[protocol.CONFIG_KEY]
        assert config[protocol.SERVER_ROUND] == 7


# ----------------------------------------------------------------- replies


def _configured(strategy: PartitionAwareStrategy, nodes: dict[int, int]) -> None:
    list(
        strategy.configure_train(
            1, numpy_to_arrays(_model()), ConfigRecord(), FakeGrid(nodes)
        )
    )


def test_replies_are_put_in_partition_order_then_node_id_order() -> None:
    nodes = {50: 7, 60: 8, 3: 0, 9: 1}
    strategy = ModelAveraging(min_available_nodes=4)
    grid = FakeGrid(nodes, no_identity=[3, 9])
    list(strategy.configure_train(1, numpy_to_arrays(_model()), ConfigRecord(), grid))
    assert strategy.partition_of == {50: 7, 60: 8, 3: None, 9: None}
    replies = [reply(n, _model()) for n in (9, 60, 3, 50)]
    collected = strategy.collect_replies(1, replies)
    assert [m.metadata.src_node_id for m in collected.valid] == [50, 60, 3, 9]


def test_error_replies_are_logged_by_their_last_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    strategy = ModelAveraging(min_available_nodes=4)
    _configured(strategy, NODES)
    trace = "Traceback (most recent call last):\n  File x\nValueError: bad input\n"
    with caplog.at_level(logging.DEBUG, logger="flwr"):
        collected = strategy.collect_replies(1, [error_reply(17, trace)])
    assert collected.num_errors == 1
    messages = _messages(caplog, logging.WARNING)
    assert "train round 1: error reply from node 17: ValueError: bad input" in messages
    assert "train round 1: 3 sampled node(s) did not reply" in messages
    assert f"full error reply: {trace}" in _messages(caplog, logging.DEBUG)


@pytest.mark.parametrize(
    ("text", "last"),
    [
        ("Traceback\n  File x\nValueError: bad\n", "ValueError: bad"),
        ("'quoted failure'\n>>>\n  \n", "quoted failure"),
        ("first\n'Xenon: X'", "Xenon: X"),
        ("first\nX", "X"),
        ("   ", "   "),
    ],
)
def test_last_line_of_an_error(text: str, last: str) -> None:
    assert _last_line(text) == last


def test_a_blank_error_reason_is_logged_as_it_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    strategy = ModelAveraging(min_available_nodes=4)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.collect_replies(2, [error_reply(17, "  ")])
    assert "train round 2: error reply from node 17:   " in _messages(
        caplog, logging.WARNING
    )


def test_an_aggregate_reply_answers_for_its_contributors() -> None:
    strategy = SyncSGD(0.1, min_available_nodes=4)
    _configured(strategy, NODES)
    aggregate = reply(17, {"w": np.zeros((2, 2), np.float32)})
    aggregate.content[protocol.AGGREGATE_RECORD] = ConfigRecord(
        {protocol.AGGREGATE_CONTRIBUTORS: protocol.pack_ids([17, 4242, 5])}
    )
    collected = strategy.collect_replies(1, [aggregate])
    assert collected.num_missing == 1  # 9001
    assert collected.counts() == {
        "num-sampled": 4,
        "num-replies": 1,
        "num-errors": 0,
        "num-missing": 1,
        "num-rejected": 0,
        "num-abstained": 0,
    }


def test_replies_to_an_unknown_round_count_what_arrived() -> None:
    strategy = ModelAveraging(min_available_nodes=4)
    collected = strategy.collect_replies(5, [reply(17, _model()), error_reply(5)])
    assert (collected.num_sampled, collected.num_missing) == (2, 0)


def test_reject_counts_and_keeps_the_reason(caplog: pytest.LogCaptureFixture) -> None:
    strategy = ModelAveraging(min_available_nodes=4)
    replies = RoundReplies(valid=[], num_sampled=1, num_errors=0, num_missing=0)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.reject(replies, reply(17, _model()), "too big")
    assert replies.num_rejected == 1 and replies.rejected_reasons == ["too big"]
    assert _messages(caplog, logging.WARNING) == [
        "rejected reply from node 17: too big"
    ]


def test_reply_checks_name_what_is_wrong() -> None:
    strategy = ModelAveraging(min_available_nodes=4)
    model = _model()
    cases: list[tuple[Message, str]] = [
        (
            reply(17, {"w": model["w"], "x": np.ones(1)}),
            r"^arrays differ from the model: unknown \['x'\], missing \[\]$",
        ),
        (
            reply(17, {"w": np.full((2, 2), np.inf, np.float32)}),
            r"^array 'w' holds non-finite values$",
        ),
        (
            reply(17, {"w": np.ones(3, np.float32)}),
            r"^array 'w' has shape \(3,\), model has \(2, 2\)$",
        ),
        (
            reply(17, model, {protocol.NUM_EXAMPLES: 0}),
            rf"^reply from node 17 has {protocol.NUM_EXAMPLES}=0; "
            r"expected a positive number \(a client that sits the round out also "
            r"sets abstained=1\)$",
        ),
        (
            reply(17, None),
            r"^reply from node 17 must hold exactly one ArrayRecord, found 0$",
        ),
    ]
    for message, pattern in cases:
        with pytest.raises(ProtocolError, match=pattern):
            strategy.check_arrays(message, model, complete=True)
    with pytest.raises(
        ProtocolError,
        match=r"^reply from node 17 must hold exactly one MetricRecord, found 0$",
    ):
        strategy.single_records(
            Message(RecordDict(), metadata=reply(17).metadata), False
        )


# ------------------------------------------------------------ SyncSGD rules


def test_model_shaped_replies_are_counted_in_the_refusal() -> None:
    theta = {"w": np.array([10.0], np.float32)}
    strategy = SyncSGD(0.1, min_available_nodes=4)
    list(
        strategy.configure_train(
            1, numpy_to_arrays(theta), ConfigRecord(), FakeGrid(NODES)
        )
    )
    near = {"w": np.array([9.0], np.float32)}  # relative distance 0.1
    with pytest.raises(
        ConfigError,
        match=r"^SyncSGD round 1: every reply \(4\) holds model weights, not a "
        r"gradient \(it lies close to the global model\)\. SyncSGD \(seed 000 "
        r"Alg\. 1\) needs ClientApps that return the gradient of one mini-batch; "
        r"for ClientApps that return their trained model use ModelAveraging or "
        r"Flower's FedAvg$",
    ):
        strategy.aggregate_train(1, [reply(n, near) for n in NODES])


def test_model_shaped_check_in_full() -> None:
    strategy = SyncSGD(0.1, min_available_nodes=4)
    theta = {"w": np.array([0.5], np.float32)}  # a model of norm below 1
    with pytest.raises(
        ProtocolError,
        match=r"^the reply is model-shaped, not a gradient: it lies at relative "
        r"distance 0 from the global model \(< 0\.5\)$",
    ):
        strategy.check_arrays(reply(17, theta), theta, complete=False)
    boundary = {"w": np.array([2.0], np.float32)}
    arrays, weight = strategy.check_arrays(
        reply(17, {"w": np.array([1.0], np.float32)}), boundary, complete=False
    )
    assert weight == 1.0 and arrays["w"][0] == 1.0  # distance 0.5 is a gradient


def test_model_shaped_distance_matches_the_float64_formula() -> None:
    from fedleak.strategies.sync_sgd import _distance_to

    rng = np.random.default_rng(3)
    model = {
        "a": rng.normal(size=(64, 32)).astype(np.float32),
        "b": rng.normal(size=17).astype(np.float32),
    }
    reply_arrays = {k: (v * 2.6 + 0.01).astype(np.float32) for k, v in model.items()}
    for count in (1, 3):
        mean = np.concatenate(
            [reply_arrays[n].astype(np.float64).ravel() / count for n in model]
        )
        theta = np.concatenate([model[n].astype(np.float64).ravel() for n in model])
        expected = float(np.linalg.norm(mean - theta))
        assert _distance_to(reply_arrays, model, count) == pytest.approx(
            expected, rel=1e-5
        )


def test_model_shaped_norm_is_taken_per_global_model() -> None:
    strategy = SyncSGD(0.1, min_available_nodes=4)
    near = {"w": np.array([9.0], np.float32)}
    small = {"w": np.array([10.0], np.float32)}  # 9 lies at distance 0.1
    with pytest.raises(ProtocolError, match="model-shaped"):
        strategy.check_arrays(reply(17, near), small, complete=False)
    # a new global model of the same names: its own norm, not the cached one
    large = {"w": np.array([1000.0], np.float32)}
    arrays, _ = strategy.check_arrays(reply(17, near), large, complete=False)
    assert arrays["w"][0] == 9.0  # distance 0.991: a gradient
    close = {"w": np.array([995.0], np.float32)}  # 5 / 1000; over 10 it would pass
    with pytest.raises(ProtocolError, match=r"distance 0\.005 "):
        strategy.check_arrays(reply(17, close), large, complete=False)
    with pytest.raises(ProtocolError, match="model-shaped"):  # back to the first
        strategy.check_arrays(reply(17, near), small, complete=False)


def test_model_shaped_norm_covers_the_arrays_each_reply_holds() -> None:
    strategy = SyncSGD(0.1, min_available_nodes=4)
    model = {"w": np.array([10.0], np.float32), "v": np.array([1000.0], np.float32)}
    with pytest.raises(ProtocolError, match="model-shaped"):  # ||w - 10|| / 10
        strategy.check_arrays(
            reply(17, {"w": np.array([9.0], np.float32)}), model, complete=False
        )
    both = {"w": np.array([9.0], np.float32), "v": np.array([995.0], np.float32)}
    # distance 5.1 over the norm of both arrays (1000): model-shaped; over the
    # norm of w alone (10) it would pass as a gradient
    with pytest.raises(ProtocolError, match=r"distance 0\.0051"):
        strategy.check_arrays(reply(18, both), model, complete=False)


def test_a_summed_reply_is_compared_as_the_mean_of_its_contributors() -> None:
    strategy = SyncSGD(0.1, min_available_nodes=4)
    theta = {"w": np.array([2.0, 4.0], np.float32)}
    summed = reply(17, {"w": theta["w"] * 3})  # three model-shaped replies, added
    summed.content[protocol.AGGREGATE_RECORD] = ConfigRecord(
        {protocol.AGGREGATE_CONTRIBUTORS: protocol.pack_ids([5, 6, 7])}
    )
    with pytest.raises(ProtocolError, match=r"distance 0 from the global model"):
        strategy.check_arrays(summed, theta, complete=False)
    alone = reply(18, {"w": theta["w"] * 3})  # one reply of 3 theta: a gradient
    arrays, _ = strategy.check_arrays(alone, theta, complete=False)
    np.testing.assert_array_equal(arrays["w"], theta["w"] * 3)


def test_squared_norms_of_integer_arrays_do_not_overflow() -> None:
    from fedleak.strategies.sync_sgd import _squared_norm

    assert _squared_norm(np.array([100, 100], dtype=np.int8)) == 20000.0
    assert _squared_norm(np.array([[3.0, 4.0]], dtype=np.float32)) == 25.0


def test_an_empty_gradient_leaves_the_model_unchanged() -> None:
    theta = {"w": np.array([1.0, 2.0], np.float32)}
    strategy = SyncSGD(0.1, min_available_nodes=4)
    list(
        strategy.configure_train(
            1, numpy_to_arrays(theta), ConfigRecord(), FakeGrid(NODES)
        )
    )
    arrays, metrics = strategy.aggregate_train(1, [reply(n, {}) for n in NODES])
    assert arrays is not None and metrics is not None
    np.testing.assert_array_equal(arrays_to_numpy(arrays)["w"], theta["w"])
    assert metrics["num-rejected"] == 0


@pytest.mark.parametrize("strategy_kind", ["sync", "averaging"])
def test_a_round_without_usable_reply_is_logged(
    strategy_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    strategy: PartitionAwareStrategy = (
        SyncSGD(0.1, min_available_nodes=4)
        if strategy_kind == "sync"
        else ModelAveraging(min_available_nodes=4)
    )
    _configured(strategy, NODES)
    with caplog.at_level(logging.INFO, logger="flwr"):
        arrays, metrics = strategy.aggregate_train(1, [error_reply(17)])
    assert arrays is None and metrics is not None and metrics["num-errors"] == 1
    what = "gradient" if strategy_kind == "sync" else "model"
    assert f"aggregate_train: no usable {what} in round 1" in _messages(
        caplog, logging.INFO
    )


# -------------------------------------------------------------- evaluation


def _evaluation(nodes: Iterable[int], metrics: dict[str, float]) -> list[Message]:
    return [reply(n, None, dict(metrics), "evaluate") for n in nodes]


def test_evaluation_rejects_bad_weights_and_counts_the_missing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    strategy = ModelAveraging(min_available_nodes=4, fraction_evaluate=1.0)
    grid = FakeGrid(NODES)
    list(
        strategy.configure_evaluate(2, numpy_to_arrays(_model()), ConfigRecord(), grid)
    )
    replies = [
        *_evaluation([17, 4242], {protocol.NUM_EXAMPLES: 0, "acc": 0.0}),
        *_evaluation([5], {protocol.NUM_EXAMPLES: 10, "acc": 0.75}),
    ]
    with caplog.at_level(logging.WARNING, logger="flwr"):
        metrics = strategy.aggregate_evaluate(2, replies)
    assert metrics is not None
    assert metrics["acc"] == 0.75
    assert metrics["num-rejected"] == 2 and metrics["num-replies"] == 1
    assert metrics["num-missing"] == 1 and metrics["num-sampled"] == 4
    assert (
        f"rejected reply from node 17: reply from node 17 has "
        f"{protocol.NUM_EXAMPLES}=0; expected a positive number (a client that "
        "sits the round out also sets abstained=1)"
    ) in _messages(caplog, logging.WARNING)
    assert "evaluate round 2: 1 sampled node(s) did not reply" in _messages(
        caplog, logging.WARNING
    )


def test_evaluation_result_when_nothing_is_accepted() -> None:
    strategy = ModelAveraging(min_available_nodes=4, fraction_evaluate=1.0)
    assert strategy.aggregate_evaluate(3, []) is None  # nothing sent, nothing back
    list(
        strategy.configure_evaluate(
            3, numpy_to_arrays(_model()), ConfigRecord(), FakeGrid(NODES)
        )
    )
    failed = strategy.aggregate_evaluate(3, [error_reply(17)])
    assert failed is not None
    assert (failed["num-errors"], failed["num-missing"]) == (1, 3)
    good = strategy.aggregate_evaluate(
        3, _evaluation([17], {protocol.NUM_EXAMPLES: 1, "acc": 0.5})
    )
    assert good is not None and good["acc"] == 0.5


# --------------------------------------------------------------- summaries


def test_summaries_list_the_settings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="flwr"):
        SyncSGD(0.25, reduction="mean", min_available_nodes=4, seed=3).summary()
    assert _messages(caplog, logging.INFO) == [
        "\t├──> SyncSGD: lr 0.25, reduction mean",
        "\t├──> Sampling (seed 3):",
        "\t│\t├── fraction train 1.00 (min 1) | evaluate 0.00 (min 1)",
        "\t│\t└── waits for 4 nodes",
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="flwr"):
        ModelAveraging(
            fraction_train=0.5,
            local_epochs=2,
            learning_rate=0.05,
            min_train_nodes=2,
            fraction_evaluate=0.25,
            min_evaluate_nodes=3,
        ).summary()
    assert _messages(caplog, logging.INFO) == [
        "\t├──> ModelAveraging: C 0.50, local epochs 2, client lr 0.05",
        "\t├──> Sampling (seed 0):",
        "\t│\t├── fraction train 0.50 (min 2) | evaluate 0.25 (min 3)",
        "\t│\t└── waits for 2 nodes",
    ]


def test_metric_free_replies_are_counted_not_averaged() -> None:
    strategy = ModelAveraging(min_available_nodes=4)
    _configured(strategy, NODES)
    bare = Message(
        RecordDict({protocol.METRICS_KEY: MetricRecord({protocol.NUM_EXAMPLES: 2})}),
        metadata=reply(17).metadata,
    )
    accepted, metrics = strategy.accept_replies(1, [bare], complete=True)
    assert accepted == [] and metrics["num-rejected"] == 1
