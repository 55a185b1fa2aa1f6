"""Membership inference against GANs: white-box, black-box, auxiliary knowledge.

Seed 000 Ch. 6.1 (and seed 004 Ch. 4.4.4, which re-evaluates the first two):

White-box (Ch. 6.1.2)
    The attacker copies the target's discriminator and scores every
    candidate record by ``D_target(x)``; the ``n`` highest are predicted to
    be the training set (:func:`white_box_scores`).
Black-box, no auxiliary knowledge (Ch. 6.1.3)
    The attacker trains a local DCGAN on samples drawn from the target (any
    generative model) and scores records with the local discriminator
    ``D_bb`` (:class:`BlackBoxAttack`). The local GAN uses soft and noisy
    labels (real in ``[0.7, 1.2]``, fake in ``[0, 0.3]``) and occasional
    label flips (Ch. 6.2.1, :meth:`fedleak.generative.LabelNoise.seed_000`).
Black-box with limited auxiliary knowledge (Ch. 6.1.4)
    *Generative setting* (:class:`BlackBoxAttack` with an
    :class:`AuxiliaryKnowledge`): scenario 1 adds known training records to
    the real samples of ``D_bb``; scenario 2 also adds known test records to
    its fake samples. Both are introduced after a delay (1000 steps in Ch.
    6.2.5, Fig. 6.10).
    *Discriminative setting* (:class:`DiscriminativeAttack`): a lone
    discriminator learns target samples (scenario 2: plus known training
    records) as real against known test records as fake.

All attacks return membership scores for :mod:`fedleak.attacks.membership.metrics`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from sklearn.exceptions import NotFittedError
from torch.nn import functional as F

from fedleak.errors import ConfigError, DataError
from fedleak.generative import (
    DCGANDiscriminator,
    DCGANGenerator,
    GANTrainer,
    LabelNoise,
    as_tensor,
)
from fedleak.validation import check_int

__all__ = [
    "AttackerConfig",
    "AuxiliaryKnowledge",
    "BlackBoxAttack",
    "DiscriminativeAttack",
    "white_box_scores",
]


def white_box_scores(
    discriminator: DCGANDiscriminator,
    records: np.ndarray,
    labels: np.ndarray | None = None,
) -> np.ndarray:
    """Score records by the target's own discriminator (seed 000 Ch. 6.1.2).

    Parameters
    ----------
    discriminator : DCGANDiscriminator
        The target GAN's discriminator (``D_wb``, a copy of ``D_target``).
    records : numpy.ndarray
        Candidate records ``(m, C, H, W)``.
    labels : numpy.ndarray, optional
        Their labels, for a conditional target.

    Returns
    -------
    numpy.ndarray
        ``D(x)`` per record; higher means "more likely a member".
    """
    discriminator.eval()
    return discriminator.predict_proba(records, labels)


@dataclass(frozen=True)
class AttackerConfig:
    """Architecture and optimiser of the attacker's local DCGAN or discriminator.

    Attributes
    ----------
    latent_dim, base_channels : int
        Size of the attacker DCGAN (:class:`fedleak.generative.DCGANGenerator`).
    batch_size : int
        Mini-batch size (seed 000 trains on batches of 32).
    lr : float
        Adam learning rate.
    label_noise : LabelNoise
        Soft/noisy labels and flips of seed 000 Ch. 6.2.1 by default.
    """

    latent_dim: int = 32
    base_channels: int = 32
    batch_size: int = 32
    lr: float = 2e-4
    label_noise: LabelNoise = field(default_factory=LabelNoise.seed_000)


@dataclass(frozen=True)
class AuxiliaryKnowledge:
    """Records whose membership the attacker knows (seed 000 Ch. 6.1.4).

    Attributes
    ----------
    train : numpy.ndarray, optional
        Known members of the target's training set.
    test : numpy.ndarray, optional
        Known non-members.
    delay_steps : int
        Attacker training steps before this knowledge is used (seed 000 Ch.
        6.2.5 uses 1000: introducing it early weakens the discriminator).
    """

    train: np.ndarray | None = None
    test: np.ndarray | None = None
    delay_steps: int = 0

    def __post_init__(self) -> None:
        check_int("delay_steps", self.delay_steps, low=0)
        if self.train is None and self.test is None:
            raise ConfigError("auxiliary knowledge needs known train or test records")

    @property
    def scenario(self) -> str:
        """``"train"``, ``"test"`` or ``"train+test"``: what the attacker knows."""
        if self.train is not None and self.test is not None:
            return "train+test"
        return "train" if self.train is not None else "test"


EvalCallback = Callable[[int, "BlackBoxAttack"], None]


class BlackBoxAttack:
    """Black-box attack with a local DCGAN (seed 000 Ch. 6.1.3 and 6.1.4).

    Not a scikit-learn estimator: the local GAN's torch modules are built
    (and seeded) at construction and :meth:`fit` trains them for ``steps``
    more steps, so a second call continues the training rather than
    restarting it. :meth:`scores` before :meth:`fit` raises
    :class:`sklearn.exceptions.NotFittedError`.

    Parameters
    ----------
    image_shape : tuple of int
        ``(C, H, W)`` of the records (``H``, ``W`` divisible by 4).
    config : AttackerConfig, optional
        Attacker architecture and training settings.
    seed : int, default=0
        Seeds the local GAN's weights and training.
    device : str, default="cpu"
        Torch device.
    """

    def __init__(
        self,
        image_shape: tuple[int, int, int],
        *,
        config: AttackerConfig | None = None,
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        self.config = config or AttackerConfig()
        self.seed = int(seed)
        self.device = device
        children = np.random.SeedSequence(seed).spawn(3)
        seeds = [int(c.generate_state(1)[0]) for c in children]
        self.generator = DCGANGenerator(
            image_shape,
            latent_dim=self.config.latent_dim,
            base_channels=self.config.base_channels,
            seed=seeds[0],
        )
        self.discriminator = DCGANDiscriminator(
            image_shape, base_channels=self.config.base_channels, seed=seeds[1]
        )
        self._train_seed = seeds[2]
        self.trainer: GANTrainer | None = None

    def fit(
        self,
        target_samples: np.ndarray,
        *,
        steps: int,
        auxiliary: AuxiliaryKnowledge | None = None,
        eval_every: int = 0,
        on_eval: EvalCallback | None = None,
    ) -> BlackBoxAttack:
        """Train the local GAN on samples drawn from the target.

        Parameters
        ----------
        target_samples : numpy.ndarray
            Records generated by the target model, ``(k, C, H, W)``.
        steps : int
            Attacker training steps (one mini-batch each).
        auxiliary : AuxiliaryKnowledge, optional
            Generative setting of Ch. 6.1.4: known training records join the
            real samples (scenario 1), known test records also join the fake
            samples (scenario 2), after ``auxiliary.delay_steps`` steps.
        eval_every : int, default=0
            If positive, call ``on_eval(step, self)`` every ``eval_every``
            steps (accuracy against attacker training steps, Fig. 6.8).
        on_eval : callable, optional
            The evaluation callback.

        Returns
        -------
        BlackBoxAttack
            ``self``, trained.
        """
        check_int("steps", steps, low=0)
        check_int("eval_every", eval_every, low=0)
        if auxiliary is not None and auxiliary.train is None:
            raise ConfigError(
                "the generative auxiliary-knowledge attack needs known training "
                "records (scenario 1) or training and test records (scenario 2)"
            )
        extra_real = None
        extra_fake = None
        delay = 0
        if auxiliary is not None:
            extra_real = (
                (auxiliary.train, None) if auxiliary.train is not None else None
            )
            extra_fake = (auxiliary.test, None) if auxiliary.test is not None else None
            delay = auxiliary.delay_steps
        self.trainer = GANTrainer(
            self.generator,
            self.discriminator,
            target_samples,
            batch_size=self.config.batch_size,
            lr=self.config.lr,
            label_noise=self.config.label_noise,
            extra_real=extra_real,
            extra_fake=extra_fake,
            extra_delay_steps=delay,
            seed=self._train_seed,
            device=self.device,
        )
        for step in range(1, steps + 1):
            self.trainer.step()
            if eval_every and on_eval is not None and step % eval_every == 0:
                on_eval(step, self)
        return self

    def scores(self, records: np.ndarray) -> np.ndarray:
        """Score records by the local discriminator ``D_bb(x)``.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit`.
        """
        if self.trainer is None:
            raise NotFittedError(
                "This BlackBoxAttack is not trained yet: call fit() before scores()."
            )
        self.discriminator.eval()
        return self.discriminator.predict_proba(records)

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """Draw ``n`` images from the attacker's generator (for sample grids)."""
        gen = torch.Generator().manual_seed(seed)
        out: np.ndarray = self.generator.sample(n, generator=gen).cpu().numpy()
        return out


class DiscriminativeAttack:
    """Discriminative auxiliary-knowledge attack (seed 000 Ch. 6.1.4, Fig. 6.3b).

    A DCGAN discriminator is trained with target samples (scenario 2: and
    known training records) labelled real and known test records labelled
    fake, with the same soft/noisy labels as the black-box attack; its output
    scores candidates.

    Not a scikit-learn estimator: the discriminator is built (and seeded) at
    construction and every :meth:`fit` call trains it further. :meth:`scores`
    before :meth:`fit` raises :class:`sklearn.exceptions.NotFittedError`.

    Parameters
    ----------
    image_shape : tuple of int
        ``(C, H, W)`` of the records.
    config : AttackerConfig, optional
        Discriminator size and training settings.
    seed : int, default=0
        Seeds the weights, batches and label noise.
    device : str, default="cpu"
        Torch device.
    """

    def __init__(
        self,
        image_shape: tuple[int, int, int],
        *,
        config: AttackerConfig | None = None,
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        self.config = config or AttackerConfig()
        self.device = device
        self.discriminator = DCGANDiscriminator(
            image_shape, base_channels=self.config.base_channels, seed=seed
        ).to(device)
        self.rng = torch.Generator().manual_seed(seed + 1)
        self.steps_done = 0
        self._fitted = False

    def fit(
        self,
        target_samples: np.ndarray,
        auxiliary: AuxiliaryKnowledge,
        *,
        steps: int,
        eval_every: int = 0,
        on_eval: Callable[[int, DiscriminativeAttack], None] | None = None,
    ) -> DiscriminativeAttack:
        """Train the discriminator; known test records are required (the fakes).

        Scenario 1 (``auxiliary.train is None``): real = target samples.
        Scenario 2: real = target samples and known training records. Known
        training records are used from step ``auxiliary.delay_steps`` on.
        """
        if auxiliary.test is None:
            raise ConfigError(
                "the discriminative attack needs known test records: they are the "
                "fake samples of its discriminator (seed 000 Ch. 6.1.4)"
            )
        check_int("steps", steps, low=0)
        check_int("eval_every", eval_every, low=0)
        samples = as_tensor(target_samples, device=self.device)
        known_test = as_tensor(auxiliary.test, device=self.device)
        known_train = (
            None
            if auxiliary.train is None
            else as_tensor(auxiliary.train, device=self.device)
        )
        for name, data in (("target_samples", samples), ("auxiliary.test", known_test)):
            if data.shape[0] == 0:
                raise DataError(f"{name} is empty")
        optimizer = torch.optim.Adam(
            self.discriminator.parameters(), lr=self.config.lr, betas=(0.5, 0.999)
        )
        k = self.config.batch_size
        self._fitted = True  # scoring is allowed from here on (``on_eval``)
        for step in range(1, steps + 1):
            self.discriminator.train()
            batches = [
                (_draw(samples, k, self.rng), True),
                (_draw(known_test, k, self.rng), False),
            ]
            if known_train is not None and self.steps_done >= auxiliary.delay_steps:
                batches.append((_draw(known_train, k, self.rng), True))
            logits = torch.cat([self.discriminator(x) for x, _ in batches])
            is_real = torch.cat(
                [torch.full((x.shape[0],), r, dtype=torch.bool) for x, r in batches]
            ).to(self.device)
            targets = self.config.label_noise.targets(is_real, self.rng)
            loss = F.binary_cross_entropy_with_logits(logits, targets)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            self.steps_done += 1
            if eval_every and on_eval is not None and step % eval_every == 0:
                on_eval(step, self)
        return self

    def scores(self, records: np.ndarray) -> np.ndarray:
        """Score records by the trained discriminator.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit`.
        """
        if not self._fitted:
            raise NotFittedError(
                "This DiscriminativeAttack is not trained yet: call fit() before "
                "scores()."
            )
        self.discriminator.eval()
        return self.discriminator.predict_proba(records)


def _draw(data: torch.Tensor, k: int, rng: torch.Generator) -> torch.Tensor:
    idx = torch.randint(data.shape[0], (k,), generator=rng).to(data.device)
    return data[idx]
