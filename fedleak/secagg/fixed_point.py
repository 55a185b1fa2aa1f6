"""Fixed-point encoding of real vectors into the ring of integers mod ``2**b``.

Masks cancel only in modular integer arithmetic, so each user clips its
vector to ``[-clip, clip]``, scales it and rounds it to an integer, stored in
two's complement in a ``uint32`` or ``uint64`` word. The server's modular sum
decodes to the real sum as long as it cannot overflow, which
:meth:`FixedPoint.check_capacity` verifies before any message is sent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import ConfigError

__all__ = [
    "FixedPoint",
]

_MAX_EXPONENT = 1000  # 2**1000 is still a finite float64


def _positive(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise ConfigError(f"{name} must be a number, got {value!r}.")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}.")
    return v


def _weight(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise ConfigError(f"{name} must be a number, got {value!r}.")
    v = float(value)
    if not (math.isfinite(v) and v >= 0):
        raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}.")
    return v


def _fmt(value: float) -> str:
    """Format a number for an error message; powers of two as ``2^k``."""
    if value > 0:
        mantissa, exponent = math.frexp(value)
        if mantissa == 0.5 and abs(exponent - 1) >= 8:
            return f"2^{exponent - 1}"
    return f"{value:g}"


@dataclass(frozen=True)
class FixedPoint:
    """A fixed-point code: clip, scale, round, and wrap mod ``2**modulus_bits``.

    Attributes
    ----------
    clip : float
        Values are clipped to ``[-clip, clip]`` before encoding (> 0).
    scale : float
        A value ``v`` encodes as ``round(v * scale)`` (> 0). Powers of two
        make the scaling exact; :meth:`auto` picks the largest that fits.
    modulus_bits : int
        32 (``uint32`` words, arithmetic mod ``2**32``) or 64 (``uint64``).
    """

    clip: float
    scale: float
    modulus_bits: int = 32

    def __post_init__(self) -> None:
        object.__setattr__(self, "clip", _positive(self.clip, "clip"))
        object.__setattr__(self, "scale", _positive(self.scale, "scale"))
        if isinstance(self.modulus_bits, bool) or self.modulus_bits not in (32, 64):
            raise ConfigError(
                f"modulus_bits must be 32 or 64, got {self.modulus_bits!r}."
            )

    @property
    def dtype(self) -> np.dtype:
        """The word type: ``numpy.uint32`` or ``numpy.uint64``."""
        return np.dtype(np.uint32 if self.modulus_bits == 32 else np.uint64)

    @property
    def _signed(self) -> np.dtype:
        return np.dtype(np.int32 if self.modulus_bits == 32 else np.int64)

    def _bound(self, n_inputs: int, max_weight: float) -> tuple[Fraction, float]:
        """Return the exact worst-case ``|sum|`` and the largest single value."""
        # The same float operations as encode(): (clip * weight) * scale. Float
        # multiplication is monotone, so no encoded value exceeds it in size.
        largest = (self.clip * max_weight) * self.scale
        return n_inputs * (Fraction(largest) + Fraction(1, 2)), largest

    def check_capacity(self, n_inputs: int, max_weight: float = 1.0) -> None:
        """Check that a sum of ``n_inputs`` encoded values cannot overflow.

        The sum of the signed encodings is at most ``n_inputs * (max_weight *
        clip * scale + 0.5)`` in size (the ``0.5`` is rounding); it must stay
        below ``2**(modulus_bits - 1)`` to decode correctly.

        Parameters
        ----------
        n_inputs : int
            How many vectors are summed (the size of a group), >= 1.
        max_weight : float, optional
            The largest weight an input is multiplied by (default 1).

        Raises
        ------
        ConfigError
            If the sum may overflow; the message names the numbers and the
            bound.
        """
        if isinstance(n_inputs, bool) or not isinstance(n_inputs, int | np.integer):
            raise ConfigError(f"n_inputs must be an integer, got {n_inputs!r}.")
        if n_inputs < 1:
            raise ConfigError(f"n_inputs must be >= 1, got {n_inputs}.")
        weight = _weight(max_weight, "max_weight")
        total, largest = self._bound(int(n_inputs), weight)
        limit = 1 << (self.modulus_bits - 1)
        if total >= limit:
            hint = "lower the scale or clip"
            if self.modulus_bits == 32:
                hint += ", or use modulus_bits=64"
            raise ConfigError(
                f"fixed point overflow: {int(n_inputs)} inputs x weight "
                f"{_fmt(weight)} x clip {_fmt(self.clip)} x scale "
                f"{_fmt(self.scale)} = {int(n_inputs) * largest:.3g} "
                f"(+ {int(n_inputs) * 0.5:g} for rounding) exceeds "
                f"2^{self.modulus_bits - 1}; {hint}."
            )

    @classmethod
    def auto(
        cls,
        clip: float,
        n_inputs: int,
        *,
        max_weight: float = 1.0,
        modulus_bits: int = 32,
    ) -> FixedPoint:
        """Return the code with the largest power-of-two scale that fits.

        Parameters
        ----------
        clip : float
            Clipping bound, > 0.
        n_inputs : int
            How many vectors are summed, >= 1.
        max_weight : float, optional
            The largest weight of an input, > 0 (default 1).
        modulus_bits : int, optional
            32 (default) or 64.

        Returns
        -------
        FixedPoint
            ``FixedPoint(clip, 2**k, modulus_bits)`` with the largest ``k >=
            0`` for which :meth:`check_capacity` passes.

        Raises
        ------
        ConfigError
            If even scale 1 may overflow, or an argument is invalid.
        """
        weight = _positive(max_weight, "max_weight")
        probe = cls(clip=clip, scale=1.0, modulus_bits=modulus_bits)
        probe.check_capacity(n_inputs, weight)  # scale 1 must fit

        def fits(k: int) -> bool:
            code = cls(clip=clip, scale=math.ldexp(1.0, k), modulus_bits=modulus_bits)
            total, _ = code._bound(int(n_inputs), weight)
            return total < (1 << (modulus_bits - 1))

        target = 2.0 ** (modulus_bits - 1) / int(n_inputs) - 0.5
        # a difference of logarithms: the quotient overflows for a tiny clip
        guess = math.floor(
            math.log2(target) - math.log2(probe.clip) - math.log2(weight)
        )
        k = max(0, min(_MAX_EXPONENT, guess))
        while k > 0 and not fits(k):
            k -= 1
        while k < _MAX_EXPONENT and fits(k + 1):
            k += 1
        return cls(clip=clip, scale=math.ldexp(1.0, k), modulus_bits=modulus_bits)

    def max_abs_error(self, n_inputs: int) -> float:
        """Bound the rounding error of a decoded sum of ``n_inputs`` values.

        Parameters
        ----------
        n_inputs : int
            How many encoded values were summed.

        Returns
        -------
        float
            ``n_inputs * 0.5 / scale``: the largest difference between the
            decoded sum and the sum of the clipped, weighted inputs.
        """
        return n_inputs * 0.5 / self.scale

    def encode(
        self, x: np.ndarray, weight: float = 1.0, *, out: np.ndarray | None = None
    ) -> tuple[np.ndarray, int]:
        """Encode a real vector.

        Parameters
        ----------
        x : numpy.ndarray
            Real values of any shape; flattened.
        weight : float, optional
            Multiplier >= 0 applied after clipping (default 1); e.g. a client
            uploads ``n_k * theta_k`` for a weighted average.
        out : numpy.ndarray, optional
            A writable C-contiguous array of :attr:`dtype` and shape
            ``(x.size,)`` to write the words into (e.g. a slice of a longer
            upload vector); default a new array.

        Returns
        -------
        encoded : numpy.ndarray
            ``round(clip(x) * weight * scale) mod 2**modulus_bits``, shape
            ``(x.size,)``, dtype :attr:`dtype` (``out`` if given).
        clipped : int
            How many entries of ``x`` lay outside ``[-clip, clip]``.

        Raises
        ------
        ConfigError
            If ``x`` holds NaN or infinity, ``weight`` is invalid, a single
            weighted value could overflow the modulus, or ``out`` does not fit.

        Notes
        -----
        One pass finds the range (``min`` and ``max``, which also expose NaN
        and infinity), clipping runs only when a value lies outside it, and
        the rounded values go straight into the signed words:
        :meth:`check_capacity` keeps every one inside the signed range of the
        word, so the conversion is exact and the words are the two's
        complement of the rounded values.
        """
        w = _weight(weight, "weight")
        self.check_capacity(1, w)
        values = np.asarray(x, dtype=np.float64).reshape(-1)
        words = self._words(values.size, out)
        if values.size == 0:
            return words, 0
        low, high = float(values.min()), float(values.max())
        if not (math.isfinite(low) and math.isfinite(high)):
            bad = int(np.count_nonzero(~np.isfinite(values)))
            raise ConfigError(
                f"cannot encode {bad} non-finite value(s) (NaN or infinity)."
            )
        clipped = 0
        if low < -self.clip or high > self.clip:
            clipped = int(np.count_nonzero(np.abs(values) > self.clip))
            scaled = np.clip(values, -self.clip, self.clip)
            scaled *= w
        else:
            scaled = values * w
        scaled *= self.scale
        np.rint(scaled, out=scaled)
        np.copyto(words.view(self._signed), scaled, casting="unsafe")
        return words, clipped

    def _words(self, size: int, out: np.ndarray | None) -> np.ndarray:
        """Return ``out`` checked to hold ``size`` words, or a new array."""
        if out is None:
            return np.empty(size, dtype=self.dtype)
        if (
            not isinstance(out, np.ndarray)
            or out.dtype != self.dtype
            or out.shape != (size,)
            or not out.flags.c_contiguous
            or not out.flags.writeable
        ):
            raise ConfigError(
                f"out must be a writable C-contiguous {self.dtype} array of shape "
                f"({size},)."
            )
        return out

    def decode(self, total: np.ndarray) -> np.ndarray:
        """Decode a modular sum of encoded vectors.

        Parameters
        ----------
        total : numpy.ndarray
            Words of dtype :attr:`dtype`; values ``>= 2**(modulus_bits-1)``
            stand for negative numbers.

        Returns
        -------
        numpy.ndarray
            The signed values divided by the scale, float64, same shape.

        Raises
        ------
        ConfigError
            If ``total`` is not an array of :attr:`dtype`.
        """
        if not isinstance(total, np.ndarray) or total.dtype != self.dtype:
            got = total.dtype if isinstance(total, np.ndarray) else type(total).__name__
            raise ConfigError(f"decode expects a {self.dtype} array, got {got}.")
        signed = np.ascontiguousarray(total).view(self._signed)
        return signed.astype(np.float64) / self.scale
