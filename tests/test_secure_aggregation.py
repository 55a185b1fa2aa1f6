"""SecureAggregation + secagg_mod in an in-process federation (real ClientApps)."""

from __future__ import annotations

import numpy as np
import pytest
from fedleak.clients import add_identify_handler, secagg_mod
from fedleak.clients.secagg import make_secagg_mod
from fedleak.strategies import (
    ModelAveraging,
    SecureAggregation,
    SyncSGD,
    arrays_to_numpy,
    numpy_to_arrays,
)
from flower_fakes import LocalGrid, metadata
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
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    FedMedian,
    Krum,
    Strategy,
)

from fedleak import protocol
from fedleak.errors import ConfigError
from fedleak.secagg.constants import ENCODING_RECORD, RECORD, Key, Refusal, Stage
from fedleak.secagg.records import pack_ids

pytestmark = pytest.mark.usefixtures("task_identity")

NODES = {9001 + 7 * p: p for p in range(6)}  # node id -> partition id


def global_model() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w": rng.normal(size=(5, 3)).astype(np.float32),
        "b": rng.normal(size=(3,)).astype(np.float32),
    }


def client_update(partition: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(100 + partition)
    return {
        k: rng.normal(size=v.shape).astype(np.float32)
        for k, v in global_model().items()
    }


def sizes(partition: int) -> int:
    return 10 + 37 * partition


def make_app(
    crash: set[int] = frozenset(), only_b: bool = False, accept_thesis: bool = True
) -> ClientApp:
    """A ClientApp whose train function returns a fixed update per partition."""
    app = ClientApp(mods=[make_secagg_mod(accept_thesis=accept_thesis)])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        if partition in crash:
            raise RuntimeError(f"client {partition} crashed")
        update = client_update(partition)
        if only_b:
            update = {"b": update["b"]}
        metrics = MetricRecord(
            {protocol.NUM_EXAMPLES: sizes(partition), "train-loss": 0.1 * partition}
        )
        return Message(
            RecordDict(
                {
                    "arrays": ArrayRecord({k: Array(v) for k, v in update.items()}),
                    "metrics": metrics,
                }
            ),
            reply_to=msg,
        )

    return add_identify_handler(app)


def one_round(strategy: Strategy, grid: LocalGrid, server_round: int = 1):
    messages = list(
        strategy.configure_train(
            server_round, numpy_to_arrays(global_model()), ConfigRecord(), grid
        )
    )
    replies = grid.send_and_receive(messages)
    arrays, metrics = strategy.aggregate_train(server_round, replies)
    return (None if arrays is None else arrays_to_numpy(arrays)), metrics, messages


def plain_sum(partitions) -> dict[str, np.ndarray]:
    return {
        k: sum(client_update(p)[k].astype(np.float64) for p in partitions)
        for k in global_model()
    }


def stage_of(message: Message) -> str | None:
    record = message.content.config_records.get(RECORD)
    return None if record is None else record.get(Key.STAGE)


MODES = ["double-masking", "thesis"]


# ------------------------------------------------------------------ exactness
@pytest.mark.parametrize("mode", MODES)
def test_secure_sync_sgd_equals_plain_sync_sgd_within_fixed_point_error(mode):
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(SyncSGD(0.5, min_available_nodes=6), clip=8.0, mode=mode)
    new, metrics, _ = one_round(secure, grid)
    total = plain_sum(range(6))
    bound = secure.fixed_point(6).max_abs_error(6) * 0.5 + 1e-6  # lr 0.5, float32
    for name, theta in global_model().items():
        expected = theta.astype(np.float64) - 0.5 * total[name]
        assert np.max(np.abs(new[name] - expected)) <= bound
    assert metrics["num-replies"] == 6
    assert metrics["secagg-dropped"] == 0
    assert metrics["secagg-clipped"] == 0
    assert metrics["secagg-refusals"] == 0
    # advertise + upload, and in double-masking mode the unmask stage
    assert metrics["secagg-exchanges"] == (3 if mode == "double-masking" else 2)


@pytest.mark.parametrize("mode", MODES)
def test_secure_model_averaging_is_the_weighted_mean(mode):
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(
        ModelAveraging(min_available_nodes=6), metric_names=["train-loss"], mode=mode
    )
    new, metrics, _ = one_round(secure, grid)
    n = sum(sizes(p) for p in range(6))
    for name in global_model():
        expected = (
            sum(sizes(p) * client_update(p)[name].astype(np.float64) for p in range(6))
            / n
        )
        np.testing.assert_allclose(
            new[name], expected.astype(np.float32), rtol=1e-6, atol=1e-7
        )
    expected_loss = sum(sizes(p) * 0.1 * p for p in range(6)) / n
    assert metrics["train-loss"] == pytest.approx(expected_loss, rel=1e-9)
    assert secure.fixed_point(6).modulus_bits == 64  # n_k * theta_k needs 64 bits
    assert SecureAggregation(FedAvg(), max_weight=1).fixed_point(30).modulus_bits == 32


def test_secure_flower_fedavg_is_the_weighted_mean():
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(
        FedAvg(fraction_evaluate=0.0, min_train_nodes=6, min_available_nodes=6)
    )
    new, metrics, _ = one_round(secure, grid)
    n = sum(sizes(p) for p in range(6))
    for name in global_model():
        expected = (
            sum(sizes(p) * client_update(p)[name].astype(np.float64) for p in range(6))
            / n
        )
        np.testing.assert_allclose(new[name], expected, rtol=1e-6, atol=1e-7)
    assert metrics["num-replies"] == 6


def test_partial_gradients_count_as_zeros_in_a_secure_sum():
    grid = LocalGrid(make_app(only_b=True), NODES)
    secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=6))
    new, _, _ = one_round(secure, grid)
    np.testing.assert_allclose(new["w"], global_model()["w"], atol=1e-6)
    expected_b = global_model()["b"] - plain_sum(range(6))["b"]
    np.testing.assert_allclose(new["b"], expected_b, atol=1e-5)


# ------------------------------------------------------------------ what the server sees
@pytest.mark.parametrize("mode", MODES)
def test_uploads_hold_only_the_masked_vector_and_sealed_shares(mode):
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(SyncSGD(0.5, min_available_nodes=6), mode=mode)
    messages = list(
        secure.configure_train(1, numpy_to_arrays(global_model()), ConfigRecord(), grid)
    )
    assert all(ENCODING_RECORD in m.content.config_records for m in messages)
    replies = grid.send_and_receive(messages)
    for reply in replies:
        assert not reply.has_error()
        assert list(reply.content.keys()) == [RECORD]
        assert not reply.content.array_records and not reply.content.metric_records
        record = reply.content[RECORD]
        masked = np.frombuffer(record[Key.MASKED], dtype=np.uint32)
        assert masked.size == 15 + 3 + 2
        if mode == "double-masking":
            assert len(record[Key.SHARES]) == 5 * 48  # one sealed share per peer
        else:
            assert Key.SHARES not in record
    secure.aggregate_train(1, replies)


def test_keys_are_advertised_once_and_masks_change_every_round():
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(SyncSGD(0.5, min_available_nodes=6))
    uploads = []
    for server_round in (1, 2):
        messages = list(
            secure.configure_train(
                server_round, numpy_to_arrays(global_model()), ConfigRecord(), grid
            )
        )
        replies = grid.send_and_receive(messages)
        uploads.append(replies[0].content[RECORD][Key.MASKED])
        _, metrics = secure.aggregate_train(server_round, replies)
    assert len([m for m in grid.sent if stage_of(m) == Stage.ADVERTISE]) == 6
    assert metrics["secagg-exchanges"] == 2  # round 2: upload and unmask only
    assert uploads[0] != uploads[1]  # same input, fresh masks


def test_a_client_that_lost_its_state_is_rekeyed_and_counts_again():
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=6))
    secure.configure_train(1, numpy_to_arrays(global_model()), ConfigRecord(), grid)
    lost_node = next(n for n, p in NODES.items() if p == 2)
    # The node's state is written back without its session (last writer wins).
    grid.contexts[lost_node].state = RecordDict()
    new, metrics, _ = one_round(secure, grid, server_round=1)
    assert metrics["secagg-refused-unknown-session"] == 1
    assert metrics["num-replies"] == 5
    assert metrics["secagg-dropped"] == 1
    new, metrics, _ = one_round(secure, grid, server_round=2)
    assert metrics["secagg-refusals"] == 0
    assert metrics["num-replies"] == 6
    expected = plain_sum(range(6))
    for name, theta in global_model().items():
        np.testing.assert_allclose(new[name], theta - expected[name], atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_bytes_are_accounted_per_stage(mode):
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(SyncSGD(0.5, min_available_nodes=6), mode=mode)
    _, metrics, _ = one_round(secure, grid)
    length = 15 + 3 + 2
    assert metrics["secagg-bytes-up-advertise"] == 6 * 32
    assert metrics["secagg-bytes-up-upload"] == 6 * length * 4
    assert metrics["secagg-bytes-down-keys"] == 6 * 6 * 32
    assert metrics["secagg-bytes-down-roster-ids"] == 6 * 6 * 8
    if mode == "double-masking":
        assert metrics["secagg-bytes-up-shares"] == 6 * 5 * 48
        assert metrics["secagg-bytes-up-revealed-shares"] == 6 * 5 * 32
    else:
        assert "secagg-bytes-up-shares" not in metrics


# ------------------------------------------------------------------ dropouts and groups
@pytest.mark.parametrize("mode", MODES)
def test_two_clients_crash_mid_round_and_the_survivors_sum_is_recovered(mode):
    # a group of n tolerates n - t - 1 dropouts in double-masking mode
    # (t = floor(n/2) + 1): 8 clients for 2 crashes; thesis mode n - 3
    nodes = {9001 + 7 * p: p for p in range(8)}
    grid = LocalGrid(make_app(crash={1, 4}), nodes)
    secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=8), mode=mode)
    new, metrics, _ = one_round(secure, grid)
    survivors = plain_sum([0, 2, 3, 5, 6, 7])
    for name, theta in global_model().items():
        np.testing.assert_allclose(new[name], theta - survivors[name], atol=1e-5)
    assert metrics["secagg-dropped"] == 2
    assert metrics["num-errors"] == 2
    assert metrics["num-replies"] == 6
    assert metrics["secagg-bytes-up-recover"] == 6 * 20 * 4


def test_more_dropouts_than_the_threshold_allows_fail_the_group():
    # 6 clients: t = 4, so 5 must upload in double-masking mode
    grid = LocalGrid(make_app(crash={1, 4}), NODES)
    secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=6))
    new, metrics, _ = one_round(secure, grid)
    assert new is None and metrics["secagg-failed-groups"] == 1


def test_silent_dropouts_are_recovered_too():
    drop = {
        node: (lambda m: m.content.array_records != {})
        for node, p in NODES.items()
        if p == 3
    }
    grid = LocalGrid(make_app(), NODES, drop=drop)
    secure = SecureAggregation(ModelAveraging(min_available_nodes=6))
    new, metrics, _ = one_round(secure, grid)
    kept = [0, 1, 2, 4, 5]
    n = sum(sizes(p) for p in kept)
    for name in global_model():
        expected = (
            sum(sizes(p) * client_update(p)[name].astype(np.float64) for p in kept) / n
        )
        np.testing.assert_allclose(new[name], expected, rtol=1e-6, atol=1e-7)
    assert metrics["num-missing"] == 1


def test_groups_are_summed_separately_and_combined():
    nodes = {500 + p: p for p in range(10)}
    grid = LocalGrid(make_app(crash={7}), nodes)
    secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=10), group_size=5)
    new, metrics, _ = one_round(secure, grid)
    assert metrics["secagg-groups"] == 2
    survivors = plain_sum([p for p in range(10) if p != 7])
    for name, theta in global_model().items():
        np.testing.assert_allclose(new[name], theta - survivors[name], atol=2e-5)


@pytest.mark.parametrize("mode", MODES)
def test_too_few_online_fails_loudly_and_counts_every_non_uploader(mode, caplog):
    nodes = {10 + p: p for p in range(8)}
    grid = LocalGrid(make_app(crash={0, 1, 2, 3, 4, 5}), nodes)
    secure = SecureAggregation(
        SyncSGD(1.0, min_available_nodes=8), group_size=4, mode=mode
    )
    with caplog.at_level("ERROR", logger="flwr"):
        new, metrics, _ = one_round(secure, grid)
    assert new is None
    assert metrics["secagg-failed-groups"] == 2
    # every non-uploader counts, also in a group that could not be decrypted
    # (the 2 survivors uploaded, but nobody's input is in the model)
    assert metrics["secagg-dropped"] == 6
    assert metrics["num-replies"] == 0
    assert "global model is unchanged" in caplog.text


def test_a_member_failing_the_unmask_stage():
    def silent_at_unmask(m: Message) -> bool:
        return stage_of(m) == Stage.UNMASK

    crash_unmask = {node: silent_at_unmask for node, p in NODES.items() if p == 0}
    # with a dropout its recovery is missing: the group fails (both modes)
    for mode in MODES:
        grid = LocalGrid(make_app(crash={5}), NODES, drop=crash_unmask)
        secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=6), mode=mode)
        new, metrics, _ = one_round(secure, grid)
        assert new is None
        assert metrics["secagg-failed-groups"] == 1
    # without one, double masking only needs t of the others' shares
    grid = LocalGrid(make_app(), NODES, drop=crash_unmask)
    secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=6))
    new, metrics, _ = one_round(secure, grid)
    assert metrics["num-replies"] == 6
    expected = plain_sum(range(6))
    for name, theta in global_model().items():
        np.testing.assert_allclose(new[name], theta - expected[name], atol=1e-5)


# ------------------------------------------------------------------ malformed uploads
def tamper(reply: Message, **changes) -> Message:
    record = ConfigRecord(dict(reply.content[RECORD]))
    for key, value in changes.items():
        record[key.replace("_", "-")] = value
    meta = reply.metadata
    return Message(
        RecordDict({RECORD: record}),
        metadata=metadata(meta.src_node_id, message_type="train"),
    )


@pytest.mark.parametrize(
    "kind",
    [
        "short",
        "ragged",
        "stale-round",
        "unknown-group",
        "no-record",
        "duplicate",
        "stranger",
    ],
)
def test_malformed_uploads_are_rejected_and_the_round_completes(kind, caplog):
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=6))
    messages = list(
        secure.configure_train(1, numpy_to_arrays(global_model()), ConfigRecord(), grid)
    )
    replies = list(grid.send_and_receive(messages))
    victim = replies[2]
    masked = victim.content[RECORD][Key.MASKED]
    extra = []
    if kind == "short":
        replies[2] = tamper(victim, masked=masked[:-4])
    elif kind == "ragged":
        replies[2] = tamper(victim, masked=masked + b"\x00")
    elif kind == "stale-round":
        replies[2] = tamper(victim, round=0)
    elif kind == "unknown-group":
        replies[2] = tamper(victim, group=7)
    elif kind == "no-record":
        replies[2] = Message(
            RecordDict(), metadata=metadata(victim.metadata.src_node_id)
        )
    elif kind == "duplicate":
        extra = [tamper(victim)]
    elif kind == "stranger":
        extra = [Message(victim.content, metadata=metadata(424242))]
    with caplog.at_level("WARNING", logger="flwr"):
        arrays, metrics = secure.aggregate_train(1, replies + extra)
    new = arrays_to_numpy(arrays)
    assert metrics["num-rejected"] == 1
    if kind in ("duplicate", "stranger"):
        included = range(6)
    else:
        included = [p for p in range(6) if p != 2]
        assert metrics["secagg-dropped"] == 1
    total = plain_sum(included)
    for name, theta in global_model().items():
        np.testing.assert_allclose(new[name], theta - total[name], atol=2e-5)
    assert "secure aggregation" in caplog.text


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    "inner",
    [
        Krum(),
        FedMedian(),
        DifferentialPrivacyServerSideFixedClipping(FedAvg(), 1.0, 1.0, 3),
    ],
    ids=["krum", "median", "server-dp"],
)
def test_strategies_needing_individual_updates_are_refused(inner):
    with pytest.raises(ConfigError, match="individual client updates"):
        SecureAggregation(inner)


def test_unknown_strategies_are_refused():
    class Custom(Strategy):
        configure_train = configure_evaluate = aggregate_evaluate = summary = None  # type: ignore[assignment]

        def aggregate_train(self, server_round, replies):  # type: ignore[no-untyped-def]
            return None, None

    with pytest.raises(
        ConfigError,
        match=r"^SecureAggregation cannot wrap Custom: it wraps strategies whose aggregate is a \(weighted\) sum: SyncSGD, ModelAveraging, FedAvg and FedAvg's averaging subclasses \(FedAvgM, FedProx, FedAdam, \.\.\.\)$",
    ):
        SecureAggregation(Custom())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"group_size": 2}, "group_size=2 can never be decrypted"),
        ({"group_size": 4, "min_online": 5}, "group_size=4"),
        ({"min_online": 2}, "min_online"),
        ({"threshold": 0.3}, "threshold"),
        ({"mode": "plain"}, "mode"),
        ({"metric_names": ["a", "a"]}, "metric_names"),
        ({"metric_names": ["num-examples"]}, "weight"),
    ],
)
def test_settings_that_can_never_decrypt_are_refused_at_construction(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SecureAggregation(SyncSGD(1.0), **kwargs)


def test_a_sampling_below_the_floor_fails_before_any_message():
    nodes = {10 + p: p for p in range(4)}
    grid = LocalGrid(make_app(), nodes)
    secure = SecureAggregation(
        FedAvg(fraction_train=0.5, min_train_nodes=2, min_available_nodes=4)
    )
    with pytest.raises(
        ConfigError,
        match=r"^secure aggregation needs at least 3 clients per round \(mode 'double-masking' with min_online=3 and threshold=0\.5\), but the inner strategy's sampling \(fraction_train, min_train_nodes or the number of connected nodes\) gives 2; no group could ever be decrypted\.$",
    ):
        secure.configure_train(1, numpy_to_arrays(global_model()), ConfigRecord(), grid)
    assert not [m for m in grid.sent if stage_of(m) is not None]


def test_clients_refusing_thesis_mode_stop_the_run_with_a_config_error():
    grid = LocalGrid(make_app(accept_thesis=False), NODES)
    secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=6), mode="thesis")
    with pytest.raises(
        ConfigError,
        match=r"^every sampled client refused the secure-aggregation settings \(mode-refused x6\); clients take part in mode='thesis' only if built with make_secagg_mod\(accept_thesis=True\)$",
    ):
        one_round(secure, grid)


def test_fixed_point_overflow_is_refused_before_sending():
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(
        SyncSGD(1.0, min_available_nodes=6), scale=2.0**30, modulus_bits=32
    )
    with pytest.raises(
        ConfigError,
        match=r"^fixed point overflow: 6 inputs x weight 1 x clip 8 x scale 2\^30 = 5\.15e\+10 \(\+ 3 for rounding\) exceeds 2\^31; lower the scale or clip, or use modulus_bits=64\.$",
    ):
        list(
            secure.configure_train(
                1, numpy_to_arrays(global_model()), ConfigRecord(), grid
            )
        )
    assert not [m for m in grid.sent if stage_of(m) == Stage.UPLOAD]


def test_client_over_max_weight_fails_with_a_clear_error():
    grid = LocalGrid(make_app(), NODES)
    secure = SecureAggregation(ModelAveraging(min_available_nodes=6), max_weight=50)
    messages = list(
        secure.configure_train(1, numpy_to_arrays(global_model()), ConfigRecord(), grid)
    )
    replies = grid.send_and_receive(messages)
    errors = [r for r in replies if r.has_error()]
    assert errors and all("max_weight=50" in r.error.reason for r in errors)


def test_mod_passes_other_messages_through():
    app = make_app()
    context = LocalGrid(app, NODES).contexts[next(iter(NODES))]
    msg = Message(
        RecordDict({"arrays": ArrayRecord(), "config": ConfigRecord()}),
        metadata=metadata(0, dst=next(iter(NODES))),
    )
    reply = app(msg, context)
    assert "arrays" in reply.content.array_records  # the plain train reply


def test_the_default_mod_refuses_thesis_mode_by_name():
    app = ClientApp(mods=[secagg_mod])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        raise AssertionError("a refused upload must not train")

    grid = LocalGrid(app, NODES)
    node = next(iter(NODES))
    advertise = Message(
        RecordDict({RECORD: ConfigRecord({Key.STAGE: Stage.ADVERTISE})}),
        metadata=metadata(0, dst=node),
    )
    key = app(advertise, grid.contexts[node]).content[RECORD][Key.PUBLIC_KEY]
    upload = Message(
        RecordDict(
            {
                RECORD: ConfigRecord(
                    {
                        Key.STAGE: Stage.UPLOAD,
                        Key.SESSION: key,
                        Key.MODE: "thesis",
                        Key.ROUND: 1,
                    }
                )
            }
        ),
        metadata=metadata(0, dst=node),
    )
    reply = app(upload, grid.contexts[node])
    assert reply.content[RECORD][Key.REFUSAL] == Refusal.MODE_REFUSED


def _unmask_message(node: int, base: dict, **change) -> Message:
    record = dict(base)
    record.update(change)
    return Message(
        RecordDict({RECORD: ConfigRecord(record)}), metadata=metadata(0, dst=node)
    )


@pytest.mark.parametrize("mode", MODES)
def test_client_refuses_a_second_unmask_and_a_too_small_online_set(mode):
    grid = LocalGrid(make_app(crash={1}), NODES)
    secure = SecureAggregation(SyncSGD(1.0, min_available_nodes=6), mode=mode)
    unmasks: dict[int, dict] = {}
    original = grid.send_and_receive

    def spy(messages, *, timeout=None):
        for m in messages:
            if stage_of(m) == Stage.UNMASK:
                unmasks[m.metadata.dst_node_id] = dict(m.content[RECORD])
        return original(messages, timeout=timeout)

    grid.send_and_receive = spy  # type: ignore[method-assign]
    _, metrics, _ = one_round(secure, grid)
    assert metrics["secagg-dropped"] == 1
    node = next(n for n, p in NODES.items() if p == 0)
    # the round's unmask request was answered; asking again (e.g. with another
    # online set) is refused by name
    again = grid.app(_unmask_message(node, unmasks[node]), grid.contexts[node])
    assert again.content[RECORD][Key.REFUSAL] == Refusal.UNMASK_REPEATED
    # a fresh round: the server claims all but two members dropped
    unmasks.clear()
    messages = list(
        secure.configure_train(2, numpy_to_arrays(global_model()), ConfigRecord(), grid)
    )
    base = dict(
        next(m for m in messages if m.metadata.dst_node_id == node).content[RECORD]
    )
    replies = grid.send_and_receive(messages)
    online = sorted([node, next(n for n, p in NODES.items() if p == 2)])
    dropped = sorted(n for n in NODES if n not in online and n in secure.public_keys)
    forged = {
        Key.STAGE: Stage.UNMASK,
        Key.SESSION: base[Key.SESSION],
        Key.ROUND: base[Key.ROUND],
        Key.GROUP: base[Key.GROUP],
        Key.ONLINE: pack_ids(online),
        Key.DROPPED: pack_ids(dropped),
        Key.FORWARDED: b"",
    }
    refused = grid.app(_unmask_message(node, forged), grid.contexts[node])
    assert refused.content[RECORD][Key.REFUSAL] == Refusal.ONLINE_TOO_FEW
    secure.aggregate_train(2, replies)


# ------------------------------------------------------------------ experiment files
def _experiment(**sa) -> dict:
    return {
        "strategy": {"name": "sync-sgd"},
        "federation": {"num_clients": sa.pop("num_clients", 4)},
        "secure_aggregation": {"enabled": True, **sa},
    }


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (_experiment(num_clients=2), "num_clients = 2"),
        (_experiment(num_clients=1), "num_clients = 1"),
        (
            {**_experiment(), "strategy": {"name": "sync-sgd", "fraction_train": 0.5}},
            "fraction_train = 0.5",
        ),
        (_experiment(min_online=5), "min_online=5"),
        (_experiment(min_online=2), "min_online"),
        (_experiment(group_size=3, threshold=0.7), "group_size=3"),
        (_experiment(metric_names=["loss"]), "metric_names"),
        (_experiment(mode="plain"), "mode"),
    ],
)
def test_experiment_files_that_can_never_decrypt_are_refused_at_load(raw, match):
    from fedleak.experiments.config import validate

    with pytest.raises(ConfigError, match=match):
        validate(raw, "test", "test")


def test_experiment_files_take_mode_and_threshold():
    from fedleak.experiments.config import validate
    from fedleak.experiments.server import build_strategy

    config = validate(_experiment(mode="thesis", num_clients=5), "t", "t")
    strategy = build_strategy(config)
    assert isinstance(strategy, SecureAggregation) and strategy.mode == "thesis"
    config = validate(
        _experiment(threshold=0.6, metric_names=["train-accuracy"]), "t", "t"
    )
    strategy = build_strategy(config)
    assert strategy.threshold == 0.6 and strategy.mode == "double-masking"
