"""Secure aggregation around any sum-based strategy (seed 000 Ch. 4.1; Bonawitz et al.).

:class:`SecureAggregation` wraps a strategy the way Flower's DP wrappers do
(it subclasses ``Strategy``, holds the inner strategy and inherits
``start()``) and carries the records of :mod:`fedleak.secagg`'s protocol
engine (:class:`~fedleak.secagg.server.ServerSession`) through the Grid:

1. **Setup** (only for nodes without a session): a ``train`` message with
   stage ``advertise``; the client's mod answers with a fresh X25519 public
   key. Sessions last across rounds; masks are fresh every round.
2. **Upload**: the inner strategy's own train messages, plus the engine's
   upload request (the group's members and keys, the mode, the threshold)
   and the encoding (fixed point, layout). The client trains as usual; the
   mod replies with only the masked vector (and, double masking, the sealed
   self-mask shares).
3. **Unmask** (double masking: every round; thesis mode: only when members
   of a group dropped): online members reveal the self-mask shares of
   online peers and the masks shared with dropped ones. Where nobody
   dropped, only ``t + 1`` members and a spare are asked (any ``t + 1``
   revealers rebuild every seed); the others only if too few answer.

The server decodes the groups' sums, adds them in the clear, and hands the
inner strategy a single reply that stands for all contributors: the sum of
the gradients (``SyncSGD``) or the weighted mean ``sum n_k theta_k / sum
n_k`` with weight ``sum n_k`` (``ModelAveraging``, Flower's ``FedAvg`` and
its subclasses). Strategies that need individual updates (Krum, median,
trimmed mean, Bulyan, q-FedAvg, XGBoost bagging, server-side DP clipping)
are refused.

Exchanges per round: 1 (thesis) or 2 (double masking), plus 1 when nodes
need a session, 1 in thesis mode when members dropped, and 1 in double
masking when more than the spare of those asked to unmask fail; Flower's
SecAgg+ uses 4.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from logging import ERROR, INFO, WARNING
from typing import Any, Literal

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.app.metadata import Metadata
from flwr.common import log
from flwr.common.logger import FLOWER_LOGGER
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
    Result,
    Strategy,
)
from flwr.supercore.differential_privacy import CLIENTS_DISCREPANCY_WARNING

from fedleak import protocol
from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import FixedPoint
from fedleak.secagg.client import Refused
from fedleak.secagg.constants import ENCODING_RECORD, RECORD, Key, Mode, Refusal
from fedleak.secagg.layout import VectorLayout, to_signed
from fedleak.secagg.records import Record
from fedleak.secagg.server import AggregationRound, RoundResult, ServerSession
from fedleak.secagg.settings import ProtocolSettings

from .base import (
    PartitionAwareStrategy,
    _last_line,
    arrays_to_numpy,
    numpy_to_arrays,
)
from .model_averaging import ModelAveraging
from .sync_sgd import SyncSGD

__all__ = ["CONFIG_REFUSALS", "SecureAggregation", "exchange_records"]

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
_MIN_AUTO_SCALE = 2.0**20
#: Refusals that mean the clients' settings and the server's disagree: when
#: every sampled client refuses with one of them, no round can ever succeed
#: and the run stops with a ConfigError instead of failing round after round.
CONFIG_REFUSALS = (
    Refusal.MODE_REFUSED,
    Refusal.GROUP_TOO_SMALL,
    Refusal.THRESHOLD_TOO_LOW,
    Refusal.THRESHOLD_UNREACHABLE,
)
_SAMPLING_HINT = (
    "the inner strategy's sampling (fraction_train, min_train_nodes or the "
    "number of connected nodes)"
)


#: Reply-error text of Flower's own SecAgg+ client mod receiving fedleak's
#: messages: the ClientApp imported ``flwr.client.mod.secagg_mod``.
_FLOWER_SECAGG_SIGN = "secaggplus_configs"
_FLOWER_SECAGG_HINT = (
    "the ClientApp runs Flower's own SecAgg+ mod (flwr.client.mod.secagg_mod or "
    "secaggplus_mod), not fedleak's: use `from fedleak.clients import secagg_mod` "
    "in ClientApp(mods=[secagg_mod])"
)


def _legacy_hint(strategy: object) -> str | None:
    """Name the Message-API import for a strategy of Flower's legacy API."""
    module = type(strategy).__module__
    if not module.startswith(("flwr.server.strategy", "flwr.server.workflow")):
        return None
    name = type(strategy).__name__
    return (
        f"SecureAggregation cannot wrap {module}.{name}: that is Flower's legacy "
        "strategy API (fit/evaluate, run by DefaultWorkflow). Use the Message-API "
        f"strategy instead: `from flwr.serverapp.strategy import {name}` (e.g. "
        "FedAvg(fraction_train=1.0, min_available_nodes=N)) and run it with "
        "`SecureAggregation(strategy).start(grid=grid, initial_arrays="
        "ArrayRecord(ndarrays), num_rounds=R)` in the ServerApp's @app.main(); "
        "legacy NumPyClient apps need no change when they use "
        "fedleak.clients.secagg_mod"
    )


def _innermost(strategy: Strategy) -> Strategy:
    """Check that ``strategy`` only needs a (weighted) sum; return the aggregator."""
    legacy = _legacy_hint(strategy)
    if legacy is not None:
        raise ConfigError(legacy)
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


def exchange_records(
    grid: Grid,
    requests: Mapping[int, Record],
    *,
    message_type: str,
    timeout: float,
    group_id: str = "",
    extra: Mapping[int, Mapping[str, ArrayRecord | ConfigRecord]] | None = None,
) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """Send one protocol record per node and collect the replies' records.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The grid.
    requests : Mapping of int to Record
        Node id -> the engine's request.
    message_type : str
        Flower message type (``"train"`` for the mod, a ``query`` type for
        the sketch ClientApp).
    timeout : float
        Seconds to wait.
    group_id : str, optional
        Flower group id of the messages.
    extra : Mapping, optional
        Node id -> further records to put beside the protocol record.

    Returns
    -------
    replies : dict of int to dict
        Node id -> the reply's protocol record, for nodes that answered.
    failures : dict of int to str
        Node id -> why there is no usable reply (error, no record, no reply).
    """
    messages = []
    for node, request in requests.items():
        content = RecordDict({RECORD: ConfigRecord(dict(request))})
        for name, record in (extra or {}).get(node, {}).items():
            content[name] = record
        messages.append(
            Message(
                content, dst_node_id=node, message_type=message_type, group_id=group_id
            )
        )
    replies: dict[int, dict[str, Any]] = {}
    failures: dict[int, str] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        node = reply.metadata.src_node_id
        if node not in requests:
            log(WARNING, "secure aggregation: unexpected reply from node %d", node)
            continue
        if reply.has_error():
            failures[node] = f"error reply: {reply.error.reason}"
            continue
        answer = reply.content.config_records.get(RECORD)
        if answer is None:
            failures[node] = f"reply without its {RECORD!r} record"
            continue
        replies[node] = dict(answer)
    for node in requests:
        if node not in replies and node not in failures:
            failures[node] = "no reply"
    return replies, failures


@dataclass
class _Round:
    """Server-side state of one secure round."""

    aggregation: AggregationRound
    layout: VectorLayout
    fixed: FixedPoint
    sampled: list[int]
    exchanges: int
    dtypes: dict[str, np.dtype] = field(default_factory=dict)
    advertise_bytes: int = 0
    template: Message | None = None


def _cast(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast a float64 aggregate to the global model's dtype (integers rounded)."""
    if np.issubdtype(dtype, np.integer):
        rounded: np.ndarray = np.rint(value)
        return rounded.astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return value.astype(dtype)
    return value.astype(np.float32)


class _DropDiscrepancy(logging.Filter):
    """Drop Flower's "replies differ from sampled clients" DP warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != CLIENTS_DISCREPANCY_WARNING


@contextmanager
def _quiet_dp_discrepancy(strategy: Strategy, contributors: int) -> Iterator[None]:
    """Silence the DP wrappers' per-round count warning for the synthetic reply.

    Flower's client-side DP wrappers warn when the number of replies differs
    from ``num_sampled_clients``; secure aggregation always hands them one
    reply that stands for all contributors. The warning is kept (once, with
    the real numbers) when the contributors differ from the sampled count.
    """
    if not isinstance(strategy, _PASS_THROUGH_WRAPPERS):
        yield
        return
    expected = getattr(strategy, "num_sampled_clients", contributors)
    if contributors != expected:
        log(WARNING, CLIENTS_DISCREPANCY_WARNING, contributors, expected)
    logger = FLOWER_LOGGER
    dropper = _DropDiscrepancy()
    logger.addFilter(dropper)
    try:
        yield
    finally:
        logger.removeFilter(dropper)


#: Seconds of waiting for nodes before :class:`SecureAggregation` says so.
NODE_WAIT_QUIET_S = 5.0


class SecureAggregation(Strategy):
    """Secure aggregation wrapper: double masking, or the seed's scheme as a mode.

    Use it with :func:`fedleak.clients.secagg_mod` (or
    :func:`fedleak.clients.secagg.make_secagg_mod`) on the ClientApp.

    Parameters
    ----------
    strategy : Strategy
        The inner strategy: ``SyncSGD`` (secure sum of gradients),
        ``ModelAveraging`` or Flower's ``FedAvg`` family (secure weighted
        average: clients upload ``n_k * theta_k`` and ``n_k``), optionally inside
        Flower's client-side DP wrappers.
    mode : {"double-masking", "thesis"}, default="double-masking"
        Double masking (Bonawitz et al. 2017) hides a client even from a
        server that keeps late uploads or claims uploaded clients dropped;
        ``"thesis"`` is the seed's scheme (seed 000 Ch. 4.1, Table 4.1's
        bytes), safe only against an honest server with no stragglers, and
        needs clients built with ``make_secagg_mod(accept_thesis=True)``.
    threshold : float, default=0.5
        Double masking: the Shamir threshold as a fraction of a group of
        ``n``, ``t = floor(threshold * n) + 1`` (in ``[0.5, 1)``); a group
        tolerates ``n - t - 1`` dropouts.
    clip : float, default=8.0
        Values (weights, gradients, metrics) are clipped to ``[-clip, clip]``
        before fixed-point encoding; clipped entries are counted (securely) and
        reported as ``secagg-clipped``. Clipping changes the model, so it is
        loud: the first round that clips logs a warning with the count (each
        client logs its own largest value, which the server never sees), and
        ``on_clip="error"`` stops the run instead. Choose ``clip`` above the
        largest absolute value a client sends (model weights for averages,
        gradient entries for sums); the fixed-point error bound grows with it
        (see ``scale``).
    on_clip : {"warn", "error"}, default="warn"
        What a round with clipped values does: warn (the first time, then
        count it in ``secagg-clipped``) or raise :class:`ConfigError`.
    scale : float, optional
        Fixed-point scale. Default: the largest power of two that cannot
        overflow for the group size and ``max_weight``. Each client's value is
        rounded to a multiple of ``1/scale`` (after its weight is applied), so
        the decoded aggregate differs from the exact (clipped) one by at most
        ``group size * 0.5 / scale`` per entry before the division by the total
        weight (logged per round; e.g. about ``1e-6`` for the default 32-bit
        words). The aggregate keeps the global model's dtype: float64 models
        come back as float64 (with that error), float32 as float32.
    modulus_bits : {32, 64}, optional
        Arithmetic modulo ``2**32`` or ``2**64``. Default: 32 bits when they
        still leave a fixed-point resolution of ``2**-20`` for the group size,
        ``clip`` and ``max_weight`` (e.g. sums of gradients, or weights of 1),
        else 64 (e.g. ``n_k * theta_k`` with thousands of examples).
    max_weight : float, optional
        Upper bound on a client's weight ``n_k`` (weighted averages only,
        default 10,000); a client above it fails its upload with a clear error.
    group_size : int, optional
        Largest group (the seed recommends 100-1,000); groups are summed
        separately and combined in the clear. Default: one group. Groups are
        never made smaller than the smallest decryptable group.
    min_online : int, default=3
        A group with fewer online members is not decrypted (>= 3: with two,
        each learns the other's input).
    metric_names : sequence of str, default=()
        Client metrics to aggregate securely (weighted like the model). Other
        metrics never leave the client.
    seed : int, default=0
        Seed of the group assignment (masks are always from the OS CSPRNG).
    timeout : float, default=120.0
        Seconds to wait for the key-advertisement and unmask replies.
    node_wait_timeout : float, default=120.0
        Seconds :meth:`start` waits for enough nodes to form one decryptable
        group, and each round waits for the inner strategy's
        ``min_available_nodes`` (Flower's own strategies would wait forever).
    on_too_few_nodes : {"stop", "proceed"}, default="stop"
        When fewer than ``min_available_nodes`` nodes are connected after
        ``node_wait_timeout`` (e.g. a node died): stop the run with a clear
        error, or run the round with the nodes still connected (as long as
        they can form a decryptable group).

    Raises
    ------
    ConfigError
        If the inner strategy needs individual updates or is a legacy Flower
        strategy (naming the Message-API import), or a setting means no group
        could ever be decrypted (naming it).

    Notes
    -----
    :meth:`start` checks, before round 1, that the nodes actually connected
    can fill a decryptable group under the inner strategy's sampling, and
    raises :class:`ProtocolError` with a summary when no round produced an
    aggregate (the model would be the initial one).
    """

    def __init__(
        self,
        strategy: Strategy,
        *,
        mode: Mode = "double-masking",
        threshold: float = 0.5,
        clip: float = 8.0,
        scale: float | None = None,
        modulus_bits: int | None = None,
        max_weight: float | None = None,
        group_size: int | None = None,
        min_online: int = 3,
        metric_names: Sequence[str] = (),
        seed: int = 0,
        timeout: float = 120.0,
        on_clip: Literal["warn", "error"] = "warn",
        node_wait_timeout: float = 120.0,
        on_too_few_nodes: Literal["stop", "proceed"] = "stop",
    ) -> None:
        super().__init__()
        if on_clip not in ("warn", "error"):
            raise ConfigError(f"on_clip must be 'warn' or 'error', got {on_clip!r}")
        if on_too_few_nodes not in ("stop", "proceed"):
            raise ConfigError(
                "on_too_few_nodes must be 'stop' or 'proceed', got "
                f"{on_too_few_nodes!r}"
            )
        if not node_wait_timeout > 0:
            raise ConfigError(f"node_wait_timeout must be > 0, got {node_wait_timeout}")
        self.strategy = strategy
        self.aggregator = _innermost(strategy)
        self.weighted = not isinstance(self.aggregator, SyncSGD)
        self.settings = ProtocolSettings(
            mode=mode, min_online=min_online, threshold=threshold, group_size=group_size
        )
        if not clip > 0:
            raise ConfigError(f"clip must be > 0, got {clip}")
        if scale is not None and not scale > 0:
            raise ConfigError(f"scale must be > 0, got {scale}")
        if modulus_bits not in (None, 32, 64):
            raise ConfigError(f"modulus_bits must be 32 or 64, got {modulus_bits}")
        if max_weight is not None and not max_weight >= 1:
            raise ConfigError(f"max_weight must be >= 1, got {max_weight}")
        names = list(metric_names)
        if any(not isinstance(m, str) or not m for m in names) or len(
            set(names)
        ) != len(names):
            raise ConfigError(
                f"metric_names must be distinct non-empty strings, got {names!r}"
            )
        if protocol.NUM_EXAMPLES in names:
            raise ConfigError(
                f"metric_names: {protocol.NUM_EXAMPLES!r} is the weight, which is "
                "always summed; leave it out"
            )
        self.mode = self.settings.mode
        self.threshold = self.settings.threshold
        self.clip = float(clip)
        self.scale = scale
        self.modulus_bits = modulus_bits
        self.max_weight = float(
            max_weight if max_weight is not None else (1e4 if self.weighted else 1.0)
        )
        self.group_size = group_size
        self.min_online = min_online
        self.metric_names = tuple(names)
        self.seed = seed
        self.timeout = timeout
        self.on_clip = on_clip
        self.node_wait_timeout = float(node_wait_timeout)
        self.on_too_few_nodes = on_too_few_nodes
        self.session = ServerSession(self.settings, seed=seed)
        self._grid: Grid | None = None
        self._round: _Round | None = None
        self._warned: set[str] = set()
        self.rounds_attempted = 0
        self.rounds_aggregated = 0
        self._round_failures: list[str] = []

    def __repr__(self) -> str:
        return f"SecureAggregation({self.strategy!r}, mode={self.mode!r})"

    @property
    def public_keys(self) -> dict[int, bytes]:
        """Node id -> session public key, for the nodes with a session."""
        return dict(self.session.keys)

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

    # -------------------------------------------------------------- nodes
    def _sampled_from(self, connected: int) -> tuple[int, str]:
        """How many nodes the inner strategy samples from ``connected``, and why."""
        inner = self.aggregator
        fraction = float(getattr(inner, "fraction_train", 1.0))
        minimum = int(getattr(inner, "min_train_nodes", 1))
        if isinstance(inner, PartitionAwareStrategy):
            count = max(math.floor(fraction * connected + 1e-9), minimum)
        else:  # Flower's sample size (FedAvg.configure_train)
            count = max(int(connected * fraction), minimum)
        why = (
            f"{connected} connected node(s) with {type(inner).__name__}("
            f"fraction_train={fraction:g}, min_train_nodes={minimum})"
        )
        return min(count, connected), why

    def _wait_for_nodes(self, grid: Grid, need: int, what: str) -> list[int]:
        """Wait up to ``node_wait_timeout`` s for ``need`` nodes; return those seen."""
        start = time.monotonic()
        deadline = start + self.node_wait_timeout
        nodes = list(grid.get_node_ids())
        warned = False
        while len(nodes) < need and time.monotonic() < deadline:
            # nodes register a moment after the run starts: say nothing
            # unless the wait lasts
            if not warned and time.monotonic() - start >= NODE_WAIT_QUIET_S:
                log(
                    WARNING,
                    "secure aggregation: %d of the %d nodes %s are connected; "
                    "waiting up to %g s in all (node_wait_timeout)",
                    len(nodes),
                    need,
                    what,
                    self.node_wait_timeout,
                )
                warned = True
            time.sleep(0.05)
            nodes = list(grid.get_node_ids())
        return nodes

    def check_nodes(self, grid: Grid) -> int:
        """Check that the connected nodes can fill one decryptable group.

        Waits up to ``node_wait_timeout`` seconds for the larger of the inner
        strategy's ``min_available_nodes`` and the smallest decryptable group,
        then applies the inner strategy's sampling to the nodes connected.

        Returns
        -------
        int
            The number of nodes the inner strategy would sample.

        Raises
        ------
        ConfigError
            If that number cannot fill one decryptable group (naming the
            numbers and the settings to change).
        """
        floor = self.settings.smallest_group()
        available = int(getattr(self.aggregator, "min_available_nodes", 1))
        nodes = self._wait_for_nodes(
            grid, max(floor, available), "secure aggregation needs"
        )
        count, why = self._sampled_from(len(nodes))
        if count < floor:
            raise ConfigError(
                f"secure aggregation needs at least {floor} clients per round "
                f"(min_online={self.min_online}, threshold={self.threshold:g}), "
                f"but {why} sample(s) {count} after waiting "
                f"{self.node_wait_timeout:g} s; no group could ever be decrypted. "
                "Start more nodes (flwr run: --federation-config "
                f"'num-supernodes={floor}' or more) and set the inner strategy's "
                "min_available_nodes and min_train_nodes to their number"
            )
        return count

    @contextmanager
    def _enough_nodes(self, grid: Grid) -> Iterator[None]:
        """Wait (bounded) for the inner strategy's ``min_available_nodes``.

        Flower's strategies wait for them forever; here the wait ends after
        ``node_wait_timeout`` s and the run stops with a clear error or, with
        ``on_too_few_nodes="proceed"``, the round runs with the nodes left
        (the inner strategy's minimums are lowered for this call only).
        """
        inner = self.aggregator
        wanted = int(getattr(inner, "min_available_nodes", 0))
        nodes = self._wait_for_nodes(grid, wanted, "min_available_nodes names")
        if len(nodes) >= wanted:
            yield
            return
        if self.on_too_few_nodes == "stop":
            raise ProtocolError(
                f"only {len(nodes)} of the {wanted} nodes the inner strategy needs "
                f"(min_available_nodes) are connected after {self.node_wait_timeout:g}"
                " s; a node may have died. Restart it, lower min_available_nodes, "
                "or pass SecureAggregation(on_too_few_nodes='proceed')"
            )
        log(
            WARNING,
            "secure aggregation: proceeding with %d of the %d nodes "
            "min_available_nodes asks for (on_too_few_nodes='proceed')",
            len(nodes),
            wanted,
        )
        saved = {
            name: getattr(inner, name)
            for name in ("min_available_nodes", "min_train_nodes", "min_evaluate_nodes")
            if hasattr(inner, name)
        }
        try:
            for name, value in saved.items():
                setattr(inner, name, min(int(value), len(nodes)))
            yield
        finally:
            for name, value in saved.items():
                setattr(inner, name, value)

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Check the nodes, run Flower's round loop, fail if nothing aggregated.

        As :meth:`flwr.serverapp.strategy.Strategy.start`, plus two checks: before
        round 1, :meth:`check_nodes`; after the last round, a run in which no
        round produced an aggregate logs an error summary and raises.

        Raises
        ------
        ConfigError
            If the connected nodes cannot fill one decryptable group.
        ProtocolError
            If no round produced an aggregate (the model is the initial one).
        """
        self.check_nodes(grid)
        self.rounds_attempted = self.rounds_aggregated = 0
        self._round_failures = []
        result = super().start(
            grid,
            initial_arrays,
            num_rounds=num_rounds,
            timeout=timeout,
            train_config=train_config,
            evaluate_config=evaluate_config,
            evaluate_fn=evaluate_fn,
        )
        if self.rounds_attempted and not self.rounds_aggregated:
            reasons = "; ".join(dict.fromkeys(self._round_failures)) or "unknown"
            message = (
                f"secure aggregation: none of the {self.rounds_attempted} round(s) "
                f"produced an aggregate, so the model is the initial one ({reasons})"
            )
            log(ERROR, "%s", message)
            raise ProtocolError(message)
        return result

    def _advertise(self, grid: Grid, nodes: list[int], group_id: str) -> None:
        request = self.session.advertise_request()
        replies, failures = exchange_records(
            grid,
            dict.fromkeys(nodes, request),
            message_type="train",
            timeout=self.timeout,
            group_id=group_id,
        )
        for node, reason in failures.items():
            log(
                WARNING,
                "secure aggregation: node %d failed key advertisement: %s",
                node,
                _last_line(reason),
            )
        clashes = [r for r in failures.values() if _FLOWER_SECAGG_SIGN in r]
        if clashes:
            raise ConfigError(_FLOWER_SECAGG_HINT)
        for node, reply in replies.items():
            try:
                self.session.add_advertisement(node, reply)
            except ProtocolError as err:
                log(WARNING, "secure aggregation: %s", err)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Let the inner strategy sample, open sessions, attach the protocol."""
        self._grid = grid
        with self._enough_nodes(grid):
            inner = list(
                self.strategy.configure_train(server_round, arrays, config, grid)
            )
        if not inner:
            self._round = None
            return []
        sampled = [m.metadata.dst_node_id for m in inner]
        self.settings.check_count(len(sampled), _SAMPLING_HINT)
        model = arrays_to_numpy(arrays)
        layout = VectorLayout.of(model, self.metric_names)
        fixed = self.fixed_point(self.settings.largest_group(len(sampled)))
        exchanges = 1
        missing = self.session.missing_keys(sampled)
        if missing:
            self._advertise(grid, missing, str(server_round))
            exchanges += 1
        aggregation = self.session.begin_round(
            sampled, length=layout.length, modulus_bits=fixed.modulus_bits
        )
        state = _Round(
            aggregation,
            layout,
            fixed,
            sampled,
            exchanges,
            dtypes={name: value.dtype for name, value in model.items()},
        )
        if not self.metric_names and "metrics" not in self._warned:
            self._warned.add("metrics")
            log(
                INFO,
                "secure aggregation: no client metric is aggregated "
                "(metric_names=()); each client names the train metrics it keeps",
            )
        encoding = ConfigRecord(
            {
                "weighted": self.weighted,
                "clip": fixed.clip,
                "scale": float(fixed.scale),
                Key.MODULUS_BITS: fixed.modulus_bits,
                "max-weight": self.max_weight,
                **layout.to_config(),
            }
        )
        out = []
        grouped = set(aggregation.group_of)
        for message in inner:
            node = message.metadata.dst_node_id
            if node not in grouped:
                continue
            content = RecordDict(dict(message.content.items()))
            content[RECORD] = ConfigRecord(dict(aggregation.upload_request(node)))
            content[ENCODING_RECORD] = encoding
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
            "secure aggregation round %d (%s): %d groups, %d clients, scale 2^%.0f, "
            "mod 2^%d",
            aggregation.number,
            self.mode,
            len(aggregation.groups),
            len(grouped),
            np.log2(fixed.scale),
            fixed.modulus_bits,
        )
        return out

    # -------------------------------------------------------------- aggregation
    def _unmask(self, state: _Round, group_id: str) -> None:
        """Run the unmask stage: each group's quorum, then the rest if needed.

        A double-masked group in which nobody dropped asks only ``t + 1`` of
        its members and a spare (:meth:`AggregationRound.unmask_quorum`); a
        second exchange asks the others only when too few of them answered
        (:meth:`AggregationRound.unmask_shortfall`).
        """
        assert self._grid is not None
        aggregation = state.aggregation
        requests = aggregation.unmask_quorum()
        while requests:
            state.exchanges += 1
            replies, failures = exchange_records(
                self._grid,
                requests,
                message_type="train",
                timeout=self.timeout,
                group_id=group_id,
            )
            for node, reason in failures.items():
                log(
                    WARNING,
                    "secure aggregation: node %d failed the unmask stage: %s",
                    node,
                    reason,
                )
            for node, reply in replies.items():
                try:
                    aggregation.add_unmask(node, reply)
                except ProtocolError as err:
                    log(WARNING, "secure aggregation: %s", err)
            requests = aggregation.unmask_shortfall()

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Unmask the groups' sums and let the inner strategy aggregate them."""
        state = self._round
        replies = list(replies)
        if state is None:
            return self.strategy.aggregate_train(server_round, replies)
        self._round = None
        started = time.perf_counter()
        aggregation = state.aggregation
        self.rounds_attempted += 1
        errors = self._add_uploads(server_round, state, replies)
        aggregation.close()
        self._unmask(state, str(server_round))
        outcome = aggregation.finish()
        # Nodes that did not contribute are re-keyed when next sampled: a client
        # can lose its state (Flower's simulation writes back a node's state
        # last-writer-wins), and a stale session would make it fail every round.
        self.session.forget(n for n in state.sampled if n not in outcome.contributors)
        self._check_not_hopeless(outcome, state)
        total, raw = self._decode_groups(state, outcome)
        metrics = self._metrics(state, outcome, replies, errors, raw)
        metrics["secagg-server-s"] = time.perf_counter() - started
        contributors = outcome.contributors
        if not contributors or state.template is None:
            log(
                ERROR,
                "secure aggregation round %d: no group could be decrypted; "
                "the global model is unchanged",
                outcome.round,
            )
            self._round_failures.append(self._why_nothing(outcome, state, errors))
            return None, metrics
        self._check_clipping(server_round, int(raw[1]), state)
        if int(raw[0]) <= 0:  # every contributor sat the round out (weight 0)
            log(
                INFO,
                "secure aggregation round %d: every contributor abstained; the "
                "global model is unchanged",
                outcome.round,
            )
            return None, metrics
        # every contributor's value is rounded to a multiple of 1/scale
        bound = state.fixed.max_abs_error(len(contributors))
        if self.weighted:
            bound /= max(int(raw[0]), 1)
        elif getattr(self.aggregator, "reduction", "sum") == "mean":
            bound /= int(raw[0])
        metrics["secagg-error-bound"] = bound
        arrays, inner_metrics = self._inner_aggregate(
            server_round, state, total, int(raw[0]), contributors
        )
        if arrays is not None:
            self.rounds_aggregated += 1
        if inner_metrics is not None:
            for key, value in inner_metrics.items():
                if not key.startswith("num-"):
                    metrics[key] = value
        return arrays, metrics

    def _add_uploads(
        self, server_round: int, state: _Round, replies: list[Message]
    ) -> int:
        """Hand every upload to the round's aggregation; return the failed uploads.

        A reply with a Flower error is counted and logged; one without the
        secure-aggregation record, or one the aggregation refuses, is logged
        (and counted as rejected when the record is missing).
        """
        aggregation = state.aggregation
        errors = 0
        for message in replies:
            node = message.metadata.src_node_id
            if message.has_error():
                errors += 1
                reason = message.error.reason or f"error code {message.error.code}"
                log(
                    WARNING,
                    "secure aggregation round %d: node %d failed its upload: %s",
                    server_round,
                    node,
                    _last_line(reason),
                )
                if _FLOWER_SECAGG_SIGN in reason:
                    log(ERROR, "secure aggregation: %s", _FLOWER_SECAGG_HINT)
                continue
            record = message.content.config_records.get(RECORD)
            try:
                if record is None:
                    raise ProtocolError(
                        f"reply from node {node} has no {RECORD!r} record: add "
                        "fedleak.clients.secagg_mod to the ClientApp's mods"
                    )
                aggregation.add_upload(node, dict(record))
                if state.template is None:
                    state.template = message
            except Refused as err:
                log(WARNING, "secure aggregation: %s", err)
            except ProtocolError as err:
                if record is None:
                    aggregation.rejected += 1
                log(WARNING, "secure aggregation: %s", err)
        return errors

    def _decode_groups(
        self, state: _Round, outcome: RoundResult
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sum the decrypted groups: decoded model vector and raw (weight, clip) words.

        A group that could not be decrypted is logged and left out.
        """
        total = np.zeros(state.layout.fixed_length, dtype=np.float64)
        raw = np.zeros(2, dtype=np.int64)
        for group in outcome.groups:
            if group.total is None:
                log(
                    ERROR,
                    "secure aggregation round %d, group %d failed: %s",
                    outcome.round,
                    group.group,
                    group.failure,
                )
                continue
            fixed_length = state.layout.fixed_length
            total += state.fixed.decode(group.total[:fixed_length])
            raw += to_signed(group.total[fixed_length:])
        return total, raw

    def _why_nothing(self, outcome: RoundResult, state: _Round, errors: int) -> str:
        """One phrase saying why a round produced no aggregate."""
        parts = []
        if errors:
            parts.append(f"{errors} error repl{'y' if errors == 1 else 'ies'}")
        if outcome.refusals:
            parts.append(
                "refusals "
                + ", ".join(f"{c} x{n}" for c, n in sorted(outcome.refusals.items()))
            )
        if outcome.non_uploaders:
            parts.append(
                f"{len(outcome.non_uploaders)} of {len(state.sampled)} "
                "sampled did not upload"
            )
        return "; ".join(parts) or "no group reached its online floor"

    def _check_clipping(self, server_round: int, clipped: int, state: _Round) -> None:
        """Warn the first time values were clipped, or stop (``on_clip="error"``)."""
        if not clipped:
            return
        message = (
            f"secure aggregation round {server_round}: {clipped} value(s) were "
            f"clipped to [-{state.fixed.clip:g}, {state.fixed.clip:g}] before "
            "encoding, so the aggregate differs from the plain (weighted) mean; "
            "each client logs its largest value: set SecureAggregation(clip=...) "
            "above it"
        )
        if self.on_clip == "error":
            raise ConfigError(message + " (on_clip='error')")
        if "clip" not in self._warned:
            self._warned.add("clip")
            log(WARNING, "%s (reported once; see the secagg-clipped metric)", message)

    def _check_not_hopeless(self, outcome: RoundResult, state: _Round) -> None:
        """Stop the run when every client refuses the settings themselves."""
        if outcome.contributors:
            return
        refused = sum(outcome.refusals[c] for c in CONFIG_REFUSALS)
        if refused and refused == len(state.sampled):
            names = ", ".join(
                f"{c} x{outcome.refusals[c]}"
                for c in CONFIG_REFUSALS
                if outcome.refusals[c]
            )
            hint = ""
            if outcome.refusals[Refusal.MODE_REFUSED]:
                hint = (
                    "; clients take part in mode='thesis' only if built with "
                    "make_secagg_mod(accept_thesis=True)"
                )
            raise ConfigError(
                f"every sampled client refused the secure-aggregation settings "
                f"({names}){hint}"
            )

    def _metrics(
        self,
        state: _Round,
        outcome: RoundResult,
        replies: list[Message],
        errors: int,
        raw: np.ndarray,
    ) -> MetricRecord:
        answered = {m.metadata.src_node_id for m in replies}
        metrics = MetricRecord(
            {
                "num-sampled": len(state.sampled),
                "num-replies": len(outcome.contributors),
                "num-errors": errors,
                "num-missing": len([n for n in state.sampled if n not in answered]),
                "num-rejected": outcome.rejected,
                "secagg-dropped": len(outcome.non_uploaders),
                "secagg-failed-groups": len(outcome.failed_groups),
                "secagg-groups": len(outcome.groups),
                "secagg-clipped": int(raw[1]),
                "secagg-refusals": sum(outcome.refusals.values()),
                "secagg-exchanges": state.exchanges,
            }
        )
        for code, count in sorted(outcome.refusals.items()):
            metrics[f"secagg-refused-{code}"] = count
        for direction, counts in (
            ("up", outcome.bytes_up),
            ("down", outcome.bytes_down),
        ):
            for stage, count in counts.items():
                metrics[f"secagg-bytes-{direction}-{stage}"] = count
        return metrics

    def _inner_aggregate(
        self,
        server_round: int,
        state: _Round,
        total: np.ndarray,
        weight: int,
        contributors: list[int],
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        # ``weight`` is the decoded weight slot: sum n_k for averages, and
        # for sums the count of members that took part (an abstaining member,
        # one that has not joined yet, uploads zeros with weight 0)
        layout = state.layout
        values = total[: layout.model_length]
        metric_values = total[layout.model_length :]
        if self.weighted:
            values = values / weight
            metric_values = metric_values / weight
        elif getattr(self.aggregator, "reduction", "sum") == "mean":
            values = values / weight
        arrays = {
            name: _cast(value, state.dtypes.get(name, np.dtype(np.float32)))
            for name, value in layout.unflatten(values).items()
        }
        metrics = MetricRecord({protocol.NUM_EXAMPLES: weight})
        for name, value in zip(layout.metric_names, metric_values, strict=True):
            metrics[name] = float(value) if self.weighted else float(value) / weight
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
        with _quiet_dp_discrepancy(self.strategy, len(contributors)):
            return self.strategy.aggregate_train(server_round, [synthetic])

    # -------------------------------------------------------------- delegation
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Delegate federated evaluation (its metrics are not secure-aggregated).

        With evaluation on, the wait for the inner strategy's
        ``min_available_nodes`` is bounded as in :meth:`configure_train`
        (Flower's strategies would wait forever once a node has died).
        """
        if float(getattr(self.aggregator, "fraction_evaluate", 1.0)) <= 0.0:
            return self.strategy.configure_evaluate(server_round, arrays, config, grid)
        with self._enough_nodes(grid):
            return list(
                self.strategy.configure_evaluate(server_round, arrays, config, grid)
            )

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Delegate to the inner strategy."""
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        """Log the wrapper's settings, then the inner strategy's."""
        log(INFO, "\t├──> Secure aggregation (%s, seed 000 Ch. 4.1):", self.mode)
        log(
            INFO,
            "\t│\t├── %s, clip %g, mod 2^%s, groups of %s, min online %d%s",
            "weighted mean" if self.weighted else "sum",
            self.clip,
            self.modulus_bits or "auto",
            self.group_size or "all",
            self.min_online,
            f", threshold {self.threshold:g}" if self.mode == "double-masking" else "",
        )
        log(
            INFO,
            "\t│\t└── metrics summed securely: %s",
            list(self.metric_names) or "none",
        )
        self.strategy.summary()
