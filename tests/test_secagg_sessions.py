"""The protocol engine's sessions: stages, state, every client guard, the server's checks."""

from __future__ import annotations

import contextlib
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from secagg_records import PENDING_ROUND

from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import (
    ClientGuards,
    ClientSession,
    ClientState,
    FixedPoint,
    Key,
    ProtocolSettings,
    Refusal,
    Refused,
    ServerSession,
    Stage,
)
from fedleak.secagg.client import PendingRound, refusal_of, refusal_reply
from fedleak.secagg.records import pack_ids

NODES = [11, 22, 33, 44, 55, 66]
LENGTH = 16
FP = FixedPoint.auto(2.0, len(NODES))


def federation(
    mode: str = "double-masking", guards: ClientGuards | None = None, nodes=NODES
) -> tuple[ServerSession, dict[int, ClientSession]]:
    guards = guards or ClientGuards(accept_thesis=True)
    server = ServerSession(ProtocolSettings(mode=mode), seed=0)  # type: ignore[arg-type]
    rng = np.random.default_rng(1)
    clients = {n: ClientSession.start(n, guards, rng) for n in nodes}
    for n, c in clients.items():
        server.add_advertisement(n, c.advertise_reply())
    return server, clients


def encoded(node: int, tag: int = 0) -> np.ndarray:
    x = np.random.default_rng([node, tag]).uniform(-1, 1, LENGTH)
    return FP.encode(x)[0]


def upload_all(server, clients, skip=()):
    aggregation = server.begin_round(list(clients), length=LENGTH, modulus_bits=32)
    for node, request in aggregation.upload_requests().items():
        if node in skip:
            continue
        session = clients[node]
        reply = session.upload(session.plan_upload(request), encoded(node))
        aggregation.add_upload(node, reply)
    return aggregation


# ------------------------------------------------------------------ stages
@pytest.mark.parametrize(
    ("sent", "handler"), list(itertools.product(Stage.all(), ["plan_upload", "unmask"]))
)
def test_a_request_for_another_stage_is_refused(sent: str, handler: str) -> None:
    server, clients = federation()
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    request = dict(aggregation.upload_request(NODES[0]))
    request[Key.STAGE] = sent
    expected = {"plan_upload": Stage.UPLOAD, "unmask": Stage.UNMASK}[handler]
    method = getattr(clients[NODES[0]], handler)
    if sent == expected:
        # a valid stage may still be refused, but not for its stage
        with contextlib.suppress(Refused):
            method(request)
    else:
        with pytest.raises(ProtocolError, match=f"stage {sent!r}"):
            method(request)


def test_stage_and_key_namespaces() -> None:
    assert Stage.all() == ("advertise", "upload", "unmask")
    assert len(set(Key.all())) == len(Key.all())
    assert "group-too-small" in Refusal.all()
    with pytest.raises(TypeError):
        Stage()


# ------------------------------------------------------------------ state
@settings(deadline=None, max_examples=30)
@given(
    last=st.integers(0, 2**40),
    pending=st.booleans(),
    peers=st.lists(st.integers(0, 2**64 - 1), min_size=3, max_size=6, unique=True),
    unmasked=st.booleans(),
    mode=st.sampled_from(["double-masking", "thesis"]),
)
def test_client_state_round_trips_through_a_flat_record(
    last: int, pending: bool, peers: list[int], unmasked: bool, mode: str
) -> None:
    rng = np.random.default_rng(len(peers))
    state = ClientState(secret=rng.bytes(32), last_round=last)
    if pending:
        state.pending = PendingRound(
            round=last,
            group=2,
            mode=mode,  # type: ignore[arg-type]
            peers=sorted(peers),
            keys=[rng.bytes(32) for _ in peers],
            shared=[rng.bytes(32) for _ in peers],
            threshold=2,
            online_floor=3,
            length=7,
            modulus_bits=64,
            unmasked=unmasked,
        )
    record = state.to_record()
    assert all(type(v) in (int, bytes, str, bool) for v in record.values())
    assert ClientState.from_record(record) == state


@pytest.mark.parametrize(
    "damage",
    [
        {"version": 2},
        {"secret": b"short"},
        {"pending.keys": b"x"},
        {"pending.mode": "other"},
        {"pending.unmasked": 1},
        {"last-round": "1"},
    ],
)
def test_a_damaged_state_record_is_refused(damage: dict[str, object]) -> None:
    _, clients = federation()
    session = clients[NODES[0]]
    record = session.state.to_record()
    record.update(PENDING_ROUND)
    ClientState.from_record(record)  # complete: fine
    record.update(damage)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        ClientState.from_record(record)


def test_a_restored_session_continues_the_round() -> None:
    server, clients = federation()
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    for node, request in aggregation.upload_requests().items():
        session = clients[node]
        reply = session.upload(session.plan_upload(request), encoded(node))
        aggregation.add_upload(node, reply)
        # the carrier writes the state out and reads it back between messages
        clients[node] = ClientSession(
            node, ClientState.from_record(session.state.to_record()), session.guards
        )
    for node, request in aggregation.unmask_requests().items():
        aggregation.add_unmask(node, clients[node].unmask(request))
    total = FP.decode(aggregation.finish().groups[0].total)
    expected = sum(FP.decode(encoded(n)) for n in NODES)
    np.testing.assert_allclose(total, expected, atol=1e-9)


@pytest.mark.parametrize("mode", ["double-masking", "thesis"])
def test_a_session_agrees_with_each_peer_key_once(monkeypatch, mode: str) -> None:
    """Round 2 reuses round 1's X25519 secrets; a peer that re-keyed is agreed anew."""
    import fedleak.secagg.client as client_module

    calls: list[tuple[bytes, bytes]] = []
    real_agree = client_module.agree

    def counting_agree(secret: bytes, key: bytes) -> bytes:
        calls.append((secret, key))
        return real_agree(secret, key)

    monkeypatch.setattr(client_module, "agree", counting_agree)
    server, clients = federation(mode)
    me = clients[NODES[0]]

    def one_round(tag: int) -> np.ndarray:
        aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
        for node, request in aggregation.upload_requests().items():
            session = clients[node]
            reply = session.upload(session.plan_upload(request), encoded(node, tag))
            aggregation.add_upload(node, reply)
            # the carrier writes the state out and reads it back between messages
            clients[node] = ClientSession(
                node, ClientState.from_record(session.state.to_record()), session.guards
            )
        for node, request in aggregation.unmask_requests().items():
            aggregation.add_unmask(node, clients[node].unmask(request))
        return FP.decode(aggregation.finish().groups[0].total)

    def mine() -> list[bytes]:
        return [key for secret, key in calls if secret == me.state.secret]

    total = one_round(0)
    assert len(mine()) == len(NODES) - 1
    np.testing.assert_allclose(total, sum(FP.decode(encoded(n, 0)) for n in NODES))

    calls.clear()
    total = one_round(1)
    assert mine() == []  # every peer kept its key: no agreement in round 2
    np.testing.assert_allclose(total, sum(FP.decode(encoded(n, 1)) for n in NODES))

    # a peer re-keys (a new session): only its secret is agreed anew, and the
    # sum is still exact (a stale secret would leave its pairwise masks in)
    rekeyed = NODES[3]
    clients[rekeyed] = ClientSession.start(
        rekeyed, clients[rekeyed].guards, np.random.default_rng(9)
    )
    server.add_advertisement(rekeyed, clients[rekeyed].advertise_reply())
    calls.clear()
    total = one_round(2)
    assert mine() == [clients[rekeyed].public_key]
    np.testing.assert_allclose(total, sum(FP.decode(encoded(n, 2)) for n in NODES))


# ------------------------------------------------------------------ guards
def refusal(fn, *args) -> str:
    with pytest.raises(Refused) as info:
        fn(*args)
    return info.value.code


def upload_request(server, node=NODES[2], **change):
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    request = dict(aggregation.upload_request(node))
    request.update(change)
    return request


@pytest.mark.parametrize("mode", ["double-masking", "thesis"])
def test_a_group_below_the_floor_is_refused(mode: str) -> None:
    server, clients = federation(mode)
    target = clients[NODES[2]]
    for members in ([NODES[2]], [NODES[1], NODES[2]]):
        request = upload_request(
            server,
            **{
                Key.PEERS: pack_ids(members),
                Key.PEER_KEYS: b"".join(server.keys[m] for m in members),
                Key.THRESHOLD: len(members),
            },
        )
        assert refusal(target.plan_upload, request) == Refusal.GROUP_TOO_SMALL
    # the client's own floor can be higher than the server's
    strict = ClientSession(
        NODES[2], target.state, ClientGuards(min_group=7, accept_thesis=True)
    )
    assert (
        refusal(strict.plan_upload, upload_request(server)) == Refusal.GROUP_TOO_SMALL
    )


def test_a_replayed_or_older_round_is_refused() -> None:
    server, clients = federation()
    aggregation = upload_all(server, clients)
    target = clients[NODES[0]]
    request = aggregation.upload_request(NODES[0])
    assert refusal(target.plan_upload, request) == Refusal.ROUND_REPLAYED
    older = dict(request)
    older[Key.ROUND] = request[Key.ROUND] - 1
    assert refusal(target.plan_upload, older) == Refusal.ROUND_REPLAYED
    # a plan accepted earlier cannot be used twice either
    later = upload_request(server, NODES[0])
    plan = target.plan_upload(later)
    target.upload(plan, encoded(NODES[0]))
    assert refusal(target.upload, plan, encoded(NODES[0], 1)) == Refusal.ROUND_REPLAYED


@pytest.mark.parametrize(
    ("threshold", "code"),
    [
        (1, Refusal.THRESHOLD_TOO_LOW),
        (3, Refusal.THRESHOLD_TOO_LOW),
        (6, Refusal.THRESHOLD_UNREACHABLE),
    ],
)
def test_thresholds_the_group_cannot_keep_are_refused(
    threshold: int, code: str
) -> None:
    server, clients = federation()
    request = upload_request(server, **{Key.THRESHOLD: threshold})
    assert refusal(clients[NODES[2]].plan_upload, request) == code


def test_a_lower_min_online_from_the_server_is_ignored() -> None:
    server, clients = federation("thesis")
    plan = clients[NODES[2]].plan_upload(upload_request(server, **{Key.MIN_ONLINE: 2}))
    assert plan.online_floor == 3
    plan = clients[NODES[2]].plan_upload(upload_request(server, **{Key.MIN_ONLINE: 5}))
    assert plan.online_floor == 5  # a higher one is kept
    server, clients = federation("double-masking")
    plan = clients[NODES[2]].plan_upload(upload_request(server, **{Key.MIN_ONLINE: 2}))
    assert plan.threshold == 4 and plan.online_floor == 5  # t + 1


def test_thesis_mode_needs_the_clients_consent() -> None:
    server, clients = federation("thesis", guards=ClientGuards())
    assert (
        refusal(clients[NODES[0]].plan_upload, upload_request(server, NODES[0]))
        == Refusal.MODE_REFUSED
    )


def test_another_session_or_roster_is_refused() -> None:
    server, clients = federation()
    target = clients[NODES[2]]
    request = upload_request(server, **{Key.SESSION: bytes(32)})
    assert refusal(target.plan_upload, request) == Refusal.UNKNOWN_SESSION
    keys = bytearray(upload_request(server)[Key.PEER_KEYS])
    keys[2 * 32] ^= 1  # the target's own key, changed
    assert (
        refusal(
            target.plan_upload, upload_request(server, **{Key.PEER_KEYS: bytes(keys)})
        )
        == Refusal.BAD_ROSTER
    )
    twice = upload_request(server, **{Key.PEERS: pack_ids([*NODES[:5], NODES[4]])})
    assert refusal(target.plan_upload, twice) == Refusal.BAD_ROSTER


@pytest.mark.parametrize("mode", ["double-masking", "thesis"])
def test_unmask_guards(mode: str) -> None:
    server, clients = federation(mode)
    aggregation = upload_all(server, clients, skip=[NODES[5]])
    requests = aggregation.unmask_requests()
    node = NODES[0]
    target = clients[node]
    base = requests[node]
    online = [n for n in NODES if n != NODES[5]]

    def forged(**change):
        request = dict(base)
        request.update(change)
        return request

    # one peer both online and dropped
    assert (
        refusal(target.unmask, forged(**{Key.DROPPED: pack_ids([NODES[1], NODES[5]])}))
        == Refusal.BOTH_SHARES
    )
    # too few online (thesis: the floor of 3; double masking: t + 1 = 5)
    few = [node, NODES[1]] if mode == "thesis" else [node, NODES[1], NODES[2], NODES[3]]
    rest = [n for n in NODES if n not in few]
    assert (
        refusal(
            target.unmask,
            forged(**{Key.ONLINE: pack_ids(few), Key.DROPPED: pack_ids(rest)}),
        )
        == Refusal.ONLINE_TOO_FEW
    )
    # sets that do not split the group, or drop the client itself
    assert (
        refusal(target.unmask, forged(**{Key.ONLINE: pack_ids(online[1:])}))
        == Refusal.BAD_UNMASK
    )
    assert (
        refusal(target.unmask, forged(**{Key.ROUND: base[Key.ROUND] + 1}))
        == Refusal.BAD_UNMASK
    )
    if mode == "double-masking":
        blob = bytearray(base[Key.FORWARDED])
        assert (
            refusal(target.unmask, forged(**{Key.FORWARDED: bytes(blob[:-1])}))
            == Refusal.BAD_UNMASK
        )
        blob[5] ^= 1
        assert (
            refusal(target.unmask, forged(**{Key.FORWARDED: bytes(blob)}))
            == Refusal.BAD_SHARE
        )
    # nothing above was answered: the genuine request still is, once
    reply = target.unmask(base)
    assert Key.RECOVERY in reply
    assert (Key.REVEALED in reply) == (mode == "double-masking")
    assert refusal(target.unmask, base) == Refusal.UNMASK_REPEATED
    assert (
        refusal(
            target.unmask, forged(**{Key.ONLINE: pack_ids(NODES), Key.DROPPED: b""})
        )
        == Refusal.UNMASK_REPEATED
    )


def test_guards_refuse_floors_below_three() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^ClientGuards\.min_online must be an integer >= 3, got 2\.$",
    ):
        ClientGuards(min_online=2)
    with pytest.raises(
        ConfigError, match=r"^ClientGuards\.min_group must be an integer >= 3, got 1\.$"
    ):
        ClientGuards(min_group=1)


def test_refusals_travel_as_named_records() -> None:
    refused = Refused(Refusal.GROUP_TOO_SMALL, "1 member")
    record = refusal_reply(Stage.UPLOAD, refused)
    back = refusal_of(record)
    assert back is not None and back.code == Refusal.GROUP_TOO_SMALL
    assert refusal_of({Key.STAGE: Stage.UPLOAD}) is None


# ------------------------------------------------------------------ server checks
def test_the_server_counts_refusals_and_rejects_bad_replies() -> None:
    server, clients = federation()
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    requests = aggregation.upload_requests()
    good = clients[NODES[0]].upload(
        clients[NODES[0]].plan_upload(requests[NODES[0]]), encoded(NODES[0])
    )
    with pytest.raises(Refused):
        aggregation.add_upload(
            NODES[1], refusal_reply(Stage.UPLOAD, Refused(Refusal.GROUP_TOO_SMALL, "x"))
        )
    assert aggregation.refusals[Refusal.GROUP_TOO_SMALL] == 1
    bad = [
        {**good, Key.MASKED: good[Key.MASKED][:-4]},
        {**good, Key.SHARES: good[Key.SHARES][:-1]},
        {**good, Key.ROUND: 99},
        {**good, Key.GROUP: 3},
        {**good, Key.SESSION: bytes(32)},
        {**good, Key.STAGE: Stage.UNMASK},
    ]
    for reply in bad:
        with pytest.raises(ProtocolError):
            aggregation.add_upload(NODES[0], reply)
    with pytest.raises(
        ProtocolError, match=r"^upload from node 999, which is not in this round$"
    ):
        aggregation.add_upload(999, good)
    aggregation.add_upload(NODES[0], good)
    with pytest.raises(
        ProtocolError,
        match=r"^upload from 11 rejected \(round 1, group 0\): duplicate upload\.$",
    ):
        aggregation.add_upload(NODES[0], good)
    assert aggregation.rejected == len(bad) + 2
    result = aggregation.finish()
    assert result.refusals[Refusal.GROUP_TOO_SMALL] == 1
    assert result.failed_groups == [0]  # one upload of six: below the floor
    assert result.non_uploaders == NODES[1:]


def test_a_late_upload_is_refused_and_counted() -> None:
    server, clients = federation()
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    requests = aggregation.upload_requests()
    replies = {
        n: clients[n].upload(clients[n].plan_upload(r), encoded(n))
        for n, r in requests.items()
    }
    for n in NODES[:-1]:
        aggregation.add_upload(n, replies[n])
    aggregation.close()
    with pytest.raises(
        ProtocolError,
        match=r"^late upload from node 66 \(round 1, group 0\) refused: the online set is fixed$",
    ):
        aggregation.add_upload(NODES[-1], replies[NODES[-1]])
    assert aggregation.late == [NODES[-1]]


def test_advertisements_are_checked() -> None:
    server = ServerSession()
    with pytest.raises(ProtocolError):
        server.add_advertisement(
            1, {Key.STAGE: Stage.ADVERTISE, Key.PUBLIC_KEY: b"short"}
        )
    with pytest.raises(ProtocolError):
        server.add_advertisement(
            1, {Key.STAGE: Stage.UPLOAD, Key.PUBLIC_KEY: bytes(32)}
        )
    server.add_advertisement(
        1, {Key.STAGE: Stage.ADVERTISE, Key.PUBLIC_KEY: bytes(range(32))}
    )
    with pytest.raises(
        ProtocolError, match=r"^node 2 repeats another node's public key$"
    ):
        server.add_advertisement(
            2, {Key.STAGE: Stage.ADVERTISE, Key.PUBLIC_KEY: bytes(range(32))}
        )
    assert server.missing_keys([1, 2]) == [2]
    server.forget([1])
    assert server.missing_keys([1, 2]) == [1, 2]
