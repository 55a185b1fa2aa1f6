"""The honest ClientApp's handlers called directly with hand-made messages."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fedleak.clients import HonestClient, make_honest_client_app
from flower_fakes import metadata
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

from fedleak import protocol
from fedleak.task import TaskSpec, client_data
from fedleak.training import batch_gradient

SPEC = TaskSpec(dataset="digits", num_partitions=3, model="mlp", batch_size=40, seed=3)


def context(partition: int | None = 1) -> Context:
    node_config = (
        {} if partition is None else {"partition-id": partition, "num-partitions": 3}
    )
    return Context(
        run_id=1, node_id=77, node_config=node_config, state=RecordDict(), run_config={}
    )


def global_arrays() -> ArrayRecord:
    return ArrayRecord(SPEC.new_model().state_dict())


def instruction(
    message_type: str, extra: dict | None = None, spec: TaskSpec = SPEC
) -> Message:
    config = ConfigRecord(
        {**spec.to_config(), protocol.SERVER_ROUND: 1, **(extra or {})}
    )
    content = RecordDict(
        {protocol.ARRAYS_KEY: global_arrays(), protocol.CONFIG_KEY: config}
    )
    return Message(content, metadata=metadata(0, dst=77, message_type=message_type))


def test_gradient_mode_returns_the_gradient_of_one_batch_and_walks_epochs():
    app = make_honest_client_app()
    ctx = context(1)
    data = client_data(SPEC, 1)
    seen = []
    for _ in range(4):
        out = app(
            instruction("train", {protocol.TRAIN_MODE: protocol.MODE_GRADIENT}), ctx
        )
        assert not out.has_error()
        grads = {k: v.numpy() for k, v in out.content[protocol.ARRAYS_KEY].items()}
        metrics = out.content[protocol.METRICS_KEY]
        assert metrics[protocol.NUM_EXAMPLES] == 40
        seen.append(grads)
    state = ctx.state.config_records["fedleak.honest"]
    assert state["rounds"] == 4
    # 4 batches of 40 over ~479 records: still the first epoch, cursor at 160
    assert state["epoch"] == 0 and state["cursor"] == 160
    # the first reply is the gradient on the first 40 of epoch 0's permutation
    client = HonestClient(SPEC, 1)
    order = client.rng(0xE0C, 0).permutation(data.num_train)
    batch = torch.from_numpy(np.sort(order[:40]))
    expected, _, _ = batch_gradient(
        SPEC.new_model(), data.x_train[batch], data.y_train[batch]
    )
    for name, value in expected.items():
        np.testing.assert_allclose(seen[0][name], value, rtol=1e-5, atol=1e-7)
    assert not np.allclose(seen[0]["net.1.weight"], seen[1]["net.1.weight"])


def test_next_batch_moves_to_a_new_epoch_when_the_data_runs_out():
    client = HonestClient(SPEC, 0)
    state = ConfigRecord({"epoch": 0, "cursor": client.data.num_train - 10})
    batch = client.next_batch(state)
    assert state["epoch"] == 1 and state["cursor"] == 40 and len(batch) == 40


def test_model_mode_trains_locally_and_is_reproducible():
    app = make_honest_client_app()
    extra = {
        protocol.TRAIN_MODE: protocol.MODE_MODEL,
        protocol.LOCAL_EPOCHS: 2,
        protocol.LEARNING_RATE: 0.1,
    }
    outs = [app(instruction("train", extra), context(2)) for _ in range(2)]
    a, b = (
        {k: v.numpy() for k, v in o.content[protocol.ARRAYS_KEY].items()} for o in outs
    )
    start = {k: v.numpy() for k, v in global_arrays().items()}
    assert set(a) == set(start)
    assert any(not np.allclose(a[k], start[k]) for k in a)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert (
        outs[0].content[protocol.METRICS_KEY][protocol.NUM_EXAMPLES]
        == client_data(SPEC, 2).num_train
    )


def test_flower_fedavg_messages_without_mode_get_a_model():
    app = make_honest_client_app()
    out = app(instruction("train"), context(0))
    assert set(out.content[protocol.ARRAYS_KEY].keys()) == set(global_arrays().keys())


def test_evaluate_reports_accuracy_on_the_clients_test_share():
    app = make_honest_client_app()
    out = app(instruction("evaluate"), context(0))
    metrics = out.content[protocol.METRICS_KEY]
    assert 0.0 <= metrics["eval-accuracy"] <= 1.0
    assert metrics[protocol.NUM_EXAMPLES] == client_data(SPEC, 0).x_test.shape[0]


def test_identify_handler_answers_the_partition_id():
    app = make_honest_client_app()
    msg = Message(
        RecordDict(),
        metadata=metadata(0, dst=77, message_type=protocol.IDENTIFY_MESSAGE_TYPE),
    )
    out = app(msg, context(2))
    assert out.content[protocol.IDENTITY_RECORD][protocol.PARTITION_ID] == 2


@pytest.mark.parametrize(
    ("ctx", "message", "match"),
    [
        (context(None), instruction("train"), "partition-id"),
        (
            context(0),
            instruction("train", {protocol.TRAIN_MODE: "telepathy"}),
            "telepathy",
        ),
        (context(0), instruction("train", {protocol.LOCAL_EPOCHS: 0}), "local-epochs"),
    ],
)
def test_bad_messages_raise_clear_errors(ctx, message, match):
    app = make_honest_client_app()
    with pytest.raises(Exception, match=match):
        app(message, ctx)


def test_message_without_task_raises():
    app = make_honest_client_app()
    content = RecordDict(
        {protocol.ARRAYS_KEY: global_arrays(), protocol.CONFIG_KEY: ConfigRecord({})}
    )
    with pytest.raises(Exception, match="no fedleak task"):
        app(Message(content, metadata=metadata(0, dst=77)), context(0))


def test_work_model_gives_the_fresh_models_gradient_bit_for_bit():
    """Reusing one model per task changes no number (same seed, same results)."""
    client = HonestClient(SPEC, 2)
    batch = torch.arange(40)
    x, y = client.data.x_train[batch], client.data.y_train[batch]
    first = global_arrays()
    other = ArrayRecord({k: v * 0.5 for k, v in SPEC.new_model().state_dict().items()})
    fresh, _, _ = batch_gradient(client.model_at(first), x, y)
    # the work model served other weights (and a training step) in between
    client.model_reply(other, ConfigRecord({protocol.LOCAL_EPOCHS: 1}), 1)
    reused, _, _ = batch_gradient(client.work_model_at(first), x, y)
    assert client.work_model_at(first) is client.work_model_at(other)
    assert fresh.keys() == reused.keys()
    for name, value in fresh.items():
        assert np.array_equal(value, reused[name]), name


def test_an_app_built_with_rebuild_pickles_as_a_reference():
    import pickle

    from fedleak.experiments.runner import experiment_client_app

    app = experiment_client_app()
    data = pickle.dumps(app)
    assert len(data) < 200  # a module reference, not 5 kB of closures
    assert pickle.loads(data) is app  # the process's cached app
    reply = pickle.loads(data)(
        instruction("train", {protocol.TRAIN_MODE: protocol.MODE_GRADIENT}), context(1)
    )
    assert not reply.has_error()
    assert reply.content[protocol.METRICS_KEY][protocol.NUM_EXAMPLES] == 40
