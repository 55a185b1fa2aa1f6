"""Client-side defenses of seed 000 Ch. 7.3 against the inference attacks.

Each defense is a plain function on numpy arrays or torch modules (testable
without a federation), and :class:`ClientDefenses` composes them for one
client's upload:

- **selective gradient sharing** (Ch. 7.3.1, Shokri and Shmatikov):
  :func:`share_top_fraction` keeps the largest-magnitude fraction of the
  update's coordinates (over all arrays together) and zeroes the rest;
- **vocabulary restriction** (Ch. 7.3.2): :func:`restrict_inputs` maps every
  token outside the top-``N`` to the unknown token before training, and
  :func:`zero_rows_outside_vocabulary` zeroes the embedding rows outside the
  top-``N`` in the upload (the ids of :mod:`fedleak.data.text` are frequency
  ordered, so the top-``N`` words are the ids below ``N + FIRST_WORD_ID``);
- **dropout** (Ch. 7.3.3) is a model option (``dropout`` of
  :func:`fedleak.models.build_text_model`), applied after the pooling layer;
- **record-level DP-SGD** (Ch. 7.3.4, Abadi et al.): :func:`private_batch_gradient`
  (one clipped, noised batch gradient: synchronized SGD) and
  :func:`private_local_training` (local epochs: model averaging) reuse
  :mod:`fedleak.privacy.dpsgd`, whose per-sample gradients come from Opacus;
  :func:`make_dp_compatible` swaps ``nn.GRU`` for Opacus' ``DPGRU``;
  :func:`record_level_epsilon` accounts with dp-accounting.

Participant-level DP is server-side noise on clipped client updates: fedleak
reuses Flower's ``DifferentialPrivacyServerSideFixedClipping`` /
``DifferentialPrivacyClientSideFixedClipping`` (+ ``fixedclipping_mod``)
unchanged, and :func:`participant_level_epsilon` reports its epsilon.

Every function that draws randomness takes a seed or a generator.

In a federation, :class:`DefendedClient` is the honest client with these
defenses; the experiment's ``[defenses]`` section reaches it as
``defenses.*`` entries of the message config (:func:`defenses_from_config`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord
from opacus.validators import ModuleValidator
from torch import nn

from fedleak import protocol
from fedleak.data.text import FIRST_WORD_ID, UNK_ID
from fedleak.errors import ConfigError
from fedleak.privacy.accounting import sgm_epsilon
from fedleak.privacy.dpsgd import DPSGD, FixedClipping, dp_sgd_train
from fedleak.privacy.randomness import RngLike, check_rng
from fedleak.task import TaskSpec
from fedleak.training import get_arrays

from .honest import HonestClient

__all__ = [
    "EMBEDDING_KEY",
    "ClientDefenses",
    "DefendedClient",
    "defended_behaviour",
    "defenses_from_config",
    "make_dp_compatible",
    "participant_level_epsilon",
    "private_batch_gradient",
    "private_local_training",
    "record_level_epsilon",
    "restrict_inputs",
    "share_top_fraction",
    "zero_rows_outside_vocabulary",
]

EMBEDDING_KEY = "embedding.weight"
"""State-dict key of the embedding matrix in fedleak's text models."""


def share_top_fraction(
    update: Mapping[str, np.ndarray], fraction: float
) -> dict[str, np.ndarray]:
    """Keep the ``ceil(fraction * size)`` largest-magnitude coordinates, zero the rest.

    Seed 000 Ch. 7.3.1: "participants [...] share only a fraction of their
    gradients during each update". The selection is over all arrays
    together (the largest values of the whole update, as in Shokri and
    Shmatikov's distributed selective SGD); ties at the threshold are broken
    by position, so exactly ``k`` coordinates survive unless fewer are nonzero.

    Parameters
    ----------
    update : mapping of str to numpy.ndarray
        A gradient, or a model change ``theta_k - theta``.
    fraction : float
        In ``(0, 1]``; 1 returns copies unchanged.

    Returns
    -------
    dict of str to numpy.ndarray
        Same keys, shapes and dtypes.
    """
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"share fraction must lie in (0, 1], got {fraction}")
    names = list(update)
    if fraction == 1.0 or not names:
        return {k: np.array(v, copy=True) for k, v in update.items()}
    flat = np.concatenate(
        [np.abs(np.asarray(update[k], np.float64)).ravel() for k in names]
    )
    k = math.ceil(fraction * flat.size)
    keep = np.zeros(flat.size, dtype=bool)
    keep[np.argpartition(-flat, k - 1)[:k]] = True
    out: dict[str, np.ndarray] = {}
    start = 0
    for name in names:
        value = np.asarray(update[name])
        mask = keep[start : start + value.size].reshape(value.shape)
        out[name] = np.where(mask, value, np.zeros_like(value))
        start += value.size
    return out


def restrict_inputs(ids: torch.Tensor, top_n: int) -> torch.Tensor:
    """Map every token outside the top-``top_n`` words to :data:`UNK_ID`.

    Padding and the unknown token are kept; ids are frequency ordered
    (:mod:`fedleak.data.text`), so the kept words are ``ids < top_n + 2``.
    """
    if top_n < 1:
        raise ConfigError(f"vocabulary top_n must be >= 1, got {top_n}")
    limit = top_n + FIRST_WORD_ID
    return torch.where(ids >= limit, torch.full_like(ids, UNK_ID), ids)


def zero_rows_outside_vocabulary(
    update: Mapping[str, np.ndarray], top_n: int, *, key: str = EMBEDDING_KEY
) -> dict[str, np.ndarray]:
    """Zero the embedding rows of the tokens outside the top-``top_n`` words.

    With :func:`restrict_inputs` those rows get no gradient anyway; zeroing
    them in the upload guarantees it for any training code (and removes
    e.g. weight decay on them).

    Raises
    ------
    ConfigError
        If ``update`` has no array ``key`` or it is not a matrix.
    """
    if top_n < 1:
        raise ConfigError(f"vocabulary top_n must be >= 1, got {top_n}")
    if key not in update or np.asarray(update[key]).ndim != 2:
        raise ConfigError(
            f"the update has no embedding matrix {key!r}; vocabulary restriction "
            "needs a text model (text-cnn or text-gru)"
        )
    out = {k: np.array(v, copy=True) for k, v in update.items()}
    out[key][top_n + FIRST_WORD_ID :] = 0
    return out


def make_dp_compatible(model: nn.Module) -> nn.Module:
    """Replace the layers Opacus cannot handle (``nn.GRU`` -> ``DPGRU``).

    Uses Opacus' ``ModuleValidator.fix``. ``DPGRU`` exposes the same
    parameter names as ``nn.GRU`` (``weight_ih_l0`` ...), so updates keep
    their keys; its state dict also holds aliases, so load plain state dicts
    with ``strict=False``.
    """
    fixed: nn.Module = ModuleValidator.fix(model)
    return fixed


def private_batch_gradient(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    seed: RngLike,
) -> dict[str, np.ndarray]:
    """One record-level DP gradient of the mean loss on a batch (Abadi et al.).

    Each record's gradient is clipped to L2 norm ``max_grad_norm``; the sum
    gets ``N(0, (noise_multiplier * max_grad_norm)^2 I)`` and is divided by
    the batch size. Clipping and noise are :class:`fedleak.privacy.dpsgd.DPSGD`'s
    (per-sample gradients from Opacus); the step it takes is on a copy of
    ``model``, whose ``.grad`` is read back, so ``model`` is left unchanged.

    Returns
    -------
    dict of str to numpy.ndarray
        Keyed by parameter name (``named_parameters``).
    """
    if max_grad_norm <= 0:
        raise ConfigError(f"max_grad_norm must be > 0, got {max_grad_norm}")
    work = make_dp_compatible(_copy(model))
    work.train()
    trainer = DPSGD(
        work,
        noise_multiplier=noise_multiplier,
        clipping=FixedClipping(max_grad_norm),
        expected_batch_size=int(x.shape[0]),
        lr=1.0,
        rng=check_rng(seed),
    )
    try:
        trainer.step(lambda: nn.functional.cross_entropy(work(x), y, reduction="none"))
    finally:
        trainer.close()
    return {
        name: p.grad.detach().cpu().numpy().copy()
        for name, p in work.named_parameters()
        if p.requires_grad and p.grad is not None
    }


def private_local_training(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    noise_multiplier: float,
    max_grad_norm: float,
    delta: float,
    seed: RngLike,
) -> tuple[nn.Module, float]:
    """Run local DP-SGD epochs (model averaging) with ``dp_sgd_train``.

    Returns
    -------
    model : torch.nn.Module
        The trained model (``nn.GRU`` replaced by ``DPGRU``; same parameter
        names).
    epsilon : float
        Record-level epsilon of these local epochs alone, for ``delta``.
    """
    work = make_dp_compatible(model)
    result = dp_sgd_train(
        work,
        x,
        y,
        epochs=epochs,
        batch_size=batch_size,
        lr=learning_rate,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        seed=seed,
        delta=delta,
    )
    return work, result.epsilon


def _copy(model: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(model)


def record_level_epsilon(
    *,
    batch_size: int,
    num_records: int,
    steps: int,
    noise_multiplier: float,
    delta: float,
) -> float:
    """Record-level epsilon of ``steps`` DP-SGD steps on one client's data.

    The sampled Gaussian mechanism with ``q = batch_size / num_records``,
    accounted by dp-accounting's RDP accountant
    (:func:`fedleak.privacy.accounting.sgm_epsilon`). fedleak's clients walk
    through shuffled epochs rather than Poisson samples; the Poisson bound is
    the usual approximation (as in Abadi et al. and Opacus).
    """
    if not 1 <= batch_size <= num_records:
        raise ConfigError(
            f"need 1 <= batch_size <= num_records, got {batch_size} and {num_records}"
        )
    if noise_multiplier == 0:
        return math.inf
    return sgm_epsilon(batch_size / num_records, noise_multiplier, steps, delta)


def participant_level_epsilon(
    *,
    noise_multiplier: float,
    sampled_clients: int,
    total_clients: int,
    rounds: int,
    delta: float,
) -> float:
    """Participant-level epsilon of DP-FedAvg (McMahan et al., seed 000 Ch. 7.3.4).

    Flower's fixed-clipping DP wrappers clip each client's update to
    ``clipping_norm`` and add ``N(0, (noise_multiplier * clipping_norm)^2)``
    to the sum; with ``sampled_clients`` of ``total_clients`` per round this
    is the sampled Gaussian mechanism at the participant level,
    ``q = sampled_clients / total_clients``, composed over ``rounds``
    (dp-accounting's RDP accountant). With every client in every round
    (``q = 1``) it is the plain Gaussian mechanism composed ``rounds`` times.
    """
    if not 1 <= sampled_clients <= total_clients:
        raise ConfigError(
            f"need 1 <= sampled_clients <= total_clients, got {sampled_clients} "
            f"and {total_clients}"
        )
    if noise_multiplier == 0:
        return math.inf
    return sgm_epsilon(sampled_clients / total_clients, noise_multiplier, rounds, delta)


@dataclass(frozen=True)
class ClientDefenses:
    """The client-side defenses one client applies (composable; defaults: none).

    Attributes
    ----------
    share_fraction : float
        Fraction of coordinates uploaded (1 = everything).
    vocab_top_n : int or None
        Restrict inputs and the embedding upload to the top-``N`` words.
    dp_noise_multiplier : float or None
        Record-level DP-SGD noise multiplier (``None`` = no DP-SGD).
    dp_max_grad_norm : float
        Record-level clipping norm ``C``.
    embedding_key : str
        Name of the embedding matrix in the update.
    """

    share_fraction: float = 1.0
    vocab_top_n: int | None = None
    dp_noise_multiplier: float | None = None
    dp_max_grad_norm: float = 1.0
    embedding_key: str = EMBEDDING_KEY

    def __post_init__(self) -> None:
        if not 0.0 < self.share_fraction <= 1.0:
            raise ConfigError(
                f"defenses.share_fraction must lie in (0, 1], got {self.share_fraction}"
            )
        if self.vocab_top_n is not None and self.vocab_top_n < 1:
            raise ConfigError(
                f"defenses.vocab_top_n must be >= 1, got {self.vocab_top_n}"
            )
        if self.dp_noise_multiplier is not None and not self.dp_noise_multiplier >= 0:
            raise ConfigError(
                "defenses.dp_noise_multiplier must be >= 0, got "
                f"{self.dp_noise_multiplier}"
            )
        if not self.dp_max_grad_norm > 0:
            raise ConfigError(
                f"defenses.dp_max_grad_norm must be > 0, got {self.dp_max_grad_norm}"
            )

    @property
    def active(self) -> bool:
        """Whether any defense is on."""
        return (
            self.share_fraction < 1.0
            or self.vocab_top_n is not None
            or self.dp_noise_multiplier is not None
        )

    def inputs(self, ids: torch.Tensor) -> torch.Tensor:
        """Apply the input side (vocabulary restriction) to token ids."""
        return (
            ids if self.vocab_top_n is None else restrict_inputs(ids, self.vocab_top_n)
        )

    def gradient(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, seed: RngLike
    ) -> dict[str, np.ndarray]:
        """Compute the defended one-batch gradient (synchronized SGD)."""
        x = self.inputs(x)
        if self.dp_noise_multiplier is not None:
            grads = private_batch_gradient(
                model,
                x,
                y,
                noise_multiplier=self.dp_noise_multiplier,
                max_grad_norm=self.dp_max_grad_norm,
                seed=seed,
            )
        else:
            model.train()
            model.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
            grads = {
                n: p.grad.detach().cpu().numpy().copy()
                for n, p in model.named_parameters()
                if p.grad is not None
            }
        return self.upload(grads)

    def upload(self, update: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Apply the upload side (vocabulary rows, then top-fraction) to an update."""
        out = dict(update)
        if self.vocab_top_n is not None:
            out = zero_rows_outside_vocabulary(
                out, self.vocab_top_n, key=self.embedding_key
            )
        if self.share_fraction < 1.0:
            out = share_top_fraction(out, self.share_fraction)
        return out


def defenses_from_config(config: Mapping[str, object]) -> ClientDefenses | None:
    """Read ``defenses.*`` message-config entries; None when no defense is on.

    Keys: ``defenses.share_fraction`` (float), ``defenses.vocab_top_n`` (int,
    0 = off), ``defenses.dp_noise_multiplier`` (float, < 0 = off) and
    ``defenses.dp_max_grad_norm`` (float).
    """

    def number(key: str, default: float) -> float:
        value = config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        return float(value)

    top_n = int(number("defenses.vocab_top_n", 0))
    noise = number("defenses.dp_noise_multiplier", -1.0)
    defenses = ClientDefenses(
        share_fraction=number("defenses.share_fraction", 1.0),
        vocab_top_n=top_n if top_n > 0 else None,
        dp_noise_multiplier=noise if noise >= 0 else None,
        dp_max_grad_norm=number("defenses.dp_max_grad_norm", 1.0),
    )
    return defenses if defenses.active else None


class DefendedClient(HonestClient):
    """The honest client with :class:`ClientDefenses` on its training and upload.

    Synchronized SGD: the defended one-batch gradient
    (:meth:`ClientDefenses.gradient`). Model averaging: local epochs on the
    restricted inputs (DP-SGD via :func:`private_local_training` when
    configured), then the upload side on the model change
    ``theta_k - theta``, uploaded as ``theta + defended change``. With DP-SGD
    the reply's metrics carry the cumulative ``record-epsilon`` of this
    client (delta ``defenses.dp_delta``, default 1e-5).

    Parameters
    ----------
    spec : TaskSpec
        The task.
    partition_id : int
        This node's partition.
    defenses : ClientDefenses
        What to apply.
    """

    def __init__(
        self, spec: TaskSpec, partition_id: int, defenses: ClientDefenses
    ) -> None:
        super().__init__(spec, partition_id)
        self.defenses = defenses
        if defenses.vocab_top_n is not None:
            self.data = dataclasses.replace(
                self.data,
                x_train=defenses.inputs(self.data.x_train),
                x_test=defenses.inputs(self.data.x_test),
            )

    def _server_round(self) -> int:
        value = None if self.config is None else self.config.get(protocol.SERVER_ROUND)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def _epsilon(self, steps: int, batch_size: int) -> float:
        delta = (
            1e-5 if self.config is None else self.config.get("defenses.dp_delta", 1e-5)
        )
        noise = self.defenses.dp_noise_multiplier
        if noise is None or not isinstance(delta, float):
            return math.nan
        count = self._count_steps(steps)
        return record_level_epsilon(
            batch_size=min(batch_size, self.data.num_train),
            num_records=self.data.num_train,
            steps=count,
            noise_multiplier=noise,
            delta=delta,
        )

    def _count_steps(self, steps: int) -> int:
        if self.context is None:
            return steps
        record = self.context.state.config_records.get("fedleak.defenses")
        total = steps + (0 if record is None else cast(int, record.get("steps", 0)))
        self.context.state["fedleak.defenses"] = ConfigRecord({"steps": total})
        return total

    def gradient_reply(
        self, arrays: ArrayRecord, state: ConfigRecord
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Defended one-batch gradient (seed 000 Alg. 1 with Ch. 7.3 defenses)."""
        model = self.model_at(arrays)
        batch = torch.from_numpy(self.next_batch(state))
        grads = self.defenses.gradient(
            model,
            self.data.x_train[batch],
            self.data.y_train[batch],
            seed=self.rng(0xDEF, self._server_round()),
        )
        metrics = MetricRecord({protocol.NUM_EXAMPLES: int(batch.shape[0])})
        if self.defenses.dp_noise_multiplier is not None:
            metrics["record-epsilon"] = self._epsilon(1, int(batch.shape[0]))
        return ArrayRecord(
            {k: Array(np.ascontiguousarray(v)) for k, v in grads.items()}
        ), metrics

    def model_reply(
        self, arrays: ArrayRecord, config: ConfigRecord, server_round: int
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Defended local training (seed 000 Alg. 2 with Ch. 7.3 defenses)."""
        theta = {name: a.numpy() for name, a in arrays.items()}
        if self.defenses.dp_noise_multiplier is None:
            out, metrics = super().model_reply(arrays, config, server_round)
            trained = {name: a.numpy() for name, a in out.items()}
        else:
            epochs = int(
                cast(int, config.get(protocol.LOCAL_EPOCHS, self.spec.local_epochs))
            )
            lr = float(
                cast(float, config.get(protocol.LEARNING_RATE, self.spec.learning_rate))
            )
            batch = min(self.spec.batch_size, self.data.num_train)
            model, _ = private_local_training(
                self.model_at(arrays),
                self.data.x_train,
                self.data.y_train,
                epochs=epochs,
                batch_size=batch,
                learning_rate=lr,
                noise_multiplier=self.defenses.dp_noise_multiplier,
                max_grad_norm=self.defenses.dp_max_grad_norm,
                delta=1e-5,
                seed=self.rng(0xDEF, server_round),
            )
            state = get_arrays(model)
            trained = {name: state[name] for name in theta}
            steps = epochs * math.ceil(self.data.num_train / batch)
            metrics = MetricRecord(
                {
                    protocol.NUM_EXAMPLES: self.data.num_train,
                    "record-epsilon": self._epsilon(steps, batch),
                }
            )
        change = {
            name: trained[name].astype(np.float64) - theta[name]
            for name in theta
            if np.issubdtype(theta[name].dtype, np.floating)
        }
        defended = self.defenses.upload(change)
        upload = {
            name: (theta[name] + defended[name]).astype(theta[name].dtype)
            if name in defended
            else trained[name]
            for name in theta
        }
        return ArrayRecord(
            {k: Array(np.ascontiguousarray(v)) for k, v in upload.items()}
        ), metrics


def defended_behaviour(
    spec: TaskSpec, partition_id: int, config: ConfigRecord
) -> HonestClient | None:
    """Return a :class:`DefendedClient` when ``defenses.*`` turn one on, else None."""
    defenses = defenses_from_config(config)
    if defenses is None:
        return None
    return DefendedClient(spec, partition_id, defenses)
