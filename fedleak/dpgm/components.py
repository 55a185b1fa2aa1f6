"""The generative models of the mixture: a VAE and a Bernoulli RBM (000 Ch. 5).

Each component exposes the two things DP-SGD and sampling need:
``per_sample_loss(x, generator)`` (one loss per record, so that per-sample
gradients can be clipped) and ``sample(n, generator, binary)``.

* :class:`VAEComponent` wraps fedleak's fully connected
  :class:`fedleak.generative.VAE` with the seed's sizes (Sec. 5.3.1): 200
  ReLU hidden units in one encoder and one decoder layer (or two, Sec. 5.3.4),
  a 2-d latent space and a Bernoulli decoder; the loss is the negative ELBO.
* :class:`BernoulliRBM` is a binary restricted Boltzmann machine (Hinton
  2002) with 200 hidden units, weights from ``N(0, 0.01^2)`` and zero biases
  (Sec. 5.3.1), trained by contrastive divergence (CD-k). The CD gradient of a
  record ``v`` is the gradient of ``F(v) - F(v_k)``, the free energy of the
  record minus that of the end of a ``k``-step Gibbs chain started at it
  (held fixed), so the per-sample CD gradient is an ordinary per-sample
  gradient and DP-SGD clips it like any other. scikit-learn's
  ``BernoulliRBM`` trains with full-batch persistent CD and exposes no
  per-sample gradients, hence this small torch module.

The components are torch modules trained by :class:`~fedleak.dpgm.DPGM`'s
DP-SGD loop, not scikit-learn estimators: they have no ``fit``, and their
``sample`` draws from whatever weights the module holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, Protocol

import torch
from torch import nn
from torch.nn import functional as F

from ..generative import VAE
from ..validation import check_int, check_option, check_probability

__all__ = [
    "BernoulliRBM",
    "ComponentKind",
    "GenerativeComponent",
    "VAEComponent",
    "make_component",
]

ComponentKind = Literal["vae", "vae2", "rbm"]


class GenerativeComponent(Protocol):
    """What the mixture needs from a component model."""

    module: nn.Module

    def per_sample_loss(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        """Return one training loss per record of ``x`` (shape ``(n,)``)."""
        ...

    def sample(
        self, n: int, generator: torch.Generator, *, binary: bool
    ) -> torch.Tensor:
        """Return ``n`` synthetic records (probabilities or 0/1 draws)."""
        ...


class VAEComponent:
    """The seed's VAE: ``input -> hidden -> (mu, log var) in R^latent -> input``.

    Parameters
    ----------
    input_dim : int
        Number of (binary or [0, 1]) features ``m``.
    hidden : Sequence of int
        Hidden widths: ``(200,)`` (one layer) or ``(200, 200)`` (two layers).
    latent_dim : int
        Latent dimension (seed: 2).
    seed : int
        Seed of the weight initialisation.
    """

    def __init__(
        self,
        input_dim: int,
        hidden: Sequence[int] = (200,),
        latent_dim: int = 2,
        seed: int = 0,
    ) -> None:
        self.vae = VAE(
            input_dim, hidden=tuple(hidden), latent_dim=latent_dim, seed=seed
        )
        self.module: nn.Module = self.vae

    def per_sample_loss(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        """Return the negative ELBO of every record (one draw of ``z``)."""
        return self.vae.loss(x, reduction="none", generator=generator)

    @torch.no_grad()
    def sample(
        self, n: int, generator: torch.Generator, *, binary: bool
    ) -> torch.Tensor:
        """Decode ``z ~ N(0, I)``; draw 0/1 records when ``binary``."""
        probabilities = self.vae.sample(n, generator=generator)
        return (
            torch.bernoulli(probabilities, generator=generator)
            if binary
            else probabilities
        )


class BernoulliRBM(nn.Module):
    """Binary RBM trained by CD-k, with per-sample losses for DP-SGD.

    Energy ``E(v, h) = -b.v - c.h - h.W v``; free energy
    ``F(v) = -b.v - sum_j softplus(c_j + W_j v)``.

    Parameters
    ----------
    n_visible : int
        Number of binary features.
    n_hidden : int
        Hidden units (seed: 200).
    cd_steps : int
        Gibbs steps ``k`` of contrastive divergence.
    sample_steps : int
        Gibbs steps when generating from a random start.
    seed : int
        Seed of the weight initialisation (``N(0, 0.01^2)``).
    """

    def __init__(
        self,
        n_visible: int,
        n_hidden: int = 200,
        *,
        cd_steps: int = 1,
        sample_steps: int = 500,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_int("n_visible", n_visible, low=1)
        check_int("n_hidden", n_hidden, low=1)
        check_int("cd_steps", cd_steps, low=1)
        check_int("sample_steps", sample_steps, low=1)
        self.hidden = nn.Linear(n_visible, n_hidden)
        self.visible_bias = nn.Linear(n_visible, 1, bias=False)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            self.hidden.weight.copy_(
                0.01 * torch.randn(self.hidden.weight.shape, generator=generator)
            )
            self.hidden.bias.zero_()
            self.visible_bias.weight.zero_()
        self.cd_steps = cd_steps
        self.sample_steps = sample_steps

    def free_energy(self, v: torch.Tensor) -> torch.Tensor:
        """Return ``F(v)`` over the last dimension of ``v``."""
        linear: torch.Tensor = self.visible_bias(v).squeeze(-1)
        hidden: torch.Tensor = F.softplus(self.hidden(v)).sum(dim=-1)
        return -linear - hidden

    @torch.no_grad()
    def gibbs(
        self, v: torch.Tensor, steps: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Run ``steps`` of block Gibbs sampling ``v -> h -> v``.

        Returns the visible probabilities of the last half-step (the last
        binary state is drawn from them).
        """
        weight, c = self.hidden.weight, self.hidden.bias
        b = self.visible_bias.weight.squeeze(0)
        probabilities = v
        for _ in range(steps):
            h = torch.bernoulli(torch.sigmoid(v @ weight.T + c), generator=generator)
            probabilities = torch.sigmoid(h @ weight + b)
            v = torch.bernoulli(probabilities, generator=generator)
        return probabilities

    def per_sample_loss(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        """Return ``F(x) - F(x_k)``, whose gradient is the CD-k update of ``x``.

        ``x_k`` is drawn without gradient; stacking ``(x, x_k)`` keeps one
        forward pass per layer, so Opacus sees a single use of each weight.
        """
        chain = torch.bernoulli(
            self.gibbs(x, self.cd_steps, generator), generator=generator
        )
        energies = self.free_energy(torch.stack([x, chain], dim=1))
        return energies[:, 0] - energies[:, 1]

    @torch.no_grad()
    def sample(
        self, n: int, generator: torch.Generator, *, binary: bool
    ) -> torch.Tensor:
        """Run a Gibbs chain from uniform random states; return its last state."""
        start = torch.bernoulli(
            torch.full((n, self.hidden.in_features), 0.5), generator=generator
        )
        probabilities = self.gibbs(start, self.sample_steps, generator)
        return (
            torch.bernoulli(probabilities, generator=generator)
            if binary
            else probabilities
        )


class _RBMComponent:
    """Adapter giving :class:`BernoulliRBM` the component interface."""

    def __init__(self, rbm: BernoulliRBM) -> None:
        self.module: nn.Module = rbm
        self._rbm = rbm

    def per_sample_loss(
        self, x: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        return self._rbm.per_sample_loss(x, generator)

    def sample(
        self, n: int, generator: torch.Generator, *, binary: bool
    ) -> torch.Tensor:
        return self._rbm.sample(n, generator, binary=binary)


def make_component(
    kind: ComponentKind,
    input_dim: int,
    *,
    hidden: int = 200,
    latent_dim: int = 2,
    density_prior: float | None = None,
    seed: int = 0,
) -> GenerativeComponent:
    """Build one component: ``"vae"`` (one layer), ``"vae2"`` (two) or ``"rbm"``.

    Parameters
    ----------
    kind : {"vae", "vae2", "rbm"}
        Model family.
    input_dim : int
        Number of features.
    hidden : int
        Hidden units per layer (seed: 200).
    latent_dim : int
        VAE latent dimension (seed: 2).
    density_prior : float, optional
        A *public* prior share of ones per feature (e.g. a published average
        ``||x||_1 / m``); the VAE's output bias or the RBM's visible bias
        starts at its log-odds instead of 0. It does not look at the data, so
        it costs no privacy, and it spares DP-SGD the long noisy walk from
        "every item half on" to sparse records.
    seed : int
        Seed of the initial weights.

    Returns
    -------
    GenerativeComponent
    """
    check_option("kind", kind, ("vae", "vae2", "rbm"))
    if density_prior is not None:
        check_probability("density_prior", density_prior, closed="neither")
    logit = (
        None
        if density_prior is None
        else math.log(density_prior / (1.0 - density_prior))
    )
    if kind in ("vae", "vae2"):
        widths = (hidden,) if kind == "vae" else (hidden, hidden)
        vae = VAEComponent(input_dim, widths, latent_dim, seed)
        if logit is not None:
            with torch.no_grad():
                vae.vae.to_output.bias.fill_(logit)
        return vae
    rbm = BernoulliRBM(input_dim, hidden, seed=seed)
    if logit is not None:
        with torch.no_grad():
            rbm.visible_bias.weight.fill_(logit)
    return _RBMComponent(rbm)
