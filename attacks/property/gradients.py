"""The property adversary's local computations, in plain PyTorch.

Seed 000 Ch. 7.1.4-7.1.5 and 7.2.6-7.2.7. Every round the adversary

- computes gradients at the current global model on auxiliary batches with and
  without the property (Alg. 7, line 7). With more than one other participant
  the observed update is an *aggregate*, so the adversary "emulates" it
  (Ch. 7.2.7): the labelled examples are sums over as many batches as there
  are other participants, one of which has the property (positive) or none
  (negative) -- :func:`emulated_sgd_pair` for synchronized SGD (Alg. 1),
  :func:`emulated_averaging_pair` for model averaging (Alg. 2);
- as an active adversary, uploads the gradient of the multi-task loss of
  Ch. 7.1.5 with a property head on the model's last layer
  (:class:`PropertyHead`, :func:`multitask_gradient`).

Flower-free: the inputs are a model and tensors, the outputs NumPy arrays
keyed like the model's parameters.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedleak.errors import ConfigError, DataError

__all__ = [
    "AuxiliaryPools",
    "PropertyHead",
    "apply_head_step",
    "derive_averaging_aggregate",
    "derive_sgd_aggregate",
    "emulated_averaging_pair",
    "emulated_sgd_pair",
    "last_linear",
    "local_update",
    "multitask_gradient",
    "summed_batch_gradient",
]


@dataclass(frozen=True)
class AuxiliaryPools:
    """The adversary's auxiliary data ``X_prop`` and ``X_nonprop`` (Alg. 7 input).

    Attributes
    ----------
    x_prop, y_prop : torch.Tensor
        Records with the property and their main-task labels.
    x_nonprop, y_nonprop : torch.Tensor
        Records without the property and their labels.
    """

    x_prop: torch.Tensor
    y_prop: torch.Tensor
    x_nonprop: torch.Tensor
    y_nonprop: torch.Tensor

    def __post_init__(self) -> None:
        if self.x_prop.shape[0] == 0 or self.x_nonprop.shape[0] == 0:
            raise DataError(
                "the property adversary needs auxiliary records with and without "
                f"the property; has {self.x_prop.shape[0]} with and "
                f"{self.x_nonprop.shape[0]} without"
            )

    def batch(
        self, size: int, prop_fraction: float, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample a batch of which ``round(prop_fraction * size)`` records have it.

        Returns the inputs, the main labels and the property labels (0/1).
        Records are drawn without replacement within the batch when the pool is
        large enough, else with replacement.
        """
        if not 0.0 <= prop_fraction <= 1.0:
            raise ConfigError(f"prop_fraction must lie in [0, 1], got {prop_fraction}")
        n_prop = round(prop_fraction * size)
        parts_x, parts_y, parts_p = [], [], []
        for count, x, y, flag in (
            (n_prop, self.x_prop, self.y_prop, 1),
            (size - n_prop, self.x_nonprop, self.y_nonprop, 0),
        ):
            if count == 0:
                continue
            pool = x.shape[0]
            idx = torch.from_numpy(rng.choice(pool, size=count, replace=count > pool))
            parts_x.append(x[idx])
            parts_y.append(y[idx])
            parts_p.append(torch.full((count,), flag, dtype=torch.int64))
        return torch.cat(parts_x), torch.cat(parts_y), torch.cat(parts_p)


def _trainable(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def summed_batch_gradient(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int
) -> dict[str, np.ndarray]:
    """Sum of the mean-loss gradients of consecutive batches of ``batch_size``.

    ``sum_b grad L(B_b; theta)`` equals the gradient of
    ``sum(per-record loss) / batch_size`` when every batch has ``batch_size``
    records, so one backward pass over the concatenation gives the sum a
    synchronized-SGD server forms from that many participants (Alg. 1, line 6).

    Raises
    ------
    DataError
        If ``len(x)`` is not a multiple of ``batch_size``.
    """
    if batch_size < 1 or x.shape[0] % batch_size:
        raise DataError(
            f"{x.shape[0]} records do not make whole batches of {batch_size}"
        )
    model.train()
    model.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y, reduction="sum") / batch_size
    loss.backward()  # type: ignore[no-untyped-call]
    return {
        name: p.grad.detach().cpu().numpy().astype(np.float64)
        for name, p in _trainable(model)
        if p.grad is not None
    }


def emulated_sgd_pair(
    model: nn.Module,
    pools: AuxiliaryPools,
    *,
    batch_size: int,
    participants: int,
    prop_fraction: float,
    rng: np.random.Generator,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One positive and one negative labelled gradient for ``f_prop`` (Alg. 7, l. 6-9).

    With ``participants = 1`` (two parties) these are Alg. 7's ``g_prop`` and
    ``g_nonprop``. With more, each is the sum of ``participants`` batch
    gradients, the aggregate the adversary observes under synchronized SGD
    (Ch. 7.2.6): the positive has one batch with the property, the negative
    none. Both share the same ``participants - 1`` property-free batches, so
    the pair differs only in the batch that matters.

    Parameters
    ----------
    model : torch.nn.Module
        At the current global parameters.
    pools : AuxiliaryPools
        The adversary's auxiliary data.
    batch_size : int
        Records per emulated batch.
    participants : int
        Emulated other participants (``K - 1``), >= 1.
    prop_fraction : float
        Fraction of the property batch's records with the property.
    rng : numpy.random.Generator
        Batch sampling.

    Returns
    -------
    positive, negative : dict of str to numpy.ndarray
    """
    if participants < 1:
        raise ConfigError(f"participants must be >= 1, got {participants}")
    x_p, y_p, _ = pools.batch(batch_size, prop_fraction, rng)
    x_n, y_n, _ = pools.batch(batch_size, 0.0, rng)
    positive = summed_batch_gradient(model, x_p, y_p, batch_size)
    negative = summed_batch_gradient(model, x_n, y_n, batch_size)
    if participants > 1:
        x_s, y_s, _ = pools.batch(batch_size * (participants - 1), 0.0, rng)
        shared = summed_batch_gradient(model, x_s, y_s, batch_size)
        for name, value in shared.items():
            positive[name] = positive[name] + value
            negative[name] = negative[name] + value
    return positive, negative


def local_update(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    generator: torch.Generator,
) -> dict[str, np.ndarray]:
    """``theta_k - theta`` after local SGD from ``model`` (seed 000 Alg. 2, l. 10-13).

    ``model`` is left unchanged (a copy is trained).
    """
    start = {n: p.detach().clone() for n, p in _trainable(model)}
    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=learning_rate)
    trained.train()
    n = x.shape[0]
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        for begin in range(0, n, batch_size):
            idx = order[begin : begin + batch_size]
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(trained(x[idx]), y[idx]).backward()  # type: ignore[no-untyped-call]
            optimizer.step()
    return {
        n: (p.detach() - start[n]).cpu().numpy().astype(np.float64)
        for n, p in _trainable(trained)
    }


def emulated_averaging_pair(
    model: nn.Module,
    pools: AuxiliaryPools,
    *,
    participants: int,
    total_participants: int,
    records: int,
    prop_fraction: float,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    rng: np.random.Generator,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Emulated model-averaging aggregates with and without the property (Ch. 7.2.7).

    The adversary observes ``sum_{k != adv} n_k / n (theta_k_t - theta_{t-1})``.
    It emulates it from its own data: ``participants`` local trainings of
    ``records`` records each from the current model, weighted ``1 /
    total_participants`` (equal ``n_k``). In the positive aggregate one emulated
    participant's records have the property in fraction ``prop_fraction``; in
    the negative none do. The other ``participants - 1`` emulated updates are
    shared by the pair.

    Returns
    -------
    positive, negative : dict of str to numpy.ndarray
    """
    if participants < 1 or total_participants <= participants:
        raise ConfigError(
            "model-averaging emulation needs 1 <= participants < total_participants, "
            f"got {participants} and {total_participants}"
        )
    generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
    weight = 1.0 / total_participants

    def update(fraction: float) -> dict[str, np.ndarray]:
        x, y, _ = pools.batch(records, fraction, rng)
        return local_update(
            model,
            x,
            y,
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            generator=generator,
        )

    positive = {n: weight * v for n, v in update(prop_fraction).items()}
    negative = {n: weight * v for n, v in update(0.0).items()}
    for _ in range(participants - 1):
        for name, value in update(0.0).items():
            positive[name] = positive[name] + weight * value
            negative[name] = negative[name] + weight * value
    return positive, negative


def derive_sgd_aggregate(
    before: dict[str, np.ndarray],
    after: dict[str, np.ndarray],
    own_upload: dict[str, np.ndarray],
    learning_rate: float,
    scale: float = 1.0,
) -> dict[str, np.ndarray]:
    """Derive the others' summed gradients from two sync-SGD models (Alg. 1).

    ``theta_t = theta_{t-1} - lr * sum_k g_k / s`` (``s = 1`` for a sum, the
    number of clients for a mean), so
    ``sum_{k != adv} g_k = s * (theta_{t-1} - theta_t) / lr - g_adv``.
    Computed in float64 for the names of ``own_upload``.
    """
    return {
        n: scale
        * (before[n].astype(np.float64) - after[n].astype(np.float64))
        / learning_rate
        - own_upload[n].astype(np.float64)
        for n in own_upload
    }


def derive_averaging_aggregate(
    before: dict[str, np.ndarray],
    after: dict[str, np.ndarray],
    own_model: dict[str, np.ndarray],
    own_weight: float,
) -> dict[str, np.ndarray]:
    """Derive the others' weighted update from two averaged models (Ch. 7.2.7).

    ``theta_t - theta_{t-1} = sum_k n_k/n (theta_k - theta_{t-1})``, so the
    others' part is ``theta_t - theta_{t-1} - n_adv/n (theta_adv - theta_{t-1})``.
    Computed in float64 for the floating-point arrays of ``own_model``.
    """
    out: dict[str, np.ndarray] = {}
    for n, own in own_model.items():
        if not np.issubdtype(own.dtype, np.floating):
            continue
        start = before[n].astype(np.float64)
        out[n] = (
            after[n].astype(np.float64)
            - start
            - own_weight * (own.astype(np.float64) - start)
        )
    return out


def last_linear(model: nn.Module) -> nn.Linear:
    """Return the model's last ``nn.Linear`` module (its output layer).

    Raises
    ------
    ConfigError
        If the model has no linear layer.
    """
    found = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not found:
        raise ConfigError(
            "the active property attack attaches its head to the model's last "
            "linear layer, and this model has none"
        )
    return found[-1]


class PropertyHead(nn.Module):
    """The augmented property classifier of the active attack (Ch. 7.1.5).

    A linear layer from the *input* of the model's last linear layer (the
    last hidden representation, e.g. the CNN's 256-unit layer) to two logits
    (property / no property): it shares every layer but the output layer
    with the main task.

    Parameters
    ----------
    in_features : int
        Width of the last linear layer's input.
    seed : int
        Seed of the head's initial weights.
    """

    def __init__(self, in_features: int, seed: int) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.linear = nn.Linear(in_features, 2)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Return the property logits of the hidden ``features``."""
        out: torch.Tensor = self.linear(features)
        return out


def multitask_gradient(
    model: nn.Module,
    head: PropertyHead,
    main_batch: tuple[torch.Tensor, torch.Tensor],
    property_batch: tuple[torch.Tensor, torch.Tensor],
    alpha: float,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], float]:
    """Gradient of the active adversary's joint loss (seed 000 Ch. 7.1.5).

    ``L = (1 - alpha) * L(x, y; theta) + alpha * L(x', p; theta, head)``:
    ``alpha`` weights the **property** term, so ``alpha = 0`` is exactly the
    passive adversary's (honest) gradient on ``main_batch``. (The seed writes
    ``alpha L(x,y) + (1 - alpha) L(x,p)`` but calls ``alpha = 0`` the passive
    attack in Fig. 7.6; fedleak follows the figure.)

    Parameters
    ----------
    model : torch.nn.Module
        The shared model at the global parameters.
    head : PropertyHead
        The adversary's local property head.
    main_batch : (x, y)
        The batch of the protocol's ClientUpdate and its main labels.
    property_batch : (x', p)
        An auxiliary batch mixing records with (p = 1) and without (p = 0)
        the property.
    alpha : float
        Weight of the property term, in ``[0, 1]``.

    Returns
    -------
    shared : dict of str to numpy.ndarray
        The upload: the joint loss's gradient for every model parameter.
    head_gradients : dict of str to numpy.ndarray
        The head's gradient (kept local).
    property_loss : float
        The property term's value.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha must lie in [0, 1], got {alpha}")
    model.train()
    model.zero_grad(set_to_none=True)
    head.zero_grad(set_to_none=True)
    x, y = main_batch
    loss = (1.0 - alpha) * nn.functional.cross_entropy(model(x), y)
    property_loss = 0.0
    if alpha > 0.0:
        captured: list[torch.Tensor] = []
        hook = last_linear(model).register_forward_pre_hook(
            lambda _m, inputs: captured.append(inputs[0])
        )
        try:
            model(property_batch[0])
        finally:
            hook.remove()
        prop_term = nn.functional.cross_entropy(head(captured[0]), property_batch[1])
        property_loss = float(prop_term.item())
        loss = loss + alpha * prop_term
    loss.backward()  # type: ignore[no-untyped-call]
    shared = {
        name: (
            p.grad.detach().cpu().numpy().copy()
            if p.grad is not None
            else np.zeros(tuple(p.shape), dtype=np.float32)
        )
        for name, p in _trainable(model)
    }
    head_grads = {
        name: (
            p.grad.detach().cpu().numpy().copy()
            if p.grad is not None
            else np.zeros(tuple(p.shape), dtype=np.float32)
        )
        for name, p in head.named_parameters()
    }
    return shared, head_grads, property_loss


def apply_head_step(
    head: PropertyHead, gradients: Mapping[str, np.ndarray], learning_rate: float
) -> None:
    """One SGD step of the local property head, applied to ``head`` in place."""
    with torch.no_grad():
        for name, p in head.named_parameters():
            step = torch.from_numpy(np.asarray(gradients[name], dtype=np.float32))
            p.sub_(learning_rate * step)
