"""The pairwise-mask protocol of fedleak.secagg: correctness, dropouts, validation."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import (
    FixedPoint,
    GroupTally,
    InsufficientParticipants,
    KeyPair,
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


def valid_group_sizes(n: int) -> list[int]:
    # group sizes that give every group at least 3 members
    return [g for g in range(3, n + 1) if n // math.ceil(n / g) >= 3]


# ------------------------------------------------------ secure sum == plain sum


@settings(deadline=None, max_examples=30)
@given(data=st.data())
def test_secure_sum_equals_plain_sum(data: st.DataObject) -> None:
    n = data.draw(st.integers(3, 12), label="n")
    group_size = data.draw(
        st.none() | st.sampled_from(valid_group_sizes(n)), label="group_size"
    )
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    length = data.draw(st.integers(1, 40), label="length")
    bits = data.draw(st.sampled_from([32, 64]), label="bits")
    groups = assign_groups(range(n), group_size, seed)
    drop: set[int] = set()
    for g in groups:  # leave at least 3 online in every group
        drop.update(
            data.draw(st.lists(st.sampled_from(g), unique=True, max_size=len(g) - 3))
        )
    xs = inputs(n, length, seed)
    fp = FixedPoint.auto(CLIP, max(len(g) for g in groups), modulus_bits=bits)

    result = secure_sum(
        xs, fixed_point=fp, group_size=group_size, drop=drop, seed=seed, round=7
    )

    online = sorted(set(range(n)) - drop)
    assert result.groups == groups
    assert result.failed_groups == []
    assert result.online == result.included == online
    assert result.dropped == sorted(drop)
    expected = sum(np.clip(xs[i], -CLIP, CLIP) for i in online)
    assert (
        np.abs(result.total - expected).max() <= fp.max_abs_error(len(online)) + 1e-12
    )
    assert result.clipped == sum(
        int(np.count_nonzero(np.abs(xs[i]) > CLIP)) for i in online
    )


@settings(deadline=None, max_examples=30)
@given(data=st.data())
def test_failed_groups_are_excluded_exactly(data: st.DataObject) -> None:
    n = data.draw(st.integers(3, 12), label="n")
    group_size = data.draw(st.none() | st.integers(1, n), label="group_size")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    groups = assign_groups(range(n), group_size, seed)
    drop = set(data.draw(st.lists(st.integers(0, n - 1), unique=True), label="drop"))
    silent = set(
        data.draw(st.lists(st.integers(0, n - 1), unique=True), label="silent")
    )
    xs = inputs(n, 5, seed)
    fp = FixedPoint.auto(CLIP, n)

    result = secure_sum(
        xs,
        fixed_point=fp,
        group_size=group_size,
        drop=drop,
        drop_during_recovery=silent,
        seed=seed,
    )

    failed, included = [], []
    for g, members in enumerate(groups):
        online = [i for i in members if i not in drop]
        dropped = len(online) < len(members)
        if len(online) < 3 or (dropped and any(i in silent for i in online)):
            failed.append(g)
        else:
            included.extend(online)
    assert result.failed_groups == failed
    assert result.included == sorted(included)
    expected = sum((np.clip(xs[i], -CLIP, CLIP) for i in included), np.zeros(5))
    assert np.abs(result.total - expected).max() <= fp.max_abs_error(n) + 1e-12


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
    with pytest.raises(ProtocolError, match="not this user's own"):
        mask(encoded, 1, keys[2], roster, round=1, group=0)
    with pytest.raises(ProtocolError, match="invalid public key"):
        mask(encoded, 1, keys[1], {**roster, 3: bytes(32)}, round=1, group=0)
    with pytest.raises(ProtocolError, match="listed as dropped"):
        recovery(1, keys[1], roster, [1], round=1, group=0, length=4)
    with pytest.raises(ProtocolError, match=r"\[9\]"):
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
    with pytest.raises(ProtocolError, match="late") as info:
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
    with pytest.raises(InsufficientParticipants, match="only 2 of 5 members") as info:
        tally.close()
    assert isinstance(info.value, ProtocolError)
    assert tally.failed and tally.closed
    with pytest.raises(InsufficientParticipants):
        tally.close()
    with pytest.raises(ProtocolError, match="failed"):
        tally.result()
    with pytest.raises(ProtocolError, match="failed"):
        tally.add_upload(42, ROUND, grp.masked[42])
    with pytest.raises(ProtocolError, match="failed"):
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
    with pytest.raises(ProtocolError, match="close"):
        tally.add_recovery(3, ROUND, good[3])
    with pytest.raises(ProtocolError, match="close"):
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
    with pytest.raises(ProtocolError, match="duplicate") as info:
        tally.add_recovery(3, ROUND, good[3])
    assert "3" in str(info.value)
    assert tally.missing_recoveries == [10, 42]
    with pytest.raises(ProtocolError, match=r"\[10, 42\]"):
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
    with pytest.raises(ProtocolError, match="nobody dropped"):
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


@pytest.mark.parametrize(
    ("ids", "size"), [([1, 2, 3], 0), ([1, 2, 3], -2), ([1, 1, 2], 2), ([1, -2], None)]
)
def test_assign_groups_validates(ids: list[int], size: int | None) -> None:
    with pytest.raises(ConfigError):
        assign_groups(ids, size, 0)


# ------------------------------------------------------------------ secure_sum


def test_secure_sum_accounting() -> None:
    n, length = 10, 100
    xs = inputs(n, length, 0)
    fp = FixedPoint.auto(CLIP, 5)
    result = secure_sum(xs, fixed_point=fp, group_size=5, drop=[2], seed=4)
    assert result.online == [i for i in range(n) if i != 2]
    g = next(k for k, grp in enumerate(result.groups) if 2 in grp)
    others = len(result.groups[g]) - 1
    assert result.bytes_up == {
        "advertise": 32 * n,
        "upload": 9 * length * 4,
        "recover": others * length * 4,
    }
    assert result.bytes_down == {
        "keys": 2 * 5 * 5 * 32,
        "online-set": 8 * others * others,
    }
    assert set(result.seconds) == {"mask_per_user", "server_sum", "recover"}
    assert all(v >= 0 for v in result.seconds.values())
    assert result.seconds["recover"] > 0
    # no dropouts, 64-bit words: no recovery traffic, twice the upload bytes
    fp64 = FixedPoint.auto(CLIP, n, modulus_bits=64)
    full = secure_sum(xs, fixed_point=fp64, seed=4)
    assert full.bytes_up == {
        "advertise": 32 * n,
        "upload": n * length * 8,
        "recover": 0,
    }
    assert full.bytes_down == {"keys": 32 * n * n, "online-set": 0}
    assert full.seconds["recover"] == 0


def test_secure_sum_drop_during_recovery_fails_only_that_group() -> None:
    xs = inputs(9, 20, 1)
    fp = FixedPoint.auto(CLIP, 3)
    groups = assign_groups(range(9), 3, 8)
    drop = [groups[0][0]]
    silent = [groups[0][1], groups[1][0]]  # group 1 has no dropouts: needs no recovery
    result = secure_sum(
        xs, fixed_point=fp, group_size=3, seed=8, drop=drop, drop_during_recovery=silent
    )
    assert result.failed_groups == [0]
    assert result.included == sorted(groups[1] + groups[2])
    expected = sum(np.clip(xs[i], -CLIP, CLIP) for i in result.included)
    assert np.abs(result.total - expected).max() <= fp.max_abs_error(6) + 1e-12


def test_secure_sum_keeps_shape_and_is_reproducible() -> None:
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-1, 1, (3, 4)) for _ in range(4)]
    fp = FixedPoint.auto(1.0, 4)
    a = secure_sum(xs, fixed_point=fp, seed=1)
    assert a.total.shape == (3, 4)
    np.testing.assert_allclose(a.total, sum(xs), atol=fp.max_abs_error(4))
    np.testing.assert_array_equal(a.total, secure_sum(xs, fixed_point=fp, seed=1).total)
    secure = secure_sum(xs, fixed_point=fp, secure_mode=True)
    np.testing.assert_array_equal(
        secure.total, a.total
    )  # keys differ, the sum does not


def test_secure_sum_small_groups_fail() -> None:
    xs = inputs(4, 3, 0)
    result = secure_sum(xs, fixed_point=FixedPoint.auto(CLIP, 4), group_size=3, seed=0)
    assert [len(g) for g in result.groups] == [2, 2]
    assert result.failed_groups == [0, 1]
    assert result.included == []
    np.testing.assert_array_equal(result.total, 0)


def test_secure_sum_validates() -> None:
    xs = inputs(4, 3, 0)
    fp = FixedPoint.auto(CLIP, 4)
    with pytest.raises(ConfigError, match="seeding is refused"):
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
        secure_sum(xs, fixed_point=fp, round=-1)
    with pytest.raises(ConfigError, match="fixed point overflow"):
        secure_sum(inputs(30, 3, 0), fixed_point=FixedPoint(8.0, 2.0**28))
