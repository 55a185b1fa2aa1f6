"""The whole protocol in one process: a server and ``N`` clients.

:func:`secure_sum` drives the protocol engine
(:class:`~fedleak.secagg.server.ServerSession` and one
:class:`~fedleak.secagg.client.ClientSession` per user) exactly as a network
would, in either mode, with dropouts at every stage: before the upload
(``drop``), after it but before the unmask stage (``drop_during_recovery``),
and uploads that arrive after the online set is fixed (``late``, refused).
It accounts the bytes and times of each stage, for tests and for benchmarks
at the seed thesis' scale.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError, ProtocolError
from .client import ClientGuards, ClientSession
from .constants import Mode
from .fixed_point import FixedPoint
from .server import AggregationRound, RoundResult, ServerSession
from .settings import ProtocolSettings

__all__ = [
    "LocalResult",
    "secure_sum",
]

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
        Users whose upload was accepted, sorted.
    dropped : list of int
        Users whose upload was not accepted in time (``drop`` and ``late``),
        sorted.
    clipped : int
        Entries clipped when encoding, over the users that uploaded.
    bytes_up : dict of str to int
        Client-to-server payload bytes per stage: ``"advertise"`` (32 B per
        public key), ``"upload"`` (masked vectors), and where they occur
        ``"shares"`` (sealed self-mask shares), ``"revealed-shares"`` and
        ``"recover"`` (recoveries).
    bytes_down : dict of str to int
        Server-to-client bytes: ``"keys"`` (each user receives its group's
        public keys, 32 B each), ``"roster-ids"``, and at the unmask stage
        ``"online-set"`` and ``"forwarded-shares"``.
    seconds : dict of str to float
        ``"mask_per_user"`` (median time to encode and mask one vector, share
        work included), ``"server_sum"`` (adding all uploads),
        ``"unmask_per_user"`` (median client unmask time), ``"server_unmask"``
        (recoveries, self-mask rebuilding and removal) and ``"recover"`` (all
        clients' unmask work plus the server's).
    failed_groups : list of int
        Groups excluded from :attr:`total`.
    groups : list of list of int
        The members of every group, by group number.
    included : list of int
        Users whose inputs make up :attr:`total`, sorted.
    mode : str
        The protocol mode.
    late : list of int
        Users whose upload arrived after the online set was fixed.
    refusals : dict of str to int
        Client refusals by name.
    failures : dict of int to str
        Why each failed group failed.
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
    mode: Mode = "double-masking"
    late: list[int] = field(default_factory=list)
    refusals: dict[str, int] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)


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
    late: Iterable[int] = (),
    seed: int | None = None,
    secure_mode: bool = False,
    min_online: int = 3,
    round: int = 1,
    mode: Mode = "double-masking",
    threshold: float = 0.5,
) -> LocalResult:
    """Sum the users' vectors with secure aggregation, in one process.

    User ``i`` holds ``inputs[i]``. Users are split into groups (no group
    below the decryption floor); every group is one run of the protocol, and
    the decoded group sums are added up.

    Parameters
    ----------
    inputs : Sequence of numpy.ndarray
        One real vector per user, all of the same size.
    fixed_point : FixedPoint
        The encoding; its capacity is checked for the largest group first.
    group_size : int, optional
        Largest group size; ``None`` (default) makes one group.
    drop : Iterable of int
        Users that never upload.
    drop_during_recovery : Iterable of int
        Users that upload but never answer the unmask stage. In thesis mode
        their group fails if it has dropouts (otherwise no unmask stage is
        needed); in double-masking mode likewise, except that a group without
        dropouts still succeeds while ``t`` members answer.
    late : Iterable of int
        Users whose upload arrives after the online set is fixed: refused,
        and counted as dropped.
    seed : int, optional
        Makes keys and groups reproducible (tests and simulations only).
    secure_mode : bool, optional
        Draw keys from the operating system's CSPRNG; refuses ``seed``.
    min_online : int, optional
        Fewest online members for which a group's sum is released (default
        3, at least 3).
    round : int, optional
        The round number bound into the masks (default 1, >= 1).
    mode : {"double-masking", "thesis"}, optional
        Protocol mode (default double masking).
    threshold : float, optional
        Double masking: Shamir threshold as a fraction of the group (default
        one half, see :class:`~fedleak.secagg.settings.ProtocolSettings`).

    Returns
    -------
    LocalResult
        The total, the online and dropped users, failed groups, refusals,
        bytes and timings.

    Raises
    ------
    ConfigError
        If ``seed`` is given with ``secure_mode``, there are no inputs, their
        sizes differ, an id is out of range, the settings could never decrypt
        a group of these users, or the fixed point code may overflow.
    """
    _check_call(seed, secure_mode, round)
    vectors, shape = _check_inputs(inputs)
    n = len(vectors)
    gone = _id_set(drop, "drop", n)
    silent = _id_set(drop_during_recovery, "drop_during_recovery", n) - gone
    tardy = _id_set(late, "late", n) - gone
    settings = ProtocolSettings(
        mode=mode, min_online=min_online, threshold=threshold, group_size=group_size
    )
    settings.check_count(n, f"{n} input(s)")
    clients, aggregation = _open_round(
        settings, n, vectors[0].size, fixed_point, seed=seed, round=round
    )
    uploads = _upload_stage(aggregation, clients, vectors, fixed_point, gone, tardy)
    unmask_times = _unmask_stage(aggregation, clients, silent)
    return _result(
        aggregation.finish(), shape, fixed_point, gone, uploads, unmask_times, mode
    )


def _check_call(seed: int | None, secure_mode: bool, round: int) -> None:
    """Refuse a seed in secure mode and a round number below 1."""
    if seed is not None and secure_mode:
        raise ConfigError(
            "secure_sum got a seed with secure_mode=True: seeding is refused "
            "in secure_mode."
        )
    if isinstance(round, bool) or not isinstance(round, int) or round < 1:
        raise ConfigError(f"round must be an integer >= 1, got {round!r}.")


def _check_inputs(
    inputs: Sequence[np.ndarray],
) -> tuple[list[np.ndarray], tuple[int, ...]]:
    """Return the inputs as arrays and their common shape (checked)."""
    if len(inputs) < 1:
        raise ConfigError("secure_sum needs at least one input.")
    vectors = [np.asarray(x) for x in inputs]
    length = vectors[0].size
    if length < 1 or any(v.size != length for v in vectors):
        raise ConfigError("inputs must be non-empty vectors of one size.")
    return vectors, vectors[0].shape


def _open_round(
    settings: ProtocolSettings,
    n: int,
    length: int,
    fixed_point: FixedPoint,
    *,
    seed: int | None,
    round: int,
) -> tuple[list[ClientSession], AggregationRound]:
    """Start ``n`` client sessions, register their keys and open the round."""
    server = ServerSession(settings, seed=seed)
    server.round = round - 1
    key_rng = None if seed is None else np.random.default_rng([seed, _KEY_STREAM])
    guards = ClientGuards(accept_thesis=True)
    clients = [ClientSession.start(i, guards, key_rng) for i in range(n)]
    for i, client in enumerate(clients):
        server.add_advertisement(i, client.advertise_reply())
    aggregation = server.begin_round(
        range(n),
        length=length,
        modulus_bits=fixed_point.modulus_bits,
        # groups as assign_groups(range(n), group_size, seed) always made them
        rng=np.random.default_rng(seed),
    )
    fixed_point.check_capacity(max(len(g.members) for g in aggregation.groups))
    return clients, aggregation


@dataclass
class _Uploads:
    """What the upload stage leaves: per-user masking times, clipped entries."""

    mask_times: list[float]
    clipped: int


def _upload_stage(
    aggregation: AggregationRound,
    clients: list[ClientSession],
    vectors: list[np.ndarray],
    fixed_point: FixedPoint,
    gone: set[int],
    tardy: set[int],
) -> _Uploads:
    """Encode and mask every upload, fix the online set, then offer late ones."""
    mask_times: list[float] = []
    clipped = 0
    held_back = []
    for i in aggregation.members:
        request = aggregation.upload_request(i)  # sent to all; some never answer
        if i in gone:
            continue
        start = time.perf_counter()
        plan = clients[i].plan_upload(request)
        encoded, c = fixed_point.encode(vectors[i])
        reply = clients[i].upload(plan, encoded)
        mask_times.append(time.perf_counter() - start)
        if i in tardy:
            held_back.append((i, reply))
            continue
        clipped += c
        aggregation.add_upload(i, reply)
    aggregation.close()
    for i, reply in held_back:
        with contextlib.suppress(ProtocolError):  # refused: it is late
            aggregation.add_upload(i, reply)
    return _Uploads(mask_times, clipped)


def _unmask_stage(
    aggregation: AggregationRound, clients: list[ClientSession], silent: set[int]
) -> list[float]:
    """Answer every unmask request except the silent users'; return the times."""
    unmask_times: list[float] = []
    for node, request in aggregation.unmask_requests().items():
        if node in silent:
            continue
        start = time.perf_counter()
        reply = clients[node].unmask(request)
        unmask_times.append(time.perf_counter() - start)
        aggregation.add_unmask(node, reply)
    return unmask_times


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _result(
    outcome: RoundResult,
    shape: tuple[int, ...],
    fixed_point: FixedPoint,
    gone: set[int],
    uploads: _Uploads,
    unmask_times: list[float],
    mode: Mode,
) -> LocalResult:
    """Decode the released group sums and account the round."""
    total = np.zeros(int(np.prod(shape)), dtype=np.float64)
    for group in outcome.groups:
        if group.total is not None:
            total += fixed_point.decode(group.total)
    server_unmask = outcome.seconds["unmask"]
    return LocalResult(
        total=total.reshape(shape),
        online=sorted(n for g in outcome.groups for n in g.online),
        dropped=sorted(gone | set(outcome.late)),
        clipped=uploads.clipped,
        bytes_up=outcome.bytes_up,
        bytes_down=outcome.bytes_down,
        seconds={
            "mask_per_user": _median(uploads.mask_times),
            "server_sum": outcome.seconds["upload"],
            "unmask_per_user": _median(unmask_times),
            "server_unmask": server_unmask,
            "recover": sum(unmask_times) + server_unmask,
        },
        failed_groups=outcome.failed_groups,
        groups=[list(g.members) for g in outcome.groups],
        included=outcome.contributors,
        mode=mode,
        late=sorted(outcome.late),
        refusals=dict(outcome.refusals),
        failures={g.group: g.failure for g in outcome.groups if g.failure},
    )
