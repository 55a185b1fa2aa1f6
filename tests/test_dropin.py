"""fedleak in the Flower apps people already have (in-process federation).

Each test reproduces one friction point of dropping ``SecureAggregation`` /
``secagg_mod`` (and ``ModelAveraging`` / ``SyncSGD``) into a Flower 1.41 app:
legacy ``NumPyClient`` apps, too few nodes, clipping, dtypes, unaggregated
metrics, legacy strategies, Flower's same-named mod, model-shaped replies,
the identify query, Flower's DP wrapper, failure reasons and dead nodes.
The clients are written here in the style of Flower's own example apps.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
from fedleak.clients import legacy_client_mod, secagg_mod
from fedleak.strategies import (
    ModelAveraging,
    SecureAggregation,
    SyncSGD,
    arrays_to_numpy,
    numpy_to_arrays,
)
from flower_fakes import LocalGrid
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    FedAvg,
)

from fedleak import protocol
from fedleak.errors import ConfigError, ProtocolError

pytestmark = pytest.mark.usefixtures("task_identity")

NODES = {501 + 11 * p: p for p in range(5)}  # node id -> partition id


def sizes(partition: int) -> int:
    return 20 + 13 * partition


def delta(partition: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(40 + partition).normal(size=shape)


def start_model() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.normal(size=(4, 3)).astype(np.float32), np.zeros(3, np.float32)]


def expected_mean(model: list[np.ndarray], partitions) -> list[np.ndarray]:
    total = sum(sizes(p) for p in partitions)
    return [
        sum(sizes(p) * (m.astype(np.float64) + delta(p, m.shape)) for p in partitions)
        / total
        for m in model
    ]


# ---------------------------------------------------------------- legacy apps
class LegacyClient(NumPyClient):
    """A NumPyClient as in Flower's secure-aggregation example (fit/evaluate)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition

    def fit(self, parameters, config):  # type: ignore[no-untyped-def]
        updated = [p + delta(self.partition, p.shape) for p in parameters]
        updated = [u.astype(p.dtype) for u, p in zip(updated, parameters, strict=True)]
        return updated, sizes(self.partition), {"train-loss": 0.5, "tag": "x"}

    def evaluate(self, parameters, config):  # type: ignore[no-untyped-def]
        loss = float(sum(np.sum(p**2) for p in parameters))
        return loss, sizes(self.partition), {"accuracy": 0.25 * self.partition}


def legacy_client_fn(context: Context):  # type: ignore[no-untyped-def]
    return LegacyClient(int(context.node_config["partition-id"])).to_client()


def legacy_app(mods=None) -> ClientApp:  # type: ignore[no-untyped-def]
    return ClientApp(client_fn=legacy_client_fn, mods=mods or [])


def secure_fedavg(**kwargs) -> SecureAggregation:  # type: ignore[no-untyped-def]
    inner = FedAvg(
        min_available_nodes=5,
        min_train_nodes=5,
        fraction_evaluate=kwargs.pop("fraction_evaluate", 0.0),
        min_evaluate_nodes=5,
    )
    return SecureAggregation(inner, node_wait_timeout=0.5, **kwargs)


def test_flower_alone_cannot_run_a_numpyclient_app_under_a_message_api_strategy():
    # the friction: the legacy handler reads fitins.* and fails (Flower 1.41)
    grid = LocalGrid(legacy_app(), NODES)
    messages = list(
        FedAvg(min_available_nodes=5).configure_train(
            1, ArrayRecord(start_model()), ConfigRecord(), grid
        )
    )
    replies = grid.send_and_receive(messages)
    assert all("fitins.parameters" in r.error.reason for r in replies)


def test_numpyclient_app_with_secagg_mod_trains_and_evaluates_securely():
    grid = LocalGrid(legacy_app([secagg_mod]), NODES)
    strategy = secure_fedavg(fraction_evaluate=1.0)
    result = strategy.start(
        grid=grid, initial_arrays=ArrayRecord(start_model()), num_rounds=1
    )
    got = result.arrays.to_numpy_ndarrays()
    want = expected_mean(start_model(), NODES.values())
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, atol=1e-5)
    evaluation = result.evaluate_metrics_clientapp[1]
    assert evaluation["accuracy"] == pytest.approx(
        sum(0.25 * p * sizes(p) for p in NODES.values())
        / sum(sizes(p) for p in NODES.values())
    )
    assert "loss" in evaluation


def test_numpyclient_app_with_legacy_client_mod_answers_identify_and_averages():
    grid = LocalGrid(legacy_app([legacy_client_mod]), NODES)
    strategy = ModelAveraging(min_available_nodes=5)
    result = strategy.start(
        grid=grid, initial_arrays=ArrayRecord(start_model()), num_rounds=1
    )
    assert strategy.partition_of == NODES  # answered by the mod
    got = result.arrays.to_numpy_ndarrays()
    for g, w in zip(got, expected_mean(start_model(), NODES.values()), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_legacy_client_returning_the_wrong_number_of_arrays_is_named():
    class Short(LegacyClient):
        def fit(self, parameters, config):  # type: ignore[no-untyped-def]
            return parameters[:1], 3, {}

    app = ClientApp(client_fn=lambda c: Short(0).to_client(), mods=[secagg_mod])
    grid = LocalGrid(app, NODES)
    strategy = secure_fedavg()
    messages = list(
        strategy.configure_train(1, ArrayRecord(start_model()), ConfigRecord(), grid)
    )
    replies = grid.send_and_receive(messages)
    assert all("returned 1 arrays for a model of 2" in r.error.reason for r in replies)


# ---------------------------------------------------------------- message-API apps
def quickstart_app(step: float = 0.5, extra_metric: bool = True) -> ClientApp:
    """Like Flower's quickstart-numpy: adds to the (float64) model, weight 1."""
    app = ClientApp(mods=[secagg_mod])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        ndarrays = msg.content["arrays"].to_numpy_ndarrays()
        model = [m + step * (1 + partition) / 5 for m in ndarrays]
        metrics = {"num-examples": 1}
        if extra_metric:
            metrics["random_metric"] = 0.5
        content = RecordDict(
            {"arrays": ArrayRecord(model), "metrics": MetricRecord(metrics)}
        )
        return Message(content=content, reply_to=msg)

    return app


def quickstart_strategy(**kwargs) -> SecureAggregation:  # type: ignore[no-untyped-def]
    return SecureAggregation(
        FedAvg(min_available_nodes=5, min_train_nodes=5, fraction_evaluate=0.0),
        node_wait_timeout=0.5,
        **kwargs,
    )


def test_too_few_nodes_fail_at_start_naming_the_numbers():
    nodes = {7: 0, 8: 1}  # Flower's default of 2 simulated nodes
    grid = LocalGrid(quickstart_app(), nodes)
    strategy = SecureAggregation(FedAvg(fraction_evaluate=0.0), node_wait_timeout=0.2)
    with pytest.raises(ConfigError, match=r"at least 3 clients.*2 connected node"):
        strategy.start(grid=grid, initial_arrays=ArrayRecord([np.ones((1, 1))]))
    assert not grid.sent  # nothing was sent


def test_a_run_without_any_aggregate_fails_with_a_summary(caplog):
    nodes = {7: 0, 8: 1, 9: 2}
    grid = LocalGrid(quickstart_app(), nodes, drop={9: lambda m: True})
    strategy = SecureAggregation(
        FedAvg(min_available_nodes=3, min_train_nodes=3, fraction_evaluate=0.0),
        node_wait_timeout=0.2,
    )
    with (
        caplog.at_level(logging.ERROR, logger="flwr"),
        pytest.raises(ProtocolError, match="none of the 2 round"),
    ):
        strategy.start(
            grid=grid, initial_arrays=ArrayRecord([np.ones((1, 1))]), num_rounds=2
        )
    assert "did not upload" in caplog.text


def test_float64_models_come_back_float64_within_the_stated_bound():
    grid = LocalGrid(quickstart_app(step=0.1), NODES)
    strategy = quickstart_strategy()
    result = strategy.start(
        grid=grid, initial_arrays=ArrayRecord([np.ones((2, 2))]), num_rounds=3
    )
    (got,) = result.arrays.to_numpy_ndarrays()
    assert got.dtype == np.float64
    want = 1.0 + 3 * np.mean([0.1 * (1 + p) / 5 for p in NODES.values()])
    bound = sum(
        m["secagg-error-bound"] for m in result.train_metrics_clientapp.values()
    )
    assert 0 < bound < 1e-4
    assert np.max(np.abs(got - want)) <= bound


def test_clipping_warns_once_with_the_count_and_the_clients_largest_value(caplog):
    grid = LocalGrid(quickstart_app(step=5.0), NODES)
    strategy = quickstart_strategy(clip=8.0)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        result = strategy.start(
            grid=grid, initial_arrays=ArrayRecord([np.ones((1, 1))]), num_rounds=3
        )
    server = [r for r in caplog.records if "were clipped to [-8, 8]" in r.getMessage()]
    assert len(server) == 1  # reported once
    # round 1: 2..6 (mean 4); round 2: 5..9, only partition 4 clips (9);
    # round 3: from the mean 6.8 of (5, 6, 7, 8, 8): 7.8..11.8, four clip
    assert "round 2: 1 value(s)" in server[0].getMessage()
    clients = [
        r.getMessage() for r in caplog.records if "largest |value|" in r.getMessage()
    ]
    assert len(clients) == 4  # once per clipping node, never again
    assert "largest |value| 9)" in clients[0]
    assert result.train_metrics_clientapp[2]["secagg-clipped"] == 1
    assert result.train_metrics_clientapp[3]["secagg-clipped"] == 4


def test_clipping_can_stop_the_run_instead():
    grid = LocalGrid(quickstart_app(step=5.0), NODES)
    strategy = quickstart_strategy(clip=8.0, on_clip="error")
    with pytest.raises(ConfigError, match="on_clip='error'"):
        strategy.start(
            grid=grid, initial_arrays=ArrayRecord([np.ones((1, 1))]), num_rounds=3
        )


def test_metrics_left_out_of_the_aggregate_are_named_once_per_node(caplog):
    grid = LocalGrid(quickstart_app(), NODES)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        quickstart_strategy().start(
            grid=grid, initial_arrays=ArrayRecord([np.ones((1, 1))]), num_rounds=2
        )
    named = [
        r
        for r in caplog.records
        if "['random_metric'] are not aggregated" in r.getMessage()
    ]
    assert len(named) == len(NODES)


# ---------------------------------------------------------------- clear errors
def test_the_legacy_fedavg_names_the_message_api_import():
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    with pytest.raises(
        ConfigError, match=r"from flwr\.serverapp\.strategy import FedAvg"
    ):
        SecureAggregation(LegacyFedAvg())


def test_flowers_own_secagg_mod_by_mistake_names_fedleaks():
    from flwr.client.mod import secagg_mod as flower_secagg_mod

    app = ClientApp(mods=[flower_secagg_mod])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        raise AssertionError("not reached")

    grid = LocalGrid(app, NODES)
    strategy = quickstart_strategy()
    with pytest.raises(ConfigError, match=r"from fedleak\.clients import secagg_mod"):
        strategy.configure_train(1, ArrayRecord([np.ones(2)]), ConfigRecord(), grid)


def model_returning_app(mods=None) -> ClientApp:  # type: ignore[no-untyped-def]
    app = ClientApp(mods=mods or [])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = arrays_to_numpy(msg.content["arrays"])
        trained = {k: v - 0.01 * np.sign(v) for k, v in arrays.items()}
        return Message(
            RecordDict(
                {
                    "arrays": numpy_to_arrays(trained),
                    "metrics": MetricRecord({protocol.NUM_EXAMPLES: 10}),
                }
            ),
            reply_to=msg,
        )

    return app


@pytest.mark.parametrize("secure", [False, True])
def test_sync_sgd_refuses_model_shaped_replies(secure):
    strategy = SyncSGD(0.1, min_available_nodes=5, identify=False)
    app = model_returning_app([secagg_mod] if secure else None)
    if secure:
        strategy = SecureAggregation(strategy, node_wait_timeout=0.5)
    grid = LocalGrid(app, NODES)
    model = {"w": np.full((3, 2), 2.0, np.float32)}
    with pytest.raises(ConfigError, match="model weights, not a gradient"):
        strategy.start(grid=grid, initial_arrays=numpy_to_arrays(model), num_rounds=1)


def test_sync_sgd_still_takes_gradients():
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = arrays_to_numpy(msg.content["arrays"])
        grads = {k: np.full_like(v, 0.3) for k, v in arrays.items()}
        metrics = MetricRecord({protocol.NUM_EXAMPLES: 1})
        return Message(
            RecordDict({"arrays": numpy_to_arrays(grads), "metrics": metrics}),
            reply_to=msg,
        )

    grid = LocalGrid(app, NODES)
    strategy = SyncSGD(1.0, min_available_nodes=5, identify=False)
    result = strategy.start(
        grid=grid,
        initial_arrays=numpy_to_arrays({"w": np.full((2,), 2.0, np.float32)}),
        num_rounds=1,
    )
    np.testing.assert_allclose(result.arrays["w"].numpy(), 2.0 - 5 * 0.3, rtol=1e-6)


def test_plain_flower_app_gets_one_identify_query_and_one_warning(caplog):
    grid = LocalGrid(model_returning_app(), NODES)
    strategy = ModelAveraging(min_available_nodes=5)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.start(
            grid=grid,
            initial_arrays=numpy_to_arrays({"w": np.ones(3, np.float32)}),
            num_rounds=2,
        )
    queries = [
        m
        for m in grid.sent
        if m.metadata.message_type == protocol.IDENTIFY_MESSAGE_TYPE
    ]
    assert len(queries) == 1  # one node probed, the others never asked
    warnings = [r for r in caplog.records if "has no handler" in r.getMessage()]
    assert len(warnings) == 1
    assert "add_identify_handler" in warnings[0].getMessage()


def test_identify_false_sends_no_query():
    grid = LocalGrid(model_returning_app(), NODES)
    strategy = ModelAveraging(min_available_nodes=5, identify=False)
    strategy.start(
        grid=grid,
        initial_arrays=numpy_to_arrays({"w": np.ones(3, np.float32)}),
        num_rounds=1,
    )
    assert all(
        m.metadata.message_type != protocol.IDENTIFY_MESSAGE_TYPE for m in grid.sent
    )


def test_wrapping_flowers_dp_wrapper_does_not_warn_every_round(caplog):
    grid = LocalGrid(quickstart_app(step=0.1, extra_metric=False), NODES)
    inner = DifferentialPrivacyClientSideFixedClipping(
        FedAvg(min_available_nodes=5, min_train_nodes=5, fraction_evaluate=0.0),
        noise_multiplier=0.0,
        clipping_norm=10.0,
        num_sampled_clients=5,
    )
    strategy = SecureAggregation(inner, node_wait_timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.start(
            grid=grid, initial_arrays=ArrayRecord([np.ones((1, 1))]), num_rounds=3
        )
    assert "differs from the number of sampled clients" not in caplog.text


# ---------------------------------------------------------------- failures, nodes
def test_the_server_logs_the_clients_failure_reason(caplog):
    grid = LocalGrid(legacy_app([secagg_mod]), NODES)
    strategy = secure_fedavg(max_weight=25)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        messages = list(
            strategy.configure_train(
                1, ArrayRecord(start_model()), ConfigRecord(), grid
            )
        )
        strategy.aggregate_train(1, grid.send_and_receive(messages))
    failed = [
        r.getMessage() for r in caplog.records if "failed its upload" in r.getMessage()
    ]
    assert len(failed) == 4  # partitions 1-4 have more than 25 examples
    assert all("exceeds the server's max_weight=25" in f for f in failed)


def test_a_dead_node_stops_the_run_with_a_clear_message_after_the_wait():
    grid = LocalGrid(quickstart_app(), NODES)
    strategy = SecureAggregation(
        FedAvg(min_available_nodes=6, min_train_nodes=5, fraction_evaluate=0.0),
        node_wait_timeout=0.2,
    )
    with pytest.raises(ProtocolError, match="only 5 of the 6 nodes"):
        strategy.start(grid=grid, initial_arrays=ArrayRecord([np.ones((1, 1))]))


def test_a_dead_node_can_let_the_round_proceed_with_the_survivors():
    grid = LocalGrid(quickstart_app(step=0.1), NODES)
    inner = FedAvg(min_available_nodes=6, min_train_nodes=6, fraction_evaluate=0.0)
    strategy = SecureAggregation(
        inner, node_wait_timeout=0.2, on_too_few_nodes="proceed"
    )
    result = strategy.start(
        grid=grid, initial_arrays=ArrayRecord([np.ones((1, 1))]), num_rounds=1
    )
    (got,) = result.arrays.to_numpy_ndarrays()
    want = 1.0 + np.mean([0.1 * (1 + p) / 5 for p in NODES.values()])
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (inner.min_available_nodes, inner.min_train_nodes) == (6, 6)  # restored


def _configure_evaluate_within(strategy, grid, seconds: float):  # type: ignore[no-untyped-def]
    """Call configure_evaluate in a thread; fail if it is still waiting after ``seconds``."""
    outcome: dict[str, object] = {}

    def call() -> None:
        try:
            outcome["messages"] = list(
                strategy.configure_evaluate(
                    1, ArrayRecord([np.ones((1, 1))]), ConfigRecord(), grid
                )
            )
        except Exception as err:  # handed to the test below
            outcome["error"] = err

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "configure_evaluate still waits for a dead node"
    return outcome


def test_a_dead_node_does_not_hang_federated_evaluation():
    # Flower's FedAvg.configure_evaluate waits forever for min_available_nodes;
    # the wrapper bounds that wait as it does for training
    grid = LocalGrid(quickstart_app(), NODES)
    inner = FedAvg(min_available_nodes=6, min_evaluate_nodes=6, fraction_evaluate=1.0)
    proceed = SecureAggregation(
        inner, node_wait_timeout=0.2, on_too_few_nodes="proceed"
    )
    outcome = _configure_evaluate_within(proceed, grid, 30.0)
    sent = outcome["messages"]
    assert sorted(m.metadata.dst_node_id for m in sent) == sorted(NODES)
    assert (inner.min_available_nodes, inner.min_evaluate_nodes) == (6, 6)  # restored
    stop = SecureAggregation(inner, node_wait_timeout=0.2)
    outcome = _configure_evaluate_within(stop, grid, 30.0)
    assert isinstance(outcome["error"], ProtocolError)
    assert "only 5 of the 6 nodes" in str(outcome["error"])


# ---------------------------------------------------------------- flwr run app
def test_experiment_files_are_found_in_the_app_bundle_first(tmp_path, monkeypatch):
    from fedleak.experiments.flower_app import resolve_config_path

    bundle = tmp_path / "bundle"
    (bundle / "mine").mkdir(parents=True)
    (bundle / "mine" / "exp.toml").write_text("# user's own experiment\n")
    monkeypatch.chdir(tmp_path)  # the server's working directory is elsewhere
    assert resolve_config_path("mine/exp.toml", bundle) == bundle / "mine" / "exp.toml"
    with pytest.raises(ConfigError, match="app bundle"):
        resolve_config_path("mine/other.toml", bundle)
    # fedleak's bundled files are still found by name
    assert resolve_config_path("quickstart.toml", bundle).name == "quickstart.toml"


def test_record_of_reads_one_record_of_the_asked_kind() -> None:
    from fedleak.clients.legacy import record_of

    config = ConfigRecord({"x": 1})
    content = RecordDict({"c": config, "m": MetricRecord({"y": 1.0})})
    assert record_of(content, "c", ConfigRecord) is config
    assert record_of(content, "m", ConfigRecord) is None  # another kind
    assert record_of(content, "absent", ConfigRecord) is None
    assert record_of(content, "m", MetricRecord) is content["m"]
