"""Shared machinery of the linear sketches: hashing, the table, merge, bytes.

Both sketches of seed 000 Ch. 2.2 are a ``depth x width`` integer table
``X`` with one hash function per row drawn from the pairwise-independent
family of Ch. 4.1.2,

``h_j(x) = ((a_j * x + b_j) mod p) mod w``, ``a_j in [1, p)``, ``b_j in [0, p)``,

with the Mersenne prime ``p = 2**31 - 1``. Items are integers in ``[0, p)``
(map other keys to integers first). Updating item ``i`` by ``c_i`` adds
``c_i`` to ``X[j, h_j(i)]`` in every row (Fig. 2.1), so the table is linear
in the stream: the sketch of a union is the element-wise sum of the sketches
(:meth:`LinearSketch.merge`). The table holds signed 64-bit integers, so it
can be masked and securely summed word by word (:mod:`fedleak.sketches.masked`).

Apache DataSketches offers a ``count_min_sketch`` in Python, but it exposes
neither its table (it cannot be masked or summed) nor a Count Sketch, and it
updates one item per call; hence this hand-written, vectorised version.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from typing import Self

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, DataError
from ..validation import check_int, check_probability

__all__ = [
    "MERSENNE_PRIME",
    "ItemsLike",
    "LinearSketch",
    "as_items",
]

#: The prime ``p`` of the hash family ``((a x + b) mod p) mod w``.
MERSENNE_PRIME = (1 << 31) - 1

#: Items: one integer or an array of integers in ``[0, MERSENNE_PRIME)``.
ItemsLike = int | npt.ArrayLike

_MAGIC = b"FLSK"
_FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBBxxIIqQ")  # magic, version, kind, depth, width, seed, p
_CHUNK = 16384  # items per block: the (depth x block) indices stay in cache
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Below this bound on ``|counter| + |increment|`` no int64 sum can wrap; the
#: float64 bound check has a wide margin for its rounding.
_SAFE_MAGNITUDE = float(1 << 62)


def _overflow_error(flat_index: int, width: int, value: int) -> DataError:
    row, column = divmod(flat_index, width)
    return DataError(
        f"counter overflow at row {row}, column {column}: {value} does not fit in "
        "a 64-bit counter; the sketch is left unchanged"
    )


def _checked_sum(table: np.ndarray, increment: np.ndarray, width: int) -> np.ndarray:
    """Return ``table + increment`` (int64), raising instead of wrapping around.

    The common case is decided by a float64 bound (no counter near 2**62);
    only then is the sum checked cell by cell in exact integers.
    """
    bound = float(np.abs(table, dtype=np.float64).max(initial=0.0)) + float(
        np.abs(increment, dtype=np.float64).max(initial=0.0)
    )
    if bound < _SAFE_MAGNITUDE:
        summed: np.ndarray = table + increment
        return summed
    exact = table.astype(object) + increment.astype(object)
    flat = exact.reshape(-1)
    for index, value in enumerate(flat):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise _overflow_error(index, width, int(value))
    checked: np.ndarray = exact.astype(np.int64)
    return checked


def as_items(items: ItemsLike) -> np.ndarray:
    """Check items and return them as a one-dimensional ``uint64`` array.

    Raises
    ------
    DataError
        If an item is not an integer in ``[0, 2**31 - 1)``.
    """
    arr = np.asarray(items)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise DataError(
            f"sketch items must be integers, got dtype {arr.dtype}; map keys to "
            "integers in [0, 2**31 - 1) first."
        )
    flat = arr.reshape(-1)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= MERSENNE_PRIME):
        raise DataError(
            f"sketch items must lie in [0, {MERSENNE_PRIME}), got values in "
            f"[{int(flat.min())}, {int(flat.max())}]."
        )
    return flat.astype(np.uint64, copy=False)


def _as_counts(counts: int | npt.ArrayLike, n: int) -> np.ndarray | int:
    if isinstance(counts, int | np.integer) and not isinstance(counts, bool):
        count = int(counts)
        if not _INT64_MIN <= count <= _INT64_MAX:
            raise DataError(f"a count must fit in 64 bits, got {count}.")
        return count
    arr = np.asarray(counts)
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"counts must be integers, got dtype {arr.dtype}.")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > _INT64_MAX:
        raise DataError(f"a count must fit in 64 bits, got {int(arr.max())}.")
    flat = arr.reshape(-1).astype(np.int64, copy=False)
    if flat.size != n:
        raise DataError(f"got {flat.size} counts for {n} items; give one per item.")
    return flat


class LinearSketch:
    """A ``depth x width`` table of int64 counters with seeded row hashes.

    Subclasses (:class:`~fedleak.sketches.CountMinSketch`,
    :class:`~fedleak.sketches.CountSketch`) add the estimator.

    Parameters
    ----------
    depth : int
        Rows ``d`` (one hash function each), >= 1.
    width : int
        Buckets per row ``w``, >= 1.
    seed : int, default=0
        Seed of the hash functions, in ``[0, 2**63)``. Sketches that are
        merged or securely summed must share depth, width and seed.
    """

    _KIND = 0

    def __init__(self, depth: int, width: int, *, seed: int = 0) -> None:
        self._depth = check_int("depth", depth, low=1)
        self._width = check_int("width", width, low=1)
        self._seed = check_int("seed", seed, low=0, high=(1 << 63) - 1)
        rng = np.random.default_rng(self._seed)
        self._a = rng.integers(1, MERSENNE_PRIME, size=self._depth, dtype=np.uint64)
        self._b = rng.integers(0, MERSENNE_PRIME, size=self._depth, dtype=np.uint64)
        self._offsets = (np.arange(self._depth, dtype=np.int64) * self._width)[:, None]
        self._table = np.zeros((self._depth, self._width), dtype=np.int64)

    # ------------------------------------------------------------ sizing

    @staticmethod
    def suggest_width(epsilon: float) -> int:
        """Return ``w = ceil(e / epsilon)`` (Definition 7)."""
        return math.ceil(
            math.e / check_probability("epsilon", epsilon, closed="neither")
        )

    @staticmethod
    def suggest_depth(delta: float, n_items: int = 1) -> int:
        """Return ``d = ceil(ln(n_items / delta))`` (Definition 7, ``T = n_items``).

        With ``n_items = 1`` the guarantee holds for each query with
        probability ``1 - delta``; with ``n_items = T`` for all ``T`` items
        at once (union bound), as in the seed's Ch. 4.1 (``T = 245,000``,
        ``delta = 0.01`` give ``d = 18``).
        """
        p = check_probability("delta", delta, closed="neither")
        return max(1, math.ceil(math.log(check_int("n_items", n_items, low=1) / p)))

    # ------------------------------------------------------------ properties

    @property
    def depth(self) -> int:
        """Number of rows ``d``."""
        return self._depth

    @property
    def width(self) -> int:
        """Buckets per row ``w``."""
        return self._width

    @property
    def seed(self) -> int:
        """Seed of the hash functions."""
        return self._seed

    @property
    def size(self) -> int:
        """Number of counters ``L = d * w``."""
        return self._depth * self._width

    @property
    def table(self) -> np.ndarray:
        """The ``(depth, width)`` int64 table (a read-only view)."""
        view = self._table.view()
        view.flags.writeable = False
        return view

    @property
    def total(self) -> int:
        """``sum_i c_i``: the total count added (the sum of any row)."""
        return int(self._table[0].sum())

    # ------------------------------------------------------------ hashing

    def _raw_buckets(self, items: np.ndarray) -> np.ndarray:
        """Return ``h_j(x)`` for every row and item, shape ``(depth, n)``, uint64."""
        h: np.ndarray = self._a[:, None] * items[None, :]
        h += self._b[:, None]
        h %= np.uint64(MERSENNE_PRIME)
        h %= np.uint64(self._width)
        return h

    def _buckets(self, items: np.ndarray) -> np.ndarray:
        """Return ``h_j(x)`` for every row and item, shape ``(depth, n)``, int64."""
        out: np.ndarray = self._raw_buckets(items).astype(np.int64)
        return out

    def buckets(self, items: ItemsLike) -> np.ndarray:
        """Return the bucket of every item in every row, shape ``(depth, n)``.

        Parameters
        ----------
        items : int or array_like of int
            Items in ``[0, 2**31 - 1)``.

        Returns
        -------
        numpy.ndarray
            ``h_j(items)``, int64.
        """
        return self._buckets(as_items(items))

    def _chunks(self, items: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        for start in range(0, items.size, _CHUNK):
            yield start, items[start : start + _CHUNK]

    # ------------------------------------------------------------ updates

    def update(self, items: ItemsLike, counts: int | npt.ArrayLike = 1) -> None:
        """Add ``counts`` to ``items`` (the update procedure of Definition 7).

        Vectorised: items are hashed in blocks of a few thousand and added
        with ``numpy.add.at`` (repeated items add up).

        Parameters
        ----------
        items : int or array_like of int
            Items in ``[0, 2**31 - 1)``.
        counts : int or array_like of int, default=1
            One count for all items, or one per item (may be negative for a
            turnstile stream; Count-Min's guarantees assume counts >= 0).

        Raises
        ------
        DataError
            If an item is out of range or the counts do not match.
        """
        values = as_items(items)
        weights = _as_counts(counts, values.size)
        if self._may_overflow(weights, values.size):
            self._update_exact(values, weights)
            return
        flat_table = self._table.reshape(-1)
        offsets = self._offsets.astype(np.uint64)
        for start, block in self._chunks(values):
            flat = self._raw_buckets(block)
            flat += offsets
            if isinstance(weights, int) and 4 * flat.size >= flat_table.size:
                # one counting pass per block beats np.add.at on repeated items
                hits = np.bincount(flat.reshape(-1), minlength=flat_table.size)
                if weights != 1:
                    hits *= weights
                flat_table += hits
            elif isinstance(weights, int):
                np.add.at(flat_table, flat.reshape(-1), weights)
            else:
                w = weights[start : start + block.size]
                np.add.at(flat_table, flat.reshape(-1), np.tile(w, self._depth))

    def _may_overflow(self, weights: np.ndarray | int, n_items: int) -> bool:
        """Whether this update could push a counter past 2**62 (float64 bound)."""
        if isinstance(weights, int):
            added = float(abs(weights)) * n_items
        else:
            added = float(np.abs(weights, dtype=np.float64).sum())
        largest = float(np.abs(self._table, dtype=np.float64).max(initial=0.0))
        return largest + added >= _SAFE_MAGNITUDE

    def _update_exact(self, values: np.ndarray, weights: np.ndarray | int) -> None:
        """Apply the update in exact integers, refusing one that wraps a counter.

        Nothing is written when a counter would leave the int64 range.
        """
        per_item = (
            np.full(values.size, weights, dtype=object)
            if isinstance(weights, int)
            else weights.astype(object)
        )
        increment = np.zeros(self.size, dtype=object)
        for start, block in self._chunks(values):
            flat = (self._raw_buckets(block) + self._offsets.astype(np.uint64)).reshape(
                -1
            )
            w = np.tile(per_item[start : start + block.size], self._depth)
            np.add.at(increment, flat.astype(np.int64), w)
        total = self._table.reshape(-1).astype(object) + increment
        for index, value in enumerate(total):
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise _overflow_error(index, self._width, int(value))
        self._table[...] = total.astype(np.int64).reshape(self._depth, self._width)

    # ------------------------------------------------------------ linearity

    def compatible(self, other: LinearSketch) -> bool:
        """Whether ``other`` has the same kind, shape and hash seed."""
        return (
            type(other) is type(self)
            and other._depth == self._depth
            and other._width == self._width
            and other._seed == self._seed
        )

    def _check_compatible(self, other: object) -> LinearSketch:
        if not isinstance(other, LinearSketch) or not self.compatible(other):
            raise ConfigError(
                f"cannot merge {other!r} into {self!r}: sketches must share kind, "
                "depth, width and seed."
            )
        return other

    def merge(self, other: LinearSketch) -> Self:
        """Add ``other``'s table into this one, in place; return ``self``.

        The result is the sketch of the union of both streams (Ch. 2.2).

        Raises
        ------
        ConfigError
            If the sketches differ in kind, depth, width or seed.
        DataError
            If a counter would leave the int64 range (nothing is changed).
        """
        other_table = self._check_compatible(other)._table
        self._table[...] = _checked_sum(self._table, other_table, self._width)
        return self

    def __add__(self, other: object) -> Self:
        if not isinstance(other, LinearSketch):
            return NotImplemented
        return self.copy().merge(other)

    def copy(self) -> Self:
        """Return an independent copy."""
        clone = self._empty_like()
        clone._table[...] = self._table
        return clone

    def _empty_like(self) -> Self:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._table = np.zeros_like(self._table)
        return clone

    def with_table(self, table: npt.ArrayLike) -> Self:
        """Return a sketch with these hashes and the given counters.

        Used to turn a (securely) summed table back into a sketch.

        Parameters
        ----------
        table : array_like of int
            ``depth * width`` integers, flat or ``(depth, width)``.

        Raises
        ------
        DataError
            If the table has the wrong size, is not integral, or holds a value
            outside the int64 range of the counters.
        """
        arr = np.asarray(table)
        if arr.size != self.size:
            raise DataError(f"table has {arr.size} counters, the sketch {self.size}.")
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.number):
            raise DataError(f"a sketch table must hold integers, got {arr.dtype}.")
        if not np.issubdtype(arr.dtype, np.integer):
            if not (np.all(np.isfinite(arr)) and np.array_equal(arr, np.rint(arr))):
                raise DataError("a sketch table must hold integers.")
            outside = np.flatnonzero((arr < -(2.0**63)) | (arr >= 2.0**63))
            if outside.size:
                index = int(outside[0])
                raise _overflow_error(index, self._width, int(arr.reshape(-1)[index]))
        elif arr.dtype == np.uint64:
            outside = np.flatnonzero(arr.reshape(-1) > np.uint64(_INT64_MAX))
            if outside.size:
                index = int(outside[0])
                raise _overflow_error(index, self._width, int(arr.reshape(-1)[index]))
        clone = self._empty_like()
        clone._table[...] = arr.reshape(self._depth, self._width).astype(np.int64)
        return clone

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LinearSketch)
            and self.compatible(other)
            and bool(np.array_equal(self._table, other._table))
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(depth={self._depth}, width={self._width}, "
            f"seed={self._seed}, total={self.total})"
        )

    # ------------------------------------------------------------ bytes

    def to_bytes(self) -> bytes:
        """Serialise: a 32-byte header, then the table as little-endian int64."""
        header = _HEADER.pack(
            _MAGIC,
            _FORMAT_VERSION,
            self._KIND,
            self._depth,
            self._width,
            self._seed,
            MERSENNE_PRIME,
        )
        return header + self._table.astype("<i8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Rebuild a sketch written by :meth:`to_bytes`.

        Raises
        ------
        DataError
            If the bytes are not a sketch of this kind, or are truncated.
        """
        if len(data) < _HEADER.size:
            raise DataError(f"{len(data)} bytes are too few for a sketch header.")
        magic, version, kind, depth, width, seed, prime = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != _FORMAT_VERSION or prime != MERSENNE_PRIME:
            raise DataError("not a fedleak sketch (bad magic, version or prime).")
        if kind != cls._KIND:
            raise DataError(f"the bytes hold sketch kind {kind}, not {cls.__name__}.")
        expected = _HEADER.size + 8 * depth * width
        if len(data) != expected:
            raise DataError(f"sketch bytes: expected {expected}, got {len(data)}.")
        sketch = cls(depth, width, seed=seed)
        sketch._table[...] = np.frombuffer(
            data, dtype="<i8", offset=_HEADER.size
        ).reshape(depth, width)
        return sketch
