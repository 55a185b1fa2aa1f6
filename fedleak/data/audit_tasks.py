"""Datasets prepared for auditing DP-SGD (seed 002 Section 6).

An audit trains on a small set ``D`` and needs records outside it for the
bounded neighbour ``D'`` (one record replaced). :func:`load_audit_task`
draws both from scikit-learn's digits (8x8 images, SSIM as the
dissimilarity), its breast-cancer table (30 standardised features, the
stand-in for seed 002's Adult; Manhattan distance) or Fashion-MNIST pooled to
14x14 (when installed), and names the audited model's hidden widths and the
dissimilarity the seed found best for the data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError

__all__ = ["AUDIT_DATASETS", "AuditTask", "load_audit_task"]

AUDIT_DATASETS: tuple[str, ...] = ("digits", "breast-cancer", "fashion-mnist")
"""The datasets :func:`load_audit_task` knows."""


@dataclass(frozen=True)
class AuditTask:
    """One dataset prepared for the audit.

    Attributes
    ----------
    name : str
        Dataset name.
    x, y : numpy.ndarray
        The training set ``D``.
    pool_x, pool_y : numpy.ndarray
        Records outside ``D`` (bounded replacements).
    hidden : tuple of int
        Hidden widths of the audited MLP (empty: a linear model).
    num_classes : int
        Output classes.
    measure : str
        Dissimilarity used for dataset sensitivity.
    image_shape : tuple of int or None
        For SSIM.
    """

    name: str
    x: NDArray[np.float32]
    y: NDArray[np.int64]
    pool_x: NDArray[np.float32]
    pool_y: NDArray[np.int64]
    hidden: tuple[int, ...]
    num_classes: int
    measure: str
    image_shape: tuple[int, int] | None


def load_audit_task(name: str, train_size: int, pool_size: int, seed: int) -> AuditTask:
    """Load ``name`` and draw ``D`` (``train_size``) and a replacement pool.

    Parameters
    ----------
    name : str
        One of :data:`AUDIT_DATASETS`.
    train_size, pool_size : int
        Records in ``D`` and in the pool of bounded replacements.
    seed : int
        Seeds the draw.

    Raises
    ------
    ConfigError
        If ``name`` is unknown or the dataset is too small.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA0D17]))
    shape: tuple[int, int] | None
    if name == "digits":
        from sklearn.datasets import load_digits

        data_x, data_y = load_digits(return_X_y=True)
        x_all = (data_x / 16.0).astype(np.float32)
        hidden: tuple[int, ...] = ()
        measure, shape = "ssim", (8, 8)
    elif name == "breast-cancer":
        from sklearn.datasets import load_breast_cancer

        data_x, data_y = load_breast_cancer(return_X_y=True)
        x_all = ((data_x - data_x.mean(0)) / data_x.std(0)).astype(np.float32)
        hidden, measure, shape = (6, 6), "manhattan", None
    elif name == "fashion-mnist":
        import torch

        from .datasets import load_dataset

        ds = load_dataset("fashion-mnist")
        take = rng.choice(ds.num_train, train_size + pool_size, replace=False)
        pooled = torch.nn.functional.avg_pool2d(torch.as_tensor(ds.x_train[take]), 2)
        x_all = pooled.reshape(len(take), -1).numpy().astype(np.float32)
        data_y = ds.y_train[take]
        hidden, measure, shape = (), "ssim", (14, 14)
    else:
        raise ConfigError(
            f"unknown audit dataset {name!r}; choose from {list(AUDIT_DATASETS)}"
        )
    y_all = np.asarray(data_y, dtype=np.int64)
    if train_size + pool_size > len(x_all):
        raise ConfigError(
            f"{name} has {len(x_all)} records; train_size + pool_size = "
            f"{train_size + pool_size} is too many"
        )
    perm = rng.permutation(len(x_all))
    d_idx, pool_idx = perm[:train_size], perm[train_size : train_size + pool_size]
    return AuditTask(
        name=name,
        x=x_all[d_idx],
        y=y_all[d_idx],
        pool_x=x_all[pool_idx],
        pool_y=y_all[pool_idx],
        hidden=hidden,
        num_classes=int(y_all.max()) + 1,
        measure=measure,
        image_shape=shape,
    )
