"""Keys, agreement, seed derivation and the PRG of fedleak.secagg."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from scipy import stats

from fedleak.errors import ConfigError, ProtocolError
from fedleak.secagg import PRG_NAME, KeyPair, agree, derive_seed, expand

ALPHA = 1e-3  # significance level of the uniformity tests (seeded: deterministic)

# Low-order points of Curve25519 (and non-canonical encodings of them): X25519
# with any secret gives the all-zero shared secret.
LOW_ORDER = [
    bytes(32),  # 0
    bytes([1]) + bytes(31),  # 1
    bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
    bytes.fromhex("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
    bytes.fromhex(
        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"
    ),  # p-1
    bytes.fromhex(
        "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"
    ),  # p
    bytes.fromhex(
        "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"
    ),  # p+1
]


def keys(n: int, seed: int = 0) -> list[KeyPair]:
    rng = np.random.default_rng(seed)
    return [KeyPair.generate(rng) for _ in range(n)]


# ----------------------------------------------------------------------- keys


def test_agreement_is_symmetric() -> None:
    ks = keys(6)
    for a in ks:
        for b in ks:
            if a is not b:
                assert agree(a.secret, b.public) == agree(b.secret, a.public)
    secrets = {agree(ks[0].secret, k.public) for k in ks[1:]}
    assert len(secrets) == 5  # different peers, different secrets


@pytest.mark.parametrize("point", LOW_ORDER)
def test_low_order_public_keys_are_refused(point: bytes) -> None:
    with pytest.raises(
        ProtocolError,
        match=r"^invalid public key: a low-order point \(all-zero shared secret\)\.$",
    ):
        agree(keys(1)[0].secret, point)


@pytest.mark.parametrize("bad", [bytes(31), bytes(range(33)), b"", "x" * 32, None])
def test_malformed_public_keys_are_refused(bad: object) -> None:
    with pytest.raises(ProtocolError, match="invalid public key"):
        agree(keys(1)[0].secret, bad)  # type: ignore[arg-type]


def test_malformed_secret_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        agree(bytes(31), keys(1)[0].public)


def test_seeded_keys_are_reproducible() -> None:
    assert keys(4, seed=5) == keys(4, seed=5)
    assert keys(4, seed=5) != keys(4, seed=6)
    k = keys(1)[0]
    assert KeyPair.from_secret(k.secret) == k
    assert len(k.secret) == len(k.public) == 32


def test_unseeded_and_secure_keys_are_fresh() -> None:
    assert KeyPair.generate() != KeyPair.generate()
    a, b = KeyPair.generate(secure_mode=True), KeyPair.generate(secure_mode=True)
    assert a != b
    assert KeyPair.from_secret(a.secret).public == a.public


def test_secure_mode_refuses_seeding() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^KeyPair\.generate got an rng with secure_mode=True: seeding is refused in secure_mode\.$",
    ):
        KeyPair.generate(np.random.default_rng(0), secure_mode=True)


def test_keypair_validation_and_repr() -> None:
    k = keys(1)[0]
    assert k.secret.hex() not in repr(k)
    with pytest.raises(ConfigError):
        KeyPair(secret=bytes(31), public=k.public)
    with pytest.raises(ConfigError):
        KeyPair.from_secret(b"short")
    with pytest.raises(ConfigError):
        KeyPair.generate(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------- derive_seed

BASE: dict[str, object] = {"round": 3, "group": 1, "purpose": b"mask", "pair": (4, 9)}


def test_derive_seed_binds_every_field() -> None:
    shared = bytes(range(32))
    base = derive_seed(shared, **BASE)  # type: ignore[arg-type]
    assert isinstance(base, bytes) and len(base) == 32
    # both ends of a pair derive the same seed
    assert derive_seed(shared, **{**BASE, "pair": (9, 4)}) == base  # type: ignore[arg-type]
    changes: list[dict[str, object]] = [
        {"round": 4},
        {"group": 2},
        {"purpose": b"recover"},
        {"purpose": b"mas"},
        {"pair": (4, 10)},
        {"pair": (5, 9)},
        {"pair": (4, 2**64 - 1)},
    ]
    seeds = {base}
    for change in changes:
        seeds.add(derive_seed(shared, **{**BASE, **change}))  # type: ignore[arg-type]
    seeds.add(derive_seed(bytes(reversed(range(32))), **BASE))  # type: ignore[arg-type]
    assert len(seeds) == len(changes) + 2
    # unrelated: no seed shares a long common prefix with another
    seed_list = sorted(seeds)
    for a, b in itertools.pairwise(seed_list):
        assert a[:4] != b[:4]


def test_derive_seed_takes_ids_up_to_2_64() -> None:
    shared = bytes(32)
    s = derive_seed(shared, round=0, group=0, purpose=b"", pair=(0, 2**64 - 1))
    assert len(s) == 32


@pytest.mark.parametrize(
    "change",
    [
        {"pair": (0, 2**64)},
        {"pair": (-1, 3)},
        {"round": -1},
        {"group": 2**64},
        {"round": 1.0},
        {"pair": (True, 2)},
        {"purpose": "mask"},
        {"pair": (1, 2, 3)},
    ],
)
def test_derive_seed_validates(change: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        derive_seed(bytes(32), **{**BASE, **change})  # type: ignore[arg-type]


def test_derive_seed_refuses_short_secret() -> None:
    with pytest.raises(ConfigError):
        derive_seed(bytes(16), **BASE)  # type: ignore[arg-type]


# --------------------------------------------------------------------- expand


def seed_of(i: int) -> bytes:
    return derive_seed(bytes(32), round=i, group=0, purpose=b"test", pair=(0, 1))


def test_expand_is_deterministic_and_typed() -> None:
    assert PRG_NAME == "AES-256-CTR"
    a = expand(seed_of(0), 1000)
    assert a.dtype == np.uint32 and a.shape == (1000,)
    np.testing.assert_array_equal(a, expand(seed_of(0), 1000))
    assert not np.array_equal(a, expand(seed_of(1), 1000))
    b = expand(seed_of(0), 500, np.uint64)
    assert b.dtype == np.uint64 and b.shape == (500,)
    # a prefix of a longer stream; uint64 words are pairs of little-endian uint32
    np.testing.assert_array_equal(expand(seed_of(0), 10), a[:10])
    if sys.byteorder == "little":
        np.testing.assert_array_equal(b, a.view(np.uint64))
    assert expand(seed_of(0), 0).shape == (0,)


def test_expand_is_the_aes_ctr_keystream_across_chunks() -> None:
    seed = seed_of(2)
    n = (3 << 20) // 4 + 17  # spans several internal chunks
    ref = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor()
    expected = np.frombuffer(ref.update(bytes(4 * n)), dtype="<u4")
    np.testing.assert_array_equal(expand(seed, n), expected)


def test_expand_writes_into_out() -> None:
    out = np.full(64, 7, dtype=np.uint64)
    got = expand(seed_of(3), 64, np.uint64, out=out)
    assert got is out
    np.testing.assert_array_equal(out, expand(seed_of(3), 64, np.uint64))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dtype": np.float32},
        {"dtype": np.int32},
        {"dtype": np.uint16},
        {"dtype": np.dtype(">u4") if sys.byteorder == "little" else np.dtype("<u4")},
        {"out": np.empty(9, np.uint32)},
        {"out": np.empty(10, np.uint64)},
        {"out": np.empty(20, np.uint32)[::2]},
    ],
)
def test_expand_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        expand(seed_of(0), 10, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [bytes(16), bytes(31), "x" * 32])
def test_expand_refuses_short_seeds(seed: object) -> None:
    with pytest.raises(
        ConfigError, match=r"^seed must be 32 bytes \(a 256-bit key\)\.$"
    ):
        expand(seed, 10)  # type: ignore[arg-type]


def byte_uniformity_p(words: np.ndarray) -> float:
    counts = np.bincount(words.view(np.uint8), minlength=256)
    return float(stats.chisquare(counts).pvalue)


def bit_uniformity_p(words: np.ndarray) -> float:
    bits = words.dtype.itemsize * 8
    ones = np.array(
        [np.count_nonzero((words >> np.uint64(b)) & 1) for b in range(bits)]
    )
    n = words.size
    z2 = ((ones - n / 2) ** 2 / (n / 4)).sum()  # ~ chi2(bits) under uniformity
    return float(stats.chi2.sf(z2, bits))


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_expand_looks_uniform(dtype: type) -> None:
    words = expand(seed_of(4), 1 << 16, dtype)
    assert byte_uniformity_p(words) > ALPHA
    assert bit_uniformity_p(words) > ALPHA


def test_uniformity_tests_have_power() -> None:
    # A slightly biased source fails both tests: they can fail.
    rng = np.random.default_rng(0)
    biased = rng.integers(0, 2**32, 1 << 16, dtype=np.uint32) | np.uint32(1)
    assert bit_uniformity_p(biased) < ALPHA
    skewed = rng.integers(0, 250, 4 << 16, dtype=np.uint8).view(np.uint32)
    assert byte_uniformity_p(skewed) < ALPHA
