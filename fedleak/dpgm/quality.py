"""Sample quality of a generative model: kernel MMD to held-out real records.

Seed 000 Fig. 5.4 compares the samples of a VAE mixture and of an RBM mixture
by eye ("the VAE mixture's samples are better"). To order them by a number,
fedleak measures how far each model's samples lie from real records that no
model saw: the squared maximum mean discrepancy with a Gaussian kernel
(Gretton et al., "A kernel two-sample test", JMLR 2012, Lemma 6: the unbiased
estimate ``MMD_u^2``). Zero means the two sets come from one distribution;
larger is worse. The same estimate between two disjoint real sets is the
floor that a perfect generator would reach at this sample size.

Written here because no dependency offers it: scikit-learn has the kernel
(:func:`sklearn.metrics.pairwise.rbf_kernel`) but no MMD, and torchmetrics'
Kernel Inception Distance needs Inception weights that cannot be downloaded.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.metrics.pairwise import euclidean_distances, rbf_kernel

from ..validation import check_int

__all__ = ["MMDEstimate", "median_bandwidth", "mmd2_unbiased", "sample_mmd"]


def median_bandwidth(reference: ArrayLike) -> float:
    """Return the kernel's ``gamma`` from the median heuristic on ``reference``.

    ``gamma = 1 / median(||x - x'||^2)`` over the distinct pairs of
    ``reference`` (Gretton et al. 2012, Sec. 8); computed once on the real
    records so that every model is scored with the same kernel.

    Raises
    ------
    ValueError
        With fewer than two records, or when all records are equal.
    """
    x = _records("reference", reference)
    distances = euclidean_distances(x, squared=True)
    upper = distances[np.triu_indices(len(x), k=1)]
    median = float(np.median(upper))
    if not median > 0:
        raise ValueError("reference: the records are all equal; no kernel width")
    return 1.0 / median


def mmd2_unbiased(x: ArrayLike, y: ArrayLike, gamma: float) -> float:
    """Unbiased ``MMD^2`` between samples ``x`` and ``y`` (Gretton et al., Lemma 6).

    ``k(a, b) = exp(-gamma ||a - b||^2)``; the within-set sums leave out the
    diagonal, so the estimate is unbiased and can be slightly negative when
    the two distributions are equal.

    Raises
    ------
    ValueError
        With fewer than two records in either set, different widths, or
        ``gamma <= 0``.
    """
    a, b = _records("x", x), _records("y", y)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x has {a.shape[1]} features, y {b.shape[1]}")
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    m, n = len(a), len(b)
    kxx = rbf_kernel(a, gamma=gamma)
    kyy = rbf_kernel(b, gamma=gamma)
    kxy = rbf_kernel(a, b, gamma=gamma)
    within_x = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    within_y = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(within_x + within_y - 2.0 * kxy.mean())


@dataclass(frozen=True)
class MMDEstimate:
    """``MMD^2`` averaged over disjoint chunks, with its standard error."""

    mmd2: float
    se: float
    chunks: int
    per_chunk: int
    gamma: float

    def as_dict(self) -> dict[str, Any]:
        """Return the estimate as a JSON-ready dict."""
        return asdict(self)


def sample_mmd(
    samples: ArrayLike, reference: ArrayLike, gamma: float, *, chunks: int = 5
) -> MMDEstimate:
    """``MMD^2`` of ``samples`` against ``reference``, mean and SE over chunks.

    Both sets are cut into ``chunks`` disjoint parts of equal size (the
    shorter set's length decides); part ``i`` of one is compared with part
    ``i`` of the other. The chunks' estimates are independent, so their
    standard deviation over ``sqrt(chunks)`` is the standard error of the
    mean.

    Raises
    ------
    ValueError
        If a chunk would hold fewer than two records.
    """
    check_int("chunks", chunks, low=2)
    a, b = _records("samples", samples), _records("reference", reference)
    per_chunk = min(len(a), len(b)) // chunks
    if per_chunk < 2:
        raise ValueError(
            f"{chunks} chunks of {min(len(a), len(b))} records hold fewer than 2 each"
        )
    values = [
        mmd2_unbiased(
            a[i * per_chunk : (i + 1) * per_chunk],
            b[i * per_chunk : (i + 1) * per_chunk],
            gamma,
        )
        for i in range(chunks)
    ]
    spread = float(np.std(values, ddof=1))
    return MMDEstimate(
        mmd2=float(np.mean(values)),
        se=spread / math.sqrt(chunks),
        chunks=chunks,
        per_chunk=per_chunk,
        gamma=gamma,
    )


def _records(name: str, values: ArrayLike) -> NDArray[np.float64]:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2 or len(array) < 2:
        raise ValueError(f"{name}: need a 2-D array of >= 2 records, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name}: non-finite values")
    return array
