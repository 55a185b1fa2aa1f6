"""The sealed share channel: only the recipient opens, nothing can be moved."""

from __future__ import annotations

import numpy as np
import pytest

from fedleak.errors import ProtocolError
from fedleak.secagg import KeyPair, agree
from fedleak.secagg.channel import TAG_BYTES, channel_key, open_share, seal_share

SESSION = bytes(range(32))


def keys() -> tuple[bytes, bytes]:
    rng = np.random.default_rng(5)
    a, b, c = (KeyPair.generate(rng) for _ in range(3))
    ab = agree(a.secret, b.public)
    return channel_key(ab, round=3, group=1, pair=(10, 20)), agree(c.secret, b.public)


def sealed(key: bytes, **change: int | bytes) -> bytes:
    fields: dict[str, int | bytes] = {
        "session": SESSION,
        "round": 3,
        "group": 1,
        "sender": 10,
        "recipient": 20,
    }
    fields.update(change)
    return seal_share(key, b"share-bytes-0123456789abcdefghij", **fields)  # type: ignore[arg-type]


def test_round_trip_and_size() -> None:
    key, _ = keys()
    blob = sealed(key)
    assert len(blob) == 32 + TAG_BYTES
    assert b"share-bytes" not in blob
    out = open_share(
        key, blob, session=SESSION, round=3, group=1, sender=10, recipient=20
    )
    assert out == b"share-bytes-0123456789abcdefghij"


def test_both_sides_derive_the_same_key_and_directions_differ() -> None:
    rng = np.random.default_rng(5)
    a, b = KeyPair.generate(rng), KeyPair.generate(rng)
    k_ab = channel_key(agree(a.secret, b.public), round=3, group=1, pair=(10, 20))
    k_ba = channel_key(agree(b.secret, a.public), round=3, group=1, pair=(20, 10))
    assert k_ab == k_ba
    # the two directions use different nonces: same plaintext, other bytes
    there = sealed(k_ab)
    back = sealed(k_ab, sender=20, recipient=10)
    assert there != back
    assert (
        channel_key(agree(a.secret, b.public), round=4, group=1, pair=(10, 20)) != k_ab
    )


@pytest.mark.parametrize(
    "change",
    [
        {"round": 4},
        {"group": 2},
        {"sender": 11},
        {"recipient": 21},
        {"sender": 20, "recipient": 10},
        {"session": bytes(32)},
    ],
    ids=["round", "group", "sender", "recipient", "reversed", "session"],
)
def test_a_moved_share_fails_authentication(change: dict[str, int | bytes]) -> None:
    key, _ = keys()
    blob = sealed(key)
    fields: dict[str, int | bytes] = {
        "session": SESSION,
        "round": 3,
        "group": 1,
        "sender": 10,
        "recipient": 20,
    }
    fields.update(change)
    with pytest.raises(ProtocolError, match="fails authentication"):
        open_share(key, blob, **fields)  # type: ignore[arg-type]


def test_tampering_or_a_third_partys_key_fails() -> None:
    key, other = keys()
    blob = bytearray(sealed(key))
    blob[0] ^= 1
    with pytest.raises(
        ProtocolError,
        match=r"^the share from 10 to 20 \(round 3, group 1\) fails authentication$",
    ):
        open_share(
            key, bytes(blob), session=SESSION, round=3, group=1, sender=10, recipient=20
        )
    wrong = channel_key(other, round=3, group=1, pair=(10, 20))
    with pytest.raises(
        ProtocolError,
        match=r"^the share from 10 to 20 \(round 3, group 1\) fails authentication$",
    ):
        open_share(
            wrong,
            sealed(key),
            session=SESSION,
            round=3,
            group=1,
            sender=10,
            recipient=20,
        )
