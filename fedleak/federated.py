"""The servers' update rules of seed 000, on plain arrays (Flower-free).

:func:`sgd_step` is line 6 of Alg. 1 (synchronized SGD) and
:func:`average_models` line 8 of Alg. 2 (model averaging). The Flower
strategies :class:`fedleak.strategies.SyncSGD` and
:class:`fedleak.strategies.ModelAveraging` apply them to their clients'
replies, and the in-process simulations of :mod:`fedleak.attacks` apply
:func:`sgd_step` to their simulated parties' gradients, so a run in a
federation and a run in one process step the model with the same arithmetic:
the sums are accumulated in float64, in the order the contributions are
given, and the result is cast back to each array's dtype.

Both are written here rather than taken from Flower: Flower's
``aggregate_arrayrecords`` computes FedAvg's weighted mean in each array's
own dtype, and it has no synchronized-SGD step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from .errors import ConfigError

__all__ = ["average_models", "sgd_step"]


def _summed(
    name: str, gradients: Sequence[Mapping[str, np.ndarray]]
) -> np.ndarray | None:
    """Return ``sum_k g_k[name]`` in float64 (None if no gradient has ``name``)."""
    total: np.ndarray | None = None
    for gradient in gradients:
        value = gradient.get(name)
        if value is None:
            continue
        if total is None:
            total = value.astype(np.float64)
        else:
            total += value
    return total


def _check_step(
    params: Mapping[str, np.ndarray],
    gradients: Sequence[Mapping[str, np.ndarray]],
    learning_rate: float,
    reduction: str,
) -> None:
    """Check the step size, the reduction and the gradients' array names."""
    if not (math.isfinite(learning_rate) and learning_rate > 0):
        raise ConfigError(f"learning_rate must be > 0 and finite, got {learning_rate}")
    if reduction not in ("sum", "mean"):
        raise ConfigError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
    unknown = {name for g in gradients for name in g} - set(params)
    if unknown:
        raise ConfigError(f"gradients for arrays the model lacks: {sorted(unknown)}")


def sgd_step(
    params: Mapping[str, np.ndarray],
    gradients: Sequence[Mapping[str, np.ndarray]],
    learning_rate: float,
    *,
    reduction: Literal["sum", "mean"] = "sum",
    noise_std: float | None = None,
    noise_rng: np.random.Generator | None = None,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    momentum_buffer: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """One synchronized-SGD server step (seed 000 Alg. 1, line 6).

    For every array ``name`` of ``params`` that at least one gradient holds,
    the step is ``s = sum_k g_k[name]`` (a gradient may leave an array out:
    it counts as zero), then, in this order and only when asked for,

    - ``s += N(0, noise_std^2)`` per coordinate: participant-level DP noise
      on the sum of clipped updates (McMahan et al.; seed 000 Ch. 7.3.4);
    - ``s += weight_decay * theta``;
    - ``m = momentum * m + s; s = m`` (server momentum, buffer updated in
      place);

    and ``theta_t = theta_{t-1} - eta * s`` with ``eta = learning_rate``
    (``reduction="sum"``, the paper's) or ``learning_rate / K`` for ``K``
    gradients (``"mean"``). Everything is computed in float64 and cast back
    to the dtype of ``params[name]``; arrays no gradient holds are returned
    unchanged (the same objects).

    Parameters
    ----------
    params : mapping of str to numpy.ndarray
        The global model ``theta_{t-1}``.
    gradients : sequence of mapping of str to numpy.ndarray
        The clients' gradients ``g_k``, summed in this order.
    learning_rate : float
        The server's step size ``eta``.
    reduction : {"sum", "mean"}, default="sum"
        How the gradients are combined.
    noise_std : float, optional
        Standard deviation of the Gaussian noise added to the sum (None: no
        noise; 0 still draws from ``noise_rng``, so the stream of draws does
        not depend on the value).
    noise_rng : numpy.random.Generator, optional
        Source of that noise; required with ``noise_std``.
    weight_decay : float, default=0.0
        Server-side L2 weight decay.
    momentum : float, default=0.0
        Server momentum coefficient.
    momentum_buffer : dict of str to numpy.ndarray, optional
        Float64 momentum per array (required with ``momentum``; updated in
        place).

    Returns
    -------
    dict of str to numpy.ndarray
        ``theta_t``, in the order of ``params``.

    Raises
    ------
    ConfigError
        If the learning rate is not positive and finite, the reduction is
        unknown, a gradient names an array ``params`` lacks, or noise or
        momentum is asked for without its generator or buffer.

    Examples
    --------
    >>> import numpy as np
    >>> theta = {"w": np.array([1.0, 2.0], dtype=np.float32)}
    >>> grads = [{"w": np.array([0.5, 0.5])}, {"w": np.array([1.5, -0.5])}]
    >>> sgd_step(theta, grads, 0.1)["w"]
    array([0.8, 2. ], dtype=float32)
    """
    _check_step(params, gradients, learning_rate, reduction)
    if noise_std is not None and noise_rng is None:
        raise ConfigError("noise_std needs a noise_rng")
    if momentum and momentum_buffer is None:
        raise ConfigError("server momentum needs a momentum buffer")
    scale = learning_rate
    if reduction == "mean":
        scale /= len(gradients)
    updated: dict[str, np.ndarray] = {}
    for name, value in params.items():
        step = _summed(name, gradients)
        if step is None:
            updated[name] = value
            continue
        if noise_std is not None and noise_rng is not None:
            step = step + noise_rng.normal(0.0, noise_std, step.shape)
        if weight_decay:
            step = step + weight_decay * value.astype(np.float64)
        if momentum and momentum_buffer is not None:
            momentum_buffer[name] = momentum * momentum_buffer[name] + step
            step = momentum_buffer[name]
        updated[name] = (value.astype(np.float64) - scale * step).astype(value.dtype)
    return updated


def average_models(
    reference: Mapping[str, np.ndarray],
    models: Sequence[tuple[Mapping[str, np.ndarray], float]],
) -> dict[str, np.ndarray]:
    """Average the local models, weighted (seed 000 Alg. 2, line 8).

    ``theta_t = sum_k n_k / n * theta_k`` with ``n = sum_k n_k``: each
    array's weighted sum is accumulated in float64 in the order of
    ``models``, divided by ``n`` and cast back to the dtype of
    ``reference[name]`` (integer arrays are rounded to the nearest integer
    first).

    Parameters
    ----------
    reference : mapping of str to numpy.ndarray
        The global model ``theta_{t-1}``: which arrays to average, and their
        dtypes.
    models : sequence of (mapping of str to numpy.ndarray, float)
        The local models ``theta_k`` (each holding every array of
        ``reference``) with their weights ``n_k`` (> 0).

    Returns
    -------
    dict of str to numpy.ndarray
        ``theta_t``, in the order of ``reference``.

    Raises
    ------
    ConfigError
        If ``models`` is empty.

    Examples
    --------
    >>> import numpy as np
    >>> ref = {"w": np.zeros(2, dtype=np.float32)}
    >>> average_models(ref, [({"w": np.array([1.0, 0.0])}, 3), ({"w": np.ones(2)}, 1)])
    {'w': array([1.  , 0.25], dtype=float32)}
    """
    if not models:
        raise ConfigError("model averaging needs at least one local model")
    total_weight = sum(weight for _, weight in models)
    averaged: dict[str, np.ndarray] = {}
    for name, value in reference.items():
        mean = sum(w * local[name].astype(np.float64) for local, w in models)
        mean = np.asarray(mean) / total_weight
        if np.issubdtype(value.dtype, np.integer):
            mean = np.rint(mean)
        averaged[name] = mean.astype(value.dtype)
    return averaged
