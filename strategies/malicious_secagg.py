"""A malicious server for secure aggregation, as a Flower strategy.

:class:`MaliciousSecureAggregation` plays the attacks of
:mod:`fedleak.attacks.secagg` against real ClientApps that run
:func:`fedleak.clients.secagg.make_secagg_mod`, over a Flower ``Grid``: the
plays are the Flower-free ones, and this module only carries their records
(:class:`GridVictims`). It trains nothing: in its first round it identifies
the nodes' partitions, then runs every attack in every mode (each with fresh
sessions) and keeps the server's reconstructions; ``aggregate_train``
returns no model and one metric per attack and mode (``recovered`` when a
``truth`` function is given).

The clients' training input is the global model the strategy sends, and a
``fedleak-attack-tag`` entry in the train config names which input a request
stands for (a replayed request carries another tag), so a test ClientApp can
return a known update per partition and tag.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from logging import INFO

import numpy as np
from fedleak.attacks.secagg import (
    PLAYS,
    REQUIRED_ATTACKS,
    AttackOutcome,
    AttackSetup,
    Attempt,
    score,
)
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedleak import protocol
from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import MODES, FixedPoint, Mode
from fedleak.secagg.constants import ENCODING_RECORD, Key, Stage
from fedleak.secagg.layout import VectorLayout
from fedleak.secagg.records import Record

from .base import arrays_to_numpy
from .secure_aggregation import exchange_records

__all__ = ["ATTACK_TAG", "GridVictims", "MaliciousSecureAggregation"]

#: Train-config key naming which input an upload request stands for.
ATTACK_TAG = "fedleak-attack-tag"

#: ``truth(partition, tag) -> arrays``: the update a client returns.
TruthFn = Callable[[int, int], Mapping[str, np.ndarray]]


class GridVictims:
    """The clients of a Flower run, reached through the Grid.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The grid.
    arrays : ArrayRecord
        The global model sent with every upload request.
    encoding : ConfigRecord
        The encoding record of the uploads (fixed point and layout).
    timeout : float
        Seconds to wait for each exchange.
    """

    def __init__(
        self, grid: Grid, arrays: ArrayRecord, encoding: ConfigRecord, timeout: float
    ) -> None:
        self.grid = grid
        self.arrays = arrays
        self.encoding = encoding
        self.timeout = timeout

    def _exchange(
        self,
        requests: Mapping[int, Record],
        extra: dict[int, dict[str, ArrayRecord | ConfigRecord]],
    ) -> dict[int, Record]:
        replies, _ = exchange_records(
            self.grid,
            requests,
            message_type="train",
            timeout=self.timeout,
            extra=extra,
        )
        return {node: dict(reply) for node, reply in replies.items()}

    def advertise(self, nodes: Sequence[int]) -> dict[int, Record]:
        """Open a session on each node."""
        return self._exchange({n: {Key.STAGE: Stage.ADVERTISE} for n in nodes}, {})

    def upload(self, requests: Mapping[int, Record], tag: int) -> dict[int, Record]:
        """Send train messages carrying the upload requests."""
        extra: dict[int, dict[str, ArrayRecord | ConfigRecord]] = {
            node: {
                protocol.ARRAYS_KEY: self.arrays,
                protocol.CONFIG_KEY: ConfigRecord({ATTACK_TAG: tag}),
                ENCODING_RECORD: self.encoding,
            }
            for node in requests
        }
        return self._exchange(requests, extra)

    def unmask(self, requests: Mapping[int, Record]) -> dict[int, Record]:
        """Send the unmask requests."""
        return self._exchange(requests, {})


class MaliciousSecureAggregation(Strategy):
    """A server that attacks fedleak's secure aggregation (for measurement).

    Parameters
    ----------
    attacks : sequence of str, default=REQUIRED_ATTACKS
        Attacks of :data:`fedleak.attacks.secagg.ATTACKS` to play.
    modes : sequence of str, default=("double-masking", "thesis")
        Modes to attack.
    target_partition : int, default=2
        The client to unmask.
    colluder_partition : int, default=0
        A client whose input the server knows (low-threshold attack; with a
        ``truth`` function its update is read from it).
    num_nodes : int, default=8
        Nodes to wait for; all of them form one group.
    clip : float, default=8.0
        Fixed-point clipping bound.
    truth : callable, optional
        ``truth(partition, tag) -> arrays``: the clients' updates, to score
        each attack (``recovered`` and the error); without it the strategy
        only records its reconstructions.
    seed : int, default=0
        Seed of the group assignment.
    timeout : float, default=120.0
        Seconds to wait for nodes and for each exchange.
    """

    def __init__(
        self,
        attacks: Sequence[str] = REQUIRED_ATTACKS,
        *,
        modes: Sequence[Mode] = MODES,
        target_partition: int = 2,
        colluder_partition: int = 0,
        num_nodes: int = 8,
        clip: float = 8.0,
        truth: TruthFn | None = None,
        seed: int = 0,
        timeout: float = 120.0,
    ) -> None:
        super().__init__()
        unknown = [a for a in attacks if a not in PLAYS]
        if unknown:
            raise ConfigError(f"unknown attack(s) {unknown}; choose from {list(PLAYS)}")
        if any(m not in MODES for m in modes):
            raise ConfigError(f"modes must be among {list(MODES)}, got {list(modes)}")
        if num_nodes < 8:
            raise ConfigError(f"num_nodes must be >= 8, got {num_nodes}")
        if target_partition == colluder_partition:
            raise ConfigError("the target and the colluder must be different clients")
        self.attacks = tuple(attacks)
        self.modes = tuple(modes)
        self.target_partition = target_partition
        self.colluder_partition = colluder_partition
        self.num_nodes = num_nodes
        self.clip = clip
        self.truth = truth
        self.seed = seed
        self.timeout = timeout
        self.attempts: dict[tuple[str, str], Attempt] = {}
        self.outcomes: list[AttackOutcome] = []
        self.partition_of: dict[int, int] = {}

    def _identify(self, grid: Grid) -> list[int]:
        deadline = time.monotonic() + self.timeout
        while len(nodes := sorted(grid.get_node_ids())) < self.num_nodes:
            if time.monotonic() > deadline:
                raise ProtocolError(
                    f"only {len(nodes)} of {self.num_nodes} nodes connected"
                )
            time.sleep(0.05)
        messages = [
            Message(
                RecordDict(), dst_node_id=n, message_type=protocol.IDENTIFY_MESSAGE_TYPE
            )
            for n in nodes
        ]
        for reply in grid.send_and_receive(messages, timeout=self.timeout):
            record = reply.content.metric_records.get(protocol.IDENTITY_RECORD)
            value = None if record is None else record.get(protocol.PARTITION_ID)
            if isinstance(value, int):
                self.partition_of[reply.metadata.src_node_id] = value
        return nodes

    def _node(self, partition: int) -> int:
        for node, p in self.partition_of.items():
            if p == partition:
                return node
        raise ProtocolError(f"no node answered as partition {partition}")

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Play every attack in every mode (first round only); send nothing else."""
        if server_round != 1:
            return []
        nodes = self._identify(grid)
        target = self._node(self.target_partition)
        colluder = self._node(self.colluder_partition)
        layout = VectorLayout.of(arrays_to_numpy(arrays))
        fixed = FixedPoint.auto(self.clip, len(nodes), modulus_bits=32)
        encoding = ConfigRecord(
            {
                "weighted": False,
                "clip": fixed.clip,
                "scale": float(fixed.scale),
                Key.MODULUS_BITS: 32,
                "max-weight": 1.0,
                **layout.to_config(),
            }
        )

        def flat(update: Mapping[str, np.ndarray]) -> np.ndarray:
            return layout.flatten(dict(update), fill_missing=True)

        def decode(words: np.ndarray) -> np.ndarray:
            values: np.ndarray = fixed.decode(words[: layout.model_length])
            return values

        colluder_input = (
            flat(self.truth(self.colluder_partition, 0))
            if self.truth is not None
            else np.zeros(layout.model_length)
        )
        victims = GridVictims(grid, arrays, encoding, self.timeout)
        tolerance = fixed.max_abs_error(2) + 1e-9
        for attack in self.attacks:
            for mode in self.modes:
                if attack == "downgrade" and mode != "double-masking":
                    continue
                setup = AttackSetup(
                    victims=victims,
                    nodes=nodes,
                    mode=mode,
                    fixed_point=fixed,
                    length=layout.length,
                    target=target,
                    colluder=colluder,
                    colluder_input=colluder_input,
                    decode=decode,
                    seed=self.seed,
                )
                attempt = PLAYS[attack](setup)
                self.attempts[(attack, mode)] = attempt
                if self.truth is None:
                    continue
                p = self.target_partition
                truth = flat(self.truth(p, 0))
                if attempt.diff_tags:
                    a, b = attempt.diff_tags
                    truth = flat(self.truth(p, a)) - flat(self.truth(p, b))
                outcome = score(attack, mode, "fedleak", attempt, truth, tolerance)
                self.outcomes.append(outcome)
                log(
                    INFO,
                    "malicious server: %s against %s: recovered=%s, refused by %s",
                    attack,
                    mode,
                    outcome.recovered,
                    list(outcome.refused_by) or "none",
                )
        return []

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Report the attacks; the model is never updated."""
        metrics = MetricRecord()
        for o in self.outcomes:
            metrics[f"attack-{o.attack}-{o.mode}-recovered"] = int(o.recovered)
        for (attack, mode), attempt in self.attempts.items():
            metrics[f"attack-{attack}-{mode}-refusals"] = len(attempt.refused_by)
        return None, metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Evaluate nothing."""
        return []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Evaluate nothing."""
        return None

    def summary(self) -> None:
        """Log what the strategy plays."""
        log(
            INFO,
            "\t├──> Malicious secure-aggregation server: %s against %s, target "
            "partition %d",
            list(self.attacks),
            list(self.modes),
            self.target_partition,
        )
