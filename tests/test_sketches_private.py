"""Masked sketch aggregation, EC-ElGamal, the private median, recommender, heat maps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.errors import DataError, ProtocolError
from fedleak.sketches import CountMinSketch, CountSketch
from fedleak.sketches import elgamal as eg
from fedleak.sketches.heatmaps import (
    cell_ids,
    ewma_predict,
    heat_maps,
    load_cabspotting,
    prediction_errors,
    sketch_heat_maps,
    synthetic_mobility,
    top_cell_error,
    user_slot_sketches,
)
from fedleak.sketches.masked import aggregate_sketches
from fedleak.sketches.median import (
    PlainRangeCounter,
    bisect_median,
    decryptions_needed,
    private_median,
    range_sensitivity,
    reference_problem,
    value_keys,
    value_sketch,
)
from fedleak.sketches.recommender import (
    cosine_similarity,
    coview_error,
    estimate_coviews,
    population_sketch,
    recommend,
    user_sketch,
    zipf_population,
)

# ---------------------------------------------------------------- masking


def user_sketches(n: int, seed: int, kind: type = CountMinSketch) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        sketch = kind(3, 20, seed=11)
        sketch.update(rng.integers(0, 500, rng.integers(1, 40)))
        out.append(sketch)
    return out


def test_masked_aggregate_is_the_sum_with_groups_and_dropouts() -> None:
    sketches = user_sketches(14, seed=1)
    # the seed's scheme: groups of 4-5 survive a dropout each (double masking
    # needs 4 of 5 and 4 of 4 online)
    result = aggregate_sketches(
        sketches,
        group_size=5,
        drop=[2, 9],
        drop_during_recovery=[],
        seed=3,
        mode="thesis",
    )
    expected = CountMinSketch(3, 20, seed=11)
    for i in result.protocol.included:
        expected.merge(sketches[i])
    assert result.protocol.included == [i for i in range(14) if i not in (2, 9)]
    assert result.sketch == expected
    assert result.protocol.bytes_up["recover"] > 0
    assert result.fixed_point.modulus_bits == 32


def test_a_group_missing_a_recovery_is_left_out() -> None:
    sketches = user_sketches(9, seed=2, kind=CountSketch)
    # the seed's scheme: a group of 3 survives a dropout (double masking needs
    # t + 1 = 3 of 3 online)
    result = aggregate_sketches(
        sketches,
        group_size=3,
        drop=[0],
        drop_during_recovery=[1],
        seed=4,
        mode="thesis",
    )
    assert len(result.protocol.failed_groups) == 1
    expected = CountSketch(3, 20, seed=11)
    for i in result.protocol.included:
        expected.merge(sketches[i])
    assert result.sketch == expected
    assert 0 not in result.protocol.included and 1 not in result.protocol.included


@settings(max_examples=8, deadline=None)
@given(st.integers(5, 9), st.sets(st.integers(0, 8), max_size=2), st.integers(0, 99))
def test_masking_preserves_linearity(n: int, drop: set[int], seed: int) -> None:
    sketches = user_sketches(n, seed=seed)
    gone = {d for d in drop if d < n}
    # n >= 5 keeps 3 online after 2 dropouts; the seed's dropout tolerance
    # (double masking tolerates n - floor(n/2) - 2)
    result = aggregate_sketches(sketches, drop=gone, seed=seed, mode="thesis")
    plain = CountMinSketch(3, 20, seed=11)
    for i in range(n):
        if i not in gone:
            plain.merge(sketches[i])
    assert result.sketch == plain


def test_a_counter_above_max_count_is_refused_before_masking() -> None:
    sketches = user_sketches(4, seed=5)
    with pytest.raises(DataError, match="max_count"):
        aggregate_sketches(sketches, max_count=1, seed=0)


# ---------------------------------------------------------------- ElGamal


@pytest.fixture(scope="module")
def authorities() -> tuple[list[eg.Authority], eg.GroupKey, eg.DiscreteLogTable]:
    rng = np.random.default_rng(0)
    auths = [eg.Authority(k, rng) for k in range(3)]
    return auths, eg.GroupKey.combine(auths), eg.DiscreteLogTable(200, giant_steps=2)


def decrypt(ct: eg.Ciphertext, auths: list[eg.Authority], key, table) -> int:
    return eg.joint_decrypt(ct, [a.decryption_share(ct) for a in auths], key, table)


@settings(max_examples=15, deadline=None)
@given(st.integers(-300, 300), st.integers(-300, 300))
def test_elgamal_is_additively_homomorphic(authorities, a: int, b: int) -> None:
    auths, key, table = authorities
    ca, cb = eg.encrypt([a, b], key)
    assert decrypt(ca + cb, auths, key, table) == a + b


def test_giant_steps_extend_the_table(authorities) -> None:
    auths, key, table = authorities
    assert table.max_value == 200 + 2 * 401
    (ct,) = eg.encrypt([-950], key)
    assert decrypt(ct, auths, key, table) == -950
    (far,) = eg.encrypt([5_000], key)
    with pytest.raises(DataError, match="larger bound"):
        decrypt(far, auths, key, table)


def test_joint_decryption_needs_every_authority(authorities) -> None:
    auths, key, table = authorities
    (ct,) = eg.encrypt([17], key)
    shares = [a.decryption_share(ct) for a in auths[:2]]
    with pytest.raises(ProtocolError, match=r"missing \[2\]"):
        eg.joint_decrypt(ct, shares, key, table)
    # without the third share, B - S_0 - S_1 is not 17 G: no partial secret works
    partial = eg.add(ct.b, eg.neg(eg.add(*(s.share for s in shares))))
    assert partial != eg.base_mul(17)


def test_a_wrong_share_is_detected(authorities) -> None:
    auths, key, table = authorities
    (ct,) = eg.encrypt([5], key)
    shares = [a.decryption_share(ct) for a in auths]
    forged = eg.DecryptionShare(
        1, eg.add(shares[1].share, eg.GENERATOR), shares[1].proof
    )
    with pytest.raises(ProtocolError, match="authority 1 sent a wrong"):
        eg.joint_decrypt(ct, [shares[0], forged, shares[2]], key, table)


def test_received_points_are_validated() -> None:
    (ct,) = eg.encrypt([3], eg.GroupKey.combine([eg.Authority(0)]))
    assert eg.Ciphertext.from_bytes(ct.to_bytes()) == ct
    bad = bytearray(ct.to_bytes())
    bad[0] = 0x05
    with pytest.raises(ProtocolError):
        eg.Ciphertext.from_bytes(bytes(bad))
    with pytest.raises(ProtocolError):
        eg.decode_point(b"\x02" + b"\xff" * 32)  # x >= field prime


def test_precomputed_randomness_gives_the_same_plaintexts(authorities) -> None:
    auths, key, table = authorities
    pool = eg.precompute_randomness(3, key, np.random.default_rng(1))
    cts = eg.encrypt([4, 0, -9], key, randomness=pool)
    assert [decrypt(c, auths, key, table) for c in cts] == [4, 0, -9]


# ---------------------------------------------------------------- median


def exact_count_sketch(low: int, high: int) -> CountSketch:
    """A sketch with no bucket collisions on [low, high]: exact range counts."""
    for seed in range(100):
        sketch = CountSketch(1, 1 << 16, seed=seed)
        pairs = sketch.buckets(value_keys(np.arange(low, high + 1)))[0] >> 1
        if np.unique(pairs).size == pairs.size:
            return sketch
    raise AssertionError("no collision-free seed found")


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 200), min_size=1, max_size=80))
def test_bisection_returns_the_true_median_on_an_exact_sketch(
    values: list[int],
) -> None:
    sketch = value_sketch(np.array(values), exact_count_sketch(0, 200), low=0, high=200)
    result = bisect_median(PlainRangeCounter(sketch), len(values), 1, low=0, high=200)
    assert result.median == sorted(values)[(len(values) + 1) // 2 - 1]
    assert 7 <= result.decryptions <= decryptions_needed(0, 200) == 8


def test_private_median_with_encryption_matches_the_plain_bisection() -> None:
    values = np.array([3, 9, 9, 12, 15, 15, 15, 20, 31, 40])
    result = private_median([values[:4], values[4:]], low=0, high=63, seed=2)
    assert result.decryptions == 6
    assert result.seconds["encrypt_per_sketch"] > 0
    template = CountSketch.from_error(0.05, 0.05, seed=0)
    assert result.median in range(0, 64)
    # same numbers as a plaintext run with the same hashes
    hash_seed = np.random.SeedSequence(2).spawn(4)[0]
    plain = CountSketch(
        template.depth,
        template.width,
        seed=int(hash_seed.generate_state(1, np.uint64)[0] >> np.uint64(1)),
    )
    plain = value_sketch(values, plain, low=0, high=63)
    expected = bisect_median(PlainRangeCounter(plain), 10, plain.depth, low=0, high=63)
    assert result.released == expected.released
    assert result.median == expected.median


def test_laplace_noise_has_the_seed_scale() -> None:
    """Every decrypted count gets Laplace(xi * d / epsilon) (Ch. 4.3.2).

    Depth d = 3 (so a missing or squared factor d shows), xi = 10 decryptions
    for [0, 1000], epsilon = 0.5: scale b = 60. The mean absolute deviation of
    Laplace(b) is b, with standard deviation b; over 400 runs its standard
    error is b / 20, and the tolerance 0.2 b is four of them (b / 3 or 3 b
    would be off by 13 or more).
    """
    values = reference_problem(0)
    depth = 3

    def sketch_count(a: int, b: int) -> int:  # a depth-3 sketch without collisions
        return depth * int(np.count_nonzero((values >= a) & (values < b)))

    rng = np.random.default_rng(0)
    noisy = [
        bisect_median(
            sketch_count, values.size, depth, low=0, high=1000, epsilon=0.5, rng=rng
        )
        for _ in range(400)
    ]
    exact = bisect_median(sketch_count, values.size, depth, low=0, high=1000)
    assert exact.median == np.sort(values)[599]
    first = np.array([r.released[0] for r in noisy]) - exact.released[0]
    scale = 10 * depth / 0.5  # xi * d / epsilon
    assert np.mean(np.abs(first)) == pytest.approx(scale, rel=0.2)
    assert (
        abs(np.mean(first)) < 0.3 * scale
    )  # centred: 4 standard errors (sqrt 2 b / 20)


def test_reference_problem_is_the_seed_mixture() -> None:
    values = reference_problem(1)
    assert values.size == 1200 and values.min() >= 0 and values.max() <= 1000
    assert abs(np.median(values[:1000]) - 300) < 2
    assert 4 < np.std(values[:1000]) < 6
    assert 22 < np.std(reference_problem(1, spread="std")[:1000]) < 28


# ---------------------------------------------------------------- recommender


def test_population_sketch_equals_the_sum_of_user_sketches() -> None:
    pop = zipf_population(40, 30, mean_views=4, seed=3)
    template = CountMinSketch(4, 64, seed=2)
    total = CountMinSketch(4, 64, seed=2)
    for u in range(pop.n_users):
        total.merge(user_sketch(pop.items_of(u), 30, template))
    coviews = pop.coviews()
    assert population_sketch(coviews, template) == total
    est = estimate_coviews(total, 30)
    diag = np.diag(est)
    assert np.all(est <= np.minimum.outer(diag, diag))
    assert np.all(
        estimate_coviews(total, 30)[np.triu_indices(30)] >= coviews[np.triu_indices(30)]
    )


def test_cosine_similarity_is_equation_2_1_and_itemknn_ranks_by_it() -> None:
    c = np.array([[4, 2, 0], [0, 2, 1], [0, 0, 1]])
    sim = cosine_similarity(c)
    assert sim[0, 1] == pytest.approx(2 / np.sqrt(8)) and sim[1, 0] == sim[0, 1]
    assert sim[0, 2] == 0.0 and sim[2, 2] == pytest.approx(1.0)
    assert list(recommend(sim, [1], neighbors=2, top=2)) == [0, 2]


def test_coview_error_over_the_top_entries() -> None:
    true = np.triu(np.arange(16).reshape(4, 4))
    est = true + np.triu(np.ones((4, 4), dtype=int))
    err = coview_error(true, est, top=3)
    assert err["true"] == [15, 11, 10]
    assert err["average_error"] == pytest.approx(1 / true.sum())


# ---------------------------------------------------------------- heat maps


def test_ewma_matches_a_hand_computation() -> None:
    history = np.array([[10.0, 0.0], [20.0, 4.0], [40.0, 8.0]])
    alpha = 0.5
    # r(4) = a(1-a)^2 r(1) + a(1-a) r(2) + a r(3)
    expected = [0.125 * 10 + 0.25 * 20 + 0.5 * 40, 0.25 * 4 + 0.5 * 8]
    assert np.allclose(ewma_predict(history, alpha), expected)


def test_cabspotting_loader_reads_the_public_format(tmp_path) -> None:
    (tmp_path / "new_abboip.txt").write_text(
        "37.75134 -122.39488 0 1213084687\n37.75136 -122.39527 0 1213084659\n"
    )
    (tmp_path / "new_udwadla.txt").write_text(
        "37.78 -122.41 1 1213088300\n40.0 -122.41 1 1213088300\n"
    )
    log = load_cabspotting(tmp_path, grid=10)
    assert log.user.tolist() == [0, 0, 1]  # the point outside the box is dropped
    assert log.slot.tolist() == [0, 0, 1] and log.n_slots == 2
    assert log.cell[0] == cell_ids(np.array([37.75134]), np.array([-122.39488]), 10)[0]
    (tmp_path / "new_bad.txt").write_text("37.7 -122.4 0\n")
    with pytest.raises(DataError, match=r"new_bad\.txt"):
        load_cabspotting(tmp_path)


def test_synthetic_mobility_has_daily_and_weekly_cycles() -> None:
    log = synthetic_mobility(60, 24 * 14, grid=20, seed=1)
    per_slot = heat_maps(log).sum(axis=1)
    hour = per_slot.reshape(14, 24).mean(axis=0)
    assert hour[16] > 3 * hour[4]
    days = per_slot.reshape(14, 24).sum(axis=1)
    assert days[5] < 0.85 * days[2]  # day 5 (weekend) is quieter


def test_user_sketches_sum_to_the_sketched_heat_map() -> None:
    log = synthetic_mobility(12, 30, grid=10, peak_reports=5, seed=2)
    maps = heat_maps(log)
    template = CountMinSketch(3, 16, seed=4)
    users = user_slot_sketches(log, 20, template)
    result = aggregate_sketches(list(users.values()), seed=1)
    est = sketch_heat_maps(maps, template, slots=[20])
    assert np.array_equal(result.sketch.estimate(np.arange(100)), est[20])
    mean, _ = top_cell_error(maps, est, top=10)
    assert mean[20] >= 0 and np.all(est[20] >= maps[20])
    assert prediction_errors(maps, [25, 26], 0.3, window=24).shape == (2,)


def test_range_sensitivity_is_d_without_collisions_and_bounds_every_value() -> None:
    exact = exact_count_sketch(0, 200)
    assert range_sensitivity(exact, 10, 90, domain=(0, 200)) == exact.depth
    small = CountSketch(3, 8, seed=1)
    bound = range_sensitivity(small, 10, 90, domain=(0, 200))
    plain = PlainRangeCounter(value_sketch(np.array([50]), small, low=0, high=200))
    empty = PlainRangeCounter(
        value_sketch(np.array([], dtype=int), small, low=0, high=200)
    )
    for v in range(0, 201, 7):
        one = PlainRangeCounter(value_sketch(np.array([v]), small, low=0, high=200))
        assert abs(one(10, 90) - empty(10, 90)) <= bound
    assert bound >= abs(plain(10, 90))
