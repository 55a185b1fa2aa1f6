"""White-box membership scores from per-record loss-gradient norms.

Members of a model's training set sit near a minimum of their own loss, so
the gradient of ``loss(f(x), y)`` with respect to all weights is smaller for
them: the gradient features Nasr et al.'s white-box attack reads from a
model's last layers, used against seed 003's framework in its Section
5.3.2. ``fedleak bench ppgf`` scores every downstream model with it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["gradient_norm_scores"]


def gradient_norm_scores(
    model: Any, x: NDArray[np.floating], y: NDArray[np.integer]
) -> NDArray[np.float64]:
    """White-box membership scores: minus the per-record loss-gradient norm.

    Members of the training set sit near a minimum of their own loss, so the
    gradient of ``loss(f(x), y)`` with respect to all weights is smaller for
    them (the gradient features of Nasr et al., used by seed 003 Section
    5.3.2); higher score = more likely a member. The per-record gradients
    come from ``torch.func`` (``vmap`` of ``grad``), 256 records at a time.

    Parameters
    ----------
    model : torch.nn.Module
        The classifier (logits out).
    x : numpy.ndarray
        Records, in the model's input shape.
    y : numpy.ndarray
        Their labels.

    Returns
    -------
    numpy.ndarray of float64
        One score per record.
    """
    import torch
    from torch.func import functional_call, grad, vmap
    from torch.nn import functional as F

    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(
        p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor
    ) -> torch.Tensor:
        return F.cross_entropy(
            functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0)
        )

    per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    xs = torch.as_tensor(np.asarray(x, dtype=np.float32))
    ys = torch.as_tensor(np.asarray(y, dtype=np.int64))
    norms = []
    for start in range(0, len(xs), 256):
        g = per_example(params, xs[start : start + 256], ys[start : start + 256])
        sq = sum(v.reshape(v.shape[0], -1).pow(2).sum(dim=1) for v in g.values())
        norms.append(torch.sqrt(torch.as_tensor(sq)).numpy())
    return -np.concatenate(norms).astype(np.float64)
