"""The whole protocol in one process: a server and ``N`` users.

:func:`secure_sum` runs setup, masking, the server's sum and recovery exactly
as the networked protocol does, for tests and for benchmarks at the seed
thesis' scale, and accounts the bytes each stage sends.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .fixed_point import FixedPoint
from .keys import KEY_BYTES, KeyPair
from .masking import mask, recovery
from .tally import GroupTally, InsufficientParticipants, assign_groups

__all__ = [
    "LocalResult",
    "secure_sum",
]

_ID_BYTES = 8
_KEY_STREAM = 0x6B657973  # b"keys": the key generator's stream, apart from groups


@dataclass
class LocalResult:
    """The outcome of :func:`secure_sum`.

    Attributes
    ----------
    total : numpy.ndarray
        Decoded float64 sum of the inputs of :attr:`included` users, in the
        shape of the inputs.
    online : list of int
        Users that uploaded, sorted.
    dropped : list of int
        Users that did not upload, sorted.
    clipped : int
        Entries clipped when encoding, over the users that uploaded.
    bytes_up : dict of str to int
        Client-to-server bytes per stage: ``"advertise"`` (32 B per public
        key), ``"upload"`` (masked vectors) and ``"recover"`` (recoveries).
    bytes_down : dict of str to int
        Server-to-client bytes per stage: ``"keys"`` (each user receives its
        group's public keys, 32 B each) and ``"online-set"`` (8 B per online
        id, sent to every online user of a group with dropouts).
    seconds : dict of str to float
        ``"mask_per_user"`` (median time to encode and mask one vector),
        ``"server_sum"`` (adding all uploads and closing the tallies) and
        ``"recover"`` (all users' recoveries plus the server's subtraction).
    failed_groups : list of int
        Groups excluded from :attr:`total`: fewer than ``min_online``
        members online (always so for a smaller group), or a recovery never
        arrived.
    groups : list of list of int
        The members of every group, by group number.
    included : list of int
        Users whose inputs make up :attr:`total`, sorted.
    """

    total: np.ndarray
    online: list[int]
    dropped: list[int]
    clipped: int
    bytes_up: dict[str, int]
    bytes_down: dict[str, int]
    seconds: dict[str, float]
    failed_groups: list[int]
    groups: list[list[int]]
    included: list[int]


def _id_set(values: Iterable[int], name: str, n: int) -> set[int]:
    out = set()
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise ConfigError(f"{name} must hold user ids, got {v!r}.")
        if not 0 <= int(v) < n:
            raise ConfigError(f"{name} holds {v}, not a user id in [0, {n}).")
        out.add(int(v))
    return out


def secure_sum(
    inputs: Sequence[np.ndarray],
    *,
    fixed_point: FixedPoint,
    group_size: int | None = None,
    drop: Iterable[int] = (),
    drop_during_recovery: Iterable[int] = (),
    seed: int | None = None,
    secure_mode: bool = False,
    min_online: int = 3,
    round: int = 1,
) -> LocalResult:
    """Sum the users' vectors with pairwise-mask secure aggregation.

    User ``i`` holds ``inputs[i]``. Users are split into groups by
    ``assign_groups(range(N), group_size, seed)``; every group is one run of
    the protocol, and the decoded group sums are added up.

    Parameters
    ----------
    inputs : Sequence of numpy.ndarray
        One real vector per user, all of the same size.
    fixed_point : FixedPoint
        The encoding; its capacity is checked for the largest group first.
    group_size : int, optional
        Largest group size; ``None`` (default) makes one group.
    drop : Iterable of int
        Users that never upload (dropped before ``U_on`` is fixed).
    drop_during_recovery : Iterable of int
        Users that upload but never send their recovery. Their group fails
        if it has dropouts (otherwise no recovery is needed). Ids also in
        ``drop`` never uploaded and are just dropped.
    seed : int, optional
        Makes keys and groups reproducible (tests and simulations only).
    secure_mode : bool, optional
        Draw keys from the operating system's CSPRNG; refuses ``seed``.
    min_online : int, optional
        Fewest online members for which a group's sum is released (default 3).
    round : int, optional
        The round number bound into the masks (default 1).

    Returns
    -------
    LocalResult
        The total, the online and dropped users, failed groups, bytes and
        timings.

    Raises
    ------
    ConfigError
        If ``seed`` is given with ``secure_mode``, there are no inputs, their
        sizes differ, an id is out of range, or the fixed point code may
        overflow.
    """
    if seed is not None and secure_mode:
        raise ConfigError(
            "secure_sum got a seed with secure_mode=True: seeding is refused "
            "in secure_mode."
        )
    if isinstance(round, bool) or not isinstance(round, int) or round < 0:
        raise ConfigError(f"round must be an integer >= 0, got {round!r}.")
    n = len(inputs)
    if n < 1:
        raise ConfigError("secure_sum needs at least one input.")
    vectors = [np.asarray(x) for x in inputs]
    shape = vectors[0].shape
    length = vectors[0].size
    if length < 1 or any(v.size != length for v in vectors):
        raise ConfigError("inputs must be non-empty vectors of one size.")
    gone = _id_set(drop, "drop", n)
    silent = _id_set(drop_during_recovery, "drop_during_recovery", n) - gone

    groups = assign_groups(range(n), group_size, seed)
    largest = max(len(g) for g in groups)
    fixed_point.check_capacity(largest)

    key_rng = None if seed is None else np.random.default_rng([seed, _KEY_STREAM])
    keys = [KeyPair.generate(key_rng, secure_mode=secure_mode) for _ in range(n)]
    dtype = fixed_point.dtype
    word = dtype.itemsize

    bytes_up = {"advertise": KEY_BYTES * n, "upload": 0, "recover": 0}
    bytes_down = {"keys": sum(KEY_BYTES * len(g) ** 2 for g in groups)}
    bytes_down["online-set"] = 0
    mask_times: list[float] = []
    server_s = 0.0
    recover_s = 0.0
    clipped = 0
    total = np.zeros(length, dtype=np.float64)
    failed: list[int] = []
    included: list[int] = []

    for g, members in enumerate(groups):
        roster = {i: keys[i].public for i in members}
        tally = GroupTally(
            round=round,
            group=g,
            members=members,
            length=length,
            dtype=dtype,
            min_online=min_online,
        )
        for i in members:
            if i in gone:
                continue
            start = time.perf_counter()
            encoded, c = fixed_point.encode(vectors[i])
            masked = mask(encoded, i, keys[i], roster, round=round, group=g)
            mask_times.append(time.perf_counter() - start)
            clipped += c
            bytes_up["upload"] += masked.nbytes
            start = time.perf_counter()
            tally.add_upload(i, round, masked)
            server_s += time.perf_counter() - start
        start = time.perf_counter()
        try:
            online, dropped = tally.close()
        except InsufficientParticipants:
            server_s += time.perf_counter() - start
            failed.append(g)
            continue
        server_s += time.perf_counter() - start
        if dropped:
            bytes_down["online-set"] += _ID_BYTES * len(online) ** 2
            for i in online:
                if i in silent:
                    continue
                start = time.perf_counter()
                k_prime = recovery(
                    i,
                    keys[i],
                    roster,
                    dropped,
                    round=round,
                    group=g,
                    length=length,
                    dtype=dtype,
                )
                tally.add_recovery(i, round, k_prime)
                recover_s += time.perf_counter() - start
                bytes_up["recover"] += length * word
            if tally.missing_recoveries:
                failed.append(g)
                continue
        total += fixed_point.decode(tally.result())
        included.extend(online)

    uploaded = sorted(set(range(n)) - gone)
    return LocalResult(
        total=total.reshape(shape),
        online=uploaded,
        dropped=sorted(gone),
        clipped=clipped,
        bytes_up=bytes_up,
        bytes_down=bytes_down,
        seconds={
            "mask_per_user": statistics.median(mask_times) if mask_times else 0.0,
            "server_sum": server_s,
            "recover": recover_s,
        },
        failed_groups=failed,
        groups=groups,
        included=sorted(included),
    )
