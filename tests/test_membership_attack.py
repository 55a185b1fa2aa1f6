"""Tests of fedleak.attacks.membership.embedding (seed 000 Ch. 7.1.3, Table 7.2)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from fedleak.attacks.membership.embedding import (
    EmbeddingMembership,
    _fit_scale,
    changed_rows,
    contribution_scale,
    record_bag,
    rounding_tolerance,
    score_membership,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fedleak.errors import ConfigError

VOCAB, DIM = 12, 4


def _gradient(rows: list[int], rng: np.random.Generator) -> np.ndarray:
    g = np.zeros((VOCAB, DIM), np.float32)
    g[rows] = rng.normal(0, 1e-3, (len(rows), DIM)).astype(np.float32)
    return g


def _server_step(theta: np.ndarray, *grads: np.ndarray, lr: float = 0.01) -> np.ndarray:
    """SyncSGD's update: float64 sum, cast back to float32."""
    total = sum(g.astype(np.float64) for g in grads)
    return (theta.astype(np.float64) - lr * total).astype(np.float32)


def test_changed_rows_ignores_padding_and_exact_zeros() -> None:
    update = np.zeros((VOCAB, DIM))
    update[0] = 0.5  # padding row moved (e.g. by DP noise): never a word
    update[3, 1] = 1e-30  # the tiniest change still counts
    update[7] = -2.0
    assert changed_rows(update).tolist() == [3, 7]
    assert changed_rows(update, ignore=()).tolist() == [0, 3, 7]
    assert changed_rows(update, tolerance=1e-3).tolist() == [7]
    with pytest.raises(ConfigError, match="shape"):
        changed_rows(np.zeros(5))


def test_token_seen_only_by_the_adversary_is_not_reported() -> None:
    rng = np.random.default_rng(0)
    theta = rng.uniform(-0.05, 0.05, (VOCAB, DIM)).astype(np.float32)
    theta[0] = 0
    own = _gradient([2, 5, 6, 8, 9], rng)  # 2, 6, 8, 9: adversary only
    target = _gradient([3, 5], rng)  # 5 shared with the adversary
    new = _server_step(theta, target, own)
    attack = EmbeddingMembership(VOCAB)
    bag = attack.observe(
        new.astype(np.float64) - theta, own=own, parameters=(theta, new)
    )
    assert bag.tolist() == [3, 5]
    # without removing its own update the adversary would see its own words
    assert changed_rows(new.astype(np.float64) - theta).tolist() == [2, 3, 5, 6, 8, 9]


def test_a_diverged_round_flags_its_rows_without_an_overflow_warning() -> None:
    rng = np.random.default_rng(0)
    theta = rng.uniform(-0.05, 0.05, (VOCAB, DIM)).astype(np.float32)
    theta[0] = 0
    own = _gradient([2, 5], rng)
    new = theta.copy()
    # the noised sum pushed the rows of both words and the target's (3, 7)
    # to float32's edge
    new[[2, 3, 5, 7]] = np.finfo(np.float32).max
    attack = EmbeddingMembership(VOCAB)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning from fit or cast
        bag = attack.observe(
            new.astype(np.float64) - theta, own=own, parameters=(theta, new)
        )
    # the fitted step explains the adversary's rows; the target's are moved
    assert bag.tolist() == [3, 7]


def test_contribution_scale_recovers_the_server_step() -> None:
    rng = np.random.default_rng(1)
    own = _gradient([1, 2, 3, 4, 5], rng).astype(np.float64)
    others = _gradient([5], rng).astype(np.float64)
    assert contribution_scale(-0.3 * own + others, own) == pytest.approx(-0.3)
    assert contribution_scale(own, np.zeros_like(own)) == 0.0


@settings(max_examples=40, deadline=None)
@given(
    target_rows=st.sets(st.integers(0, VOCAB - 1), max_size=VOCAB),
    adversary_rows=st.sets(st.integers(1, VOCAB - 1), min_size=3, max_size=VOCAB),
    seed=st.integers(0, 2**16),
)
def test_bag_is_exactly_the_other_participants_words(
    target_rows: set[int], adversary_rows: set[int], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    theta = rng.uniform(-0.05, 0.05, (VOCAB, DIM)).astype(np.float32)
    theta[0] = 0
    target = _gradient(sorted(target_rows - {0}), rng)  # padding gets no gradient
    own = _gradient(sorted(adversary_rows), rng)
    # a word shared by every row leaves no row to fit the scale on
    assume(len(adversary_rows - target_rows) >= 2)
    new = _server_step(theta, target, own)
    bag = EmbeddingMembership(VOCAB).observe(
        new.astype(np.float64) - theta, own=own, parameters=(theta, new)
    )
    assert set(bag.tolist()) == target_rows - {0}


def test_bag_is_exact_when_the_adversary_words_are_mostly_shared() -> None:
    # Large batches: most of the adversary's words are also the target's, and
    # the target's gradient on them correlates with the adversary's (the
    # median coefficient would be biased), and one shared word gets a target
    # update of only a few float32 ulps of its parameters.
    rng = np.random.default_rng(7)
    vocab, dim = 400, 16
    theta = rng.uniform(-0.05, 0.05, (vocab, dim)).astype(np.float32)
    theta[0] = 0
    own = np.zeros((vocab, dim), np.float32)
    own[1:301] = rng.normal(0, 1e-3, (300, dim))
    target = np.zeros_like(own)
    shared = np.arange(1, 201)  # two thirds of the adversary's rows
    target[shared] = 0.6 * own[shared] + rng.normal(0, 3e-4, (200, dim))
    target[350:360] = rng.normal(0, 1e-3, (10, dim))  # target-only words
    tiny = 5
    target[tiny] = 0.0
    target[tiny, 0] = 4 * np.spacing(np.float32(0.05)) / 0.01
    new = _server_step(theta, target, own)
    bag = EmbeddingMembership(vocab).observe(
        new.astype(np.float64) - theta, own=own, parameters=(theta, new)
    )
    assert bag.tolist() == sorted([*shared.tolist(), *range(350, 360)])
    assert contribution_scale(
        new.astype(np.float64) - theta,
        own,
        row_tolerance=rounding_tolerance(theta, new),
    ) == pytest.approx(-0.01, rel=1e-4)


def test_decision_rule_is_subset_of_some_bag() -> None:
    attack = EmbeddingMembership(VOCAB)
    attack.observe_bag([2, 3, 4])
    attack.observe_bag([5, 6, 0])  # padding dropped from bags
    assert [b.tolist() for b in attack.bags] == [[2, 3, 4], [5, 6]]
    records = [[2, 4, 0, 0], [5, 6, 6, 0], [4, 5, 0, 0], [0, 0, 0, 0], [11, 0, 0, 0]]
    assert attack.infer(records).tolist() == [True, True, False, False, False]
    scores = attack.evaluate(members=records[:2], non_members=records[2:])
    assert scores.precision == 1.0 and scores.recall == 1.0
    assert scores.num_rounds == 2 and scores.mean_bag_size == 2.5
    scores = attack.evaluate(members=[[4, 5]], non_members=[[2, 3]])
    assert scores.precision == 0.0 and scores.recall == 0.0


def test_record_bag_and_scores() -> None:
    assert record_bag([3, 3, 1, 0, 0]).tolist() == [1, 3]
    s = score_membership([1, 1, 0, 1], [1, 0, 0, 1], num_rounds=1, mean_bag_size=1)
    assert (s.true_positives, s.false_positives, s.true_negatives) == (2, 1, 1)
    assert s.precision == pytest.approx(2 / 3) and s.recall == 1.0
    assert np.isnan(score_membership([0], [0], num_rounds=0, mean_bag_size=0).precision)


def test_rounding_tolerance_is_a_few_ulps_of_each_row() -> None:
    before = np.array([[1.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    after = np.array([[-2.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    tol = rounding_tolerance(before, after, ulps=4)
    assert tol.shape == (2, 1)
    assert tol[0, 0] == pytest.approx(4 * np.spacing(np.float32(2.0)))
    assert 0 < tol[1, 0] < 1e-40


# ------------------------------------------------ domains, defaults, formulas


def test_refusals_name_what_is_wrong() -> None:
    with pytest.raises(ConfigError, match=r"^vocab_size must be >= 1, got 0$"):
        EmbeddingMembership(0)
    with pytest.raises(ConfigError, match=r"^ulps must be >= 0, got -1\.0$"):
        EmbeddingMembership(3, ulps=-1.0)
    EmbeddingMembership(1, ulps=0.0)  # the boundaries are valid
    attack = EmbeddingMembership(VOCAB)
    with pytest.raises(
        ConfigError,
        match=r"^update must be an embedding update of shape \(vocabulary, dim\), got shape \(12,\)$",
    ):
        changed_rows(np.zeros(VOCAB))
    with pytest.raises(
        ConfigError,
        match=r"^the update has 5 rows, the attack expects 12 \(vocab_size\)$",
    ):
        attack.observe(np.zeros((5, DIM)))
    for kwargs in (dict(extra_tolerance=-1.0), dict(own_quantum=-0.5)):
        with pytest.raises(
            ConfigError, match=r"^extra_tolerance and own_quantum must be >= 0, got "
        ):
            attack.observe(np.zeros((VOCAB, DIM)), **kwargs)
    with pytest.raises(
        ConfigError, match=r"^delta \(12, 4\) and own update \(12, 3\) differ in shape$"
    ):
        attack.observe(np.zeros((VOCAB, DIM)), own=np.zeros((VOCAB, 3)))
    with pytest.raises(
        ConfigError, match=r"^delta \(12, 4\) and own update \(12, 3\) differ in shape$"
    ):
        contribution_scale(np.zeros((VOCAB, DIM)), np.zeros((VOCAB, 3)))
    with pytest.raises(
        ConfigError,
        match=r"^parameters must be the embedding matrix before and after the round \(two arrays\), got 1$",
    ):
        attack.observe(
            np.zeros((VOCAB, DIM)),
            own=np.ones((VOCAB, DIM)),
            parameters=[np.zeros((VOCAB, DIM))],
        )
    with pytest.raises(
        ConfigError,
        match=r"^parameters \(12, 3\) / \(12, 3\) differ in shape from the update \(12, 4\)$",
    ):
        attack.observe(
            np.zeros((VOCAB, DIM)),
            own=np.ones((VOCAB, DIM)),
            parameters=[np.zeros((VOCAB, 3)), np.zeros((VOCAB, 3))],
        )
    with pytest.raises(ConfigError, match=r"^bag ids must lie in \[0, 12\)$"):
        attack.observe_bag([12])
    with pytest.raises(ConfigError, match=r"^bag ids must lie in \[0, 12\)$"):
        attack.observe_bag([-1])
    with pytest.raises(ConfigError, match=r"^give at least one parameter array$"):
        rounding_tolerance()
    with pytest.raises(
        ConfigError, match=r"^decisions \(2,\) and truth \(3,\) differ in shape$"
    ):
        score_membership([1, 0], [1, 0, 1], num_rounds=1, mean_bag_size=1.0)
    assert attack.bags == []  # nothing refused was recorded


def test_changed_rows_tolerance_and_ignore() -> None:
    update = np.zeros((5, 2))
    update[0, 0] = 1.0  # padding moves (e.g. DP noise)
    update[1, 1] = 0.5
    update[2, 0] = 0.2
    update[3, 1] = np.nan  # a diverged row counts as changed
    assert changed_rows(update).tolist() == [1, 2, 3]
    assert changed_rows(update, ignore=()).tolist() == [0, 1, 2, 3]
    assert changed_rows(update, ignore=(1, 9, -1)).tolist() == [0, 2, 3]
    assert changed_rows(update, tolerance=0.3).tolist() == [1, 3]
    assert changed_rows(update, tolerance=0.2).tolist() == [1, 3]  # not above it
    per_row = np.array([[0.0], [1.0], [0.0], [0.0], [0.0]])
    assert changed_rows(update, tolerance=per_row).tolist() == [2, 3]
    assert changed_rows(update).dtype == np.int64


def test_rounding_tolerance_is_ulps_of_the_largest_entry_of_each_row() -> None:
    a = np.array([[1.0, -4.0], [0.5, 0.25]], dtype=np.float32)
    b = np.array([[2.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
    expected = 4.0 * np.spacing(np.array([[4.0], [1.0]], dtype=np.float32)).astype(
        np.float64
    )
    np.testing.assert_array_equal(rounding_tolerance(a, b), expected)
    np.testing.assert_array_equal(
        rounding_tolerance(a, ulps=2.0),
        2.0 * np.spacing(np.array([[4.0], [0.5]], dtype=np.float32)).astype(np.float64),
    )


def test_contribution_scale_without_tolerance_is_the_median_coefficient() -> None:
    own = np.zeros((6, 2))
    own[1:6] = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [3.0, 0.0], [0.0, 1.0]]
    delta = -0.1 * own
    delta[4] += [5.0, 0.0]  # another participant moved row 4
    assert contribution_scale(delta, own) == pytest.approx(-0.1)
    assert contribution_scale(delta, np.zeros((6, 2))) == 0.0
    # no coefficient within 0.1% of the median: the median itself
    scattered = own * np.array([[0], [1.0], [2.0], [3.0], [4.0], [5.0]])
    assert contribution_scale(scattered, own) == pytest.approx(3.0)


def test_inference_edge_cases_and_scores() -> None:
    attack = EmbeddingMembership(6, ignore=(0, 5))
    assert attack.infer([[1, 2]]).tolist() == [False]  # no round observed yet
    assert attack.observe_bag([0, 1, 2, 5]).tolist() == [1, 2]
    attack.observe_bag([3])
    assert attack.bags[0].tolist() == [1, 2] and len(attack.bags) == 2
    decisions = attack.infer([[1, 2, 0], [2, 3], [0, 0], [5], [1, 7], [3, 3]])
    assert decisions.tolist() == [True, False, False, False, False, True]
    scores = attack.evaluate([[1, 2], [3]], [[2, 3], [1, 4]])
    assert scores.as_dict() == {
        "precision": 1.0,
        "recall": 1.0,
        "true_positives": 2,
        "false_positives": 0,
        "false_negatives": 0,
        "true_negatives": 2,
        "num_rounds": 2,
        "mean_bag_size": 1.5,
    }
    empty = EmbeddingMembership(6).evaluate([[1]], [[2]])
    assert empty.num_rounds == 0 and empty.mean_bag_size == 0.0
    assert np.isnan(empty.precision) and empty.recall == 0.0
    assert record_bag([[4, 0, 4, 2]], ignore=(2,)).tolist() == [0, 4]
    defaults = EmbeddingMembership(3)
    assert defaults.ulps == 1.0 and defaults.ignore == (0,)


def test_each_input_is_named_when_it_is_not_a_matrix() -> None:
    ok = np.zeros((VOCAB, DIM))
    flat = np.zeros(VOCAB)
    with pytest.raises(ConfigError, match=r"^delta must be an embedding update"):
        contribution_scale(flat, ok)
    with pytest.raises(ConfigError, match=r"^own update must be an embedding update"):
        contribution_scale(ok, flat)
    with pytest.raises(ConfigError, match=r"^parameters must be an embedding update"):
        rounding_tolerance(flat)
    with pytest.raises(ConfigError, match=r"^parameters must be an embedding update"):
        rounding_tolerance(ok, flat)
    attack = EmbeddingMembership(VOCAB)
    with pytest.raises(ConfigError, match=r"^parameters must be an embedding update"):
        attack.observe(ok, own=np.ones((VOCAB, DIM)), parameters=[flat, flat])
    with pytest.raises(ConfigError, match=r"^own update must be an embedding update"):
        attack.observe(ok, own=flat)
    with pytest.raises(ConfigError, match=r"differ in shape from the update"):
        attack.observe(
            ok, own=np.ones((VOCAB, DIM)), parameters=[np.zeros((VOCAB, 3)), ok]
        )
    with pytest.raises(ConfigError, match=r"differ in shape from the update"):
        attack.observe(
            ok, own=np.ones((VOCAB, DIM)), parameters=[ok, np.zeros((VOCAB, 3))]
        )
    assert changed_rows(np.ones((5, 2)), ignore=(5,)).tolist() == [0, 1, 2, 3, 4]


def test_scores_count_every_cell_of_the_confusion_matrix() -> None:
    # integer (not bool) inputs: 1 true positive, 1 false positive,
    # 1 false negative and 2 true negatives
    s = score_membership(
        [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], num_rounds=2, mean_bag_size=3.0
    )
    assert (s.true_positives, s.false_positives) == (1, 1)
    assert (s.false_negatives, s.true_negatives) == (1, 2)
    assert s.precision == 0.5 and s.recall == 0.5
    assert s.num_rounds == 2 and s.mean_bag_size == 3.0


def test_median_scale_pools_the_rows_within_a_thousandth() -> None:
    """Without a tolerance: the rows whose coefficient lies within 0.1% of the
    median are pooled by least squares, sum <d, u> / sum <u, u>."""
    own = np.zeros((6, 2))
    own[1:6] = [[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    factors = np.array([0.0, 1.0, 1.0 + 4e-4, 1.0 - 4e-4, 1.05, 1.0 + 2e-4])
    delta = -0.1 * own * factors[:, None]  # row 4 is off by 5% (someone else's)
    inliers = [1, 2, 3, 5]
    products = (delta[inliers] * own[inliers]).sum()
    weights = (own[inliers] ** 2).sum()
    assert contribution_scale(delta, own) == pytest.approx(
        products / weights, rel=1e-12
    )
    assert contribution_scale(delta, own) != pytest.approx(-0.1, rel=1e-6)


def test_observe_removes_the_adversary_share_without_parameters() -> None:
    """Without the models: the residual delta - c * own (c fitted) leaves only
    the rows the other participants moved; padding stays ignored."""
    rng = np.random.default_rng(3)
    own = _gradient([1, 2, 3, 4], rng).astype(np.float64)
    others = _gradient([0, 4, 7, 9], rng).astype(np.float64)
    attack = EmbeddingMembership(VOCAB)
    bag = attack.observe(-0.01 * own - 0.01 * others, own=own)
    assert bag.tolist() == [4, 7, 9]  # row 0 is padding, 1-3 the adversary's alone
    assert [b.tolist() for b in attack.bags] == [[4, 7, 9]]


def test_inference_boundaries() -> None:
    single = EmbeddingMembership(6, ignore=(5,))
    single.observe_bag([0, 1, 2])
    # one observed round suffices; id 0 is a word when it is not ignored; the
    # attack's own ignore list (5) is dropped from records too
    assert single.infer([[1, 2, 5], [0], [6], [1, 6]]).tolist() == [
        True,
        True,
        False,
        False,
    ]


# ------------------------------------------- secure aggregation, fallbacks, fit


def _fixed_point_step(
    theta: np.ndarray, *grads: np.ndarray, scale: float, lr: float = 0.01
) -> np.ndarray:
    """SyncSGD under secure aggregation: each gradient encoded as
    ``round(g * scale)``, the integer sum decoded, one float32 cast."""
    total = sum(np.round(g.astype(np.float64) * scale) for g in grads) / scale
    return (theta.astype(np.float64) - lr * total).astype(np.float32)


@pytest.mark.parametrize(
    ("scale", "with_parameters"), [(2.0**14, True), (2.0**14, False), (2.0**30, True)]
)
def test_fixed_point_rounding_is_allowed_for_in_units_of_the_own_update(
    scale: float, with_parameters: bool
) -> None:
    """Secure aggregation's fixed point rounds every encoding by up to half a
    step: with ``own_quantum`` = group size * 0.5 / scale the bag is exactly
    the other participant's words, whether the fixed point (2**14) or the
    float32 cast (2**30, which needs the models) is the coarser rounding;
    without it the coarse fixed point's rounding of the adversary's own rows
    shows them as moved (ten seeds)."""
    quantum = 2 * 0.5 / scale
    for seed in range(10):
        rng = np.random.default_rng(seed)
        theta = rng.uniform(-0.05, 0.05, (VOCAB, DIM)).astype(np.float32)
        theta[0] = 0
        own = _gradient([2, 5, 6, 8, 9], rng)
        target = _gradient([3, 5, 10], rng)
        new = _fixed_point_step(theta, own, target, scale=scale)
        delta = new.astype(np.float64) - theta
        params = (theta, new) if with_parameters else ()
        bag = EmbeddingMembership(VOCAB).observe(
            delta, own=own, parameters=params, own_quantum=quantum
        )
        assert bag.tolist() == [3, 5, 10], seed
        if scale < 2.0**20:
            unaware = EmbeddingMembership(VOCAB).observe(
                delta, own=own, parameters=params
            )
            assert {2, 6, 8, 9} & set(unaware.tolist()), seed


def test_fixed_point_bag_is_exact_when_the_adversary_words_are_mostly_shared() -> None:
    """The large-batch case (two thirds of the adversary's words shared with
    correlated updates) under a coarse fixed point: the consensus fit must
    widen its tolerance by the rounding, or no row agrees with the scale."""
    rng = np.random.default_rng(7)
    vocab, dim = 400, 16
    theta = rng.uniform(-0.05, 0.05, (vocab, dim)).astype(np.float32)
    theta[0] = 0
    own = np.zeros((vocab, dim), np.float32)
    own[1:301] = rng.normal(0, 1e-3, (300, dim))
    target = np.zeros_like(own)
    shared = np.arange(1, 201)
    target[shared] = 0.6 * own[shared] + rng.normal(0, 3e-4, (200, dim))
    target[350:360] = rng.normal(0, 1e-3, (10, dim))
    scale = 2.0**14
    new = _fixed_point_step(theta, own, target, scale=scale)
    bag = EmbeddingMembership(vocab).observe(
        new.astype(np.float64) - theta,
        own=own,
        parameters=(theta, new),
        own_quantum=2 * 0.5 / scale,
    )
    assert bag.tolist() == sorted([*shared.tolist(), *range(350, 360)])


def test_a_row_only_others_moved_by_one_ulp_is_reported() -> None:
    """A row the adversary did not touch is tested exactly, even with the
    models given: another participant's change of a single float32 ulp there
    is seen (only the adversary's rows get the ulps tolerance)."""
    rng = np.random.default_rng(5)
    theta = rng.uniform(0.04, 0.05, (VOCAB, DIM)).astype(np.float32)
    theta[0] = 0
    own = _gradient([2, 3, 4, 6], rng)
    lr = 0.01
    new = _server_step(theta, own, lr=lr)
    new[7, 1] = np.nextafter(new[7, 1], np.float32(1.0))  # one ulp up
    bag = EmbeddingMembership(VOCAB).observe(
        new.astype(np.float64) - theta, own=own, parameters=(theta, new)
    )
    assert bag.tolist() == [7]


def test_observe_drops_the_attack_own_ignore_list() -> None:
    update = np.zeros((VOCAB, DIM))
    update[[0, 3, 7]] = 0.25
    assert EmbeddingMembership(VOCAB, ignore=(7,)).observe(update).tolist() == [0, 3]
    with_own = EmbeddingMembership(VOCAB, ignore=(3,)).observe(
        update, own=np.zeros((VOCAB, DIM))
    )
    assert with_own.tolist() == [0, 7]


def test_observe_names_the_update_when_it_is_not_a_matrix() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^delta must be an embedding update of shape \(vocabulary, dim\), "
        r"got shape \(12,\)$",
    ):
        EmbeddingMembership(VOCAB).observe(np.zeros(VOCAB))


def test_an_empty_observed_bag_is_a_round_without_words() -> None:
    attack = EmbeddingMembership(6)
    empty = attack.observe_bag([])
    assert empty.dtype == np.int64 and empty.size == 0
    attack.observe_bag([1, 2])
    assert attack.infer([[1, 2], [3]]).tolist() == [True, False]
    assert attack.evaluate([[1, 2]], [[3]]).mean_bag_size == 1.0


def test_scores_take_any_truthy_decisions_and_labels() -> None:
    """Decisions and labels are read as truth values: floats and integers
    other than 0/1 (e.g. counts of containing bags) count as True."""
    s = score_membership(
        np.array([1.0, 0.0, 2.0, 0.0]),
        np.array([2, 0, 0, 1]),
        num_rounds=1,
        mean_bag_size=1.0,
    )
    assert (s.true_positives, s.false_positives) == (1, 1)
    assert (s.false_negatives, s.true_negatives) == (1, 1)


def test_median_scale_band_includes_its_boundary() -> None:
    """Without a tolerance, a coefficient exactly 0.1% from the median is
    pooled: coefficients 1000, 1000, 1001 (within 1.0 of the median 1000)
    pool to 3001 / 3; 990 and 1010 are left out."""
    own = np.zeros((6, 2))
    own[1:6, 0] = 1.0
    delta = own * np.array([0.0, 1000.0, 1000.0, 1001.0, 990.0, 1010.0])[:, None]
    assert contribution_scale(delta, own) == pytest.approx(3001.0 / 3.0, rel=1e-12)


def test_scale_with_tolerance_pools_the_explained_rows() -> None:
    """The consensus coefficient is refined by the pooled least-squares fit
    over every row it explains: rows equal to ``c * own`` up to rounding
    within the tolerance give sum <d, u> / sum <u, u>, not one row's ratio."""
    rng = np.random.default_rng(9)
    own = rng.normal(0, 1.0, (40, 3))
    tol = np.full((40, 1), 1e-6)
    delta = -0.01 * own + rng.uniform(-0.4e-6, 0.4e-6, own.shape)
    delta[:5] += rng.normal(0, 1e-2, (5, 3))  # five rows others moved
    clean = slice(5, 40)
    pooled = (delta[clean] * own[clean]).sum() / (own[clean] ** 2).sum()
    fitted = contribution_scale(delta, own, row_tolerance=tol)
    assert fitted == pytest.approx(pooled, rel=1e-12)
    ratios = (delta * own).sum(axis=1) / (own**2).sum(axis=1)
    assert np.abs(ratios - fitted).min() > 0  # no single row's coefficient


def test_exact_arithmetic_finds_the_exact_consensus() -> None:
    """Zero tolerance (e.g. integer updates): a row explains a candidate only
    if it equals ``c * own`` exactly, and the exact majority wins."""
    own = np.zeros((5, 2))
    own[1:5] = [[1.0, 2.0], [2.0, 1.0], [3.0, 0.0], [1.0, 1.0]]
    delta = 2.0 * own
    delta[1] = 5.0 * own[1]  # another participant on row 1 (coefficient 5)
    assert contribution_scale(delta, own, row_tolerance=0.0) == 2.0


@pytest.mark.parametrize(
    ("own_values", "coefficients", "tolerances", "expected"),
    [
        # relative widths 1e-3 and 2e-4 -> row 2 (the larger tolerance)
        ((1.0, 1.0), (0.01, 0.5), (1e-5, 1e-4), 0.5),
        # 2e-3 and 1e-4 -> row 2 (the smaller coefficient)
        ((1.0, 1.0), (0.5, 0.1), (1e-3, 1e-5), 0.1),
        # widths tol / |own|: 2.5e-4 and 1e-4, relative 5e-4 and 1e-3 -> row 1
        ((4.0, 1.0), (0.5, 0.1), (1e-3, 1e-4), 0.5),
    ],
)
def test_without_any_agreement_the_relatively_most_precise_row_decides(
    own_values: tuple[float, float],
    coefficients: tuple[float, float],
    tolerances: tuple[float, float],
    expected: float,
) -> None:
    """Every touched row also moved, in a parameter the adversary left alone
    (tolerance 0 there), so no candidate explains any row: the scale is the
    coefficient of the row whose width (its coefficient's rounding bound,
    ``||tol|| / ||own||``) is the smallest relative to the coefficient."""
    own = np.zeros((3, 2))
    own[1:, 0] = own_values
    delta = np.zeros((3, 2))
    delta[1:, 0] = np.multiply(coefficients, own_values)
    delta[1:, 1] = 1.0
    tol = np.zeros((3, 2))
    tol[1:, 0] = tolerances
    assert contribution_scale(delta, own, row_tolerance=tol) == expected


def test_scale_fit_is_refined_twice_and_bounds_its_error() -> None:
    """The two refinements of the consensus fit, by hand (one parameter per
    row, own = 1, so each coefficient is the row's delta and its width its
    tolerance). Candidates: 6.5 (width 0.875) explains all three rows, 7.25
    and 5.25 two each. Pass 1 pools all rows: 19 / 3, with the error bound
    six standard errors, 6 sqrt(sum tol^2 / 12) / 3 = 0.568; pass 2 keeps
    only row 0 (7.25 and 5.25 lie 0.92 and 1.08 away, beyond 0.25 + 0.568
    and 0.375 + 0.568): scale 6.5, bound 6 sqrt(0.875^2 / 12)."""
    own = np.ones((3, 1))
    delta = np.array([[6.5], [7.25], [5.25]])
    tol = np.array([[0.875], [0.25], [0.375]])
    scale, bound = _fit_scale(delta, own, tol)
    assert scale == 6.5
    assert bound == pytest.approx(6.0 * np.sqrt(0.875**2 / 12.0), rel=1e-12)


@pytest.mark.parametrize("rank", [0, 1, 2, 60, 126])
def test_every_row_is_a_candidate_up_to_128_touched_rows(rank: int) -> None:
    """128 touched rows: two agree on the scale 0.5, each of the other 126
    also moved in a parameter the adversary left alone (tolerance 0 there),
    so it explains no row. Every row's coefficient is tried, so the pair is
    found wherever it ranks in precision (tolerance / |coefficient|)."""
    rows = 128
    own = np.zeros((rows, 2))
    own[:, 0] = 1.0
    delta = np.zeros((rows, 2))
    delta[:, 0] = 1.0 + np.arange(rows)  # distinct coefficients
    delta[:, 1] = 1.0
    relative = 1e-6 * (1.0 + np.arange(rows))  # row k has precision rank k
    pair = [rank, rank + 1]
    delta[pair] = [0.5, 0.0]
    tol = np.zeros((rows, 2))
    tol[:, 0] = relative * np.abs(delta[:, 0])
    assert contribution_scale(delta, own, row_tolerance=tol) == 0.5


def test_an_imprecise_candidate_does_not_win_the_consensus() -> None:
    """A trained model's round at a large batch, in miniature. 30 rows only the
    adversary touched agree on the step -0.3; 40 rows the other participant
    moved too scatter; one row barely moved (own update 1e-9), so its
    coefficient (-0.15) is nearly unknown and its candidate, with its width
    added to every row's tolerance, explains all 71 rows. Counting alone
    picked it and the refined fit then explained no row; the deepest overlap
    of the rows' intervals finds the step."""
    rng = np.random.default_rng(7)
    own = rng.normal(0, 1e-2, (71, 4))
    delta = -0.3 * own
    delta[30:70] += -0.3 * rng.normal(0, 1e-2, (40, 4))  # the other's rows
    own[70] = 1e-9
    delta[70] = -0.15 * own[70]
    tol = np.full(own.shape, 1e-9)
    delta[:30] += rng.uniform(-0.5e-9, 0.5e-9, (30, 4))  # rounding, within tol
    scale = contribution_scale(delta, own, row_tolerance=tol)
    assert scale == pytest.approx(-0.3, rel=1e-6)
    # the 30 rows (and only they) are explained: the bag holds the 40 others
    residual = np.abs(delta - scale * own) <= tol
    assert residual[:30].all() and not residual[30:70].all(axis=1).any()


def test_the_deepest_overlap_is_the_first_segment_most_intervals_cover() -> None:
    from fedleak.attacks.membership.embedding import _deepest_overlap

    lo = np.array([0.0, 1.0, 2.0, 5.0, 5.5])
    hi = np.array([3.0, 4.0, 2.5, 6.0, 7.0])
    assert _deepest_overlap(lo, hi) == (2.25, 0.25)  # [2, 2.5] in all three
    # closed intervals: touching ends overlap; the first deepest segment wins
    assert _deepest_overlap(np.array([0.0, 1.0]), np.array([1.0, 2.0])) == (1.0, 0.0)
    assert _deepest_overlap(np.array([4.0, 0.0]), np.array([5.0, 1.0])) == (0.5, 0.5)
    # a deeper cluster after a shallow one: each end lowers the depth by one
    lo, hi = np.array([0.0, 2.0, 2.5]), np.array([1.0, 3.0, 3.5])
    assert _deepest_overlap(lo, hi) == (2.75, 0.25)


@pytest.mark.parametrize("rank", [0, 1, 60, 126])
def test_the_consensus_wins_where_the_intervals_mislead(rank: int) -> None:
    """126 rows whose coefficient intervals all cover 3.0, each also moved in
    a parameter the adversary left alone: the deepest overlap is 3.0, which
    explains no row. Two rows agree on 0.5; every one of the 128 rows is a
    candidate of the consensus, so the pair is found at any precision rank."""
    rows = 128
    own = np.zeros((rows, 2))
    own[:, 0] = 1.0
    delta = np.zeros((rows, 2))
    delta[:, 0] = 3.0
    delta[:, 1] = 1.0
    pair = [rank, rank + 1]
    delta[pair] = [0.5, 0.0]
    tol = np.zeros((rows, 2))
    tol[:, 0] = 1e-6 * (1.0 + np.arange(rows)) * np.abs(delta[:, 0])
    assert contribution_scale(delta, own, row_tolerance=tol) == 0.5


def test_a_row_with_a_vanishing_coefficient_raises_no_overflow_warning() -> None:
    """Its relative width overflows to infinity (sorted last, as meant), silently."""
    own = np.array([[1.0], [1e-9]])
    delta = np.array([[0.5], [0.0]])
    tol = np.array([[1e-12], [1.0]])  # width 1e9, over 1e-300: overflows
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert contribution_scale(delta, own, row_tolerance=tol) == 0.5
