"""Server side of federated sketch analytics with secure aggregation.

:class:`SketchAnalytics` runs one federated-analytics query over a Flower
``Grid`` (seed 000 Ch. 4.1.2, the tally): every node sketches its local
stream (a Count-Min or Count Sketch with hashes shared by all) and uploads
the table masked; the server learns only the sum, i.e. the sketch of the
union of all streams. The protocol is :mod:`fedleak.secagg`'s engine
(:class:`~fedleak.secagg.server.ServerSession`, double masking by default,
the seed's scheme as ``mode="thesis"``), carried over ``query`` messages
(:mod:`fedleak.sketches.messages`) by :func:`exchange_records`, the helper
the model wrapper uses; the nodes run
:func:`fedleak.clients.sketch_analytics.make_sketch_client_app`.

Use it from a ServerApp's ``main(grid, context)``::

    analytics = SketchAnalytics(CountMinSketch(18, 272, seed=1), max_count=100)
    result = analytics.run(grid)
    coviews = estimate_coviews(result.sketch, 700)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from logging import WARNING

import numpy as np
from flwr.app import ConfigRecord
from flwr.common import log
from flwr.serverapp import Grid

from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg.constants import Mode
from fedleak.secagg.server import AggregationRound, ServerSession
from fedleak.secagg.settings import ProtocolSettings
from fedleak.sketches import LinearSketch
from fedleak.sketches import messages as msgs
from fedleak.sketches.masked import sketch_fixed_point

from .secure_aggregation import exchange_records

__all__ = ["SketchAnalytics", "SketchAnalyticsResult"]

ConfigValue = int | float | str | bytes | bool


@dataclass
class SketchAnalyticsResult:
    """The outcome of :meth:`SketchAnalytics.run`.

    Attributes
    ----------
    sketch : LinearSketch
        The sum of the contributors' sketches.
    contributors : list of int
        Node ids whose sketches are in :attr:`sketch`, sorted.
    dropped : list of int
        Nodes whose upload was not accepted (including those in failed groups).
    failed_groups : list of int
        Groups left out (too few online members, missing recoveries or
        shares).
    bytes_up, bytes_down : dict of str to int
        Payload bytes by stage (see :class:`fedleak.secagg.RoundResult`).
    seconds : float
        Wall time of the run.
    refusals : dict of str to int
        Client refusals by name.
    exchanges : int
        Message exchanges the run took.
    """

    sketch: LinearSketch
    contributors: list[int]
    dropped: list[int]
    failed_groups: list[int]
    bytes_up: dict[str, int] = field(default_factory=dict)
    bytes_down: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    refusals: dict[str, int] = field(default_factory=dict)
    exchanges: int = 0


class SketchAnalytics:
    """Secure aggregation of the nodes' sketches over a Flower Grid.

    Parameters
    ----------
    template : LinearSketch
        Kind, depth, width and hash seed of every node's sketch (its table
        is ignored).
    max_count : int
        Public bound on any counter of one node's table (nodes above it fail).
    mode : {"double-masking", "thesis"}, default="double-masking"
        Protocol mode; thesis mode needs nodes that accept it.
    threshold : float, default=0.5
        Double masking: Shamir threshold as a fraction of the group.
    group_size : int, optional
        Nodes per group (at most); default one group.
    min_online : int, default=3
        Fewest online members for which a group's sum is released (>= 3).
    modulus_bits : {32, 64}, optional
        Word size; default 32 bits when the sum fits.
    min_nodes : int, default=3
        Wait (up to ``timeout``) until this many nodes are connected; at
        least the smallest decryptable group.
    config : Mapping of str to value, optional
        Extra settings for the nodes' data source (e.g. the population).
    seed : int, default=0
        Seed of the group assignment.
    timeout : float, default=120.0
        Seconds to wait for nodes and for each exchange.

    Raises
    ------
    ConfigError
        If a setting means no group could ever be decrypted (naming it).
    """

    def __init__(
        self,
        template: LinearSketch,
        *,
        max_count: int,
        mode: Mode = "double-masking",
        threshold: float = 0.5,
        group_size: int | None = None,
        min_online: int = 3,
        modulus_bits: int | None = None,
        min_nodes: int = 3,
        config: Mapping[str, ConfigValue] | None = None,
        seed: int = 0,
        timeout: float = 120.0,
    ) -> None:
        self.kind = msgs.sketch_kind(template)
        self.template = template
        self.settings = ProtocolSettings(
            mode=mode, min_online=min_online, threshold=threshold, group_size=group_size
        )
        if isinstance(min_nodes, bool) or not isinstance(min_nodes, int):
            raise ConfigError(f"min_nodes must be an integer, got {min_nodes!r}")
        self.settings.check_count(min_nodes, f"min_nodes={min_nodes}")
        sketch_fixed_point(max_count, 1, modulus_bits)  # fail before any message
        self.max_count = max_count
        self.modulus_bits = modulus_bits
        self.min_nodes = min_nodes
        self.config = dict(config or {})
        self.timeout = timeout
        self.session = ServerSession(self.settings, seed=seed)

    def _nodes(self, grid: Grid) -> list[int]:
        deadline = time.monotonic() + self.timeout
        while len(nodes := sorted(grid.get_node_ids())) < self.min_nodes:
            if time.monotonic() > deadline:
                raise ProtocolError(
                    f"only {len(nodes)} nodes connected within {self.timeout:g} s; "
                    f"the run needs {self.min_nodes}"
                )
            time.sleep(0.1)
        return nodes

    def _upload_extras(self, code_bits: int) -> ConfigRecord:
        return ConfigRecord(
            {
                **self.config,
                msgs.KIND: self.kind,
                msgs.DEPTH: self.template.depth,
                msgs.WIDTH: self.template.width,
                msgs.HASH_SEED: self.template.seed,
                msgs.MAX_COUNT: self.max_count,
                msgs.MODULUS_BITS: code_bits,
            }
        )

    def _exchange(
        self,
        grid: Grid,
        kind: str,
        requests: Mapping[int, dict[str, ConfigValue]],
        extra: ConfigRecord | None = None,
    ) -> dict[int, dict[str, object]]:
        replies, failures = exchange_records(
            grid,
            requests,
            message_type=kind,
            timeout=self.timeout,
            extra=None
            if extra is None
            else {n: {msgs.RECORD: extra} for n in requests},
        )
        for node, reason in failures.items():
            log(WARNING, "sketch analytics: node %d failed %s: %s", node, kind, reason)
        return replies

    def run(self, grid: Grid) -> SketchAnalyticsResult:
        """Run one secure aggregation of the nodes' sketches.

        Returns
        -------
        SketchAnalyticsResult

        Raises
        ------
        ProtocolError
            If too few nodes connect, or no group could be released.
        """
        start = time.perf_counter()
        nodes = self._nodes(grid)
        exchanges = 1
        missing = self.session.missing_keys(nodes)
        if missing:
            exchanges += 1
            request = self.session.advertise_request()
            for node, reply in self._exchange(
                grid, msgs.ADVERTISE, dict.fromkeys(missing, request)
            ).items():
                try:
                    self.session.add_advertisement(node, reply)
                except ProtocolError as err:
                    log(WARNING, "sketch analytics: %s", err)
        largest = max(1, self.settings.largest_group(len(nodes)))
        code = sketch_fixed_point(self.max_count, largest, self.modulus_bits)
        aggregation = self.session.begin_round(
            nodes, length=self.template.size, modulus_bits=code.modulus_bits
        )
        uploads = self._exchange(
            grid,
            msgs.UPLOAD,
            aggregation.upload_requests(),
            self._upload_extras(code.modulus_bits),
        )
        for node, reply in uploads.items():
            try:
                aggregation.add_upload(node, reply)
            except ProtocolError as err:
                log(
                    WARNING,
                    "sketch analytics: upload of node %d refused: %s",
                    node,
                    err,
                )
        aggregation.close()
        exchanges += self._unmask(grid, aggregation)
        outcome = aggregation.finish()
        self.session.forget(n for n in nodes if n not in outcome.contributors)
        total = np.zeros(self.template.size, dtype=np.int64)
        for group in outcome.groups:
            if group.total is None:
                log(
                    WARNING,
                    "sketch analytics: group %d left out: %s",
                    group.group,
                    group.failure,
                )
                continue
            total += np.rint(code.decode(group.total)).astype(np.int64)
        if not outcome.contributors:
            raise ProtocolError(
                "no group could be released: too few nodes online (see the log)"
            )
        return SketchAnalyticsResult(
            sketch=self.template.with_table(total),
            contributors=outcome.contributors,
            dropped=sorted(set(nodes) - set(outcome.contributors)),
            failed_groups=outcome.failed_groups,
            bytes_up=outcome.bytes_up,
            bytes_down=outcome.bytes_down,
            seconds=time.perf_counter() - start,
            refusals=dict(outcome.refusals),
            exchanges=exchanges,
        )

    def _unmask(self, grid: Grid, aggregation: AggregationRound) -> int:
        requests = aggregation.unmask_requests()
        if not requests:
            return 0
        for node, reply in self._exchange(grid, msgs.RECOVER, requests).items():
            try:
                aggregation.add_unmask(node, reply)
            except ProtocolError as err:
                log(WARNING, "sketch analytics: unmask reply of node %d: %s", node, err)
        return 1
