"""Machinery shared by fedleak's Message-API strategies.

:class:`PartitionAwareStrategy` fixes three weaknesses of Flower 1.41's
built-in strategies that matter for reproducible leakage experiments:

1. **Start-up race.** The ServerApp can start before its nodes have
   registered and then silently run empty rounds. The strategy waits until
   ``min_available_nodes`` nodes are connected (or fails after
   ``node_wait_timeout`` seconds with a clear error).
2. **Irreproducible sampling.** Node ids are random per run and Flower samples
   them with the global ``random`` module. The strategy asks every new node
   for its partition id once (message ``query.fedleak_identify``, see
   :mod:`fedleak.protocol`), orders nodes by partition id and samples with
   ``numpy.random.default_rng([seed, round, stream])``: same seed, same
   clients, whatever the node ids. Nodes that cannot answer are ordered by node
   id after the identified ones (and a warning says so).
3. **Silent failures.** Error replies and missing replies are skipped and
   counted in the round's metrics (``num-errors``, ``num-missing``,
   ``num-rejected`` for malformed replies), and replies are aggregated in
   partition order so floating-point sums do not depend on arrival order.

A client that has not joined the training yet (seed 000 Fig. 7.9: ``K = 2``
until the target joins, then ``K = 3``) answers with weight 0 and
:data:`fedleak.protocol.ABSTAINED` = 1: :meth:`PartitionAwareStrategy.abstains`
recognises it, and the reply is left out of the aggregate and of
``num-replies`` (counted in ``num-abstained``), so the round is exactly the
round of the others. A weight of 0 without the flag, or a negative one, is
still a malformed reply.
"""

from __future__ import annotations

import math
import time
from abc import ABC
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from logging import DEBUG, INFO, WARNING

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from fedleak import protocol
from fedleak.arrays import array_fields
from fedleak.errors import ConfigError, ProtocolError
from fedleak.training import arrays_from_records
from fedleak.validation import check_int, check_probability

__all__ = [
    "PartitionAwareStrategy",
    "RoundReplies",
    "arrays_to_numpy",
    "numpy_to_arrays",
]


def arrays_to_numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    """Return the arrays of ``record`` as an ordered ``{name: ndarray}`` dict.

    The arrays are read-only views of the record's bytes (no ``numpy.load``
    per array: :func:`fedleak.training.arrays_from_records`); copy one to
    change it.
    """
    return arrays_from_records(record)


def numpy_to_arrays(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Pack an ordered ``{name: ndarray}`` mapping into an :class:`ArrayRecord`."""
    return ArrayRecord(
        {
            name: Array(**array_fields(np.asarray(value)))
            for name, value in arrays.items()
        }
    )


@dataclass
class RoundReplies:
    """The replies of one round, sorted and counted.

    Attributes
    ----------
    valid : list of Message
        Replies without error, in partition order.
    num_sampled : int
        Nodes the round was sent to.
    num_errors : int
        Error replies (the ClientApp raised, or the node failed).
    num_missing : int
        Sampled nodes that did not reply before the timeout.
    num_rejected : int
        Replies that arrived but were malformed (set by the aggregator).
    num_abstained : int
        Well-formed replies of clients that sat the round out (weight 0 and
        :data:`fedleak.protocol.ABSTAINED`; set by the aggregator).
    """

    valid: list[Message]
    num_sampled: int
    num_errors: int
    num_missing: int
    num_rejected: int = 0
    rejected_reasons: list[str] = field(default_factory=list)
    num_abstained: int = 0

    def counts(self) -> dict[str, int]:
        """Return the counts as the round metrics fedleak reports.

        ``num-replies`` counts the replies that were aggregated: valid ones
        less the rejected and the abstaining ones.
        """
        return {
            "num-sampled": self.num_sampled,
            "num-replies": len(self.valid) - self.num_rejected - self.num_abstained,
            "num-errors": self.num_errors,
            "num-missing": self.num_missing,
            "num-rejected": self.num_rejected,
            "num-abstained": self.num_abstained,
        }


#: Error-reply texts of a ClientApp that has no identify handler (Message-API
#: apps route before their mods; a client_fn app's legacy handler refuses it).
_NO_IDENTIFY_HANDLER = (
    "No query function registered",
    "Invalid message type",
)


def _last_line(text: str) -> str:
    """Return the last non-empty line of ``text`` (an exception's message)."""
    lines = [line.strip(" '>\"") for line in text.splitlines() if line.strip(" '>\"")]
    return lines[-1] if lines else text


class PartitionAwareStrategy(Strategy, ABC):
    """Base of fedleak's strategies: waiting, identification, seeded sampling.

    Subclasses implement ``configure_train`` with :meth:`configure_train_round`
    and ``aggregate_train`` with :meth:`global_model` and
    :meth:`accept_replies` (which validates, orders and counts the replies);
    evaluation and the summary are shared.

    Parameters
    ----------
    fraction_train : float, default=1.0
        Fraction of the connected nodes sampled for training each round.
    min_train_nodes : int, default=1
        At least this many nodes are sampled for training.
    fraction_evaluate : float, default=0.0
        Fraction of the nodes sampled for federated evaluation (0 disables it;
        server-side evaluation goes through ``start(evaluate_fn=...)``).
    min_evaluate_nodes : int, default=1
        At least this many nodes are sampled when evaluation is enabled.
    min_available_nodes : int, default=2
        Rounds start only once this many nodes are connected. Set it to the
        number of clients of the federation.
    seed : int, default=0
        Seed of the node sampling.
    node_wait_timeout : float, default=300.0
        Seconds to wait for ``min_available_nodes`` before failing.
    identify_timeout : float, default=60.0
        Seconds to wait for the nodes' partition ids.
    weighted_by_key : str, default="num-examples"
        Key of the reply MetricRecord that weights metric averages.
    identify : bool, default=True
        Ask new nodes for their partition ids (``query.fedleak_identify``).
        With False, or when the ClientApp has no handler for it (found by
        asking one node first), nodes are ordered by node id.
    """

    def __init__(
        self,
        *,
        fraction_train: float = 1.0,
        min_train_nodes: int = 1,
        fraction_evaluate: float = 0.0,
        min_evaluate_nodes: int = 1,
        min_available_nodes: int = 2,
        seed: int = 0,
        node_wait_timeout: float = 300.0,
        identify_timeout: float = 60.0,
        weighted_by_key: str = protocol.NUM_EXAMPLES,
        identify: bool = True,
    ) -> None:
        check_probability("fraction_train", fraction_train)
        check_probability("fraction_evaluate", fraction_evaluate)
        check_int("min_train_nodes", min_train_nodes, low=1)
        check_int("min_evaluate_nodes", min_evaluate_nodes, low=1)
        check_int("min_available_nodes", min_available_nodes, low=1)
        check_int("seed", seed, low=0)
        if node_wait_timeout <= 0 or identify_timeout <= 0:
            raise ConfigError("node_wait_timeout and identify_timeout must be > 0")
        self.fraction_train = fraction_train
        self.min_train_nodes = min_train_nodes
        self.fraction_evaluate = fraction_evaluate
        self.min_evaluate_nodes = min_evaluate_nodes
        self.min_available_nodes = min_available_nodes
        self.seed = seed
        self.node_wait_timeout = node_wait_timeout
        self.identify_timeout = identify_timeout
        self.weighted_by_key = weighted_by_key
        self.identify_nodes = bool(identify)
        self._identify_probed = False
        self._identify_unsupported = False
        self.partition_of: dict[int, int | None] = {}
        self._sampled: dict[tuple[str, int], list[int]] = {}
        self._global: dict[int, dict[str, np.ndarray]] = {}

    # ------------------------------------------------------------------ nodes
    def wait_for_nodes(self, grid: Grid) -> list[int]:
        """Block until ``min_available_nodes`` are connected; return their ids.

        Raises
        ------
        ProtocolError
            If too few nodes connect within ``node_wait_timeout`` seconds.
        """
        deadline = time.monotonic() + self.node_wait_timeout
        announced = False
        while len(nodes := list(grid.get_node_ids())) < self.min_available_nodes:
            if time.monotonic() > deadline:
                raise ProtocolError(
                    f"only {len(nodes)} of the {self.min_available_nodes} expected "
                    f"nodes connected within {self.node_wait_timeout:g} s; start more "
                    "SuperNodes or lower min_available_nodes"
                )
            if not announced:
                log(
                    INFO,
                    "Waiting for nodes: %d of %d connected",
                    len(nodes),
                    self.min_available_nodes,
                )
                announced = True
            time.sleep(0.05)
        return nodes

    def identify(self, grid: Grid, node_ids: Iterable[int]) -> None:
        """Ask nodes for their partition ids and remember the answers.

        The first time, one node is asked alone: a ClientApp without the
        handler (a plain Flower app) answers with an error, which Flower's
        runtime logs with a traceback, so the other nodes are then not asked
        at all; one warning line names the fix and the fallback (nodes
        ordered by node id). ``identify=False`` skips the query.
        """
        node_ids = list(node_ids)
        if not self.identify_nodes or self._identify_unsupported:
            for node_id in node_ids:
                self.partition_of.setdefault(node_id, None)
            return
        if not self._identify_probed and len(node_ids) > 1:
            self._identify_probed = True
            self.identify(grid, node_ids[:1])
            if self._identify_unsupported:
                for node_id in node_ids[1:]:
                    self.partition_of.setdefault(node_id, None)
                return
            node_ids = node_ids[1:]
        self._identify_probed = True
        messages = [
            Message(
                RecordDict(),
                dst_node_id=node_id,
                message_type=protocol.IDENTIFY_MESSAGE_TYPE,
            )
            for node_id in node_ids
        ]
        answers: dict[int, int | None] = dict.fromkeys(node_ids)
        for reply in grid.send_and_receive(messages, timeout=self.identify_timeout):
            node_id = reply.metadata.src_node_id
            if reply.has_error():
                reason = reply.error.reason or ""
                if any(sign in reason for sign in _NO_IDENTIFY_HANDLER):
                    self._identify_unsupported = True
                    log(
                        WARNING,
                        "The ClientApp has no handler for %s (register it with "
                        "fedleak.clients.add_identify_handler(app), or use "
                        "fedleak.clients.legacy_client_mod / secagg_mod for "
                        "client_fn apps); nodes are ordered by node id instead "
                        "(sampling is not reproducible across runs). Pass "
                        "identify=False to skip the query",
                        protocol.IDENTIFY_MESSAGE_TYPE,
                    )
                continue
            record = reply.content.metric_records.get(protocol.IDENTITY_RECORD)
            value = None if record is None else record.get(protocol.PARTITION_ID)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                answers[node_id] = value
        known = [p for p in self.partition_of.values() if p is not None]
        seen: set[int] = set(known)
        for node_id, partition in answers.items():
            if partition is not None and partition in seen:
                log(
                    WARNING,
                    "Two nodes claim partition %d; ordering by node id",
                    partition,
                )
                partition = None
            if partition is not None:
                seen.add(partition)
            self.partition_of[node_id] = partition
        unknown = [n for n, p in answers.items() if p is None]
        if unknown and not self._identify_unsupported:
            log(
                WARNING,
                "%d node(s) gave no partition id (register fedleak.clients."
                "add_identify_handler on their ClientApp); they are ordered by "
                "node id, which changes between runs, so sampling is not "
                "reproducible",
                len(unknown),
            )

    def ordered_nodes(self, grid: Grid) -> list[int]:
        """Return the connected nodes ordered by partition id (identifying new ones)."""
        nodes = self.wait_for_nodes(grid)
        new = [n for n in nodes if n not in self.partition_of]
        if new:
            self.identify(grid, new)

        def order(node_id: int) -> tuple[int, int]:
            partition = self.partition_of.get(node_id)
            return (0, partition) if partition is not None else (1, node_id)

        return sorted(nodes, key=order)

    def _sample(
        self,
        server_round: int,
        nodes: list[int],
        fraction: float,
        minimum: int,
        stream: int,
    ) -> list[int]:
        count = max(math.floor(fraction * len(nodes) + 1e-9), minimum)
        count = min(count, len(nodes))
        if count == len(nodes):
            return list(nodes)
        rng = np.random.default_rng([self.seed, server_round, stream])
        chosen = np.sort(rng.choice(len(nodes), size=count, replace=False))
        return [nodes[i] for i in chosen]

    def sample_nodes(
        self, server_round: int, grid: Grid, phase: str = "train"
    ) -> list[int]:
        """Sample this round's nodes for ``phase`` (seeded, in partition order)."""
        nodes = self.ordered_nodes(grid)
        if phase == "train":
            fraction, minimum, stream = self.fraction_train, self.min_train_nodes, 0
        else:
            fraction, minimum, stream = (
                self.fraction_evaluate,
                self.min_evaluate_nodes,
                1,
            )
        sampled = self._sample(server_round, nodes, fraction, minimum, stream)
        self._sampled[(phase, server_round)] = sampled
        log(
            INFO,
            "configure_%s: sampled %d of %d nodes",
            phase,
            len(sampled),
            len(nodes),
        )
        return sampled

    def configure_train_round(
        self,
        server_round: int,
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
        extra: Mapping[str, object],
    ) -> list[Message]:
        """Remember the global model, sample nodes and build the train messages."""
        self._global = {server_round: arrays_to_numpy(arrays)}
        nodes = self.sample_nodes(server_round, grid, "train")
        return self.build_messages(
            nodes, arrays, config, server_round, MessageType.TRAIN, extra
        )

    def global_model(self, server_round: int) -> dict[str, np.ndarray]:
        """Return the global model sent out in ``server_round``.

        Raises
        ------
        ProtocolError
            If ``configure_train`` did not run for that round.
        """
        model = self._global.get(server_round)
        if model is None:
            raise ProtocolError(
                f"aggregate_train for round {server_round} before configure_train"
            )
        return model

    def sampled_partitions(
        self, server_round: int, phase: str = "train"
    ) -> list[int | None]:
        """Return the partition ids sampled in ``server_round`` (None if unknown)."""
        nodes = self._sampled.get((phase, server_round), [])
        return [self.partition_of.get(n) for n in nodes]

    # --------------------------------------------------------------- messages
    def build_messages(
        self,
        node_ids: Iterable[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        server_round: int,
        message_type: str,
        extra: Mapping[str, object] | None = None,
    ) -> list[Message]:
        """Build one message per node carrying ``arrays`` and a copy of ``config``."""
        content_config = ConfigRecord(dict(config))
        content_config[protocol.SERVER_ROUND] = server_round
        for key, value in (extra or {}).items():
            content_config[key] = value  # type: ignore[assignment]
        return [
            Message(
                RecordDict(
                    {protocol.ARRAYS_KEY: arrays, protocol.CONFIG_KEY: content_config}
                ),
                dst_node_id=node_id,
                message_type=message_type,
                group_id=str(server_round),
            )
            for node_id in node_ids
        ]

    def collect_replies(
        self, server_round: int, replies: Iterable[Message], phase: str = "train"
    ) -> RoundReplies:
        """Split replies into valid ones (partition order) and counted failures."""
        replies = list(replies)
        sampled = self._sampled.get((phase, server_round))
        valid = [m for m in replies if not m.has_error()]
        errors = [m for m in replies if m.has_error()]
        for message in errors:
            reason = message.error.reason or f"error code {message.error.code}"
            log(
                WARNING,
                "%s round %d: error reply from node %d: %s",
                phase,
                server_round,
                message.metadata.src_node_id,
                _last_line(reason),
            )
            log(DEBUG, "full error reply: %s", reason)

        def order(message: Message) -> tuple[int, int]:
            node_id = message.metadata.src_node_id
            partition = self.partition_of.get(node_id)
            return (0, partition) if partition is not None else (1, node_id)

        valid.sort(key=order)
        answered = {m.metadata.src_node_id for m in replies}
        for message in valid:  # an aggregate reply answers for its contributors
            record = message.content.config_records.get(protocol.AGGREGATE_RECORD)
            packed = (
                None if record is None else record.get(protocol.AGGREGATE_CONTRIBUTORS)
            )
            if isinstance(packed, bytes):
                answered.update(protocol.unpack_ids(packed))
        missing = (
            0 if sampled is None else len([n for n in sampled if n not in answered])
        )
        if missing:
            log(
                WARNING,
                "%s round %d: %d sampled node(s) did not reply",
                phase,
                server_round,
                missing,
            )
        return RoundReplies(
            valid=valid,
            num_sampled=len(sampled) if sampled is not None else len(replies),
            num_errors=len(errors),
            num_missing=missing,
        )

    @staticmethod
    def single_records(
        message: Message, need_arrays: bool
    ) -> tuple[ArrayRecord | None, MetricRecord]:
        """Return the reply's one ArrayRecord and one MetricRecord.

        Raises
        ------
        ProtocolError
            If the reply does not hold exactly one of each (one MetricRecord
            and no ArrayRecord requirement when ``need_arrays`` is False).
        """
        content = message.content
        if len(content.metric_records) != 1:
            raise ProtocolError(
                f"reply from node {message.metadata.src_node_id} must hold exactly "
                f"one MetricRecord, found {len(content.metric_records)}"
            )
        metrics = next(iter(content.metric_records.values()))
        if not need_arrays:
            return None, metrics
        if len(content.array_records) != 1:
            raise ProtocolError(
                f"reply from node {message.metadata.src_node_id} must hold exactly "
                f"one ArrayRecord, found {len(content.array_records)}"
            )
        return next(iter(content.array_records.values())), metrics

    def reply_weight(self, message: Message, metrics: MetricRecord) -> float:
        """Return the reply's positive, finite ``weighted_by_key`` value."""
        weight = metrics.get(self.weighted_by_key)
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight <= 0
        ):
            hint = (
                f" (a client that sits the round out also sets {protocol.ABSTAINED}=1)"
                if weight == 0
                else ""
            )
            raise ProtocolError(
                f"reply from node {message.metadata.src_node_id} has "
                f"{self.weighted_by_key}={weight!r}; expected a positive number" + hint
            )
        return float(weight)

    def abstains(self, message: Message) -> bool:
        """Whether a reply sits the round out (its client has not joined yet).

        Such a reply's MetricRecord holds :data:`fedleak.protocol.ABSTAINED`
        = 1 and ``weighted_by_key`` = 0 (seed 000 Fig. 7.9: a participant
        that joins later takes no part before); its arrays, if any, are not
        read. A reply without the flag (or with ``ABSTAINED`` = 0) does not
        abstain and is checked as usual.

        Raises
        ------
        ProtocolError
            If the reply does not hold exactly one MetricRecord, or it sets
            the flag to anything but 0 or 1, or sets it with a weight other
            than 0 (a client cannot both abstain and count).
        """
        _, metrics = self.single_records(message, need_arrays=False)
        flag = metrics.get(protocol.ABSTAINED)
        if flag is None or (flag == 0 and not isinstance(flag, bool)):
            return False
        node = message.metadata.src_node_id
        if isinstance(flag, bool) or flag != 1:
            raise ProtocolError(
                f"reply from node {node} has {protocol.ABSTAINED}={flag!r}; "
                "expected 1 (sits the round out) or 0"
            )
        weight = metrics.get(self.weighted_by_key)
        if isinstance(weight, bool) or weight != 0:
            raise ProtocolError(
                f"reply from node {node} abstains ({protocol.ABSTAINED}=1) but has "
                f"{self.weighted_by_key}={weight!r}; an abstaining reply must "
                "weigh 0"
            )
        return True

    def reject(
        self, round_replies: RoundReplies, message: Message, reason: str
    ) -> None:
        """Count ``message`` as malformed and log why."""
        round_replies.num_rejected += 1
        round_replies.rejected_reasons.append(reason)
        log(
            WARNING,
            "rejected reply from node %d: %s",
            message.metadata.src_node_id,
            reason,
        )

    def check_arrays(
        self, message: Message, model: Mapping[str, np.ndarray], *, complete: bool
    ) -> tuple[dict[str, np.ndarray], float]:
        """Validate a reply's arrays against the global ``model``.

        Returns the arrays and the reply's weight (``weighted_by_key``).

        Raises
        ------
        ProtocolError
            On an unknown array name, a wrong shape, a non-finite value, a
            missing array when ``complete`` is True, or a bad weight.
        """
        record, metrics = self.single_records(message, need_arrays=True)
        assert record is not None
        weight = self.reply_weight(message, metrics)
        arrays = arrays_to_numpy(record)
        unknown = sorted(set(arrays) - set(model))
        missing = sorted(set(model) - set(arrays)) if complete else []
        if unknown or missing:
            raise ProtocolError(
                f"arrays differ from the model: unknown {unknown}, missing {missing}"
            )
        for name, value in arrays.items():
            if value.shape != model[name].shape:
                raise ProtocolError(
                    f"array {name!r} has shape {value.shape}, "
                    f"model has {model[name].shape}"
                )
            if not np.all(np.isfinite(value)):
                raise ProtocolError(f"array {name!r} holds non-finite values")
        return arrays, weight

    def accept_replies(
        self, server_round: int, replies: Iterable[Message], *, complete: bool
    ) -> tuple[list[tuple[dict[str, np.ndarray], float]], MetricRecord]:
        """Validate the round's replies against the global model.

        Returns the accepted replies' ``(arrays, weight)`` in partition order,
        and the round metrics: the weighted mean of the accepted replies'
        metrics plus the counts of :meth:`RoundReplies.counts`. Abstaining
        replies (:meth:`abstains`) are neither accepted nor rejected: they
        are counted in ``num-abstained`` only.
        """
        model = self.global_model(server_round)
        collected = self.collect_replies(server_round, replies)
        accepted: list[tuple[dict[str, np.ndarray], float]] = []
        accepted_messages: list[Message] = []
        for message in collected.valid:
            try:
                if self.abstains(message):
                    collected.num_abstained += 1
                    continue
                accepted.append(self.check_arrays(message, model, complete=complete))
            except ProtocolError as err:
                self.reject(collected, message, str(err))
                continue
            accepted_messages.append(message)
        metrics = self.aggregate_client_metrics(accepted_messages)
        for key, count in collected.counts().items():
            metrics[key] = count
        return accepted, metrics

    def aggregate_client_metrics(self, accepted: list[Message]) -> MetricRecord:
        """Average the accepted replies' metrics, weighted by ``weighted_by_key``."""
        if not accepted:
            return MetricRecord()
        return aggregate_metricrecords(
            [m.content for m in accepted], self.weighted_by_key
        )

    # ------------------------------------------------------------- evaluation
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send the global model to a seeded sample of nodes for evaluation."""
        if self.fraction_evaluate == 0.0:
            return []
        sampled = self.sample_nodes(server_round, grid, "evaluate")
        return self.build_messages(
            sampled, arrays, config, server_round, MessageType.EVALUATE
        )

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Average the evaluation metrics of the valid replies."""
        collected = self.collect_replies(server_round, replies, phase="evaluate")
        accepted = []
        for message in collected.valid:
            try:
                _, metrics = self.single_records(message, need_arrays=False)
                self.reply_weight(message, metrics)
            except ProtocolError as err:
                self.reject(collected, message, str(err))
                continue
            accepted.append(message)
        if not accepted and collected.num_sampled == 0:
            return None
        result = self.aggregate_client_metrics(accepted)
        for key, value in collected.counts().items():
            result[key] = value
        return result

    def summary(self) -> None:
        """Log the sampling settings."""
        log(INFO, "\t├──> Sampling (seed %d):", self.seed)
        log(
            INFO,
            "\t│\t├── fraction train %.2f (min %d) | evaluate %.2f (min %d)",
            self.fraction_train,
            self.min_train_nodes,
            self.fraction_evaluate,
            self.min_evaluate_nodes,
        )
        log(INFO, "\t│\t└── waits for %d nodes", self.min_available_nodes)
