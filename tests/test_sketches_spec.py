"""Count-Min / Count Sketch and the private median against their specification:
the hash family, the estimators' formulas on hand-made tables, the byte
format, the domains and their messages (seed 000 Ch. 2.2, 4.3)."""

from __future__ import annotations

import math
import struct
import warnings

import numpy as np
import pytest

from fedleak.errors import ConfigError, DataError, ProtocolError
from fedleak.sketches import CountMinSketch, CountSketch
from fedleak.sketches.base import MERSENNE_PRIME
from fedleak.sketches.median import (
    bisect_median,
    decryptions_needed,
    private_median,
    range_sensitivity,
    reference_problem,
    value_keys,
    value_sketch,
)

P = MERSENNE_PRIME


def test_rows_hash_with_the_seeded_universal_family() -> None:
    """h_j(x) = ((a_j x + b_j) mod p) mod w, a_j in [1, p), b_j in [0, p) drawn
    from numpy's default_rng(seed) (Definition 7's pairwise-independent family)."""
    sketch = CountMinSketch(4, 13, seed=77)
    rng = np.random.default_rng(77)
    a = rng.integers(1, P, size=4, dtype=np.uint64)
    b = rng.integers(0, P, size=4, dtype=np.uint64)
    items = np.array([0, 1, 5, 1000, P - 1], dtype=np.uint64)
    expected = ((a[:, None] * items[None, :] + b[:, None]) % np.uint64(P)) % np.uint64(
        13
    )
    np.testing.assert_array_equal(sketch.buckets(items.astype(np.int64)), expected)
    assert CountMinSketch(2, 3).seed == 0 and CountSketch(2, 4).seed == 0
    assert CountMinSketch.from_error(0.5, 0.5).seed == 0
    assert CountSketch.from_error(0.5, 0.5).seed == 0


def test_updates_add_counts_on_every_path() -> None:
    # large blocks (a counting pass) and small ones (np.add.at), weight 1 and 3
    for n in (1, 5000):
        for weight in (1, 3):
            sketch = CountMinSketch(3, 16, seed=1)
            sketch.update(np.full(n, 7), weight)
            np.testing.assert_array_equal(sketch.table.sum(axis=1), [n * weight] * 3)
            assert sketch.estimate(7) == n * weight
    per_item = CountMinSketch(3, 1024, seed=2)
    per_item.update([1, 2, 2], [4, -1, 3])
    np.testing.assert_array_equal(per_item.table.sum(axis=1), [6, 6, 6])
    assert per_item.estimate(1) == 4
    # a turnstile stream: a negative single count subtracts
    per_item.update([1], -4)
    assert per_item.estimate(1) == 0


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: CountMinSketch(0, 4),
            ConfigError,
            r"^depth must be an integer >= 1; got 0\.$",
        ),
        (
            lambda: CountMinSketch(2, 0),
            ConfigError,
            r"^width must be an integer >= 1; got 0\.$",
        ),
        (
            lambda: CountMinSketch(True, 4),
            ConfigError,
            r"^depth must be an integer >= 1; got True\.$",
        ),
        (
            lambda: CountMinSketch(2, 4.0),
            ConfigError,
            r"^width must be an integer >= 1; got 4\.0\.$",
        ),
        (
            lambda: CountMinSketch(2, 4, seed=True),
            ConfigError,
            r"^seed must be an integer in \[0, 9223372036854775807\]; got True\.$",
        ),
        (
            lambda: CountMinSketch(2, 4, seed=1 << 63),
            ConfigError,
            r"^seed must be an integer in \[0, 9223372036854775807\]; got 9223372036854775808\.$",
        ),
        (
            lambda: CountMinSketch(2, 4, seed=-1),
            ConfigError,
            r"^seed must be an integer in \[0, 9223372036854775807\]; got -1\.$",
        ),
        (
            lambda: CountMinSketch.suggest_width(1.0),
            ConfigError,
            r"^epsilon must be in \(0, 1\); got 1\.0\.$",
        ),
        (
            lambda: CountMinSketch.suggest_width(0.0),
            ConfigError,
            r"^epsilon must be in \(0, 1\); got 0\.0\.$",
        ),
        (
            lambda: CountMinSketch.suggest_width(True),
            ConfigError,
            r"^epsilon must be in \(0, 1\); got True\.$",
        ),
        (
            lambda: CountMinSketch.suggest_depth(1.0),
            ConfigError,
            r"^delta must be in \(0, 1\); got 1\.0\.$",
        ),
        (
            lambda: CountMinSketch.suggest_depth(0.1, 0),
            ConfigError,
            r"^n_items must be an integer >= 1; got 0\.$",
        ),
        (
            lambda: CountSketch(3, 55),
            ConfigError,
            r"width must be even; got 55, use 56\.$",
        ),
        (
            lambda: CountMinSketch(2, 4).update([1.5]),
            DataError,
            r"^sketch items must be integers, got dtype float64; map keys to integers in \[0, 2\*\*31 - 1\) first\.$",
        ),
        (
            lambda: CountMinSketch(2, 4).update([True]),
            DataError,
            r"^sketch items must be integers, got dtype bool",
        ),
        (
            lambda: CountMinSketch(2, 4).update([P]),
            DataError,
            rf"^sketch items must lie in \[0, {P}\), got values in \[{P}, {P}\]\.$",
        ),
        (
            lambda: CountMinSketch(2, 4).update([-1, 3]),
            DataError,
            r"got values in \[-1, 3\]\.$",
        ),
        (
            lambda: CountMinSketch(2, 4).update([1], [1.5]),
            DataError,
            r"^counts must be integers, got dtype float64\.$",
        ),
        (
            lambda: CountMinSketch(2, 4).update([1], [True]),
            DataError,
            r"^counts must be integers, got dtype bool\.$",
        ),
        (
            lambda: CountMinSketch(2, 4).update([1, 2], [1, 2, 3]),
            DataError,
            r"^got 3 counts for 2 items; give one per item\.$",
        ),
        (
            lambda: CountMinSketch(2, 4).with_table(np.zeros(7)),
            DataError,
            r"^table has 7 counters, the sketch 8\.$",
        ),
        (
            lambda: CountMinSketch(2, 4).with_table(np.full(8, 0.5)),
            DataError,
            r"^a sketch table must hold integers\.$",
        ),
        (
            lambda: CountMinSketch(2, 4).with_table(np.full(8, np.nan)),
            DataError,
            r"^a sketch table must hold integers\.$",
        ),
        (
            lambda: CountSketch(2, 4).error_bound(1.0),
            ConfigError,
            r"^delta must be in \(0, 1\); got 1\.0\.$",
        ),
        (
            lambda: CountSketch(2, 4).error_bound(0.0),
            ConfigError,
            r"^delta must be in \(0, 1\); got 0\.0\.$",
        ),
    ],
)
def test_sketch_domains_and_messages(make, error, message) -> None:
    with pytest.raises(error, match=message):
        make()


def test_boundaries_are_accepted() -> None:
    assert CountMinSketch(1, 1, seed=(1 << 63) - 1).size == 1
    sketch = CountMinSketch(2, 4)
    sketch.update([P - 1, 0])
    assert sketch.total == 2
    assert CountMinSketch.suggest_depth(0.5) == 1  # ceil(ln 2) = 1
    assert CountMinSketch.suggest_depth(0.05) == 3  # ceil(ln 20), one item
    assert CountMinSketch.suggest_depth(0.05, 10) == math.ceil(math.log(200))
    assert CountMinSketch.suggest_width(0.5) == math.ceil(math.e / 0.5)
    floats = CountMinSketch(2, 4).with_table(np.arange(8.0))
    np.testing.assert_array_equal(floats.table, np.arange(8).reshape(2, 4))
    assert floats.table.dtype == np.int64


def test_byte_format_and_its_refusals() -> None:
    sketch = CountSketch(2, 4, seed=9)
    sketch.update([1, 2, 3])
    data = sketch.to_bytes()
    header = struct.Struct("<4sBBxxIIqQ")
    # magic, format version, kind (Count Sketch = 2), depth, width, seed, p
    assert header.unpack_from(data) == (b"FLSK", 1, 2, 2, 4, 9, P)
    np.testing.assert_array_equal(
        np.frombuffer(data, "<i8", offset=header.size).reshape(2, 4), sketch.table
    )
    assert len(data) == header.size + 8 * 8
    assert CountSketch.from_bytes(data) == sketch
    with pytest.raises(
        DataError, match=rf"^{header.size - 1} bytes are too few for a sketch header\.$"
    ):
        CountSketch.from_bytes(data[: header.size - 1])
    with pytest.raises(
        DataError, match=rf"^sketch bytes: expected {len(data)}, got {header.size}\.$"
    ):
        CountSketch.from_bytes(data[: header.size])
    with pytest.raises(
        DataError, match=rf"^sketch bytes: expected {len(data)}, got {len(data) - 8}\.$"
    ):
        CountSketch.from_bytes(data[:-8])
    fields = list(header.unpack_from(data))
    for index, bad in ((0, b"XXXX"), (1, 2), (6, P - 2)):  # magic, version, prime
        wrong = list(fields)
        wrong[index] = bad
        with pytest.raises(
            DataError, match=r"^not a fedleak sketch \(bad magic, version or prime\)\.$"
        ):
            CountSketch.from_bytes(header.pack(*wrong) + data[header.size :])
    with pytest.raises(
        DataError, match=r"^the bytes hold sketch kind \d+, not CountMinSketch\.$"
    ):
        CountMinSketch.from_bytes(data)


def test_equality_and_merging_need_the_same_hashes() -> None:
    a, b = CountMinSketch(2, 4, seed=1), CountMinSketch(2, 4, seed=2)
    assert a != b  # same (empty) tables, different hashes
    assert a != "a sketch" and a == CountMinSketch(2, 4, seed=1)
    c = CountMinSketch(2, 4, seed=1)
    c.update([3])
    assert a != c
    with pytest.raises(
        ConfigError, match=r"sketches must share kind, depth, width and seed\.$"
    ):
        a.merge(b)
    assert repr(c) == "CountMinSketch(depth=2, width=4, seed=1, total=1)"


def test_count_min_debiased_estimate_and_error_bound_on_a_hand_made_table() -> None:
    sketch = CountMinSketch(3, 4, seed=5)
    table = np.array([[5, 1, 0, 0], [2, 2, 2, 0], [6, 0, 0, 0]])
    sketch = sketch.with_table(table)
    item = 11
    rows = table[np.arange(3), sketch.buckets(item)[:, 0]].astype(float)
    total = sketch.total
    noise = (total - rows) / (4 - 1)
    expected = np.clip(np.median(rows - noise), 0.0, rows.min())
    assert sketch.estimate_debiased(item) == pytest.approx(expected)
    assert sketch.estimate_debiased([item, item]).shape == (2,)
    assert sketch.estimate(item) == rows.min()
    # Definition 7's bound: epsilon ||c||_1 on the first row (e / w per unit)
    assert sketch.error_bound() == pytest.approx(math.e / 4 * 6)
    assert sketch.lower_bound(item) <= sketch.estimate(item)


def test_count_sketch_standard_error_on_a_hand_made_table() -> None:
    sketch = CountSketch(2, 4, seed=3).with_table(
        np.array([[3, -1, 0, 0], [1, 1, 1, 1]])
    )
    f2 = min(9 + 1, 4)  # the smaller row second moment
    assert sketch.standard_error() == pytest.approx(math.sqrt(2 * f2 / (4 * 2)))
    assert sketch.error_bound() == pytest.approx(
        sketch.standard_error() / math.sqrt(0.05)
    )
    assert sketch.error_bound(0.25) == pytest.approx(sketch.standard_error() * 2)
    coef = sketch.coefficients([5])
    buckets = sketch.buckets(5)[:, 0]
    for row, bucket in enumerate(buckets):
        assert coef[row, bucket] == 1 and coef[row, bucket ^ 1] == -1
        assert np.abs(coef[row]).sum() == 2
    np.testing.assert_array_equal(
        sketch.coefficients(np.array([], dtype=np.int64)), np.zeros((2, 4))
    )


# ------------------------------------------------------------ private median


def test_value_keys_are_splitmix64_modulo_p() -> None:
    # SplitMix64's first output from state 0 (Steele et al. 2014 reference
    # implementation): 0xE220A8397B1DCDAF
    assert value_keys(0) == 0xE220A8397B1DCDAF % P
    keys = value_keys(np.arange(1000))
    assert keys.dtype == np.int64 and np.unique(keys).size == 1000
    assert keys.min() >= 0 and keys.max() < P


def test_value_keys_wrap_modulo_2_64_without_an_overflow_warning() -> None:
    # SplitMix64 multiplies modulo 2**64 by design: one key (a 0-d array,
    # where numpy would warn on the wrap) is computed silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert value_keys(7) == value_keys(np.arange(8))[7]


def test_reference_problem_is_the_seed_mixture_drawn_from_its_seed() -> None:
    for spread, scales in (
        ("variance", (5.0, math.sqrt(200.0))),
        ("std", (25.0, 200.0)),
    ):
        rng = np.random.default_rng(4)
        raw = np.concatenate(
            [rng.normal(300.0, scales[0], 1000), rng.normal(500.0, scales[1], 200)]
        )
        expected = np.clip(np.rint(raw), 0, 1000).astype(np.int64)
        np.testing.assert_array_equal(reference_problem(4, spread=spread), expected)
    np.testing.assert_array_equal(reference_problem(), reference_problem(0))
    assert reference_problem(1, spread="std").max() == 1000  # clipped at the range
    assert reference_problem(1, spread="std").min() >= 0
    with pytest.raises(
        ConfigError, match=r"^spread must be 'variance' or 'std', got 'iqr'\.$"
    ):
        reference_problem(1, spread="iqr")


def test_bisection_finds_the_lower_median_anywhere_in_the_range() -> None:
    for values, low, high in (
        ([7, 7, 7], 0, 7),
        ([0, 0, 5], 0, 9),
        ([3, 4, 5, 6], 3, 6),
        ([10, 11, 12, 13, 14], 10, 20),
        (list(range(100)), 0, 127),
    ):
        arr = np.asarray(values)

        def count(a: int, b: int, arr: np.ndarray = arr) -> int:
            return int(np.count_nonzero((arr >= a) & (arr < b)))

        result = bisect_median(count, arr.size, 1, low=low, high=high)
        assert result.median == np.sort(arr)[(arr.size + 1) // 2 - 1], values
        span = high - low + 1
        assert math.floor(math.log2(span)) <= result.decryptions
        assert result.decryptions <= decryptions_needed(low, high)
    assert decryptions_needed(5, 5) == 0 and decryptions_needed(0, 1) == 1


def test_bisection_noise_is_drawn_in_order_from_the_given_generator() -> None:
    values = np.array([1, 2, 3, 4, 5, 6, 7])

    def count(a: int, b: int) -> int:
        return 3 * int(np.count_nonzero((values >= a) & (values < b)))

    result = bisect_median(
        count, 7, 3, low=0, high=7, epsilon=2.0, rng=np.random.default_rng(6)
    )
    replay = np.random.default_rng(6)
    scale = decryptions_needed(0, 7) / 2.0 * 3  # xi * d / epsilon
    first = count(0, 4) + replay.laplace(0.0, scale)
    assert result.released[0] == pytest.approx(first)
    # with a sensitivity function, its value replaces d
    custom = bisect_median(
        count,
        7,
        3,
        low=0,
        high=7,
        epsilon=2.0,
        rng=np.random.default_rng(6),
        sensitivity=lambda a, b: 5 if (a, b) == (0, 4) else 1,
    )
    replay = np.random.default_rng(6)
    assert custom.released[0] == pytest.approx(
        count(0, 4) + replay.laplace(0.0, 1.5 * 5)
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            dict(epsilon=0.0, rng=np.random.default_rng(0)),
            ConfigError,
            r"^epsilon must be a finite number > 0; got 0\.0\.$",
        ),
        (
            dict(epsilon=math.inf, rng=np.random.default_rng(0)),
            ConfigError,
            r"^epsilon must be a finite number > 0; got inf\.$",
        ),
        (
            dict(epsilon=1.0, rng=1, secure_mode=True),
            ConfigError,
            r"^Passing seed is prohibited in secure mode: the noise comes from the "
            r"OS CSPRNG; pass rng=None\.$",
        ),
        (dict(n_values=0), DataError, r"^the median of no values is undefined\.$"),
        (dict(low=5, high=4), ConfigError, r"^high must be an integer >= 5; got 4\.$"),
        (dict(low=True), ConfigError, r"^low must be an integer >= 0; got True\.$"),
        (dict(low=-1), ConfigError, r"^low must be an integer >= 0; got -1\.$"),
    ],
)
def test_bisection_refusals(kwargs, error, message) -> None:
    args = dict(n_values=3, low=0, high=7)
    args.update(kwargs)
    n_values = args.pop("n_values")
    with pytest.raises(error, match=message):
        bisect_median(lambda a, b: 0, n_values, 1, **args)


def test_value_sketch_refusals_and_empty_input() -> None:
    template = CountSketch(3, 8, seed=1)
    assert value_sketch([], template, low=0, high=9).total == 0
    with pytest.raises(
        DataError, match=r"^median values must be integers \(round them first\)\.$"
    ):
        value_sketch([1.5], template, low=0, high=9)
    with pytest.raises(
        DataError,
        match=r"^median values must lie in the public range \[0, 9\], got \[3, 10\]\.$",
    ):
        value_sketch([3, 10], template, low=0, high=9)
    with pytest.raises(DataError, match=r"got \[-1, 3\]\.$"):
        value_sketch([-1, 3], template, low=0, high=9)
    # both ends of the public range are values like any other
    ends = value_sketch([0, 9, 9], template, low=0, high=9)
    assert ends.total == 3 and ends.estimate(value_keys(9)) >= 2


def test_private_median_matches_the_plaintext_protocol_with_noise() -> None:
    """The encrypted run releases exactly the plaintext bisection's numbers:
    same hashes (the seed's first child), same noise generator (its fourth
    child), and with strict_sensitivity the collision-aware sensitivity."""
    values = np.array([12, 15, 15, 17, 20, 21, 30, 33, 33, 40])
    low, high, seed = 10, 41, 5
    hash_seed, _, _, noise_seed = np.random.SeedSequence(seed).spawn(4)
    template = CountSketch.from_error(0.05, 0.05)
    plain = CountSketch(
        template.depth,
        template.width,
        seed=int(hash_seed.generate_state(1, np.uint64)[0] >> np.uint64(1)),
    )
    summed = value_sketch(values, plain, low=low, high=high)

    def count(a: int, b: int) -> int:
        return int(
            (summed.coefficients(value_keys(np.arange(a, b))) * summed.table).sum()
        )

    for strict in (False, True):
        result = private_median(
            [values[:3], values[3:7], values[7:]],
            low=low,
            high=high,
            n_authorities=1,
            epsilon=3.0,
            strict_sensitivity=strict,
            seed=seed,
        )
        expected = bisect_median(
            count,
            10,
            plain.depth,
            low=low,
            high=high,
            epsilon=3.0,
            rng=np.random.default_rng(noise_seed),
            sensitivity=(
                (lambda a, b: range_sensitivity(plain, a, b, domain=(low, high)))
                if strict
                else None
            ),
        )
        np.testing.assert_allclose(result.released, expected.released, rtol=1e-12)
        assert result.median == expected.median
        assert set(result.seconds) == {
            "encrypt_per_sketch",
            "aggregate_per_sketch",
            "bisection",
            "table",
        }
        assert all(0 <= s < 60 for s in result.seconds.values())
    with pytest.raises(
        DataError, match=r"^private_median needs at least one contribution\.$"
    ):
        private_median([], low=0, high=3)
    with pytest.raises(ConfigError, match=r"^n_authorities must be >= 1, got 0\.$"):
        private_median([[1]], low=0, high=3, n_authorities=0)


# ------------------------------------------------------------------ ElGamal


def _keys(n: int = 2, seed: int = 3):
    from fedleak.sketches import elgamal as eg

    rng = np.random.default_rng(seed)
    auths = [eg.Authority(k, rng) for k in range(n)]
    return eg, auths, eg.GroupKey.combine(auths)


def test_elgamal_randomness_follows_the_given_generator() -> None:
    """Keys, proofs and ciphertexts are reproducible from a seeded generator
    (experiments), and r is drawn as 40 big-endian bytes mod n."""
    eg, auths, key = _keys()
    _, again, key_again = _keys()
    assert key.public == key_again.public
    assert auths[0].key_proof == again[0].key_proof
    rng = np.random.default_rng(9)
    r = int.from_bytes(np.random.default_rng(9).bytes(40), "big") % eg.CURVE_ORDER
    (ct,) = eg.encrypt([4], key, rng)
    assert ct.a == eg.base_mul(r)
    assert ct.b == eg.add(eg.mul(key.public, r), eg.base_mul(4))
    assert eg.encrypt([4], key, np.random.default_rng(9)) == [ct]
    assert eg.encrypt([4], key.public, np.random.default_rng(9)) == [ct]  # a bare key
    pairs = eg.precompute_randomness(1, key, np.random.default_rng(9))
    assert pairs[0] == (ct.a, eg.mul(key.public, r))
    assert eg.precompute_randomness(1, key.public, np.random.default_rng(9)) == pairs
    assert eg.encrypt([4], key, randomness=pairs) == [ct]
    share = auths[0].decryption_share(ct, np.random.default_rng(1))
    assert share == auths[0].decryption_share(ct, np.random.default_rng(1))
    assert share.share == eg.mul(ct.a, auths[0]._secret)


def test_elgamal_arithmetic_edge_cases() -> None:
    eg, auths, key = _keys()
    table = eg.DiscreteLogTable(10)
    assert eg.base_mul(0) is None and eg.base_mul(eg.CURVE_ORDER) is None
    assert eg.mul(None, 5) is None and eg.mul(eg.GENERATOR, 0) is None
    assert eg.mul(eg.GENERATOR, 3) == eg.base_mul(3)
    assert eg.encode_point(None) == bytes(33) and eg.decode_point(bytes(33)) is None
    assert eg.decode_point(eg.encode_point(eg.base_mul(7))) == eg.base_mul(7)
    with pytest.raises(ProtocolError, match=r"^a curve point takes 33 bytes\.$"):
        eg.decode_point(bytes(32))
    with pytest.raises(ProtocolError, match=r"^a curve point takes 33 bytes\.$"):
        eg.decode_point("x" * 33)  # type: ignore[arg-type]
    with pytest.raises(
        ProtocolError, match=r"^received bytes are not a secp256k1 point"
    ):
        eg.decode_point(b"\x02" + b"\xff" * 32)
    with pytest.raises(ProtocolError, match=r"^a ciphertext takes 66 bytes\.$"):
        eg.Ciphertext.from_bytes(bytes(65))
    # zero plaintexts encrypt (no m G term), and r Y + m G may be the identity
    zero, two = eg.encrypt(np.array([[0], [2]]), key, np.random.default_rng(2))
    for ct, m in ((zero, 0), (two, 2)):
        shares = [a.decryption_share(ct) for a in auths]
        assert eg.joint_decrypt(ct, shares, key, table) == m
    assert table.lookup(None) == 0 and table.lookup(eg.base_mul(-10)) == -10
    with pytest.raises(
        DataError,
        match=r"^the decrypted value lies outside \[-10, 10\]; build a DiscreteLogTable with a larger bound or more giant steps\.$",
    ):
        table.lookup(eg.base_mul(11))
    one = eg.DiscreteLogTable(1, giant_steps=1)
    assert one.max_value == 1 + 3 and one.lookup(eg.base_mul(-4)) == -4
    assert one.lookup(eg.base_mul(2)) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0,), r"^bound must be an integer >= 1; got 0\.$"),
        ((True,), r"^bound must be an integer >= 1; got True\.$"),
        ((2.0,), r"^bound must be an integer >= 1; got 2\.0\.$"),
        ((2, -1), r"^giant_steps must be an integer >= 0; got -1\.$"),
        ((2, True), r"^giant_steps must be an integer >= 0; got True\.$"),
        ((2, 1.0), r"^giant_steps must be an integer >= 0; got 1\.0\.$"),
    ],
)
def test_discrete_log_table_domain(args, message) -> None:
    from fedleak.sketches import elgamal as eg

    with pytest.raises(ConfigError, match=message):
        eg.DiscreteLogTable(*args)


def test_elgamal_protocol_refusals() -> None:
    eg, auths, key = _keys(2)
    table = eg.DiscreteLogTable(5)
    (ct,) = eg.encrypt([1], key, np.random.default_rng(0))
    s0, s1 = (a.decryption_share(ct) for a in auths)
    with pytest.raises(ProtocolError, match=r"^a share from unknown authority 7\.$"):
        eg.joint_decrypt(
            ct, [s0, eg.DecryptionShare(7, s1.share, s1.proof)], key, table
        )
    with pytest.raises(ProtocolError, match=r"^authority 0 sent two shares\.$"):
        eg.joint_decrypt(ct, [s0, s0, s1], key, table)
    forged = eg.DecryptionShare(1, eg.add(s1.share, eg.GENERATOR), s1.proof)
    with pytest.raises(
        ProtocolError,
        match=r"^authority 1 sent a wrong decryption share \(its Chaum-Pedersen proof "
        r"fails\); ask it again or exclude it\.$",
    ):
        eg.joint_decrypt(ct, [s0, forged], key, table)
    with pytest.raises(
        ProtocolError,
        match=r"^joint decryption needs every authority's share; missing \[1\]\.$",
    ):
        eg.joint_decrypt(ct, [s0], key, table)
    with pytest.raises(
        ConfigError, match=r"^a group key needs at least one authority\.$"
    ):
        eg.GroupKey.combine([])
    with pytest.raises(ConfigError, match=r"^two authorities share index 0\.$"):
        eg.GroupKey.combine([auths[0], auths[0]])
    cheat = eg.Authority(5, np.random.default_rng(1))
    cheat.key_proof = eg.EqualityProof(
        cheat.key_proof.challenge + 1, cheat.key_proof.response
    )
    with pytest.raises(
        ProtocolError,
        match=r"^authority 5: its proof of key possession fails; exclude it and rerun setup\.$",
    ):
        eg.GroupKey.combine([cheat])
    opposite = eg.Authority(9, np.random.default_rng(2))
    opposite.public = eg.neg(auths[0].public)
    opposite._secret = eg.CURVE_ORDER - auths[0]._secret
    opposite.key_proof = eg.EqualityProof.prove(
        opposite._secret, eg.GENERATOR, eg.GENERATOR, np.random.default_rng(3)
    )
    with pytest.raises(
        ProtocolError, match=r"^the authorities' keys cancel out; rerun setup\.$"
    ):
        eg.GroupKey.combine([auths[0], opposite])
    with pytest.raises(
        ConfigError, match=r"^add_ciphertexts needs at least one vector\.$"
    ):
        eg.add_ciphertexts([])
    with pytest.raises(ConfigError, match=r"^encrypted vectors differ in length\.$"):
        eg.add_ciphertexts([[ct], [ct, ct]])
    with pytest.raises(ConfigError, match=r"^3 coefficients for 2 ciphertexts\.$"):
        eg.linear_combination([ct, ct], [1, 2, 3])
    with pytest.raises(ConfigError, match=r"^1 precomputed pairs for 2 values\.$"):
        eg.encrypt([1, 2], key, randomness=eg.precompute_randomness(1, key))
    combo = eg.linear_combination(
        eg.encrypt([3, 5, 7], key), np.array([[2], [0], [-1]])
    )
    assert (
        eg.joint_decrypt(
            combo,
            [a.decryption_share(combo) for a in auths],
            key,
            eg.DiscreteLogTable(20),
        )
        == -1
    )


def test_fiat_shamir_challenge_is_the_tagged_sha256_of_the_points() -> None:
    import hashlib

    from fedleak.sketches import elgamal as eg

    points = (eg.GENERATOR, eg.base_mul(2), None)
    digest = hashlib.sha256(b"fedleak-dleq")
    for p in points:
        digest.update(eg.encode_point(p))
    assert (
        eg._challenge(*points)
        == int.from_bytes(digest.digest(), "big") % eg.CURVE_ORDER
    )


def _planted(sketch_cls, depth: int, width: int, item: int, at_item: int, rest: int):
    """A table holding ``at_item`` in the item's bucket of every row and ``rest``
    in another bucket of the row (so every row sums to the same total)."""
    template = sketch_cls(depth, width, seed=4)
    table = np.zeros((depth, width), dtype=np.int64)
    buckets = template.buckets(item)[:, 0]
    for row, bucket in enumerate(buckets):
        table[row, bucket] = at_item
        table[row, (bucket + 1) % width] += rest
    return template.with_table(table)


@pytest.mark.parametrize("width", [2, 4])
def test_count_mean_min_subtracts_the_rows_other_mass_over_w_minus_1(
    width: int,
) -> None:
    """Deng & Rafiei's Count-Mean-Min: median_j (c_j - (N - c_j) / (w - 1)),
    clipped to [0, min_j c_j]; values chosen so the clip does not bind."""
    item = 17
    sketch = _planted(CountMinSketch, 3, width, item, at_item=3, rest=2)
    noise = (5 - 3) / (width - 1)
    assert sketch.estimate_debiased(item) == pytest.approx(3 - noise)
    assert 0 < 3 - noise < 3  # inside the clip bounds: 2.33 (w = 4), 1 (w = 2)
    small = _planted(CountMinSketch, 3, width, item, at_item=1, rest=1)
    assert small.estimate_debiased(item) == pytest.approx(
        1 - 1 / (width - 1) if width > 2 else 0.0
    )
    # each item is debiased on its own rows, and the shape of the query is kept
    assert sketch.estimate_debiased(item).shape == ()
    assert sketch.estimate_debiased([[item]]).shape == (1, 1)
    assert sketch.estimate(item).shape == () and sketch.estimate(item).dtype == np.int64
    assert sketch.estimate([[item, item]]).shape == (1, 2)
    two = CountMinSketch(3, 64, seed=4)
    two.update([1] * 9 + [2] * 3)
    estimates = two.estimate_debiased([1, 2])
    np.testing.assert_allclose(
        estimates, [two.estimate_debiased(1), two.estimate_debiased(2)]
    )
    if (two.buckets([1])[:, 0] != two.buckets([2])[:, 0]).all():  # no collision
        np.testing.assert_allclose(estimates, [9 - 3 / 63, 3 - 9 / 63])


def test_count_min_bound_reads_the_first_row_and_count_sketch_the_smallest_f2() -> None:
    table = np.array([[4, -1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 2]])
    cms = CountMinSketch(3, 4).with_table(table)
    assert cms.error_bound() == pytest.approx(math.e / 4 * 5)
    cs = CountSketch(2, 4).with_table(np.array([[2, -2, 0, 0], [3, 0, 0, 0]]))
    assert cs.standard_error() == pytest.approx(
        math.sqrt(2 * 8 / (4 * 2))
    )  # F2 rows 8, 9
    assert cs.estimate_sum(5).shape == () and cs.estimate_sum([[5, 6]]).shape == (1, 2)


def test_from_error_defaults_one_item_and_passes_the_seed() -> None:
    assert CountMinSketch.from_error(0.5, 0.05).depth == 3  # ceil(ln(1 / 0.05))
    assert CountMinSketch.from_error(0.5, 0.05, seed=5).seed == 5
    assert CountSketch.from_error(0.5, 0.05).depth == 3
    assert CountSketch.from_error(0.5, 0.05, seed=5).seed == 5


def test_ciphertexts_add_componentwise() -> None:
    eg, _, key = _keys(1)
    first, second = eg.encrypt([1, 2], key, np.random.default_rng(0))
    total = first + second
    assert total.a == eg.add(first.a, second.a) and total.b == eg.add(first.b, second.b)


def test_count_sketch_sizing_and_coefficient_dtype() -> None:
    assert CountSketch.from_error(0.5, 0.05, n_items=10).depth == math.ceil(
        math.log(200)
    )
    # w = ceil(e / 0.0518) = 53 is odd: rounded up to the next even width
    assert CountSketch.from_error(0.0518, 0.1).width == 54
    assert CountSketch(2, 4, seed=1).coefficients([3]).dtype == np.int64


def test_encrypt_uses_the_first_precomputed_pairs() -> None:
    eg, auths, key = _keys(1)
    pairs = eg.precompute_randomness(3, key, np.random.default_rng(1))
    (ct,) = eg.encrypt([2], key, randomness=pairs)  # more pairs than values
    assert ct.a == pairs[0][0]
    assert (
        eg.joint_decrypt(
            ct, [auths[0].decryption_share(ct)], key, eg.DiscreteLogTable(5)
        )
        == 2
    )


def test_bisection_noise_without_an_rng_is_fresh_and_a_seed_replays_it() -> None:
    """rng=None (the default) draws the noise from fresh OS entropy: two calls
    release different counts (continuous Laplace noise of scale 3; equal
    draws have probability 0). An int seed replays default_rng(seed)."""
    values = np.array([1, 2, 3, 4, 5, 6, 7])

    def count(a: int, b: int) -> int:
        return int(np.count_nonzero((values >= a) & (values < b)))

    first = bisect_median(count, 7, 1, low=0, high=7, epsilon=1.0)
    second = bisect_median(count, 7, 1, low=0, high=7, epsilon=1.0)
    assert first.released != second.released
    seeded = bisect_median(count, 7, 1, low=0, high=7, epsilon=1.0, rng=6)
    replay = np.random.default_rng(6)
    assert seeded.released[0] == pytest.approx(count(0, 4) + replay.laplace(0.0, 3.0))
    # without epsilon the counts are released exactly, with or without an rng
    assert bisect_median(count, 7, 1, low=0, high=7).released[0] == count(0, 4)


def test_private_median_defaults() -> None:
    """seed=None (the default) is private: fresh keys, hashes and noise on
    every call, ``reproducible`` False; an explicit seed replays the run."""
    values = [np.array([3, 5, 8]), np.array([1, 9])]
    default = private_median(values, low=0, high=15, epsilon=2.0)
    again = private_median(values, low=0, high=15, epsilon=2.0)
    assert default.released != again.released
    assert default.reproducible is False and again.reproducible is False
    explicit = private_median(
        values, low=0, high=15, epsilon=2.0, seed=0, strict_sensitivity=False
    )
    replayed = private_median(values, low=0, high=15, epsilon=2.0, seed=0)
    assert explicit.released == replayed.released
    assert explicit.reproducible is True
    assert default.released != explicit.released


def test_range_sensitivity_is_the_largest_move_over_the_domain() -> None:
    """Brute force: adding value v moves the estimate of [a, b) by
    sum_j coef[j, h_j(v)]; the sensitivity is the largest |move| over the
    public domain [first, last]."""
    template = CountSketch(3, 8, seed=2)
    for (a, b), (first, last) in (
        ((4, 9), (2, 12)),
        ((0, 3), (0, 5)),
        ((6, 7), (5, 9)),
    ):
        coef = template.coefficients(value_keys(np.arange(a, b)))
        moves = [
            abs(int(coef[np.arange(3), template.buckets(value_keys(v))[:, 0]].sum()))
            for v in range(first, last + 1)
        ]
        assert range_sensitivity(template, a, b, domain=(first, last)) == max(moves)


def test_decryption_count_and_reference_dtype() -> None:
    assert decryptions_needed(10, 20) == 4  # ceil(log2(11))
    with pytest.raises(ConfigError, match=r"^high must be an integer >= 5; got 3\.$"):
        decryptions_needed(5, 3)
    assert reference_problem(2).dtype == np.int64


def test_single_count_updates_scale_every_path() -> None:
    for n in (1, 5000):
        sketch = CountMinSketch(3, 16, seed=1)
        sketch.update(np.full(n, 7), 2)
        np.testing.assert_array_equal(sketch.table.sum(axis=1), [2 * n] * 3)
    flat, nested = CountMinSketch(3, 64, seed=1), CountMinSketch(3, 64, seed=1)
    flat.update([1, 2], [3, 4])
    nested.update([[1, 2]], [[3, 4]])
    assert flat == nested


def test_bisection_replays_every_step_with_one_draw_each() -> None:
    """Alg. 4.3.1 by hand: each step releases count(a, mid) plus the next
    Laplace draw of scale xi d / epsilon and keeps the half with the median."""
    values = np.array([1, 2, 2, 3, 5, 6, 7, 7, 7])

    def count(a: int, b: int) -> int:
        return 3 * int(np.count_nonzero((values >= a) & (values < b)))

    result = bisect_median(
        count, 9, 3, low=0, high=15, epsilon=4.0, rng=np.random.default_rng(2)
    )
    replay = np.random.default_rng(2)
    scale = decryptions_needed(0, 15) / 4.0 * 3
    a, b, below = 0, 16, 0.0
    for value in result.released:
        mid = (a + b) // 2
        assert value == pytest.approx(count(a, mid) + replay.laplace(0.0, scale))
        if below + value >= 3 * 9 / 2:
            b = mid
        else:
            below += value
            a = mid
    assert b - a == 1 and result.median == a
    assert result.decryptions == len(result.released) == 4


def _noise_spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, bool]]:
    from fedleak.sketches import median

    calls: list[tuple[object, bool]] = []
    real = median.noise_laplace

    def spy(scale: float, size: int, rng: object = None, *, secure_mode: bool = False):
        calls.append((rng, secure_mode))
        return real(scale, size, rng, secure_mode=secure_mode)

    monkeypatch.setattr(median, "noise_laplace", spy)
    return calls


def test_secure_mode_draws_the_noise_from_the_os(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _noise_spy(monkeypatch)
    result = bisect_median(
        lambda a, b: 0, 4, 1, low=0, high=7, epsilon=1.0, secure_mode=True
    )
    assert len(calls) == result.decryptions == 3
    assert calls == [(None, True)] * 3
    calls.clear()
    values = [np.array([3, 5]), np.array([9])]
    private = private_median(values, low=0, high=15, epsilon=1.0, secure_mode=True)
    assert private.reproducible is False
    assert calls == [(None, True)] * private.decryptions
    with pytest.raises(
        ConfigError,
        match=r"^Passing seed is prohibited in secure mode: keys, encryption "
        r"randomness and noise come from the OS CSPRNG; pass seed=None\.$",
    ):
        private_median(values, low=0, high=15, epsilon=1.0, seed=0, secure_mode=True)


def test_private_median_draws_its_secrets_from_the_os_unless_seeded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a seed the authorities' keys and the encryption randomness come
    from the OS CSPRNG (rng=None); a seed gives each its own generator, the
    same in every run with that seed."""
    from fedleak.sketches import median

    seen: dict[str, list[object]] = {"keys": [], "encryption": []}
    real_authority, real_encrypt = median.Authority, median.encrypt

    def state(rng: object) -> object:
        return None if rng is None else rng.bit_generator.state  # type: ignore[attr-defined]

    def authority(index: int, rng: object = None) -> object:
        seen["keys"].append(state(rng))
        return real_authority(index, rng)  # type: ignore[arg-type]

    def encrypt(table: np.ndarray, key: object, rng: object = None) -> object:
        seen["encryption"].append(state(rng))
        return real_encrypt(table, key, rng)  # type: ignore[arg-type]

    monkeypatch.setattr(median, "Authority", authority)
    monkeypatch.setattr(median, "encrypt", encrypt)
    values = [np.array([3, 5]), np.array([9])]
    private_median(values, low=0, high=15, epsilon=1.0)
    assert seen == {"keys": [None] * 3, "encryption": [None] * 2}
    runs = []
    for _ in range(2):
        seen = {"keys": [], "encryption": []}
        private_median(values, low=0, high=15, epsilon=1.0, seed=5)
        runs.append(seen)
    assert runs[0] == runs[1]
    keys, encryption = runs[0]["keys"], runs[0]["encryption"]
    assert len(keys) == 3 and len(encryption) == 2 and None not in keys + encryption
    assert keys[0] != encryption[0]  # separate streams


def test_private_median_uses_the_seeds_sensitivity_by_default() -> None:
    """At seed 1 the collision-aware sensitivity changes the first noise."""
    values = [np.array([3, 5, 8, 8, 9, 12]), np.array([1, 9, 9, 14])]
    default = private_median(values, low=0, high=15, epsilon=2.0, seed=1)
    seed_d = private_median(
        values, low=0, high=15, epsilon=2.0, seed=1, strict_sensitivity=False
    )
    strict = private_median(
        values, low=0, high=15, epsilon=2.0, seed=1, strict_sensitivity=True
    )
    assert default.released == seed_d.released != strict.released


def test_private_median_times_each_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a clock that moves one second per reading every stage takes 1 s;
    the aggregation's time is shared by the sketches."""
    from fedleak.sketches import median

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            self.now += 1.0
            return self.now

    monkeypatch.setattr(median, "time", Clock())
    values = [np.array([3, 5]), np.array([9]), np.array([1, 2, 3])]
    result = private_median(values, low=0, high=15, seed=0)
    assert result.seconds == {
        "encrypt_per_sketch": 1.0,
        "aggregate_per_sketch": 1.0 / 3,
        "table": 1.0,
        "bisection": 1.0,
    }


def test_encrypted_counter_needs_one_ciphertext_per_cell() -> None:
    from fedleak.sketches.median import EncryptedRangeCounter

    template = CountSketch(2, 4, seed=0)
    with pytest.raises(ConfigError, match=r"^3 ciphertexts for a sketch of 8 cells\.$"):
        EncryptedRangeCounter(template, [None] * 3, [], None, None)  # type: ignore[arg-type, list-item]


def test_range_sensitivity_is_the_brute_force_maximum_on_small_domains() -> None:
    """Small domains where the largest move sits at a domain end: below the
    domain (width 4, seeds 0 and 11: a value under ``first`` would move it
    further), at its last value (width 8, seed 7) and just past it (width 4,
    seeds 3 and 18)."""
    cases = [(4, seed, 2, 6, 3, 5) for seed in range(12)]
    cases += [(4, 0, 3, 12, 4, 9), (4, 11, 5, 9, 5, 8), (8, 7, 3, 12, 4, 9)]
    cases += [(4, 3, 3, 12, 4, 9), (4, 18, 5, 9, 5, 8)]
    rows = np.arange(3)
    for width, seed, first, last, a, b in cases:
        template = CountSketch(3, width, seed=seed)
        coef = template.coefficients(value_keys(np.arange(a, b)))
        moves = [
            abs(int(coef[rows, template.buckets(value_keys(v))[:, 0]].sum()))
            for v in range(first, last + 1)
        ]
        got = range_sensitivity(template, a, b, domain=(first, last))
        assert got == max(moves), (width, seed)
