"""The honest client: trains and evaluates the task's model on its partition.

It follows whichever protocol the message asks for (:mod:`fedleak.protocol`):

- ``fedleak-mode = "gradient"`` (:class:`fedleak.strategies.SyncSGD`, seed 000
  Alg. 1): the gradient of the loss on **one** mini-batch at the received
  model. Batches walk through seeded per-epoch permutations of the local data;
  the position (epoch, cursor) survives across rounds in ``Context.state``.
- ``fedleak-mode = "model"`` or absent (:class:`fedleak.strategies.ModelAveraging`,
  Alg. 2, and Flower's own ``FedAvg``): ``local-epochs`` epochs of SGD over the
  whole partition, shuffled with an RNG derived from (run seed, partition id,
  round); the reply is the model and ``n_k``.

The task (dataset, split, model, batch size, ...) arrives in the message as a
:class:`fedleak.task.TaskSpec`; the partition id comes from the node's
``node_config`` (``partition-id``), which Flower's simulation sets and a
deployment sets with ``flower-supernode --node-config "partition-id=0 ..."``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import cast

import numpy as np
import torch
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import Mod

from fedleak import protocol
from fedleak.errors import ConfigError
from fedleak.task import ClientData, TaskSpec, client_data
from fedleak.training import (
    arrays_from_records,
    batch_gradient,
    evaluate,
    get_arrays,
    set_arrays,
    train_epochs,
)

from .records import array_record

__all__ = [
    "BehaviourFactory",
    "HonestClient",
    "RebuiltClientApp",
    "add_identify_handler",
    "make_honest_client_app",
    "partition_id_of",
]

_STATE_KEY = "fedleak.honest"


def partition_id_of(context: Context) -> int:
    """Return the node's ``partition-id`` from its ``node_config``.

    Raises
    ------
    ConfigError
        If the node was started without a partition id.
    """
    value = context.node_config.get(protocol.PARTITION_ID)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            "this node has no integer 'partition-id' in its node_config; start it "
            'with flower-supernode --node-config "partition-id=<i> num-partitions=<N>"'
        )
    return value


def _identify(msg: Message, context: Context) -> Message:
    record = MetricRecord({protocol.PARTITION_ID: partition_id_of(context)})
    num = context.node_config.get(protocol.NUM_PARTITIONS)
    if isinstance(num, int) and not isinstance(num, bool):
        record[protocol.NUM_PARTITIONS] = num
    return Message(RecordDict({protocol.IDENTITY_RECORD: record}), reply_to=msg)


def add_identify_handler(app: ClientApp) -> ClientApp:
    """Register the ``query.fedleak_identify`` handler on any ClientApp.

    fedleak's strategies ask each node once for its partition id so that
    client sampling is reproducible; a user's own ClientApp answers after
    ``add_identify_handler(app)``. Returns ``app``.
    """
    action = protocol.IDENTIFY_MESSAGE_TYPE.split(".", 1)[1]
    app.query(action)(_identify)
    return app


def _task_of(msg: Message) -> tuple[TaskSpec, ConfigRecord]:
    config = msg.content.config_records.get(protocol.CONFIG_KEY)
    if config is None:
        raise ConfigError(f"the message has no ConfigRecord {protocol.CONFIG_KEY!r}")
    return TaskSpec.from_config(config), config


def _round_of(config: ConfigRecord) -> int:
    value = config.get(protocol.SERVER_ROUND, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class HonestClient:
    """The honest participant's behaviour for one node and one message.

    Subclass it to build adversaries that "follow the protocol honestly" and
    observe on the side (the property and membership adversaries do).

    Parameters
    ----------
    spec : TaskSpec
        The task the message carries.
    partition_id : int
        This node's partition.
    """

    def __init__(self, spec: TaskSpec, partition_id: int) -> None:
        self.spec = spec
        self.partition_id = partition_id
        self.data: ClientData = client_data(spec, partition_id)
        self.context: Context | None = None
        self.config: ConfigRecord | None = None

    def bind(self, context: Context, config: ConfigRecord) -> None:
        """Give the behaviour its node's ``Context`` and the message's config.

        Called by the ClientApp before every reply; subclasses (adversaries,
        scripted targets) keep state across rounds in ``context.state`` and
        read their settings from ``config``.
        """
        self.context, self.config = context, config

    def rng(self, *words: int) -> np.random.Generator:
        """RNG derived from (run seed, partition id, *words), e.g. the round."""
        return np.random.default_rng([self.spec.seed, self.partition_id, *words])

    def model_at(self, arrays: ArrayRecord) -> torch.nn.Module:
        """Build a fresh task model loaded with the received global ``arrays``."""
        model = self.spec.new_model()
        set_arrays(model, arrays_from_records(arrays))
        return model

    def work_model_at(self, arrays: ArrayRecord) -> torch.nn.Module:
        """Return this thread's reusable task model, loaded with ``arrays``.

        Building the model costs about as much as one mini-batch gradient of
        the quickstart CNN, so the honest replies reuse one model per task
        and thread (a Ray actor runs one message at a time). Every call
        overwrites all its weights and buffers; the caller must not keep it
        past the reply or change its structure (use :meth:`model_at` then).
        """
        model = _work_model(self.spec)
        set_arrays(model, arrays_from_records(arrays))
        return model

    def next_batch(self, state: ConfigRecord) -> np.ndarray:
        """Return the indices of the next mini-batch and advance ``state``.

        Each local epoch is a permutation drawn from (seed, partition id,
        epoch); a batch never straddles two epochs (the tail is dropped unless
        the partition is smaller than one batch).
        """
        n = self.data.num_train
        size = min(self.spec.batch_size, n)
        epoch = cast(int, state.get("epoch", 0))
        cursor = cast(int, state.get("cursor", 0))
        if cursor + size > n:
            epoch, cursor = epoch + 1, 0
        order = self.rng(0xE0C, epoch).permutation(n)
        batch = order[cursor : cursor + size]
        state["epoch"], state["cursor"] = epoch, cursor + size
        return np.sort(batch)

    def gradient_reply(
        self, arrays: ArrayRecord, state: ConfigRecord
    ) -> tuple[ArrayRecord, MetricRecord]:
        """One-batch gradient at the global model (seed 000 Alg. 1, ClientUpdate)."""
        model = self.work_model_at(arrays)
        batch = torch.from_numpy(self.next_batch(state))
        grads, loss, acc = batch_gradient(
            model, self.data.x_train[batch], self.data.y_train[batch]
        )
        metrics = MetricRecord(
            {
                protocol.NUM_EXAMPLES: int(batch.shape[0]),
                "train-loss": loss,
                "train-accuracy": acc,
            }
        )
        return array_record(grads), metrics

    def model_reply(
        self, arrays: ArrayRecord, config: ConfigRecord, server_round: int
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Local epochs of SGD from the global model (seed 000 Alg. 2, ClientUpdate)."""
        model = self.work_model_at(arrays)
        epochs = config.get(protocol.LOCAL_EPOCHS, self.spec.local_epochs)
        lr = config.get(protocol.LEARNING_RATE, self.spec.learning_rate)
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ConfigError(
                f"{protocol.LOCAL_EPOCHS} must be an integer >= 1, got {epochs!r}"
            )
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
            raise ConfigError(f"{protocol.LEARNING_RATE} must be > 0, got {lr!r}")
        generator = torch.Generator().manual_seed(
            int(self.rng(0x5EED, server_round).integers(2**62))
        )
        loss, _ = train_epochs(
            model,
            self.data.x_train,
            self.data.y_train,
            epochs=epochs,
            batch_size=self.spec.batch_size,
            learning_rate=float(lr),
            generator=generator,
        )
        metrics = MetricRecord(
            {protocol.NUM_EXAMPLES: self.data.num_train, "train-loss": loss}
        )
        return array_record(get_arrays(model)), metrics

    def evaluate_reply(self, arrays: ArrayRecord) -> MetricRecord:
        """Loss and accuracy of the global model on this client's test share."""
        result = evaluate(
            self.work_model_at(arrays), self.data.x_test, self.data.y_test
        )
        return MetricRecord(
            {
                protocol.NUM_EXAMPLES: result.num_examples,
                "eval-loss": result.loss,
                "eval-accuracy": result.accuracy,
            }
        )


_WORK_MODELS = threading.local()
_WORK_MODELS_PER_THREAD = 4


def _work_model(spec: TaskSpec) -> torch.nn.Module:
    """Return this thread's model for ``spec``, building it on first use."""
    cache: dict[TaskSpec, torch.nn.Module] | None = getattr(_WORK_MODELS, "cache", None)
    if cache is None:
        cache = _WORK_MODELS.cache = {}
    model = cache.get(spec)
    if model is None:
        if len(cache) >= _WORK_MODELS_PER_THREAD:
            del cache[next(iter(cache))]
        model = cache[spec] = spec.new_model()
    return model


def _state(context: Context) -> ConfigRecord:
    if _STATE_KEY not in context.state.config_records:
        context.state[_STATE_KEY] = ConfigRecord({"epoch": 0, "cursor": 0, "rounds": 0})
    return context.state.config_records[_STATE_KEY]


BehaviourFactory = Callable[[TaskSpec, int, ConfigRecord], HonestClient]
"""Chooses a node's behaviour from (task, partition id, message config)."""


def _behaviour_for(
    behaviour: type[HonestClient] | BehaviourFactory,
    spec: TaskSpec,
    partition: int,
    context: Context,
    config: ConfigRecord,
) -> HonestClient:
    client: HonestClient
    if isinstance(behaviour, type):
        client = behaviour(spec, partition)
    else:
        client = behaviour(spec, partition, config)
    client.bind(context, config)
    return client


class RebuiltClientApp(ClientApp):
    """A ClientApp that pickles as a call to a module-level function.

    Flower's Ray engine pickles the ClientApp with every message it hands to
    an actor (``ClientAppActor.run(app_fn, message, ...)``). An app whose
    handlers are closures pickles by value: about 5 kB and 1 ms per message
    on the server, and as long again to unpickle in the actor. This one
    pickles as a reference to ``rebuild``, which must return an equivalent
    app (cache it, e.g. with :func:`functools.cache`, so each actor builds
    it once).
    """

    def __init__(self, rebuild: Callable[[], ClientApp], mods: list[Mod] | None):
        super().__init__(mods=mods)
        self.rebuild = rebuild

    def __reduce__(self) -> tuple[Callable[[], ClientApp], tuple[()]]:
        return self.rebuild, ()


def make_honest_client_app(
    *,
    mods: list[Mod] | None = None,
    behaviour: type[HonestClient] | BehaviourFactory = HonestClient,
    rebuild: Callable[[], ClientApp] | None = None,
) -> ClientApp:
    """Build the honest ClientApp (train, evaluate and identify handlers).

    Parameters
    ----------
    mods : list of Mod, optional
        Flower client mods wrapping every handler (e.g. Flower's
        ``fixedclipping_mod``).
    behaviour : type or callable, default=HonestClient
        The class implementing the replies (subclasses customise them), or a
        :data:`BehaviourFactory` ``f(spec, partition_id, config)`` that picks
        one per node, e.g. an adversary on one partition and honest clients
        elsewhere (every node of a simulation runs the same ClientApp).
    rebuild : callable, optional
        A module-level function returning this same app: the app then
        pickles as a reference to it (:class:`RebuiltClientApp`), which
        saves Flower's Ray engine pickling the app with every message.

    Returns
    -------
    flwr.clientapp.ClientApp
    """
    app = ClientApp(mods=mods) if rebuild is None else RebuiltClientApp(rebuild, mods)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        spec, config = _task_of(msg)
        partition = partition_id_of(context)
        if spec.crashes_in(partition, _round_of(config)):
            raise RuntimeError(
                f"injected crash of client {partition} in round {_round_of(config)} "
                "(faults.crash_clients)"
            )
        client = _behaviour_for(behaviour, spec, partition, context, config)
        arrays = msg.content.array_records[protocol.ARRAYS_KEY]
        state = _state(context)
        mode = config.get(protocol.TRAIN_MODE, protocol.MODE_MODEL)
        if mode == protocol.MODE_GRADIENT:
            out, metrics = client.gradient_reply(arrays, state)
        elif mode == protocol.MODE_MODEL:
            out, metrics = client.model_reply(arrays, config, _round_of(config))
        else:
            raise ConfigError(f"unknown {protocol.TRAIN_MODE} {mode!r}")
        state["rounds"] = cast(int, state["rounds"]) + 1
        content = RecordDict({protocol.ARRAYS_KEY: out, protocol.METRICS_KEY: metrics})
        return Message(content, reply_to=msg)

    @app.evaluate()
    def evaluate_(msg: Message, context: Context) -> Message:
        spec, config = _task_of(msg)
        client = _behaviour_for(
            behaviour, spec, partition_id_of(context), context, config
        )
        metrics = client.evaluate_reply(msg.content.array_records[protocol.ARRAYS_KEY])
        return Message(RecordDict({protocol.METRICS_KEY: metrics}), reply_to=msg)

    return add_identify_handler(app)
