"""Pairwise-mask secure aggregation around any sum-based strategy (seed 000 Ch. 4.1).

:class:`SecureAggregation` wraps a strategy the way Flower's DP wrappers do
(it subclasses ``Strategy``, holds the inner strategy and inherits
``start()``) and runs the protocol of :mod:`fedleak.secagg` inside one Flower
round, through the Grid:

1. **Setup** (only for nodes without a key in this session): a ``train``
   message with stage ``advertise``; the client's mod answers with a fresh
   X25519 public key. Keys are reused in later rounds (the seed's setup
   phase); masks are fresh every round (the round number is part of every
   mask seed).
2. **Upload**: the inner strategy's own train messages, plus the member ids
   and public keys of the client's group, the fixed-point parameters and the
   layout. The client trains as usual; the mod replaces its reply by the
   masked vector (model, chosen metrics, weight and clip count).
3. **Recovery** (only if members of a group dropped): the online members get
   the dropped ids and return the blinding they shared with them.

The server then decodes the groups' sums, adds them in the clear, and hands
the inner strategy a single reply that stands for all contributors: the sum
of the gradients (``SyncSGD``) or the weighted mean ``sum n_k theta_k / sum n_k``
with weight ``sum n_k`` (``ModelAveraging``, Flower's ``FedAvg`` and its
subclasses). Strategies that need individual updates (Krum, median, trimmed
mean, Bulyan, q-FedAvg, XGBoost bagging, server-side DP clipping) are refused.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from logging import ERROR, INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.app.metadata import Metadata
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    Bulyan,
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    FedMedian,
    FedTrimmedAvg,
    FedXgbBagging,
    FedXgbCyclic,
    MultiKrum,
    QFedAvg,
    Strategy,
)

from fedleak import protocol
from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import (
    FixedPoint,
    GroupTally,
    assign_groups,
)
from fedleak.secagg.layout import VectorLayout, to_signed

from .base import arrays_to_numpy, numpy_to_arrays
from .model_averaging import ModelAveraging
from .sync_sgd import SyncSGD

__all__ = ["SecureAggregation"]

_NEEDS_INDIVIDUAL_UPDATES = (
    Bulyan,
    FedMedian,
    FedTrimmedAvg,
    MultiKrum,
    QFedAvg,
    FedXgbBagging,
    FedXgbCyclic,
    DifferentialPrivacyServerSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
)
_PASS_THROUGH_WRAPPERS = (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyClientSideAdaptiveClipping,
)
_KEY_BYTES = 32
_MIN_AUTO_SCALE = 2.0**20


def _innermost(strategy: Strategy) -> Strategy:
    """Check that ``strategy`` only needs a (weighted) sum; return the aggregator."""
    while isinstance(strategy, _PASS_THROUGH_WRAPPERS):
        strategy = strategy.strategy
    if isinstance(strategy, _NEEDS_INDIVIDUAL_UPDATES):
        raise ConfigError(
            f"SecureAggregation cannot wrap {type(strategy).__name__}: it needs the "
            "individual client updates, and secure aggregation reveals only their sum"
        )
    if not isinstance(strategy, SyncSGD | ModelAveraging | FedAvg):
        raise ConfigError(
            f"SecureAggregation cannot wrap {type(strategy).__name__}: it wraps "
            "strategies whose aggregate is a (weighted) sum: SyncSGD, ModelAveraging, "
            "FedAvg and FedAvg's averaging subclasses (FedAvgM, FedProx, FedAdam, ...)"
        )
    return strategy


@dataclass
class _Round:
    """Server-side state of one secure round."""

    number: int
    layout: VectorLayout
    fixed: FixedPoint
    groups: list[list[int]]
    tallies: list[GroupTally]
    sampled: list[int]
    excluded: list[int]
    template: Message | None = None
    bytes_up: dict[str, int] = field(default_factory=dict)
    bytes_down: dict[str, int] = field(default_factory=dict)

    def add_bytes(self, direction: dict[str, int], stage: str, count: int) -> None:
        direction[stage] = direction.get(stage, 0) + count


class SecureAggregation(Strategy):
    """Pairwise-mask secure aggregation wrapper (seed 000 Ch. 4.1, Fig. 4.1).

    Use it with :func:`fedleak.clients.secagg_mod` on the ClientApp.

    Parameters
    ----------
    strategy : Strategy
        The inner strategy: ``SyncSGD`` (secure sum of gradients),
        ``ModelAveraging`` or Flower's ``FedAvg`` family (secure weighted
        average: clients upload ``n_k * theta_k`` and ``n_k``), optionally inside
        Flower's client-side DP wrappers.
    clip : float, default=8.0
        Values (weights, gradients, metrics) are clipped to ``[-clip, clip]``
        before fixed-point encoding; clipped entries are counted (securely) and
        reported as ``secagg-clipped``.
    scale : float, optional
        Fixed-point scale. Default: the largest power of two that cannot
        overflow for the group size and ``max_weight``.
    modulus_bits : {32, 64}, optional
        Arithmetic modulo ``2**32`` or ``2**64``. Default: 32 bits when they
        still leave a fixed-point resolution of ``2**-20`` for the group size,
        ``clip`` and ``max_weight`` (e.g. sums of gradients, or weights of 1),
        else 64 (e.g. ``n_k * theta_k`` with thousands of examples).
    max_weight : float, optional
        Upper bound on a client's weight ``n_k`` (weighted averages only,
        default 10,000); a client above it fails its upload with a clear error.
    group_size : int, optional
        Clients per group (the seed recommends 100-1,000); groups are summed
        separately and combined in the clear. Default: one group.
    min_online : int, default=3
        A group with fewer online members is not decrypted (the seed: at least
        3, otherwise there is no privacy for the online users).
    metric_names : sequence of str, default=()
        Client metrics to aggregate securely (weighted like the model). Other
        metrics never leave the client.
    seed : int, default=0
        Seed of the group assignment (masks are always from the OS CSPRNG).
    timeout : float, default=120.0
        Seconds to wait for the key-advertisement and recovery replies.
    """

    def __init__(
        self,
        strategy: Strategy,
        *,
        clip: float = 8.0,
        scale: float | None = None,
        modulus_bits: int | None = None,
        max_weight: float | None = None,
        group_size: int | None = None,
        min_online: int = 3,
        metric_names: Sequence[str] = (),
        seed: int = 0,
        timeout: float = 120.0,
    ) -> None:
        super().__init__()
        self.strategy = strategy
        self.aggregator = _innermost(strategy)
        self.weighted = not isinstance(self.aggregator, SyncSGD)
        if not clip > 0:
            raise ConfigError(f"clip must be > 0, got {clip}")
        if scale is not None and not scale > 0:
            raise ConfigError(f"scale must be > 0, got {scale}")
        if modulus_bits not in (None, 32, 64):
            raise ConfigError(f"modulus_bits must be 32 or 64, got {modulus_bits}")
        if max_weight is not None and not max_weight >= 1:
            raise ConfigError(f"max_weight must be >= 1, got {max_weight}")
        if group_size is not None and group_size < 3:
            raise ConfigError(f"group_size must be >= 3, got {group_size}")
        if min_online < 2:
            raise ConfigError(f"min_online must be >= 2, got {min_online}")
        self.clip = float(clip)
        self.scale = scale
        self.modulus_bits = modulus_bits
        self.max_weight = float(
            max_weight if max_weight is not None else (1e4 if self.weighted else 1.0)
        )
        self.group_size = group_size
        self.min_online = min_online
        self.metric_names = tuple(metric_names)
        self.seed = seed
        self.timeout = timeout
        self.public_keys: dict[int, bytes] = {}
        self._counter = 0
        self._grid: Grid | None = None
        self._round: _Round | None = None

    def __repr__(self) -> str:
        return f"SecureAggregation({self.strategy!r})"

    # -------------------------------------------------------------- setup
    def fixed_point(self, group_size: int) -> FixedPoint:
        """Return the fixed-point encoding for groups of ``group_size``."""
        weight = self.max_weight if self.weighted else 1.0
        bits = self.modulus_bits
        if bits is None:
            # 32-bit words halve the masking work and the upload; keep them when
            # they fit (explicit scale) or still resolve 2^-20 (automatic scale)
            bits = 64
            try:
                if self.scale is None:
                    narrow = FixedPoint.auto(
                        self.clip, group_size, max_weight=weight, modulus_bits=32
                    )
                    bits = 32 if narrow.scale >= _MIN_AUTO_SCALE else 64
                else:
                    FixedPoint(self.clip, self.scale, 32).check_capacity(
                        group_size, weight
                    )
                    bits = 32
            except ConfigError:
                bits = 64
        if self.scale is None:
            return FixedPoint.auto(
                self.clip, group_size, max_weight=weight, modulus_bits=bits
            )
        fixed = FixedPoint(self.clip, self.scale, bits)
        fixed.check_capacity(group_size, weight)
        return fixed

    def _advertise(self, grid: Grid, nodes: list[int], state: _Round) -> None:
        record = ConfigRecord(
            {
                protocol.SECAGG_STAGE: protocol.STAGE_ADVERTISE,
                protocol.SECAGG_ROUND: state.number,
            }
        )
        messages = [
            Message(
                RecordDict({protocol.SECAGG_RECORD: record}),
                dst_node_id=n,
                message_type="train",
            )
            for n in nodes
        ]
        for reply in grid.send_and_receive(messages, timeout=self.timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                log(
                    WARNING,
                    "secure aggregation: node %d failed key advertisement",
                    node,
                )
                continue
            answer = reply.content.config_records.get(protocol.SECAGG_RECORD)
            key = None if answer is None else answer.get(protocol.SECAGG_PUBLIC_KEY)
            if not isinstance(key, bytes) or len(key) != _KEY_BYTES:
                log(
                    WARNING,
                    "secure aggregation: node %d sent no valid public key",
                    node,
                )
                continue
            self.public_keys[node] = key
            state.add_bytes(state.bytes_up, "advertise", _KEY_BYTES)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Let the inner strategy sample, set up keys and groups, attach them."""
        self._grid = grid
        inner = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self._counter += 1
        if not inner:
            self._round = None
            return []
        sampled = [m.metadata.dst_node_id for m in inner]
        layout = VectorLayout.of(arrays_to_numpy(arrays), self.metric_names)
        largest = (
            len(sampled)
            if self.group_size is None
            else min(self.group_size, len(sampled))
        )
        fixed = self.fixed_point(largest)
        state = _Round(self._counter, layout, fixed, [], [], sampled, [])
        missing_keys = [n for n in sampled if n not in self.public_keys]
        if missing_keys:
            self._advertise(grid, missing_keys, state)
        members = [n for n in sampled if n in self.public_keys]
        state.excluded = [n for n in sampled if n not in self.public_keys]
        state.groups = assign_groups(
            members, self.group_size, np.random.default_rng([self.seed, self._counter])
        )
        state.tallies = [
            GroupTally(
                round=state.number,
                group=g,
                members=group,
                length=layout.length,
                dtype=fixed.dtype,
                min_online=self.min_online,
            )
            for g, group in enumerate(state.groups)
        ]
        group_of = {n: g for g, group in enumerate(state.groups) for n in group}
        common = {
            protocol.SECAGG_STAGE: protocol.STAGE_UPLOAD,
            protocol.SECAGG_ROUND: state.number,
            "mode": "weighted" if self.weighted else "sum",
            "clip": fixed.clip,
            "scale": float(fixed.scale),
            "modulus-bits": fixed.modulus_bits,
            "max-weight": self.max_weight,
            "min-online": self.min_online,
            **layout.to_config(),
        }
        out = []
        for message in inner:
            node = message.metadata.dst_node_id
            if node not in group_of:
                continue
            group = state.groups[group_of[node]]
            record = ConfigRecord(
                {
                    **common,
                    "group": group_of[node],
                    protocol.SECAGG_PEERS: protocol.pack_ids(group),
                    protocol.SECAGG_PEER_KEYS: b"".join(
                        self.public_keys[n] for n in group
                    ),
                }
            )
            state.add_bytes(state.bytes_down, "keys", len(group) * (_KEY_BYTES + 8))
            content = RecordDict(dict(message.content.items()))
            content[protocol.SECAGG_RECORD] = record
            out.append(
                Message(
                    content,
                    dst_node_id=node,
                    message_type=message.metadata.message_type,
                    group_id=message.metadata.group_id,
                )
            )
        self._round = state
        log(
            INFO,
            "secure aggregation round %d: %d groups, %d clients, scale 2^%.0f, "
            "mod 2^%d",
            state.number,
            len(state.groups),
            len(members),
            np.log2(fixed.scale),
            fixed.modulus_bits,
        )
        return out

    # -------------------------------------------------------------- aggregation
    def _read_upload(self, state: _Round, message: Message) -> None:
        node = message.metadata.src_node_id
        record = message.content.config_records.get(protocol.SECAGG_RECORD)
        if record is None:
            raise ProtocolError(
                f"reply from node {node} has no {protocol.SECAGG_RECORD!r} record: "
                "add fedleak.clients.secagg_mod to the ClientApp's mods"
            )
        if record.get(protocol.SECAGG_STAGE) != protocol.STAGE_UPLOAD:
            raise ProtocolError(f"reply from node {node} is not an upload")
        group = record.get("group")
        if not isinstance(group, int) or not 0 <= group < len(state.tallies):
            raise ProtocolError(f"reply from node {node} names unknown group {group!r}")
        masked = record.get(protocol.SECAGG_MASKED)
        if not isinstance(masked, bytes):
            raise ProtocolError(f"reply from node {node} holds no masked vector")
        round_ = record.get(protocol.SECAGG_ROUND)
        if not isinstance(round_, int):
            raise ProtocolError(f"reply from node {node} has no round number")
        itemsize = state.fixed.dtype.itemsize
        if len(masked) % itemsize:
            raise ProtocolError(
                f"masked vector from node {node} is not a whole number of words"
            )
        vector = np.frombuffer(masked, dtype=state.fixed.dtype)
        state.tallies[group].add_upload(node, round_, vector)
        state.add_bytes(state.bytes_up, "upload", len(masked))

    def _recover(
        self, state: _Round, g: int, online: list[int], dropped: list[int]
    ) -> None:
        assert self._grid is not None
        tally = state.tallies[g]
        record = ConfigRecord(
            {
                protocol.SECAGG_STAGE: protocol.STAGE_RECOVER,
                protocol.SECAGG_ROUND: state.number,
                "group": g,
                protocol.SECAGG_DROPPED: protocol.pack_ids(dropped),
            }
        )
        messages = [
            Message(
                RecordDict({protocol.SECAGG_RECORD: record}),
                dst_node_id=n,
                message_type="train",
            )
            for n in online
        ]
        state.add_bytes(state.bytes_down, "recover", len(online) * 8 * len(dropped))
        for reply in self._grid.send_and_receive(messages, timeout=self.timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                log(WARNING, "secure aggregation: node %d failed recovery", node)
                continue
            answer = reply.content.config_records.get(protocol.SECAGG_RECORD)
            data = None if answer is None else answer.get(protocol.SECAGG_MASKED)
            try:
                if (
                    not isinstance(data, bytes)
                    or len(data) % state.fixed.dtype.itemsize
                ):
                    raise ProtocolError(
                        f"recovery from node {node} holds no valid vector"
                    )
                tally.add_recovery(
                    node, state.number, np.frombuffer(data, dtype=state.fixed.dtype)
                )
                state.add_bytes(state.bytes_up, "recover", len(data))
            except ProtocolError as err:
                log(WARNING, "secure aggregation: %s", err)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Unmask the groups' sums and let the inner strategy aggregate them."""
        state = self._round
        replies = list(replies)
        if state is None:
            return self.strategy.aggregate_train(server_round, replies)
        started = time.perf_counter()
        errors = rejected = 0
        # Nodes whose upload did not arrive are re-keyed when next sampled: a
        # client can lose its secret (e.g. Flower's simulation writes back a
        # node's state last-writer-wins), and a stale public key would make it
        # fail in every later round.
        lost: set[int] = set()
        for message in replies:
            if message.has_error():
                errors += 1
                lost.add(message.metadata.src_node_id)
                continue
            try:
                self._read_upload(state, message)
                if state.template is None:
                    state.template = message
            except ProtocolError as err:
                rejected += 1
                lost.add(message.metadata.src_node_id)
                log(WARNING, "secure aggregation: %s", err)
        total = np.zeros(state.layout.fixed_length, dtype=np.float64)
        raw = np.zeros(2, dtype=np.int64)
        contributors: list[int] = []
        failed_groups = dropped_total = 0
        for g, tally in enumerate(state.tallies):
            try:
                online, dropped = tally.close()
                dropped_total += len(dropped)
                lost.update(dropped)
                if dropped:
                    self._recover(state, g, online, dropped)
                group_sum = tally.result()
            except ProtocolError as err:  # includes InsufficientParticipants
                failed_groups += 1
                log(
                    ERROR,
                    "secure aggregation round %d, group %d failed: %s",
                    state.number,
                    g,
                    err,
                )
                continue
            total += state.fixed.decode(group_sum[: state.layout.fixed_length])
            raw += to_signed(group_sum[state.layout.fixed_length :])
            contributors.extend(online)
        for node in lost:
            self.public_keys.pop(node, None)
        answered = {m.metadata.src_node_id for m in replies}
        metrics = MetricRecord(
            {
                "num-sampled": len(state.sampled),
                "num-replies": len(contributors),
                "num-errors": errors,
                "num-missing": len([n for n in state.sampled if n not in answered]),
                "num-rejected": rejected,
                "secagg-dropped": dropped_total,
                "secagg-failed-groups": failed_groups,
                "secagg-groups": len(state.tallies),
                "secagg-clipped": int(raw[1]),
                "secagg-server-s": time.perf_counter() - started,
            }
        )
        for direction, counts in (("up", state.bytes_up), ("down", state.bytes_down)):
            for stage, count in counts.items():
                metrics[f"secagg-bytes-{direction}-{stage}"] = count
        self._round = None
        if not contributors or state.template is None:
            log(
                ERROR,
                "secure aggregation round %d: no group could be decrypted; "
                "the global model is unchanged",
                state.number,
            )
            return None, metrics
        arrays, inner_metrics = self._inner_aggregate(
            server_round, state, total, int(raw[0]), contributors
        )
        if inner_metrics is not None:
            for key, value in inner_metrics.items():
                if not key.startswith("num-"):
                    metrics[key] = value
        return arrays, metrics

    def _inner_aggregate(
        self,
        server_round: int,
        state: _Round,
        total: np.ndarray,
        weight: int,
        contributors: list[int],
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        layout = state.layout
        values = total[: layout.model_length]
        metric_values = total[layout.model_length :]
        if self.weighted:
            values = values / weight
            metric_values = metric_values / weight
        elif getattr(self.aggregator, "reduction", "sum") == "mean":
            values = values / len(contributors)
        arrays = {
            name: value.astype(np.float32)
            for name, value in layout.unflatten(values).items()
        }
        metrics = MetricRecord(
            {protocol.NUM_EXAMPLES: weight if self.weighted else len(contributors)}
        )
        for name, value in zip(layout.metric_names, metric_values, strict=True):
            metrics[name] = (
                float(value) if self.weighted else float(value) / len(contributors)
            )
        template = state.template
        assert template is not None
        content = RecordDict(
            {
                protocol.ARRAYS_KEY: numpy_to_arrays(arrays),
                protocol.METRICS_KEY: metrics,
                protocol.AGGREGATE_RECORD: ConfigRecord(
                    {protocol.AGGREGATE_CONTRIBUTORS: protocol.pack_ids(contributors)}
                ),
            }
        )
        meta = template.metadata
        synthetic = Message(  # type: ignore[call-overload]
            content,
            metadata=Metadata(
                run_id=meta.run_id,
                message_id="",
                src_node_id=contributors[0],
                dst_node_id=meta.dst_node_id,
                reply_to_message_id="",
                group_id=meta.group_id,
                created_at=time.time(),
                ttl=meta.ttl,
                message_type=meta.message_type,
            ),
        )
        return self.strategy.aggregate_train(server_round, [synthetic])

    # -------------------------------------------------------------- delegation
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Delegate federated evaluation (its metrics are not secure-aggregated)."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Delegate to the inner strategy."""
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        """Log the wrapper's settings, then the inner strategy's."""
        log(INFO, "\t├──> Secure aggregation (pairwise masks, seed 000 Ch. 4.1):")
        log(
            INFO,
            "\t│\t├── %s, clip %g, mod 2^%s, groups of %s, min online %d",
            "weighted mean" if self.weighted else "sum",
            self.clip,
            self.modulus_bits or "auto",
            self.group_size or "all",
            self.min_online,
        )
        log(
            INFO,
            "\t│\t└── metrics summed securely: %s",
            list(self.metric_names) or "none",
        )
        self.strategy.summary()
