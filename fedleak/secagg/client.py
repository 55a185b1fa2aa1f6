"""The client's side of the protocol: a session object with its own guards.

One :class:`ClientSession` per node and session (one X25519 key pair) runs
the client's stages, whoever carries the messages (the Flower mod
:func:`fedleak.clients.secagg_mod`, the sketch ClientApp, or the in-process
runner :func:`fedleak.secagg.secure_sum`):

``advertise``
    A fresh key pair from the OS CSPRNG; its public key is the session id.
``upload`` (:meth:`ClientSession.plan_upload`, then :meth:`ClientSession.upload`)
    The request names the round, the group's members and keys, the mode and
    (double masking) the Shamir threshold ``t``. The client checks it
    *before* any training, then uploads ``x + sum_j ±PRG(s_ij) [+ PRG(b)]``
    mod ``2**b`` and, in double-masking mode, one sealed share of its fresh
    self-mask seed ``b`` per peer (:mod:`fedleak.secagg.channel`), to be
    forwarded by the server at the unmask stage.
``unmask`` (:meth:`ClientSession.unmask`)
    The request splits the group into online and dropped members and
    forwards the shares the online ones sealed for this client. The client
    reveals the self-mask shares of online members and returns the masks it
    shares with dropped ones (its *recovery*, as in the seed), never both
    for one peer and only once per round.

Guards
------
The client trusts no number the server sends (:class:`ClientGuards`); each
refusal raises :class:`Refused`, whose name (:class:`~.constants.Refusal`)
goes back in the reply (:func:`refusal_reply`) and is counted by the server:

- a group smaller than the client's floor (``group-too-small``): a lone
  member's masked upload is its input;
- a round not above the last one of the session (``round-replayed``): two
  inputs under one set of masks leak their difference;
- a threshold ``t`` with ``2 t <= n`` (``threshold-too-low``) or above the
  peers' count (``threshold-unreachable``);
- an unmask request with fewer online members than the client's floor, and in
  double-masking mode than ``t + 1`` (``online-too-few``), one listing a peer
  as both online and dropped (``both-shares``), or a second one for a round
  (``unmask-repeated``); :mod:`fedleak.secagg.settings` explains why these
  make the two kinds of reveal exclusive;
- thesis mode, unless the client opted in (``mode-refused``): otherwise a
  server could downgrade it to a mode that leaks stragglers;
- a session id or roster that is not the client's (``unknown-session``,
  ``bad-roster``), a malformed unmask request (``bad-unmask``), or a forwarded
  share that fails authentication (``bad-share``).

State
-----
Everything the client must remember between messages is a
:class:`ClientState` (secret key, last round, the pending round's roster and
pairwise secrets), serialised explicitly to a flat record
(:meth:`ClientState.to_record`, :meth:`ClientState.from_record`) that a
Flower ``Context.state`` keeps. The client's own self-mask seed is never
stored: only its peers' shares can rebuild it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError, ProtocolError
from .channel import TAG_BYTES, channel_key, open_share, seal_share
from .constants import MODES, Key, Mode, Refusal, Stage
from .keys import KEY_BYTES, KeyPair, agree
from .masking import add_pairwise_masks, self_mask
from .records import Record, get_bytes, get_ids, get_int, get_str, pack_ids
from .settings import MIN_ONLINE_FLOOR
from .shamir import PRIME, SECRET_WORDS, random_elements, split

__all__ = [
    "SEALED_SHARE_BYTES",
    "SHARE_BYTES",
    "ClientGuards",
    "ClientSession",
    "ClientState",
    "PendingRound",
    "Refused",
    "UploadPlan",
    "refusal_of",
    "refusal_reply",
]

#: Bytes of one plaintext share: SECRET_WORDS little-endian 32-bit words.
SHARE_BYTES = 4 * SECRET_WORDS
#: Bytes of one sealed share on the wire.
SEALED_SHARE_BYTES = SHARE_BYTES + TAG_BYTES
_STATE_VERSION = 1


class Refused(ProtocolError):
    """A client refuses a request; :attr:`code` names the guard.

    Parameters
    ----------
    code : str
        One of :class:`~fedleak.secagg.constants.Refusal`'s values.
    reason : str
        What was wrong, for people.
    """

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


def refusal_reply(stage: str, refused: Refused) -> Record:
    """Return the reply record that carries a refusal back to the server."""
    return {Key.STAGE: stage, Key.REFUSAL: refused.code, Key.REASON: refused.reason}


def refusal_of(reply: Mapping[str, Any]) -> Refused | None:
    """Return the refusal a reply carries, or None."""
    code = reply.get(Key.REFUSAL)
    if code is None:
        return None
    reason = reply.get(Key.REASON, "")
    return Refused(str(code), str(reason))


@dataclass(frozen=True)
class ClientGuards:
    """A client's own floors and opt-ins; a server message never lowers them.

    Attributes
    ----------
    min_group : int
        Fewest members of a group this client masks in (default 3, >= 3).
    min_online : int
        Fewest online members for which it answers an unmask request
        (default 3, >= 3); in double-masking mode also at least ``t + 1``.
    accept_thesis : bool
        Whether it takes part in thesis mode (default False: that mode
        leaks a straggler's input to a server that follows the protocol, so a
        client must opt in, e.g. to measure the seed's scheme).
    """

    min_group: int = MIN_ONLINE_FLOOR
    min_online: int = MIN_ONLINE_FLOOR
    accept_thesis: bool = False

    def __post_init__(self) -> None:
        for name in ("min_group", "min_online"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < MIN_ONLINE_FLOOR
            ):
                raise ConfigError(
                    f"ClientGuards.{name} must be an integer >= {MIN_ONLINE_FLOOR}, "
                    f"got {value!r}."
                )

    @property
    def modes(self) -> tuple[Mode, ...]:
        """The modes this client takes part in."""
        return MODES if self.accept_thesis else ("double-masking",)


@dataclass
class PendingRound:
    """What a client remembers of the round it last uploaded in.

    Attributes
    ----------
    round, group : int
        The round and group.
    mode : str
        The mode it masked in.
    peers : list of int
        The group's member ids, sorted (this client included).
    keys : list of bytes
        Their public keys, aligned with ``peers``.
    shared : list of bytes
        The X25519 secrets with every member (32 zero bytes for itself).
    threshold : int
        The Shamir threshold (0 in thesis mode).
    online_floor : int
        Fewest online members it answers an unmask request for.
    length : int
        Words of the masked vector.
    modulus_bits : int
        32 or 64.
    unmasked : bool
        Whether it answered this round's unmask request already.
    """

    round: int
    group: int
    mode: Mode
    peers: list[int]
    keys: list[bytes]
    shared: list[bytes]
    threshold: int
    online_floor: int
    length: int
    modulus_bits: int
    unmasked: bool = False

    @property
    def dtype(self) -> np.dtype:
        """The word type of the masked vector."""
        return np.dtype(np.uint32 if self.modulus_bits == 32 else np.uint64)


@dataclass
class ClientState:
    """A client's session state, serialisable to a flat record.

    Attributes
    ----------
    secret : bytes
        The session's X25519 secret key.
    last_round : int
        The last round this client masked in (0 before any).
    pending : PendingRound or None
        The round awaiting its unmask stage.
    """

    secret: bytes = field(repr=False)
    last_round: int = 0
    pending: PendingRound | None = None

    @property
    def keypair(self) -> KeyPair:
        """The session's key pair."""
        return KeyPair.from_secret(self.secret)

    def to_record(self) -> Record:
        """Serialise to a flat record (what a ``ConfigRecord`` holds)."""
        out: Record = {
            "version": _STATE_VERSION,
            "secret": self.secret,
            "last-round": self.last_round,
        }
        p = self.pending
        if p is not None:
            out.update(
                {
                    "pending.round": p.round,
                    "pending.group": p.group,
                    "pending.mode": p.mode,
                    "pending.peers": pack_ids(p.peers),
                    "pending.keys": b"".join(p.keys),
                    "pending.shared": b"".join(p.shared),
                    "pending.threshold": p.threshold,
                    "pending.online-floor": p.online_floor,
                    "pending.length": p.length,
                    "pending.modulus-bits": p.modulus_bits,
                    "pending.unmasked": p.unmasked,
                }
            )
        return out

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ClientState:
        """Rebuild a state written by :meth:`to_record`.

        Raises
        ------
        ProtocolError
            If the record is not a complete state of this version.
        """
        if record.get("version") != _STATE_VERSION:
            raise ProtocolError(
                "secure-aggregation client state has an unknown version "
                f"{record.get('version')!r}"
            )
        secret = get_bytes(record, "secret")
        if len(secret) != KEY_BYTES:
            raise ProtocolError("secure-aggregation client state: bad secret key")
        state = cls(secret=secret, last_round=get_int(record, "last-round"))
        if "pending.round" in record:
            peers = get_ids(record, "pending.peers")
            keys = _split(get_bytes(record, "pending.keys"), len(peers), "keys")
            shared = _split(get_bytes(record, "pending.shared"), len(peers), "shared")
            mode = get_str(record, "pending.mode")
            if mode not in MODES:
                raise ProtocolError(f"secure-aggregation client state: mode {mode!r}")
            unmasked = record.get("pending.unmasked")
            if type(unmasked) is not bool:
                raise ProtocolError("secure-aggregation client state: 'unmasked'")
            state.pending = PendingRound(
                round=get_int(record, "pending.round"),
                group=get_int(record, "pending.group"),
                mode=mode,
                peers=peers,
                keys=keys,
                shared=shared,
                threshold=get_int(record, "pending.threshold"),
                online_floor=get_int(record, "pending.online-floor"),
                length=get_int(record, "pending.length"),
                modulus_bits=get_int(record, "pending.modulus-bits"),
                unmasked=unmasked,
            )
        return state


def _split(data: bytes, count: int, name: str) -> list[bytes]:
    if len(data) != KEY_BYTES * count:
        raise ProtocolError(f"secure-aggregation client state: bad {name!r}")
    return [data[i * KEY_BYTES : (i + 1) * KEY_BYTES] for i in range(count)]


@dataclass(frozen=True)
class UploadPlan:
    """An upload request the client has checked and accepted.

    Attributes
    ----------
    round, group : int
        The round and group.
    mode : str
        ``"double-masking"`` or ``"thesis"``.
    peers : list of int
        The group's member ids, sorted (this client included).
    keys : list of bytes
        Their public keys, aligned with ``peers``.
    threshold : int
        The Shamir threshold ``t`` (0 in thesis mode).
    online_floor : int
        Fewest online members the client will answer an unmask request for.
    length : int
        Words of the vector to mask.
    modulus_bits : int
        32 or 64.
    """

    round: int
    group: int
    mode: Mode
    peers: list[int]
    keys: list[bytes]
    threshold: int
    online_floor: int
    length: int
    modulus_bits: int

    @property
    def dtype(self) -> np.dtype:
        """The word type of the masked vector."""
        return np.dtype(np.uint32 if self.modulus_bits == 32 else np.uint64)

    @property
    def group_size(self) -> int:
        """Members of the group."""
        return len(self.peers)


def _stage(request: Mapping[str, Any], expected: str) -> None:
    stage = get_str(request, Key.STAGE)
    if stage != expected:
        raise ProtocolError(
            f"secure-aggregation request for stage {stage!r} where {expected!r} "
            "was expected"
        )


class ClientSession:
    """One node's side of a secure-aggregation session.

    Parameters
    ----------
    node_id : int
        This node's id (as the server addresses it).
    state : ClientState
        The session state (see :meth:`start` for a fresh one).
    guards : ClientGuards, optional
        The client's own floors (default :class:`ClientGuards`).
    """

    def __init__(
        self, node_id: int, state: ClientState, guards: ClientGuards | None = None
    ) -> None:
        self.node_id = int(node_id)
        self.state = state
        self.guards = guards or ClientGuards()
        self._keypair = state.keypair

    @classmethod
    def start(
        cls,
        node_id: int,
        guards: ClientGuards | None = None,
        rng: np.random.Generator | None = None,
    ) -> ClientSession:
        """Open a session with a fresh key pair (OS CSPRNG unless ``rng``)."""
        keypair = KeyPair.generate(rng)
        return cls(node_id, ClientState(secret=keypair.secret), guards)

    @property
    def public_key(self) -> bytes:
        """The session's public key, which is also its id."""
        return self._keypair.public

    def advertise_reply(self) -> Record:
        """Return the reply to an ``advertise`` request: the session's public key."""
        return {Key.STAGE: Stage.ADVERTISE, Key.PUBLIC_KEY: self.public_key}

    def _check_session(self, request: Mapping[str, Any]) -> None:
        if get_bytes(request, Key.SESSION) != self.public_key:
            raise Refused(
                Refusal.UNKNOWN_SESSION,
                "the request names another session than this client's current "
                "one (it lost its state or re-keyed); advertise again",
            )

    # ------------------------------------------------------------------ upload
    def plan_upload(self, request: Mapping[str, Any]) -> UploadPlan:
        """Check an upload request before any work is done.

        Parameters
        ----------
        request : Mapping
            The server's upload request.

        Returns
        -------
        UploadPlan
            What to mask and how.

        Raises
        ------
        Refused
            Naming the guard the request fails.
        ProtocolError
            If the request is malformed.
        """
        _stage(request, Stage.UPLOAD)
        self._check_session(request)
        mode = get_str(request, Key.MODE)
        if mode not in self.guards.modes:
            raise Refused(
                Refusal.MODE_REFUSED,
                f"this client does not take part in mode {mode!r} (it accepts "
                f"{list(self.guards.modes)})",
            )
        round_ = get_int(request, Key.ROUND)
        if round_ <= self.state.last_round:
            raise Refused(
                Refusal.ROUND_REPLAYED,
                f"round {round_} is not above this session's last round "
                f"{self.state.last_round}; masking again would reuse its masks",
            )
        peers = get_ids(request, Key.PEERS)
        keys_blob = get_bytes(request, Key.PEER_KEYS)
        if len(keys_blob) != KEY_BYTES * len(peers):
            raise ProtocolError("upload request: member and key counts differ")
        keys = [
            keys_blob[i * KEY_BYTES : (i + 1) * KEY_BYTES] for i in range(len(peers))
        ]
        if peers != sorted(set(peers)) or len(set(keys)) != len(keys):
            raise Refused(
                Refusal.BAD_ROSTER, "the roster repeats an id or a key, or is unsorted"
            )
        if (
            self.node_id not in peers
            or keys[peers.index(self.node_id)] != self.public_key
        ):
            raise Refused(
                Refusal.BAD_ROSTER,
                "the roster does not list this client with its own public key",
            )
        n = len(peers)
        floor = max(self.guards.min_group, self.guards.min_online)
        if n < floor:
            raise Refused(
                Refusal.GROUP_TOO_SMALL,
                f"the group has {n} member(s), this client's floor is {floor}",
            )
        server_min = get_int(request, Key.MIN_ONLINE)
        online_floor = max(self.guards.min_online, server_min)
        threshold = 0
        if mode == "double-masking":
            threshold = get_int(request, Key.THRESHOLD)
            if 2 * threshold <= n:
                raise Refused(
                    Refusal.THRESHOLD_TOO_LOW,
                    f"threshold {threshold} is at most half the group of {n}",
                )
            if threshold > n - 1:
                raise Refused(
                    Refusal.THRESHOLD_UNREACHABLE,
                    f"threshold {threshold} exceeds the {n - 1} other members",
                )
            online_floor = max(online_floor, threshold + 1)
        if online_floor > n:
            raise Refused(
                Refusal.GROUP_TOO_SMALL,
                f"the group of {n} can never have {online_floor} members online",
            )
        length = get_int(request, Key.LENGTH)
        bits = get_int(request, Key.MODULUS_BITS)
        if length < 1 or bits not in (32, 64):
            raise ProtocolError(
                f"upload request: length {length} or modulus bits {bits} invalid"
            )
        return UploadPlan(
            round=round_,
            group=get_int(request, Key.GROUP),
            mode=mode,
            peers=peers,
            keys=keys,
            threshold=threshold,
            online_floor=online_floor,
            length=length,
            modulus_bits=bits,
        )

    def upload(
        self,
        plan: UploadPlan,
        encoded: np.ndarray,
        rng: np.random.Generator | None = None,
    ) -> Record:
        """Mask an encoded vector (and share the self-mask seed); remember the round.

        Parameters
        ----------
        plan : UploadPlan
            From :meth:`plan_upload`.
        encoded : numpy.ndarray
            The fixed-point words, shape ``(plan.length,)``, dtype
            ``plan.dtype``.
        rng : numpy.random.Generator, optional
            Source of the self-mask seed and share polynomials (tests only);
            default the OS CSPRNG.

        Returns
        -------
        Record
            The upload reply: the masked vector and, in double-masking mode,
            one sealed share per peer (in roster order, this client skipped).

        Raises
        ------
        Refused
            If the round is no longer above the session's last one.
        ProtocolError
            If ``encoded`` does not fit the plan or a peer key is invalid.
        """
        self._check_upload(plan, encoded)
        shared = self._agree(plan)
        masked = np.array(encoded, dtype=plan.dtype, copy=True)
        add_pairwise_masks(
            masked, self.node_id, shared, round=plan.round, group=plan.group
        )
        reply: Record = {
            Key.STAGE: Stage.UPLOAD,
            Key.SESSION: self.public_key,
            Key.ROUND: plan.round,
            Key.GROUP: plan.group,
        }
        if plan.mode == "double-masking":
            reply[Key.SHARES] = self._add_self_mask(plan, shared, masked, rng)
        reply[Key.MASKED] = masked.tobytes()
        self._remember(plan, shared)
        return reply

    def _check_upload(self, plan: UploadPlan, encoded: np.ndarray) -> None:
        """Refuse a replayed round; check that ``encoded`` fits the plan."""
        if plan.round <= self.state.last_round:
            raise Refused(
                Refusal.ROUND_REPLAYED,
                f"round {plan.round} was already masked in this session",
            )
        if (
            not isinstance(encoded, np.ndarray)
            or encoded.dtype != plan.dtype
            or encoded.shape != (plan.length,)
        ):
            raise ProtocolError(
                f"the encoded vector must be {plan.dtype} of shape ({plan.length},)"
            )

    def _agree(self, plan: UploadPlan) -> dict[int, bytes]:
        """Agree on the X25519 secret with every other member, once per session.

        The secret of a member whose public key is the one it had in the
        pending (last) round is that round's: the same session keys give
        the same secret (about 30 us an agreement saved; at N = 30 it was a
        sixth of a client's upload). Any other member is agreed anew.
        """
        secret = self._keypair.secret
        known: dict[tuple[int, bytes], bytes] = {}
        p = self.state.pending
        if p is not None:
            known = {
                (j, key): s
                for j, key, s in zip(p.peers, p.keys, p.shared, strict=True)
                if j != self.node_id
            }
        return {
            j: known.get((j, key)) or agree(secret, key)
            for j, key in zip(plan.peers, plan.keys, strict=True)
            if j != self.node_id
        }

    def _add_self_mask(
        self,
        plan: UploadPlan,
        shared: Mapping[int, bytes],
        masked: np.ndarray,
        rng: np.random.Generator | None,
    ) -> bytes:
        """Add ``PRG(b)`` for a fresh seed ``b``; return ``b``'s sealed shares.

        Bonawitz et al. 2017 (double masking): peer ``j`` (roster position
        ``k``) gets the Shamir share at ``x = k + 1``, sealed for it alone
        (:func:`~fedleak.secagg.channel.seal_share`); the seed itself is
        forgotten.
        """
        seed_words = random_elements(SECRET_WORDS, rng)
        np.add(masked, self_mask(seed_words, plan.length, plan.dtype), out=masked)
        me = self.node_id
        others = [j for j in plan.peers if j != me]
        points = [k + 1 for k, j in enumerate(plan.peers) if j != me]
        shares = split(seed_words, threshold=plan.threshold, points=points, rng=rng)
        del seed_words
        sealed = b"".join(
            seal_share(
                channel_key(
                    shared[j], round=plan.round, group=plan.group, pair=(me, j)
                ),
                share.astype("<u4").tobytes(),
                session=self.public_key,
                round=plan.round,
                group=plan.group,
                sender=me,
                recipient=j,
            )
            for j, share in zip(others, shares, strict=True)
        )
        del shares
        return sealed

    def _remember(self, plan: UploadPlan, shared: Mapping[int, bytes]) -> None:
        """Make the plan the session's pending round (its unmask stage's input)."""
        self.state.last_round = plan.round
        self.state.pending = PendingRound(
            round=plan.round,
            group=plan.group,
            mode=plan.mode,
            peers=list(plan.peers),
            keys=list(plan.keys),
            shared=[shared.get(j, bytes(KEY_BYTES)) for j in plan.peers],
            threshold=plan.threshold,
            online_floor=plan.online_floor,
            length=plan.length,
            modulus_bits=plan.modulus_bits,
        )

    # ------------------------------------------------------------------ unmask
    def unmask(self, request: Mapping[str, Any]) -> Record:
        """Answer an unmask request: reveal shares for online peers, masks for dropped.

        Parameters
        ----------
        request : Mapping
            The server's unmask request: the online and dropped members and,
            in double-masking mode, the shares the online members sealed for
            this client, in the online set's order.

        Returns
        -------
        Record
            ``revealed`` (the plaintext shares, online order, this client
            skipped) in double-masking mode, and ``recovery`` (the sum of the
            masks shared with the dropped members) when any dropped.

        Raises
        ------
        Refused
            Naming the guard the request fails; nothing is revealed.
        ProtocolError
            If the request is malformed.
        """
        p, online, dropped = self._check_unmask(request)
        shared = dict(zip(p.peers, p.shared, strict=True))
        reply: Record = {
            Key.STAGE: Stage.UNMASK,
            Key.SESSION: self.public_key,
            Key.ROUND: p.round,
            Key.GROUP: p.group,
        }
        if p.mode == "double-masking":
            forwarded = get_bytes(request, Key.FORWARDED)
            reply[Key.REVEALED] = self._reveal(p, online, forwarded, shared)
        if dropped:
            recovery = np.zeros(p.length, dtype=p.dtype)
            add_pairwise_masks(
                recovery,
                self.node_id,
                shared,
                round=p.round,
                group=p.group,
                only=dropped,
            )
            reply[Key.RECOVERY] = recovery.tobytes()
        p.unmasked = True
        return reply

    def _check_unmask(
        self, request: Mapping[str, Any]
    ) -> tuple[PendingRound, list[int], list[int]]:
        """Apply the unmask guards; return the pending round, online and dropped."""
        _stage(request, Stage.UNMASK)
        self._check_session(request)
        p = self.state.pending
        round_ = get_int(request, Key.ROUND)
        if p is None or p.round != round_ or p.group != get_int(request, Key.GROUP):
            raise Refused(
                Refusal.BAD_UNMASK,
                f"no upload of this client awaits unmasking in round {round_}",
            )
        if p.unmasked:
            raise Refused(
                Refusal.UNMASK_REPEATED,
                f"round {round_} was unmasked already; a second answer could "
                "reveal both kinds of share for one peer",
            )
        online = get_ids(request, Key.ONLINE)
        dropped = get_ids(request, Key.DROPPED)
        both = sorted(set(online) & set(dropped))
        if both:
            raise Refused(
                Refusal.BOTH_SHARES,
                f"members {both} are listed both online and dropped",
            )
        if (
            online != sorted(set(online))
            or dropped != sorted(set(dropped))
            or set(online) | set(dropped) != set(p.peers)
            or self.node_id not in online
        ):
            raise Refused(
                Refusal.BAD_UNMASK,
                "the online and dropped sets do not split this round's group "
                "(with this client online)",
            )
        if len(online) < max(self.guards.min_online, p.online_floor):
            raise Refused(
                Refusal.ONLINE_TOO_FEW,
                f"{len(online)} member(s) online, this client needs "
                f"{max(self.guards.min_online, p.online_floor)}",
            )
        return p, online, dropped

    def _reveal(
        self,
        p: PendingRound,
        online: list[int],
        blob: bytes,
        shared: Mapping[int, bytes],
    ) -> bytes:
        """Open the shares the online peers sealed for this client (online order).

        Raises
        ------
        Refused
            ``bad-unmask`` if the count is wrong, ``bad-share`` if a share
            fails authentication or is not a vector of field elements.
        """
        me = self.node_id
        senders = [j for j in online if j != me]
        if len(blob) != SEALED_SHARE_BYTES * len(senders):
            raise Refused(
                Refusal.BAD_UNMASK,
                f"expected {len(senders)} forwarded shares, got "
                f"{len(blob) / SEALED_SHARE_BYTES:g}",
            )
        keys = dict(zip(p.peers, p.keys, strict=True))
        revealed = []
        for k, j in enumerate(senders):
            sealed = blob[k * SEALED_SHARE_BYTES : (k + 1) * SEALED_SHARE_BYTES]
            key = channel_key(shared[j], round=p.round, group=p.group, pair=(me, j))
            try:
                share = open_share(
                    key,
                    sealed,
                    session=keys[j],
                    round=p.round,
                    group=p.group,
                    sender=j,
                    recipient=me,
                )
            except ProtocolError as err:
                raise Refused(Refusal.BAD_SHARE, str(err)) from None
            words = np.frombuffer(share, dtype="<u4")
            if words.size != SECRET_WORDS or int(words.max()) >= PRIME:
                raise Refused(Refusal.BAD_SHARE, f"the share from {j} is malformed")
            revealed.append(share)
        return b"".join(revealed)
