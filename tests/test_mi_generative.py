"""White-box, black-box and auxiliary-knowledge attacks on GANs (seed 000 Ch. 6.1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fedleak.attacks.membership.generative import (
    AttackerConfig,
    AuxiliaryKnowledge,
    BlackBoxAttack,
    DiscriminativeAttack,
    white_box_scores,
)
from fedleak.attacks.membership.metrics import evaluate_scores
from sklearn.datasets import load_digits
from sklearn.exceptions import NotFittedError

from fedleak.errors import ConfigError
from fedleak.generative import DCGANDiscriminator, DCGANGenerator, LabelNoise, train_gan

torch.set_num_threads(1)

# Hard labels and a larger step size make the tiny attacker converge in a few
# hundred steps; the seed's soft/noisy labels are the default (checked below).
ATTACKER = AttackerConfig(
    latent_dim=8, base_channels=16, batch_size=32, lr=5e-3, label_noise=LabelNoise()
)


@pytest.fixture(scope="module")
def records() -> dict[str, np.ndarray]:
    x = (load_digits().images / 16.0).astype(np.float32)[:, None]
    perm = np.random.default_rng(0).permutation(x.shape[0])
    return {
        "members": x[perm[:30]],
        "nonmembers": x[perm[30:60]],
        "other": x[perm[60:90]],
    }


def _target(data: np.ndarray, seed: int) -> tuple[DCGANGenerator, DCGANDiscriminator]:
    gen = DCGANGenerator((1, 8, 8), latent_dim=8, base_channels=8, seed=seed)
    disc = DCGANDiscriminator((1, 8, 8), base_channels=16, seed=seed + 1)
    train_gan(gen, disc, data, epochs=100, batch_size=10, lr=2e-3, seed=seed)
    return gen, disc


@pytest.fixture(scope="module")
def targets(
    records: dict[str, np.ndarray],
) -> dict[str, tuple[DCGANGenerator, DCGANDiscriminator]]:
    # "overfit" trained on the members only; "unseen" on records outside the candidates
    return {
        "overfit": _target(records["members"], 0),
        "unseen": _target(records["other"], 5),
    }


def _auc(scores: np.ndarray, n_members: int) -> float:
    truth = np.arange(scores.shape[0]) < n_members
    return evaluate_scores(scores, truth, np.random.default_rng(0)).auc


def _memorising_samples(data: np.ndarray, n: int = 1500, seed: int = 9) -> np.ndarray:
    """Samples of a perfectly overfitted generator: noisy copies of its training records.

    The black-box and auxiliary attacks only see samples, so this stands in for
    a target that memorised ``data``; on ``records["other"]`` it is a target
    that never saw the members.
    """
    rng = np.random.default_rng(seed)
    copies = data[rng.integers(0, data.shape[0], n)]
    return np.clip(copies + 0.05 * rng.standard_normal(copies.shape), 0, 1).astype(
        np.float32
    )


@pytest.mark.slow
def test_white_box_beats_chance_only_on_members(records, targets) -> None:
    candidates = np.concatenate([records["members"], records["nonmembers"]])
    assert _auc(white_box_scores(targets["overfit"][1], candidates), 30) > 0.65
    assert 0.35 < _auc(white_box_scores(targets["unseen"][1], candidates), 30) < 0.65


@pytest.mark.slow
def test_black_box_beats_chance_only_on_members(records) -> None:
    candidates = np.concatenate([records["members"], records["nonmembers"]])
    aucs = []
    steps_seen: list[int] = []
    for name in ("members", "other"):
        attack = BlackBoxAttack((1, 8, 8), config=ATTACKER, seed=0).fit(
            _memorising_samples(records[name]),
            steps=600,
            eval_every=300,
            on_eval=lambda step, _: steps_seen.append(step),
        )
        aucs.append(_auc(attack.scores(candidates), 30))
    assert steps_seen == [300, 600, 300, 600]
    assert aucs[0] > 0.65
    assert 0.35 < aucs[1] < 0.65
    assert attack.sample(4).shape == (4, 1, 8, 8)


@pytest.mark.slow
def test_auxiliary_knowledge_attacks(records) -> None:
    members, nonmembers = records["members"], records["nonmembers"]
    known = AuxiliaryKnowledge(train=members[:10], test=nonmembers[:10], delay_steps=50)
    # evaluated on the records the attacker does not know
    candidates = np.concatenate([members[10:], nonmembers[10:]])
    for name, low, high in (("members", 0.65, 1.0), ("other", 0.3, 0.7)):
        samples = _memorising_samples(records[name])
        generative = BlackBoxAttack((1, 8, 8), config=ATTACKER, seed=1).fit(
            samples, steps=600, auxiliary=known
        )
        assert low < _auc(generative.scores(candidates), 20) < high, name
        discriminative = DiscriminativeAttack((1, 8, 8), config=ATTACKER, seed=1).fit(
            samples, known, steps=300
        )
        assert low < _auc(discriminative.scores(candidates), 20) < high, name


def test_auxiliary_knowledge_validation() -> None:
    images = np.zeros((4, 1, 8, 8), dtype=np.float32)
    assert AuxiliaryKnowledge(train=images).scenario == "train"
    assert AuxiliaryKnowledge(test=images).scenario == "test"
    assert AuxiliaryKnowledge(train=images, test=images).scenario == "train+test"
    with pytest.raises(ConfigError):
        AuxiliaryKnowledge()
    with pytest.raises(ConfigError):
        BlackBoxAttack((1, 8, 8), config=ATTACKER).fit(
            images, steps=1, auxiliary=AuxiliaryKnowledge(test=images)
        )
    with pytest.raises(ConfigError):
        DiscriminativeAttack((1, 8, 8), config=ATTACKER).fit(
            images, AuxiliaryKnowledge(train=images), steps=1
        )
    with pytest.raises(NotFittedError):
        BlackBoxAttack((1, 8, 8)).scores(images)
    with pytest.raises(NotFittedError):
        DiscriminativeAttack((1, 8, 8)).scores(images)
    assert AttackerConfig().label_noise == LabelNoise.seed_000()
