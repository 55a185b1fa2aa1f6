"""Masking primitives: pairwise blinding factors, recoveries, self-masks.

User ``i`` of a group blinds its encoded vector with

``k_i = sum_{j != i} sign(i, j) * PRG(seed_ij, round, group) mod 2**b``,

``sign(i, j) = +1`` if ``i < j`` else ``-1`` (seed 000 Ch. 4.1). Each
pairwise term appears once with each sign in the group, so the blinding
factors of a group sum to zero and the sum of the masked uploads is the sum
of the inputs. If users drop out, each online user sends its *recovery*
``k'_i``: the same sum, restricted to the dropped peers.

In double-masking mode (Bonawitz et al., CCS 2017) a user also adds a
*self-mask* ``PRG(b_i)`` (:func:`self_mask`), whose seed ``b_i`` its peers
hold in Shamir shares; the server removes it once ``t`` peers reveal their
shares, which they do only for users they were told are online.

:func:`blinding`, :func:`mask` and :func:`recovery` are the seed's client
functions, with no guard against a lying server; the protocol sessions
(:mod:`fedleak.secagg.client`) add the guards and call
:func:`pairwise_secrets` and :func:`add_pairwise_masks` so that each X25519
agreement is computed once per peer and round.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

import numpy as np

from ..errors import ConfigError, ProtocolError
from .keys import KeyPair, agree
from .prg import _check_dtype, _check_uint64, _expand_into, _seed, expand

__all__ = [
    "add_pairwise_masks",
    "blinding",
    "mask",
    "pairwise_secrets",
    "recovery",
    "self_mask",
    "self_mask_seed",
]

_PURPOSE = b"mask"
_SELF_DOMAIN = b"fedleak-selfmask"


def _peer_ids(own_id: int, keypair: KeyPair, peers: Mapping[int, bytes]) -> list[int]:
    """Validate the roster and return the peer ids other than ``own_id``, sorted."""
    ids = []
    for j in peers:
        jj = _check_uint64(j, "peer id")
        if jj == own_id:
            if peers[j] != keypair.public:
                raise ProtocolError(
                    f"the roster lists user {own_id} with a public key that is "
                    "not this user's own."
                )
            continue
        ids.append(jj)
    return sorted(ids)


def blinding(
    own_id: int,
    keypair: KeyPair,
    peers: Mapping[int, bytes],
    *,
    round: int,
    group: int,
    length: int,
    dtype: np.dtype | type = np.uint32,
    only: Iterable[int] | None = None,
) -> np.ndarray:
    """Compute the blinding factor ``k_i`` of one user.

    Parameters
    ----------
    own_id : int
        This user's id, in ``[0, 2**64)``.
    keypair : KeyPair
        This user's key pair.
    peers : Mapping of int to bytes
        Id -> public key of every member of the group; may include
        ``own_id`` (it is skipped, after checking it holds this user's key).
    round : int
        Round number.
    group : int
        Group number.
    length : int
        Number of words.
    dtype : numpy.dtype or type, optional
        ``numpy.uint32`` (default) or ``numpy.uint64``.
    only : Iterable of int, optional
        Restrict the sum to these peers (used by :func:`recovery`).

    Returns
    -------
    numpy.ndarray
        ``k_i`` mod ``2**b``, shape ``(length,)``.

    Raises
    ------
    ProtocolError
        If a peer key is invalid, an id in ``only`` is not a peer, or the
        roster lists ``own_id`` with another key.
    ConfigError
        If an id, the length or the dtype is invalid.
    """
    me = _check_uint64(own_id, "own_id")
    n = _check_uint64(length, "length")
    dt = _check_dtype(dtype)
    ids = _peer_ids(me, keypair, peers)
    if only is not None:
        wanted = {_check_uint64(j, "peer id") for j in only}
        unknown = sorted(wanted.difference(ids))
        if unknown:
            raise ProtocolError(
                f"user {me}: ids {unknown} are not peers of this group "
                f"(round {round}, group {group})."
            )
        ids = sorted(wanted)
    out = np.zeros(n, dtype=dt)
    shared = {j: agree(keypair.secret, peers[j]) for j in ids}
    add_pairwise_masks(out, me, shared, round=round, group=group)
    return out


def pairwise_secrets(
    own_id: int, keypair: KeyPair, peers: Mapping[int, bytes]
) -> dict[int, bytes]:
    """Agree on the X25519 shared secret with every peer of a roster.

    Parameters
    ----------
    own_id : int
        This user's id.
    keypair : KeyPair
        This user's key pair.
    peers : Mapping of int to bytes
        Id -> public key of the group's members; ``own_id`` may be listed
        (with this user's own key) and is skipped.

    Returns
    -------
    dict of int to bytes
        Peer id -> 32-byte shared secret, for every peer but ``own_id``.

    Raises
    ------
    ProtocolError
        If a key is invalid or the roster lists ``own_id`` with another key.
    """
    me = _check_uint64(own_id, "own_id")
    return {j: agree(keypair.secret, peers[j]) for j in _peer_ids(me, keypair, peers)}


def add_pairwise_masks(
    out: np.ndarray,
    own_id: int,
    shared: Mapping[int, bytes],
    *,
    round: int,
    group: int,
    only: Iterable[int] | None = None,
) -> np.ndarray:
    """Add ``sum_j sign(own_id, j) PRG(seed_ij)`` to ``out`` in place.

    Parameters
    ----------
    out : numpy.ndarray
        A writable C-contiguous uint32/uint64 vector (the arithmetic is
        modulo its word size).
    own_id : int
        This user's id.
    shared : Mapping of int to bytes
        Peer id -> shared secret (:func:`pairwise_secrets`).
    round, group : int
        Bound into every mask seed.
    only : Iterable of int, optional
        Restrict the sum to these peers (a recovery).

    Returns
    -------
    numpy.ndarray
        ``out``.

    Raises
    ------
    ProtocolError
        If an id in ``only`` has no shared secret.
    """
    me = _check_uint64(own_id, "own_id")
    ids = sorted(shared) if only is None else sorted(set(only))
    missing = [j for j in ids if j not in shared]
    if missing:
        raise ProtocolError(
            f"user {me}: ids {missing} are not peers of this group "
            f"(round {round}, group {group})."
        )
    _check_dtype(out.dtype)
    r, g = _check_uint64(round, "round"), _check_uint64(group, "group")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ConfigError("out must be a writable C-contiguous array.")
    if out.shape[0] == 0:
        return out
    buf = np.empty_like(out)
    for j in ids:
        peer = _check_uint64(j, "peer id")
        _expand_into(_seed(shared[j], r, g, _PURPOSE, me, peer), buf)
        # Unsigned wrap-around of the in-place ops is the arithmetic mod 2**b.
        if me < j:
            np.add(out, buf, out=out)
        else:
            np.subtract(out, buf, out=out)
    return out


def self_mask_seed(words: np.ndarray) -> bytes:
    """Turn a self-mask secret (Shamir field elements) into a 256-bit PRG key.

    Parameters
    ----------
    words : numpy.ndarray
        The secret ``b_i``: :data:`fedleak.secagg.shamir.SECRET_WORDS` field
        elements (what :func:`fedleak.secagg.shamir.combine` rebuilds).

    Returns
    -------
    bytes
        ``BLAKE2b-256`` of the words (little-endian 32-bit) under the domain
        label ``fedleak-selfmask``.
    """
    data = np.ascontiguousarray(np.asarray(words, dtype=np.uint64)).astype("<u4")
    return hashlib.blake2b(data.tobytes(), digest_size=32, person=_SELF_DOMAIN).digest()


def self_mask(
    words: np.ndarray,
    length: int,
    dtype: np.dtype | type = np.uint32,
    *,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Expand a self-mask secret into the mask ``PRG(b_i)``.

    Parameters
    ----------
    words : numpy.ndarray
        The secret's field elements.
    length : int
        Words of the mask.
    dtype : numpy.dtype or type, optional
        ``numpy.uint32`` (default) or ``numpy.uint64``.
    out : numpy.ndarray, optional
        Buffer to write into (see :func:`fedleak.secagg.prg.expand`).

    Returns
    -------
    numpy.ndarray
        AES-256-CTR keystream under :func:`self_mask_seed`.
    """
    return expand(self_mask_seed(words), length, dtype, out=out)


def mask(
    encoded: np.ndarray,
    own_id: int,
    keypair: KeyPair,
    peers: Mapping[int, bytes],
    *,
    round: int,
    group: int,
) -> np.ndarray:
    """Mask an encoded vector: ``encoded + k_i mod 2**b``.

    Parameters
    ----------
    encoded : numpy.ndarray
        One-dimensional uint32 or uint64 words (see
        :meth:`fedleak.secagg.fixed_point.FixedPoint.encode`).
    own_id, keypair, peers, round, group
        As for :func:`blinding`.

    Returns
    -------
    numpy.ndarray
        The masked upload, same dtype and shape as ``encoded``.

    Raises
    ------
    ConfigError
        If ``encoded`` is not a one-dimensional uint32/uint64 array.
    ProtocolError
        As for :func:`blinding`.
    """
    if not isinstance(encoded, np.ndarray) or encoded.ndim != 1:
        raise ConfigError("encoded must be a one-dimensional numpy array.")
    dt = _check_dtype(encoded.dtype)
    out = blinding(
        own_id,
        keypair,
        peers,
        round=round,
        group=group,
        length=encoded.shape[0],
        dtype=dt,
    )
    np.add(out, encoded, out=out)
    return out


def recovery(
    own_id: int,
    keypair: KeyPair,
    peers: Mapping[int, bytes],
    dropped: Iterable[int],
    *,
    round: int,
    group: int,
    length: int,
    dtype: np.dtype | type = np.uint32,
) -> np.ndarray:
    """Compute the recovery ``k'_i``: the blinding factor over dropped peers.

    The server subtracts the recoveries of all online users from the sum of
    their uploads, which removes the masks they shared with users that never
    uploaded. A user must answer at most one recovery request per round and
    group: two requests with different dropped sets would reveal single
    pairwise masks, and with them its input. Under a server that may lie, a
    client should also refuse a request whose online set (its peers minus
    ``dropped``) is smaller than ``min_online``.

    Parameters
    ----------
    own_id, keypair, peers, round, group, length, dtype
        As for :func:`blinding`.
    dropped : Iterable of int
        The members the server declared dropped.

    Returns
    -------
    numpy.ndarray
        ``k'_i`` mod ``2**b``, shape ``(length,)``.

    Raises
    ------
    ProtocolError
        If ``own_id`` is declared dropped (an online user cannot be) or a
        dropped id is not a peer.
    """
    me = _check_uint64(own_id, "own_id")
    gone = {_check_uint64(j, "dropped id") for j in dropped}
    if me in gone:
        raise ProtocolError(
            f"user {me} is listed as dropped in its own recovery request "
            f"(round {round}, group {group})."
        )
    return blinding(
        me,
        keypair,
        peers,
        round=round,
        group=group,
        length=length,
        dtype=dtype,
        only=sorted(gone),
    )
