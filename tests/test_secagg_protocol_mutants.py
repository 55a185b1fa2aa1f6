"""Protocol rules that the mutation run of ``secagg-protocol`` found unpinned.

Each test pins one rule of the protocol engine (seed 000 Ch. 4.1: pairwise
masks, recoveries, the tally; Bonawitz et al., CCS 2017: the self-mask, its
Shamir shares and the unmask stage) or of its records, with the exact
message a bad input gets.
"""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np
import pytest

from fedleak.errors import ProtocolError
from fedleak.secagg import (
    ClientGuards,
    ClientSession,
    ClientState,
    FixedPoint,
    ProtocolSettings,
    ServerSession,
)
from fedleak.secagg import local as local_module
from fedleak.secagg import server as server_module
from fedleak.secagg.channel import channel_key, seal_share
from fedleak.secagg.client import (
    SEALED_SHARE_BYTES,
    Refused,
    UploadPlan,
    refusal_of,
    refusal_reply,
)
from fedleak.secagg.constants import Key, Refusal, Stage
from fedleak.secagg.keys import agree
from fedleak.secagg.layout import VectorLayout
from fedleak.secagg.local import secure_sum
from fedleak.secagg.masking import self_mask
from fedleak.secagg.records import pack_ids
from fedleak.secagg.server import UNMASK_SPARE, AggregationRound
from fedleak.secagg.shamir import PRIME, SECRET_WORDS
from fedleak.secagg.tally import GroupTally

CLIP = 2.0


def inputs(n: int, length: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, length) for _ in range(n)]


# ------------------------------------------------------------ client state
def pending_record() -> dict[str, Any]:
    """A complete client state record with a pending round (three peers)."""
    record: dict[str, Any] = ClientState(secret=bytes(range(32))).to_record()
    record.update(
        {
            "pending.round": 1,
            "pending.group": 0,
            "pending.mode": "thesis",
            "pending.peers": pack_ids([1, 2, 3]),
            "pending.keys": bytes(96),
            "pending.shared": bytes(96),
            "pending.threshold": 0,
            "pending.online-floor": 3,
            "pending.length": 4,
            "pending.modulus-bits": 32,
            "pending.unmasked": False,
        }
    )
    return record


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            {"version": 2},
            "secure-aggregation client state has an unknown version 2",
        ),
        (
            {"secret": b"short"},
            "secure-aggregation client state: bad secret key",
        ),
        (
            {"pending.keys": b"x"},
            "secure-aggregation client state: bad 'keys'",
        ),
        (
            {"pending.shared": bytes(64)},
            "secure-aggregation client state: bad 'shared'",
        ),
    ],
)
def test_a_damaged_client_state_is_refused_by_name(
    damage: dict[str, Any], message: str
) -> None:
    """The state a Flower ``Context`` keeps between messages is checked field by
    field on the way back in: a wrong version, a secret key that is not 32
    bytes, or key and secret lists that do not hold one 32-byte entry per peer
    (the pending round's roster) are named."""
    record = pending_record()
    ClientState.from_record(record)  # complete: accepted
    record.update(damage)
    with pytest.raises(ProtocolError, match=f"^{re.escape(message)}$"):
        ClientState.from_record(record)


def test_a_refusal_reads_as_its_code_and_reason() -> None:
    """A refusal carries its guard's name and the reason, both in its text."""
    refused = Refused("group-too-small", "the group has 2 member(s)")
    assert str(refused) == "group-too-small: the group has 2 member(s)"
    assert (refused.code, refused.reason) == (
        "group-too-small",
        "the group has 2 member(s)",
    )


# ------------------------------------------------------------------ layout
THREE = {
    "w": np.arange(6, dtype=np.float64).reshape(2, 3),
    "b": np.array([10.0, 11.0]),
    "s": np.array([[20.0], [21.0], [22.0], [23.0]]),
}


def test_three_arrays_flatten_back_to_back_and_split_back() -> None:
    """The masked vector holds every array of the model in the server's order,
    each right after the previous one (layout step 1); the round trip through
    the configuration record keeps every shape."""
    layout = VectorLayout.of(THREE)
    flat = layout.flatten(THREE, fill_missing=False)
    assert flat.tolist() == [0, 1, 2, 3, 4, 5, 10, 11, 20, 21, 22, 23]
    back = VectorLayout.from_config(layout.to_config())
    assert back == layout
    assert back.shapes == ((2, 3), (2,), (4, 1))
    parts = back.unflatten(flat)
    assert list(parts) == ["w", "b", "s"]
    for name, value in THREE.items():
        np.testing.assert_array_equal(parts[name], value)


def test_a_missing_array_in_the_middle_is_zeros_in_its_own_slots() -> None:
    """With ``fill_missing`` (gradient sums) an absent array contributes zeros
    in its own slots and the next array still starts after them."""
    layout = VectorLayout.of(THREE)
    flat = layout.flatten({"w": THREE["w"], "s": THREE["s"]}, fill_missing=True)
    assert flat.tolist() == [0, 1, 2, 3, 4, 5, 0, 0, 20, 21, 22, 23]


def test_a_wrong_shape_is_named_with_both_shapes() -> None:
    """A reply whose array has another shape than the server's is refused."""
    layout = VectorLayout.of(THREE)
    bad = dict(THREE, b=np.zeros(3))
    with pytest.raises(
        ProtocolError, match=r"^array 'b' has shape \(3,\), expected \(2,\)$"
    ):
        layout.flatten(bad, fill_missing=False)


def test_a_malformed_layout_description_names_the_missing_key() -> None:
    """A layout description without its names is refused, naming the key."""
    config = VectorLayout.of(THREE).to_config()
    del config["layout-names"]
    with pytest.raises(
        ProtocolError,
        match=r"^secure-aggregation layout is missing or malformed: 'layout-names'$",
    ):
        VectorLayout.from_config(config)


def test_a_layout_with_more_names_than_shapes_is_refused() -> None:
    """A hand-built layout whose names and shapes differ in number is never
    silently truncated: flattening or splitting with it fails."""
    layout = VectorLayout(("a", "b"), ((2,),))
    with pytest.raises(ValueError, match="zip"):
        layout.flatten({"a": np.zeros(2)}, fill_missing=True)
    with pytest.raises(ValueError, match="zip"):
        layout.unflatten(np.zeros(2))


# --------------------------------------------------------- in-process runner
def spy_plans(monkeypatch: pytest.MonkeyPatch) -> list[UploadPlan]:
    """Record every upload plan and public key the in-process clients make."""
    plans: list[UploadPlan] = []
    plan_upload = ClientSession.plan_upload

    def spying(self: ClientSession, request: Any) -> UploadPlan:
        plan = plan_upload(self, request)
        plans.append(plan)
        return plan

    monkeypatch.setattr(ClientSession, "plan_upload", spying)
    return plans


def public_keys(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> list[bytes]:
    """Run :func:`secure_sum` and return the public keys of its clients."""
    keys: list[bytes] = []
    start = ClientSession.start

    def spying(*args: Any) -> ClientSession:
        session = start(*args)
        keys.append(session.public_key)
        return session

    monkeypatch.setattr(local_module.ClientSession, "start", spying)
    secure_sum(inputs(4, 3, 0), fixed_point=FixedPoint.auto(CLIP, 4), **kwargs)
    monkeypatch.undo()
    return keys


def test_a_seed_makes_the_clients_keys_reproducible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``seed`` reproduces the clients' key pairs (tests and simulations); no
    seed draws them from the OS CSPRNG, so two runs share no key."""
    first = public_keys(monkeypatch, seed=5)
    assert len(set(first)) == 4
    assert public_keys(monkeypatch, seed=5) == first
    assert set(public_keys(monkeypatch, seed=6)).isdisjoint(first)
    assert set(public_keys(monkeypatch)).isdisjoint(public_keys(monkeypatch))


@pytest.mark.parametrize(("given", "expected"), [({}, 1), ({"round": 7}, 7)])
def test_the_round_number_bound_into_the_masks_is_the_one_given(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, int], expected: int
) -> None:
    """Every client masks in round ``round`` (default 1): the round number is
    bound into every mask seed (seed 000 Ch. 4.1, ``PRG(s_ij, round, group)``)."""
    plans = spy_plans(monkeypatch)
    xs = inputs(4, 3, 1)
    result = secure_sum(xs, fixed_point=FixedPoint.auto(CLIP, 4), seed=2, **given)
    assert [p.round for p in plans] == [expected] * 4
    np.testing.assert_allclose(result.total, np.sum(xs, axis=0), atol=1e-3)


def test_the_timings_are_medians_within_the_call() -> None:
    """The per-user times are medians of positive durations measured inside the
    call, and ``recover`` adds every client's unmask time to the server's."""
    started = time.perf_counter()
    result = secure_sum(
        inputs(5, 4, 2), fixed_point=FixedPoint.auto(CLIP, 5), seed=1, drop=[4]
    )
    elapsed = time.perf_counter() - started
    seconds = result.seconds
    assert 0 < seconds["mask_per_user"] < elapsed
    assert 0 < seconds["unmask_per_user"] < elapsed
    assert 0 < seconds["server_unmask"] < elapsed
    assert (
        seconds["server_unmask"] + seconds["unmask_per_user"]
        < seconds["recover"]
        < elapsed
    )


def test_thesis_mode_is_reported_and_no_refusal_is_counted() -> None:
    """The result names the mode it ran in; in-process clients share one set of
    guards that the settings satisfy, so nobody refuses."""
    result = secure_sum(
        inputs(4, 3, 3), fixed_point=FixedPoint.auto(CLIP, 4), seed=1, mode="thesis"
    )
    assert result.mode == "thesis"
    assert result.refusals == {}


# ------------------------------------------------------------------ server
NODES = [11, 22, 33, 44, 55, 66]
LENGTH = 8
FP = FixedPoint.auto(CLIP, len(NODES))


def federation(
    mode: str = "double-masking", nodes: list[int] = NODES
) -> tuple[ServerSession, dict[int, ClientSession]]:
    """A server and one client session per node, keys advertised."""
    server = ServerSession(ProtocolSettings(mode=mode), seed=0)  # type: ignore[arg-type]
    rng = np.random.default_rng(1)
    guards = ClientGuards(accept_thesis=True)
    clients = {n: ClientSession.start(n, guards, rng) for n in nodes}
    for n, c in clients.items():
        server.add_advertisement(n, c.advertise_reply())
    return server, clients


def encoded(node: int) -> np.ndarray:
    return FP.encode(np.random.default_rng(node).uniform(-1, 1, LENGTH))[0]


def uploaded(
    mode: str = "double-masking", skip: tuple[int, ...] = ()
) -> tuple[AggregationRound, dict[int, ClientSession]]:
    """One round with every node's upload in but those in ``skip``; not closed."""
    server, clients = federation(mode)
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    for node, request in aggregation.upload_requests().items():
        if node not in skip:
            session = clients[node]
            reply = session.upload(session.plan_upload(request), encoded(node))
            aggregation.add_upload(node, reply)
    return aggregation, clients


def test_the_quorum_and_the_shortfall_fix_the_online_set_first() -> None:
    """Asking for the unmask quorum (or the shortfall) before :meth:`close`
    fixes the online set first (step 3 precedes step 4): the requests go to
    the members that uploaded, never to an empty set."""
    aggregation, _ = uploaded()
    quorum = aggregation.unmask_quorum()
    t = ProtocolSettings().shamir_threshold(len(NODES))
    assert sorted(quorum) == NODES[: t + 1 + UNMASK_SPARE]
    aggregation, _ = uploaded(skip=(NODES[0],))
    assert sorted(aggregation.unmask_shortfall()) == NODES[1:]


def test_forgetting_a_node_without_a_key_is_harmless() -> None:
    """``forget`` drops the keys it holds and ignores nodes it never saw."""
    server, _ = federation()
    server.forget([NODES[0], 999])
    assert server.missing_keys([NODES[0], NODES[1], 999]) == [NODES[0], 999]


# ------------------------------------------------------------------- tally
def closed_tally() -> GroupTally:
    """A tally of members 1-4 in which 4 dropped: 1-3 owe recoveries."""
    tally = GroupTally(round=2, group=0, members=[1, 2, 3, 4], length=3)
    for member in (1, 2, 3):
        tally.add_upload(member, 2, np.zeros(3, np.uint32))
    assert tally.close() == ([1, 2, 3], [4])
    return tally


@pytest.mark.parametrize(
    ("sender", "vector", "message"),
    [
        (
            4,
            np.zeros(3, np.uint32),
            "recovery from 4 rejected (round 2, group 0): the sender dropped and "
            "is not in the online set.",
        ),
        (
            1,
            np.zeros(3, np.uint64),
            "recovery from 1 rejected (round 2, group 0): dtype uint64, expected "
            "uint32.",
        ),
    ],
)
def test_a_recovery_from_a_dropped_member_or_of_another_type_is_named(
    sender: int, vector: np.ndarray, message: str
) -> None:
    """Only online members send recoveries ``k'_i`` (seed 000 Ch. 4.1), each a
    vector of the tally's word type; the refusal says which rule failed."""
    tally = closed_tally()
    with pytest.raises(ProtocolError, match=f"^{re.escape(message)}$"):
        tally.add_recovery(sender, 2, vector)
    assert tally.recovered == []


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ({"pending.mode": "plain"}, "secure-aggregation client state: mode 'plain'"),
        ({"pending.unmasked": 0}, "secure-aggregation client state: 'unmasked'"),
    ],
)
def test_a_pending_round_of_an_unknown_mode_or_flag_is_refused(
    damage: dict[str, Any], message: str
) -> None:
    """The pending round's mode must be one of the two protocol modes and its
    ``unmasked`` flag a real bool (the guard against a second unmask answer)."""
    record = pending_record()
    record.update(damage)
    with pytest.raises(ProtocolError, match=f"^{re.escape(message)}$"):
        ClientState.from_record(record)


# --------------------------------------------------- self-mask and its shares
def test_a_seeded_upload_reproduces_the_self_mask_and_its_shares() -> None:
    """``rng`` (tests only) is the source of the self-mask seed ``b`` and of
    its share polynomials (Bonawitz et al. 2017, ShareKeys): two sessions with
    one key pair and one plan upload the same words; without ``rng`` the
    seed comes from the OS CSPRNG and differs."""
    server, clients = federation()
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    node = NODES[0]
    request = aggregation.upload_request(node)

    def upload(rng: np.random.Generator | None) -> dict[str, Any]:
        twin = ClientSession(node, ClientState(secret=clients[node].state.secret))
        return dict(twin.upload(twin.plan_upload(request), encoded(node), rng))

    first = upload(np.random.default_rng(3))
    again = upload(np.random.default_rng(3))
    assert first == again
    unseeded = upload(None)
    assert unseeded[Key.MASKED] != first[Key.MASKED]
    assert unseeded[Key.SHARES] != first[Key.SHARES]


def unmask_request_for(
    target: int,
) -> tuple[dict[str, Any], dict[int, ClientSession], AggregationRound]:
    """Every node uploaded; return ``target``'s unmask request."""
    aggregation, clients = uploaded()
    requests = aggregation.unmask_requests()
    return dict(requests[target]), clients, aggregation


def test_a_wrong_count_of_forwarded_shares_is_refused_with_both_counts() -> None:
    """The unmask request forwards one sealed share per other online member;
    another count is refused (``bad-unmask``) naming both counts."""
    target = NODES[2]
    request, clients, _ = unmask_request_for(target)
    request[Key.FORWARDED] = request[Key.FORWARDED][: -SEALED_SHARE_BYTES // 2]
    with pytest.raises(Refused) as info:
        clients[target].unmask(request)
    assert info.value.code == Refusal.BAD_UNMASK
    assert info.value.reason == "expected 5 forwarded shares, got 4.5"


def test_a_tampered_forwarded_share_is_refused_with_the_channels_reason() -> None:
    """A share the server altered fails authentication; the refusal
    (``bad-share``) carries the channel's reason."""
    target = NODES[2]
    request, clients, _ = unmask_request_for(target)
    blob = bytearray(request[Key.FORWARDED])
    blob[0] ^= 1
    request[Key.FORWARDED] = bytes(blob)
    with pytest.raises(Refused) as info:
        clients[target].unmask(request)
    assert info.value.code == Refusal.BAD_SHARE
    assert info.value.reason == (
        f"the share from {NODES[0]} to {target} (round 1, group 0) fails authentication"
    )
    assert clients[target].state.pending is not None
    assert not clients[target].state.pending.unmasked  # nothing was revealed


def test_an_authentic_share_that_is_not_a_field_element_is_refused() -> None:
    """A peer (colluding with the server) may seal words outside
    ``GF(PRIME)``; the recipient refuses to reveal them (``bad-share``)
    instead of passing them to the server's Lagrange interpolation."""
    target, dealer = NODES[2], NODES[0]
    request, clients, _ = unmask_request_for(target)
    secret = clients[dealer].state.secret
    shared = agree(secret, clients[target].public_key)
    words = np.array([PRIME] + [0] * (SECRET_WORDS - 1), dtype="<u4").tobytes()
    forged = seal_share(
        channel_key(shared, round=1, group=0, pair=(target, dealer)),
        words,
        session=clients[dealer].public_key,
        round=1,
        group=0,
        sender=dealer,
        recipient=target,
    )
    request[Key.FORWARDED] = forged + request[Key.FORWARDED][SEALED_SHARE_BYTES:]
    with pytest.raises(Refused) as info:
        clients[target].unmask(request)
    assert (info.value.code, info.value.reason) == (
        Refusal.BAD_SHARE,
        f"the share from {dealer} is malformed",
    )


@pytest.mark.parametrize(
    ("answering", "failure"),
    [
        (
            4,
            f"member {NODES[0]}'s seed needs 4 shares besides its own; only 3 were revealed",
        ),
        (3, "only 3 members revealed shares, 4 are needed"),
    ],
)
def test_too_few_revealers_fail_the_group_with_the_count(
    answering: int, failure: str
) -> None:
    """A self-mask seed is rebuilt from ``t`` shares held by its dealer's peers
    (Bonawitz et al. 2017, Unmasking): with ``t`` revealers a revealer's own
    seed has only ``t - 1`` other shares, with fewer nobody's seed can be
    rebuilt; the group fails, saying how many were revealed."""
    aggregation, clients = uploaded()
    assert ProtocolSettings().shamir_threshold(len(NODES)) == 4
    for node, request in list(aggregation.unmask_requests().items())[:answering]:
        aggregation.add_unmask(node, clients[node].unmask(request))
    outcome = aggregation.finish().groups[0]
    assert outcome.total is None
    assert outcome.failure == failure


def test_the_self_mask_is_written_into_the_buffer_given() -> None:
    """``self_mask(..., out=buf)`` expands ``PRG(b)`` into ``buf`` and returns
    it (the server reuses one buffer for every member's mask)."""
    words = np.arange(SECRET_WORDS, dtype=np.uint64)
    buffer = np.zeros(6, dtype=np.uint64)
    result = self_mask(words, 6, np.uint64, out=buffer)
    assert result is buffer
    np.testing.assert_array_equal(buffer, self_mask(words, 6, np.uint64))
    assert buffer.any()


# ------------------------------------------------------- client unmask guards
SPLIT = (
    "the online and dropped sets do not split this round's group (with this "
    "client online)"
)


def dropped_one() -> tuple[dict[str, Any], ClientSession]:
    """A round in which ``NODES[5]`` dropped; ``NODES[0]``'s unmask request."""
    aggregation, clients = uploaded(skip=(NODES[5],))
    return dict(aggregation.unmask_requests()[NODES[0]]), clients[NODES[0]]


@pytest.mark.parametrize(
    ("online", "dropped"),
    [
        # the online set out of order (the forwarded shares follow its order)
        ([NODES[1], NODES[0], *NODES[2:5]], [NODES[5]]),
        # the dropped set out of order, the online set fine
        (NODES[:3], [NODES[5], NODES[4], NODES[3]]),
        # a member in neither set
        (NODES[:5], []),
        # this client itself declared dropped
        (NODES[1:5], [NODES[0], NODES[5]]),
    ],
)
def test_sets_that_do_not_split_the_group_are_refused(
    online: list[int], dropped: list[int]
) -> None:
    """The unmask request must split the round's group into a sorted online and
    a sorted dropped set, this client online; each breach alone is refused
    (``bad-unmask``) before anything is revealed (Bonawitz et al. 2017,
    Unmasking: a client answers only for the sets it was told)."""
    request, client = dropped_one()
    request.update({Key.ONLINE: pack_ids(online), Key.DROPPED: pack_ids(dropped)})
    with pytest.raises(Refused) as info:
        client.unmask(request)
    assert (info.value.code, info.value.reason) == (Refusal.BAD_UNMASK, SPLIT)
    assert client.state.pending is not None and not client.state.pending.unmasked


def test_each_unmask_refusal_states_its_reason() -> None:
    """The refusals of an unmask request name the round, the members listed
    twice, or the repeat (a second answer could reveal both kinds of share
    for one peer)."""
    request, client = dropped_one()
    cases = [
        (
            {Key.ROUND: 9},
            Refusal.BAD_UNMASK,
            "no upload of this client awaits unmasking in round 9",
        ),
        (
            {Key.DROPPED: pack_ids([NODES[1], NODES[5]])},
            Refusal.BOTH_SHARES,
            f"members [{NODES[1]}] are listed both online and dropped",
        ),
    ]
    for change, code, reason in cases:
        with pytest.raises(Refused) as info:
            client.unmask({**request, **change})
        assert (info.value.code, info.value.reason) == (code, reason)
    client.unmask(request)
    with pytest.raises(Refused) as info:
        client.unmask(request)
    assert (info.value.code, info.value.reason) == (
        Refusal.UNMASK_REPEATED,
        "round 1 was unmasked already; a second answer could reveal both kinds "
        "of share for one peer",
    )


# ------------------------------------------------------ server unmask replies
def test_the_server_names_each_bad_unmask_reply_and_counts_it() -> None:
    """Every unmask reply is checked before it touches the tally: a reply from
    a member that dropped, a duplicate, revealed shares or a recovery of the
    wrong size are refused by name and counted as rejected (one each)."""
    aggregation, clients = uploaded(skip=(NODES[5],))
    requests = aggregation.unmask_requests()
    node = NODES[0]
    good = clients[node].unmask(requests[node])
    dropped = NODES[5]
    stray = {
        Key.STAGE: Stage.UNMASK,
        Key.SESSION: clients[dropped].public_key,
        Key.ROUND: 1,
        Key.GROUP: 0,
    }
    bad: list[tuple[int, dict[str, Any], str]] = [
        (dropped, stray, f"unexpected unmask reply from node {dropped}"),
        (
            node,
            {**good, Key.REVEALED: good[Key.REVEALED][:-4]},
            f"unmask reply from node {node} reveals 124 bytes, not one share per "
            "other online member",
        ),
        (
            node,
            {**good, Key.RECOVERY: good[Key.RECOVERY][:-4]},
            f"recovery from node {node} has 28 bytes",
        ),
    ]
    for count, (sender, reply, message) in enumerate(bad, start=1):
        with pytest.raises(ProtocolError, match=f"^{re.escape(message)}$"):
            aggregation.add_unmask(sender, reply)
        assert aggregation.rejected == count
    aggregation.add_unmask(node, good)
    with pytest.raises(
        ProtocolError, match=f"^duplicate unmask reply from node {node}$"
    ):
        aggregation.add_unmask(node, good)
    assert aggregation.rejected == len(bad) + 1


def test_an_unmask_refusal_is_counted_and_names_the_node_and_stage() -> None:
    """A client's refusal of the unmask stage travels back by name; the server
    counts it and re-raises it naming the node and the stage."""
    aggregation, _ = uploaded()
    aggregation.unmask_requests()
    reply = refusal_reply(
        Stage.UNMASK, Refused(Refusal.ONLINE_TOO_FEW, "2 member(s) online")
    )
    with pytest.raises(Refused) as info:
        aggregation.add_unmask(NODES[1], reply)
    assert info.value.code == Refusal.ONLINE_TOO_FEW
    assert info.value.reason == f"node {NODES[1]} refused unmask: 2 member(s) online"
    assert aggregation.refusals == {Refusal.ONLINE_TOO_FEW: 1}
    assert aggregation.rejected == 0


def test_the_server_adds_up_its_unmask_time_over_every_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``seconds["unmask"]`` is the server's own unmask work summed over every
    reply (and the final unmasking), on a clock that ticks one second per
    reading here."""
    aggregation, clients = uploaded(skip=(NODES[5],))
    requests = aggregation.unmask_requests()
    ticks = iter(range(1000))
    monkeypatch.setattr(server_module.time, "perf_counter", lambda: next(ticks))
    for node, request in requests.items():
        aggregation.add_unmask(node, clients[node].unmask(request))
    assert aggregation.seconds["unmask"] == len(requests)
    assert aggregation.finish().seconds["unmask"] == len(requests) + 1


# ------------------------------------------------------ client upload guards
def test_a_refusal_reply_keeps_its_reason_or_none() -> None:
    """A reply carries a refusal by name, with its reason when given and an
    empty one otherwise; a reply without one is no refusal."""
    assert refusal_of({Key.STAGE: Stage.UPLOAD}) is None
    bare = refusal_of({Key.REFUSAL: Refusal.BAD_ROSTER})
    assert bare is not None and (bare.code, bare.reason) == (Refusal.BAD_ROSTER, "")
    told = refusal_of({Key.REFUSAL: Refusal.BAD_ROSTER, Key.REASON: "why"})
    assert told is not None and (told.code, told.reason) == (Refusal.BAD_ROSTER, "why")


def upload_request_for(node: int = NODES[2]) -> tuple[dict[str, Any], ClientSession]:
    server, clients = federation()
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    return dict(aggregation.upload_request(node)), clients[node]


def test_each_upload_refusal_states_its_reason() -> None:
    """Every guard of the upload request (seed 000 Ch. 4.1 and the replay,
    roster and session guards) refuses with a reason naming what is wrong."""
    request, client = upload_request_for()
    peers = list(NODES)
    keys = request[Key.PEER_KEYS]
    swapped = keys[:64] + keys[96:128] + keys[64:96] + keys[128:]  # 3rd, 4th
    cases: list[tuple[dict[str, Any], str, str]] = [
        (
            {Key.SESSION: bytes(32)},
            Refusal.UNKNOWN_SESSION,
            "the request names another session than this client's current one "
            "(it lost its state or re-keyed); advertise again",
        ),
        (
            {Key.PEERS: pack_ids([peers[1], peers[0], *peers[2:]])},
            Refusal.BAD_ROSTER,
            "the roster repeats an id or a key, or is unsorted",
        ),
        (
            {Key.PEER_KEYS: swapped},
            Refusal.BAD_ROSTER,
            "the roster does not list this client with its own public key",
        ),
    ]
    for change, code, reason in cases:
        with pytest.raises(Refused) as info:
            client.plan_upload({**request, **change})
        assert (info.value.code, info.value.reason) == (code, reason)
    with pytest.raises(
        ProtocolError, match=r"^upload request: member and key counts differ$"
    ):
        client.plan_upload({**request, Key.PEER_KEYS: keys[:-1]})


def test_a_round_is_masked_once_and_the_encoded_vector_must_fit() -> None:
    """An upload must be the plan's word type and length; once a round is
    masked, neither its plan nor a new request for it is masked again (two
    inputs under one set of masks leak their difference)."""
    request, client = upload_request_for()
    plan = client.plan_upload(request)
    bad_type = np.zeros(LENGTH, np.uint64)
    bad_length = np.zeros(LENGTH - 1, np.uint32)
    for vector in (bad_type, bad_length):
        with pytest.raises(
            ProtocolError,
            match=rf"^the encoded vector must be uint32 of shape \({LENGTH},\)$",
        ):
            client.upload(plan, vector)
    client.upload(plan, encoded(NODES[2]))
    with pytest.raises(Refused) as info:
        client.upload(plan, encoded(NODES[2]))
    assert (info.value.code, info.value.reason) == (
        Refusal.ROUND_REPLAYED,
        "round 1 was already masked in this session",
    )
    with pytest.raises(Refused) as info:
        client.plan_upload(request)
    assert (info.value.code, info.value.reason) == (
        Refusal.ROUND_REPLAYED,
        "round 1 is not above this session's last round 1; masking again would "
        "reuse its masks",
    )


# ------------------------------------------------------ server upload replies
def test_the_server_names_each_bad_upload_reply() -> None:
    """Every upload reply is checked against the round before it is summed:
    its stage, session, round, group, vector size and share count."""
    server, clients = federation()
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    node = NODES[0]
    session = clients[node]
    good = session.upload(
        session.plan_upload(aggregation.upload_request(node)), encoded(node)
    )
    cases = [
        ({Key.STAGE: Stage.UNMASK}, f"reply from node {node} is not a upload reply"),
        ({Key.SESSION: bytes(32)}, f"upload from node {node} names another session"),
        ({Key.ROUND: 4}, f"upload from node {node} is for round 4, not 1"),
        ({Key.GROUP: 2}, f"upload from node {node} names another group"),
        (
            {Key.MASKED: good[Key.MASKED][:-4]},
            f"masked vector from node {node} has 28 bytes, expected 32",
        ),
        (
            {Key.SHARES: good[Key.SHARES][:-1]},
            f"upload from node {node} carries 239 bytes of shares, not one sealed "
            "share per peer",
        ),
    ]
    for change, message in cases:
        with pytest.raises(ProtocolError, match=f"^{re.escape(message)}$"):
            aggregation.add_upload(node, {**good, **change})
    assert aggregation.rejected == len(cases)
    reply = refusal_reply(Stage.UPLOAD, Refused(Refusal.MODE_REFUSED, "no"))
    with pytest.raises(Refused) as info:
        aggregation.add_upload(NODES[1], reply)
    assert (info.value.code, info.value.reason) == (
        Refusal.MODE_REFUSED,
        f"node {NODES[1]} refused upload: no",
    )


def test_the_server_adds_up_its_upload_time_over_every_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``seconds["upload"]`` sums the server's work on every upload reply, on a
    clock that ticks one second per reading here."""
    server, clients = federation()
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    replies = {
        n: clients[n].upload(clients[n].plan_upload(r), encoded(n))
        for n, r in aggregation.upload_requests().items()
    }
    ticks = iter(range(1000))
    monkeypatch.setattr(server_module.time, "perf_counter", lambda: next(ticks))
    for node, reply in replies.items():
        aggregation.add_upload(node, reply)
    assert aggregation.seconds["upload"] == len(NODES)


def test_a_group_below_its_floor_fails_with_the_count() -> None:
    """A group with fewer uploads than its floor (``t + 1`` = 5 of 6 here) is
    not released, and its failure says how many uploaded of how many."""
    aggregation, _ = uploaded(skip=tuple(NODES[1:]))
    aggregation.close()
    outcome = aggregation.finish().groups[0]
    assert outcome.total is None
    assert outcome.failure == (
        "round 1, group 0: only 1 of 6 members uploaded, at least 5 needed; the "
        "group's sum is not released."
    )
