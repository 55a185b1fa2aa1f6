"""Vectorised Shamir sharing over GF(2**32 - 5), checked against SymPy."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg.shamir import (
    PRIME,
    SECRET_WORDS,
    combine,
    combine_many,
    lagrange_at_zero,
    random_elements,
    split,
)


def reference_coefficients(points: list[int], shares: np.ndarray) -> list[list[int]]:
    """Solve the Vandermonde system mod PRIME with SymPy (an independent route)."""
    t = len(points)
    v = sympy.Matrix(t, t, lambda i, j: pow(int(points[int(i)]), int(j), PRIME))
    inverse = v.inv_mod(PRIME)
    out = []
    for word in range(shares.shape[1]):
        y = sympy.Matrix([int(s) for s in shares[:, word]])
        out.append([int(c) % PRIME for c in inverse * y])
    return out


@settings(deadline=None, max_examples=25)
@given(
    t=st.integers(1, 7),
    extra=st.integers(0, 5),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_split_agrees_with_a_sympy_interpolation(
    t: int, extra: int, seed: int, data: st.DataObject
) -> None:
    rng = np.random.default_rng(seed)
    secret = random_elements(SECRET_WORDS, rng)
    points = data.draw(
        st.lists(
            st.integers(1, PRIME - 1),
            min_size=t + extra,
            max_size=t + extra,
            unique=True,
        )
    )
    shares = split(secret, threshold=t, points=points, rng=rng)
    assert shares.shape == (t + extra, SECRET_WORDS)
    assert shares.dtype == np.uint64 and int(shares.max()) < PRIME
    # any t holders: SymPy recovers a degree < t polynomial whose constant
    # term is the secret, and which also gives every other holder's share
    chosen = data.draw(st.permutations(range(t + extra)))[:t]
    coefficients = reference_coefficients([points[k] for k in chosen], shares[chosen])
    assert [c[0] for c in coefficients] == [int(s) for s in secret]
    for k, x in enumerate(points):
        for word, c in enumerate(coefficients):
            value = sum(ci * pow(x, j, PRIME) for j, ci in enumerate(c)) % PRIME
            assert value == int(shares[k, word])
    # and fedleak's own combine agrees
    np.testing.assert_array_equal(
        combine([points[k] for k in chosen], shares[chosen]), secret
    )


@settings(deadline=None, max_examples=25)
@given(t=st.integers(2, 9), n_extra=st.integers(0, 6), seed=st.integers(0, 2**32 - 1))
def test_any_t_shares_rebuild_and_fewer_do_not(t: int, n_extra: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    secret = random_elements(SECRET_WORDS, rng)
    points = list(range(1, t + n_extra + 1))
    shares = split(secret, threshold=t, points=points, rng=rng)
    for _ in range(4):
        chosen = sorted(rng.choice(len(points), size=t, replace=False))
        got = combine([points[k] for k in chosen], shares[chosen])
        np.testing.assert_array_equal(got, secret)
        # t - 1 shares interpolate a polynomial of lower degree: not the secret
        fewer = chosen[:-1]
        wrong = combine([points[k] for k in fewer], shares[fewer])
        assert not np.array_equal(wrong, secret)


@settings(deadline=None, max_examples=20)
@given(t=st.integers(2, 6), seed=st.integers(0, 2**32 - 1))
def test_t_minus_one_shares_fit_every_secret(t: int, seed: int) -> None:
    # Information-theoretic hiding: for any candidate secret there is a
    # polynomial of degree < t through (0, candidate) and the t - 1 shares,
    # so the shares rule nothing out.
    rng = np.random.default_rng(seed)
    secret = random_elements(SECRET_WORDS, rng)
    points = list(range(1, t))
    shares = split(secret, threshold=t, points=[*points, t], rng=rng)[: t - 1]
    candidate = random_elements(SECRET_WORDS, rng)
    xs = [0, *points]
    for word in range(SECRET_WORDS):
        ys = [int(candidate[word]), *(int(s) for s in shares[:, word])]
        c = reference_coefficients(xs, np.array(ys, dtype=np.uint64)[:, None])[0]
        assert c[0] == int(candidate[word])
        for x, y in zip(points, ys[1:], strict=True):
            assert sum(ci * pow(x, j, PRIME) for j, ci in enumerate(c)) % PRIME == y


def test_t_minus_one_shares_look_uniform_whatever_the_secret() -> None:
    # 4,000 splits of two fixed secrets (t = 3): the first holder's shares
    # have the same, uniform distribution (chi-square on 64 bins, alpha 1e-3).
    rng = np.random.default_rng(7)
    samples = []
    for secret in (
        np.zeros(SECRET_WORDS, np.uint64),
        np.full(SECRET_WORDS, 12345, np.uint64),
    ):
        values = np.concatenate(
            [
                split(secret, threshold=3, points=[1, 2, 3], rng=rng)[0]
                for _ in range(500)
            ]
        )
        counts = np.bincount((values * 64 // PRIME).astype(np.int64), minlength=64)
        assert stats.chisquare(counts).pvalue > 1e-3
        samples.append(counts)
    assert stats.chi2_contingency(np.stack(samples)).pvalue > 1e-3
    # power: shares of t = 1 (the secret itself) are far from uniform
    counts = np.bincount(
        (
            split(np.zeros(SECRET_WORDS, np.uint64), threshold=1, points=[1], rng=rng)[
                0
            ]
            * 64
            // PRIME
        ).astype(np.int64),
        minlength=64,
    )
    assert stats.chisquare(counts).pvalue < 1e-3


def test_lagrange_coefficients_match_sympy() -> None:
    points = [3, 17, 99, 1024, PRIME - 1]
    lam = lagrange_at_zero(points)
    x = sympy.symbols("x")
    for k, xk in enumerate(points):
        basis = sympy.prod(
            [(x - xj) / (xk - xj) for j, xj in enumerate(points) if j != k]
        )
        value = sympy.Rational(basis.subs(x, 0))
        expected = value.p * pow(value.q, -1, PRIME) % PRIME
        assert int(lam[k]) == expected


def test_combine_many_is_per_secret_combine() -> None:
    rng = np.random.default_rng(3)
    secrets = random_elements((5, SECRET_WORDS), rng)
    point_sets = [[1, 2, 3], [2, 4, 6], [5, 1, 9], [7, 8, 9], [1, 3, 5]]
    coefficients = np.stack([lagrange_at_zero(p) for p in point_sets])
    shares = np.stack(
        [
            split(s, threshold=3, points=p, rng=rng)
            for s, p in zip(secrets, point_sets, strict=True)
        ]
    )
    np.testing.assert_array_equal(combine_many(coefficients, shares), secrets)


def test_os_randomness_is_in_range_and_fresh() -> None:
    a, b = random_elements(1000), random_elements(1000)
    assert a.dtype == np.uint64 and int(a.max()) < PRIME
    assert not np.array_equal(a, b)
    seeded = random_elements(10, np.random.default_rng(1))
    np.testing.assert_array_equal(seeded, random_elements(10, np.random.default_rng(1)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"threshold": 0, "points": [1, 2]}, "threshold"),
        ({"threshold": 3, "points": [1, 2]}, "threshold"),
        ({"threshold": True, "points": [1, 2]}, "threshold"),
        ({"threshold": 1, "points": [0, 2]}, "non-zero"),
        ({"threshold": 1, "points": [2, 2]}, "distinct"),
        ({"threshold": 1, "points": [PRIME]}, "lie in"),
    ],
)
def test_split_validates(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        split(np.zeros(SECRET_WORDS, np.uint64), **kwargs)  # type: ignore[arg-type]


def test_combine_refuses_non_field_shares_and_bad_shapes() -> None:
    with pytest.raises(
        ProtocolError, match=r"^a share is not an element of the field\.$"
    ):
        combine([1, 2], np.full((2, SECRET_WORDS), PRIME, dtype=np.uint64))
    with pytest.raises(
        ProtocolError, match=r"^3 points need shares of shape \(3, m\), got \(2, 8\)\.$"
    ):
        combine([1, 2, 3], np.zeros((2, SECRET_WORDS), dtype=np.uint64))
