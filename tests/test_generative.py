"""VAE and DCGAN building blocks (seed 000 Ch. 5-6, seed 003, seed 004 Ch. 4.4.1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedleak.errors import ConfigError, DataError
from fedleak.generative import (
    VAE,
    DCGANDiscriminator,
    DCGANGenerator,
    GANTrainer,
    LabelNoise,
    train_gan,
    train_vae,
)

torch.set_num_threads(1)


def _blobs(n: int = 64, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = np.where(y[:, None] == 1, 0.8, 0.2) + 0.05 * rng.standard_normal((n, dim))
    return np.clip(x, 0, 1).astype(np.float32), y


def test_vae_shapes_and_per_example_loss() -> None:
    vae = VAE(16, hidden=(32, 16), latent_dim=2, seed=0)
    x = torch.rand(5, 16)
    recon, mu, logvar = vae(x)
    assert recon.shape == (5, 16) and mu.shape == (5, 2) and logvar.shape == (5, 2)
    per_example = vae.loss(
        x, reduction="none", generator=torch.Generator().manual_seed(0)
    )
    mean = vae.loss(x, generator=torch.Generator().manual_seed(0))
    assert per_example.shape == (5,)
    assert per_example.mean().item() == pytest.approx(mean.item(), rel=1e-6)
    assert vae.sample(7, generator=torch.Generator().manual_seed(1)).shape == (7, 16)
    # image-shaped input is flattened
    assert vae.encode(torch.rand(3, 1, 4, 4))[0].shape == (3, 2)


@pytest.mark.slow
def test_vae_training_lowers_loss_and_is_seeded() -> None:
    x, _ = _blobs()
    histories = []
    for _ in range(2):
        vae = VAE(16, hidden=(32,), latent_dim=2, seed=3)
        histories.append(train_vae(vae, x, epochs=8, batch_size=16, lr=1e-2, seed=4))
    assert histories[0] == histories[1]
    assert histories[0][-1] < histories[0][0]


def test_gaussian_and_conditional_vae() -> None:
    x, y = _blobs()
    vae = VAE(
        16,
        hidden=(16,),
        latent_dim=2,
        num_classes=2,
        output="gaussian",
        output_std=0.1,
        seed=0,
    )
    history = train_vae(vae, x, y, epochs=20, batch_size=16, lr=1e-2, seed=0)
    assert history[-1] < history[0]
    samples = vae.sample(
        200, y=np.repeat([0, 1], 100), generator=torch.Generator().manual_seed(0)
    )
    means = samples.numpy().mean(axis=1)
    assert (
        means[:100].mean() < 0.4 < 0.6 < means[100:].mean()
    )  # the label steers the decoder
    with pytest.raises(ConfigError):
        vae.sample(3)
    with pytest.raises(ConfigError):
        VAE(16, num_classes=1)
    with pytest.raises(DataError):
        vae.loss(torch.rand(2, 15), torch.zeros(2, dtype=torch.long))


@pytest.mark.parametrize(("shape", "num_classes"), [((1, 8, 8), 0), ((1, 28, 28), 3)])
def test_dcgan_shapes(shape: tuple[int, int, int], num_classes: int) -> None:
    gen = DCGANGenerator(
        shape, latent_dim=8, num_classes=num_classes, base_channels=4, seed=0
    )
    disc = DCGANDiscriminator(shape, num_classes=num_classes, base_channels=4, seed=0)
    y = np.array([0, 1, 2, 0]) if num_classes else None
    images = gen.sample(4, y=y, generator=torch.Generator().manual_seed(0))
    assert images.shape == (4, *shape)
    assert float(images.min()) >= 0.0 and float(images.max()) <= 1.0
    probs = disc.predict_proba(images, y)
    assert probs.shape == (4,) and np.all((probs > 0) & (probs < 1))


def test_dcgan_rejects_bad_shapes_and_mismatch() -> None:
    with pytest.raises(ConfigError):
        DCGANGenerator((1, 10, 10))
    gen = DCGANGenerator((1, 8, 8), num_classes=2, base_channels=4)
    disc = DCGANDiscriminator((1, 8, 8), base_channels=4)
    with pytest.raises(ConfigError):
        GANTrainer(gen, disc, np.zeros((4, 1, 8, 8), dtype=np.float32))


def test_label_noise_ranges_and_flips() -> None:
    noise = LabelNoise.seed_000(flip_prob=0.0)
    is_real = torch.tensor([True] * 500 + [False] * 500)
    t = noise.targets(is_real, torch.Generator().manual_seed(0))
    assert float(t[:500].min()) >= 0.7 and float(t[:500].max()) <= 1.2
    assert float(t[500:].min()) >= 0.0 and float(t[500:].max()) <= 0.3
    flipped = LabelNoise(flip_prob=1.0).targets(
        is_real, torch.Generator().manual_seed(0)
    )
    assert torch.equal(flipped, (~is_real).float())


@pytest.mark.slow
def test_gan_training_is_seeded_and_uses_extra_data_after_delay() -> None:
    x = (np.random.default_rng(0).random((40, 1, 8, 8)) > 0.5).astype(np.float32)
    results = []
    for _ in range(2):
        gen = DCGANGenerator((1, 8, 8), latent_dim=8, base_channels=4, seed=1)
        disc = DCGANDiscriminator((1, 8, 8), base_channels=4, seed=2)
        trainer = train_gan(gen, disc, x, epochs=3, batch_size=8, seed=5)
        assert trainer.steps_done == 3 * trainer.steps_per_epoch
        results.append(disc.predict_proba(x))
    np.testing.assert_array_equal(results[0], results[1])

    gen = DCGANGenerator((1, 8, 8), latent_dim=8, base_channels=4, seed=1)
    disc = DCGANDiscriminator((1, 8, 8), base_channels=4, seed=2)
    extra = np.ones((10, 1, 8, 8), dtype=np.float32)
    trainer = GANTrainer(
        gen, disc, x, extra_fake=(extra, None), extra_delay_steps=2, seed=0
    )
    before = disc.predict_proba(extra).mean()
    trainer.train_steps(60)
    assert (
        disc.predict_proba(extra).mean() < before
    )  # extra records pushed towards fake
