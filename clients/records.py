"""numpy arrays into the ``ArrayRecord`` a client replies or keeps.

Every client path packs its arrays the same way: C-ordered, as Flower's
``Array(ndarray)`` would, but written with :func:`fedleak.arrays.array_fields`
(the ``.npy`` header cached per dtype and shape instead of ``numpy.save``
per array).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord

from fedleak.arrays import array_fields

__all__ = ["array_record"]


def array_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """Return ``ArrayRecord({name: Array(C-ordered value)})``, names in order."""
    return ArrayRecord(
        {
            name: Array(**array_fields(np.ascontiguousarray(value)))
            for name, value in arrays.items()
        }
    )
