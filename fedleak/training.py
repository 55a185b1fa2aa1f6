"""Plain PyTorch training steps used by the clients and the server's evaluation.

Flower-free: each function takes a model and tensors and returns numbers or
arrays, so the client behaviours of seed 000 Alg. 1 (one-batch gradient) and
Alg. 2 (local epochs of SGD) can be tested without a federation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from threadpoolctl import threadpool_limits
from torch import nn

__all__ = [
    "EvalResult",
    "SerializedArray",
    "arrays_from_records",
    "batch_gradient",
    "evaluate",
    "get_arrays",
    "native_threads",
    "read_npy",
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


def set_arrays(model: nn.Module, arrays: Mapping[str, np.ndarray]) -> None:
    """Load ``arrays`` (a full state dict as numpy arrays) into ``model``.

    Where the names and shapes match the model's state dict and every
    tensor has a numpy dtype, each array is copied straight into its tensor
    (``numpy.copyto``, casting as ``Tensor.copy_`` does); otherwise through
    ``load_state_dict(strict=True)``, which also reports what does not
    match. Same values either way; the direct copy takes a tenth of the time
    for the quickstart CNN (0.03 ms against 0.34 ms), which every client
    message and every server evaluation pays.
    """
    state = model.state_dict()
    if _copy_into(state, arrays):
        return
    _load_state(model, arrays)


def _copy_into(state: Mapping[str, torch.Tensor], arrays: Mapping[str, Any]) -> bool:
    """Copy ``arrays`` into the tensors of ``state``; False (none copied) if unfit."""
    if state.keys() != arrays.keys():
        return False
    pairs = []
    for name, tensor in state.items():
        value = arrays[name]
        if (
            not isinstance(value, np.ndarray)
            or tuple(tensor.shape) != value.shape
            or tensor.device.type != "cpu"
            or tensor.dtype not in _NUMPY_DTYPES
        ):
            return False
        pairs.append((tensor, value))
    with torch.no_grad():
        for tensor, value in pairs:
            np.copyto(tensor.numpy(), value, casting="unsafe")
    return True


_NUMPY_DTYPES = frozenset(
    {
        torch.float16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    }
)
"""Tensor dtypes whose ``Tensor.numpy()`` view :func:`set_arrays` writes into."""


def _load_state(model: nn.Module, arrays: Mapping[str, np.ndarray]) -> None:
    """:func:`set_arrays` through ``load_state_dict(strict=True)``."""
    state = {
        name: (
            torch.from_numpy(np.ascontiguousarray(a))
            if a.flags.writeable
            else torch.tensor(a)  # torch warns on read-only memory; copy it
        )
        for name, a in arrays.items()
    }
    model.load_state_dict(state, strict=True)


_NPY_MAGIC = b"\x93NUMPY"


def read_npy(data: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """Return a read-only view of the C-ordered array stored in ``.npy`` bytes.

    Flower's ``Array`` holds its data as the bytes of ``numpy.save`` (with
    its ``dtype`` and ``shape`` beside them); ``numpy.load`` re-parses the
    header with ``ast.literal_eval``, which costs 20 times the copy for the
    quickstart model (0.32 ms against 0.015 ms for its 10 arrays). This reads
    the header length and checks it against ``dtype`` and ``shape``
    instead. Returns None when the bytes are not a plain C-ordered ``.npy``
    of that dtype and shape; the caller then falls back to ``numpy.load``.
    """
    if data[:6] != _NPY_MAGIC or data[6] not in (1, 2, 3):
        return None
    width = 2 if data[6] == 1 else 4
    start = 8 + width
    end = start + int.from_bytes(data[8:start], "little")
    header = data[start:end]
    try:
        kind = np.dtype(dtype)
    except TypeError:
        return None
    count = int(np.prod(shape, dtype=np.int64))
    descr = np.lib.format.dtype_to_descr(kind)
    if (
        b"'fortran_order': False" not in header
        or f"'descr': {descr!r}".encode() not in header
        or len(data) - end != count * kind.itemsize
    ):
        return None
    return np.frombuffer(data, dtype=kind, count=count, offset=end).reshape(shape)


class SerializedArray(Protocol):
    """An array stored as ``numpy.save`` bytes (Flower's ``flwr.app.Array``)."""

    dtype: str
    shape: tuple[int, ...]
    stype: str
    data: bytes

    def numpy(self) -> np.ndarray:
        """Deserialise with ``numpy.load``."""
        ...


def arrays_from_records(arrays: Mapping[str, SerializedArray]) -> dict[str, np.ndarray]:
    """Return ``{name: ndarray}`` for serialised arrays, as read-only views.

    Uses :func:`read_npy` and falls back to each array's own ``numpy()`` for
    anything else (another serialisation, a Fortran-ordered array).
    """
    out: dict[str, np.ndarray] = {}
    for name, array in arrays.items():
        view = (
            read_npy(array.data, array.dtype, tuple(array.shape))
            if array.stype == "numpy.ndarray"
            else None
        )
        out[name] = array.numpy() if view is None else view
    return out


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


@contextmanager
def native_threads(num_threads: int) -> Iterator[None]:
    """Run the block with ``num_threads`` threads in every native thread pool.

    Caps torch's intra-op threads and every BLAS and OpenMP pool loaded in
    this process (numpy's and scipy's OpenBLAS, scikit-learn's and torch's
    OpenMP) through threadpoolctl, which finds the pools at run time; ``0``
    leaves them unchanged. The counts are per process and restored when the
    block ends.

    A simulation's server runs next to Ray actors that hold the CPUs. With
    two-thread pools in the server process, a BLAS call during aggregation
    leaves an OpenBLAS thread spinning for work after it returns, and it
    takes a CPU from the actors: measured on 2 CPUs, the quickstart's client
    compute 0.065 s a round with the default pools against 0.025 s capped
    at one thread, and torch's OpenMP threads waiting for each other (360
    test images, 13-16 ms on one thread, 65-184 ms on two). Set it around a
    whole run, not around each call: changing torch's count invalidates
    oneDNN's cached kernels (an evaluation right after a change took 33 ms
    against 15 ms).
    """
    if num_threads < 0:
        raise ValueError(f"num_threads must be >= 0, got {num_threads}")
    if num_threads == 0:
        yield
        return
    before = torch.get_num_threads()
    with threadpool_limits(limits=num_threads):
        if num_threads != before:
            torch.set_num_threads(num_threads)
        try:
            yield
        finally:
            if num_threads != before:
                torch.set_num_threads(before)
