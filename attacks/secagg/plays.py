"""A malicious server's attacks on secure aggregation, one function each.

Every attack opens fresh sessions with the victims, runs one round in which
the server deviates as described, and returns the server's best
reconstruction of the target's vector with what the clients refused
(:class:`Attempt`). The server keeps every byte it receives and knows the
protocol; it is limited only by what the clients send.

``straggler`` (follows the protocol)
    The target's upload arrives after the online set is fixed; the server
    refuses it in the tally, as it must, but keeps the bytes, runs the unmask
    stage with the others and then adds their recoveries to the late upload.
``false-dropout`` (lies)
    The target uploads in time; the server announces it dropped, collects the
    recoveries, then asks the online members again with the target online
    (double masking: to obtain its self-mask shares).
``group-of-one`` (lies)
    The target's upload request names a group of the target alone, whose
    masked upload is its encoding.
``round-replay`` (lies)
    After a normal round the server sends the target the same round's
    request again; the client trains on another input, and two uploads under
    the same masks differ by the difference of the inputs.
``low-threshold`` (lies)
    Thesis mode: a group of three in which one member is announced dropped,
    with ``min_online = 2``; the two-member sum minus a colluding member's
    input is the target's. Double masking: a Shamir threshold of 1 and
    ``min_online = 2`` (any single peer would then hold the self-mask seed).
``split-view`` (lies)
    Different clients see different online sets: ``t`` peers are told the
    target is online (they reveal its self-mask shares), the target is told
    those peers dropped (it would return the masks it shares with them), and
    the remaining peers are told the target dropped.
``downgrade`` (lies)
    The server asks double-masking clients to run thesis mode (then the
    straggler attack would work).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedleak.errors import ProtocolError
from fedleak.secagg import FixedPoint, Mode, ProtocolSettings, ServerSession
from fedleak.secagg.client import SEALED_SHARE_BYTES, SHARE_BYTES, refusal_of
from fedleak.secagg.constants import Key, Stage
from fedleak.secagg.masking import self_mask
from fedleak.secagg.records import Record, get_bytes, pack_ids
from fedleak.secagg.server import AggregationRound
from fedleak.secagg.shamir import PRIME, SECRET_WORDS, combine

from .victims import Victims

__all__ = [
    "PLAYS",
    "Attempt",
    "AttackSetup",
]


@dataclass
class AttackSetup:
    """Everything an attack needs.

    Attributes
    ----------
    victims : Victims
        The clients.
    nodes : list of int
        Their ids; the protocol runs in one group of all of them.
    mode : str
        The mode the server runs (``"double-masking"`` or ``"thesis"``).
    fixed_point : FixedPoint
        The encoding of the uploads (words of its dtype).
    length : int
        Words per upload.
    target : int
        The client the server wants to unmask.
    colluder : int
        A client whose input the server knows (low-threshold attack).
    colluder_input : numpy.ndarray
        That input's decoded value (as :attr:`decode` would give it).
    decode : callable
        ``decode(words) -> vector``: the part of an upload compared with the
        truth (e.g. the model entries of a model upload).
    seed : int
        Seed of the server's group assignment.
    """

    victims: Victims
    nodes: list[int]
    mode: Mode
    fixed_point: FixedPoint
    length: int
    target: int
    colluder: int
    colluder_input: np.ndarray
    decode: Callable[[np.ndarray], np.ndarray]
    seed: int = 0


@dataclass
class Attempt:
    """The server's side of one attack.

    Attributes
    ----------
    guess : numpy.ndarray or None
        The server's reconstruction of the target's vector (round-replay: of
        the difference of its tag-0 and tag-1 inputs), or None if it had
        nothing to decode.
    server_action : str
        What the server did.
    refused_by : list of str
        Names of the refusals it received.
    diff_tags : tuple of int
        For round-replay, the two tags whose difference ``guess`` stands for;
        empty otherwise.
    """

    guess: np.ndarray | None
    server_action: str
    refused_by: list[str] = field(default_factory=list)
    diff_tags: tuple[int, ...] = ()


class _Server:
    """A server that follows the engine where it suits it and lies elsewhere."""

    def __init__(self, setup: AttackSetup, mode: Mode | None = None) -> None:
        self.setup = setup
        settings = ProtocolSettings(mode=mode or setup.mode)
        self.session = ServerSession(settings, seed=setup.seed)
        self.refused: list[str] = []
        for node, reply in setup.victims.advertise(setup.nodes).items():
            self.session.add_advertisement(node, reply)
        self.round: AggregationRound = self.session.begin_round(
            setup.nodes,
            length=setup.length,
            modulus_bits=setup.fixed_point.modulus_bits,
        )

    @property
    def dtype(self) -> np.dtype:
        return self.setup.fixed_point.dtype

    def words(self, reply: Mapping[str, Any], key: str) -> np.ndarray:
        return np.frombuffer(get_bytes(reply, key), dtype=self.dtype).copy()

    def note(
        self, replies: Mapping[int, Mapping[str, Any]]
    ) -> dict[int, Mapping[str, Any]]:
        """Record refusals; return the replies that are not refusals."""
        out = {}
        for node, reply in replies.items():
            refused = refusal_of(reply)
            if refused is None:
                out[node] = reply
            else:
                self.refused.append(refused.code)
        return out

    def upload(
        self, requests: Mapping[int, Record], tag: int = 0
    ) -> dict[int, Mapping[str, Any]]:
        return self.note(self.setup.victims.upload(requests, tag))

    def unmask(self, requests: Mapping[int, Record]) -> dict[int, Mapping[str, Any]]:
        return self.note(self.setup.victims.unmask(requests))

    def unmask_request(
        self,
        node: int,
        online: Sequence[int],
        dropped: Sequence[int],
        sealed: Mapping[int, bytes],
    ) -> Record:
        """Forge an unmask request for ``node`` with any online/dropped split."""
        members = self.round.groups[0].members
        request: Record = {
            Key.STAGE: Stage.UNMASK,
            Key.SESSION: self.round.keys[node],
            Key.ROUND: self.round.number,
            Key.GROUP: 0,
            Key.ONLINE: pack_ids(sorted(online)),
            Key.DROPPED: pack_ids(sorted(dropped)),
        }
        if self.round.settings.mode == "double-masking":
            parts = []
            for dealer in sorted(online):
                if dealer == node:
                    continue
                a, b = members.index(dealer), members.index(node)
                slot = b - (1 if b > a else 0)
                blob = sealed.get(dealer, b"")
                parts.append(
                    blob[slot * SEALED_SHARE_BYTES : (slot + 1) * SEALED_SHARE_BYTES]
                )
            request[Key.FORWARDED] = b"".join(parts)
        return request

    def self_mask_of(
        self,
        dealer: int,
        online_views: Mapping[int, Sequence[int]],
        replies: Mapping[int, Mapping[str, Any]],
    ) -> np.ndarray | None:
        """Rebuild ``dealer``'s self-mask from the shares revealed to the server.

        ``online_views[p]`` is the online set the server showed ``p``; a
        revealed blob lists shares in that order (``p`` skipped).
        """
        members = self.round.groups[0].members
        threshold = self.round.groups[0].threshold
        points, shares = [], []
        for p, reply in replies.items():
            if Key.REVEALED not in reply or dealer not in online_views[p]:
                continue
            order = [j for j in sorted(online_views[p]) if j != p]
            blob = get_bytes(reply, Key.REVEALED)
            k = order.index(dealer)
            share = blob[k * SHARE_BYTES : (k + 1) * SHARE_BYTES]
            if len(share) != SHARE_BYTES:
                continue
            points.append(members.index(p) + 1)
            shares.append(np.frombuffer(share, dtype="<u4").astype(np.uint64))
        if len(points) < max(threshold, 1):
            return None
        words = combine(points[:threshold], np.stack(shares[:threshold]))
        if words.size != SECRET_WORDS or int(words.max()) >= PRIME:
            return None
        return self_mask(words, self.setup.length, self.dtype)

    def attempt(
        self, words: np.ndarray | None, action: str, diff_tags: tuple[int, ...] = ()
    ) -> Attempt:
        guess = None if words is None else self.setup.decode(words)
        return Attempt(guess, action, sorted(set(self.refused)), diff_tags)


def _recoveries(
    server: _Server, replies: Mapping[int, Mapping[str, Any]]
) -> np.ndarray:
    total = np.zeros(server.setup.length, dtype=server.dtype)
    for reply in replies.values():
        if Key.RECOVERY in reply:
            np.add(total, server.words(reply, Key.RECOVERY), out=total)
    return total


def straggler(setup: AttackSetup, mode: Mode | None = None) -> Attempt:
    """Keep a late upload and follow the protocol (the straggler attack)."""
    server = _Server(setup, mode)
    target = setup.target
    replies = server.upload(server.round.upload_requests())
    action = (
        "refused the late upload in the tally but kept it, ran the unmask stage "
        "with the others, and added their recoveries to the late bytes"
    )
    if target not in replies:
        return server.attempt(None, action)
    for node, reply in replies.items():
        if node != target:
            server.round.add_upload(node, reply)
    server.round.close()
    late = replies[target]
    # the tally refuses it, as the protocol says; the bytes stay
    with contextlib.suppress(ProtocolError):
        server.round.add_upload(target, late)
    answers = server.unmask(server.round.unmask_requests())
    for node, reply in answers.items():
        with contextlib.suppress(ProtocolError):
            server.round.add_unmask(node, reply)
    server.round.finish()
    words = server.words(late, Key.MASKED)
    np.add(words, _recoveries(server, answers), out=words)
    if server.round.settings.mode == "double-masking":
        # the self-mask needs shares of the target's seed; the unmask stage
        # revealed shares only of the members in the online set
        views = {p: server.round.groups[0].online for p in answers}
        mask = server.self_mask_of(target, views, answers)
        if mask is not None:
            np.subtract(words, mask, out=words)
    return server.attempt(words, action)


def false_dropout(setup: AttackSetup) -> Attempt:
    """Claim an uploaded target dropped, then ask again (false dropout)."""
    server = _Server(setup)
    target = setup.target
    replies = server.upload(server.round.upload_requests())
    if target not in replies:
        return server.attempt(None, "asked for uploads; the target's was refused")
    others = [n for n in setup.nodes if n != target and n in replies]
    sealed = {n: r.get(Key.SHARES, b"") for n, r in replies.items()}
    first = server.unmask(
        {p: server.unmask_request(p, others, [target], sealed) for p in others}
    )
    words = server.words(replies[target], Key.MASKED)
    np.add(words, _recoveries(server, first), out=words)
    action = "announced the uploaded target as dropped and collected the recoveries"
    if setup.mode == "double-masking":
        everyone = sorted([*others, target])
        second = server.unmask(
            {p: server.unmask_request(p, everyone, [], sealed) for p in others}
        )
        mask = server.self_mask_of(target, dict.fromkeys(second, everyone), second)
        if mask is not None:
            np.subtract(words, mask, out=words)
        action += ", then asked again with the target online for its self-mask shares"
    return server.attempt(words, action)


def group_of_one(setup: AttackSetup) -> Attempt:
    """Send the target an upload request for a group of itself alone."""
    server = _Server(setup)
    target = setup.target
    request = dict(server.round.upload_request(target))
    request[Key.PEERS] = pack_ids([target])
    request[Key.PEER_KEYS] = server.round.keys[target]
    request[Key.THRESHOLD] = 1
    replies = server.upload({target: request})
    action = "sent the target an upload request for a group of itself alone"
    if target not in replies:
        return server.attempt(None, action)
    return server.attempt(server.words(replies[target], Key.MASKED), action)


def round_replay(setup: AttackSetup) -> Attempt:
    """Send the target a finished round's upload request again (round replay)."""
    server = _Server(setup)
    target = setup.target
    requests = server.round.upload_requests()
    replies = server.upload(requests, tag=0)
    for node, reply in replies.items():
        server.round.add_upload(node, reply)
    for node, reply in server.unmask(server.round.unmask_requests()).items():
        server.round.add_unmask(node, reply)
    server.round.finish()
    again = server.upload({target: requests[target]}, tag=1)
    action = (
        "ran a normal round, then sent the target the same round's upload request "
        "while it held another input"
    )
    if target not in replies or target not in again:
        return server.attempt(None, action, (0, 1))
    words = server.words(replies[target], Key.MASKED)
    np.subtract(words, server.words(again[target], Key.MASKED), out=words)
    return server.attempt(words, action, (0, 1))


def _split_view(
    server: _Server,
    requests: Mapping[int, Record],
    threshold: int,
    action: str,
) -> Attempt:
    """Upload with ``requests``, then show each client the view the server wants.

    ``threshold`` peers (the believers) are told everyone is online and
    reveal their shares of the target's self-mask seed; the target is told
    the believers dropped and returns the masks it shares with them; the
    remaining peers are told the target dropped and return the masks they
    share with it. Together that is everything in the target's upload.
    """
    setup = server.setup
    target = setup.target
    replies = server.upload(requests)
    if target not in replies:
        return server.attempt(None, action)
    sealed = {n: r.get(Key.SHARES, b"") for n, r in replies.items()}
    peers = [n for n in setup.nodes if n != target]
    believers, rest = peers[:threshold], peers[threshold:]
    everyone = sorted(setup.nodes)
    views: dict[int, list[int]] = dict.fromkeys(believers, everyone)
    forged = {p: server.unmask_request(p, everyone, [], sealed) for p in believers}
    views[target] = sorted([target, *rest])
    forged[target] = server.unmask_request(target, views[target], believers, sealed)
    for p in rest:
        views[p] = [n for n in everyone if n != target]
        forged[p] = server.unmask_request(p, views[p], [target], sealed)
    answers = server.unmask(forged)
    # x_T = y_T - k'_T (its masks with the believers) + the rest's recoveries
    # - PRG(b_T); whatever is missing stays in the server's guess.
    words = server.words(replies[target], Key.MASKED)
    if target in answers and Key.RECOVERY in answers[target]:
        np.subtract(words, server.words(answers[target], Key.RECOVERY), out=words)
    for p in rest:
        if p in answers and Key.RECOVERY in answers[p]:
            np.add(words, server.words(answers[p], Key.RECOVERY), out=words)
    if setup.mode == "double-masking":
        mask = server.self_mask_of(target, views, answers)
        if mask is not None:
            np.subtract(words, mask, out=words)
    return server.attempt(words, action)


def low_threshold(setup: AttackSetup) -> Attempt:
    """Lower the thresholds below the clients' floors (low threshold)."""
    server = _Server(setup)
    target, colluder = setup.target, setup.colluder
    if setup.mode == "double-masking":
        requests = {}
        for node in setup.nodes:
            request = dict(server.round.upload_request(node))
            request[Key.THRESHOLD] = 1
            request[Key.MIN_ONLINE] = 2
            requests[node] = request
        return _split_view(
            server,
            requests,
            1,
            "asked for self-mask shares with threshold 1 and min_online 2, then "
            "showed one peer the target online and the target that peer dropped",
        )
    third = next(n for n in setup.nodes if n not in (target, colluder))
    trio = sorted([target, colluder, third])
    requests = {}
    for node in trio:
        request = dict(server.round.upload_request(node))
        request[Key.PEERS] = pack_ids(trio)
        request[Key.PEER_KEYS] = b"".join(server.round.keys[m] for m in trio)
        request[Key.MIN_ONLINE] = 2
        requests[node] = request
    replies = server.upload(requests)
    pair = [target, colluder]
    action = (
        "made a group of three with min_online 2, announced the third dropped and "
        "asked the other two for their recoveries (the two-member sum minus the "
        "colluder's input is the target's)"
    )
    if target not in replies:
        return server.attempt(None, action)
    answers = server.unmask(
        {n: server.unmask_request(n, pair, [third], {}) for n in pair if n in replies}
    )
    # the released sum of the online pair: sum y - sum k' (the tally's rule)
    words = server.words(replies[target], Key.MASKED)
    if colluder in replies:
        np.add(words, server.words(replies[colluder], Key.MASKED), out=words)
    np.subtract(words, _recoveries(server, answers), out=words)
    guess = setup.decode(words) - setup.colluder_input
    return Attempt(guess, action, sorted(set(server.refused)))


def split_view(setup: AttackSetup) -> Attempt:
    """Show different clients different online sets (split view)."""
    server = _Server(setup)
    threshold = max(server.round.groups[0].threshold, 1)
    return _split_view(
        server,
        server.round.upload_requests(),
        threshold,
        "showed t peers the target online (for its self-mask shares), showed the "
        "target those peers dropped (for its masks with them), and showed the "
        "remaining peers the target dropped",
    )


def downgrade(setup: AttackSetup) -> Attempt:
    """Ask double-masking clients to run thesis mode, then play the straggler."""
    attempt = straggler(setup, mode="thesis")
    attempt.server_action = (
        "announced mode 'thesis' to clients set up for double masking, then "
        "played the straggler attack"
    )
    return attempt


#: Attack name -> its play.
PLAYS: dict[str, Callable[[AttackSetup], Attempt]] = {
    "straggler": straggler,
    "false-dropout": false_dropout,
    "group-of-one": group_of_one,
    "round-replay": round_replay,
    "low-threshold": low_threshold,
    "split-view": split_view,
    "downgrade": downgrade,
}
