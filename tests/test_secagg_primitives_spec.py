"""SecAgg+ primitives against their documented formats and refusals.

The seed and channel formats are recomputed from their docstrings with
``hashlib`` and ``cryptography`` directly (known answers, not round trips);
every refusal is checked with its full message; Shamir's rejection sampling
is driven with chosen OS bytes.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import FixedPoint, derive_seed, expand, shamir
from fedleak.secagg.channel import channel_key, open_share, seal_share
from fedleak.secagg.fixed_point import _fmt
from fedleak.secagg.shamir import PRIME, combine, combine_many, lagrange_at_zero, split

SHARED = bytes(range(32))


def _blake(shared: bytes, purpose: bytes, *fields: int) -> bytes:
    """The documented seed: BLAKE2b-256 keyed with the shared secret over the
    domain label, the 8-byte length of the purpose, the purpose, and round,
    group, min(pair), max(pair) as 8-byte big-endian integers."""
    message = (
        b"fedleak-secagg-v1"
        + len(purpose).to_bytes(8, "big")
        + purpose
        + struct.pack(">4Q", *fields)
    )
    return hashlib.blake2b(message, digest_size=32, key=shared).digest()


# ----------------------------------------------------------------- seeds


def test_derive_seed_is_the_documented_blake2b() -> None:
    assert derive_seed(
        SHARED, round=3, group=1, purpose=b"mask", pair=(9, 4)
    ) == _blake(SHARED, b"mask", 3, 1, 4, 9)
    long = b"p" * 300  # a length prefix of 8 bytes, not one
    assert derive_seed(
        SHARED, round=2**64 - 1, group=0, purpose=long, pair=(0, 2**64 - 1)
    ) == _blake(SHARED, long, 2**64 - 1, 0, 0, 2**64 - 1)


def test_channel_key_is_the_share_purpose_seed() -> None:
    assert channel_key(SHARED, round=7, group=2, pair=(20, 10)) == _blake(
        SHARED, b"share", 7, 2, 10, 20
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"round": -1}, r"^round must lie in \[0, 2\*\*64\), got -1\.$"),
        ({"round": 1.0}, r"^round must be an integer, got 1\.0\.$"),
        (
            {"group": 2**64},
            r"^group must lie in \[0, 2\*\*64\), got 18446744073709551616\.$",
        ),
        ({"pair": (True, 2)}, r"^pair\[0\] must be an integer, got True\.$"),
        ({"pair": (1, -2)}, r"^pair\[1\] must lie in \[0, 2\*\*64\), got -2\.$"),
        ({"pair": (1, 2, 3)}, r"^pair must be a tuple of two ids, got \(1, 2, 3\)\.$"),
        ({"purpose": "mask"}, r"^purpose must be bytes, got 'mask'\.$"),
        ({"shared": bytes(16)}, r"^shared must be the 32-byte X25519 shared secret\.$"),
    ],
)
def test_derive_seed_refusals_name_the_field(
    change: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {
        "shared": SHARED,
        "round": 3,
        "group": 1,
        "purpose": b"mask",
        "pair": (4, 9),
    }
    args.update(change)
    shared = args.pop("shared")
    with pytest.raises(ConfigError, match=message):
        derive_seed(shared, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"round": -1}, r"^round must lie in \[0, 2\*\*64\), got -1\.$"),
        (
            {"group": 2**64},
            r"^group must lie in \[0, 2\*\*64\), got 18446744073709551616\.$",
        ),
        ({"pair": (1,)}, r"^pair must be a tuple of two ids, got \(1,\)\.$"),
        ({"shared": bytes(16)}, r"^shared must be the 32-byte X25519 shared secret\.$"),
        ({"shared": "x" * 32}, r"^shared must be the 32-byte X25519 shared secret\.$"),
    ],
)
def test_channel_key_refusals_name_the_field(
    change: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {"shared": SHARED, "round": 3, "group": 1, "pair": (4, 9)}
    args.update(change)
    shared = args.pop("shared")
    with pytest.raises(ConfigError, match=message):
        channel_key(shared, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"length": -1}, r"^length must lie in \[0, 2\*\*64\), got -1\.$"),
        ({"length": 2.0}, r"^length must be an integer, got 2\.0\.$"),
        ({"dtype": np.int32}, r"^dtype must be uint32 or uint64, got int32\.$"),
        ({"dtype": "nonsense"}, r"^dtype must be uint32 or uint64, got 'nonsense'\.$"),
        (
            {"out": np.empty(3, np.uint64)},
            r"^out must be a writable C-contiguous uint32 array of shape \(4,\)\.$",
        ),
    ],
)
def test_expand_refusals_name_the_field(
    kwargs: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {"length": 4}
    args.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        expand(SHARED, **args)  # type: ignore[arg-type]
    with pytest.raises(
        ConfigError, match=r"^seed must be 32 bytes \(a 256-bit key\)\.$"
    ):
        expand(bytes(31), 4)


# --------------------------------------------------------------- channel


@pytest.mark.parametrize(("sender", "recipient", "nonce"), [(10, 20, 1), (20, 10, 2)])
def test_sealed_share_is_chacha20_poly1305_over_the_documented_fields(
    sender: int, recipient: int, nonce: int
) -> None:
    """Nonce 1 for the smaller id sending, 2 for the larger; associated data:
    the domain label, the session's 2-byte length, the session, and round,
    group, sender, recipient as 8-byte big-endian integers."""
    key = channel_key(SHARED, round=3, group=1, pair=(10, 20))
    session = b"s" * 300  # longer than one byte can count
    aad = (
        b"fedleak-secagg-share-v1"
        + len(session).to_bytes(2, "big")
        + session
        + struct.pack(">4Q", 3, 1, sender, recipient)
    )
    expected = ChaCha20Poly1305(key).encrypt(nonce.to_bytes(12, "big"), b"share", aad)
    fields = dict(session=session, round=3, group=1, sender=sender, recipient=recipient)
    assert seal_share(key, b"share", **fields) == expected  # type: ignore[arg-type]
    assert open_share(key, expected, **fields) == b"share"  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["round", "group", "sender", "recipient"])
def test_channel_fields_out_of_range_are_refused(field: str) -> None:
    fields: dict[str, object] = dict(
        session=b"s", round=3, group=1, sender=10, recipient=20
    )
    fields[field] = -1
    message = r"^round, group, sender and recipient must be integers in \[0, 2\*\*64\)$"
    with pytest.raises(ConfigError, match=message):
        seal_share(SHARED, b"x", **fields)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        open_share(SHARED, bytes(17), **fields)  # type: ignore[arg-type]


def test_open_share_names_the_failed_share() -> None:
    with pytest.raises(
        ProtocolError,
        match=r"^the share from 10 to 20 \(round 3, group 1\) fails authentication$",
    ):
        open_share(
            SHARED, bytes(20), session=b"s", round=3, group=1, sender=10, recipient=20
        )


# ----------------------------------------------------------------- Shamir


def test_split_is_the_documented_polynomial_at_large_points() -> None:
    """Share k of word l is f_l(x_k) = s_l + sum_j c_{j,l} x_k^j mod p, the
    coefficients c_1..c_{t-1} drawn in that order from the given generator;
    points near p make every intermediate product large."""
    secret = np.array([PRIME - 1, 0, 12345], dtype=np.uint64)
    points = [PRIME - 1, PRIME - 2, 7, 2**31]
    shares = split(secret, threshold=3, points=points, rng=np.random.default_rng(8))
    coefficients = np.random.default_rng(8).integers(
        0, PRIME, size=(2, 3), dtype=np.uint64
    )
    for k, x in enumerate(points):
        for word in range(3):
            value = int(secret[word])
            for j in range(2):
                value += int(coefficients[j, word]) * x ** (j + 1)
            assert int(shares[k, word]) == value % PRIME
    assert shares.dtype == np.uint64
    again = split(secret, threshold=3, points=points, rng=np.random.default_rng(8))
    np.testing.assert_array_equal(again, shares)


def test_seeded_elements_are_the_generators_draws() -> None:
    np.testing.assert_array_equal(
        shamir.random_elements((2, 3), np.random.default_rng(4)),
        np.random.default_rng(4).integers(0, PRIME, size=(2, 3), dtype=np.uint64),
    )


def test_os_elements_reject_words_at_or_above_the_prime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rejection sampling: 32-bit words >= p are drawn again, as many as were bad."""
    draws = [
        np.array([PRIME, 7, 2**32 - 1, PRIME - 1], dtype="<u4").tobytes(),
        np.array([PRIME, 5], dtype="<u4").tobytes(),  # p itself again
        np.array([0], dtype="<u4").tobytes(),
    ]
    asked: list[int] = []

    def urandom(n: int) -> bytes:
        asked.append(n)
        return draws.pop(0)

    monkeypatch.setattr(shamir.os, "urandom", urandom)
    out = shamir.random_elements((2, 2))
    np.testing.assert_array_equal(out, [[0, 7], [5, PRIME - 1]])
    assert out.dtype == np.uint64 and asked == [16, 8, 4]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"secret": np.zeros(2)}, r"^secret must hold integers, got float64\.$"),
        ({"secret": np.array([PRIME])}, rf"^secret must lie in \[0, {PRIME}\)\.$"),
        (
            {"secret": np.zeros((1, 2), np.uint64)},
            r"^secret must be one-dimensional\.$",
        ),
        ({"points": [[1, 2]]}, r"^points must be one-dimensional\.$"),
        ({"points": [1.0, 2.0]}, r"^points must hold integers, got float64\.$"),
        ({"points": [1, PRIME]}, rf"^points must lie in \[0, {PRIME}\)\.$"),
        (
            {"points": [0, 1]},
            r"^share points must be non-zero \(0 holds the secret\)\.$",
        ),
        ({"points": [1, 1]}, r"^share points must be distinct\.$"),
        ({"threshold": 1.0}, r"^threshold must be an integer, got 1\.0\.$"),
        ({"threshold": 3}, r"^threshold must lie in \[1, 2\] for 2 holders, got 3\.$"),
    ],
)
def test_split_refusals_are_named(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "secret": np.zeros(2, np.uint64),
        "threshold": 2,
        "points": [1, 2],
    }
    args.update(kwargs)
    secret = args.pop("secret")
    with pytest.raises(ConfigError, match=message):
        split(secret, **args)  # type: ignore[arg-type]


def test_combine_refusals_and_integer_coefficients() -> None:
    points = [3, 5, 9]
    shares = split(np.arange(4, dtype=np.uint64), threshold=3, points=points)
    lam = lagrange_at_zero(points)
    with pytest.raises(
        ProtocolError, match=r"^3 points need shares of shape \(3, m\), got \(2, 4\)\.$"
    ):
        combine(points, shares[:2])
    with pytest.raises(
        ProtocolError,
        match=r"^shares of shape \(1, 3\) do not fit coefficients of shape \(1, 3\)\.$",
    ):
        combine_many(lam[None, :], shares[None, :, 0])
    with pytest.raises(
        ProtocolError,
        match=r"^shares of shape \(1, 2, 4\) do not fit coefficients of shape \(1, 3\)\.$",
    ):
        combine_many(lam[None, :], shares[None, :2, :])
    bad = shares.copy()
    bad[0, 0] = PRIME
    with pytest.raises(
        ProtocolError, match=r"^a share is not an element of the field\.$"
    ):
        combine_many(lam[None, :], bad[None])
    # coefficients of any integer dtype give the same uint64 secrets
    out = combine_many(lam[None, :].astype(np.int64), shares[None])
    assert out.dtype == np.uint64
    np.testing.assert_array_equal(out[0], np.arange(4))


# ------------------------------------------------------------ fixed point


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (3.0, "3"),
        (0.5, "0.5"),
        (2.0**7, "128"),
        (2.0**8, "2^8"),
        (2.0**40, "2^40"),
        (2.0**-7, "0.0078125"),
        (2.0**-8, "2^-8"),
        (2.0**-9, "2^-9"),
        (3 * 2.0**20, "3.14573e+06"),
    ],
)
def test_message_numbers_show_large_and_small_powers_of_two(
    value: float, text: str
) -> None:
    assert _fmt(value) == text


def test_fixed_point_refusals_name_the_value() -> None:
    cases: list[tuple[object, str]] = [
        (lambda: FixedPoint(True, 1.0), r"^clip must be a number, got True\.$"),
        (lambda: FixedPoint(1.0, "2"), r"^scale must be a number, got '2'\.$"),
        (
            lambda: FixedPoint(-1.0, 1.0),
            r"^clip must be a finite number > 0, got -1\.0\.$",
        ),
        (lambda: FixedPoint(1.0, 0), r"^scale must be a finite number > 0, got 0\.$"),
        (
            lambda: FixedPoint(1.0, 1.0, 16),
            r"^modulus_bits must be 32 or 64, got 16\.$",
        ),
        (
            lambda: FixedPoint(1.0, 1.0).check_capacity(1.5),
            r"^n_inputs must be an integer, got 1\.5\.$",
        ),
        (
            lambda: FixedPoint(1.0, 1.0).check_capacity(0),
            r"^n_inputs must be >= 1, got 0\.$",
        ),
        (
            lambda: FixedPoint(1.0, 1.0).check_capacity(1, max_weight=True),
            r"^max_weight must be a number, got True\.$",
        ),
        (
            lambda: FixedPoint(1.0, 1.0).encode(np.zeros(2), weight=-1),
            r"^weight must be a finite number >= 0, got -1\.$",
        ),
        (
            lambda: FixedPoint(1.0, 1.0).encode(np.array([np.nan, 1.0, np.inf])),
            r"^cannot encode 2 non-finite value\(s\) \(NaN or infinity\)\.$",
        ),
        (
            lambda: FixedPoint.auto(1.0, 2, max_weight=0),
            r"^max_weight must be a finite number > 0, got 0\.$",
        ),
        (
            lambda: FixedPoint(1.0, 1.0).decode([1, 2]),
            r"^decode expects a uint32 array, got list\.$",
        ),
        (
            lambda: FixedPoint(1.0, 1.0, 64).decode(np.zeros(2)),
            r"^decode expects a uint64 array, got float64\.$",
        ),
    ]
    for make, message in cases:
        with pytest.raises(ConfigError, match=message):
            make()  # type: ignore[operator]


def test_fixed_point_stores_plain_floats() -> None:
    code = FixedPoint(2, np.float32(4.0))
    assert type(code.clip) is float and type(code.scale) is float
    assert (code.clip, code.scale) == (2.0, 4.0)


def test_capacity_message_states_every_factor() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^fixed point overflow: 3 inputs x weight 1\.5 x clip 2\^-10 x scale "
        r"2\^40 = 4\.83e\+09 \(\+ 1\.5 for rounding\) exceeds 2\^31; lower the scale "
        r"or clip, or use modulus_bits=64\.$",
    ):
        FixedPoint(2.0**-10, 2.0**40).check_capacity(3, 1.5)
    with pytest.raises(
        ConfigError,
        match=r"^fixed point overflow: 1 inputs x weight 1 x clip 1 x scale 2\^63 = "
        r"9\.22e\+18 \(\+ 0\.5 for rounding\) exceeds 2\^63; lower the scale or clip\.$",
    ):
        FixedPoint(1.0, 2.0**63, 64).check_capacity(1)


def test_capacity_bound_is_exact_at_half_a_unit() -> None:
    """n (clip w scale + 1/2) < 2^(b-1): equality overflows, 0.1 below fits."""
    FixedPoint(1.0, 2.0**31 - 0.6).check_capacity(1)  # 2^31 - 0.1
    for scale in (2.0**31 - 0.5, 2.0**31 - 0.4):  # 2^31 and 2^31 + 0.1
        with pytest.raises(ConfigError):
            FixedPoint(1.0, scale).check_capacity(1)
    # two inputs at exactly 2^30 - 1/2 each sum to 2^31 with rounding: refused
    with pytest.raises(ConfigError):
        FixedPoint(1 - 2.0**-31, 2.0**30).check_capacity(2)


def test_auto_scale_at_the_edges() -> None:
    assert FixedPoint.auto(1.0, 1).scale == 2.0**30  # default weight 1
    assert FixedPoint.auto(1 - 2.0**-31, 2).scale == 2.0**29  # 2^30 would equal
    assert FixedPoint.auto(2.0**30 + 1, 1).scale == 1.0
    assert FixedPoint.auto(2.0**30 - 0.25, 1).scale == 1.0  # the guess says 2
    assert FixedPoint.auto(2.0**40, 1, modulus_bits=64).scale == 2.0**22
    assert FixedPoint.auto(1e-300, 1).scale == 2.0**1000  # the largest exponent
    assert FixedPoint.auto(1e-9, 2_000_000_000).scale == 2.0**29
    assert FixedPoint.auto(1.0, 200).scale == 2.0**23
    # the logarithms round this guess to 15, one below the answer: the climb
    assert FixedPoint.auto(63.38103685803293, 517).scale == 2.0**16
    with pytest.raises(
        ConfigError, match=r"^fixed point overflow: 1 inputs x weight 2\^31"
    ):
        FixedPoint.auto(1.0, 1, max_weight=2.0**31)


def test_encode_checks_one_weighted_value_and_takes_integers() -> None:
    code = FixedPoint(1.0, 2.0**30)
    encoded, clipped = code.encode([1, -1, 0], weight=1.5)  # two of them overflow
    assert clipped == 0
    np.testing.assert_array_equal(
        encoded, np.array([3 * 2**29, 2**32 - 3 * 2**29, 0], dtype=np.uint32)
    )


# ------------------------------------------------------------------- keys


def test_key_refusals_are_named() -> None:
    from test_secagg_keys_prg import LOW_ORDER

    from fedleak.secagg import KeyPair, agree

    mine = KeyPair.generate(np.random.default_rng(1))
    cases: list[tuple[object, type[Exception], str]] = [
        (
            lambda: agree(mine.secret, bytes(31)),
            ProtocolError,
            r"^invalid public key: expected 32 bytes, got bytes of 31 bytes\.$",
        ),
        (
            lambda: agree(mine.secret, bytearray(32)),
            ProtocolError,
            r"^invalid public key: expected 32 bytes, got bytearray of 32 bytes\.$",
        ),
        (
            lambda: agree(mine.secret, "x" * 32),
            ProtocolError,
            r"^invalid public key: expected 32 bytes, got str\.$",
        ),
        (
            lambda: agree(bytes(31), mine.public),
            ConfigError,
            r"^secret must be 32 bytes\.$",
        ),
        (
            lambda: KeyPair(secret=bytes(31), public=mine.public),
            ConfigError,
            r"^KeyPair\.secret must be 32 bytes\.$",
        ),
        (
            lambda: KeyPair(secret=mine.secret, public="x" * 32),
            ConfigError,
            r"^KeyPair\.public must be 32 bytes\.$",
        ),
        (
            lambda: KeyPair.from_secret(b"short"),
            ConfigError,
            r"^secret must be 32 bytes\.$",
        ),
        (
            lambda: KeyPair.from_secret("x" * 32),
            ConfigError,
            r"^secret must be 32 bytes\.$",
        ),
        (
            lambda: KeyPair.generate(np.random.default_rng(0), secure_mode=True),
            ConfigError,
            r"^KeyPair\.generate got an rng with secure_mode=True: seeding is refused "
            r"in secure_mode\.$",
        ),
        (
            lambda: KeyPair.generate(42),
            ConfigError,
            r"^rng must be a numpy\.random\.Generator, got int\.$",
        ),
    ]
    cases += [
        (
            lambda point=point: agree(mine.secret, point),
            ProtocolError,
            r"^invalid public key: a low-order point \(all-zero shared secret\)\.$",
        )
        for point in LOW_ORDER
    ]
    for make, error, message in cases:
        with pytest.raises(error, match=message):
            make()  # type: ignore[operator]


def test_an_all_zero_shared_secret_is_refused_even_if_x25519_returns_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libsodium refuses low-order points itself; should an implementation
    return the all-zero secret instead, agree still refuses it."""
    from fedleak.secagg import KeyPair, keys

    monkeypatch.setattr(keys, "crypto_scalarmult", lambda secret, public: bytes(32))
    mine = KeyPair.generate(np.random.default_rng(1))
    with pytest.raises(
        ProtocolError,
        match=r"^invalid public key: a low-order point \(all-zero shared secret\)\.$",
    ):
        keys.agree(mine.secret, mine.public)
