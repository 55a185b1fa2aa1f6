"""X25519 key pairs and key agreement of the secure aggregation protocol.

Every user publishes the public half of a :class:`KeyPair`; two users ``i``
and ``j`` then agree on the shared secret ``X25519(sk_i, pk_j) =
X25519(sk_j, pk_i)`` (:func:`agree`), from which the PRG seed of their
pairwise mask is derived.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base
from nacl.exceptions import CryptoError

from ..errors import ConfigError, ProtocolError

__all__ = [
    "KeyPair",
    "agree",
]

KEY_BYTES = 32
_ZERO = bytes(KEY_BYTES)


@dataclass(frozen=True)
class KeyPair:
    """An X25519 key pair.

    Attributes
    ----------
    secret : bytes
        The 32-byte private scalar (left out of ``repr``).
    public : bytes
        The 32-byte public key, ``X25519(secret, 9)``.
    """

    secret: bytes = field(repr=False)
    public: bytes

    def __post_init__(self) -> None:
        for name in ("secret", "public"):
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) != KEY_BYTES:
                raise ConfigError(f"KeyPair.{name} must be {KEY_BYTES} bytes.")

    @classmethod
    def from_secret(cls, secret: bytes) -> KeyPair:
        """Build the key pair of a private scalar.

        Parameters
        ----------
        secret : bytes
            32-byte private scalar (X25519 clamps it).

        Returns
        -------
        KeyPair
            The pair, with the public key recomputed from ``secret``.

        Raises
        ------
        ConfigError
            If ``secret`` is not 32 bytes.
        """
        if not isinstance(secret, bytes) or len(secret) != KEY_BYTES:
            raise ConfigError(f"secret must be {KEY_BYTES} bytes.")
        return cls(secret=secret, public=crypto_scalarmult_base(secret))

    @classmethod
    def generate(
        cls, rng: np.random.Generator | None = None, *, secure_mode: bool = False
    ) -> KeyPair:
        """Draw a fresh key pair.

        Parameters
        ----------
        rng : numpy.random.Generator, optional
            Source of the secret for reproducible tests and simulations
            (``rng.bytes(32)``). Such keys are predictable: never use them to
            protect real data. Without it the secret comes from the operating
            system's CSPRNG.
        secure_mode : bool, optional
            If true, the secret always comes from the operating system's
            CSPRNG and ``rng`` must be left out.

        Returns
        -------
        KeyPair
            The new key pair.

        Raises
        ------
        ConfigError
            If ``rng`` is given with ``secure_mode=True``, or is not a
            :class:`numpy.random.Generator`.
        """
        if rng is not None:
            if secure_mode:
                raise ConfigError(
                    "KeyPair.generate got an rng with secure_mode=True: "
                    "seeding is refused in secure_mode."
                )
            if not isinstance(rng, np.random.Generator):
                raise ConfigError(
                    f"rng must be a numpy.random.Generator, got {type(rng).__name__}."
                )
            return cls.from_secret(rng.bytes(KEY_BYTES))
        return cls.from_secret(os.urandom(KEY_BYTES))


def agree(secret: bytes, peer_public: bytes) -> bytes:
    """Compute the X25519 shared secret with a peer.

    Parameters
    ----------
    secret : bytes
        Own 32-byte private scalar.
    peer_public : bytes
        The peer's 32-byte public key.

    Returns
    -------
    bytes
        The 32-byte shared secret; ``agree(sk_i, pk_j) == agree(sk_j, pk_i)``.

    Raises
    ------
    ProtocolError
        If ``peer_public`` is not 32 bytes, or is a low-order point (the
        shared secret would be all zeros, known to everyone).
    ConfigError
        If ``secret`` is not 32 bytes.
    """
    if not isinstance(secret, bytes) or len(secret) != KEY_BYTES:
        raise ConfigError(f"secret must be {KEY_BYTES} bytes.")
    if not isinstance(peer_public, bytes) or len(peer_public) != KEY_BYTES:
        size = len(peer_public) if isinstance(peer_public, bytes | bytearray) else None
        raise ProtocolError(
            f"invalid public key: expected {KEY_BYTES} bytes, got "
            f"{type(peer_public).__name__}"
            + (f" of {size} bytes." if size is not None else ".")
        )
    try:
        shared = crypto_scalarmult(secret, peer_public)
    except (RuntimeError, CryptoError) as exc:
        raise ProtocolError(
            "invalid public key: a low-order point (all-zero shared secret)."
        ) from exc
    if shared == _ZERO:
        raise ProtocolError(
            "invalid public key: a low-order point (all-zero shared secret)."
        )
    return shared
