"""Seed 000 Table 4.1, the one definition the benchmarks share.

Table 4.1 of the seed thesis (Ch. 4.1.4, 700 programs) gives, for 100 to
1,000 users, the Count-Min sketch size ``L`` each user masks and the bytes
exchanged with the tally: ``32 N`` bytes of public keys down (the group's
keys), ``4 L`` bytes of masked 32-bit words up.

The thesis sizes its sketches with ``delta = 0.01`` over ``T = M * M / 2 =
245,000`` co-view pairs (depth ``d = ceil(ln(T / delta)) = 18``) and an error
factor ``epsilon`` per row that it does not print; ``epsilon = N / 10,000``
(0.01 for 100 users ... 0.1 for 1,000) reproduces every row with the width
``w = round(e / epsilon)``. Definition 7 and
:meth:`fedleak.sketches.CountMinSketch.from_error` take ``w = ceil(e /
epsilon)``, which differs for four rows (N = 500, 600, 900, 1,000: the seed's
972, 810, 540, 486 words against 990, 828, 558, 504). Benchmarks run the
seed's own ``L`` and report the ceil-rounded size beside it
(:func:`from_error_size`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from fedleak.sketches.base import LinearSketch

__all__ = [
    "SEED_DELTA",
    "SEED_DEPTH",
    "SEED_PAIRS",
    "THESIS_TABLE_4_1",
    "SeedRow",
    "from_error_size",
    "seed_size",
]

#: ``T``: co-view pairs of 700 programs, ``M * M / 2`` (Ch. 4.1.4).
SEED_PAIRS: Final = 700 * 700 // 2
#: The seed's failure probability.
SEED_DELTA: Final = 0.01
#: ``d = ceil(ln(T / delta))`` = 18.
SEED_DEPTH: Final = math.ceil(math.log(SEED_PAIRS / SEED_DELTA))


def seed_size(epsilon: float) -> int:
    """Return the seed's sketch size ``L = d * round(e / epsilon)``."""
    return SEED_DEPTH * round(math.e / epsilon)


def from_error_size(epsilon: float) -> int:
    """Return Definition 7's size ``d * ceil(e / epsilon)`` (``from_error``)."""
    depth = LinearSketch.suggest_depth(SEED_DELTA, SEED_PAIRS)
    return depth * LinearSketch.suggest_width(epsilon)


@dataclass(frozen=True, slots=True)
class SeedRow:
    """One row of Table 4.1.

    Attributes
    ----------
    n_users : int
        Users in the aggregation.
    epsilon : float
        The sketch error factor that reproduces the row's size (not printed
        in the seed; ``N / 10,000``).
    sketch_size : int
        The seed's ``L`` (32-bit words per user).
    tally_to_user_bytes, user_to_tally_bytes : int
        The bytes the seed reports per user.
    """

    n_users: int
    epsilon: float
    sketch_size: int
    tally_to_user_bytes: int
    user_to_tally_bytes: int

    @property
    def from_error_sketch_size(self) -> int:
        """The size :meth:`~fedleak.sketches.CountMinSketch.from_error` gives."""
        return from_error_size(self.epsilon)


#: Seed 000 Table 4.1, every row (N = 100 ... 1,000).
THESIS_TABLE_4_1: Final = (
    SeedRow(100, 0.01, 4896, 3200, 19584),
    SeedRow(200, 0.02, 2448, 6400, 9792),
    SeedRow(300, 0.03, 1638, 9600, 6552),
    SeedRow(400, 0.04, 1224, 12800, 4896),
    SeedRow(500, 0.05, 972, 16000, 3888),
    SeedRow(600, 0.06, 810, 19200, 3240),
    SeedRow(700, 0.07, 702, 22400, 2808),
    SeedRow(800, 0.08, 612, 25600, 2448),
    SeedRow(900, 0.09, 540, 28800, 2160),
    SeedRow(1000, 0.1, 486, 32000, 1944),
)
