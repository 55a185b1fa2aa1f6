"""Kernel MMD of generated samples against held-out records (Fig. 5.4's number)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedleak.dpgm.quality import median_bandwidth, mmd2_unbiased, sample_mmd


def mmd2_by_loops(x: np.ndarray, y: np.ndarray, gamma: float) -> float:
    """Gretton et al. 2012, Lemma 6, written out term by term."""

    def k(a: np.ndarray, b: np.ndarray) -> float:
        return math.exp(-gamma * float(np.sum((a - b) ** 2)))

    m, n = len(x), len(y)
    xx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j)
    yy = sum(k(y[i], y[j]) for i in range(n) for j in range(n) if i != j)
    xy = sum(k(x[i], y[j]) for i in range(m) for j in range(n))
    return xx / (m * (m - 1)) + yy / (n * (n - 1)) - 2 * xy / (m * n)


def test_the_estimate_is_lemma_6_term_by_term() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(7, 4)), rng.normal(0.5, 1.3, size=(5, 4))
    for gamma in (0.05, 0.3, 2.0):
        assert mmd2_unbiased(x, y, gamma) == pytest.approx(
            mmd2_by_loops(x, y, gamma), rel=1e-12, abs=1e-15
        )


def test_the_estimate_is_symmetric_and_zero_on_average_for_one_distribution() -> None:
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(300, 5)), rng.normal(size=(300, 5))
    shifted = rng.normal(0.7, 1.0, size=(300, 5))
    gamma = median_bandwidth(x)
    same = mmd2_unbiased(x, y, gamma)
    assert same == pytest.approx(mmd2_unbiased(y, x, gamma), rel=1e-12)
    assert abs(same) < 0.01
    assert mmd2_unbiased(x, shifted, gamma) > 0.1


def test_median_bandwidth_is_one_over_the_median_squared_distance() -> None:
    points = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 1.0]])
    # squared distances of the three pairs: 9, 1, 10 -> median 9
    assert median_bandwidth(points) == pytest.approx(1 / 9)


def test_sample_mmd_averages_disjoint_chunks_with_their_standard_error() -> None:
    rng = np.random.default_rng(5)
    samples, reference = rng.normal(size=(23, 3)), rng.normal(0.4, size=(20, 3))
    estimate = sample_mmd(samples, reference, 0.2, chunks=4)
    assert (estimate.chunks, estimate.per_chunk, estimate.gamma) == (4, 5, 0.2)
    values = [
        mmd2_by_loops(samples[i * 5 : i * 5 + 5], reference[i * 5 : i * 5 + 5], 0.2)
        for i in range(4)
    ]
    assert estimate.mmd2 == pytest.approx(np.mean(values), rel=1e-12)
    assert estimate.se == pytest.approx(np.std(values, ddof=1) / 2, rel=1e-12)
    assert estimate.as_dict()["per_chunk"] == 5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: mmd2_unbiased(np.ones((3, 2)), np.ones((3, 3)), 1.0), "2 features"),
        (lambda: mmd2_unbiased(np.ones((3, 2)), np.ones((3, 2)), 0.0), "gamma"),
        (lambda: mmd2_unbiased(np.ones((1, 2)), np.ones((3, 2)), 1.0), "x: need"),
        (
            lambda: mmd2_unbiased(np.ones((3, 2)), np.full((3, 2), np.nan), 1.0),
            "y: non-finite",
        ),
        (
            lambda: median_bandwidth(np.ones((4, 2))),
            "^reference: the records are all equal; no kernel width$",
        ),
        (lambda: median_bandwidth(np.ones((1, 2))), "^reference: need"),
        (lambda: sample_mmd(np.ones((1, 2)), np.ones((9, 2)), 1.0), "^samples: need"),
        (lambda: sample_mmd(np.ones((9, 2)), np.ones((1, 2)), 1.0), "^reference: need"),
        (lambda: sample_mmd(np.ones((5, 2)), np.ones((9, 2)), 1.0, chunks=3), "fewer"),
        (
            lambda: sample_mmd(np.ones((5, 2)), np.ones((9, 2)), 1.0, chunks=1),
            "^chunks",
        ),
    ],
)
def test_bad_input_is_refused_with_its_name(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_the_smallest_inputs_are_accepted() -> None:
    rng = np.random.default_rng(6)
    two, other = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    assert mmd2_unbiased(two, other, 0.5) == pytest.approx(
        mmd2_by_loops(two, other, 0.5)
    )
    # two chunks of two records each
    estimate = sample_mmd(
        rng.normal(size=(4, 3)), rng.normal(size=(5, 3)), 0.5, chunks=2
    )
    assert (estimate.chunks, estimate.per_chunk) == (2, 2)
    assert (
        sample_mmd(rng.normal(size=(10, 3)), rng.normal(size=(10, 3)), 0.5).chunks == 5
    )
    close = np.array([[0.0, 0.0], [0.3, 0.0], [0.0, 0.4]])  # median distance^2 0.16
    assert median_bandwidth(close) == pytest.approx(1 / 0.16)


def test_single_precision_records_are_scored_in_double_precision() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(40, 30)).astype(np.float32)
    y = (rng.normal(size=(40, 30)) + 0.1).astype(np.float32)
    exact = mmd2_by_loops(x.astype(np.float64), y.astype(np.float64), 0.02)
    assert mmd2_unbiased(x, y, 0.02) == pytest.approx(exact, rel=1e-9)
    assert median_bandwidth(x) == pytest.approx(
        1
        / np.median(
            [
                np.sum((x[i].astype(float) - x[j]) ** 2)
                for i in range(40)
                for j in range(i)
            ]
        ),
        rel=1e-12,
    )
