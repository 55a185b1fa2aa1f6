"""Monte Carlo and reconstruction attacks on generative models (seed 004 Ch. 4.4)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fedleak.attacks.membership.metrics import evaluate_scores, mi_trials
from fedleak.attacks.membership.montecarlo import (
    ColorHistogramFeatures,
    HOGFeatures,
    MonteCarloAttack,
    PCAFeatures,
    PixelFeatures,
    make_feature_map,
    mc_distance_scores,
    mc_epsilon_scores,
    median_heuristic,
    pairwise_distances,
    percentile_heuristic,
    reconstruction_scores,
)
from sklearn.datasets import load_digits

from fedleak.errors import ConfigError
from fedleak.generative import VAE, train_vae

torch.set_num_threads(1)


def _digits() -> np.ndarray:
    return (load_digits().images / 16.0).astype(np.float32)[:, None]


@pytest.fixture(scope="module")
def split() -> dict[str, np.ndarray]:
    x = _digits()
    perm = np.random.default_rng(0).permutation(x.shape[0])
    return {
        "members": x[perm[:40]],
        "nonmembers": x[perm[40:80]],
        "other": x[perm[80:160]],
        "unseen_a": x[perm[160:360]],
        "unseen_b": x[perm[360:560]],
        "reference": x[perm[600:1100]],
    }


def _overfit_vae(records: np.ndarray, seed: int = 0) -> VAE:
    vae = VAE(64, hidden=(64,), latent_dim=8, seed=seed)
    train_vae(vae, records, epochs=150, batch_size=20, lr=5e-3, seed=seed)
    return vae


@pytest.fixture(scope="module")
def overfit(split: dict[str, np.ndarray]) -> VAE:
    return _overfit_vae(split["members"])


@pytest.fixture(scope="module")
def unseen(split: dict[str, np.ndarray]) -> VAE:
    return _overfit_vae(split["other"])  # never saw members nor non-members


def test_hog_and_pca_distances_on_known_images() -> None:
    vertical = np.zeros((1, 1, 8, 8))
    vertical[..., :, 4:] = 1.0
    horizontal = np.transpose(vertical, (0, 1, 3, 2))
    hog = HOGFeatures()
    f_v, f_h = hog.transform(vertical), hog.transform(horizontal)
    assert f_v.shape == (1, 9 * 3 * 3 * 4)
    # a brighter copy has the same normalised gradients; a rotated edge does not
    assert pairwise_distances(f_v, hog.transform(0.5 * vertical))[
        0, 0
    ] == pytest.approx(0.0, abs=1e-6)
    assert pairwise_distances(f_v, f_h)[0, 0] > 0.5
    # PCA fitted on images that vary along two pixel directions keeps distances exactly
    rng = np.random.default_rng(0)
    basis = np.zeros((2, 64))
    basis[0, 3], basis[1, 40] = 1.0, 1.0
    reference = (rng.normal(size=(50, 2)) @ basis).reshape(50, 1, 8, 8)
    pca = PCAFeatures(reference, n_components=40)
    assert pca.transform(reference).shape == (50, 40)
    a, b = reference[:5], reference[5:9]
    expected = pairwise_distances(
        PixelFeatures().transform(a), PixelFeatures().transform(b)
    )
    np.testing.assert_allclose(
        pairwise_distances(pca.transform(a), pca.transform(b)), expected, atol=1e-5
    )


def test_color_histogram_and_labels() -> None:
    images = np.zeros((2, 1, 2, 2))
    images[1] = 1.0
    hist = ColorHistogramFeatures(bins=4).transform(images)
    np.testing.assert_allclose(hist, [[1, 0, 0, 0], [0, 0, 0, 1]])
    d = pairwise_distances(hist, hist, np.array([0, 1]), np.array([0, 0]))
    assert d[0, 0] == 0.0 and np.isinf(d[1, 0]) and np.isinf(d[1, 1])
    with pytest.raises(ConfigError):
        make_feature_map("pca")
    with pytest.raises(ConfigError):
        make_feature_map("sift")


def test_heuristics_and_mc_scores_on_hand_made_distances() -> None:
    d = np.array([[0.1, 5.0, 0.2], [3.0, 0.4, 9.0], [2.0, 2.5, 3.0], [0.05, 7.0, 8.0]])
    eps = median_heuristic(d)  # minima 0.1, 0.4, 2.0, 0.05 -> median 0.25
    assert eps == pytest.approx(0.25)
    np.testing.assert_allclose(mc_epsilon_scores(d, eps), [2 / 3, 0, 0, 1 / 3])
    mcd = mc_distance_scores(d, eps)
    assert mcd[1] == mcd[2] == 0.0 and mcd[0] > 0 and mcd[3] > 0
    assert mcd[3] == pytest.approx(-np.log(0.05 / 0.25) / 3)
    assert percentile_heuristic(d, 50.0) == pytest.approx(np.median(d))


def test_median_heuristic_makes_mc_epsilon_and_mc_d_agree(
    split: dict[str, np.ndarray], overfit: VAE
) -> None:
    samples = overfit.sample(2000, generator=torch.Generator().manual_seed(1)).numpy()
    records = np.concatenate([split["members"], split["nonmembers"]])
    results = []
    for variant in ("epsilon", "distance"):
        attack = MonteCarloAttack(PixelFeatures(), variant=variant, heuristic="median")
        d = attack.distances(records, samples.reshape(-1, 1, 8, 8))
        scores = attack.scores_from_distances(d)
        assert int((scores > 0).sum()) == 40  # exactly M records with f > 0 (seed 004)
        trials = mi_trials(
            attack.trial_scorer(d[:40], d[40:]),
            40,
            40,
            set_size=20,
            trials=30,
            rng=np.random.default_rng(7),
        )
        results.append((np.flatnonzero(scores > 0), trials))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert results[0][1] == results[1][1]
    # a percentile heuristic does not guarantee it
    percentile = MonteCarloAttack(PixelFeatures(), variant="distance", heuristic=1.0)
    assert percentile.heuristic == 1.0


def _mc_accuracy(
    vae: VAE, split: dict[str, np.ndarray], feature: str, pools: tuple[str, str]
) -> tuple[float, float]:
    samples = (
        vae.sample(2000, generator=torch.Generator().manual_seed(2))
        .numpy()
        .reshape(-1, 1, 8, 8)
    )
    attack = MonteCarloAttack(
        make_feature_map(feature, split["reference"]), heuristic="median"
    )
    d_in = attack.distances(split[pools[0]], samples)
    d_out = attack.distances(split[pools[1]], samples)
    score = attack.trial_scorer(d_in, d_out)
    return mi_trials(
        score,
        len(d_in),
        len(d_out),
        set_size=20,
        trials=60,
        rng=np.random.default_rng(3),
    )


@pytest.mark.parametrize(
    "feature", ["pca", pytest.param("hog", marks=pytest.mark.slow)]
)
def test_mc_attack_beats_chance_only_on_members(
    split: dict[str, np.ndarray], overfit: VAE, unseen: VAE, feature: str
) -> None:
    single, set_acc = _mc_accuracy(overfit, split, feature, ("members", "nonmembers"))
    assert single > 0.55 and set_acc > 0.8
    # a target that saw neither pool: both MI types at chance
    single0, set0 = _mc_accuracy(unseen, split, feature, ("unseen_a", "unseen_b"))
    assert 0.4 < single0 < 0.6 and 0.25 < set0 < 0.75


def test_reconstruction_attack_beats_chance_only_on_members(
    split: dict[str, np.ndarray], overfit: VAE, unseen: VAE
) -> None:
    records = np.concatenate([split["members"], split["nonmembers"]])
    is_member = np.repeat([True, False], 40)
    rng = np.random.default_rng(0)
    auc = evaluate_scores(
        reconstruction_scores(overfit, records, num_samples=50), is_member, rng
    ).auc
    unseen_records = np.concatenate([split["unseen_a"], split["unseen_b"]])
    unseen_scores = reconstruction_scores(unseen, unseen_records, num_samples=50)
    auc0 = evaluate_scores(unseen_scores, np.repeat([True, False], 200), rng).auc
    assert auc > 0.75
    assert 0.35 < auc0 < 0.65
    again = reconstruction_scores(overfit, records[:3], num_samples=5, seed=1)
    np.testing.assert_array_equal(
        again, reconstruction_scores(overfit, records[:3], num_samples=5, seed=1)
    )
