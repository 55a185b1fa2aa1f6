"""Small generative models: a configurable VAE and a (conditional) DCGAN.

These are the target and attacker models of the membership-inference
experiments (seed 000 Ch. 6.2.1, seed 004 Ch. 4.4.1) and the building blocks
of the DP generative models (seed 000 Ch. 5) and the synthetic-data framework
(seed 003). They are plain :class:`torch.nn.Module` objects, sized for CPU
training on 8x8 digits and 28x28 (Fashion-)MNIST, and every training helper
takes a ``seed`` and a ``device``. They are not scikit-learn estimators: their
``sample``/``predict_proba`` use whatever weights the module holds, and
training is the functions :func:`train_vae`, :func:`train_gan` and
:class:`GANTrainer`.

:class:`VAE`
    Fully connected variational auto-encoder (Kingma & Welling) with any
    number of hidden layers, a Gaussian posterior ``q(z|x)``, a standard
    normal prior, and a Bernoulli or Gaussian decoder; conditional on a class
    label when ``num_classes > 0``. :meth:`VAE.loss` returns the negative
    ELBO per example (``reduction="none"``), which is what per-example
    clipping in DP-SGD and the reconstruction attack need.
:class:`DCGANGenerator`, :class:`DCGANDiscriminator`
    The DCGAN of Radford et al. shrunk to two (de)convolution blocks, for
    images whose height and width are divisible by 4; conditional on a class
    label when ``num_classes > 0``.
:class:`GANTrainer`
    Step-wise GAN training with the stabilisation tricks of seed 000 Ch. 6.2.1
    (soft and noisy labels, occasional label flips) and optional extra real
    or fake data for the discriminator introduced after a delay (the
    auxiliary-knowledge attacks of seed 000 Ch. 6.1.4 / 6.2.5).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .errors import ConfigError, DataError
from .validation import check_int, check_option, check_positive, check_probability

__all__ = [
    "DCGANDiscriminator",
    "DCGANGenerator",
    "GANTrainer",
    "LabelNoise",
    "VAE",
    "as_tensor",
    "one_hot",
    "train_gan",
    "train_vae",
]

OutputKind = Literal["bernoulli", "gaussian"]
Reduction = Literal["mean", "sum", "none"]
ArrayLike = np.ndarray | torch.Tensor


def as_tensor(
    data: ArrayLike, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> torch.Tensor:
    """Return ``data`` as a tensor of ``dtype`` on ``device`` (no copy if possible)."""
    if isinstance(data, torch.Tensor):
        return data.to(device=device, dtype=dtype)
    return torch.as_tensor(np.asarray(data), dtype=dtype, device=device)


def one_hot(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Return float one-hot codes of integer ``labels`` (checked to be in range)."""
    labels = labels.long()
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise DataError(
            f"labels must lie in [0, {num_classes}), got range "
            f"[{int(labels.min())}, {int(labels.max())}]"
        )
    return F.one_hot(labels, num_classes).float()


def _labels_for(
    model_classes: int, y: ArrayLike | None, n: int, device: str
) -> torch.Tensor | None:
    """Check that ``y`` is given iff the model is conditional; return it as long."""
    if model_classes == 0:
        if y is not None:
            raise ConfigError(
                "labels were given to an unconditional model; build it with "
                "num_classes > 0 or pass y=None"
            )
        return None
    if y is None:
        raise ConfigError(
            f"the model is conditional on {model_classes} classes: pass labels y"
        )
    labels = as_tensor(y, dtype=torch.long, device=device).reshape(-1)
    if labels.shape[0] != n:
        raise DataError(f"got {labels.shape[0]} labels for {n} records")
    return labels


def _mlp(sizes: Sequence[int], activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width_in, width_out in itertools.pairwise(sizes):
        layers += [nn.Linear(width_in, width_out), activation()]
    return nn.Sequential(*layers)


class VAE(nn.Module):
    """Fully connected (conditional) variational auto-encoder.

    Encoder ``x (+ one-hot y) -> hidden layers -> (mu, log sigma^2)`` of a
    diagonal Gaussian ``q(z|x)``; decoder ``z (+ one-hot y) -> reversed hidden
    layers -> p(x|z)``. The loss is the negative evidence lower bound

    ``-ELBO(x) = -E_q[log p(x|z)] + KL(q(z|x) || N(0, I))``

    with the reparameterisation trick. ``hidden=(400,)`` and ``latent_dim=20``
    is the 784-400-20 VAE of seed 003; ``hidden=(200,), latent_dim=2`` (or two
    layers ``(200, 200)``) the VAEs of seed 000 Ch. 5.

    Parameters
    ----------
    input_dim : int
        Number of input features (e.g. 784 for flattened 28x28 images).
        Inputs of any shape whose trailing sizes multiply to ``input_dim`` are
        flattened.
    hidden : sequence of int, default=(400,)
        Widths of the encoder's hidden layers; the decoder mirrors them.
    latent_dim : int, default=20
        Dimension of the latent code ``z``.
    num_classes : int, default=0
        ``0`` for an unconditional VAE; otherwise the number of classes the
        encoder and decoder are conditioned on (one-hot concatenated).
    output : {"bernoulli", "gaussian"}, default="bernoulli"
        Decoder likelihood. ``"bernoulli"`` expects inputs in ``[0, 1]`` and
        uses binary cross-entropy on logits; ``"gaussian"`` uses a Gaussian
        with fixed standard deviation ``output_std``.
    output_std : float, default=1.0
        Standard deviation of the Gaussian decoder (ignored for Bernoulli).
    activation : {"relu", "tanh"}, default="relu"
        Hidden-layer activation.
    seed : int, optional
        Seed of the weight initialisation (the global torch RNG is untouched).
    """

    def __init__(
        self,
        input_dim: int,
        hidden: Sequence[int] = (400,),
        latent_dim: int = 20,
        num_classes: int = 0,
        output: OutputKind = "bernoulli",
        *,
        output_std: float = 1.0,
        activation: Literal["relu", "tanh"] = "relu",
        seed: int | None = None,
    ) -> None:
        super().__init__()
        widths = [check_int("hidden", h, low=1) for h in hidden]
        check_int("input_dim", input_dim, low=1)
        check_int("latent_dim", latent_dim, low=1)
        _conditional_classes(num_classes)
        check_option("output", output, ("bernoulli", "gaussian"))
        check_positive("output_std", output_std)
        acts: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}
        check_option("activation", activation, tuple(acts))
        self.input_dim = int(input_dim)
        self.latent_dim = int(latent_dim)
        self.num_classes = int(num_classes)
        self.output: OutputKind = output
        self.output_std = float(output_std)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            enc_sizes = [self.input_dim + self.num_classes, *widths]
            self.encoder = _mlp(enc_sizes, acts[activation])
            self.to_mu = nn.Linear(enc_sizes[-1], self.latent_dim)
            self.to_logvar = nn.Linear(enc_sizes[-1], self.latent_dim)
            dec_sizes = [self.latent_dim + self.num_classes, *reversed(widths)]
            self.decoder = _mlp(dec_sizes, acts[activation])
            self.to_output = nn.Linear(dec_sizes[-1], self.input_dim)

    def _flatten(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(x.shape[0], -1)
        if flat.shape[1] != self.input_dim:
            raise DataError(
                f"records have {flat.shape[1]} features, the VAE expects "
                f"input_dim={self.input_dim}"
            )
        return flat

    def _condition(self, h: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        if self.num_classes == 0:
            if y is not None:
                raise ConfigError("labels were given to an unconditional VAE")
            return h
        if y is None:
            raise ConfigError(f"the VAE is conditional on {self.num_classes} classes")
        return torch.cat([h, one_hot(y.to(h.device), self.num_classes)], dim=1)

    def encode(
        self, x: torch.Tensor, y: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the posterior mean and log-variance ``(mu, logvar)`` of ``x``."""
        h = self.encoder(self._condition(self._flatten(x), y))
        return self.to_mu(h), self.to_logvar(h)

    def decode_logits(
        self, z: torch.Tensor, y: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Return the decoder's raw output (logits or Gaussian means) for ``z``."""
        out: torch.Tensor = self.to_output(self.decoder(self._condition(z, y)))
        return out

    def decode(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """Return the mean of ``p(x|z)``: probabilities (Bernoulli) or means."""
        out = self.decode_logits(z, y)
        return torch.sigmoid(out) if self.output == "bernoulli" else out

    def reparameterize(
        self,
        mu: torch.Tensor,
        logvar: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Draw ``z = mu + sigma * eps`` with ``eps ~ N(0, I)``."""
        eps = torch.randn(mu.shape, generator=generator, device="cpu").to(mu.device)
        return mu + torch.exp(0.5 * logvar) * eps

    def forward(
        self,
        x: torch.Tensor,
        y: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encode, sample ``z`` and decode: return ``(reconstruction, mu, logvar)``."""
        mu, logvar = self.encode(x, y)
        z = self.reparameterize(mu, logvar, generator)
        return self.decode(z, y), mu, logvar

    def loss(
        self,
        x: torch.Tensor,
        y: torch.Tensor | None = None,
        *,
        reduction: Reduction = "mean",
        beta: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Return the negative ELBO (one Monte Carlo sample of ``z``).

        Parameters
        ----------
        x : torch.Tensor
            Records, shape ``(n, ...)`` with ``input_dim`` features each.
        y : torch.Tensor, optional
            Integer labels, required iff the VAE is conditional.
        reduction : {"mean", "sum", "none"}, default="mean"
            ``"none"`` returns the per-example loss of shape ``(n,)``.
        beta : float, default=1.0
            Weight of the KL term (``1`` is the ELBO).
        generator : torch.Generator, optional
            Source of the reparameterisation noise.

        Returns
        -------
        torch.Tensor
            Scalar, or shape ``(n,)`` when ``reduction="none"``.
        """
        flat = self._flatten(x)
        mu, logvar = self.encode(flat, y)
        z = self.reparameterize(mu, logvar, generator)
        out = self.decode_logits(z, y)
        if self.output == "bernoulli":
            recon = F.binary_cross_entropy_with_logits(out, flat, reduction="none")
        else:
            var = self.output_std**2
            recon = 0.5 * ((flat - out) ** 2 / var + np.log(2 * np.pi * var))
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
        per_example = recon.sum(dim=1) + beta * kl.sum(dim=1)
        if reduction == "none":
            return per_example
        if reduction == "sum":
            return per_example.sum()
        if reduction == "mean":
            return per_example.mean()
        raise ConfigError(
            f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
        )

    @torch.no_grad()
    def sample(
        self,
        n: int,
        y: ArrayLike | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Draw ``n`` records: ``z ~ N(0, I)`` decoded to the mean of ``p(x|z)``.

        Parameters
        ----------
        n : int
            Number of records.
        y : array-like of int, optional
            Labels of the records (required iff conditional).
        generator : torch.Generator, optional
            Source of randomness (CPU generator).

        Returns
        -------
        torch.Tensor
            Shape ``(n, input_dim)``, on the model's device.
        """
        device = next(self.parameters()).device
        labels = _labels_for(self.num_classes, y, n, str(device))
        z = torch.randn((n, self.latent_dim), generator=generator).to(device)
        return self.decode(z, labels)


def _epoch_batches(
    n: int, batch_size: int, generator: torch.Generator
) -> list[torch.Tensor]:
    perm = torch.randperm(n, generator=generator)
    return list(torch.split(perm, batch_size))


def train_vae(
    model: VAE,
    x: ArrayLike,
    y: ArrayLike | None = None,
    *,
    epochs: int,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    device: str = "cpu",
    on_epoch_end: Callable[[int, VAE], None] | None = None,
) -> list[float]:
    """Train ``model`` with Adam on the negative ELBO; return the mean loss per epoch.

    ``model`` is trained in place (PyTorch's convention); ``x`` is not written.

    Parameters
    ----------
    model : VAE
        The VAE, trained in place (moved to ``device``).
    x : array-like
        Training records ``(n, ...)`` with ``model.input_dim`` features.
    y : array-like of int, optional
        Labels (required iff the VAE is conditional).
    epochs, batch_size, lr : int, int, float
        Passes over the data, mini-batch size and Adam learning rate.
    seed : int, default=0
        Seeds the batch order and the reparameterisation noise.
    device : str, default="cpu"
        Torch device, e.g. ``"cuda"``.
    on_epoch_end : callable, optional
        Called as ``on_epoch_end(epoch, model)`` after each epoch (1-based).

    Returns
    -------
    list of float
        Mean negative ELBO of each epoch.
    """
    check_int("epochs", epochs, low=0)
    check_int("batch_size", batch_size, low=1)
    check_positive("lr", lr)
    data = as_tensor(x, device=device)
    labels = _labels_for(model.num_classes, y, data.shape[0], device)
    if data.shape[0] == 0:
        raise DataError("cannot train a VAE on an empty dataset")
    model.to(device)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    history: list[float] = []
    for epoch in range(1, epochs + 1):
        total = 0.0
        for idx in _epoch_batches(data.shape[0], batch_size, gen):
            idx = idx.to(device)
            batch_y = None if labels is None else labels[idx]
            loss = model.loss(data[idx], batch_y, generator=gen)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += loss.item() * idx.shape[0]
        history.append(total / data.shape[0])
        if on_epoch_end is not None:
            on_epoch_end(epoch, model)
    model.eval()
    return history


def _image_shape(image_shape: Sequence[int]) -> tuple[int, int, int]:
    """Return ``(C, H, W)`` with ``H`` and ``W`` divisible by 4 (two upsamplings)."""
    shape = tuple(image_shape)
    sizes = [check_int(f"image_shape[{i}]", s, low=1) for i, s in enumerate(shape)]
    if len(sizes) != 3 or sizes[1] % 4 or sizes[2] % 4:
        raise ConfigError(
            "image_shape must be (channels, height, width) with height and width "
            f"divisible by 4, e.g. (1, 28, 28) or (1, 8, 8); got {shape!r}."
        )
    return sizes[0], sizes[1], sizes[2]


def _conditional_classes(num_classes: int) -> int:
    """Return ``num_classes`` if it is 0 (unconditional) or at least 2."""
    count = check_int("num_classes", num_classes, low=0)
    if count == 1:
        raise ConfigError(
            "num_classes must be 0 (unconditional) or an integer >= 2; got 1."
        )
    return count


class DCGANGenerator(nn.Module):
    """DCGAN generator: ``z (+ y) -> linear -> 2 transposed-conv blocks -> image``.

    The latent code (concatenated with the one-hot label when conditional) is
    projected to ``2c x H/4 x W/4`` feature maps, then upsampled twice by
    ``ConvTranspose2d(4, stride 2, padding 1)`` with batch norm and ReLU, as in
    Radford et al.'s DCGAN; the output is a sigmoid, images in ``[0, 1]``.

    Parameters
    ----------
    image_shape : sequence of int
        ``(C, H, W)`` with ``H`` and ``W`` divisible by 4.
    latent_dim : int, default=32
        Dimension of the noise vector.
    num_classes : int, default=0
        ``0`` for unconditional, else the number of classes (conditional GAN).
    base_channels : int, default=32
        ``c``: the feature maps have ``2c`` then ``c`` channels.
    seed : int, optional
        Seed of the weight initialisation.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        latent_dim: int = 32,
        num_classes: int = 0,
        *,
        base_channels: int = 32,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        channels, height, width = _image_shape(image_shape)
        check_int("latent_dim", latent_dim, low=1)
        check_int("base_channels", base_channels, low=1)
        _conditional_classes(num_classes)
        self.image_shape = (channels, height, width)
        self.latent_dim = int(latent_dim)
        self.num_classes = int(num_classes)
        c = int(base_channels)
        self._start = (2 * c, height // 4, width // 4)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.project = nn.Sequential(
                nn.Linear(
                    self.latent_dim + self.num_classes, 2 * c * height * width // 16
                ),
                nn.BatchNorm1d(2 * c * height * width // 16),
                nn.ReLU(),
            )
            self.upsample = nn.Sequential(
                nn.ConvTranspose2d(2 * c, c, 4, stride=2, padding=1),
                nn.BatchNorm2d(c),
                nn.ReLU(),
                nn.ConvTranspose2d(c, channels, 4, stride=2, padding=1),
                nn.Sigmoid(),
            )

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """Return images ``(n, C, H, W)`` for noise ``z`` (and labels ``y``)."""
        if self.num_classes:
            if y is None:
                raise ConfigError("the generator is conditional: pass labels y")
            z = torch.cat([z, one_hot(y.to(z.device), self.num_classes)], dim=1)
        elif y is not None:
            raise ConfigError("labels were given to an unconditional generator")
        h = self.project(z).reshape(z.shape[0], *self._start)
        out: torch.Tensor = self.upsample(h)
        return out

    @torch.no_grad()
    def sample(
        self,
        n: int,
        y: ArrayLike | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Draw ``n`` images in evaluation mode (batch norm uses running stats).

        Unconditional models ignore ``y``; conditional ones draw labels
        uniformly at random when ``y`` is None.
        """
        device = next(self.parameters()).device
        was_training = self.training
        self.eval()
        z = torch.randn((n, self.latent_dim), generator=generator).to(device)
        labels: torch.Tensor | None = None
        if self.num_classes:
            if y is None:
                labels = torch.randint(self.num_classes, (n,), generator=generator).to(
                    device
                )
            else:
                labels = _labels_for(self.num_classes, y, n, str(device))
        out: torch.Tensor = self(z, labels)
        self.train(was_training)
        return out


class DCGANDiscriminator(nn.Module):
    """DCGAN discriminator: 2 strided conv blocks with LeakyReLU, then a logit.

    Conditional variant: the one-hot label is broadcast to ``num_classes``
    constant feature maps concatenated with the image channels. There is no
    batch norm, so a record's score does not depend on its batch.

    Parameters
    ----------
    image_shape : sequence of int
        ``(C, H, W)`` with ``H`` and ``W`` divisible by 4.
    num_classes : int, default=0
        ``0`` for unconditional, else the number of classes.
    base_channels : int, default=32
        Channels of the first convolution (the second has twice as many).
    seed : int, optional
        Seed of the weight initialisation.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        num_classes: int = 0,
        *,
        base_channels: int = 32,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        channels, height, width = _image_shape(image_shape)
        check_int("base_channels", base_channels, low=1)
        _conditional_classes(num_classes)
        self.image_shape = (channels, height, width)
        self.num_classes = int(num_classes)
        c = int(base_channels)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.features = nn.Sequential(
                nn.Conv2d(channels + self.num_classes, c, 4, stride=2, padding=1),
                nn.LeakyReLU(0.2),
                nn.Conv2d(c, 2 * c, 4, stride=2, padding=1),
                nn.LeakyReLU(0.2),
                nn.Flatten(),
            )
            self.head = nn.Linear(2 * c * height * width // 16, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """Return one logit per image, shape ``(n,)``."""
        if self.num_classes:
            if y is None:
                raise ConfigError("the discriminator is conditional: pass labels y")
            maps = one_hot(y.to(x.device), self.num_classes)[:, :, None, None]
            x = torch.cat([x, maps.expand(-1, -1, *x.shape[2:])], dim=1)
        elif y is not None:
            raise ConfigError("labels were given to an unconditional discriminator")
        out: torch.Tensor = self.head(self.features(x)).squeeze(1)
        return out

    @torch.no_grad()
    def predict_proba(
        self, x: ArrayLike, y: ArrayLike | None = None, *, batch_size: int = 512
    ) -> np.ndarray:
        """Return ``D(x)`` in ``[0, 1]`` (probability of "real") per record."""
        device = next(self.parameters()).device
        data = as_tensor(x, device=str(device))
        labels = _labels_for(self.num_classes, y, data.shape[0], str(device))
        outs = []
        for start in range(0, data.shape[0], batch_size):
            stop = start + batch_size
            batch_y = None if labels is None else labels[start:stop]
            outs.append(torch.sigmoid(self(data[start:stop], batch_y)).cpu())
        if not outs:
            return np.zeros(0)
        return torch.cat(outs).numpy().astype(np.float64)


@dataclass(frozen=True)
class LabelNoise:
    """Soft, noisy and flipped discriminator targets (seed 000 Ch. 6.2.1).

    Real targets are drawn uniformly from ``real_range`` and fake targets from
    ``fake_range`` for every example at every step ("soft and noisy labels");
    with probability ``flip_prob`` an example's real/fake role is swapped
    ("occasionally flip the labels"). ``LabelNoise.seed_000()`` gives the
    thesis' values ``[0.7, 1.2]``, ``[0.0, 0.3]`` and a 5% flip rate;
    ``LabelNoise()`` gives hard labels 1/0 without flips.

    Targets above 1 are used as given: ``binary_cross_entropy_with_logits``
    accepts them and they push real logits further up.
    """

    real_range: tuple[float, float] = (1.0, 1.0)
    fake_range: tuple[float, float] = (0.0, 0.0)
    flip_prob: float = 0.0

    def __post_init__(self) -> None:
        for name, (low, high) in (("real", self.real_range), ("fake", self.fake_range)):
            if low > high:
                raise ConfigError(
                    f"{name}_range must be (low, high), got {(low, high)}"
                )
        check_probability("flip_prob", self.flip_prob)

    @classmethod
    def seed_000(cls, flip_prob: float = 0.05) -> LabelNoise:
        """Return the soft/noisy labels of seed 000 Ch. 6.2.1 with ``flip_prob``."""
        return cls(real_range=(0.7, 1.2), fake_range=(0.0, 0.3), flip_prob=flip_prob)

    def targets(
        self, is_real: torch.Tensor, generator: torch.Generator
    ) -> torch.Tensor:
        """Return the training target of each example given its true role."""
        n = is_real.shape[0]
        flip = torch.rand(n, generator=generator) < self.flip_prob
        role = is_real.cpu() ^ flip
        u = torch.rand(n, generator=generator)
        real = self.real_range[0] + u * (self.real_range[1] - self.real_range[0])
        fake = self.fake_range[0] + u * (self.fake_range[1] - self.fake_range[0])
        return torch.where(role, real, fake).to(is_real.device)


@dataclass
class _Pool:
    x: torch.Tensor
    y: torch.Tensor | None

    def draw(
        self, k: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        idx = torch.randint(self.x.shape[0], (k,), generator=generator).to(
            self.x.device
        )
        return self.x[idx], None if self.y is None else self.y[idx]


class GANTrainer:
    """Step-wise training of a (conditional) DCGAN with the non-saturating loss.

    One :meth:`step` is one mini-batch update of the discriminator followed by
    one of the generator (Adam, ``betas=(0.5, 0.999)`` as in DCGAN). The
    discriminator sees a batch of ``real`` records labelled real and a batch
    of generated records labelled fake, with targets from ``label_noise``.

    After ``extra_delay_steps`` steps, batches from ``extra_real`` (labelled
    real) and ``extra_fake`` (labelled fake) are added to every discriminator
    update: this is how the auxiliary-knowledge attacks of seed 000 Ch. 6.1.4
    feed known training or test records, introduced after a delay (Ch. 6.2.5
    uses 1000 steps, Fig. 6.10).

    Parameters
    ----------
    generator, discriminator : DCGANGenerator, DCGANDiscriminator
        The models, trained in place (moved to ``device``).
    real : array-like
        Real records ``(n, C, H, W)`` in ``[0, 1]``.
    real_labels : array-like of int, optional
        Their labels (required iff the models are conditional).
    batch_size : int, default=32
        Mini-batch size (seed 000 uses 32).
    lr : float, default=2e-4
        Adam learning rate of both networks.
    label_noise : LabelNoise, optional
        Discriminator targets; hard labels by default.
    extra_real, extra_fake : tuple of (array, labels or None), optional
        Extra records for the discriminator, labelled real / fake.
    extra_delay_steps : int, default=0
        Steps before the extra records are used.
    seed : int, default=0
        Seeds batches, noise, labels and flips.
    device : str, default="cpu"
        Torch device.
    """

    def __init__(
        self,
        generator: DCGANGenerator,
        discriminator: DCGANDiscriminator,
        real: ArrayLike,
        real_labels: ArrayLike | None = None,
        *,
        batch_size: int = 32,
        lr: float = 2e-4,
        label_noise: LabelNoise | None = None,
        extra_real: tuple[ArrayLike, ArrayLike | None] | None = None,
        extra_fake: tuple[ArrayLike, ArrayLike | None] | None = None,
        extra_delay_steps: int = 0,
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        if generator.num_classes != discriminator.num_classes:
            raise ConfigError(
                f"generator has {generator.num_classes} classes, discriminator "
                f"{discriminator.num_classes}: build both with the same num_classes"
            )
        if generator.image_shape != discriminator.image_shape:
            raise ConfigError(
                f"generator makes {generator.image_shape} images, discriminator "
                f"expects {discriminator.image_shape}"
            )
        check_int("batch_size", batch_size, low=1)
        check_positive("lr", lr)
        check_int("extra_delay_steps", extra_delay_steps, low=0)
        self.generator = generator.to(device)
        self.discriminator = discriminator.to(device)
        self.num_classes = generator.num_classes
        self.batch_size = int(batch_size)
        self.label_noise = label_noise or LabelNoise()
        self.extra_delay_steps = int(extra_delay_steps)
        self.device = device
        self.real = self._pool(real, real_labels, "real")
        if self.real.x.shape[0] == 0:
            raise DataError("cannot train a GAN on an empty dataset")
        self.extra_real = (
            None if extra_real is None else self._pool(*extra_real, "extra_real")
        )
        self.extra_fake = (
            None if extra_fake is None else self._pool(*extra_fake, "extra_fake")
        )
        self.rng = torch.Generator().manual_seed(seed)
        self.opt_g = torch.optim.Adam(
            self.generator.parameters(), lr=lr, betas=(0.5, 0.999)
        )
        self.opt_d = torch.optim.Adam(
            self.discriminator.parameters(), lr=lr, betas=(0.5, 0.999)
        )
        self.steps_done = 0

    def _pool(self, x: ArrayLike, y: ArrayLike | None, name: str) -> _Pool:
        data = as_tensor(x, device=self.device)
        if tuple(data.shape[1:]) != self.generator.image_shape:
            raise DataError(
                f"{name} records have shape {tuple(data.shape[1:])}, the GAN makes "
                f"{self.generator.image_shape}"
            )
        return _Pool(data, _labels_for(self.num_classes, y, data.shape[0], self.device))

    @property
    def steps_per_epoch(self) -> int:
        """Number of steps that make one pass over ``real`` (rounded up)."""
        return -(-self.real.x.shape[0] // self.batch_size)

    def _fake(self, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        z = torch.randn((k, self.generator.latent_dim), generator=self.rng).to(
            self.device
        )
        labels = None
        if self.num_classes:
            labels = self.real.draw(k, self.rng)[1]
        return self.generator(z, labels), labels

    def step(self) -> tuple[float, float]:
        """Run one discriminator and one generator update; return their losses."""
        self.generator.train()
        self.discriminator.train()
        k = self.batch_size
        real_x, real_y = self.real.draw(k, self.rng)
        fake_x, fake_y = self._fake(k)
        parts: list[tuple[torch.Tensor, torch.Tensor | None, bool]] = [
            (real_x, real_y, True),
            (fake_x.detach(), fake_y, False),
        ]
        if self.steps_done >= self.extra_delay_steps:
            if self.extra_real is not None:
                parts.append((*self.extra_real.draw(k, self.rng), True))
            if self.extra_fake is not None:
                parts.append((*self.extra_fake.draw(k, self.rng), False))
        logits = torch.cat([self.discriminator(x, y) for x, y, _ in parts])
        is_real = torch.cat(
            [torch.full((x.shape[0],), r, dtype=torch.bool) for x, _, r in parts]
        ).to(self.device)
        targets = self.label_noise.targets(is_real, self.rng)
        loss_d = F.binary_cross_entropy_with_logits(logits, targets)
        self.opt_d.zero_grad()
        loss_d.backward()  # type: ignore[no-untyped-call]
        self.opt_d.step()

        logits_g = self.discriminator(fake_x, fake_y)
        loss_g = F.binary_cross_entropy_with_logits(logits_g, torch.ones_like(logits_g))
        self.opt_g.zero_grad()
        loss_g.backward()  # type: ignore[no-untyped-call]
        self.opt_g.step()
        self.steps_done += 1
        return loss_d.item(), loss_g.item()

    def train_steps(self, steps: int) -> list[tuple[float, float]]:
        """Run ``steps`` steps; return the (discriminator, generator) losses."""
        return [self.step() for _ in range(steps)]


def train_gan(
    generator: DCGANGenerator,
    discriminator: DCGANDiscriminator,
    x: ArrayLike,
    y: ArrayLike | None = None,
    *,
    epochs: int,
    batch_size: int = 32,
    lr: float = 2e-4,
    label_noise: LabelNoise | None = None,
    seed: int = 0,
    device: str = "cpu",
    on_epoch_end: Callable[[int, GANTrainer], None] | None = None,
) -> GANTrainer:
    """Train a GAN for ``epochs`` passes over ``x`` and return its trainer.

    A thin loop over :class:`GANTrainer`; ``on_epoch_end(epoch, trainer)`` is
    called after every epoch (1-based), which is how the harness measures
    white-box attack accuracy against training epochs (seed 000 Fig. 6.7).
    ``generator`` and ``discriminator`` are trained in place.
    """
    check_int("epochs", epochs, low=0)
    trainer = GANTrainer(
        generator,
        discriminator,
        x,
        y,
        batch_size=batch_size,
        lr=lr,
        label_noise=label_noise,
        seed=seed,
        device=device,
    )
    for epoch in range(1, epochs + 1):
        trainer.train_steps(trainer.steps_per_epoch)
        if on_epoch_end is not None:
            on_epoch_end(epoch, trainer)
    generator.eval()
    discriminator.eval()
    return trainer
