"""SecAgg+ protocol pieces against their contracts: every refusal with its
full message, the settings' decryptability rule recomputed from its formula,
the layout's round trip and the self-mask seed's documented hash; then (the
second half) the rules the mutation run of the ``secagg-protocol`` set found
unpinned: the client's state record, its upload and unmask guards, the
server's checks of every reply and its accounting, the self-mask's rebuilding
from too few shares, the tally and the in-process runner."""

from __future__ import annotations

import hashlib
import math
import re
import time
from typing import Any

import numpy as np
import pytest
from secagg_records import PENDING_ROUND

from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import (
    ClientGuards,
    ClientSession,
    ClientState,
    FixedPoint,
    KeyPair,
    ProtocolSettings,
    ServerSession,
    agree,
    records,
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
from fedleak.secagg.layout import VectorLayout, to_signed
from fedleak.secagg.local import secure_sum
from fedleak.secagg.masking import (
    add_pairwise_masks,
    blinding,
    mask,
    pairwise_secrets,
    recovery,
    self_mask,
    self_mask_seed,
)
from fedleak.secagg.records import pack_ids
from fedleak.secagg.server import UNMASK_SPARE, AggregationRound
from fedleak.secagg.shamir import PRIME, SECRET_WORDS
from fedleak.secagg.tally import GroupTally, InsufficientParticipants, assign_groups

FIXED = FixedPoint.auto(1.0, 10)
FIVE = [np.zeros(4)] * 5
KEY = KeyPair.generate(np.random.default_rng(0))

NEEDS = "secure aggregation needs at least {} clients per round ({}), but {} gives {}; no group could ever be decrypted."

REFUSED: list[tuple[Any, type[Exception], str]] = [
    # local.secure_sum
    (
        lambda: secure_sum(FIVE, fixed_point=FIXED, seed=1, secure_mode=True),
        ConfigError,
        "secure_sum got a seed with secure_mode=True: seeding is refused in secure_mode.",
    ),
    (
        lambda: secure_sum(FIVE, fixed_point=FIXED, round=0),
        ConfigError,
        "round must be an integer >= 1, got 0.",
    ),
    (
        lambda: secure_sum(FIVE, fixed_point=FIXED, round=True),
        ConfigError,
        "round must be an integer >= 1, got True.",
    ),
    (
        lambda: secure_sum([], fixed_point=FIXED),
        ConfigError,
        "secure_sum needs at least one input.",
    ),
    (
        lambda: secure_sum([np.zeros(4)], fixed_point=FIXED),
        ConfigError,
        NEEDS.format(
            3,
            "mode 'double-masking' with min_online=3 and threshold=0.5",
            "1 input(s)",
            1,
        ),
    ),
    (
        lambda: secure_sum([np.zeros(4), np.zeros(3), np.zeros(4)], fixed_point=FIXED),
        ConfigError,
        "inputs must be non-empty vectors of one size.",
    ),
    (
        lambda: secure_sum([np.zeros(0)] * 3, fixed_point=FIXED),
        ConfigError,
        "inputs must be non-empty vectors of one size.",
    ),
    (
        lambda: secure_sum(FIVE, fixed_point=FIXED, drop=[5]),
        ConfigError,
        "drop holds 5, not a user id in [0, 5).",
    ),
    (
        lambda: secure_sum(FIVE, fixed_point=FIXED, drop=[True]),
        ConfigError,
        "drop must hold user ids, got True.",
    ),
    (
        lambda: secure_sum(FIVE, fixed_point=FIXED, drop_during_recovery=[7]),
        ConfigError,
        "drop_during_recovery holds 7, not a user id in [0, 5).",
    ),
    (
        lambda: secure_sum(FIVE, fixed_point=FIXED, late=[-1]),
        ConfigError,
        "late holds -1, not a user id in [0, 5).",
    ),
    # tally
    (
        lambda: GroupTally(round=-1, group=0, members=[1, 2, 3], length=4),
        ConfigError,
        "round must lie in [0, 2**64), got -1.",
    ),
    (
        lambda: GroupTally(round=1, group=-1, members=[1, 2, 3], length=4),
        ConfigError,
        "group must lie in [0, 2**64), got -1.",
    ),
    (
        lambda: GroupTally(round=1, group=0, members=[1, -2, 3], length=4),
        ConfigError,
        "member id must lie in [0, 2**64), got -2.",
    ),
    (
        lambda: GroupTally(round=1, group=2, members=[1, 1, 3], length=4),
        ConfigError,
        "group 2: member ids are not distinct.",
    ),
    (
        lambda: GroupTally(round=1, group=0, members=[1, 2, 3], length=-1),
        ConfigError,
        "length must lie in [0, 2**64), got -1.",
    ),
    (
        lambda: GroupTally(round=1, group=0, members=[1, 2, 3], length=0),
        ConfigError,
        "length must be >= 1.",
    ),
    (
        lambda: GroupTally(round=1, group=0, members=[1, 2], length=4, min_online=True),
        ConfigError,
        "min_online must be an integer, got True.",
    ),
    (
        lambda: GroupTally(round=1, group=0, members=[1, 2], length=4, min_online=0),
        ConfigError,
        "min_online must be >= 1, got 0.",
    ),
    (
        lambda: assign_groups([1, -1], 2, 0),
        ConfigError,
        "user id must lie in [0, 2**64), got -1.",
    ),
    (lambda: assign_groups([1, 1], 2, 0), ConfigError, "user ids must be distinct."),
    (
        lambda: assign_groups([1, 2], 0, 0),
        ConfigError,
        "group_size must be an integer >= 1, got 0.",
    ),
    (
        lambda: assign_groups([1, 2], True, 0),
        ConfigError,
        "group_size must be an integer >= 1, got True.",
    ),
    (
        lambda: assign_groups([1, 2], 2, 0, min_size=0),
        ConfigError,
        "min_size must be an integer >= 1, got 0.",
    ),
    (
        lambda: assign_groups([1, 2], 2, 0, min_size=True),
        ConfigError,
        "min_size must be an integer >= 1, got True.",
    ),
    # records
    (
        lambda: records.get_int({}, "k"),
        ProtocolError,
        "secure-aggregation record lacks integer 'k'",
    ),
    (
        lambda: records.get_int({"k": "x"}, "k"),
        ProtocolError,
        "secure-aggregation record: 'k' must be an integer, got str",
    ),
    (
        lambda: records.get_bytes({}, "k"),
        ProtocolError,
        "secure-aggregation record lacks bytes 'k'",
    ),
    (
        lambda: records.get_bytes({"k": 1}, "k"),
        ProtocolError,
        "secure-aggregation record: 'k' must be bytes, got int",
    ),
    (
        lambda: records.get_str({}, "k"),
        ProtocolError,
        "secure-aggregation record lacks string 'k'",
    ),
    (
        lambda: records.get_str({"k": 1}, "k"),
        ProtocolError,
        "secure-aggregation record: 'k' must be a string, got int",
    ),
    (
        lambda: records.get_ids({"k": b"abc"}, "k"),
        ProtocolError,
        "secure-aggregation record: 'k': packed ids must be a multiple of 8 bytes, got 3",
    ),
    # settings
    (
        lambda: ProtocolSettings(mode="plain"),  # type: ignore[arg-type]
        ConfigError,
        "mode must be one of ['double-masking', 'thesis'], got 'plain'.",
    ),
    (
        lambda: ProtocolSettings(min_online=True),
        ConfigError,
        "min_online must be an integer >= 3 (with two online members each learns "
        "the other's input), got True.",
    ),
    (
        lambda: ProtocolSettings(min_online=2),
        ConfigError,
        "min_online must be an integer >= 3 (with two online members each learns "
        "the other's input), got 2.",
    ),
    (
        lambda: ProtocolSettings(threshold=True),
        ConfigError,
        "threshold must be a fraction of the group in [0.5, 1) (the Shamir "
        "threshold is floor(threshold * n) + 1), got True.",
    ),
    (
        lambda: ProtocolSettings(threshold=1.0),
        ConfigError,
        "threshold must be a fraction of the group in [0.5, 1) (the Shamir "
        "threshold is floor(threshold * n) + 1), got 1.0.",
    ),
    (
        lambda: ProtocolSettings(group_size=True),
        ConfigError,
        "group_size must be an integer or None, got True.",
    ),
    (
        lambda: ProtocolSettings(group_size=3, threshold=0.75),
        ConfigError,
        "group_size=3 can never be decrypted: mode 'double-masking' with "
        "min_online=3 and threshold=0.75 needs groups of at least 5.",
    ),
    (
        lambda: ProtocolSettings(group_size=3, mode="thesis", min_online=4),
        ConfigError,
        "group_size=3 can never be decrypted: mode 'thesis' with min_online=4 "
        "needs groups of at least 4.",
    ),
    (
        lambda: ProtocolSettings(mode="thesis", min_online=4).check_count(
            3, "3 clients"
        ),
        ConfigError,
        NEEDS.format(4, "mode 'thesis' with min_online=4", "3 clients", 3),
    ),
    # masking and layout
    (
        lambda: mask(np.zeros((2, 2), np.uint32), 1, KEY, {}, round=1, group=0),
        ConfigError,
        "encoded must be a one-dimensional numpy array.",
    ),
    (
        lambda: add_pairwise_masks(
            np.zeros(8, np.uint32)[::2], 1, {}, round=1, group=0
        ),
        ConfigError,
        "out must be a writable C-contiguous array.",
    ),
    (
        lambda: add_pairwise_masks(np.zeros(4, np.uint32), -1, {}, round=1, group=0),
        ConfigError,
        "own_id must lie in [0, 2**64), got -1.",
    ),
    (
        lambda: add_pairwise_masks(np.zeros(4, np.uint32), 1, {}, round=-1, group=0),
        ConfigError,
        "round must lie in [0, 2**64), got -1.",
    ),
    (
        lambda: add_pairwise_masks(np.zeros(4, np.uint32), 1, {}, round=1, group=-1),
        ConfigError,
        "group must lie in [0, 2**64), got -1.",
    ),
    (
        lambda: add_pairwise_masks(
            np.zeros(4, np.uint32), 1, {-3: bytes(32)}, round=1, group=0
        ),
        ConfigError,
        "peer id must lie in [0, 2**64), got -3.",
    ),
    (
        lambda: blinding(-1, KEY, {}, round=1, group=0, length=4),
        ConfigError,
        "own_id must lie in [0, 2**64), got -1.",
    ),
    (
        lambda: blinding(1, KEY, {}, round=1, group=0, length=-4),
        ConfigError,
        "length must lie in [0, 2**64), got -4.",
    ),
    (
        lambda: blinding(
            1, KEY, {1: KEY.public}, round=1, group=0, length=4, only=[-2]
        ),
        ConfigError,
        "peer id must lie in [0, 2**64), got -2.",
    ),
    (
        lambda: blinding(1, KEY, {-5: KEY.public}, round=1, group=0, length=4),
        ConfigError,
        "peer id must lie in [0, 2**64), got -5.",
    ),
    (
        lambda: recovery(-1, KEY, {}, [], round=1, group=0, length=4),
        ConfigError,
        "own_id must lie in [0, 2**64), got -1.",
    ),
    (
        lambda: recovery(1, KEY, {}, [-7], round=1, group=0, length=4),
        ConfigError,
        "dropped id must lie in [0, 2**64), got -7.",
    ),
    (
        lambda: pairwise_secrets(-1, KEY, {}),
        ConfigError,
        "own_id must lie in [0, 2**64), got -1.",
    ),
    (
        lambda: to_signed(np.zeros(2)),
        ProtocolError,
        "secure sums are uint32 or uint64, got float64",
    ),
    (
        lambda: VectorLayout.from_config(
            {"layout-names": ["a", "b"], "layout-ndims": [1], "layout-dims": [2]}
        ),
        ProtocolError,
        "secure-aggregation layout is inconsistent",
    ),
    (
        lambda: VectorLayout.from_config(
            {"layout-names": ["a"], "layout-ndims": [2], "layout-dims": [2]}
        ),
        ProtocolError,
        "secure-aggregation layout is inconsistent",
    ),
    (
        lambda: VectorLayout.of({"a": np.zeros(2)}).flatten(
            {"a": np.zeros(2), "z": np.zeros(1)}, fill_missing=True
        ),
        ProtocolError,
        "reply holds arrays the server did not send: ['z']",
    ),
    (
        lambda: VectorLayout.of({"a": np.zeros(2)}).flatten({}, fill_missing=False),
        ProtocolError,
        "reply lacks array 'a'",
    ),
]


@pytest.mark.parametrize(("make", "error", "message"), REFUSED)
def test_protocol_refusals_state_what_is_wrong(
    make: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        make()
    assert str(info.value) == message


def _decryptable(mode: str, min_online: int, threshold: float, n: int) -> bool:
    """The documented rule: at least 3 members and the online floor; double
    masking also needs t = floor(threshold n) + 1 <= n - 1 shares."""
    if mode == "thesis":
        return n >= max(3, min_online)
    t = math.floor(threshold * n) + 1
    return n >= 3 and n >= max(min_online, t + 1) and t <= n - 1


@pytest.mark.parametrize(
    ("mode", "min_online", "threshold"),
    [
        ("double-masking", 3, 0.5),
        ("double-masking", 3, 0.75),
        ("double-masking", 6, 0.5),
        ("thesis", 3, 0.5),
        ("thesis", 5, 0.9),
    ],
)
def test_decryptability_follows_the_documented_rule(
    mode: str, min_online: int, threshold: float
) -> None:
    settings = ProtocolSettings(mode=mode, min_online=min_online, threshold=threshold)  # type: ignore[arg-type]
    sizes = range(1, 12)
    expected = [_decryptable(mode, min_online, threshold, n) for n in sizes]
    assert [settings.decryptable(n) for n in sizes] == expected
    assert settings.smallest_group() == min(n for n in sizes if expected[n - 1])
    for n in sizes:
        t = 0 if mode == "thesis" else math.floor(threshold * n) + 1
        assert settings.shamir_threshold(n) == t
        floor = min_online if mode == "thesis" else max(min_online, t + 1)
        assert settings.online_floor(n) == floor


def test_settings_store_a_plain_float_threshold_and_size_groups() -> None:
    settings = ProtocolSettings(threshold=np.float64(0.75))
    assert type(settings.threshold) is float and settings.threshold == 0.75
    sized = ProtocolSettings(group_size=5)
    assert sized.largest_group(0) == 0 and sized.largest_group(4) == 4
    assert sized.largest_group(12) == 4  # 3 groups of 4
    assert ProtocolSettings().largest_group(12) == 12


def test_groups_are_bounded_by_the_smallest_size() -> None:
    """k = max(1, min(ceil(n / group_size), n // min_size)) groups."""
    groups = assign_groups(list(range(10)), 3, 0, min_size=4)
    assert sorted(len(g) for g in groups) == [5, 5]
    assert sorted(i for g in groups for i in g) == list(range(10))
    assert assign_groups([], 3, 0) == [] and assign_groups([4, 2], None, 0) == [[2, 4]]


def test_pairwise_secrets_agree_with_every_peer_but_oneself() -> None:
    rng = np.random.default_rng(3)
    keys = {i: KeyPair.generate(rng) for i in (2, 5, 9)}
    roster = {i: k.public for i, k in keys.items()}
    secrets = pairwise_secrets(5, keys[5], roster)
    assert secrets == {j: agree(keys[5].secret, roster[j]) for j in (2, 9)}
    with pytest.raises(ProtocolError) as info:
        pairwise_secrets(5, keys[2], roster)
    assert str(info.value) == (
        "the roster lists user 5 with a public key that is not this user's own."
    )


def test_self_mask_seed_is_the_documented_blake2b() -> None:
    words = np.array([1, 2**32 - 6, 0, 7, 8, 9, 10, 11], dtype=np.uint64)
    expected = hashlib.blake2b(
        words.astype("<u4").tobytes(), digest_size=32, person=b"fedleak-selfmask"
    ).digest()
    assert self_mask_seed(words) == expected
    assert self_mask_seed(list(words)) == expected


def test_signed_sums_and_the_layout_round_trip() -> None:
    np.testing.assert_array_equal(
        to_signed(np.array([1, 2**32 - 1], dtype=np.uint32)), [1, -1]
    )
    assert to_signed(np.array([1], dtype=np.uint32)).dtype == np.int64
    wide = np.array([2**64 - 2, 3], dtype=np.uint64)
    signed = to_signed(wide)
    np.testing.assert_array_equal(signed, [-2, 3])
    signed[0] = 0
    assert wide[0] == 2**64 - 2  # a copy, not a view of the sum
    arrays = {"w": np.arange(6.0).reshape(2, 3), "b": np.array([7.0])}
    layout = VectorLayout.of(arrays, ["loss"])
    flat = layout.flatten(arrays, fill_missing=False)
    np.testing.assert_array_equal(flat, [0, 1, 2, 3, 4, 5, 7])
    assert flat.dtype == np.float64
    back = layout.unflatten(flat)
    assert list(back) == ["w", "b"]
    for name in arrays:
        np.testing.assert_array_equal(back[name], arrays[name])
    again = VectorLayout.from_config(layout.to_config())
    assert again == layout and again.metric_names == ("loss",)
    assert layout.to_config()["metric-names"] == ["loss"]
    assert VectorLayout.from_config(
        {"layout-names": ["a"], "layout-ndims": [1], "layout-dims": [2]}
    ) == VectorLayout(("a",), ((2,),))
    partial = layout.flatten({"b": np.array([7])}, fill_missing=True)
    np.testing.assert_array_equal(partial, [0, 0, 0, 0, 0, 0, 7])


def test_flatten_into_a_given_buffer_zeroes_what_is_missing() -> None:
    arrays = {"w": np.arange(6.0, dtype=np.float32).reshape(2, 3), "b": np.ones(1)}
    layout = VectorLayout.of(arrays, ["loss"])
    vector = np.full(layout.fixed_length, 99.0)  # arrays, then the metric
    head = vector[: layout.model_length]
    assert layout.flatten({"b": np.array([7])}, fill_missing=True, out=head) is head
    np.testing.assert_array_equal(vector, [0, 0, 0, 0, 0, 0, 7, 99])
    layout.flatten(arrays, fill_missing=False, out=head)
    np.testing.assert_array_equal(vector, [0, 1, 2, 3, 4, 5, 1, 99])
    for bad in (np.zeros(7, np.float32), np.zeros(6)):
        with pytest.raises(
            ConfigError, match=r"^out must be float64 of shape \(7,\), got "
        ):
            layout.flatten(arrays, fill_missing=False, out=bad)


# ======================================================================
# Rules the mutation run of the secagg-protocol set found unpinned
# (seed 000 Ch. 4.1: pairwise masks, recoveries, the tally; Bonawitz et
# al., CCS 2017: the self-mask, its Shamir shares and the unmask stage).
# ======================================================================
CLIP = 2.0


def inputs(n: int, length: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, length) for _ in range(n)]


# ------------------------------------------------------------ client state
def pending_record() -> dict[str, Any]:
    """A complete client state record with a pending round (three peers)."""
    record: dict[str, Any] = ClientState(secret=bytes(range(32))).to_record()
    record.update(PENDING_ROUND)
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


def test_a_request_for_another_stage_names_both_stages() -> None:
    """A client answers each request only at its own stage."""
    request, client = upload_request_for()
    with pytest.raises(
        ProtocolError,
        match=r"^secure-aggregation request for stage 'upload' where 'unmask' was "
        r"expected$",
    ):
        client.unmask(request)


@pytest.mark.parametrize(
    ("mode", "change", "code", "reason"),
    [
        (
            "double-masking",
            {Key.THRESHOLD: 3},
            Refusal.THRESHOLD_TOO_LOW,
            "threshold 3 is at most half the group of 6",
        ),
        (
            "double-masking",
            {Key.THRESHOLD: 6},
            Refusal.THRESHOLD_UNREACHABLE,
            "threshold 6 exceeds the 5 other members",
        ),
        (
            "thesis",
            {Key.MIN_ONLINE: 7},
            Refusal.GROUP_TOO_SMALL,
            "the group of 6 can never have 7 members online",
        ),
    ],
)
def test_thresholds_and_floors_the_group_cannot_keep_are_refused_by_reason(
    mode: str, change: dict[str, int], code: str, reason: str
) -> None:
    """A client refuses a Shamir threshold ``t`` with ``2 t <= n`` or
    ``t > n - 1`` (Bonawitz et al. 2017: ``t`` must exceed half the group and
    be reachable by the peers), and an online floor above the group's size."""
    server, clients = federation(mode)
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    request = {**aggregation.upload_request(NODES[2]), **change}
    with pytest.raises(Refused) as info:
        clients[NODES[2]].plan_upload(request)
    assert (info.value.code, info.value.reason) == (code, reason)


@pytest.mark.parametrize(("length", "bits"), [(0, 32), (LENGTH, 16)])
def test_a_bad_length_or_word_size_alone_is_refused(length: int, bits: int) -> None:
    """The vector must have at least one word and 32- or 64-bit words."""
    request, client = upload_request_for()
    request.update({Key.LENGTH: length, Key.MODULUS_BITS: bits})
    with pytest.raises(
        ProtocolError,
        match=rf"^upload request: length {length} or modulus bits {bits} invalid$",
    ):
        client.plan_upload(request)


def test_thesis_mode_plans_no_shamir_threshold() -> None:
    """Thesis mode has no self-mask, so no Shamir threshold (0); the client's
    online floor is then its own and the server's ``min_online``."""
    server, clients = federation("thesis")
    aggregation = server.begin_round(NODES, length=LENGTH, modulus_bits=32)
    plan = clients[NODES[2]].plan_upload(aggregation.upload_request(NODES[2]))
    assert (plan.threshold, plan.online_floor, plan.mode) == (0, 3, "thesis")


@pytest.mark.parametrize(
    ("length", "bits", "message"),
    [
        (LENGTH, 16, "modulus_bits must be 32 or 64, got 16"),
        (0, 32, "length must be >= 1, got 0"),
    ],
)
def test_a_round_of_bad_words_is_never_opened(
    length: int, bits: int, message: str
) -> None:
    """The server opens a round only for vectors of at least one 32- or 64-bit
    word."""
    server, _ = federation()
    with pytest.raises(ProtocolError, match=f"^{re.escape(message)}$"):
        server.begin_round(NODES, length=length, modulus_bits=bits)


def test_an_unmask_reply_before_the_online_set_is_fixed_is_unexpected() -> None:
    """Before :meth:`close` nobody is online, so an unmask reply is refused as
    unexpected (and counted), never added."""
    aggregation, clients = uploaded()
    reply = {
        Key.STAGE: Stage.UNMASK,
        Key.SESSION: clients[NODES[0]].public_key,
        Key.ROUND: 1,
        Key.GROUP: 0,
    }
    with pytest.raises(
        ProtocolError, match=f"^unexpected unmask reply from node {NODES[0]}$"
    ):
        aggregation.add_unmask(NODES[0], reply)
    assert aggregation.rejected == 1


# ------------------------------------------------------------ server session
def test_a_bad_advertisement_is_named() -> None:
    """An advertisement must be an advertise reply holding a 32-byte key."""
    server, _ = federation()
    with pytest.raises(
        ProtocolError, match=r"^reply from node 7 is not an advertise reply$"
    ):
        server.add_advertisement(
            7, {Key.STAGE: Stage.UPLOAD, Key.PUBLIC_KEY: bytes(32)}
        )
    with pytest.raises(ProtocolError, match=r"^node 7 sent a public key of 31 bytes$"):
        server.add_advertisement(
            7, {Key.STAGE: Stage.ADVERTISE, Key.PUBLIC_KEY: bytes(31)}
        )
    assert 7 not in server.keys


def test_a_seeded_server_draws_the_groups_of_a_round_from_seed_and_round() -> None:
    """Without an explicit ``rng`` a seeded server groups round ``r`` with
    ``default_rng([seed, r])``: the same seed and round give the same groups
    (seed 000 Ch. 4.1: users are split at random into groups)."""
    nodes = list(range(100, 112))
    settings = ProtocolSettings(group_size=4)

    def groups(seed: int | None) -> list[list[int]]:
        server = ServerSession(settings, seed=seed)
        for n in nodes:
            server.add_advertisement(
                n, {Key.STAGE: Stage.ADVERTISE, Key.PUBLIC_KEY: n.to_bytes(32, "big")}
            )
        aggregation = server.begin_round(nodes, length=2, modulus_bits=32)
        return [g.members for g in aggregation.groups]

    expected = settings.groups(nodes, np.random.default_rng([3, 1]))
    assert groups(3) == expected
    assert groups(4) != expected
    # OS entropy: four draws of the 12! / 4!^3 = 34,650 ordered splits all
    # agree with probability 34,650^-3 (about 2e-14)
    draws = {tuple(map(tuple, groups(None))) for _ in range(4)}
    assert len(draws) > 1


def test_a_round_of_nodes_without_keys_has_no_group_and_counts_each_key_once() -> None:
    """Nodes without a session key are excluded, not grouped; the advertised
    key bytes are accounted in the first round after them only."""
    server, _ = federation()
    empty = server.begin_round([7, 8], length=2, modulus_bits=32)
    assert (empty.groups, empty.excluded) == ([], [7, 8])
    assert empty.bytes_up == {"advertise": 32 * len(NODES)}
    assert empty.finish().groups == []
    later = server.begin_round(NODES, length=2, modulus_bits=32)
    assert "advertise" not in later.bytes_up


def test_client_guards_must_be_integers() -> None:
    """A client's floors are whole member counts; a fraction is refused."""
    with pytest.raises(
        ConfigError,
        match=r"^ClientGuards\.min_group must be an integer >= 3, got 3\.5\.$",
    ):
        ClientGuards(min_group=3.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sender", "vector", "message"),
    [
        (
            "a",
            np.zeros(3, np.uint32),
            "upload from 'a' rejected (round 2, group 0): the sender is not an "
            "integer id.",
        ),
        (
            9,
            np.zeros(3, np.uint32),
            "upload from 9 rejected (round 2, group 0): unknown sender, not a "
            "member of this group.",
        ),
        (
            1,
            [0, 0, 0],
            "upload from 1 rejected (round 2, group 0): not a numpy array but list.",
        ),
    ],
)
def test_the_tally_names_a_bad_sender_or_vector(
    sender: Any, vector: Any, message: str
) -> None:
    """The tally adds only members' uploads of its own word vectors (seed 000
    Ch. 4.1: the server sums the group's masked inputs)."""
    tally = GroupTally(round=2, group=0, members=[1, 2, 3, 4], length=3)
    with pytest.raises(ProtocolError, match=f"^{re.escape(message)}$"):
        tally.add_upload(sender, 2, vector)
    assert tally.uploaded == []


def test_a_failed_tally_stays_failed() -> None:
    """Once too few members uploaded, closing again reports the failure; the
    online set is not computed a second time."""
    tally = GroupTally(round=1, group=0, members=[1, 2, 3, 4], length=3)
    tally.add_upload(1, 1, np.zeros(3, np.uint32))
    with pytest.raises(InsufficientParticipants, match="only 1 of 4 members"):
        tally.close()
    with pytest.raises(
        InsufficientParticipants,
        match=r"^round 1, group 0: the group failed with too few online members\.$",
    ):
        tally.close()
    assert tally.failed and tally.closed


def test_an_upload_for_a_round_given_as_text_is_stale() -> None:
    """The round of an upload must be the tally's, as an integer; a string
    that reads as the round is refused."""
    tally = GroupTally(round=2, group=0, members=[1, 2, 3], length=3)
    with pytest.raises(
        ProtocolError,
        match=r"^upload from 1 rejected \(round 2, group 0\): stale or wrong round "
        r"'2', expected 2\.$",
    ):
        tally.add_upload(1, "2", np.zeros(3, np.uint32))  # type: ignore[arg-type]


def test_the_tally_floor_defaults_to_three_and_may_be_one() -> None:
    """A tally releases a sum only with ``min_online`` uploads: 3 by default
    (seed 000 Ch. 4.1), and any floor from 1 up may be chosen."""
    tally = GroupTally(round=1, group=0, members=[1, 2, 3], length=2)
    assert tally.min_online == 3
    for member in (1, 2):
        tally.add_upload(member, 1, np.ones(2, np.uint32))
    with pytest.raises(InsufficientParticipants):
        tally.close()
    lone = GroupTally(round=1, group=0, members=[1, 2], length=2, min_online=1)
    lone.add_upload(2, 1, np.full(2, 5, np.uint32))
    assert lone.close() == ([2], [1])


def test_a_recovery_for_a_non_peer_is_refused() -> None:
    """A recovery covers only peers the user shares a secret with."""
    with pytest.raises(
        ProtocolError,
        match=r"^user 1: ids \[9\] are not peers of this group \(round 1, group 0\)\.$",
    ):
        add_pairwise_masks(
            np.zeros(4, np.uint32), 1, {2: bytes(32)}, round=1, group=0, only=[9]
        )


def test_a_server_without_a_seed_argument_groups_with_seed_zero() -> None:
    """``ServerSession``'s group assignment seed defaults to 0: round ``r``
    draws its groups from ``default_rng([0, r])``."""
    nodes = list(range(100, 112))
    settings = ProtocolSettings(group_size=4)
    server = ServerSession(settings)
    assert server.seed == 0
    for n in nodes:
        server.add_advertisement(
            n, {Key.STAGE: Stage.ADVERTISE, Key.PUBLIC_KEY: n.to_bytes(32, "big")}
        )
    aggregation = server.begin_round(nodes, length=2, modulus_bits=32)
    expected = settings.groups(nodes, np.random.default_rng([0, 1]))
    assert [g.members for g in aggregation.groups] == expected


# ---------------------------------------------------------------- settings
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"min_online": 4.0},
            "min_online must be an integer >= 3 (with two online members each "
            "learns the other's input), got 4.0.",
        ),
        (
            {"threshold": "0.6"},
            "threshold must be a fraction of the group in [0.5, 1) (the Shamir "
            "threshold is floor(threshold * n) + 1), got '0.6'.",
        ),
    ],
)
def test_settings_of_the_wrong_type_are_refused(
    kwargs: dict[str, Any], message: str
) -> None:
    """``min_online`` is a whole count and ``threshold`` a number, even when
    another type would compare or convert."""
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        ProtocolSettings(**kwargs)


def test_a_threshold_too_close_to_one_has_no_decryptable_group() -> None:
    """With ``threshold`` within about 2e-6 of 1 a group needs over a million
    members (``n >= t(n) + 1`` needs ``(1 - threshold) n >= 1``); the search
    stops at 2**20 and says so, printing the threshold in full."""
    settings = ProtocolSettings(threshold=0.99999999)
    with pytest.raises(
        ConfigError,
        match=r"^no group size up to 1048576 is decryptable with mode "
        r"'double-masking' with min_online=3 and threshold=0\.99999999\.$",
    ):
        settings.smallest_group()
    assert ProtocolSettings(threshold=0.999).smallest_group() == 1001


# ------------------------------------------------------------------ masking
def test_a_one_word_vector_is_masked_like_the_first_word_of_a_longer_one() -> None:
    """The pairwise mask is a keystream (seed 000 Ch. 4.1, ``PRG(s_ij)``): a
    one-word vector gets the first word of the longer vector's mask, never
    no mask."""
    shared = {2: bytes(range(32)), 3: bytes(range(1, 33))}
    one = add_pairwise_masks(np.zeros(1, np.uint32), 1, shared, round=1, group=0)
    four = add_pairwise_masks(np.zeros(4, np.uint32), 1, shared, round=1, group=0)
    assert four.all()
    assert one.tolist() == four[:1].tolist()


@pytest.mark.parametrize("mode", ["double-masking", "thesis"])
def test_the_total_adds_up_the_sums_of_every_group(mode: str) -> None:
    """Each group is one run of the protocol; the runner's total is the sum of
    the released group sums (seed 000 Ch. 4.1: groups of 100-1,000 users)."""
    xs = inputs(9, 4, 5)
    result = secure_sum(
        xs,
        fixed_point=FixedPoint.auto(CLIP, 3),
        group_size=3,
        seed=2,
        mode=mode,  # type: ignore[arg-type]
    )
    assert [len(g) for g in result.groups] == [3, 3, 3]
    assert result.failed_groups == []
    np.testing.assert_allclose(result.total, np.sum(xs, axis=0), atol=1e-3)


@pytest.mark.parametrize("mode", ["double-masking", "thesis"])
def test_a_second_unmask_reply_is_a_duplicate_in_either_mode(mode: str) -> None:
    """A member answers the unmask stage once: a second reply is refused
    whether the first revealed shares (double masking, nobody dropped) or
    only sent a recovery (thesis mode, a member dropped)."""
    skip = (NODES[5],) if mode == "thesis" else ()
    aggregation, clients = uploaded(mode, skip=skip)
    node = NODES[0]
    reply = clients[node].unmask(aggregation.unmask_requests()[node])
    aggregation.add_unmask(node, reply)
    with pytest.raises(
        ProtocolError, match=f"^duplicate unmask reply from node {node}$"
    ):
        aggregation.add_unmask(node, reply)
    assert aggregation.rejected == 1
