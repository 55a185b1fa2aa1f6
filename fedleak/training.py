"""Plain PyTorch training steps used by the clients and the server's evaluation.

Flower-free: each function takes a model and tensors and returns numbers or
arrays, so the client behaviours of seed 000 Alg. 1 (one-batch gradient) and
Alg. 2 (local epochs of SGD) can be tested without a federation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = [
    "EvalResult",
    "batch_gradient",
    "evaluate",
    "get_arrays",
    "set_arrays",
    "train_epochs",
]


@dataclass(frozen=True)
class EvalResult:
    """Mean loss and accuracy of a model on a set of examples."""

    loss: float
    accuracy: float
    num_examples: int


def get_arrays(model: nn.Module) -> dict[str, np.ndarray]:
    """Return the model's state dict as numpy arrays (copies), in order."""
    return {
        name: t.detach().cpu().numpy().copy() for name, t in model.state_dict().items()
    }


def set_arrays(model: nn.Module, arrays: dict[str, np.ndarray]) -> None:
    """Load ``arrays`` (a full state dict as numpy arrays) into ``model``."""
    state = {
        name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in arrays.items()
    }
    model.load_state_dict(state, strict=True)


def batch_gradient(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[dict[str, np.ndarray], float, float]:
    """Gradient of the mean cross-entropy on one batch (seed 000 Alg. 1, line 10).

    Parameters
    ----------
    model : torch.nn.Module
        The model at the current global parameters.
    x, y : torch.Tensor
        One mini-batch of inputs and integer labels.

    Returns
    -------
    gradients : dict of str to numpy.ndarray
        ``dL(B; theta)/dtheta`` for every trainable parameter, keyed like the
        model's state dict.
    loss : float
        The batch's mean loss.
    accuracy : float
        The batch's accuracy at ``theta``.
    """
    model.train()
    model.zero_grad(set_to_none=True)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()  # type: ignore[no-untyped-call]
    gradients = {
        name: p.grad.detach().cpu().numpy().copy()
        for name, p in model.named_parameters()
        if p.requires_grad and p.grad is not None
    }
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    return gradients, float(loss.item()), float(accuracy)


def train_epochs(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    generator: torch.Generator,
) -> tuple[float, int]:
    """Run ``epochs`` epochs of plain SGD over ``(x, y)`` (seed 000 Alg. 2, l. 10-13).

    Parameters
    ----------
    model : torch.nn.Module
        Trained in place.
    x, y : torch.Tensor
        The client's whole local data.
    epochs, batch_size : int
        Local epochs ``E`` and mini-batch size.
    learning_rate : float
        The SGD step size ``eta``.
    generator : torch.Generator
        Drives the per-epoch shuffling (seed it for reproducible runs).

    Returns
    -------
    mean_loss : float
        Mean training loss over all steps.
    steps : int
        Number of SGD steps taken.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    model.train()
    total, steps = 0.0, 0
    n = x.shape[0]
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += float(loss.item())
            steps += 1
    return (total / steps if steps else float("nan")), steps


@torch.no_grad()
def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 1024
) -> EvalResult:
    """Mean cross-entropy and accuracy of ``model`` on ``(x, y)``."""
    model.eval()
    total_loss, correct = 0.0, 0
    n = int(x.shape[0])
    for start in range(0, n, batch_size):
        logits = model(x[start : start + batch_size])
        target = y[start : start + batch_size]
        total_loss += float(
            nn.functional.cross_entropy(logits, target, reduction="sum")
        )
        correct += int((logits.argmax(dim=1) == target).sum())
    if n == 0:
        return EvalResult(float("nan"), float("nan"), 0)
    return EvalResult(total_loss / n, correct / n, n)
