"""Masked aggregation of sketches: a tally learns only the sum (seed 000 Ch. 4.1.2).

Each user masks its sketch table with :mod:`fedleak.secagg`'s protocol
(X25519 agreement, AES-256-CTR masks summing to zero in each group, recovery
of dropped users; by default also a Shamir-shared self-mask, the seed's
scheme as ``mode="thesis"``) and uploads ``L = d * w`` words; the tally adds
the uploads and obtains the table of the union of all streams, since sketches
are linear. This module only turns sketches into the integer vectors the
protocol sums (a :class:`~fedleak.secagg.FixedPoint` code with scale 1, so
counters are sent exactly) and the sum back into a sketch; the protocol
itself is :func:`fedleak.secagg.secure_sum`, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from ..errors import ConfigError, DataError
from ..secagg import FixedPoint, LocalResult, ProtocolSettings, secure_sum
from ..secagg.constants import Mode
from .base import LinearSketch

__all__ = [
    "MaskedAggregate",
    "aggregate_sketches",
    "sketch_fixed_point",
]

SketchT = TypeVar("SketchT", bound=LinearSketch)


def sketch_fixed_point(
    max_count: int, n_users: int, modulus_bits: int | None = None
) -> FixedPoint:
    """Return the exact integer code for counters: clip ``max_count``, scale 1.

    Parameters
    ----------
    max_count : int
        Public bound on any single counter of one user's table, >= 1.
    n_users : int
        Users summed in one group (the capacity is checked for it).
    modulus_bits : {32, 64}, optional
        Word size. Default: 32 bits (the seed's choice) when the sum fits,
        else 64.

    Returns
    -------
    FixedPoint
        ``FixedPoint(max_count, 1.0, bits)``.

    Raises
    ------
    ConfigError
        If the sum may overflow the chosen words.
    """
    if isinstance(max_count, bool) or not isinstance(max_count, int | np.integer):
        raise ConfigError(f"max_count must be an integer, got {max_count!r}.")
    if max_count < 1:
        raise ConfigError(f"max_count must be >= 1, got {max_count}.")
    if modulus_bits is None:
        code = FixedPoint(float(max_count), 1.0, 32)
        try:
            code.check_capacity(n_users)
        except ConfigError:
            code = FixedPoint(float(max_count), 1.0, 64)
    else:
        code = FixedPoint(float(max_count), 1.0, modulus_bits)
    code.check_capacity(n_users)
    return code


@dataclass
class MaskedAggregate(Generic[SketchT]):
    """The outcome of :func:`aggregate_sketches`.

    Attributes
    ----------
    sketch : LinearSketch
        The sketch of the included users' streams (sum of their tables).
    protocol : fedleak.secagg.LocalResult
        The protocol run: included, online and dropped users, failed groups,
        bytes per stage and timings.
    fixed_point : fedleak.secagg.FixedPoint
        The integer code used (word size in ``modulus_bits``).
    """

    sketch: SketchT
    protocol: LocalResult
    fixed_point: FixedPoint

    @property
    def bytes_per_user_up(self) -> float:
        """Mean bytes one online user sends (key, masked table, recovery)."""
        online = max(1, len(self.protocol.online))
        return sum(self.protocol.bytes_up.values()) / online

    @property
    def bytes_per_user_down(self) -> float:
        """Mean bytes one user receives from the tally (keys, online set)."""
        return sum(self.protocol.bytes_down.values()) / max(
            1, len(self.protocol.online) + len(self.protocol.dropped)
        )


def _public_bound(sketches: Sequence[LinearSketch], max_count: int | None) -> int:
    """Check that the users' sketches can be summed; return the public bound.

    The sketches must share kind, depth, width and seed; ``max_count`` (or,
    by default, the largest absolute counter, at least 1) bounds every
    counter, and a counter above a given bound is refused rather than clipped.
    """
    if not sketches:
        raise ConfigError("aggregate_sketches needs at least one sketch.")
    template = sketches[0]
    for i, sketch in enumerate(sketches):
        if not template.compatible(sketch):
            raise ConfigError(
                f"sketch {i} ({sketch!r}) differs from sketch 0 ({template!r}) in "
                "kind, depth, width or seed; users must share them."
            )
    largest = max(int(np.abs(s.table).max()) for s in sketches)
    bound = max(1, largest) if max_count is None else max_count
    if largest > bound:
        worst = max(
            range(len(sketches)), key=lambda i: int(np.abs(sketches[i].table).max())
        )
        raise DataError(
            f"user {worst} has a counter of {largest}, above max_count={bound}; "
            "raise max_count (it is public) or split the user's stream."
        )
    return bound


def aggregate_sketches(
    sketches: Sequence[SketchT],
    *,
    max_count: int | None = None,
    group_size: int | None = None,
    drop: Iterable[int] = (),
    drop_during_recovery: Iterable[int] = (),
    late: Iterable[int] = (),
    modulus_bits: int | None = None,
    min_online: int = 3,
    round: int = 1,
    seed: int | None = None,
    secure_mode: bool = False,
    mode: Mode = "double-masking",
    threshold: float = 0.5,
) -> MaskedAggregate[SketchT]:
    """Sum users' sketches with the pairwise-mask protocol, in one process.

    A tally and ``N = len(sketches)`` users run setup, masking, aggregation
    and (if users drop) recovery, group by group, exactly as over a network
    (:func:`fedleak.secagg.secure_sum`); the decoded sum becomes a sketch
    with the users' hash functions.

    Parameters
    ----------
    sketches : Sequence of LinearSketch
        One sketch per user; all of one kind, depth, width and seed.
    max_count : int, optional
        Public bound on any counter of a single user's table. Default: the
        largest absolute counter among the inputs (at least 1).
    group_size : int, optional
        Users per group (the seed suggests 100-1,000); default one group.
    drop : Iterable of int
        Users that never upload.
    drop_during_recovery : Iterable of int
        Users that upload but do not answer the unmask request.
    late : Iterable of int
        Users whose upload arrives after the online set is fixed (refused).
    modulus_bits : {32, 64}, optional
        Word size; default 32 bits when the sum fits.
    min_online : int, default=3
        Fewest online members for which a group's sum is released.
    round : int, default=1
        Round number bound into the masks.
    seed : int, optional
        Makes keys and groups reproducible (simulations); refused with
        ``secure_mode``.
    secure_mode : bool, default=False
        Draw keys from the operating system's CSPRNG.
    mode : {"double-masking", "thesis"}, default="double-masking"
        Protocol mode (see :class:`fedleak.secagg.ProtocolSettings`).
    threshold : float, default=0.5
        Double masking: Shamir threshold as a fraction of the group.

    Returns
    -------
    MaskedAggregate
        The summed sketch and the protocol record.

    Raises
    ------
    ConfigError
        If the sketches are incompatible, the arguments invalid, or no group
        of these users could ever be decrypted.
    DataError
        If a user's counter exceeds ``max_count`` (it would be clipped).
    """
    bound = _public_bound(sketches, max_count)
    template = sketches[0]
    n = len(sketches)
    settings = ProtocolSettings(
        mode=mode, min_online=min_online, threshold=threshold, group_size=group_size
    )
    settings.check_count(n, f"{n} sketch(es)")
    code = sketch_fixed_point(bound, settings.largest_group(n), modulus_bits)
    result = secure_sum(
        [s.table.reshape(-1) for s in sketches],
        fixed_point=code,
        group_size=group_size,
        drop=drop,
        drop_during_recovery=drop_during_recovery,
        late=late,
        seed=seed,
        secure_mode=secure_mode,
        min_online=min_online,
        round=round,
        mode=mode,
        threshold=threshold,
    )
    return MaskedAggregate(
        sketch=template.with_table(np.rint(result.total).astype(np.int64)),
        protocol=result,
        fixed_point=code,
    )
