"""How a client's reply becomes one integer vector for secure aggregation.

The vector that is masked and summed holds, in order:

1. every array of the model, flattened in the server's order (the names and
   shapes of the global model the server sent), fixed-point encoded with the
   client's weight (``n_k`` for weighted averages, 1 for plain sums);
2. the metrics named by the server (e.g. ``train-loss``), encoded the same way;
3. two raw integer slots: the weight itself and the number of clipped values.

Everything a client contributes is therefore summed under the masks; the
server learns only the group's totals (seed 000 Ch. 4.1: the tally learns
the aggregate and nothing else).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedleak.errors import ConfigError, ProtocolError

__all__ = ["RAW_SLOTS", "VectorLayout", "to_signed"]

RAW_SLOTS: tuple[str, ...] = ("weight", "clipped")


def to_signed(total: np.ndarray) -> np.ndarray:
    """Read a uint32/uint64 sum as two's-complement signed integers (int64)."""
    if total.dtype == np.uint32:
        return total.view(np.int32).astype(np.int64)
    if total.dtype == np.uint64:
        return total.view(np.int64).copy()
    raise ProtocolError(f"secure sums are uint32 or uint64, got {total.dtype}")


@dataclass(frozen=True)
class VectorLayout:
    """Names and shapes of the arrays and metrics packed into the vector.

    Attributes
    ----------
    names : tuple of str
        Array names, in the order they are flattened.
    shapes : tuple of tuple of int
        The arrays' shapes.
    metric_names : tuple of str
        Metrics summed securely after the arrays.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    metric_names: tuple[str, ...] = ()

    @classmethod
    def of(
        cls, arrays: Mapping[str, np.ndarray], metric_names: Sequence[str] = ()
    ) -> VectorLayout:
        """Describe ``arrays`` (e.g. the global model) and the metrics to sum."""
        return cls(
            tuple(arrays),
            tuple(tuple(int(d) for d in a.shape) for a in arrays.values()),
            tuple(metric_names),
        )

    @property
    def sizes(self) -> list[int]:
        """Number of entries of each array."""
        return [math.prod(shape) for shape in self.shapes]

    @property
    def model_length(self) -> int:
        """Entries taken by the arrays."""
        return sum(self.sizes)

    @property
    def fixed_length(self) -> int:
        """Entries encoded in fixed point (arrays and metrics)."""
        return self.model_length + len(self.metric_names)

    @property
    def length(self) -> int:
        """Length of the whole masked vector."""
        return self.fixed_length + len(RAW_SLOTS)

    def flatten(
        self,
        arrays: Mapping[str, np.ndarray],
        *,
        fill_missing: bool,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Concatenate ``arrays`` in layout order as float64.

        Parameters
        ----------
        arrays : mapping of str to numpy.ndarray
            The client's reply.
        fill_missing : bool
            Treat an absent array as zeros (right for gradient sums) instead
            of failing (models must be complete).
        out : numpy.ndarray, optional
            A writable float64 array of shape ``(model_length,)`` to write
            into (e.g. the head of a longer vector); default a new one.

        Raises
        ------
        ProtocolError
            On an unknown name, a wrong shape, or a missing array when
            ``fill_missing`` is False.
        ConfigError
            If ``out`` does not fit.
        """
        unknown = sorted(set(arrays) - set(self.names))
        if unknown:
            raise ProtocolError(
                f"reply holds arrays the server did not send: {unknown}"
            )
        if out is None:
            out = np.empty(self.model_length, dtype=np.float64)
        elif out.dtype != np.float64 or out.shape != (self.model_length,):
            raise ConfigError(
                f"out must be float64 of shape ({self.model_length},), got "
                f"{out.dtype} {out.shape}"
            )
        start = 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            value = arrays.get(name)
            if value is None:
                if not fill_missing:
                    raise ProtocolError(f"reply lacks array {name!r}")
                out[start : start + size] = 0.0
            else:
                if tuple(value.shape) != shape:
                    raise ProtocolError(
                        f"array {name!r} has shape {value.shape}, expected {shape}"
                    )
                out[start : start + size] = np.ravel(value)
            start += size
        return out

    def unflatten(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """Split the array part of ``vector`` back into named arrays."""
        out: dict[str, np.ndarray] = {}
        start = 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            out[name] = vector[start : start + size].reshape(shape)
            start += size
        return out

    def to_config(self) -> dict[str, Any]:
        """Describe the layout as ConfigRecord values."""
        return {
            "layout-names": list(self.names),
            "layout-ndims": [len(s) for s in self.shapes],
            "layout-dims": [d for s in self.shapes for d in s],
            "metric-names": list(self.metric_names),
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> VectorLayout:
        """Rebuild a layout from :meth:`to_config` values.

        Raises
        ------
        ProtocolError
            If the description is missing or inconsistent.
        """
        try:
            names = [str(n) for n in config["layout-names"]]
            ndims = [int(n) for n in config["layout-ndims"]]
            dims = [int(d) for d in config["layout-dims"]]
            metrics = tuple(str(m) for m in config.get("metric-names", []))
        except (KeyError, TypeError, ValueError) as err:
            raise ProtocolError(
                f"secure-aggregation layout is missing or malformed: {err}"
            ) from None
        if len(names) != len(ndims) or sum(ndims) != len(dims):
            raise ProtocolError("secure-aggregation layout is inconsistent")
        shapes, start = [], 0
        for n in ndims:
            shapes.append(tuple(dims[start : start + n]))
            start += n
        return cls(tuple(names), tuple(shapes), metrics)
