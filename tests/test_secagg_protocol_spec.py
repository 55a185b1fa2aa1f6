"""SecAgg+ protocol pieces against their contracts: every refusal with its
full message, the settings' decryptability rule recomputed from its formula,
the layout's round trip and the self-mask seed's documented hash."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import pytest

from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import FixedPoint, KeyPair, ProtocolSettings, agree, records
from fedleak.secagg.layout import VectorLayout, to_signed
from fedleak.secagg.local import secure_sum
from fedleak.secagg.masking import (
    add_pairwise_masks,
    blinding,
    mask,
    pairwise_secrets,
    recovery,
    self_mask_seed,
)
from fedleak.secagg.tally import GroupTally, assign_groups

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
