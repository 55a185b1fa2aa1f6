r"""Neighbouring datasets for the DP audit: dissimilarities and dataset sensitivity.

Seed 002 Section 5.1 (Definition 6) approximates the local sensitivity of
DP-SGD without computing gradients: pick the neighbour ``D'`` of the
training set ``D`` whose differing record is the most *dissimilar*, on the
assumption that similar records give similar gradients.

Unbounded DP (Eq. 18)
    ``D' = D \\ {x*}`` with ``x* = argmax_{x in D} sum_{y in D} d(x, y)``,
    the record farthest from all others; its clipped gradient norm then
    approximates the local sensitivity at every step (Eq. 19).
Bounded DP (Eq. 20)
    ``D' = D \\ {x*} + {x'*}`` with ``(x*, x'*) = argmax d(x, x')`` over
    ``x`` in ``D`` and candidates ``x'`` outside it; the norm of the
    difference of their clipped gradients approximates the local
    sensitivity (Eq. 21).

Dissimilarities (seed 002 Section 6.1): Euclidean, Manhattan, Hamming and
cosine distances from ``scipy.spatial.distance.cdist``, and the negative
structural similarity ``1 - SSIM`` of images from scikit-image. Any callable
``(a, b) -> matrix`` can be passed instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.spatial.distance import cdist

from fedleak.errors import ConfigError, DataError

__all__ = [
    "DISSIMILARITIES",
    "Dissimilarity",
    "Neighbours",
    "dissimilarity",
    "most_dissimilar_neighbours",
    "neighbours_at",
]

Dissimilarity = Callable[
    [NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]
]
"""``d(a, b)``: dissimilarities of the rows of ``a`` (n, f) and ``b`` (m, f)."""

_CDIST_METRICS = {
    "euclidean": "euclidean",
    "manhattan": "cityblock",
    "hamming": "hamming",
    "cosine": "cosine",
}
DISSIMILARITIES: tuple[str, ...] = (*_CDIST_METRICS, "ssim")
"""Names accepted by :func:`dissimilarity`."""


def _ssim_dissimilarity(
    image_shape: Sequence[int],
) -> Dissimilarity:
    from skimage.metrics import structural_similarity

    similarity: Callable[..., float] = structural_similarity
    shape = tuple(int(s) for s in image_shape)
    win = min(7, *shape)
    win = win if win % 2 == 1 else win - 1
    if win < 3:
        raise ConfigError(f"SSIM needs images of at least 3x3 pixels; got {shape}")

    def ssim(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
        out = np.empty((a.shape[0], b.shape[0]), dtype=np.float64)
        lo = float(min(a.min(), b.min()))
        hi = float(max(a.max(), b.max()))
        data_range = hi - lo if hi > lo else 1.0
        imgs_a = a.reshape(a.shape[0], *shape)
        imgs_b = b.reshape(b.shape[0], *shape)
        for i, img_a in enumerate(imgs_a):
            for j, img_b in enumerate(imgs_b):
                out[i, j] = 1.0 - similarity(
                    img_a, img_b, win_size=win, data_range=data_range
                )
        return out

    return ssim


def dissimilarity(
    name: str, *, image_shape: Sequence[int] | None = None
) -> Dissimilarity:
    """Return the dissimilarity measure ``name`` (seed 002 Section 6.1).

    Parameters
    ----------
    name : {"euclidean", "manhattan", "hamming", "cosine", "ssim"}
        ``"ssim"`` is ``1 - SSIM`` (scikit-image's ``structural_similarity``)
        and needs ``image_shape``; the others are ``scipy.spatial.distance``
        metrics on flattened records (Hamming: the fraction of differing
        features).
    image_shape : sequence of int, optional
        Height and width of one (grey-level) image, for ``"ssim"``.

    Returns
    -------
    Dissimilarity
    """
    if name == "ssim":
        if image_shape is None or len(image_shape) != 2:
            raise ConfigError(
                "the 'ssim' dissimilarity needs image_shape=(height, width)"
            )
        return _ssim_dissimilarity(image_shape)
    if name not in _CDIST_METRICS:
        raise ConfigError(
            f"unknown dissimilarity {name!r}; choose one of {list(DISSIMILARITIES)} "
            "or pass a callable (a, b) -> matrix"
        )
    metric = _CDIST_METRICS[name]

    def measure(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(cdist(a, b, metric=metric), dtype=np.float64)

    return measure


@dataclass(frozen=True)
class Neighbours:
    """A training set ``D`` and one neighbour ``D'`` (seed 002 Experiment 2).

    Attributes
    ----------
    x, y : numpy.ndarray
        Records and integer labels of ``D``.
    index : int
        Row of ``D`` that ``D'`` removes (unbounded) or replaces (bounded).
    replacement_x, replacement_y : numpy.ndarray or None, int or None
        The record ``x'`` that replaces it in bounded DP, else ``None``.
    dissimilarity : float
        The dissimilarity score that selected the pair (``nan`` if chosen by
        hand).
    """

    x: NDArray[np.float32]
    y: NDArray[np.int64]
    index: int
    replacement_x: NDArray[np.float32] | None = None
    replacement_y: int | None = None
    dissimilarity: float = float("nan")

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y) or len(self.x) < 2:
            raise DataError(
                f"D needs >= 2 records with one label each; got {len(self.x)} "
                f"records and {len(self.y)} labels"
            )
        if not 0 <= self.index < len(self.x):
            raise ConfigError(f"index {self.index} is outside D (size {len(self.x)})")
        if (self.replacement_x is None) != (self.replacement_y is None):
            raise ConfigError("give both replacement_x and replacement_y, or neither")

    @property
    def bounded(self) -> bool:
        """Whether ``D'`` replaces a record (bounded DP) rather than removes one."""
        return self.replacement_x is not None

    def neighbour(self) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """Return the records and labels of ``D'``."""
        keep = np.arange(len(self.x)) != self.index
        if self.replacement_x is None or self.replacement_y is None:
            return self.x[keep], self.y[keep]
        x_rep = np.asarray(self.replacement_x, dtype=self.x.dtype)[None]
        return (
            np.concatenate([self.x[keep], x_rep]),
            np.concatenate([self.y[keep], [self.replacement_y]]).astype(np.int64),
        )


def neighbours_at(
    x: NDArray[np.floating],
    y: NDArray[np.integer],
    index: int,
    replacement: tuple[NDArray[np.floating], int] | None = None,
) -> Neighbours:
    """Build the neighbour that removes (or replaces) record ``index`` of ``D``.

    Parameters
    ----------
    x, y : numpy.ndarray
        ``D``'s records ``(n, ...)`` and integer labels ``(n,)``.
    index : int
        The differing record.
    replacement : (record, label), optional
        The record replacing it (bounded DP); ``None`` removes it (unbounded).

    Returns
    -------
    Neighbours
    """
    rep_x = None if replacement is None else np.asarray(replacement[0], np.float32)
    rep_y = None if replacement is None else int(replacement[1])
    return Neighbours(
        np.asarray(x, np.float32), np.asarray(y, np.int64), int(index), rep_x, rep_y
    )


def most_dissimilar_neighbours(
    x: NDArray[np.floating],
    y: NDArray[np.integer],
    *,
    bounded: bool,
    measure: str | Dissimilarity = "euclidean",
    candidates_x: NDArray[np.floating] | None = None,
    candidates_y: NDArray[np.integer] | None = None,
    image_shape: Sequence[int] | None = None,
) -> Neighbours:
    """Choose ``D'`` by dataset sensitivity (seed 002 Definition 6, Eqs. 18 and 20).

    Parameters
    ----------
    x, y : numpy.ndarray
        ``D``'s records ``(n, ...)`` and integer labels.
    bounded : bool
        Replace a record (Eq. 20) rather than remove one (Eq. 18).
    measure : str or Dissimilarity, default="euclidean"
        A name for :func:`dissimilarity` or a callable.
    candidates_x, candidates_y : numpy.ndarray, optional
        Records outside ``D`` that may replace one of its records (the rest
        of the overall dataset); required when ``bounded``.
    image_shape : sequence of int, optional
        For ``measure="ssim"``.

    Returns
    -------
    Neighbours
    """
    xs = np.asarray(x, dtype=np.float32)
    ys = np.asarray(y, dtype=np.int64)
    d = (
        measure
        if callable(measure)
        else dissimilarity(measure, image_shape=image_shape)
    )
    flat = xs.reshape(len(xs), -1).astype(np.float64)
    if not bounded:
        totals = d(flat, flat).sum(axis=1)
        index = int(np.argmax(totals))
        return Neighbours(xs, ys, index, dissimilarity=float(totals[index]))
    if candidates_x is None or candidates_y is None or len(candidates_x) == 0:
        raise ConfigError(
            "bounded neighbours need candidates_x/candidates_y: records outside D "
            "that can replace one of its records"
        )
    cand = np.asarray(candidates_x, dtype=np.float32)
    scores = d(flat, cand.reshape(len(cand), -1).astype(np.float64))
    i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return Neighbours(
        xs,
        ys,
        int(i),
        cand[int(j)],
        int(np.asarray(candidates_y)[int(j)]),
        dissimilarity=float(scores[i, j]),
    )
