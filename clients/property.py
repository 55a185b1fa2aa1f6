"""Property inference adversaries and the scripted target, as client behaviours.

Seed 000 Ch. 7.1.1-7.1.5 (threat model, passive and active property
inference, Alg. 7) and the experiments of Ch. 7.2.3-7.2.7. Every node of a
simulation runs the same ClientApp; :func:`property_behaviour` picks the
behaviour of a node from its partition id and the message config
(``adversary.*`` and ``target.*`` entries, written by
:meth:`fedleak.experiments.config.ExperimentConfig.client_config` and read
by their schemas in :mod:`fedleak.settings`):

- the adversary's partition runs :class:`PassivePropertyAdversary` or
  :class:`ActivePropertyAdversary`;
- the target's partition (``task.property_target``) runs
  :class:`PropertyTarget`, whose batches follow the configured schedule;
- every other node is an honest :class:`~fedleak.clients.HonestClient`.

The adversaries follow the protocol (they train and upload every round), keep
the previous global model and their own previous upload in
``Context.state``, derive the others' aggregate update from consecutive global
models, compute labelled auxiliary gradients at the current model and write
both to ``<run dir>/adversary/round-NNNNNN.npz``
(:class:`fedleak.attacks.property.ObservationLog`), so the attack is trained
and scored offline (:func:`fedleak.attacks.property.load_observations`). The
target writes what its batches really held to ``<run dir>/target/truth.jsonl``
(evaluation ground truth, never seen by the adversary).

Assumptions the adversary makes about the protocol, as in the seed: it takes
part in every round (``fraction_train = 1``), it knows the server step and
reduction (sync-SGD) and the number of clients ``K``, and (model averaging)
the clients hold equally many records. Under model averaging its own weight
is ``n_adv / n`` with the ``n`` the server announces for the previous round
(:data:`fedleak.protocol.PREVIOUS_AGGREGATED_EXAMPLES`), else ``1/K``; and the
aggregate it observed is that of ``n / n_adv - 1`` others (equal records),
else ``K - 1``. So when a participant joins late (Fig. 7.9: ``K = 2`` then
``3``) the adversary's view before the join is exactly the one other
participant's update, and it emulates aggregates of as many others as it
observed in that round.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, cast

import numpy as np
import torch
from fedleak.attacks.property.classifier import ObservationLog, gradient_features
from fedleak.attacks.property.gradients import (
    AuxiliaryPools,
    PropertyHead,
    apply_head_step,
    derive_averaging_aggregate,
    derive_sgd_aggregate,
    emulated_averaging_pair,
    emulated_sgd_pair,
    last_linear,
    multitask_gradient,
)
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, MetricRecord

from fedleak import protocol
from fedleak.data import apply_property
from fedleak.errors import ConfigError, DataError
from fedleak.settings import (
    AdversarySettings,
    PropertyAttackSettings,
    ProtocolFacts,
    RunContext,
    TargetSchedule,
)
from fedleak.task import ClientData, TaskSpec, client_data, training_pool
from fedleak.training import batch_gradient

from .honest import HonestClient

__all__ = [
    "PROPERTY_ADVERSARY_KINDS",
    "ActivePropertyAdversary",
    "PassivePropertyAdversary",
    "PropertyAttackContext",
    "AUX_SOURCES",
    "PropertyTarget",
    "auxiliary_pools",
    "held_out_records",
    "property_behaviour",
]

PROPERTY_ADVERSARY_KINDS: Final = ("passive-property", "active-property")
"""Values of ``adversary.kind`` handled by :func:`property_behaviour`."""

_STATE_MODEL = "fedleak.property.model"
_STATE_UPLOAD = "fedleak.property.upload"
_STATE_HEAD = "fedleak.property.head"
_STATE_META = "fedleak.property.meta"


@dataclass(frozen=True)
class PropertyAttackContext:
    """What a message tells the property adversary.

    Its settings (``[adversary.property]``), what it knows of the protocol
    (``protocol.*``: server step, reduction, number of clients ``K``) and the
    run directory its observations go to; each part is read by its own
    schema (:mod:`fedleak.settings`).
    """

    attack: PropertyAttackSettings
    protocol: ProtocolFacts
    run_dir: str = ""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PropertyAttackContext:
        """Read the three parts from a message config.

        Raises
        ------
        ConfigError
            If an entry is missing (``protocol.*``) or wrong.
        """
        return cls(
            attack=AdversarySettings.from_config(config).property,
            protocol=ProtocolFacts.from_config(config),
            run_dir=RunContext.from_config(config).run_dir,
        )

    @property
    def emulated_participants(self) -> int:
        """Other participants whose aggregate the adversary emulates (``K - 1``)."""
        return self.attack.emulate or max(self.protocol.num_clients - 1, 1)


@dataclass(frozen=True)
class AveragingView:
    """What the model-averaging adversary observed in one round (Ch. 7.2.7).

    Attributes
    ----------
    own_weight : float
        Its share ``n_adv / n`` of ``theta_t - theta_{t-1}`` (Alg. 2, line 8).
    others : int
        Other participants in that round's average (0: it was alone).
    emulated : int
        Other participants its labelled aggregates emulate (>= 1): ``others``
        unless ``adversary.property.emulate`` fixes it.
    """

    own_weight: float
    others: int
    emulated: int

    @property
    def total(self) -> int:
        """Participants of the emulated average (weights ``1/total``)."""
        return max(self.emulated, self.others) + 1

    @classmethod
    def of(
        cls, settings: PropertyAttackContext, announced: object, own_records: int
    ) -> AveragingView:
        """Derive the view from the server's announced ``n`` (or ``K``).

        Parameters
        ----------
        settings : PropertyAttackContext
            The attack settings (``K``, ``emulate``).
        announced : object
            The config's :data:`fedleak.protocol.PREVIOUS_AGGREGATED_EXAMPLES`
            (None when the server did not announce it: then ``1/K`` and
            ``K - 1``, the seed's assumption).
        own_records : int
            ``n_adv``, the adversary's records (its reply's weight).
        """
        k = settings.protocol.num_clients
        if (
            isinstance(announced, int | float)
            and not isinstance(announced, bool)
            and announced > 0
            and own_records > 0
        ):
            weight = own_records / float(announced)
            others = max(round(float(announced) / own_records) - 1, 0)
        else:
            weight, others = 1.0 / k, k - 1
        emulated = settings.attack.emulate or max(others, 1)
        return cls(own_weight=weight, others=others, emulated=emulated)


def _round_of(config: ConfigRecord | None) -> int:
    value = None if config is None else config.get(protocol.SERVER_ROUND, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def _numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


def _append_jsonl(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")


def auxiliary_pools(
    spec: TaskSpec, partition_id: int, source: str = "own"
) -> AuxiliaryPools:
    """Build the adversary's ``X_prop`` / ``X_nonprop`` (Alg. 7's input).

    With ``source="own"`` (the default), ``X_nonprop`` is the adversary's
    records without the property and ``X_prop`` the same records rendered
    with ``spec.property_kind`` (a label-independent property,
    :mod:`fedleak.data.properties`) plus any records that already have it.
    The federation trains on those records every round, so late in training
    the emulations without the property train on records the model has
    memorised, those with it on renderings it never saw.

    With ``source="held-out"``, both pools are built the same way from as many
    records of the training pool that no client holds (drawn without the
    property, seeded by the task's seed and the partition): auxiliary data
    "from the same class ... otherwise unrelated" (seed 000 Ch. 7.1.4), on
    which neither label's emulation has been trained.

    With ``source="own-property"``, ``X_prop`` is the adversary's records that
    carry the property (``data.property_adversary_fraction``) and
    ``X_nonprop`` those that do not, none rendered: the federation trains on
    both, as on the target's (seed 000 Ch. 7.2.7: "the adversary has the
    same number of inputs with the property as the target").

    Pools from the partition are as large as it, so an emulated participant
    (Ch. 7.2.7) can hold as many distinct records as a real one. Cached per
    process.

    Raises
    ------
    ConfigError
        If ``source`` is not one of :data:`AUX_SOURCES`.
    DataError
        If there are no records without the property to build from, too few
        held-out records, or (``"own-property"``) the partition lacks records
        with or without the property.
    """
    if source not in AUX_SOURCES:
        raise ConfigError(
            f"auxiliary records {source!r}: choose from {list(AUX_SOURCES)}"
        )
    return _auxiliary_pools(spec.data_key(), spec, partition_id, source)


AUX_SOURCES: Final = ("own", "held-out", "own-property")
"""Where the property adversary's auxiliary records come from."""


def held_out_records(
    spec: TaskSpec, partition_id: int, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``count`` training-pool records without the property that no client holds.

    Seeded by ``spec.seed`` and ``partition_id``: every process of a run
    draws the same records.

    Raises
    ------
    DataError
        If the pool has fewer than ``count`` such records.
    """
    x, y, has_property, parts = training_pool(spec)
    free = ~has_property
    free[np.concatenate(parts)] = False
    candidates = np.flatnonzero(free)
    if candidates.size < count:
        raise DataError(
            f"held-out auxiliary records: the training pool has {candidates.size} "
            f"records without the property outside every partition, the adversary "
            f"needs {count}; use adversary.property.aux_records = 'own' or "
            "smaller partitions"
        )
    rng = np.random.default_rng(
        np.random.SeedSequence([spec.seed, partition_id, 0xA0C])
    )
    chosen = np.sort(rng.choice(candidates, size=count, replace=False))
    return x[chosen], y[chosen]


@lru_cache(maxsize=8)
def _auxiliary_pools(
    key: tuple[Any, ...], spec: TaskSpec, partition_id: int, source: str
) -> AuxiliaryPools:
    data = client_data(spec, partition_id)
    if source == "own-property":
        return _own_property_pools(data, partition_id)
    if source == "held-out":
        x_plain, y_plain = held_out_records(spec, partition_id, data.num_train)
        x_plain = x_plain.astype(data.x_train.numpy().dtype, copy=False)
        x_already, y_already = x_plain[:0], y_plain[:0]
    else:
        plain = np.flatnonzero(~data.has_property)
        already = np.flatnonzero(data.has_property)
        x_plain, y_plain = data.x_train[plain].numpy(), data.y_train[plain].numpy()
        x_already = data.x_train[already].numpy()
        y_already = data.y_train[already].numpy()
    if x_plain.shape[0] == 0:
        raise DataError(
            f"the adversary's partition {partition_id} has no record without the "
            "property to build its auxiliary data from"
        )
    rendered = apply_property(x_plain, spec.property_kind)
    y_plain = np.asarray(y_plain, dtype=np.int64)
    return AuxiliaryPools(
        x_prop=torch.from_numpy(np.concatenate([rendered, x_already])),
        y_prop=torch.from_numpy(np.concatenate([y_plain, y_already])),
        x_nonprop=torch.from_numpy(np.ascontiguousarray(x_plain)),
        y_nonprop=torch.from_numpy(y_plain),
    )


def _own_property_pools(data: ClientData, partition_id: int) -> AuxiliaryPools:
    """Split the partition's records by the property, none rendered."""
    has = data.has_property.astype(bool)
    if has.all() or not has.any():
        raise DataError(
            f"adversary.property.aux_records = 'own-property': the adversary's "
            f"partition {partition_id} holds {int(has.sum())} records with the "
            f"property and {int((~has).sum())} without; it needs both (set "
            "data.property_adversary_fraction in (0, 1))"
        )
    return AuxiliaryPools(
        x_prop=data.x_train[torch.from_numpy(has)],
        y_prop=data.y_train[torch.from_numpy(has)],
        x_nonprop=data.x_train[torch.from_numpy(~has)],
        y_nonprop=data.y_train[torch.from_numpy(~has)],
    )


class PassivePropertyAdversary(HonestClient):
    """Passive property inference adversary (seed 000 Ch. 7.1.4, Alg. 7).

    It replies exactly as an honest client would (sync-SGD: the gradient of
    its next batch; model averaging: its locally trained model). On the side,
    in round ``t`` it

    1. derives the others' aggregate update of round ``t - 1`` from the global
       models it received (Ch. 7.1.2): under synchronized SGD (Alg. 1)
       ``sum_{k != adv} g_k = (theta_{t-2} - theta_{t-1}) / lr - g_adv``
       (times ``K`` for a mean reduction); under model averaging (Alg. 2)
       ``theta_{t-1} - theta_{t-2} - (theta_adv - theta_{t-2}) / K``;
    2. computes ``aux_pairs`` labelled gradient pairs at the current model
       (Alg. 7, lines 6-9), emulating the aggregate of ``K - 1`` others
       (Ch. 7.2.6-7.2.7);
    3. writes the pooled features of both to its observation log.

    Settings come from the message config (:class:`PropertyAttackContext`).
    """

    kind: str = "passive-property"

    def settings(self) -> PropertyAttackContext:
        """Return the attack settings of the current message."""
        if self.config is None:
            raise ConfigError("the adversary was not bound to a message (bind())")
        return PropertyAttackContext.from_config(self.config)

    def _context(self) -> Context:
        if self.context is None:
            raise ConfigError("the adversary was not bound to a node (bind())")
        return self.context

    # ------------------------------------------------------------- uploads
    def upload_gradient(
        self, model: torch.nn.Module, state: ConfigRecord
    ) -> tuple[dict[str, np.ndarray], float, float, int]:
        """Compute the protocol's ClientUpdate (Alg. 1): the honest batch gradient.

        Returns the gradient, loss, accuracy and batch size.
        """
        batch = torch.from_numpy(self.next_batch(state))
        grads, loss, acc = batch_gradient(
            model, self.data.x_train[batch], self.data.y_train[batch]
        )
        return grads, loss, acc, int(batch.shape[0])

    def gradient_reply(
        self, arrays: ArrayRecord, state: ConfigRecord
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Honest one-batch gradient; observe the previous round on the side."""
        settings = self.settings()
        server_round = _round_of(self.config)
        theta = _numpy(arrays)
        model = self.model_at(arrays)
        grads, loss, acc, size = self.upload_gradient(model, state)
        observed = self._observe_sgd(theta, settings, server_round)
        aux, labels = self._auxiliary(model, settings, server_round, averaging=False)
        self._log(settings, server_round, observed, aux, labels)
        self._remember(theta, grads, server_round)
        metrics = MetricRecord(
            {protocol.NUM_EXAMPLES: size, "train-loss": loss, "train-accuracy": acc}
        )
        return _record(grads), metrics

    def model_reply(
        self, arrays: ArrayRecord, config: ConfigRecord, server_round: int
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Honest local training; observe the previous round on the side."""
        settings = self.settings()
        theta = _numpy(arrays)
        out, metrics = super().model_reply(arrays, config, server_round)
        view = AveragingView.of(
            settings,
            config.get(protocol.PREVIOUS_AGGREGATED_EXAMPLES),
            self.data.num_train,
        )
        observed = self._observe_averaging(theta, view, server_round)
        model = self.model_at(arrays)
        aux, labels = self._auxiliary(
            model, settings, server_round, averaging=True, view=view
        )
        self._log(settings, server_round, observed, aux, labels, view=view)
        self._remember(theta, _numpy(out), server_round)
        return out, metrics

    # --------------------------------------------------------- observation
    def _previous(
        self, server_round: int
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
        state = self._context().state
        meta = state.config_records.get(_STATE_META)
        if meta is None or meta.get("round") != server_round - 1:
            return None
        return (
            _numpy(state.array_records[_STATE_MODEL]),
            _numpy(state.array_records[_STATE_UPLOAD]),
        )

    def _remember(
        self, theta: dict[str, np.ndarray], upload: dict[str, np.ndarray], rnd: int
    ) -> None:
        state = self._context().state
        state[_STATE_MODEL] = _record(theta)
        state[_STATE_UPLOAD] = _record(upload)
        state[_STATE_META] = ConfigRecord({"round": rnd})

    def _observe_sgd(
        self,
        theta: dict[str, np.ndarray],
        settings: PropertyAttackContext,
        server_round: int,
    ) -> dict[str, np.ndarray] | None:
        previous = self._previous(server_round)
        if previous is None:
            return None
        before, upload = previous
        scale = (
            1.0
            if settings.protocol.reduction == "sum"
            else float(settings.protocol.num_clients)
        )
        observed: dict[str, np.ndarray] = derive_sgd_aggregate(
            before, theta, upload, settings.protocol.learning_rate, scale
        )
        return observed

    def _observe_averaging(
        self,
        theta: dict[str, np.ndarray],
        view: AveragingView,
        server_round: int,
    ) -> dict[str, np.ndarray] | None:
        previous = self._previous(server_round)
        if previous is None or view.others == 0:  # nobody else to observe
            return None
        before, own_model = previous
        observed: dict[str, np.ndarray] = derive_averaging_aggregate(
            before, theta, own_model, view.own_weight
        )
        return observed

    def _auxiliary(
        self,
        model: torch.nn.Module,
        settings: PropertyAttackContext,
        server_round: int,
        *,
        averaging: bool,
        view: AveragingView | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        pools = auxiliary_pools(
            self.spec, self.partition_id, settings.attack.aux_records
        )
        rng = self.rng(0xA11, server_round)
        rows: list[np.ndarray] = []
        labels: list[int] = []
        config = self.config if self.config is not None else ConfigRecord()
        for _ in range(settings.attack.aux_pairs):
            if averaging:
                epochs = config.get(protocol.LOCAL_EPOCHS, self.spec.local_epochs)
                lr = config.get(protocol.LEARNING_RATE, self.spec.learning_rate)
                if view is None:
                    view = AveragingView.of(settings, None, self.data.num_train)
                positive, negative = emulated_averaging_pair(
                    model,
                    pools,
                    participants=view.emulated,
                    total_participants=view.total,
                    records=self.data.num_train,
                    prop_fraction=settings.attack.aux_fraction,
                    epochs=int(cast(int, epochs)),
                    batch_size=self.spec.batch_size,
                    learning_rate=float(cast(float, lr)),
                    rng=rng,
                )
            else:
                positive, negative = emulated_sgd_pair(
                    model,
                    pools,
                    batch_size=self.spec.batch_size,
                    participants=settings.emulated_participants,
                    prop_fraction=settings.attack.aux_fraction,
                    rng=rng,
                )
            rows += [
                gradient_features(positive, settings.attack.pooling),
                gradient_features(negative, settings.attack.pooling),
            ]
            labels += [1, 0]
        return np.stack(rows), np.asarray(labels)

    def _log(
        self,
        settings: PropertyAttackContext,
        server_round: int,
        observed: dict[str, np.ndarray] | None,
        aux: np.ndarray,
        labels: np.ndarray,
        *,
        view: AveragingView | None = None,
    ) -> None:
        if not settings.run_dir:
            raise ConfigError(
                "experiment.run-dir is empty: the property adversary needs a run "
                "directory for its observations (run through fedleak.experiments)"
            )
        features = (
            None
            if observed is None
            else gradient_features(observed, settings.attack.pooling)
        )
        ObservationLog(Path(settings.run_dir) / "adversary").write_round(
            server_round,
            observed=features,
            observed_round=server_round - 1 if features is not None else -1,
            aux=aux,
            aux_labels=labels,
            meta={
                "pooling": settings.attack.pooling,
                "partition": self.partition_id,
                "emulated_participants": (
                    settings.emulated_participants if view is None else view.emulated
                ),
                "observed_participants": (
                    settings.protocol.num_clients - 1 if view is None else view.others
                ),
                "aux_fraction": settings.attack.aux_fraction,
                "aux_records": settings.attack.aux_records,
                "alpha": settings.attack.alpha,
                "kind": self.kind,
            },
        )


class ActivePropertyAdversary(PassivePropertyAdversary):
    """Active property inference by multi-task learning (seed 000 Ch. 7.1.5).

    The adversary extends its copy of the model with a property head on the
    last layer (:class:`fedleak.attacks.property.gradients.PropertyHead`, kept
    in ``Context.state``) and uploads the gradient of

    ``L = (1 - alpha) * L(x, y; theta) + alpha * L(x', p; theta)``

    where, as in the seed, both terms use one auxiliary batch ``(x, y, p)``
    with main and property labels (half with the property, half without;
    ``x' = x``). **alpha weights the property term**; at ``alpha = 0`` the
    adversary trains on its honest batch instead, so it uploads exactly what
    :class:`PassivePropertyAdversary` uploads (the seed's Fig. 7.6 calls
    alpha = 0 the passive attack; its formula puts alpha on the main term).
    Observation and scoring are the passive adversary's. Synchronized SGD
    only (the upload is a gradient).
    """

    kind: str = "active-property"

    def upload_gradient(
        self, model: torch.nn.Module, state: ConfigRecord
    ) -> tuple[dict[str, np.ndarray], float, float, int]:
        """Compute the multi-task gradient; take one SGD step of the local head."""
        settings = self.settings()
        batch = torch.from_numpy(self.next_batch(state))
        x, y = self.data.x_train[batch], self.data.y_train[batch]
        head = self._head(model)
        server_round = _round_of(self.config)
        pools = auxiliary_pools(
            self.spec, self.partition_id, settings.attack.aux_records
        )
        x_p, y_p, p = pools.batch(
            self.spec.batch_size, 0.5, self.rng(0xAC7, server_round)
        )
        if settings.attack.alpha > 0.0:  # the seed's one batch (x, y, p)
            x, y = x_p, y_p
        shared, head_grads, _ = multitask_gradient(
            model, head, (x, y), (x_p, p), settings.attack.alpha
        )
        apply_head_step(head, head_grads, settings.attack.head_learning_rate)
        self._context().state[_STATE_HEAD] = _record(
            {k: v.detach().numpy().copy() for k, v in head.state_dict().items()}
        )
        with torch.no_grad():
            logits = model(x)
            loss = float(torch.nn.functional.cross_entropy(logits, y).item())
            acc = float((logits.argmax(dim=1) == y).float().mean().item())
        return shared, loss, acc, int(batch.shape[0])

    def _head(self, model: torch.nn.Module) -> PropertyHead:
        head = PropertyHead(last_linear(model).in_features, seed=self.spec.seed)
        stored = self._context().state.array_records.get(_STATE_HEAD)
        if stored is not None:
            head.load_state_dict(
                {k: torch.from_numpy(v.copy()) for k, v in _numpy(stored).items()}
            )
        return head


class PropertyTarget(HonestClient):
    """The target participant of the property experiments (Ch. 7.2.3-7.2.7).

    Its partition of the ``property`` split holds records with and without the
    property; :class:`TargetSchedule` decides what each batch holds. Under
    synchronized SGD each round's batch is drawn (seeded by round) from its
    records with the property (``batch_fraction`` of the batch) in property
    rounds and from those without otherwise; under model averaging it trains
    on its whole partition (or, with ``control``, on its records without the
    property). Before ``join_round`` it takes no part (Fig. 7.9: ``K = 2``
    until it joins): it replies with weight 0 and
    :data:`fedleak.protocol.ABSTAINED` = 1 (arrays that change nothing even
    for a strategy that ignored the flag: a zero gradient, or the received
    model unchanged), which fedleak's strategies and secure aggregation leave
    out of the aggregate. Every round it appends the truth to
    ``<run dir>/target/truth.jsonl``.
    """

    def schedule(self) -> TargetSchedule:
        """Return the schedule of the current message."""
        if self.config is None:
            raise ConfigError("the target was not bound to a message (bind())")
        return TargetSchedule.from_config(self.config)

    def _truth(self, server_round: int, fraction: float, joined: bool) -> None:
        run_dir = (
            "" if self.config is None else RunContext.from_config(self.config).run_dir
        )
        if run_dir:
            _append_jsonl(
                Path(run_dir) / "target" / "truth.jsonl",
                {
                    "round": server_round,
                    "property": fraction > 0,
                    "fraction": fraction,
                    "joined": joined,
                },
            )

    def _indices(self, with_property: bool) -> np.ndarray:
        mask = self.data.has_property if with_property else ~self.data.has_property
        return np.flatnonzero(mask)

    def gradient_reply(
        self, arrays: ArrayRecord, state: ConfigRecord
    ) -> tuple[ArrayRecord, MetricRecord]:
        """One batch scripted by the schedule (Alg. 1 ClientUpdate)."""
        schedule = self.schedule()
        server_round = _round_of(self.config)
        size = min(self.spec.batch_size, self.data.num_train)
        if not schedule.joined(server_round):
            model = self.model_at(arrays)
            zero = {
                n: np.zeros(tuple(p.shape), dtype=np.float32)
                for n, p in model.named_parameters()
            }
            self._truth(server_round, 0.0, False)
            return _record(zero), _abstention()
        if schedule.property_every == 0 and not schedule.control:
            batch = self.next_batch(state)
        else:
            fraction = (
                schedule.batch_fraction if schedule.has_property(server_round) else 0.0
            )
            batch = self._scripted_batch(size, fraction, server_round)
        x = self.data.x_train[torch.from_numpy(batch)]
        y = self.data.y_train[torch.from_numpy(batch)]
        grads, loss, acc = batch_gradient(self.model_at(arrays), x, y)
        frac = float(self.data.has_property[batch].mean()) if batch.size else 0.0
        self._truth(server_round, frac, True)
        metrics = MetricRecord(
            {
                protocol.NUM_EXAMPLES: int(batch.size),
                "train-loss": loss,
                "train-accuracy": acc,
            }
        )
        return _record(grads), metrics

    def _scripted_batch(
        self, size: int, fraction: float, server_round: int
    ) -> np.ndarray:
        rng = self.rng(0x7A6, server_round)
        n_prop = round(fraction * size)
        chosen = []
        for count, with_property in ((n_prop, True), (size - n_prop, False)):
            pool = self._indices(with_property)
            if count == 0:
                continue
            if pool.size == 0:
                raise DataError(
                    f"the target (partition {self.partition_id}) has no records "
                    f"{'with' if with_property else 'without'} the property for "
                    "its scripted batch; adjust data.property_target_fraction"
                )
            chosen.append(rng.choice(pool, size=count, replace=count > pool.size))
        return np.sort(np.concatenate(chosen))

    def model_reply(
        self, arrays: ArrayRecord, config: ConfigRecord, server_round: int
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Local training on its partition (Alg. 2); before joining, no part."""
        schedule = self.schedule()
        if not schedule.joined(server_round):
            self._truth(server_round, 0.0, False)
            return ArrayRecord(dict(arrays.items())), _abstention()
        if schedule.control:
            keep = torch.from_numpy(self._indices(False))
            if keep.numel() == 0:
                raise DataError(
                    "a control target needs records without the property; lower "
                    "data.property_target_fraction"
                )
            self.data = dataclasses.replace(
                self.data,
                x_train=self.data.x_train[keep],
                y_train=self.data.y_train[keep],
                has_property=self.data.has_property[keep.numpy()],
            )
        self._truth(server_round, float(self.data.has_property.mean()), True)
        return super().model_reply(arrays, config, server_round)


def _abstention() -> MetricRecord:
    """Metrics of a reply that sits the round out (weight 0, flagged)."""
    return MetricRecord({protocol.NUM_EXAMPLES: 0, protocol.ABSTAINED: 1})


def property_behaviour(
    spec: TaskSpec, partition_id: int, config: ConfigRecord
) -> HonestClient | None:
    """Pick the property-experiment behaviour of a node, or None if not involved.

    Returns the adversary for ``adversary.partition``, the
    :class:`PropertyTarget` for ``task.property_target`` and None otherwise
    (including when ``adversary.kind`` is not a property adversary), so a
    caller can fall back to another behaviour.
    """
    settings = AdversarySettings.from_config(config)
    kind = settings.kind
    if kind not in PROPERTY_ADVERSARY_KINDS:
        return None
    if partition_id == settings.partition:
        if kind == "active-property":
            return ActivePropertyAdversary(spec, partition_id)
        return PassivePropertyAdversary(spec, partition_id)
    if partition_id == spec.property_target:
        return PropertyTarget(spec, partition_id)
    return None
