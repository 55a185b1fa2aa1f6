"""Server side of federated sketch analytics with masked aggregation.

:class:`SketchAnalytics` runs one federated-analytics query over a Flower
``Grid`` (seed 000 Ch. 4.1.2, the tally): every node sketches its local
stream (a Count-Min or Count Sketch with hashes shared by all) and uploads
the table masked with pairwise masks; the server learns only the sum, i.e.
the sketch of the union of all streams. It uses :mod:`fedleak.secagg` as is
(:class:`~fedleak.secagg.GroupTally` per group, :func:`~fedleak.secagg.assign_groups`,
dropout recovery with the online set) over three ``query`` exchanges
(:mod:`fedleak.sketches.messages`); the nodes run
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
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from fedleak import protocol
from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import GroupTally, InsufficientParticipants, assign_groups
from fedleak.sketches import LinearSketch
from fedleak.sketches import messages as msgs
from fedleak.sketches.masked import sketch_fixed_point

__all__ = ["SketchAnalytics", "SketchAnalyticsResult"]

_KEY_BYTES = 32

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
        Nodes that failed before uploading.
    failed_groups : list of int
        Groups left out (too few online members or a missing recovery).
    bytes_up, bytes_down : dict of str to int
        Bytes by stage (``advertise``/``upload``/``recover``; ``keys``/
        ``online-set``), payload only.
    seconds : float
        Wall time of the run.
    """

    sketch: LinearSketch
    contributors: list[int]
    dropped: list[int]
    failed_groups: list[int]
    bytes_up: dict[str, int] = field(default_factory=dict)
    bytes_down: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class SketchAnalytics:
    """Masked aggregation of the nodes' sketches over a Flower Grid.

    Parameters
    ----------
    template : LinearSketch
        Kind, depth, width and hash seed of every node's sketch (its table
        is ignored).
    max_count : int
        Public bound on any counter of one node's table (nodes above it fail).
    group_size : int, optional
        Nodes per group; default one group.
    min_online : int, default=3
        Fewest online members for which a group's sum is released.
    modulus_bits : {32, 64}, optional
        Word size; default 32 bits when the sum fits.
    min_nodes : int, default=3
        Wait (up to ``timeout``) until this many nodes are connected.
    config : Mapping of str to value, optional
        Extra settings for the nodes' data source (e.g. the population).
    seed : int, default=0
        Seed of the group assignment.
    timeout : float, default=120.0
        Seconds to wait for nodes and for each exchange.
    """

    def __init__(
        self,
        template: LinearSketch,
        *,
        max_count: int,
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
        if group_size is not None and group_size < 3:
            raise ConfigError(f"group_size must be >= 3, got {group_size}")
        if min_online < 2:
            raise ConfigError(f"min_online must be >= 2, got {min_online}")
        if min_nodes < 1:
            raise ConfigError(f"min_nodes must be >= 1, got {min_nodes}")
        sketch_fixed_point(max_count, 1, modulus_bits)  # fail before any message
        self.max_count = max_count
        self.group_size = group_size
        self.min_online = min_online
        self.modulus_bits = modulus_bits
        self.min_nodes = min_nodes
        self.config = dict(config or {})
        self.seed = seed
        self.timeout = timeout
        self._round = 0

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

    def _send(
        self, grid: Grid, kind: str, contents: Mapping[int, dict[str, ConfigValue]]
    ) -> dict[int, ConfigRecord | None]:
        """One exchange; returns node -> reply record (``None`` for a failure)."""
        messages = [
            Message(
                RecordDict({msgs.RECORD: ConfigRecord(dict(values))}),
                dst_node_id=node,
                message_type=kind,
            )
            for node, values in contents.items()
        ]
        answers: dict[int, ConfigRecord | None] = dict.fromkeys(contents)
        for reply in grid.send_and_receive(messages, timeout=self.timeout):
            node = reply.metadata.src_node_id
            if node not in answers:
                log(WARNING, "sketch analytics: unexpected reply from node %d", node)
                continue
            if reply.has_error():
                log(
                    WARNING,
                    "sketch analytics: node %d failed %s: %s",
                    node,
                    kind,
                    reply.error.reason,
                )
                continue
            answers[node] = reply.content.config_records.get(msgs.RECORD)
        return answers

    def run(self, grid: Grid) -> SketchAnalyticsResult:
        """Run one masked aggregation of the nodes' sketches.

        Returns
        -------
        SketchAnalyticsResult

        Raises
        ------
        ProtocolError
            If too few nodes connect, or no group could be released.
        """
        start = time.perf_counter()
        self._round += 1
        round_ = self._round
        bytes_up = {"advertise": 0, "upload": 0, "recover": 0}
        bytes_down = {"keys": 0, "online-set": 0}
        nodes = self._nodes(grid)
        keys: dict[int, bytes] = {}
        for node, answer in self._send(
            grid, msgs.ADVERTISE, {n: {} for n in nodes}
        ).items():
            key = None if answer is None else answer.get(msgs.PUBLIC_KEY)
            if isinstance(key, bytes) and len(key) == _KEY_BYTES:
                keys[node] = key
                bytes_up["advertise"] += _KEY_BYTES
        members = sorted(keys)
        groups = assign_groups(
            members, self.group_size, np.random.default_rng([self.seed, round_])
        )
        largest = max((len(g) for g in groups), default=1)
        code = sketch_fixed_point(self.max_count, largest, self.modulus_bits)
        length = self.template.size
        tallies = [
            GroupTally(
                round=round_,
                group=g,
                members=group,
                length=length,
                dtype=code.dtype,
                min_online=self.min_online,
            )
            for g, group in enumerate(groups)
        ]
        uploads: dict[int, dict[str, ConfigValue]] = {}
        group_of: dict[int, int] = {}
        for g, group in enumerate(groups):
            peers = protocol.pack_ids(group)
            peer_keys = b"".join(keys[n] for n in group)
            for node in group:
                group_of[node] = g
                uploads[node] = {
                    **self.config,
                    msgs.ROUND: round_,
                    msgs.GROUP: g,
                    msgs.PEERS: peers,
                    msgs.PEER_KEYS: peer_keys,
                    msgs.KIND: self.kind,
                    msgs.DEPTH: self.template.depth,
                    msgs.WIDTH: self.template.width,
                    msgs.HASH_SEED: self.template.seed,
                    msgs.MAX_COUNT: self.max_count,
                    msgs.MODULUS_BITS: code.modulus_bits,
                    msgs.MIN_ONLINE: self.min_online,
                }
                bytes_down["keys"] += len(peer_keys)
        uploaded: set[int] = set()
        for node, answer in self._send(grid, msgs.UPLOAD, uploads).items():
            masked = None if answer is None else answer.get(msgs.MASKED)
            if (
                not isinstance(masked, bytes)
                or len(masked) != length * code.dtype.itemsize
            ):
                continue
            vector = np.frombuffer(masked, dtype=code.dtype)
            try:
                tallies[group_of[node]].add_upload(node, round_, vector)
            except ProtocolError as err:  # counted as dropped: recovered below
                log(
                    WARNING,
                    "sketch analytics: upload of node %d refused: %s",
                    node,
                    err,
                )
                continue
            uploaded.add(node)
            bytes_up["upload"] += len(masked)
        total = np.zeros(length, dtype=np.int64)
        contributors: list[int] = []
        dropped = sorted(set(nodes) - uploaded)
        failed: list[int] = []
        for g, tally in enumerate(tallies):
            try:
                online, gone = tally.close()
            except InsufficientParticipants as err:
                log(WARNING, "sketch analytics: group %d left out: %s", g, err)
                failed.append(g)
                continue
            if gone:
                packed = protocol.pack_ids(gone)
                bytes_down["online-set"] += 8 * len(online) ** 2
                answers = self._send(
                    grid,
                    msgs.RECOVER,
                    {
                        n: {msgs.ROUND: round_, msgs.GROUP: g, msgs.DROPPED: packed}
                        for n in online
                    },
                )
                for node, answer in answers.items():
                    k_prime = None if answer is None else answer.get(msgs.MASKED)
                    if isinstance(k_prime, bytes):
                        tally.add_recovery(
                            node, round_, np.frombuffer(k_prime, dtype=code.dtype)
                        )
                        bytes_up["recover"] += len(k_prime)
                if tally.missing_recoveries:
                    log(WARNING, "sketch analytics: group %d lacks recoveries", g)
                    failed.append(g)
                    continue
            total += np.rint(code.decode(tally.result())).astype(np.int64)
            contributors.extend(online)
        if not contributors:
            raise ProtocolError(
                "no group could be released: too few nodes online (see the log)"
            )
        return SketchAnalyticsResult(
            sketch=self.template.with_table(total),
            contributors=sorted(contributors),
            dropped=dropped,
            failed_groups=failed,
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            seconds=time.perf_counter() - start,
        )
