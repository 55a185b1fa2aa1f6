"""The peer-to-peer channel of the self-mask shares: ChaCha20-Poly1305 AEAD.

In double-masking mode a client sends each group member a Shamir share of
its self-mask seed through the server, which must neither read nor replay
nor redirect it. The share is encrypted with ChaCha20-Poly1305
(``cryptography``, RFC 8439) under a key that only the two members can
derive: ``derive_seed(X25519(sk_i, pk_j), round, group, purpose=b"share",
pair)`` (:func:`fedleak.secagg.prg.derive_seed`, BLAKE2b keyed with the
shared secret). The associated data bind the session, round, group, sender
and recipient, so a ciphertext moved to another round, group or recipient,
or presented as coming from another sender, fails authentication.

The key is unique per pair, round and group, and each direction of a pair
encrypts once under it, with its own nonce (1 for the smaller id sending, 2
for the larger), so no nonce is ever reused under a key. The mask seeds of
the pairwise masks come from the same X25519 secret with purpose ``b"mask"``
(a different BLAKE2b input), and the protocol never reveals that secret
itself (recoveries reveal PRG outputs, not seeds), so one session key pair
serves both purposes at one X25519 agreement per peer.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from ..errors import ConfigError, ProtocolError
from .prg import _seed, derive_seed

__all__ = [
    "TAG_BYTES",
    "channel_key",
    "open_share",
    "seal_share",
]

#: Bytes the AEAD adds to a plaintext (the Poly1305 tag).
TAG_BYTES = 16
_PURPOSE = b"share"
_DOMAIN = b"fedleak-secagg-share-v1"
_FIELDS = struct.Struct(">4Q")


def channel_key(
    shared: bytes, *, round: int, group: int, pair: tuple[int, int]
) -> bytes:
    """Derive the 32-byte AEAD key of one pair in one round and group.

    Parameters
    ----------
    shared : bytes
        The pair's X25519 shared secret.
    round, group : int
        The round and group.
    pair : tuple of int
        The two member ids (order does not matter).

    Returns
    -------
    bytes
        32 bytes.
    """
    if not isinstance(shared, bytes) or len(shared) != 32:
        raise ConfigError("shared must be the 32-byte X25519 shared secret.")
    try:
        return _seed(shared, round, group, _PURPOSE, pair[0], pair[1])
    except (struct.error, TypeError, IndexError):
        # the checked path names the bad field
        return derive_seed(
            shared, round=round, group=group, purpose=_PURPOSE, pair=pair
        )


def _nonce(sender: int, recipient: int) -> bytes:
    return (1 if sender < recipient else 2).to_bytes(12, "big")


def _associated(
    session: bytes, round: int, group: int, sender: int, recipient: int
) -> bytes:
    try:
        fields = _FIELDS.pack(round, group, sender, recipient)
    except struct.error:
        raise ConfigError(
            "round, group, sender and recipient must be integers in [0, 2**64)"
        ) from None
    return _DOMAIN + len(session).to_bytes(2, "big") + session + fields


def seal_share(
    key: bytes,
    share: bytes,
    *,
    session: bytes,
    round: int,
    group: int,
    sender: int,
    recipient: int,
) -> bytes:
    """Encrypt and authenticate one share for one recipient.

    Parameters
    ----------
    key : bytes
        The pair's :func:`channel_key`.
    share : bytes
        The plaintext share.
    session : bytes
        The sender's session id (bound as associated data).
    round, group, sender, recipient : int
        Bound as associated data.

    Returns
    -------
    bytes
        Ciphertext and tag, ``len(share) + TAG_BYTES`` bytes.
    """
    aad = _associated(session, round, group, sender, recipient)
    return ChaCha20Poly1305(key).encrypt(_nonce(sender, recipient), share, aad)


def open_share(
    key: bytes,
    sealed: bytes,
    *,
    session: bytes,
    round: int,
    group: int,
    sender: int,
    recipient: int,
) -> bytes:
    """Check and decrypt a share sealed by :func:`seal_share`.

    Parameters
    ----------
    key, session, round, group, sender, recipient
        As the sender used them.
    sealed : bytes
        The ciphertext.

    Returns
    -------
    bytes
        The plaintext share.

    Raises
    ------
    ProtocolError
        If authentication fails: the ciphertext was altered, or was made for
        another session, round, group, sender or recipient.
    """
    aad = _associated(session, round, group, sender, recipient)
    try:
        return ChaCha20Poly1305(key).decrypt(_nonce(sender, recipient), sealed, aad)
    except InvalidTag:
        raise ProtocolError(
            f"the share from {sender} to {recipient} (round {round}, group "
            f"{group}) fails authentication"
        ) from None
