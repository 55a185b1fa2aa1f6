"""Fixed-point encoding of fedleak.secagg."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.errors import ConfigError
from fedleak.secagg import FixedPoint


def test_round_trip_within_half_a_step() -> None:
    fp = FixedPoint(clip=4.0, scale=2.0**20)
    x = np.random.default_rng(0).uniform(-4, 4, 10_000)
    encoded, clipped = fp.encode(x)
    assert encoded.dtype == np.uint32 and encoded.shape == (10_000,)
    assert clipped == 0
    err = np.abs(fp.decode(encoded) - x)
    assert err.max() <= 0.5 / fp.scale
    assert err.max() > 0  # the bound is not vacuous: rounding happens


@settings(deadline=None, max_examples=50)
@given(
    values=st.lists(
        st.floats(-10, 10, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=30,
    ),
    bits=st.sampled_from([32, 64]),
    k=st.integers(0, 24),
)
def test_round_trip_property(values: list[float], bits: int, k: int) -> None:
    fp = FixedPoint(clip=10.0, scale=2.0**k, modulus_bits=bits)
    x = np.array(values)
    encoded, _ = fp.encode(x)
    assert np.all(np.abs(fp.decode(encoded) - x) <= 0.5 / fp.scale)


def test_negatives_wrap_in_twos_complement() -> None:
    fp = FixedPoint(clip=10.0, scale=1.0)
    encoded, _ = fp.encode(np.array([-1.0, -2.0, 0.0, 3.0]))
    np.testing.assert_array_equal(encoded, [2**32 - 1, 2**32 - 2, 0, 3])
    fp64 = FixedPoint(clip=10.0, scale=1.0, modulus_bits=64)
    encoded64, _ = fp64.encode(np.array([-1.0, 5.0]))
    assert encoded64.dtype == np.uint64
    np.testing.assert_array_equal(encoded64, np.array([2**64 - 1, 5], dtype=np.uint64))
    # a modular sum of negatives and positives decodes to the signed sum
    a, _ = fp.encode(np.array([-7.0, 4.0]))
    b, _ = fp.encode(np.array([3.0, -9.0]))
    np.testing.assert_array_equal(fp.decode(a + b), [-4.0, -5.0])


def test_clipping_is_counted() -> None:
    fp = FixedPoint(clip=1.0, scale=2.0**10)
    encoded, clipped = fp.encode(np.array([[-3.0, 0.5], [1.0, 1.5]]))
    assert clipped == 2  # -3 and 1.5; exactly 1.0 is not clipped
    np.testing.assert_allclose(fp.decode(encoded), [-1.0, 0.5, 1.0, 1.0])


def test_weight_multiplies_after_clipping() -> None:
    fp = FixedPoint(clip=1.0, scale=2.0**8)
    encoded, clipped = fp.encode(np.array([0.5, 2.0]), weight=3.0)
    assert clipped == 1
    np.testing.assert_allclose(fp.decode(encoded), [1.5, 3.0])
    zero, _ = fp.encode(np.array([0.5]), weight=0)
    assert zero[0] == 0


def test_capacity_error_names_the_bound() -> None:
    fp = FixedPoint(clip=8.0, scale=2.0**28)
    with pytest.raises(ConfigError) as info:
        fp.check_capacity(30)
    message = str(info.value)
    assert "fixed point overflow" in message
    assert "30 inputs" in message and "clip 8" in message and "2^28" in message
    assert "2^31" in message and "modulus_bits=64" in message
    FixedPoint(clip=8.0, scale=2.0**28, modulus_bits=64).check_capacity(30)
    with pytest.raises(
        ConfigError,
        match=r"^fixed point overflow: 8589934592 inputs x weight 1 x clip 8 x scale 2\^28 = 1\.84e\+19 \(\+ 4\.29497e\+09 for rounding\) exceeds 2\^63; lower the scale or clip\.$",
    ):
        FixedPoint(clip=8.0, scale=2.0**28, modulus_bits=64).check_capacity(2**33)


def test_capacity_boundary_is_exact() -> None:
    # capacity holds iff n * (clip * scale + 0.5) < 2^31
    fp = FixedPoint(clip=1.0, scale=2.0**20)
    n_max = math.floor((2**31 - 1) / (2**20 + 0.5))
    fp.check_capacity(n_max)
    with pytest.raises(ConfigError):
        fp.check_capacity(n_max + 1)
    # the bound is real: n_max + 1 inputs at the clip would overflow the decode
    big = np.full(1, 1.0)
    one, _ = fp.encode(big)
    total = np.zeros(1, np.uint32)
    for _ in range(n_max + 1):
        total += one
    assert fp.decode(total)[0] < 0  # wrapped to a negative number


def test_capacity_counts_rounding() -> None:
    # 4 x (2^29 - 0.25) < 2^31, but each value rounds up to 2^29 and the sum
    # of four wraps: the + 0.5 per input of the bound is needed.
    fp = FixedPoint(clip=1.0, scale=2.0**29 - 0.25)
    with pytest.raises(
        ConfigError,
        match=r"^fixed point overflow: 4 inputs x weight 1 x clip 1 x scale 5\.36871e\+08 = 2\.15e\+09 \(\+ 2 for rounding\) exceeds 2\^31; lower the scale or clip, or use modulus_bits=64\.$",
    ):
        fp.check_capacity(4)
    fp.check_capacity(3)
    one, _ = fp.encode(np.ones(1))
    assert fp.decode(one * np.uint32(4))[0] < 0


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize(
    ("clip", "n", "weight"),
    [(1.0, 10, 1.0), (8.0, 30, 1.0), (0.3, 100, 50.0), (1e-3, 7, 1.0)],
)
def test_auto_picks_the_largest_fitting_power_of_two(
    bits: int, clip: float, n: int, weight: float
) -> None:
    fp = FixedPoint.auto(clip, n, max_weight=weight, modulus_bits=bits)
    assert fp.modulus_bits == bits and fp.clip == clip
    k = math.log2(fp.scale)
    assert k == int(k) and k >= 0
    fp.check_capacity(n, weight)
    with pytest.raises(ConfigError):
        FixedPoint(clip, fp.scale * 2, bits).check_capacity(n, weight)


def test_auto_refuses_when_scale_one_overflows() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^fixed point overflow: 4 inputs x weight 1 x clip 2\^30 x scale 1 = 4\.29e\+09 \(\+ 2 for rounding\) exceeds 2\^31; lower the scale or clip, or use modulus_bits=64\.$",
    ):
        FixedPoint.auto(2.0**30, 4)
    with pytest.raises(ConfigError):
        FixedPoint.auto(1.0, 4, max_weight=0)


def test_64_bit_with_weights_in_the_thousands() -> None:
    n = 50
    weights = np.random.default_rng(1).integers(1000, 6000, n).astype(float)
    fp = FixedPoint.auto(1.0, n, max_weight=6000, modulus_bits=64)
    assert fp.scale >= 2.0**30
    rng = np.random.default_rng(2)
    xs = [rng.uniform(-1, 1, 100) for _ in range(n)]
    total = np.zeros(100, np.uint64)
    for w, x in zip(weights, xs, strict=True):
        encoded, _ = fp.encode(x, weight=w)
        total += encoded
    expected = sum(w * x for w, x in zip(weights, xs, strict=True))
    assert np.abs(fp.decode(total) - expected).max() <= fp.max_abs_error(n) + 1e-9
    # in 32 bits the same job does not fit with any useful precision
    with pytest.raises(ConfigError):
        FixedPoint(1.0, 2.0**20).check_capacity(n, 6000)


def reference_encode(fp: FixedPoint, x: np.ndarray, weight: float) -> np.ndarray:
    """The encoding written out: clip, weight, scale, round, wrap mod 2**b."""
    scaled = np.clip(x.astype(np.float64), -fp.clip, fp.clip) * weight * fp.scale
    return np.rint(scaled).astype(np.int64).astype(fp.dtype)


@settings(deadline=None, max_examples=80)
@given(
    values=st.lists(
        st.floats(-50, 50, allow_nan=False, allow_infinity=False), max_size=40
    ),
    bits=st.sampled_from([32, 64]),
    clip=st.floats(0.01, 20),
    weight=st.sampled_from([0.0, 1.0, 2.5, 37.0]),
    scale=st.floats(1.0, 2.0**20),
)
def test_encode_equals_the_written_out_formula(
    values: list[float], bits: int, clip: float, weight: float, scale: float
) -> None:
    fp = FixedPoint(clip=clip, scale=scale, modulus_bits=bits)
    x = np.array(values, dtype=np.float64)
    encoded, clipped = fp.encode(x, weight)
    np.testing.assert_array_equal(encoded, reference_encode(fp, x, weight))
    assert clipped == int(np.count_nonzero(np.abs(x) > clip))


def test_encode_reaches_both_ends_of_the_signed_word() -> None:
    # the largest value the capacity check allows: (2**31 - 1) + 0.5 < 2**31
    fp = FixedPoint(clip=1.0, scale=2.0**31 - 1)
    encoded, _ = fp.encode(np.array([1.0, -1.0, -0.0, 0.25]))
    np.testing.assert_array_equal(encoded, [2**31 - 1, 2**31 + 1, 0, 536870912])
    np.testing.assert_array_equal(
        fp.decode(encoded) * fp.scale, [2**31 - 1, -(2**31 - 1), 0, 536870912]
    )


def test_encode_writes_into_a_given_slice() -> None:
    fp = FixedPoint(clip=1.0, scale=4.0)
    upload = np.full(5, 7, dtype=np.uint32)
    words, clipped = fp.encode(np.array([0.5, -2.0, 0.25]), out=upload[:3])
    assert np.shares_memory(words, upload) and clipped == 1
    np.testing.assert_array_equal(upload, [2, 2**32 - 4, 1, 7, 7])
    empty, none = fp.encode(np.zeros(0))
    assert empty.shape == (0,) and empty.dtype == np.uint32 and none == 0
    for bad in (np.zeros(3, np.uint64), np.zeros(4, np.uint32), upload[::2][:3]):
        with pytest.raises(
            ConfigError,
            match=r"^out must be a writable C-contiguous uint32 array of shape \(3,\)\.$",
        ):
            fp.encode(np.zeros(3), out=bad)


def test_max_abs_error() -> None:
    assert FixedPoint(1.0, 2.0**10).max_abs_error(4) == 4 * 0.5 / 1024


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_refused(bad: float) -> None:
    fp = FixedPoint(1.0, 2.0**10)
    with pytest.raises(
        ConfigError,
        match=r"^cannot encode 1 non-finite value\(s\) \(NaN or infinity\)\.$",
    ):
        fp.encode(np.array([0.0, bad]))
    with pytest.raises(ConfigError, match=r"^cannot encode 1 non-finite"):
        fp.encode(np.array([5.0, bad, -5.0]))  # also beyond the clip


@pytest.mark.parametrize(
    "kwargs",
    [
        {"clip": 0.0, "scale": 1.0},
        {"clip": -1.0, "scale": 1.0},
        {"clip": np.nan, "scale": 1.0},
        {"clip": 1.0, "scale": 0.0},
        {"clip": 1.0, "scale": np.inf},
        {"clip": 1.0, "scale": 1.0, "modulus_bits": 16},
        {"clip": 1.0, "scale": 1.0, "modulus_bits": True},
    ],
)
def test_constructor_validates(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        FixedPoint(**kwargs)  # type: ignore[arg-type]


def test_encode_and_decode_validate() -> None:
    fp = FixedPoint(1.0, 2.0**10)
    with pytest.raises(ConfigError):
        fp.encode(np.zeros(3), weight=-1.0)
    with pytest.raises(ConfigError):
        fp.encode(np.zeros(3), weight=np.nan)
    with pytest.raises(
        ConfigError,
        match=r"^fixed point overflow: 1 inputs x weight 2\^30 x clip 1 x scale 2\^10 = 1\.1e\+12 \(\+ 0\.5 for rounding\) exceeds 2\^31; lower the scale or clip, or use modulus_bits=64\.$",
    ):
        fp.encode(np.zeros(3), weight=2.0**30)
    with pytest.raises(
        ConfigError, match=r"^decode expects a uint32 array, got uint64\.$"
    ):
        fp.decode(np.zeros(3, np.uint64))
    with pytest.raises(ConfigError):
        fp.check_capacity(0)
    assert fp.dtype == np.uint32
    assert FixedPoint(1.0, 1.0, 64).dtype == np.uint64
