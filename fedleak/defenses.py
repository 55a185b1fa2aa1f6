"""Defenses of seed 000 Ch. 7.3 against the inference attacks, Flower-free.

Each defense is a plain function on numpy arrays or torch modules, and
:class:`ClientDefenses` (also the schema of an experiment's ``[defenses]``
section) composes them for one client's upload:

- **selective gradient sharing** (Ch. 7.3.1, Shokri and Shmatikov):
  :func:`share_top_fraction` keeps the largest-magnitude fraction of the
  update's coordinates (over all arrays together) and zeroes the rest;
  :func:`share_random_fraction` keeps a uniformly random fraction instead
  (Shokri and Shmatikov's other selection criterion; the seed names neither);
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
  :func:`record_level_epsilon` accounts with dp-accounting;
- **participant-level DP** (Ch. 7.3.4, McMahan et al.) is server-side noise
  on clipped client updates. In a federation fedleak reuses Flower's
  ``DifferentialPrivacyServerSideFixedClipping`` /
  ``DifferentialPrivacyClientSideFixedClipping`` unchanged; in process,
  :func:`clip_update` clips like Flower's ``clip_inputs_inplace`` and
  :func:`fedleak.federated.sgd_step` adds the noise.
  :func:`participant_level_epsilon` reports its epsilon.

Every function that draws randomness takes a seed or a generator. torch and
Opacus are imported when a function needs them, so the experiment-file
loader can use :class:`ClientDefenses` without loading them. In a
federation, :class:`fedleak.clients.defenses.DefendedClient` is the honest
client with these defenses; its DP-SGD noise comes from fresh OS entropy
unless the message config carries :data:`NOISE_SEED_KEY` (``[privacy]
noise_seed`` of the experiment, not private), while its batches follow the
experiment's seed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_serializer

from .errors import ConfigError
from .privacy.accounting import sgm_epsilon
from .privacy.randomness import RngLike, check_rng
from .settings import SettingsModel

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "EMBEDDING_KEY",
    "NOISE_SEED_KEY",
    "SELECTION_WORD",
    "ClientDefenses",
    "clip_update",
    "make_dp_compatible",
    "participant_level_epsilon",
    "private_batch_gradient",
    "private_local_training",
    "record_level_epsilon",
    "restrict_inputs",
    "share_random_fraction",
    "share_top_fraction",
    "zero_rows_outside_vocabulary",
]

EMBEDDING_KEY = "embedding.weight"
"""State-dict key of the embedding matrix in fedleak's text models."""


NOISE_SEED_KEY = "privacy.noise-seed"
"""Message-config entry with ``[privacy] noise_seed``, sent only when it is set."""

SELECTION_WORD = 0x5E1
"""Word mixed into a run's seed for the random share selection's own stream.

Kept apart from the batches' and the DP noise's streams, so that choosing
``share_selection = "random"`` changes no other draw of a run."""


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
    _check_share_fraction(fraction)
    names = list(update)
    if fraction == 1.0 or not names:
        return {k: np.array(v, copy=True) for k, v in update.items()}
    flat = np.concatenate(
        [np.abs(np.asarray(update[k], np.float64)).ravel() for k in names]
    )
    k = math.ceil(fraction * flat.size)
    keep = np.zeros(flat.size, dtype=bool)
    keep[np.argpartition(-flat, k - 1)[:k]] = True
    return _keep_coordinates(update, keep)


def restrict_inputs(ids: torch.Tensor, top_n: int) -> torch.Tensor:
    """Map every token outside the top-``top_n`` words to :data:`UNK_ID`.

    Padding and the unknown token are kept; ids are frequency ordered
    (:mod:`fedleak.data.text`), so the kept words are ``ids < top_n + 2``.
    """
    import torch

    from .data.text import FIRST_WORD_ID, UNK_ID

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
    from .data.text import FIRST_WORD_ID

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


def clip_update(
    update: Mapping[str, np.ndarray], clipping_norm: float
) -> dict[str, np.ndarray]:
    """Scale a client update to L2 norm at most ``clipping_norm`` (flat clipping).

    The participant-level clipping of DP-FedAvg (McMahan et al., "FlatClip";
    seed 000 Ch. 7.3.4): the norm is taken over all arrays together and
    every array is multiplied by ``min(1, clipping_norm / norm)``. The
    arithmetic is that of Flower's ``clip_inputs_inplace`` (its norm, its
    factor, applied to float64 copies), so an in-process simulation clips
    exactly as Flower's DP wrappers do in a federation; unlike Flower's,
    an all-zero update is returned unchanged rather than dividing by zero.
    Written here because Flower's function lives in its server package and
    the core of fedleak does not import Flower.

    Parameters
    ----------
    update : mapping of str to numpy.ndarray
        The update (a gradient or a model change).
    clipping_norm : float
        The bound ``C`` (> 0, finite).

    Returns
    -------
    dict of str to numpy.ndarray
        Float64 copies, same keys and shapes.

    Raises
    ------
    ConfigError
        If ``clipping_norm`` is not a positive finite number.

    Examples
    --------
    >>> import numpy as np
    >>> clipped = clip_update({"a": np.array([3.0]), "b": np.array([4.0])}, 1.0)
    >>> float(clipped["a"][0]), float(clipped["b"][0])
    (0.6, 0.8)
    """
    if not (math.isfinite(clipping_norm) and clipping_norm > 0):
        raise ConfigError(f"clipping_norm must be > 0 and finite, got {clipping_norm}")
    arrays = [np.array(value, dtype=np.float64) for value in update.values()]
    # Flower's get_norm: the root of the summed squared per-array norms.
    norm = float(np.sqrt(sum([np.linalg.norm(array.flat) ** 2 for array in arrays])))
    if norm > 0:
        factor = min(1, clipping_norm / norm)
        for array in arrays:
            array *= factor
    return dict(zip(update, arrays, strict=True))


def make_dp_compatible(model: nn.Module) -> nn.Module:
    """Replace the layers Opacus cannot handle (``nn.GRU`` -> ``DPGRU``).

    Uses Opacus' ``ModuleValidator.fix``. ``DPGRU`` exposes the same
    parameter names as ``nn.GRU`` (``weight_ih_l0`` ...), so updates keep
    their keys; its state dict also holds aliases, so load plain state dicts
    with ``strict=False``.
    """
    from .privacy._opacus import ModuleValidator

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
    ``seed`` is the noise's only source (the batch is the caller's): ``None``
    or :func:`fedleak.privacy.randomness.noise_generator`'s generator for
    noise nobody can recompute, an int only to reproduce it.

    Returns
    -------
    dict of str to numpy.ndarray
        Keyed by parameter name (``named_parameters``).
    """
    from torch import nn

    from .privacy.dpsgd import DPSGD, FixedClipping

    if max_grad_norm <= 0:
        raise ConfigError(f"max_grad_norm must be > 0, got {max_grad_norm}")
    work = make_dp_compatible(copy.deepcopy(model))
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
    noise_rng: np.random.Generator | None = None,
) -> tuple[nn.Module, float]:
    """Run local DP-SGD epochs (model averaging) with ``dp_sgd_train``.

    ``seed`` drives the Poisson sampling of the batches, and the noise too
    unless ``noise_rng`` is given: a federation's clients pass
    :func:`fedleak.privacy.randomness.noise_generator`'s, so that their
    noise is not a function of the experiment's seed.

    Returns
    -------
    model : torch.nn.Module
        The trained model (``nn.GRU`` replaced by ``DPGRU``; same parameter
        names).
    epsilon : float
        Record-level epsilon of these local epochs alone, for ``delta``.
    """
    from .privacy.dpsgd import dp_sgd_train

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
        noise_rng=noise_rng,
        delta=delta,
    )
    return work, result.epsilon


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


def _keep_coordinates(
    update: Mapping[str, np.ndarray], keep: np.ndarray
) -> dict[str, np.ndarray]:
    """Zero every coordinate of ``update`` that the flat mask ``keep`` drops.

    ``keep`` runs over the arrays' coordinates in the mapping's order, each
    array flattened; the arrays keep their shapes and dtypes.
    """
    out: dict[str, np.ndarray] = {}
    start = 0
    for name, raw in update.items():
        value = np.asarray(raw)
        mask = keep[start : start + value.size].reshape(value.shape)
        out[name] = np.where(mask, value, np.zeros_like(value))
        start += value.size
    return out


def _check_share_fraction(fraction: float) -> None:
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"share fraction must lie in (0, 1], got {fraction}")


def share_random_fraction(
    update: Mapping[str, np.ndarray], fraction: float, *, seed: RngLike
) -> dict[str, np.ndarray]:
    """Keep ``ceil(fraction * size)`` coordinates drawn uniformly, zero the rest.

    Seed 000 Ch. 7.3.1 shares "only a fraction of their gradients" as
    suggested by Shokri and Shmatikov, whose distributed selective SGD
    chooses the shared coordinates either by largest magnitude
    (:func:`share_top_fraction`) or at random; the seed does not say which.
    This is the random choice, over all arrays together, without replacement
    and without a magnitude threshold, so a coordinate survives with
    probability ``k / size`` whatever its value.

    Parameters
    ----------
    update : mapping of str to numpy.ndarray
        A gradient, or a model change ``theta_k - theta``.
    fraction : float
        In ``(0, 1]``; 1 returns copies unchanged (and draws nothing).
    seed : numpy.random.Generator or int
        The choice's randomness; ``None`` is refused (unless nothing is
        chosen), so that a run's selection follows its seed.

    Returns
    -------
    dict of str to numpy.ndarray
        Same keys, shapes and dtypes.

    Raises
    ------
    ConfigError
        If ``fraction`` is outside ``(0, 1]``, or ``seed`` is ``None`` for a
        fraction below 1.
    """
    _check_share_fraction(fraction)
    names = list(update)
    if fraction == 1.0 or not names:
        return {k: np.array(v, copy=True) for k, v in update.items()}
    if seed is None:
        raise ConfigError("a random share selection needs a seed or a generator")
    total = sum(np.asarray(update[name]).size for name in names)
    k = math.ceil(fraction * total)
    keep = np.zeros(total, dtype=bool)
    keep[check_rng(seed).choice(total, size=k, replace=False)] = True
    return _keep_coordinates(update, keep)


class ClientDefenses(SettingsModel):
    """The client-side defenses one client applies: ``[defenses]`` of an experiment.

    Composable; the defaults apply none. The same object is the experiment
    file's ``[defenses]`` section, the ``defenses.*`` entries of the message
    config (:meth:`to_config` / :meth:`from_config`) and the applier
    (:meth:`gradient`, :meth:`upload`).

    Attributes
    ----------
    share_fraction : float
        Fraction of coordinates uploaded, in ``(0, 1]`` (1 = everything).
    share_selection : {"largest", "random"}
        Which coordinates a fraction below 1 keeps: the largest by magnitude
        (:func:`share_top_fraction`, the default) or a uniformly random set
        (:func:`share_random_fraction`, drawn from the ``selection_seed`` of
        :meth:`gradient` / :meth:`upload`).
    vocab_top_n : int or None
        Restrict inputs and the embedding upload to the top-``N`` words
        (>= 1; ``None`` = no restriction, written ``0`` in files and message
        configs).
    dp_noise_multiplier : float or None
        Record-level DP-SGD noise multiplier (>= 0; ``None`` = no DP-SGD,
        written ``-1`` in files and message configs, where any negative
        value means off).
    dp_max_grad_norm : float
        Record-level clipping norm ``C`` (> 0).
    dp_delta : float
        The delta of the record-level epsilon a client reports, in (0, 1).

    Participant-level DP is not a client defense: it is ``[privacy]`` of an
    experiment file (Flower's wrappers).
    """

    prefix: ClassVar[str] = "defenses"

    share_fraction: float = Field(1.0, gt=0, le=1)
    share_selection: Literal["largest", "random"] = "largest"
    vocab_top_n: int | None = Field(None, ge=1)
    dp_noise_multiplier: float | None = Field(None, ge=0)
    dp_max_grad_norm: float = Field(1.0, gt=0)
    dp_delta: float = Field(1e-5, gt=0, lt=1)

    @classmethod
    def decode(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """Read the "off" sentinels of files and message configs as ``None``.

        ``vocab_top_n = 0`` and a negative ``dp_noise_multiplier`` mean off.
        """
        out = dict(values)
        top_n = out.get("vocab_top_n")
        if type(top_n) is int and top_n == 0:
            out["vocab_top_n"] = None
        noise = out.get("dp_noise_multiplier")
        if (
            isinstance(noise, int | float)
            and not isinstance(noise, bool)
            and math.isfinite(noise)
            and noise < 0
        ):
            out["dp_noise_multiplier"] = None
        return out

    @field_serializer("vocab_top_n")
    def _top_n_off_is_zero(self, value: int | None) -> int:
        return 0 if value is None else value

    @field_serializer("dp_noise_multiplier")
    def _noise_off_is_negative(self, value: float | None) -> float:
        return -1.0 if value is None else value

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
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        seed: RngLike,
        selection_seed: RngLike = None,
    ) -> dict[str, np.ndarray]:
        """Compute the defended one-batch gradient (synchronized SGD).

        ``seed`` is the DP-SGD noise's (see :func:`private_batch_gradient`);
        ``selection_seed`` the random share selection's (see :meth:`upload`).
        """
        from torch import nn

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
        return self.upload(grads, selection_seed=selection_seed)

    def upload(
        self, update: Mapping[str, np.ndarray], *, selection_seed: RngLike = None
    ) -> dict[str, np.ndarray]:
        """Apply the upload side (vocabulary rows, then the shared fraction).

        ``selection_seed`` draws the coordinates of a ``"random"``
        ``share_selection`` (required then, ignored otherwise).
        """
        out = dict(update)
        if self.vocab_top_n is not None:
            out = zero_rows_outside_vocabulary(out, self.vocab_top_n)
        if self.share_fraction < 1.0:
            if self.share_selection == "random":
                out = share_random_fraction(
                    out, self.share_fraction, seed=selection_seed
                )
            else:
                out = share_top_fraction(out, self.share_fraction)
        return out
