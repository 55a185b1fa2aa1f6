"""The DI adversary of seed 002 (Lemma 1, Algorithm 1, Section 5.3) and its neighbours."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from fedleak.attacks.audit.adversary import DIAdversary, DITrace, posterior_update
from fedleak.attacks.audit.neighbours import (
    dissimilarity,
    most_dissimilar_neighbours,
    neighbours_at,
)
from scipy.special import expit
from scipy.stats import binom, norm
from sklearn.datasets import load_digits

from fedleak.errors import ConfigError
from fedleak.privacy.identifiability import (
    TAIL_LAMBDAS,
    composed_gaussian_advantage,
    noise_multiplier_for_composed_advantage,
    plan_dp_sgd,
    posterior_tail_epsilon,
)

Digits = tuple[np.ndarray, np.ndarray]


def scalar_model(seed: int) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(1, 1, bias=False)


def linear_classifier(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Linear(64, 10)


@pytest.fixture(scope="module")
def digits() -> Digits:
    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.choice(len(x), 40, replace=False)
    return (x[idx] / 16).astype(np.float32), y[idx]


def test_lemma_1_matches_bayes_rule_on_scalar_gaussians() -> None:
    rng = np.random.default_rng(1)
    mean_d, mean_dp, sigma = 0.7, -0.4, 1.3
    releases = mean_d + sigma * rng.standard_normal(5)
    log_odds = np.zeros(1)
    like_d = like_dp = 1.0
    for r in releases:
        log_odds = posterior_update(log_odds, [[r]], [[mean_d]], [[mean_dp]], sigma)
        like_d *= norm.pdf(r, mean_d, sigma)
        like_dp *= norm.pdf(r, mean_dp, sigma)
        assert expit(log_odds[0]) == pytest.approx(
            like_d / (like_d + like_dp), rel=1e-10
        )


def test_zero_noise_step_carries_no_information() -> None:
    out = posterior_update(
        np.array([0.3]), [[1.0, 2.0]], [[1.0, 2.0]], [[1.0, 2.0]], 0.0
    )
    assert out[0] == 0.3


def test_one_step_scalar_mechanism_matches_closed_form() -> None:
    # D = {1, 2, 3} (targets 0), D' = D without x = 3; model theta * x, MSE loss.
    x = np.array([[1.0], [2.0], [3.0]], dtype=np.float32)
    y = np.zeros(3, dtype=np.int64)
    nb = neighbours_at(x, y, index=2)
    adversary = DIAdversary(
        scalar_model,
        nb,
        steps=1,
        lr=0.1,
        max_grad_norm=100.0,
        noise_multiplier=1.5,
        loss="mse",
    )
    trace = adversary.run(8, seed=3, keep_gradients=True)
    assert trace.released is not None and trace.mean_d is not None
    assert trace.mean_d_prime is not None
    for rep in range(8):
        theta = scalar_model(
            int(
                np.random.SeedSequence(3).spawn(8)[rep].generate_state(1)[0]
                & 0x7FFFFFFF
            )
        ).weight.item()
        grads = 2 * theta * x[:, 0] ** 2  # d/dtheta (theta x - 0)^2
        assert trace.mean_d[rep, 0, 0] == pytest.approx(grads.sum(), rel=1e-5)
        assert trace.mean_d_prime[rep, 0, 0] == pytest.approx(grads[:2].sum(), rel=1e-5)
        sigma = 1.5 * abs(grads[2])
        assert trace.sigma[rep, 0] == pytest.approx(sigma, rel=1e-5)
        r = trace.released[rep, 0, 0]
        p_d = norm.pdf(r, grads.sum(), sigma)
        p_dp = norm.pdf(r, grads[:2].sum(), sigma)
        assert expit(trace.log_odds[rep, 0]) == pytest.approx(
            p_d / (p_d + p_dp), rel=1e-4
        )
        truth = p_d if trace.trained_on_d[rep] else p_dp
        assert trace.belief_in_truth[rep, 0] == pytest.approx(
            truth / (p_d + p_dp), rel=1e-4
        )


def test_runs_are_reproducible_and_independent_of_chunking(digits: Digits) -> None:
    x, y = digits
    nb = neighbours_at(x, y, index=0)
    kwargs = dict(steps=3, lr=0.5, max_grad_norm=1.0, noise_multiplier=2.0)
    a = DIAdversary(linear_classifier, nb, chunk_size=4, **kwargs).run(10, seed=5)
    b = DIAdversary(linear_classifier, nb, chunk_size=10, **kwargs).run(10, seed=5)
    np.testing.assert_allclose(a.log_odds, b.log_odds, rtol=1e-6)
    np.testing.assert_array_equal(a.trained_on_d, b.trained_on_d)
    c = DIAdversary(linear_classifier, nb, chunk_size=10, **kwargs).run(10, seed=6)
    assert not np.allclose(a.log_odds, c.log_odds)


@pytest.mark.slow
def test_local_sensitivity_advantage_within_ci_of_rho_alpha(digits: Digits) -> None:
    x, y = digits
    nb = most_dissimilar_neighbours(x, y, bounded=False, measure="euclidean")
    plan = plan_dp_sgd(0.9, 0.01, steps=4)
    adversary = DIAdversary(
        linear_classifier,
        nb,
        steps=4,
        lr=0.5,
        max_grad_norm=1.0,
        noise_multiplier=plan.noise_multiplier,
        sensitivity="local",
        chunk_size=200,
    )
    report = adversary.audit(600, seed=11, epsilon=plan.epsilon, delta=plan.delta)
    assert report.rho_alpha == pytest.approx(plan.rho_alpha_run)
    assert report.advantage_consistent, (
        report.advantage,
        report.advantage_ci,
        report.rho_alpha,
    )
    # Beliefs above rho_beta: at most what delta allows (one-sided binomial test).
    assert (
        binom.sf(round(report.belief_violation_rate * 600) - 1, 600, plan.delta) > 0.01
    )
    # Way (i) with local sensitivity: sigma_t = z * LS_t, so every run's privacy
    # loss is the planned one (a consistency check; the report's arithmetic
    # is pinned by test_report_scores_a_hand_made_trace below).
    assert report.epsilon_from_sensitivity == pytest.approx(plan.epsilon, rel=1e-3)
    assert report.max_belief < 1.0
    assert -1.0 <= report.mi_advantage <= 1.0


@pytest.mark.slow
def test_global_sensitivity_in_bounded_dp_adds_more_noise(digits: Digits) -> None:
    x, y = digits
    x_out, y_out = load_digits(return_X_y=True)
    nb = most_dissimilar_neighbours(
        x,
        y,
        bounded=True,
        measure="manhattan",
        candidates_x=(x_out[-50:] / 16).astype(np.float32),
        candidates_y=y_out[-50:],
    )
    assert nb.bounded
    plan = plan_dp_sgd(0.99, 0.01, steps=4)
    common = dict(
        steps=4,
        lr=0.5,
        max_grad_norm=1.0,
        noise_multiplier=plan.noise_multiplier,
        chunk_size=200,
    )
    local = DIAdversary(linear_classifier, nb, sensitivity="local", **common)
    glob = DIAdversary(linear_classifier, nb, sensitivity="global", **common)
    assert glob.global_sensitivity == 2.0
    r_local = local.audit(400, seed=2, epsilon=plan.epsilon, delta=0.01)
    r_glob = glob.audit(400, seed=2, epsilon=plan.epsilon, delta=0.01)
    assert r_glob.mean_local_sensitivity < 2.0
    assert r_glob.epsilon_from_sensitivity < r_local.epsilon_from_sensitivity
    assert r_glob.advantage < r_local.advantage
    assert (
        r_glob.advantage <= composed_gaussian_advantage(plan.noise_multiplier, 4) + 0.1
    )


def test_dataset_sensitivity_picks_the_outlier() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 0.1, size=(20, 4)).astype(np.float32)
    x[7] += 5.0
    y = np.zeros(20, dtype=np.int64)
    nb = most_dissimilar_neighbours(x, y, bounded=False, measure="manhattan")
    assert nb.index == 7 and not nb.bounded
    xs, _ = nb.neighbour()
    assert len(xs) == 19 and not np.any(np.all(xs == x[7], axis=1))
    cands = np.array([[0.0, 0, 0, 0], [-9.0, 0, 0, 0]], dtype=np.float32)
    bounded = most_dissimilar_neighbours(
        x,
        y,
        bounded=True,
        measure="euclidean",
        candidates_x=cands,
        candidates_y=np.array([1, 2]),
    )
    assert (bounded.index, bounded.replacement_y) == (7, 2)
    xb, yb = bounded.neighbour()
    assert len(xb) == 20 and yb[-1] == 2


def test_dissimilarities() -> None:
    a = np.array([[0.0, 1.0, 1.0, 0.0]])
    b = np.array([[1.0, 1.0, 0.0, 0.0]])
    assert dissimilarity("hamming")(a, b)[0, 0] == pytest.approx(0.5)
    assert dissimilarity("manhattan")(a, b)[0, 0] == pytest.approx(2.0)
    assert dissimilarity("euclidean")(a, b)[0, 0] == pytest.approx(np.sqrt(2))
    rng = np.random.default_rng(0)
    imgs = rng.random((3, 64))
    ssim = dissimilarity("ssim", image_shape=(8, 8))(imgs, imgs)
    np.testing.assert_allclose(np.diag(ssim), 0.0, atol=1e-12)
    assert (ssim[~np.eye(3, dtype=bool)] > 0.1).all()
    with pytest.raises(ConfigError, match="image_shape"):
        dissimilarity("ssim")
    with pytest.raises(ConfigError, match="unknown dissimilarity"):
        dissimilarity("jaccard-ish")


def test_errors(digits: Digits) -> None:
    x, y = digits
    nb = neighbours_at(x, y, index=0)
    with pytest.raises(ConfigError, match="noise_multiplier > 0"):
        DIAdversary(
            linear_classifier,
            nb,
            steps=1,
            lr=0.1,
            max_grad_norm=1.0,
            noise_multiplier=0.0,
        )
    with pytest.raises(ConfigError, match="candidates"):
        most_dissimilar_neighbours(x, y, bounded=True)

    def with_bn(seed: int) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(64, 10), torch.nn.BatchNorm1d(10))

    adv = DIAdversary(
        with_bn, nb, steps=1, lr=0.1, max_grad_norm=1.0, noise_multiplier=1.0
    )
    with pytest.raises(ConfigError, match="buffers"):
        adv.run(2, seed=0)


@pytest.mark.slow
def test_bench_audit_quick_writes_json_and_plots(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from fedleak.cli import app

    out = tmp_path / "audit.json"
    result = CliRunner().invoke(app, ["bench", "audit", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 1 and doc["benchmark"] == "audit"
    assert doc["complete"] is True
    assert doc["parameters"]["rho_betas"] == [0.52, 0.75, 0.9, 0.99]
    assert len(doc["rows"]) == 2 * 2 * 2 * 4
    for path in doc["plots"]:
        assert (tmp_path / path.split("/")[-1]).stat().st_size > 1000
    local = [r for r in doc["rows"] if r["sensitivity"] == "local"]
    assert sum(r["advantage_within_ci"] for r in local) >= 0.75 * len(local)
    assert all(r["violations_ok"] for r in doc["rows"])
    for row in doc["rows"]:
        assert row["epsilon"] == pytest.approx(
            np.log(row["rho_beta"] / (1 - row["rho_beta"]))
        )
        if row["sensitivity"] == "local":
            assert row["epsilon_from_sensitivity"] == pytest.approx(
                row["epsilon"], rel=1e-3
            )
    assert "written:" in result.output


def test_bench_audit_rejects_unknown_dataset(tmp_path: Path) -> None:
    from cli_process import run_fedleak

    out = tmp_path / "audit.json"
    result = run_fedleak(
        "bench", "audit", "--quick", "--dataset", "adult", "--out", str(out)
    )
    assert result.returncode == 2
    assert "unknown datasets ['adult']" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def _tail_epsilon_by_hand(mu: float, delta: float) -> float:
    """A Gaussian mechanism of sensitivity-over-noise mu has log moment
    lambda (lambda + 1) mu^2 / 2; the tail bound is
    min_lambda (beta(lambda) + ln(1 / delta)) / lambda over the module's grid."""
    lam = np.asarray(TAIL_LAMBDAS)
    return float(np.min((lam * (lam + 1) * mu**2 / 2 + np.log(1 / delta)) / lam))


def test_report_scores_a_hand_made_trace(digits: Digits) -> None:
    """Seed 002's three empirical epsilons on a trace whose sensitivities differ
    from run to run, against hand computations:

    (i) mu_r^2 = sum_t (LS_t / sigma_t)^2, the worst run's Gaussian tail bound;
    (ii) logit of the largest final belief in the truth;
    (iii) the advantage 2 * wins / R - 1 and its noise multiplier.
    """
    x, y = digits
    nb = most_dissimilar_neighbours(x, y, bounded=False, measure="euclidean")
    adversary = DIAdversary(
        linear_classifier, nb, steps=2, lr=0.5, max_grad_norm=1.0, noise_multiplier=2.0
    )
    trace = DITrace(
        trained_on_d=np.array([True, False, True, False]),
        log_odds=np.array([[0.1, 0.4], [-0.2, -1.5], [0.3, -0.2], [0.1, 0.6]]),
        local_sensitivity=np.array([[0.5, 0.5], [1.0, 0.2], [0.1, 0.1], [0.0, 0.3]]),
        sigma=np.array([[2.0, 2.0], [2.0, 1.0], [2.0, 2.0], [0.0, 2.0]]),
        guess_d=np.array([True, False, False, False]),
        mi_member=np.array([True, False, False, True]),
        mi_loss=np.zeros(4),
    )
    report = adversary.report(trace, epsilon=1.0, delta=0.01)
    mu = max(
        math.sqrt(0.25**2 * 2), math.sqrt(0.5**2 + 0.2**2), math.sqrt(2 * 0.05**2), 0.15
    )
    assert report.epsilon_from_sensitivity == pytest.approx(
        _tail_epsilon_by_hand(mu, 0.01), rel=1e-9
    )
    # final beliefs in the truth: expit(0.4), expit(1.5), expit(-0.2), expit(-0.6)
    assert report.max_belief == pytest.approx(expit(1.5))
    assert report.epsilon_from_belief == pytest.approx(1.5)
    assert report.success_rate == 0.75 and report.advantage == 0.5
    z = noise_multiplier_for_composed_advantage(0.5, 2)
    assert report.epsilon_from_advantage == pytest.approx(
        posterior_tail_epsilon(z, 2, 0.01)
    )
    assert report.belief_violation_rate == pytest.approx(
        0.25
    )  # 1.5 > logit(rho_beta(1))
    assert report.mi_advantage == pytest.approx(0.5 - 0.5)  # TPR 1/2, FPR 1/2
    assert report.mean_local_sensitivity == pytest.approx(
        trace.local_sensitivity.mean()
    )
