"""The secure-aggregation protocol: correctness in both modes, dropouts, validation."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import (
    MODES,
    FixedPoint,
    GroupTally,
    InsufficientParticipants,
    KeyPair,
    ProtocolSettings,
    assign_groups,
    blinding,
    mask,
    recovery,
    secure_sum,
)

CLIP = 2.0


def make_keys(
    ids: Sequence[int], seed: int = 0
) -> tuple[dict[int, KeyPair], dict[int, bytes]]:
    rng = np.random.default_rng(seed)
    keys = {i: KeyPair.generate(rng) for i in ids}
    return keys, {i: k.public for i, k in keys.items()}


def inputs(n: int, length: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.5 * CLIP, 1.5 * CLIP, length) for _ in range(n)]


def expected_outcome(
    groups: list[list[int]],
    settings_: ProtocolSettings,
    drop: set[int],
    silent: set[int],
) -> tuple[list[int], list[int]]:
    """Which groups fail and which users are included, from the protocol's rules."""
    failed, included = [], []
    for g, members in enumerate(groups):
        n = len(members)
        online = [i for i in members if i not in drop]
        answering = [i for i in online if i not in silent]
        ok = len(online) >= settings_.online_floor(n)
        if ok and len(online) < n and len(answering) < len(online):
            ok = False  # a recovery is missing
        if ok and settings_.mode == "double-masking":
            t = settings_.shamir_threshold(n)
            # every online member's seed needs t shares from the others
            ok = all(len([j for j in answering if j != i]) >= t for i in online)
        if ok:
            included.extend(online)
        else:
            failed.append(g)
    return failed, sorted(included)


# ------------------------------------------------------ secure sum == plain sum


@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_secure_sum_equals_plain_sum_with_dropouts_at_every_stage(
    data: st.DataObject,
) -> None:
    mode = data.draw(st.sampled_from(MODES), label="mode")
    n = data.draw(st.integers(3, 14), label="n")
    threshold = data.draw(st.sampled_from([0.5, 0.6, 0.75]), label="threshold")
    probe = ProtocolSettings(mode=mode, threshold=threshold)
    floor = probe.smallest_group()
    if n < floor:
        with pytest.raises(ConfigError, match="could ever be decrypted"):
            secure_sum(
                inputs(n, 3, 0),
                fixed_point=FixedPoint.auto(CLIP, n),
                mode=mode,
                threshold=threshold,
            )
        return
    group_size = data.draw(st.none() | st.integers(floor, n), label="group_size")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    length = data.draw(st.integers(1, 40), label="length")
    bits = data.draw(st.sampled_from([32, 64]), label="bits")
    settings_ = ProtocolSettings(mode=mode, threshold=threshold, group_size=group_size)
    groups = settings_.groups(list(range(n)), np.random.default_rng(seed))
    assert all(len(g) >= floor for g in groups)  # never below the floor
    # dropouts before the upload, uploads that come late, silence at unmask
    drop = set(data.draw(st.lists(st.integers(0, n - 1), unique=True), label="drop"))
    late = set(data.draw(st.lists(st.integers(0, n - 1), unique=True), label="late"))
    late -= drop
    silent = set(
        data.draw(st.lists(st.integers(0, n - 1), unique=True), label="silent")
    )
    xs = inputs(n, length, seed)
    fp = FixedPoint.auto(CLIP, max(len(g) for g in groups), modulus_bits=bits)

    result = secure_sum(
        xs,
        fixed_point=fp,
        group_size=group_size,
        drop=drop,
        late=late,
        drop_during_recovery=silent,
        seed=seed,
        round=7,
        mode=mode,
        threshold=threshold,
    )

    gone = drop | late
    assert result.groups == groups
    assert result.dropped == sorted(gone)
    assert result.late == sorted(late)
    failed, included = expected_outcome(groups, settings_, gone, silent - gone)
    assert result.failed_groups == failed
    assert result.included == included
    expected = sum((np.clip(xs[i], -CLIP, CLIP) for i in included), np.zeros(length))
    bound = fp.max_abs_error(max(len(included), 1)) + 1e-12
    assert np.abs(result.total - expected).max() <= bound


@pytest.mark.parametrize("mode", MODES)
def test_secure_sum_counts_clipped_entries(mode: str) -> None:
    xs = inputs(5, 30, 1)
    fp = FixedPoint.auto(CLIP, 5)
    result = secure_sum(xs, fixed_point=fp, seed=1, mode=mode)  # type: ignore[arg-type]
    assert result.clipped == sum(int(np.count_nonzero(np.abs(x) > CLIP)) for x in xs)
    assert result.clipped > 0


# ------------------------------------------------------------ blinding factors


@settings(deadline=None, max_examples=30)
@given(
    ids=st.sets(st.integers(0, 2**64 - 1), min_size=2, max_size=8),
    dtype=st.sampled_from([np.uint32, np.uint64]),
    round_=st.integers(0, 2**64 - 1),
    data=st.data(),
)
def test_blinding_factors_cancel(
    ids: set[int], dtype: type, round_: int, data: st.DataObject
) -> None:
    keys, roster = make_keys(sorted(ids))
    length = 17
    factors = {
        i: blinding(
            i, keys[i], roster, round=round_, group=3, length=length, dtype=dtype
        )
        for i in ids
    }
    for k in factors.values():
        assert k.dtype == dtype and k.shape == (length,)
        assert np.any(k != 0)
    total: np.ndarray = np.zeros(length, dtype)
    for k in factors.values():
        total += k
    np.testing.assert_array_equal(total, 0)
    # the masks of the online users cancel up to their recoveries
    online = data.draw(st.lists(st.sampled_from(sorted(ids)), unique=True, min_size=1))
    gone = sorted(ids - set(online))
    residual: np.ndarray = np.zeros(length, dtype)
    for i in online:
        residual += factors[i]
        residual -= recovery(
            i, keys[i], roster, gone, round=round_, group=3, length=length, dtype=dtype
        )
    np.testing.assert_array_equal(residual, 0)


def test_masks_are_fresh_per_round_and_group() -> None:
    keys, roster = make_keys([1, 2, 3])
    base = blinding(1, keys[1], roster, round=1, group=0, length=8)
    assert not np.array_equal(
        base, blinding(1, keys[1], roster, round=2, group=0, length=8)
    )
    assert not np.array_equal(
        base, blinding(1, keys[1], roster, round=1, group=1, length=8)
    )
    np.testing.assert_array_equal(
        base, blinding(1, keys[1], roster, round=1, group=0, length=8)
    )


def test_masking_validates() -> None:
    keys, roster = make_keys([1, 2, 3])
    encoded = np.zeros(4, np.uint32)
    with pytest.raises(ConfigError):
        mask(encoded.reshape(2, 2), 1, keys[1], roster, round=1, group=0)
    with pytest.raises(ConfigError):
        mask(encoded.astype(np.float32), 1, keys[1], roster, round=1, group=0)
    with pytest.raises(
        ProtocolError,
        match=r"^the roster lists user 1 with a public key that is not this user's own\.$",
    ):
        mask(encoded, 1, keys[2], roster, round=1, group=0)
    with pytest.raises(
        ProtocolError,
        match=r"^invalid public key: a low-order point \(all-zero shared secret\)\.$",
    ):
        mask(encoded, 1, keys[1], {**roster, 3: bytes(32)}, round=1, group=0)
    with pytest.raises(
        ProtocolError,
        match=r"^user 1 is listed as dropped in its own recovery request \(round 1, group 0\)\.$",
    ):
        recovery(1, keys[1], roster, [1], round=1, group=0, length=4)
    with pytest.raises(
        ProtocolError,
        match=r"^user 1: ids \[9\] are not peers of this group \(round 1, group 0\)\.$",
    ):
        recovery(1, keys[1], roster, [2, 9], round=1, group=0, length=4)
    masked = mask(encoded, 1, keys[1], roster, round=1, group=0)
    np.testing.assert_array_equal(
        masked, blinding(1, keys[1], roster, round=1, group=0, length=4)
    )


# ------------------------------------------------------------------ the tally

MEMBERS = [3, 7, 10, 42, 2**64 - 1]
ROUND, GROUP, LENGTH = 5, 2, 64


class Group:
    """Five users with encoded inputs and their masked uploads."""

    def __init__(self, dtype: type = np.uint32) -> None:
        self.keys, self.roster = make_keys(MEMBERS, seed=11)
        rng = np.random.default_rng(12)
        self.encoded: dict[int, np.ndarray] = {
            i: rng.integers(0, 2**32, LENGTH, dtype=np.uint64).astype(dtype)
            for i in MEMBERS
        }
        self.masked = {
            i: mask(
                self.encoded[i], i, self.keys[i], self.roster, round=ROUND, group=GROUP
            )
            for i in MEMBERS
        }
        self.dtype = dtype

    def tally(self, min_online: int = 3) -> GroupTally:
        return GroupTally(
            round=ROUND,
            group=GROUP,
            members=MEMBERS,
            length=LENGTH,
            dtype=self.dtype,
            min_online=min_online,
        )

    def recovery(self, i: int, dropped: Sequence[int]) -> np.ndarray:
        return recovery(
            i,
            self.keys[i],
            self.roster,
            dropped,
            round=ROUND,
            group=GROUP,
            length=LENGTH,
            dtype=self.dtype,
        )

    def plain(self, ids: Sequence[int]) -> np.ndarray:
        total: np.ndarray = np.zeros(LENGTH, self.dtype)
        for i in ids:
            total += self.encoded[i]
        return total

    def finish(self, tally: GroupTally) -> tuple[list[int], np.ndarray]:
        online, dropped = tally.close()
        if dropped:
            for i in online:
                tally.add_recovery(i, ROUND, self.recovery(i, dropped))
        return online, tally.result()


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_tally_without_dropouts(dtype: type) -> None:
    grp = Group(dtype)
    tally = grp.tally()
    for i in MEMBERS:
        tally.add_upload(i, ROUND, grp.masked[i])
    assert tally.close() == (MEMBERS, [])
    assert tally.missing_recoveries == []
    np.testing.assert_array_equal(tally.result(), grp.plain(MEMBERS))


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_tally_with_dropouts(dtype: type) -> None:
    grp = Group(dtype)
    tally = grp.tally()
    online = [3, 42, 2**64 - 1]
    for i in online:
        tally.add_upload(i, ROUND, grp.masked[i])
    assert tally.close() == (online, [7, 10])
    assert tally.missing_recoveries == online
    with pytest.raises(ProtocolError, match=str(online)):
        tally.result()
    for i in online:
        tally.add_recovery(i, ROUND, grp.recovery(i, [7, 10]))
    assert tally.missing_recoveries == []
    np.testing.assert_array_equal(tally.result(), grp.plain(online))
    assert tally.close() == (online, [7, 10])  # idempotent


def _unknown(grp: Group, t: GroupTally) -> tuple[int, Callable[[], None]]:
    return 99, lambda: t.add_upload(99, ROUND, grp.masked[3])


def _duplicate(grp: Group, t: GroupTally) -> tuple[int, Callable[[], None]]:
    return 3, lambda: t.add_upload(3, ROUND, grp.masked[3])


def _stale(grp: Group, t: GroupTally) -> tuple[int, Callable[[], None]]:
    return 7, lambda: t.add_upload(7, ROUND - 1, grp.masked[7])


def _dtype(grp: Group, t: GroupTally) -> tuple[int, Callable[[], None]]:
    return 7, lambda: t.add_upload(7, ROUND, grp.masked[7].astype(np.uint64))


def _length(grp: Group, t: GroupTally) -> tuple[int, Callable[[], None]]:
    return 7, lambda: t.add_upload(7, ROUND, grp.masked[7][:-1])


def _shape(grp: Group, t: GroupTally) -> tuple[int, Callable[[], None]]:
    return 7, lambda: t.add_upload(7, ROUND, grp.masked[7].reshape(8, 8))


def _not_array(grp: Group, t: GroupTally) -> tuple[int, Callable[[], None]]:
    return 7, lambda: t.add_upload(7, ROUND, list(grp.masked[7]))  # type: ignore[arg-type]


MALFORMED = {
    "unknown sender": (_unknown, "unknown sender"),
    "duplicate": (_duplicate, "duplicate"),
    "stale round": (_stale, "round"),
    "wrong dtype": (_dtype, "dtype"),
    "wrong length": (_length, "shape"),
    "wrong shape": (_shape, "shape"),
    "not an array": (_not_array, "numpy array"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_upload_is_refused_and_the_round_goes_on(kind: str) -> None:
    grp = Group()
    tally = grp.tally()
    for i in [3, 10, 42]:
        tally.add_upload(i, ROUND, grp.masked[i])
    make, reason = MALFORMED[kind]
    sender, send = make(grp, tally)
    with pytest.raises(ProtocolError, match=reason) as info:
        send()
    assert str(sender) in str(info.value)
    tally.add_upload(2**64 - 1, ROUND, grp.masked[2**64 - 1])
    online, result = grp.finish(tally)
    assert online == [3, 10, 42, 2**64 - 1]
    np.testing.assert_array_equal(result, grp.plain(online))


def test_late_upload_is_refused() -> None:
    grp = Group()
    tally = grp.tally()
    for i in [3, 10, 42, 2**64 - 1]:
        tally.add_upload(i, ROUND, grp.masked[i])
    tally.close()
    with pytest.raises(
        ProtocolError,
        match=r"^upload from 7 rejected \(round 5, group 2\): late, the online set is already fixed and the recovery masks would unmask it\.$",
    ) as info:
        tally.add_upload(7, ROUND, grp.masked[7])
    assert "7" in str(info.value)
    online, result = grp.finish(tally)
    assert 7 not in online
    np.testing.assert_array_equal(result, grp.plain(online))


def test_too_few_online_is_refused() -> None:
    grp = Group()
    tally = grp.tally()
    for i in [3, 10]:
        tally.add_upload(i, ROUND, grp.masked[i])
    with pytest.raises(
        InsufficientParticipants,
        match=r"^round 5, group 2: only 2 of 5 members uploaded, at least 3 needed; the group's sum is not released\.$",
    ) as info:
        tally.close()
    assert isinstance(info.value, ProtocolError)
    assert tally.failed and tally.closed
    with pytest.raises(InsufficientParticipants):
        tally.close()
    with pytest.raises(
        ProtocolError,
        match=r"^round 5, group 2: the group failed with too few online members; there is no result\.$",
    ):
        tally.result()
    with pytest.raises(
        ProtocolError,
        match=r"^upload from 42 rejected \(round 5, group 2\): the group failed with too few online members\.$",
    ):
        tally.add_upload(42, ROUND, grp.masked[42])
    with pytest.raises(
        ProtocolError,
        match=r"^recovery from 3 rejected \(round 5, group 2\): the group failed with too few online members\.$",
    ):
        tally.add_recovery(3, ROUND, grp.recovery(3, [7, 42, 2**64 - 1]))


def test_min_online_is_configurable() -> None:
    grp = Group()
    tally = grp.tally(min_online=2)
    for i in [3, 10]:
        tally.add_upload(i, ROUND, grp.masked[i])
    online, result = grp.finish(tally)
    assert online == [3, 10]
    np.testing.assert_array_equal(result, grp.plain(online))
    strict = grp.tally(min_online=5)
    for i in MEMBERS[:4]:
        strict.add_upload(i, ROUND, grp.masked[i])
    with pytest.raises(InsufficientParticipants):
        strict.close()
    # a group smaller than min_online can never release a sum
    small = GroupTally(round=1, group=0, members=[1, 2], length=4, min_online=3)
    with pytest.raises(InsufficientParticipants):
        small.close()


def test_recovery_validation() -> None:
    grp = Group()
    tally = grp.tally()
    online, dropped = [3, 10, 42], [7, 2**64 - 1]
    for i in online:
        tally.add_upload(i, ROUND, grp.masked[i])
    good = {i: grp.recovery(i, dropped) for i in online}
    with pytest.raises(
        ProtocolError,
        match=r"^recovery from 3 rejected \(round 5, group 2\): the online set is not fixed yet \(call close\(\) first\)\.$",
    ):
        tally.add_recovery(3, ROUND, good[3])
    with pytest.raises(
        ProtocolError,
        match=r"^round 5, group 2: close\(\) must fix the online set before result\(\)\.$",
    ):
        tally.result()
    tally.close()
    bad: list[tuple[int, Callable[[], None], str]] = [
        (7, lambda: tally.add_recovery(7, ROUND, good[3]), "dropped"),
        (99, lambda: tally.add_recovery(99, ROUND, good[3]), "unknown"),
        (3, lambda: tally.add_recovery(3, ROUND + 1, good[3]), "round"),
        (3, lambda: tally.add_recovery(3, ROUND, good[3].astype(np.uint64)), "dtype"),
        (3, lambda: tally.add_recovery(3, ROUND, good[3][:10]), "shape"),
    ]
    for sender, call, reason in bad:
        with pytest.raises(ProtocolError, match=reason) as info:
            call()
        assert str(sender) in str(info.value)
    tally.add_recovery(3, ROUND, good[3])
    with pytest.raises(
        ProtocolError,
        match=r"^recovery from 3 rejected \(round 5, group 2\): duplicate recovery\.$",
    ) as info:
        tally.add_recovery(3, ROUND, good[3])
    assert "3" in str(info.value)
    assert tally.missing_recoveries == [10, 42]
    with pytest.raises(
        ProtocolError,
        match=r"^round 5, group 2: recoveries missing from \[10, 42\]; the group's sum cannot be unmasked\.$",
    ):
        tally.result()
    tally.add_recovery(10, ROUND, good[10])
    tally.add_recovery(42, ROUND, good[42])
    np.testing.assert_array_equal(tally.result(), grp.plain(online))


def test_recovery_without_dropouts_is_refused() -> None:
    grp = Group()
    tally = grp.tally()
    for i in MEMBERS:
        tally.add_upload(i, ROUND, grp.masked[i])
    tally.close()
    with pytest.raises(
        ProtocolError,
        match=r"^recovery from 3 rejected \(round 5, group 2\): nobody dropped, no recovery is expected\.$",
    ):
        tally.add_recovery(3, ROUND, np.zeros(LENGTH, np.uint32))


def test_wrong_recovery_set_gives_garbage_not_the_sum() -> None:
    # the recoveries must cover exactly the dropped set: a sanity check that
    # the correctness tests above can fail
    grp = Group()
    tally = grp.tally()
    online = [3, 10, 42]
    for i in online:
        tally.add_upload(i, ROUND, grp.masked[i])
    tally.close()
    for i in online:
        tally.add_recovery(i, ROUND, grp.recovery(i, [7]))  # forgets 2**64 - 1
    assert not np.array_equal(tally.result(), grp.plain(online))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"members": [1, 1, 2]},
        {"members": [-1, 2, 3]},
        {"length": 0},
        {"dtype": np.int32},
        {"min_online": 0},
        {"round": -1},
    ],
)
def test_tally_constructor_validates(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {
        "round": 1,
        "group": 0,
        "members": [1, 2, 3],
        "length": 4,
    }
    with pytest.raises(ConfigError):
        GroupTally(**{**args, **kwargs})  # type: ignore[arg-type]


# --------------------------------------------------------------- assign_groups


def test_assign_groups() -> None:
    ids = [5, 2**64 - 1, 17, 3, 99, 4, 8, 1000, 12, 6, 7]
    assert assign_groups(ids, None) == [sorted(ids)]
    for size in range(1, 13):
        groups = assign_groups(ids, size, 3)
        assert len(groups) == math.ceil(len(ids) / size)
        sizes = [len(g) for g in groups]
        assert max(sizes) - min(sizes) <= 1 and max(sizes) <= size
        assert sorted(i for g in groups for i in g) == sorted(ids)
        assert all(g == sorted(g) for g in groups)
    assert assign_groups(ids, 4, 3) == assign_groups(
        list(reversed(ids)), 4, np.random.default_rng(3)
    )
    seeds = {str(assign_groups(ids, 4, s)) for s in range(10)}
    assert len(seeds) > 1  # shuffled
    assert assign_groups([], 3) == []


@settings(deadline=None, max_examples=60)
@given(n=st.integers(1, 60), size=st.integers(1, 30), floor=st.integers(1, 8))
def test_assign_groups_never_goes_below_the_floor(
    n: int, size: int, floor: int
) -> None:
    groups = assign_groups(range(n), max(size, floor), 0, min_size=min(n, floor))
    sizes = [len(g) for g in groups]
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
    assert min(sizes) >= min(n, floor)
    if n // math.ceil(n / max(size, floor)) >= floor:  # the cap is kept when it can be
        assert max(sizes) <= max(size, floor)


def test_the_issue_settings_now_decrypt() -> None:
    # N=4 with groups of at most 3 used to make two groups of 2 (both failed)
    xs = inputs(4, 3, 0)
    result = secure_sum(xs, fixed_point=FixedPoint.auto(CLIP, 4), group_size=3, seed=0)
    assert [len(g) for g in result.groups] == [4]
    assert result.failed_groups == []
    np.testing.assert_allclose(
        result.total, sum(np.clip(x, -CLIP, CLIP) for x in xs), atol=1e-6
    )


@pytest.mark.parametrize(
    ("ids", "size"), [([1, 2, 3], 0), ([1, 2, 3], -2), ([1, 1, 2], 2), ([1, -2], None)]
)
def test_assign_groups_validates(ids: list[int], size: int | None) -> None:
    with pytest.raises(ConfigError):
        assign_groups(ids, size, 0)
    with pytest.raises(
        ConfigError, match=r"^min_size must be an integer >= 1, got 0\.$"
    ):
        assign_groups([1, 2, 3], 2, 0, min_size=0)


# ------------------------------------------------------------------ secure_sum


def test_secure_sum_accounting_thesis() -> None:
    n, length = 10, 100
    xs = inputs(n, length, 0)
    fp = FixedPoint.auto(CLIP, 5)
    result = secure_sum(
        xs, fixed_point=fp, group_size=5, drop=[2], seed=4, mode="thesis"
    )
    assert result.online == [i for i in range(n) if i != 2]
    g = next(k for k, grp in enumerate(result.groups) if 2 in grp)
    others = len(result.groups[g]) - 1
    # Table 4.1's wire format: a 32-byte key up, the group's keys down, one
    # masked vector up; recoveries only in the group with a dropout
    assert result.bytes_up == {
        "advertise": 32 * n,
        "upload": 9 * length * 4,
        "recover": others * length * 4,
    }
    assert result.bytes_down == {
        "keys": 2 * 5 * 5 * 32,
        "roster-ids": 2 * 5 * 5 * 8,
        "online-set": others * 5 * 8,
    }
    assert result.seconds["recover"] > 0
    full = secure_sum(
        xs, fixed_point=FixedPoint.auto(CLIP, n, modulus_bits=64), seed=4, mode="thesis"
    )
    assert full.bytes_up == {"advertise": 32 * n, "upload": n * length * 8}
    assert "online-set" not in full.bytes_down  # no dropout: one exchange
    assert full.seconds["unmask_per_user"] == 0  # no client was asked to unmask


def test_secure_sum_accounting_double_masking() -> None:
    n, length = 6, 50
    xs = inputs(n, length, 0)
    result = secure_sum(xs, fixed_point=FixedPoint.auto(CLIP, n), seed=4)
    sealed, share = 48, 32
    assert result.mode == "double-masking"
    assert result.bytes_up == {
        "advertise": 32 * n,
        "upload": n * length * 4,
        "shares": n * (n - 1) * sealed,
        "revealed-shares": n * (n - 1) * share,
    }
    assert result.bytes_down["forwarded-shares"] == n * (n - 1) * sealed
    assert result.bytes_down["keys"] == 32 * n * n  # as in thesis mode
    assert set(result.seconds) == {
        "mask_per_user",
        "server_sum",
        "unmask_per_user",
        "server_unmask",
        "recover",
    }
    assert result.seconds["server_unmask"] > 0


def test_double_masking_survives_silence_at_unmask_without_dropouts() -> None:
    # no member dropped before the upload: only t of the n - 1 peers must answer
    xs = inputs(7, 10, 2)
    fp = FixedPoint.auto(CLIP, 7)
    t = ProtocolSettings().shamir_threshold(7)  # 4
    result = secure_sum(xs, fixed_point=fp, seed=8, drop_during_recovery=[0, 1])
    assert t <= 7 - 2 - 1
    assert result.failed_groups == [] and result.included == list(range(7))
    # thesis mode needs no unmask stage at all here
    thesis = secure_sum(
        xs, fixed_point=fp, seed=8, drop_during_recovery=[0, 1], mode="thesis"
    )
    assert thesis.failed_groups == []
    # with a dropout both need every online member's recovery
    for mode in MODES:
        failed = secure_sum(
            xs, fixed_point=fp, seed=8, drop=[6], drop_during_recovery=[0], mode=mode
        )
        assert failed.failed_groups == [0]
        assert "recoveries missing" in failed.failures[0]


def test_secure_sum_keeps_shape_and_is_reproducible() -> None:
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-1, 1, (3, 4)) for _ in range(4)]
    fp = FixedPoint.auto(1.0, 4)
    for mode in MODES:
        a = secure_sum(xs, fixed_point=fp, seed=1, mode=mode)
        assert a.total.shape == (3, 4)
        np.testing.assert_allclose(a.total, sum(xs), atol=fp.max_abs_error(4))
        np.testing.assert_array_equal(
            a.total, secure_sum(xs, fixed_point=fp, seed=1, mode=mode).total
        )
        secure = secure_sum(xs, fixed_point=fp, secure_mode=True, mode=mode)
        np.testing.assert_array_equal(secure.total, a.total)  # keys differ, sums not


def test_secure_sum_validates() -> None:
    xs = inputs(4, 3, 0)
    fp = FixedPoint.auto(CLIP, 4)
    with pytest.raises(
        ConfigError,
        match=r"^secure_sum got a seed with secure_mode=True: seeding is refused in secure_mode\.$",
    ):
        secure_sum(xs, fixed_point=fp, seed=1, secure_mode=True)
    with pytest.raises(ConfigError):
        secure_sum([], fixed_point=fp)
    with pytest.raises(ConfigError):
        secure_sum([*xs, np.zeros(4)], fixed_point=fp)
    with pytest.raises(ConfigError):
        secure_sum(xs, fixed_point=fp, drop=[4])
    with pytest.raises(ConfigError):
        secure_sum(xs, fixed_point=fp, drop_during_recovery=[-1])
    with pytest.raises(ConfigError):
        secure_sum(xs, fixed_point=fp, round=0)
    with pytest.raises(
        ConfigError,
        match=r"^min_online must be an integer >= 3 \(with two online members each learns the other's input\), got 2\.$",
    ):
        secure_sum(xs, fixed_point=fp, min_online=2)
    with pytest.raises(
        ConfigError,
        match=r"^secure aggregation needs at least 3 clients per round \(mode 'double-masking' with min_online=3 and threshold=0\.5\), but 2 input\(s\) gives 2; no group could ever be decrypted\.$",
    ):
        secure_sum(xs[:2], fixed_point=fp)
    with pytest.raises(
        ConfigError,
        match=r"^group_size=3 can never be decrypted: mode 'double-masking' with min_online=3 and threshold=0\.7 needs groups of at least 4\.$",
    ):
        secure_sum(xs, fixed_point=fp, threshold=0.7, group_size=3)
    with pytest.raises(
        ConfigError,
        match=r"^fixed point overflow: 30 inputs x weight 1 x clip 8 x scale 2\^28 = 6\.44e\+10 \(\+ 15 for rounding\) exceeds 2\^31; lower the scale or clip, or use modulus_bits=64\.$",
    ):
        secure_sum(inputs(30, 3, 0), fixed_point=FixedPoint(8.0, 2.0**28))


# ------------------------------------------------------------------ sketches


@settings(deadline=None, max_examples=25)
@given(data=st.data())
def test_masked_sketch_sum_is_the_exact_sum_in_both_modes(data: st.DataObject) -> None:
    from fedleak.sketches import CountMinSketch, CountSketch
    from fedleak.sketches.masked import aggregate_sketches

    mode = data.draw(st.sampled_from(MODES), label="mode")
    n = data.draw(st.integers(3, 12), label="n")
    threshold = data.draw(st.sampled_from([0.5, 0.7]), label="threshold")
    settings_ = ProtocolSettings(mode=mode, threshold=threshold)
    if n < settings_.smallest_group():
        return
    group_size = data.draw(
        st.none() | st.integers(settings_.smallest_group(), n), label="group_size"
    )
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    cls = data.draw(st.sampled_from([CountMinSketch, CountSketch]), label="kind")
    rng = np.random.default_rng(seed)
    sketches = []
    for _ in range(n):
        sketch = cls(3, 16, seed=5)
        sketch.update(rng.integers(0, 50, 30), rng.integers(1, 4, 30))
        sketches.append(sketch)
    drop = set(data.draw(st.lists(st.integers(0, n - 1), unique=True), label="drop"))
    late = set(data.draw(st.lists(st.integers(0, n - 1), unique=True), label="late"))
    late -= drop
    silent = set(
        data.draw(st.lists(st.integers(0, n - 1), unique=True), label="silent")
    )
    result = aggregate_sketches(
        sketches,
        group_size=group_size,
        drop=drop,
        late=late,
        drop_during_recovery=silent,
        seed=seed,
        mode=mode,
        threshold=threshold,
    )
    full = ProtocolSettings(mode=mode, threshold=threshold, group_size=group_size)
    failed, included = expected_outcome(
        result.protocol.groups, full, drop | late, silent - drop - late
    )
    assert result.protocol.failed_groups == failed
    assert result.protocol.included == included
    expected = sum(
        (sketches[i].table.astype(np.int64) for i in included),
        np.zeros_like(sketches[0].table, dtype=np.int64),
    )
    np.testing.assert_array_equal(result.sketch.table, expected)


def test_the_issue_sketch_setting_keeps_every_count() -> None:
    # N=5 sketches in groups of at most 3 used to give groups of 3 and 2, and
    # the group of 2 (below the floor) was dropped: 6 of 15 counts lost
    from fedleak.sketches import CountMinSketch
    from fedleak.sketches.masked import aggregate_sketches

    sketches = []
    for user in range(5):
        sketch = CountMinSketch(3, 8, seed=1)
        sketch.update(np.array([user, user + 1, user + 2]), np.ones(3, np.int64))
        sketches.append(sketch)
    result = aggregate_sketches(sketches, group_size=3, seed=0)
    assert result.protocol.failed_groups == []
    assert int(result.sketch.table.sum()) == 3 * 15
