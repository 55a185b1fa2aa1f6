"""DP-SGD for any ``torch.nn.Module``: fixed or adaptive (DPNorm) clipping.

Seed 000 Alg. 5 (seed 001 Alg. 4), after Abadi et al. (CCS 2016). One step:

1. take a Poisson sample ``B`` of the data (rate ``q = L / |X|``);
2. compute the per-sample gradient norms ``||g(x)||`` (Opacus' ghost
   clipping, or its ``GradSampleModule`` hooks, which cover ``Linear``,
   ``Conv``, ``Embedding``, norms, RNNs, ...);
3. pick the clipping bound ``C_b``: fixed, or privately per batch with
   DPNorm (Alg. 6) on the per-sample gradient norms;
4. clip every ``g(x)`` to norm ``C_b``, sum, add ``N(0, (s sigma_G C_b)**2 I)``
   and divide by ``L``; ``s = sqrt(2)`` under the seed's replace-one
   neighbouring (a changed record touches two clusters' models, sensitivity
   ``sqrt(2) C_b``), ``s = 1`` under add/remove-one (standard DP-SGD);
5. take an optimiser step (SGD or Adam) with that gradient.

Either way the accountant sees a sampled Gaussian of noise multiplier
``sigma_G``; with DPNorm the two mechanisms share the batch and are accounted
by Theorem 4 (:func:`fedleak.privacy.accounting.shared_batch_log_moment`).

Opacus' ``DPOptimizer`` fixes its clipping bound and draws noise from
torch's (non-cryptographic) generator, so clipping and noise are done here and
only the per-sample gradients (or their norms) come from Opacus.

Speed tip. Per-sample gradients allocate large blocks every step; with glibc's
default allocator these are ``mmap``'d and unmapped each time, which can make
DP-SGD 2-3x slower. Start Python with::

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 python train.py

to keep that memory in the heap (measured 2.1-2.9x faster per-sample
gradients on a 1.2M-parameter CNN).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError, DataError
from ..validation import check_int, check_option, check_positive
from ._opacus import (
    GradSampleModule,
    GradSampleModuleFastGradientClipping,
    ModuleValidator,
)
from .accounting import (
    MomentsAccountant,
    SampledGaussianEvent,
    SharedBatchEvent,
    sgm_epsilon,
)
from .dpnorm import dp_norm
from .randomness import RngLike, check_rng, noise_normal

__all__ = [
    "AdaptiveClipping",
    "DPSGD",
    "DPTrainResult",
    "FixedClipping",
    "StepReport",
    "dp_sgd_train",
    "poisson_batch",
    "torch_generator",
]

_UNUSED_LAYER = (
    "a trainable parameter got no per-sample gradient; every trainable layer "
    "must be used by the loss."
)

Neighbouring = Literal["add_remove", "replace_one"]
OptimizerName = Literal["sgd", "adam"]
PerSampleMode = Literal["ghost", "hooks"]


@contextlib.contextmanager
def _quiet_backward_hooks() -> Iterator[None]:
    """Silence torch's note that Opacus' hooks fire on module outputs only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook")
        yield


@dataclass(frozen=True, slots=True)
class FixedClipping:
    """Clip every per-sample gradient to ``max_grad_norm`` (Abadi et al.)."""

    max_grad_norm: float

    def __post_init__(self) -> None:
        check_positive("max_grad_norm", self.max_grad_norm)


@dataclass(frozen=True, slots=True)
class AdaptiveClipping:
    """Choose the bound per batch with DPNorm (Alg. 5 line 4, Alg. 6).

    Parameters
    ----------
    sigma_c : float
        DPNorm noise multiplier ``sigma_C`` (seed: 4.0).
    c_max : float
        Largest candidate bound ``C_max`` (seed: 10).
    bins : int
        Number of candidate bounds ``w`` (seed: 100).
    """

    sigma_c: float
    c_max: float = 10.0
    bins: int = 100

    def __post_init__(self) -> None:
        check_positive("sigma_c", self.sigma_c)
        check_positive("c_max", self.c_max)
        check_int("bins", self.bins, low=1)


Clipping = FixedClipping | AdaptiveClipping


@dataclass(frozen=True, slots=True)
class StepReport:
    """What one DP-SGD step did (all of it is safe to publish but the loss)."""

    batch_size: int
    clip_norm: float
    mean_loss: float


def torch_generator(rng: np.random.Generator) -> torch.Generator:
    """Return a CPU ``torch.Generator`` seeded from ``rng`` (for model noise)."""
    generator = torch.Generator()
    generator.manual_seed(int(rng.integers(0, 2**63 - 1)))
    return generator


def poisson_batch(n: int, q: float, rng: np.random.Generator) -> np.ndarray:
    """Draw a Poisson sample: each of ``n`` record indices kept with prob. ``q``."""
    return np.flatnonzero(rng.random(n) < q)


class DPSGD:
    """A private optimiser wrapped around one module (Alg. 5, one step a call).

    Parameters
    ----------
    module : torch.nn.Module
        The model; its trainable layers must be supported by Opacus'
        per-sample gradients (``ModuleValidator`` is run; BatchNorm is not).
    noise_multiplier : float
        ``sigma_G``, >= 0 (0 disables noise: no privacy).
    clipping : FixedClipping or AdaptiveClipping
        How ``C_b`` is chosen.
    expected_batch_size : int
        ``L``; the noisy sum is divided by it.
    lr : float
        Learning rate ``eta``.
    optimizer : {"sgd", "adam"}
        Update rule applied to the private gradient (the seed's VAE: Adam).
    neighbouring : {"add_remove", "replace_one"}
        ``replace_one`` scales the noise by ``sqrt(2)`` (seed Alg. 5).
    rng : numpy.random.Generator, int or None
        Seed of the noise and DPNorm draws.
    secure_mode : bool
        Draw noise from the OS CSPRNG; refuses a seed.
    per_sample : {"ghost", "hooks"}
        ``"ghost"`` (default): Opacus' ghost clipping computes the per-sample
        gradient norms without materialising the gradients, then a second
        backward pass of the re-weighted loss gives the clipped sum (2-3x a
        plain step). ``"hooks"`` materialises every per-sample gradient
        (needed for layers ghost clipping does not cover, e.g. tied weights).
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        noise_multiplier: float,
        clipping: Clipping,
        expected_batch_size: int,
        lr: float,
        optimizer: OptimizerName = "sgd",
        neighbouring: Neighbouring = "add_remove",
        rng: RngLike = None,
        secure_mode: bool = False,
        per_sample: PerSampleMode = "ghost",
    ) -> None:
        check_positive("noise_multiplier", noise_multiplier, allow_zero=True)
        check_int("expected_batch_size", expected_batch_size, low=1)
        check_positive("lr", lr)
        check_option("neighbouring", neighbouring, ("add_remove", "replace_one"))
        if secure_mode and rng is not None:
            raise ConfigError("Passing seed is prohibited in secure mode.")
        problems = ModuleValidator.validate(module, strict=False)
        if problems:
            raise ConfigError(
                "the module has layers DP-SGD cannot handle: "
                + "; ".join(str(p) for p in problems)
                + ". Replace them (opacus.validators.ModuleValidator.fix) first."
            )
        self.module = module
        self.noise_multiplier = float(noise_multiplier)
        self.clipping = clipping
        self.expected_batch_size = int(expected_batch_size)
        self.noise_scale = (
            math.sqrt(2.0) if neighbouring == "replace_one" else 1.0
        ) * self.noise_multiplier
        self.secure_mode = secure_mode
        self._rng = None if secure_mode else check_rng(rng)
        self._params = [p for p in module.parameters() if p.requires_grad]
        if not self._params:
            raise ConfigError("the module has no trainable parameters.")
        check_option("per_sample", per_sample, ("ghost", "hooks"))
        self.per_sample = per_sample
        self._grad_sample: GradSampleModule | GradSampleModuleFastGradientClipping = (
            GradSampleModuleFastGradientClipping(
                module, batch_first=True, loss_reduction="sum", strict=True
            )
            if per_sample == "ghost"
            else GradSampleModule(
                module, batch_first=True, loss_reduction="sum", strict=True
            )
        )
        self.optimizer: torch.optim.Optimizer = (
            torch.optim.Adam(self._params, lr=lr)
            if optimizer == "adam"
            else torch.optim.SGD(self._params, lr=lr)
        )
        self.steps_taken = 0

    def _noise(self, std: float, shape: torch.Size) -> torch.Tensor:
        draw = noise_normal(std, tuple(shape), self._rng, secure_mode=self.secure_mode)
        return torch.from_numpy(draw).to(torch.float32)

    def _per_sample_gradients(self) -> list[torch.Tensor]:
        grads: list[torch.Tensor] = []
        for p in self._params:
            sample = getattr(p, "grad_sample", None)
            if sample is None:
                raise ConfigError(_UNUSED_LAYER)
            grads.append(sample.detach())
        return grads

    def step(self, per_sample_loss: Callable[[], torch.Tensor] | None) -> StepReport:
        """Take one private step.

        Parameters
        ----------
        per_sample_loss : callable or None
            Computes the loss of every record of the batch (a 1-d tensor, one
            entry per record) through ``module``; ``None`` for an empty batch
            (the step is then noise only, as Poisson sampling requires).

        Returns
        -------
        StepReport
        """
        self.optimizer.zero_grad(set_to_none=True)
        batch, mean_loss = 0, float("nan")
        summed = [torch.zeros_like(p) for p in self._params]
        norms = torch.zeros(0)
        losses: torch.Tensor | None = None
        if per_sample_loss is not None:
            losses = per_sample_loss()
            if losses.ndim != 1:
                raise ConfigError(
                    "per_sample_loss must return one loss per record (a 1-d tensor)."
                )
            batch, mean_loss = int(losses.shape[0]), float(losses.detach().mean())
            with _quiet_backward_hooks():
                losses.sum().backward(  # type: ignore[no-untyped-call]
                    retain_graph=self.per_sample == "ghost"
                )
            norms = self._per_sample_norms(batch)
        clip = self._clip_bound(norms)
        if losses is not None:
            factor = (clip / (norms + 1e-6)).clamp(max=1.0)
            summed = self._clipped_sum(losses, factor)
        for p, total in zip(self._params, summed, strict=True):
            if self.noise_scale > 0:
                total = total + self._noise(self.noise_scale * clip, total.shape)
            p.grad = (total / self.expected_batch_size).to(p.dtype)
        self.optimizer.step()
        self.steps_taken += 1
        return StepReport(batch_size=batch, clip_norm=clip, mean_loss=mean_loss)

    def _per_sample_norms(self, batch: int) -> torch.Tensor:
        norms: torch.Tensor
        if isinstance(self._grad_sample, GradSampleModuleFastGradientClipping):
            try:
                norms = self._grad_sample.get_norm_sample().detach()
            except AttributeError as missing:  # Opacus: a parameter got no norm
                raise ConfigError(_UNUSED_LAYER) from missing
        else:
            grads = self._per_sample_gradients()
            norms = torch.cat([g.reshape(batch, -1) for g in grads], dim=1).norm(dim=1)
        return norms

    def _clip_bound(self, norms: torch.Tensor) -> float:
        if isinstance(self.clipping, FixedClipping):
            return self.clipping.max_grad_norm
        return dp_norm(
            norms.numpy(),
            self.clipping.sigma_c,
            c_max=self.clipping.c_max,
            bins=self.clipping.bins,
            rng=self._rng,
            secure_mode=self.secure_mode,
        )

    def _clipped_sum(
        self, losses: torch.Tensor, factor: torch.Tensor
    ) -> list[torch.Tensor]:
        """Return ``sum_i factor_i * g(x_i)`` for every parameter.

        With ghost clipping this is a second backward pass of the
        re-weighted loss (hooks off); with hooks, a weighted sum of the
        materialised per-sample gradients.
        """
        if isinstance(self._grad_sample, GradSampleModuleFastGradientClipping):
            self.optimizer.zero_grad(set_to_none=True)
            self._grad_sample.disable_hooks()
            try:
                with _quiet_backward_hooks():
                    weighted = (factor.detach() * losses).sum()
                    weighted.backward()  # type: ignore[no-untyped-call]
            finally:
                self._grad_sample.enable_hooks()
            return [
                torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                for p in self._params
            ]
        grads = self._per_sample_gradients()
        self._clear_grad_samples()
        return [torch.einsum("i,i...->...", factor, g) for g in grads]

    def close(self) -> nn.Module:
        """Remove Opacus' hooks and return the plain module."""
        self._grad_sample.remove_hooks()
        self._clear_grad_samples()
        return self.module

    def _clear_grad_samples(self) -> None:
        for p in self._params:
            setattr(p, "grad_sample", None)  # noqa: B010 (Opacus' dynamic attribute)


def step_event(
    q: float, noise_multiplier: float, clipping: Clipping
) -> SampledGaussianEvent | SharedBatchEvent:
    """Return the accounting event of one DP-SGD step (Theorem 4 with DPNorm)."""
    if isinstance(clipping, AdaptiveClipping):
        return SharedBatchEvent(q, (clipping.sigma_c, noise_multiplier))
    return SampledGaussianEvent(q, noise_multiplier)


@dataclass(frozen=True)
class DPTrainResult:
    """What :func:`dp_sgd_train` did and the privacy it spent.

    Attributes
    ----------
    epsilon : float
        Privacy spent for ``delta`` (``inf`` without noise).
    delta : float
    steps : int
        DP-SGD steps taken.
    sample_rate : float
        Poisson rate ``q = batch_size / n``.
    noise_multiplier : float
    losses : list of float
        Mean training loss of every epoch.
    clip_norms : list of float
        Clipping bound of every step (varies with adaptive clipping).
    """

    epsilon: float
    delta: float
    steps: int
    sample_rate: float
    noise_multiplier: float
    losses: list[float] = field(default_factory=list)
    clip_norms: list[float] = field(default_factory=list)


def dp_sgd_train(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    noise_multiplier: float,
    max_grad_norm: float,
    seed: RngLike,
    noise_rng: np.random.Generator | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    delta: float | None = None,
    clipping: Clipping | None = None,
    optimizer: OptimizerName = "sgd",
    secure_mode: bool = False,
    per_sample: PerSampleMode = "ghost",
    progress: Callable[[int, int], None] | None = None,
) -> DPTrainResult:
    """Train a classifier in place with DP-SGD on tensors (Poisson batches).

    Parameters
    ----------
    model : torch.nn.Module
        Maps ``x[i:j]`` to logits (or whatever ``loss_fn`` expects).
    x, y : torch.Tensor
        Inputs and targets, same first dimension ``n``.
    epochs : int
        Epochs; one epoch is ``ceil(n / batch_size)`` steps.
    batch_size : int
        Expected batch size ``L``; ``q = L / n``.
    lr : float
        Learning rate.
    noise_multiplier : float
        ``sigma``; 0 trains without noise (``epsilon = inf``).
    max_grad_norm : float
        Clipping bound ``C`` (ignored if ``clipping`` is adaptive).
    seed : numpy.random.Generator, int or None
        Seed of the Poisson sampling, and of the noise unless ``noise_rng``
        is given; must be ``None`` in secure mode.
    noise_rng : numpy.random.Generator, optional
        Where the noise (and DPNorm's draws) come from instead, so that
        sampling can follow the experiment's seed while the noise does not
        (:func:`fedleak.privacy.randomness.noise_generator`); not with
        ``secure_mode``.
    loss_fn : callable, optional
        ``loss_fn(output, target)`` returning per-record losses; default
        cross-entropy with ``reduction="none"``.
    delta : float, optional
        Target delta; default ``1 / n`` (the seed's convention).
    clipping : FixedClipping or AdaptiveClipping, optional
        Overrides ``max_grad_norm`` (e.g. DPNorm).
    optimizer : {"sgd", "adam"}
    secure_mode : bool
        OS-CSPRNG noise (batch sampling still uses a fresh unseeded generator).
    per_sample : {"ghost", "hooks"}
        How per-sample gradients are handled (see :class:`DPSGD`).
    progress : callable, optional
        Called as ``progress(step, total_steps)`` after every step.

    Returns
    -------
    DPTrainResult

    Raises
    ------
    DataError
        If ``x`` and ``y`` disagree in length or are empty.
    ConfigError
        If a parameter is out of range, or a seed is given in secure mode.
    """
    n = _check_training(x, y, epochs, batch_size, (seed, noise_rng), secure_mode)
    delta = 1.0 / n if delta is None else float(delta)
    per_record = loss_fn or nn.CrossEntropyLoss(reduction="none")
    clipping = clipping or FixedClipping(max_grad_norm)
    rng, noise_source = _generators(seed, noise_rng, secure_mode)
    trainer = DPSGD(
        model,
        noise_multiplier=noise_multiplier,
        clipping=clipping,
        expected_batch_size=batch_size,
        lr=lr,
        optimizer=optimizer,
        rng=noise_source,
        secure_mode=secure_mode,
        per_sample=per_sample,
    )
    lots = _Lots(n, batch_size, epochs)
    losses, clips = _run_epochs(trainer, model, (x, y), per_record, lots, rng, progress)
    return DPTrainResult(
        epsilon=_spent_epsilon(lots.q, noise_multiplier, clipping, lots.total, delta),
        delta=delta,
        steps=lots.total,
        sample_rate=lots.q,
        noise_multiplier=float(noise_multiplier),
        losses=losses,
        clip_norms=clips,
    )


def _generators(
    seed: RngLike, noise_rng: np.random.Generator | None, secure_mode: bool
) -> tuple[np.random.Generator, np.random.Generator | None]:
    """Return the Poisson sampling's generator and the noise's.

    The sampling follows ``seed``; the noise follows ``noise_rng`` when
    given, else the sampling's generator. In secure mode the sampling uses a
    fresh unseeded generator and the noise's is None (the OS CSPRNG).
    """
    rng = check_rng(None if secure_mode else seed)
    return rng, None if secure_mode else (rng if noise_rng is None else noise_rng)


def _check_training(
    x: torch.Tensor,
    y: torch.Tensor,
    epochs: int,
    batch_size: int,
    seeds: tuple[RngLike, np.random.Generator | None],
    secure_mode: bool,
) -> int:
    """Refuse :func:`dp_sgd_train`'s bad arguments; return the record count.

    ``seeds`` is ``(seed, noise_rng)``: secure mode refuses either.
    """
    seed, noise_rng = seeds
    n = int(x.shape[0])
    if n == 0 or int(y.shape[0]) != n:
        raise DataError(
            f"x and y must be non-empty with the same length; got {n} and {y.shape[0]}."
        )
    check_int("epochs", epochs, low=1)
    check_int("batch_size", batch_size, low=1, high=n)
    if secure_mode and seed is not None:
        raise ConfigError(
            "Passing seed is prohibited in secure mode: pass seed=None with "
            "secure_mode=True."
        )
    if secure_mode and noise_rng is not None:
        raise ConfigError(
            "Passing noise_rng is prohibited in secure mode: the noise comes "
            "from the OS CSPRNG."
        )
    return n


def _spent_epsilon(
    q: float,
    noise_multiplier: float,
    clipping: Clipping,
    steps: int,
    delta: float,
) -> float:
    """Return the epsilon of ``steps`` DP-SGD steps at ``delta``.

    No noise spends an infinite budget; a fixed clipping bound composes the
    sampled Gaussian mechanism (:func:`sgm_epsilon`); an adaptive bound
    composes each step's event with the moments accountant.
    """
    if noise_multiplier == 0:
        return math.inf
    if isinstance(clipping, FixedClipping):
        return sgm_epsilon(q, noise_multiplier, steps, delta)
    event = step_event(q, noise_multiplier, clipping)
    return MomentsAccountant().compose(event, steps).get_epsilon(delta)


@dataclass(frozen=True)
class _Lots:
    """The Poisson schedule of :func:`dp_sgd_train` (Abadi et al.'s lots).

    Every step samples each of ``n`` records with probability
    ``q = batch_size / n``; an epoch is ``ceil(n / batch_size)`` steps.
    """

    n: int
    batch_size: int
    epochs: int

    @property
    def q(self) -> float:
        """The sampling rate."""
        return self.batch_size / self.n

    @property
    def steps_per_epoch(self) -> int:
        """Steps in one epoch."""
        return math.ceil(self.n / self.batch_size)

    @property
    def total(self) -> int:
        """Steps in all epochs."""
        return self.epochs * self.steps_per_epoch


def _run_epochs(
    trainer: DPSGD,
    model: nn.Module,
    data: tuple[torch.Tensor, torch.Tensor],
    per_record: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    lots: _Lots,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None,
) -> tuple[list[float], list[float]]:
    """Run :func:`dp_sgd_train`'s Poisson-sampled steps; close the trainer.

    Every step of ``lots`` samples each record of ``data`` with probability
    ``lots.q``. Returns the mean loss of every epoch (NaN for an epoch whose
    batches were all empty) and the clipping bound of every step.
    """
    x, y = data
    n, q = lots.n, lots.q
    epochs, steps_per_epoch, total = lots.epochs, lots.steps_per_epoch, lots.total
    losses: list[float] = []
    clips: list[float] = []
    model.train()
    try:
        for epoch in range(epochs):
            epoch_losses = []
            for step in range(steps_per_epoch):
                index = torch.from_numpy(poisson_batch(n, q, rng))

                def batch_loss(index: torch.Tensor = index) -> torch.Tensor:
                    out = per_record(model(x[index]), y[index])
                    return out.reshape(-1)

                report = trainer.step(batch_loss if index.numel() else None)
                clips.append(report.clip_norm)
                if report.batch_size:
                    epoch_losses.append(report.mean_loss)
                if progress is not None:
                    progress(epoch * steps_per_epoch + step + 1, total)
            losses.append(float(np.mean(epoch_losses)) if epoch_losses else math.nan)
    finally:
        trainer.close()
    return losses, clips
