"""The clients an adversarial server talks to, behind one small interface.

An attack (:mod:`fedleak.attacks.secagg.plays`) sends protocol records to
:class:`Victims` and reads their replies, refusals included; it never sees
how they are carried. :class:`LocalVictims` runs real client sessions in this
process (fedleak's :class:`~fedleak.secagg.client.ClientSession` with its
guards, or :class:`SeedClient`, the seed's client without guards);
:class:`fedleak.strategies.malicious_secagg.MaliciousSecureAggregation`
carries the same records to Flower ClientApps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from fedleak.errors import ProtocolError
from fedleak.secagg import FixedPoint, KeyPair, mask, recovery
from fedleak.secagg.client import ClientGuards, ClientSession, Refused, refusal_reply
from fedleak.secagg.constants import Key, Stage
from fedleak.secagg.records import Record, get_bytes, get_ids, get_int

__all__ = [
    "InputFn",
    "LocalVictims",
    "SeedClient",
    "Victims",
]

#: ``inputs(node, tag) -> vector``: what a client encodes when asked to
#: upload with a given tag (a tag stands for the training input of a
#: request: a replayed request carries another tag, so the client holds
#: another vector).
InputFn = Callable[[int, int], np.ndarray]


class Victims(Protocol):
    """Clients reachable by an adversarial server."""

    def advertise(self, nodes: Sequence[int]) -> dict[int, Record]:
        """Open a session on each node; return the advertise replies."""
        ...

    def upload(self, requests: Mapping[int, Record], tag: int) -> dict[int, Record]:
        """Send upload requests (the clients train on input ``tag``)."""
        ...

    def unmask(self, requests: Mapping[int, Record]) -> dict[int, Record]:
        """Send unmask requests; return the replies."""
        ...


class SeedClient:
    """The seed's client (seed 000 Ch. 4.1), with no guard against the server.

    It masks whatever it is asked to, for any group, round and ``min_online``,
    and answers every recovery request: what the landed implementation did
    before fedleak's client guards. Thesis mode only; the attacks use it to
    show that each attack works when nothing refuses it.

    Parameters
    ----------
    node_id : int
        The node's id.
    rng : numpy.random.Generator, optional
        Source of the key pair (tests); default the OS CSPRNG.
    """

    def __init__(self, node_id: int, rng: np.random.Generator | None = None) -> None:
        self.node_id = node_id
        self.keypair = KeyPair.generate(rng)
        self._rounds: dict[int, tuple[int, dict[int, bytes], int, np.dtype]] = {}

    def advertise_reply(self) -> Record:
        """Return the advertise reply: the public key."""
        return {Key.STAGE: Stage.ADVERTISE, Key.PUBLIC_KEY: self.keypair.public}

    def handle_upload(self, request: Mapping[str, Any], encoded: np.ndarray) -> Record:
        """Mask ``encoded`` for the request's group, whatever it is."""
        peers = get_ids(request, Key.PEERS)
        blob = get_bytes(request, Key.PEER_KEYS)
        roster = {p: blob[32 * k : 32 * (k + 1)] for k, p in enumerate(peers)}
        round_, group = get_int(request, Key.ROUND), get_int(request, Key.GROUP)
        masked = mask(
            encoded, self.node_id, self.keypair, roster, round=round_, group=group
        )
        self._rounds[round_] = (group, roster, encoded.size, encoded.dtype)
        return {
            Key.STAGE: Stage.UPLOAD,
            Key.SESSION: self.keypair.public,
            Key.ROUND: round_,
            Key.GROUP: group,
            Key.MASKED: masked.tobytes(),
        }

    def unmask(self, request: Mapping[str, Any]) -> Record:
        """Return the recovery for the request's dropped set, every time."""
        round_ = get_int(request, Key.ROUND)
        group, roster, length, dtype = self._rounds[round_]
        dropped = get_ids(request, Key.DROPPED)
        reply: Record = {
            Key.STAGE: Stage.UNMASK,
            Key.SESSION: self.keypair.public,
            Key.ROUND: round_,
            Key.GROUP: group,
        }
        if dropped:
            k = recovery(
                self.node_id,
                self.keypair,
                roster,
                dropped,
                round=round_,
                group=group,
                length=length,
                dtype=dtype,
            )
            reply[Key.RECOVERY] = k.tobytes()
        return reply


class LocalVictims:
    """Clients in this process, each encoding ``inputs(node, tag)``.

    Parameters
    ----------
    inputs : callable
        ``inputs(node, tag)``: the real vector a node encodes.
    fixed_point : FixedPoint
        The encoding every node uses.
    client : {"fedleak", "seed"}, default="fedleak"
        fedleak's guarded :class:`~fedleak.secagg.client.ClientSession` or
        the unguarded :class:`SeedClient`.
    guards : ClientGuards, optional
        The fedleak clients' guards (default :class:`ClientGuards`).
    rng : numpy.random.Generator, optional
        Source of key pairs (tests); default the OS CSPRNG.
    """

    def __init__(
        self,
        inputs: InputFn,
        fixed_point: FixedPoint,
        *,
        client: str = "fedleak",
        guards: ClientGuards | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        if client not in ("fedleak", "seed"):
            raise ValueError(f"client must be 'fedleak' or 'seed', got {client!r}")
        self.inputs = inputs
        self.fixed_point = fixed_point
        self.client = client
        self.guards = guards or ClientGuards()
        self.rng = rng
        self.sessions: dict[int, ClientSession | SeedClient] = {}

    def advertise(self, nodes: Sequence[int]) -> dict[int, Record]:
        """Open a fresh session on every node."""
        out: dict[int, Record] = {}
        for node in nodes:
            session: ClientSession | SeedClient
            if self.client == "seed":
                session = SeedClient(node, self.rng)
            else:
                session = ClientSession.start(node, self.guards, self.rng)
            self.sessions[node] = session
            out[node] = session.advertise_reply()
        return out

    def upload(self, requests: Mapping[int, Record], tag: int) -> dict[int, Record]:
        """Let every addressed node check, encode ``inputs(node, tag)`` and mask."""
        out: dict[int, Record] = {}
        for node, request in requests.items():
            session = self.sessions[node]
            encoded, _ = self.fixed_point.encode(self.inputs(node, tag))
            if isinstance(session, SeedClient):
                out[node] = session.handle_upload(request, encoded)
                continue
            try:
                plan = session.plan_upload(request)
                out[node] = session.upload(plan, encoded.astype(plan.dtype))
            except Refused as refused:
                out[node] = refusal_reply(Stage.UPLOAD, refused)
            except ProtocolError:
                continue  # an error reply: the server hears nothing usable
        return out

    def unmask(self, requests: Mapping[int, Record]) -> dict[int, Record]:
        """Let every addressed node answer (or refuse) its unmask request."""
        out: dict[int, Record] = {}
        for node, request in requests.items():
            session = self.sessions[node]
            try:
                out[node] = session.unmask(request)
            except Refused as refused:
                out[node] = refusal_reply(Stage.UNMASK, refused)
            except (ProtocolError, KeyError):
                continue
        return out
