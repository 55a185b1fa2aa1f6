"""Client side of the protocol: blinding factors, masked uploads, recoveries.

User ``i`` of a group blinds its encoded vector with

``k_i = sum_{j != i} sign(i, j) * PRG(seed_ij, round, group) mod 2**b``,

``sign(i, j) = +1`` if ``i < j`` else ``-1``. Each pairwise term appears
once with each sign in the group, so the blinding factors of a group sum to
zero and the sum of the masked uploads is the sum of the inputs. If users
drop out, each online user sends its *recovery* ``k'_i``: the same sum,
restricted to the dropped peers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ..errors import ConfigError, ProtocolError
from .keys import KeyPair, agree
from .prg import _check_dtype, _check_uint64, derive_seed, expand

__all__ = [
    "blinding",
    "mask",
    "recovery",
]

_PURPOSE = b"mask"


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
    buf = np.empty(n, dtype=dt)
    secret = keypair.secret
    for j in ids:
        shared = agree(secret, peers[j])
        seed = derive_seed(
            shared, round=round, group=group, purpose=_PURPOSE, pair=(me, j)
        )
        expand(seed, n, dt, out=buf)
        # Unsigned wrap-around of the in-place ops is the arithmetic mod 2**b.
        if me < j:
            np.add(out, buf, out=out)
        else:
            np.subtract(out, buf, out=out)
    return out


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
