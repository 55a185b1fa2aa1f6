"""Tests of fedleak.attacks.membership.embedding (seed 000 Ch. 7.1.3, Table 7.2)."""

from __future__ import annotations

import numpy as np
import pytest
from fedleak.attacks.membership.embedding import (
    EmbeddingMembership,
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
