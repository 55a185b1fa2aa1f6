"""The server's side of the protocol: a session over rounds, one object per round.

:class:`ServerSession` keeps what lasts across rounds (each node's session
key, the round counter) and opens an :class:`AggregationRound` per round.
The round builds every request and checks every reply; the carriers (the
Flower strategies, the in-process runner, the adversary) only move records:

1. ``begin_round`` splits the nodes with a key into groups (never below the
   decryption floor, :meth:`~fedleak.secagg.settings.ProtocolSettings.groups`).
2. :meth:`AggregationRound.upload_request` / :meth:`~AggregationRound.add_upload`:
   the masked vectors (and, double masking, the sealed self-mask shares).
3. :meth:`~AggregationRound.close` fixes each group's online set ``U``; a
   group with fewer than its floor online fails, and later uploads are
   refused (a late upload is never added).
4. :meth:`~AggregationRound.unmask_requests` / :meth:`~AggregationRound.add_unmask`:
   always in double-masking mode, only for groups with dropouts in thesis
   mode. The request for member ``p`` names ``U`` and the dropped set and
   forwards the shares sealed for ``p`` by the other members of ``U``.
   :meth:`~AggregationRound.unmask_quorum` asks only the members a group
   needs (``t + 1`` and a spare when nobody dropped), and
   :meth:`~AggregationRound.unmask_shortfall` the others if too few answer.
5. :meth:`~AggregationRound.finish` returns each group's sum of encoded
   inputs: ``sum_U y_i - sum_U k'_i - sum_U PRG(b_i)``, where every ``b_i``
   is rebuilt from ``t`` revealed shares with one set of Lagrange
   coefficients for most of the group (:mod:`fedleak.secagg.shamir`).

Exchanges per round: thesis mode 1 (upload), 2 when members dropped;
double-masking mode 2 (upload, unmask). Key advertisement adds one exchange
for nodes without a session (the first round, or after a node lost its
state). Flower's SecAgg+ uses 4 per round.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError, ProtocolError
from .client import SEALED_SHARE_BYTES, SHARE_BYTES, Refused, refusal_of
from .constants import Key, Stage
from .keys import KEY_BYTES
from .masking import self_mask
from .records import Record, get_bytes, get_int, get_str, pack_ids
from .settings import ProtocolSettings
from .shamir import PRIME, SECRET_WORDS, combine_many, lagrange_at_zero
from .tally import GroupTally, InsufficientParticipants

__all__ = [
    "UNMASK_SPARE",
    "AggregationRound",
    "GroupOutcome",
    "RoundResult",
    "ServerSession",
]

_ID_BYTES = 8
#: Members asked at the unmask stage beyond the ``t + 1`` a group needs
#: (:meth:`AggregationRound.unmask_quorum`): one may fail without costing a
#: second exchange.
UNMASK_SPARE = 1
_P = np.uint64(PRIME)


@dataclass
class GroupOutcome:
    """One group's outcome in one round.

    Attributes
    ----------
    group : int
        The group number.
    members : list of int
        Its members, sorted.
    online : list of int
        Members whose upload was accepted before the online set was fixed.
    total : numpy.ndarray or None
        The sum of the online members' encoded inputs (uint32/uint64), or
        None if the group failed.
    failure : str or None
        Why the group failed.
    """

    group: int
    members: list[int]
    online: list[int] = field(default_factory=list)
    total: np.ndarray | None = None
    failure: str | None = None

    @property
    def dropped(self) -> list[int]:
        """Members that did not upload in time."""
        online = set(self.online)
        return [m for m in self.members if m not in online]


@dataclass
class RoundResult:
    """The server's outcome of one round.

    Attributes
    ----------
    round : int
        The session's round number.
    groups : list of GroupOutcome
        Every group, by number.
    excluded : list of int
        Nodes asked to take part that had no session key (never grouped).
    refusals : collections.Counter
        Client refusals by name (:class:`~fedleak.secagg.constants.Refusal`).
    rejected : int
        Malformed or unexpected replies.
    late : list of int
        Nodes whose upload arrived after the online set was fixed (refused).
    bytes_up, bytes_down : dict of str to int
        Payload bytes by stage: up ``advertise``, ``upload``, ``shares``,
        ``revealed-shares``, ``recover``; down ``keys``, ``roster-ids``,
        ``online-set``, ``forwarded-shares``.
    seconds : dict of str to float
        Server compute: ``upload`` (adding uploads) and ``unmask`` (adding
        recoveries, rebuilding and removing self-masks).
    """

    round: int
    groups: list[GroupOutcome]
    excluded: list[int]
    refusals: Counter[str]
    rejected: int
    late: list[int]
    bytes_up: dict[str, int]
    bytes_down: dict[str, int]
    seconds: dict[str, float]

    @property
    def contributors(self) -> list[int]:
        """Nodes whose inputs are in a released group sum, sorted."""
        return sorted(n for g in self.groups if g.total is not None for n in g.online)

    @property
    def failed_groups(self) -> list[int]:
        """Groups whose sum was not released."""
        return [g.group for g in self.groups if g.total is None]

    @property
    def non_uploaders(self) -> list[int]:
        """Every node asked to take part whose upload was not accepted in time."""
        out = set(self.excluded)
        for g in self.groups:
            out.update(g.dropped)
        return sorted(out)


class _Group:
    """The server's state of one group in one round."""

    def __init__(
        self,
        number: int,
        members: list[int],
        *,
        round: int,
        length: int,
        dtype: np.dtype,
        settings: ProtocolSettings,
    ) -> None:
        self.number = number
        self.members = members
        self.index = {m: k for k, m in enumerate(members)}
        n = len(members)
        self.threshold = settings.shamir_threshold(n)
        self.online_floor = settings.online_floor(n)
        self.double = settings.mode == "double-masking"
        self.tally = GroupTally(
            round=round,
            group=number,
            members=members,
            length=length,
            dtype=dtype,
            min_online=self.online_floor,
        )
        self.sealed: dict[int, bytes] = {}
        self.revealed: dict[int, bytes] = {}
        self.asked: set[int] = set()
        self.online: list[int] = []
        self.dropped: list[int] = []
        self.failure: str | None = None
        self.closed = False

    def sealed_for(self, dealer: int, recipient: int) -> bytes:
        """Return the share ``dealer`` sealed for ``recipient``."""
        a, b = self.index[dealer], self.index[recipient]
        slot = b - (1 if b > a else 0)
        blob = self.sealed[dealer]
        return blob[slot * SEALED_SHARE_BYTES : (slot + 1) * SEALED_SHARE_BYTES]

    def needs_unmask(self) -> bool:
        return self.failure is None and (self.double or bool(self.dropped))

    def quorum(self, spare: int) -> list[int]:
        """Return the online members to ask first at the unmask stage (sorted).

        Any ``t + 1`` revealers give every online member's seed ``t`` shares
        besides its own; recoveries, where members dropped, are needed from
        every online member.
        """
        if not self.double or self.dropped:
            return list(self.online)
        return self.online[: self.threshold + 1 + spare]

    def short_of_revealers(self) -> bool:
        """Whether too few members revealed shares to rebuild every seed."""
        return self.double and len(self.revealed) < self.threshold + 1

    def self_masks(self, length: int, dtype: np.dtype) -> np.ndarray:
        """Rebuild every online member's self-mask seed and return their sum."""
        u = self.online
        responders = [p for p in u if p in self.revealed]
        t = self.threshold
        size = len(u)
        # table[a, b] = the share of member u[b]'s seed held by member u[a]
        table = np.zeros((size, size, SECRET_WORDS), dtype=np.uint32)
        pos = {m: k for k, m in enumerate(u)}
        for p in responders:
            a = pos[p]
            words = np.frombuffer(self.revealed[p], dtype="<u4").reshape(
                size - 1, SECRET_WORDS
            )
            others = [k for k in range(size) if k != a]
            table[a, others, :] = words
        points = np.array([self.index[p] + 1 for p in responders], dtype=np.uint64)
        if len(responders) < t:
            raise ProtocolError(
                f"only {len(responders)} members revealed shares, {t} are needed"
            )
        first = lagrange_at_zero(points[:t])
        wide = lagrange_at_zero(points[: t + 1]) if len(responders) > t else None
        coefficients = np.empty((size, t), dtype=np.uint64)
        holders = np.empty((size, t), dtype=np.int64)
        first_holders = np.array([pos[p] for p in responders[:t]], dtype=np.int64)
        among_first = {p: k for k, p in enumerate(responders[:t])}
        for b, dealer in enumerate(u):
            k = among_first.get(dealer, -1)
            if k < 0:
                coefficients[b], holders[b] = first, first_holders
                continue
            if wide is None:
                raise ProtocolError(
                    f"member {dealer}'s seed needs {t} shares besides its own; "
                    f"only {len(responders) - 1} were revealed"
                )
            # Lagrange coefficients of points[:t+1] without point k:
            # lambda'_j = lambda_j * (x_k - x_j) / x_k.
            xs = points[: t + 1]
            keep = [j for j in range(t + 1) if j != k]
            inv = np.uint64(pow(int(xs[k]), PRIME - 2, PRIME))
            diff = (xs[k] + _P - xs[keep]) % _P
            coefficients[b] = (((wide[keep] * diff) % _P) * inv) % _P
            holders[b] = [pos[responders[j]] for j in keep]
        shares = table[holders, np.arange(size)[:, None], :].astype(np.uint64)
        seeds = combine_many(coefficients, shares)
        total = np.zeros(length, dtype=dtype)
        buffer = np.empty(length, dtype=dtype)
        for words in seeds:
            np.add(total, self_mask(words, length, dtype, out=buffer), out=total)
        return total


class AggregationRound:
    """The server's side of one round (all groups).

    Built by :meth:`ServerSession.begin_round`; see the module docstring for
    the order of calls.
    """

    def __init__(
        self,
        session: ServerSession,
        number: int,
        groups: list[list[int]],
        excluded: list[int],
        *,
        length: int,
        modulus_bits: int,
    ) -> None:
        if modulus_bits not in (32, 64):
            raise ProtocolError(f"modulus_bits must be 32 or 64, got {modulus_bits}")
        if length < 1:
            raise ProtocolError(f"length must be >= 1, got {length}")
        self.session = session
        self.settings = session.settings
        self.number = number
        self.length = length
        self.modulus_bits = modulus_bits
        self.dtype = np.dtype(np.uint32 if modulus_bits == 32 else np.uint64)
        self.keys = {n: session.keys[n] for g in groups for n in g}
        self.groups = [
            _Group(
                g,
                members,
                round=number,
                length=length,
                dtype=self.dtype,
                settings=self.settings,
            )
            for g, members in enumerate(groups)
        ]
        self.group_of = {n: g for g, members in enumerate(groups) for n in members}
        self.excluded = list(excluded)
        self.refusals: Counter[str] = Counter()
        self.rejected = 0
        self.late: list[int] = []
        self.bytes_up: dict[str, int] = {}
        self.bytes_down: dict[str, int] = {}
        self.seconds = {"upload": 0.0, "unmask": 0.0}
        self._closed = False
        self._finished: RoundResult | None = None

    # ------------------------------------------------------------------ internals
    def _count(self, direction: dict[str, int], stage: str, n: int) -> None:
        direction[stage] = direction.get(stage, 0) + n

    @property
    def members(self) -> list[int]:
        """Every grouped node, in group order."""
        return [n for g in self.groups for n in g.members]

    def _group(self, node: int, reply: Mapping[str, Any], stage: str) -> _Group:
        if node not in self.group_of:
            raise ProtocolError(f"{stage} from node {node}, which is not in this round")
        if get_str(reply, Key.STAGE) != stage:
            raise ProtocolError(f"reply from node {node} is not a {stage} reply")
        group = self.groups[self.group_of[node]]
        if get_bytes(reply, Key.SESSION) != self.keys[node]:
            raise ProtocolError(f"{stage} from node {node} names another session")
        if get_int(reply, Key.ROUND) != self.number:
            raise ProtocolError(
                f"{stage} from node {node} is for round {get_int(reply, Key.ROUND)}, "
                f"not {self.number}"
            )
        if get_int(reply, Key.GROUP) != group.number:
            raise ProtocolError(f"{stage} from node {node} names another group")
        return group

    def _refused(self, node: int, reply: Mapping[str, Any], stage: str) -> None:
        refused = refusal_of(reply)
        if refused is not None:
            self.refusals[refused.code] += 1
            raise Refused(
                refused.code, f"node {node} refused {stage}: {refused.reason}"
            )

    # ------------------------------------------------------------------ upload
    def upload_request(self, node: int) -> Record:
        """Return the upload request for a grouped node."""
        group = self.groups[self.group_of[node]]
        n = len(group.members)
        self._count(self.bytes_down, "keys", KEY_BYTES * n)
        self._count(self.bytes_down, "roster-ids", _ID_BYTES * n)
        return {
            Key.STAGE: Stage.UPLOAD,
            Key.SESSION: self.keys[node],
            Key.ROUND: self.number,
            Key.GROUP: group.number,
            Key.MODE: self.settings.mode,
            Key.PEERS: pack_ids(group.members),
            Key.PEER_KEYS: b"".join(self.keys[m] for m in group.members),
            Key.THRESHOLD: group.threshold,
            Key.MIN_ONLINE: self.settings.min_online,
            Key.LENGTH: self.length,
            Key.MODULUS_BITS: self.modulus_bits,
        }

    def upload_requests(self) -> dict[int, Record]:
        """Return upload requests for every grouped node."""
        return {n: self.upload_request(n) for n in self.members}

    def add_upload(self, node: int, reply: Mapping[str, Any]) -> None:
        """Add one node's upload reply to its group.

        Raises
        ------
        Refused
            If the client refused (the refusal is counted).
        ProtocolError
            If the reply is malformed, unexpected, duplicate or late (after
            :meth:`close`); counted as rejected, nothing is added.
        """
        started = time.perf_counter()
        try:
            self._refused(node, reply, "upload")
            group = self._group(node, reply, Stage.UPLOAD)
            if group.closed:
                self.late.append(node)
                raise ProtocolError(
                    f"late upload from node {node} (round {self.number}, group "
                    f"{group.number}) refused: the online set is fixed"
                )
            masked = get_bytes(reply, Key.MASKED)
            if len(masked) != self.length * self.dtype.itemsize:
                raise ProtocolError(
                    f"masked vector from node {node} has {len(masked)} bytes, "
                    f"expected {self.length * self.dtype.itemsize}"
                )
            sealed = b""
            if group.double:
                sealed = get_bytes(reply, Key.SHARES)
                if len(sealed) != SEALED_SHARE_BYTES * (len(group.members) - 1):
                    raise ProtocolError(
                        f"upload from node {node} carries {len(sealed)} bytes of "
                        "shares, not one sealed share per peer"
                    )
            group.tally.add_upload(
                node, self.number, np.frombuffer(masked, dtype=self.dtype)
            )
            if group.double:
                group.sealed[node] = sealed
                self._count(self.bytes_up, "shares", len(sealed))
            self._count(self.bytes_up, "upload", len(masked))
        except Refused:
            raise
        except ProtocolError:
            self.rejected += 1
            raise
        finally:
            self.seconds["upload"] += time.perf_counter() - started

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Fix every group's online set; later uploads are refused."""
        for group in self.groups:
            if group.closed:
                continue
            group.closed = True
            try:
                group.online, group.dropped = group.tally.close()
            except InsufficientParticipants as err:
                group.failure = str(err)
                online = group.tally.uploaded
                group.online = online
                group.dropped = [m for m in group.members if m not in online]
        self._closed = True

    def unmask_request(self, node: int) -> Record:
        """Return the unmask request for an online member of a group that needs one."""
        group = self.groups[self.group_of[node]]
        request: Record = {
            Key.STAGE: Stage.UNMASK,
            Key.SESSION: self.keys[node],
            Key.ROUND: self.number,
            Key.GROUP: group.number,
            Key.ONLINE: pack_ids(group.online),
            Key.DROPPED: pack_ids(group.dropped),
        }
        group.asked.add(node)
        self._count(self.bytes_down, "online-set", _ID_BYTES * len(group.members))
        if group.double:
            forwarded = b"".join(
                group.sealed_for(j, node) for j in group.online if j != node
            )
            request[Key.FORWARDED] = forwarded
            self._count(self.bytes_down, "forwarded-shares", len(forwarded))
        return request

    def unmask_requests(self) -> dict[int, Record]:
        """Return unmask requests for every online member of every group needing one."""
        if not self._closed:
            self.close()
        return {
            node: self.unmask_request(node)
            for group in self.groups
            if group.needs_unmask()
            for node in group.online
        }

    def unmask_quorum(self, spare: int = UNMASK_SPARE) -> dict[int, Record]:
        """Return unmask requests for the members each group needs, and spares.

        A double-masked group in which nobody dropped needs the shares of
        ``t + 1`` revealers only: with them every online member's self-mask
        seed has ``t`` shares besides its own (Bonawitz et al. 2017: the
        server needs ``t`` shares per seed). So only its first ``t + 1 +
        spare`` online members (by id) are asked; the others reveal nothing
        this round. Where members dropped, every online member's recovery is
        needed and every one is asked (thesis mode: only then). If too few of
        those asked answer, :meth:`unmask_shortfall` asks the rest.

        Parameters
        ----------
        spare : int, default=UNMASK_SPARE
            Members asked beyond ``t + 1``: how many may fail the stage
            before a second exchange is needed.

        Raises
        ------
        ConfigError
            If ``spare`` is not an integer >= 0.
        """
        if isinstance(spare, bool) or not isinstance(spare, int) or spare < 0:
            raise ConfigError(f"spare must be an integer >= 0, got {spare!r}")
        if not self._closed:
            self.close()
        return {
            node: self.unmask_request(node)
            for group in self.groups
            if group.needs_unmask()
            for node in group.quorum(spare)
        }

    def unmask_shortfall(self) -> dict[int, Record]:
        """Return unmask requests for the members of short groups not asked yet.

        A group is short while fewer than ``t + 1`` of its members revealed
        shares. Empty when every group can be unmasked, or everyone was asked.
        """
        if not self._closed:
            self.close()
        return {
            node: self.unmask_request(node)
            for group in self.groups
            if group.needs_unmask() and group.short_of_revealers()
            for node in group.online
            if node not in group.asked
        }

    def add_unmask(self, node: int, reply: Mapping[str, Any]) -> None:
        """Add one member's unmask reply.

        Raises
        ------
        Refused
            If the client refused (counted; the member counts as silent).
        ProtocolError
            If the reply is malformed or unexpected (counted as rejected).
        """
        started = time.perf_counter()
        try:
            self._refused(node, reply, "unmask")
            group = self._group(node, reply, Stage.UNMASK)
            if not group.needs_unmask() or node not in group.online:
                raise ProtocolError(f"unexpected unmask reply from node {node}")
            if node in group.revealed or node in group.tally.recovered:
                raise ProtocolError(f"duplicate unmask reply from node {node}")
            revealed = b""
            if group.double:
                revealed = get_bytes(reply, Key.REVEALED)
                if len(revealed) != SHARE_BYTES * (len(group.online) - 1):
                    raise ProtocolError(
                        f"unmask reply from node {node} reveals {len(revealed)} "
                        "bytes, not one share per other online member"
                    )
            if group.dropped:
                recovery = get_bytes(reply, Key.RECOVERY)
                if len(recovery) != self.length * self.dtype.itemsize:
                    raise ProtocolError(
                        f"recovery from node {node} has {len(recovery)} bytes"
                    )
                group.tally.add_recovery(
                    node, self.number, np.frombuffer(recovery, dtype=self.dtype)
                )
                self._count(self.bytes_up, "recover", len(recovery))
            if group.double:
                group.revealed[node] = revealed
                self._count(self.bytes_up, "revealed-shares", len(revealed))
        except Refused:
            raise
        except ProtocolError:
            self.rejected += 1
            raise
        finally:
            self.seconds["unmask"] += time.perf_counter() - started

    # ------------------------------------------------------------------ finish
    def finish(self) -> RoundResult:
        """Release every group whose sum can be unmasked.

        Returns
        -------
        RoundResult
            Group sums (encoded words), failures and accounting.
        """
        if self._finished is not None:
            return self._finished
        if not self._closed:
            self.close()
        started = time.perf_counter()
        outcomes = []
        for group in self.groups:
            outcome = GroupOutcome(
                group.number, list(group.members), list(group.online)
            )
            if group.failure is None:
                try:
                    total = group.tally.result()
                    if group.double:
                        np.subtract(
                            total,
                            group.self_masks(self.length, self.dtype),
                            out=total,
                        )
                    outcome.total = total
                except ProtocolError as err:
                    group.failure = str(err)
            outcome.failure = group.failure
            outcomes.append(outcome)
        self.seconds["unmask"] += time.perf_counter() - started
        self._finished = RoundResult(
            round=self.number,
            groups=outcomes,
            excluded=list(self.excluded),
            refusals=Counter(self.refusals),
            rejected=self.rejected,
            late=list(self.late),
            bytes_up=dict(self.bytes_up),
            bytes_down=dict(self.bytes_down),
            seconds=dict(self.seconds),
        )
        return self._finished


class ServerSession:
    """The server's side of a secure-aggregation session (many rounds).

    Parameters
    ----------
    settings : ProtocolSettings, optional
        Mode, floors, threshold and group size (default: double masking,
        ``min_online=3``, threshold one half, one group).
    seed : int, optional
        Seed of the group assignment (the same seed and round give the same
        groups); ``None`` draws groups from OS entropy. Masks never depend
        on it.
    """

    def __init__(
        self, settings: ProtocolSettings | None = None, *, seed: int | None = 0
    ) -> None:
        self.settings = settings or ProtocolSettings()
        self.seed = seed
        self.keys: dict[int, bytes] = {}
        self.round = 0
        self._advertised = 0

    def advertise_request(self) -> Record:
        """Return the request that opens a node's session."""
        return {Key.STAGE: Stage.ADVERTISE}

    def add_advertisement(self, node: int, reply: Mapping[str, Any]) -> None:
        """Register a node's session key.

        Raises
        ------
        ProtocolError
            If the reply holds no valid 32-byte public key, or repeats
            another node's key.
        """
        if get_str(reply, Key.STAGE) != Stage.ADVERTISE:
            raise ProtocolError(f"reply from node {node} is not an advertise reply")
        key = get_bytes(reply, Key.PUBLIC_KEY)
        if len(key) != KEY_BYTES:
            raise ProtocolError(f"node {node} sent a public key of {len(key)} bytes")
        if any(k == key and n != node for n, k in self.keys.items()):
            raise ProtocolError(f"node {node} repeats another node's public key")
        self.keys[node] = key
        self._advertised += KEY_BYTES

    def forget(self, nodes: Iterable[int]) -> None:
        """Drop nodes' session keys (they are asked to advertise again)."""
        for node in nodes:
            self.keys.pop(node, None)

    def missing_keys(self, nodes: Iterable[int]) -> list[int]:
        """Return the nodes among ``nodes`` without a session key."""
        return [n for n in nodes if n not in self.keys]

    def begin_round(
        self,
        nodes: Iterable[int],
        *,
        length: int,
        modulus_bits: int,
        rng: np.random.Generator | None = None,
    ) -> AggregationRound:
        """Open the next round for ``nodes`` (those without a key are excluded).

        Parameters
        ----------
        nodes : Iterable of int
            The nodes sampled for the round.
        length : int
            Words of every masked vector.
        modulus_bits : int
            32 or 64.
        rng : numpy.random.Generator, optional
            Source of the group assignment; default ``[seed, round]`` (or OS
            entropy without a seed).

        Returns
        -------
        AggregationRound
        """
        self.round += 1
        nodes = list(nodes)
        keyed = [n for n in nodes if n in self.keys]
        excluded = [n for n in nodes if n not in self.keys]
        if rng is None and self.seed is not None:
            rng = np.random.default_rng([self.seed, self.round])
        groups = self.settings.groups(keyed, rng) if keyed else []
        aggregation = AggregationRound(
            self,
            self.round,
            groups,
            excluded,
            length=length,
            modulus_bits=modulus_bits,
        )
        if self._advertised:
            aggregation.bytes_up["advertise"] = self._advertised
            self._advertised = 0
        return aggregation
