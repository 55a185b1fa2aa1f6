"""The defended honest client of seed 000 Ch. 7.3, as a Flower client behaviour.

The defenses themselves (selective sharing, vocabulary restriction, record-
and participant-level DP, their epsilons) are Flower-free and live in
:mod:`fedleak.defenses`; :class:`DefendedClient` is the honest client with
a :class:`fedleak.defenses.ClientDefenses` on its training and upload. The
experiment's ``[defenses]`` section reaches it as ``defenses.*`` entries of
the message config (:meth:`ClientDefenses.from_config`), and
:func:`defended_behaviour` picks it when one of them turns a defense on.
Participant-level DP in a federation is Flower's own DP wrappers
(``[privacy]`` of an experiment file).
"""

from __future__ import annotations

import dataclasses
import math
from typing import cast

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord

from fedleak import protocol
from fedleak.defenses import (
    NOISE_SEED_KEY,
    SELECTION_WORD,
    ClientDefenses,
    private_local_training,
    record_level_epsilon,
)
from fedleak.privacy.randomness import noise_generator
from fedleak.task import TaskSpec
from fedleak.training import get_arrays

from .honest import HonestClient
from .records import array_record

__all__ = ["DefendedClient", "defended_behaviour"]


class DefendedClient(HonestClient):
    """The honest client with :class:`ClientDefenses` on its training and upload.

    Synchronized SGD: the defended one-batch gradient
    (:meth:`ClientDefenses.gradient`). Model averaging: local epochs on the
    restricted inputs (DP-SGD via :func:`private_local_training` when
    configured), then the upload side on the model change
    ``theta_k - theta``, uploaded as ``theta + defended change``. With DP-SGD
    the reply's metrics carry the cumulative ``record-epsilon`` of this
    client (delta ``defenses.dp_delta``, default 1e-5).

    The DP-SGD noise comes from :meth:`noise_rng`: fresh OS entropy, or
    ``[privacy] noise_seed`` when the experiment sets it (not private). The
    batches and their order follow the experiment's seed (:meth:`rng`), which
    is not secret and need not be.

    Parameters
    ----------
    spec : TaskSpec
        The task.
    partition_id : int
        This node's partition.
    defenses : ClientDefenses
        What to apply.
    """

    def __init__(
        self, spec: TaskSpec, partition_id: int, defenses: ClientDefenses
    ) -> None:
        super().__init__(spec, partition_id)
        self.defenses = defenses
        if defenses.vocab_top_n is not None:
            self.data = dataclasses.replace(
                self.data,
                x_train=defenses.inputs(self.data.x_train),
                x_test=defenses.inputs(self.data.x_test),
            )

    def _server_round(self) -> int:
        value = None if self.config is None else self.config.get(protocol.SERVER_ROUND)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def noise_rng(self, server_round: int) -> np.random.Generator:
        """Return the generator of this round's DP noise (fresh unless seeded).

        With ``[privacy] noise_seed`` (message entry
        :data:`~fedleak.defenses.NOISE_SEED_KEY`) it is derived from the
        noise seed, this partition and the round, so a resumed run adds the
        noise of the uninterrupted one; without, from ``os.urandom``.
        """
        seed = None if self.config is None else self.config.get(NOISE_SEED_KEY)
        noise_seed: int | None = None
        if isinstance(seed, int) and not isinstance(seed, bool):
            noise_seed = seed
        return noise_generator(noise_seed, self.partition_id, 0xDEF, server_round)

    def _epsilon(self, steps: int, batch_size: int) -> float:
        noise = self.defenses.dp_noise_multiplier
        if noise is None:
            return math.nan
        count = self._count_steps(steps)
        return record_level_epsilon(
            batch_size=min(batch_size, self.data.num_train),
            num_records=self.data.num_train,
            steps=count,
            noise_multiplier=noise,
            delta=self.defenses.dp_delta,
        )

    def _count_steps(self, steps: int) -> int:
        if self.context is None:
            return steps
        record = self.context.state.config_records.get("fedleak.defenses")
        total = steps + (0 if record is None else cast(int, record.get("steps", 0)))
        self.context.state["fedleak.defenses"] = ConfigRecord({"steps": total})
        return total

    def gradient_reply(
        self, arrays: ArrayRecord, state: ConfigRecord
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Defended one-batch gradient (seed 000 Alg. 1 with Ch. 7.3 defenses)."""
        model = self.model_at(arrays)
        batch = torch.from_numpy(self.next_batch(state))
        grads = self.defenses.gradient(
            model,
            self.data.x_train[batch],
            self.data.y_train[batch],
            seed=self.noise_rng(self._server_round()),
            selection_seed=self.rng(SELECTION_WORD, self._server_round()),
        )
        metrics = MetricRecord({protocol.NUM_EXAMPLES: int(batch.shape[0])})
        if self.defenses.dp_noise_multiplier is not None:
            metrics["record-epsilon"] = self._epsilon(1, int(batch.shape[0]))
        return array_record(grads), metrics

    def model_reply(
        self, arrays: ArrayRecord, config: ConfigRecord, server_round: int
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Defended local training (seed 000 Alg. 2 with Ch. 7.3 defenses)."""
        theta = {name: a.numpy() for name, a in arrays.items()}
        if self.defenses.dp_noise_multiplier is None:
            out, metrics = super().model_reply(arrays, config, server_round)
            trained = {name: a.numpy() for name, a in out.items()}
        else:
            epochs = int(
                cast(int, config.get(protocol.LOCAL_EPOCHS, self.spec.local_epochs))
            )
            lr = float(
                cast(float, config.get(protocol.LEARNING_RATE, self.spec.learning_rate))
            )
            batch = min(self.spec.batch_size, self.data.num_train)
            model, _ = private_local_training(
                self.model_at(arrays),
                self.data.x_train,
                self.data.y_train,
                epochs=epochs,
                batch_size=batch,
                learning_rate=lr,
                noise_multiplier=self.defenses.dp_noise_multiplier,
                max_grad_norm=self.defenses.dp_max_grad_norm,
                delta=self.defenses.dp_delta,
                seed=self.rng(0xDEF, server_round),
                noise_rng=self.noise_rng(server_round),
            )
            state = get_arrays(model)
            trained = {name: state[name] for name in theta}
            steps = epochs * math.ceil(self.data.num_train / batch)
            metrics = MetricRecord(
                {
                    protocol.NUM_EXAMPLES: self.data.num_train,
                    "record-epsilon": self._epsilon(steps, batch),
                }
            )
        change = {
            name: trained[name].astype(np.float64) - theta[name]
            for name in theta
            if np.issubdtype(theta[name].dtype, np.floating)
        }
        defended = self.defenses.upload(
            change, selection_seed=self.rng(SELECTION_WORD, server_round)
        )
        upload = {
            name: (theta[name] + defended[name]).astype(theta[name].dtype)
            if name in defended
            else trained[name]
            for name in theta
        }
        return array_record(upload), metrics


def defended_behaviour(
    spec: TaskSpec, partition_id: int, config: ConfigRecord
) -> HonestClient | None:
    """Return a :class:`DefendedClient` when ``defenses.*`` turn one on, else None.

    Raises
    ------
    ConfigError
        If a ``defenses.*`` entry is unknown or has a wrong value.
    """
    defenses = ClientDefenses.from_config(config)
    if not defenses.active:
        return None
    return DefendedClient(spec, partition_id, defenses)
