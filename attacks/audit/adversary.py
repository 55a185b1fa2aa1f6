"""The differential-identifiability adversary that audits DP-SGD (seed 002 Section 5).

:class:`DIAdversary` is seed 002's Algorithm 1: the strongest adversary DP
protects against. It knows the training set ``D`` and its neighbour ``D'``
(:class:`~fedleak.attacks.audit.neighbours.Neighbours`), the architecture, the
initial weights, the learning rate, the clipping norm and the noise scale,
and sees every perturbed batch gradient of full-batch DP-SGD. At each step it

1. computes the clipped, unperturbed gradient sums ``g(D)`` and ``g(D')`` at
   the current (public) weights;
2. takes the sensitivity of the step: the global ``C`` (unbounded) or ``2C``
   (bounded), or the local ``||g(D) - g(D')||`` (Section 5.1);
3. observes the released ``r = g(D_b) + N(0, sigma^2 I)``, ``sigma = z *
   sensitivity``, with which the trainer steps ``theta -= lr * r / |D|``;
4. updates its posterior belief in ``D`` by Lemma 1
   (:func:`posterior_update`): the log-odds grow by ``log N(r; g(D), sigma)
   - log N(r; g(D'), sigma)``.

After the last step it guesses the dataset with the larger posterior. The
training runs ``repetitions`` times (independent noise, initial weights and
coin ``b``), all repetitions advancing together as a batch (``torch.func``
per-example gradients, ``vmap`` over repetitions), and :meth:`DIAdversary.audit`
reports (Section 5.2, 5.3):

* the success rate and the advantage ``2 * success - 1`` with a Wilson 95 %
  confidence interval, next to the analytic ``rho_alpha`` of the run
  (:func:`fedleak.privacy.identifiability.composed_gaussian_advantage`),
* the final posterior beliefs in the true dataset and the fraction above the
  bound ``rho_beta`` (allowed: ``delta``, Theorem 1 ii),
* the empirical epsilon three ways: from the observed local sensitivities,
  from the largest posterior belief (Eq. 10) and from the advantage (Eq. 15
  and its RDP-composition version),
* the advantage of the loss-threshold membership adversary of Yeom et al. on
  the same trained models (seed 002 Section 6.3), for comparison
  (:class:`fedleak.attacks.membership.classifier.LossThresholdAttack`).

Noise calibration and accounting come from :mod:`fedleak.privacy`; the
instrumented DP-SGD step is written here because the audit must see every
perturbed gradient, which a DP optimiser keeps to itself.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import NDArray
from scipy.special import expit, logit
from scipy.stats import binomtest
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap
from torch.nn import functional as F

from fedleak.errors import ConfigError
from fedleak.privacy.identifiability import (
    composed_gaussian_advantage,
    epsilon_for_expected_advantage,
    noise_multiplier_for_composed_advantage,
    posterior_belief_bound,
    posterior_tail_epsilon,
)

from .neighbours import Neighbours

__all__ = [
    "AuditReport",
    "DIAdversary",
    "DITrace",
    "posterior_update",
]

Sensitivity = Literal["local", "global"]
LossName = Literal["cross_entropy", "mse"]
ModelFactory = Callable[[int], nn.Module]


def posterior_update(
    log_odds: NDArray[np.float64] | float,
    released: NDArray[np.float64],
    mean_d: NDArray[np.float64],
    mean_d_prime: NDArray[np.float64],
    sigma: NDArray[np.float64] | float,
) -> NDArray[np.float64]:
    """One step of Lemma 1 (seed 002): update the log-odds of ``D`` against ``D'``.

    With independent Gaussian noise, ``beta_k(D) = prod_i p(r_i | D) /
    (prod_i p(r_i | D) + prod_i p(r_i | D'))``; in log-odds form each
    observation adds ``(||r - g(D')||^2 - ||r - g(D)||^2) / (2 sigma^2)``.
    The posterior belief in ``D`` is ``expit(log_odds)``.

    Parameters
    ----------
    log_odds : float or numpy.ndarray
        Current ``log(beta(D) / beta(D'))``, shape ``(R,)`` (0 = uniform prior).
    released : numpy.ndarray
        Observed perturbed outputs, shape ``(R, P)``.
    mean_d, mean_d_prime : numpy.ndarray
        Noiseless outputs on ``D`` and ``D'``, shape ``(R, P)``.
    sigma : float or numpy.ndarray
        Noise standard deviation, shape ``(R,)``; where it is 0 the outputs
        carry no information (both means are equal) and the log-odds stay.

    Returns
    -------
    numpy.ndarray
        Updated log-odds, shape ``(R,)``.
    """
    r = np.atleast_2d(np.asarray(released, dtype=np.float64))
    g_d = np.atleast_2d(np.asarray(mean_d, dtype=np.float64))
    g_dp = np.atleast_2d(np.asarray(mean_d_prime, dtype=np.float64))
    s = np.broadcast_to(np.asarray(sigma, dtype=np.float64), (r.shape[0],))
    # ||r - g'||^2 - ||r - g||^2 = (g - g') . (2 r - g - g'), exact in float64.
    numerator = np.einsum("ij,ij->i", g_d - g_dp, 2.0 * r - g_d - g_dp)
    safe = np.where(s > 0, s, 1.0)
    step = np.where(s > 0, numerator / (2.0 * safe**2), 0.0)
    return np.asarray(log_odds, dtype=np.float64) + step


@dataclass(frozen=True)
class DITrace:
    """What the DI adversary saw and believed in each repetition.

    Attributes
    ----------
    trained_on_d : numpy.ndarray
        ``(R,)`` bool: the challenger's coin, True when training used ``D``.
    log_odds : numpy.ndarray
        ``(R, steps)`` log-odds of ``D`` against ``D'`` after each step.
    local_sensitivity : numpy.ndarray
        ``(R, steps)`` ``||g(D) - g(D')||`` of the clipped gradient sums.
    sigma : numpy.ndarray
        ``(R, steps)`` noise standard deviation used at each step.
    guess_d : numpy.ndarray
        ``(R,)`` bool: the adversary's final guess (ties by a fair coin).
    mi_member : numpy.ndarray
        ``(R,)`` bool: the loss-threshold MI adversary's guess that the
        differing record of ``D`` was trained on.
    mi_loss : numpy.ndarray
        ``(R,)`` final loss of that record.
    released, mean_d, mean_d_prime : numpy.ndarray or None
        ``(R, steps, P)`` observations and noiseless gradient sums, only with
        ``keep_gradients=True``.
    """

    trained_on_d: NDArray[np.bool_]
    log_odds: NDArray[np.float64]
    local_sensitivity: NDArray[np.float64]
    sigma: NDArray[np.float64]
    guess_d: NDArray[np.bool_]
    mi_member: NDArray[np.bool_]
    mi_loss: NDArray[np.float64]
    released: NDArray[np.float64] | None = None
    mean_d: NDArray[np.float64] | None = None
    mean_d_prime: NDArray[np.float64] | None = None

    @property
    def belief_in_truth(self) -> NDArray[np.float64]:
        """``(R, steps)`` posterior belief in the dataset used (Definition 4)."""
        signed = np.where(self.trained_on_d[:, None], self.log_odds, -self.log_odds)
        return np.asarray(expit(signed), dtype=np.float64)

    @property
    def success(self) -> NDArray[np.bool_]:
        """``(R,)`` whether the final guess was right."""
        return np.asarray(self.guess_d == self.trained_on_d)


@dataclass(frozen=True)
class AuditReport:
    """Empirical identifiability of one DP-SGD configuration (seed 002 Section 6).

    Attributes
    ----------
    repetitions, steps : int
        Trainings and DP-SGD steps per training.
    sensitivity : {"local", "global"}
        How the noise was scaled.
    bounded : bool
        Bounded (replace) or unbounded (remove) neighbours.
    noise_multiplier : float
        ``sigma / sensitivity`` of every step.
    epsilon, delta : float
        The target guarantee.
    rho_beta : float
        The posterior-belief bound for ``epsilon``.
    rho_alpha : float
        Analytic expected advantage of the run with local sensitivity.
    success_rate, advantage : float
        Empirical success rate and ``2 * success_rate - 1``.
    advantage_ci : tuple of float
        Wilson 95 % interval of the advantage.
    belief_violation_rate : float
        Fraction of final beliefs in the true dataset above ``rho_beta``.
    belief_violation_ci : tuple of float
        Wilson 95 % interval of that fraction.
    max_belief, median_belief : float
        Of the final beliefs in the true dataset.
    epsilon_from_sensitivity, epsilon_from_belief : float
        Empirical epsilon, ways (i) and (ii) of Section 5.3.
    epsilon_from_advantage : float
        Way (iii) under RDP composition of the run's steps.
    epsilon_from_advantage_eq15 : float
        Way (iii) by Eq. (15) (one Gaussian mechanism, classic calibration).
    mi_advantage : float
        Advantage of the loss-threshold MI adversary on the same models.
    mean_local_sensitivity : float
        Mean over steps and repetitions of ``||g(D) - g(D')||``.
    global_sensitivity : float
        ``C`` (unbounded) or ``2C`` (bounded).
    """

    repetitions: int
    steps: int
    sensitivity: str
    bounded: bool
    noise_multiplier: float
    epsilon: float
    delta: float
    rho_beta: float
    rho_alpha: float
    success_rate: float
    advantage: float
    advantage_ci: tuple[float, float]
    belief_violation_rate: float
    belief_violation_ci: tuple[float, float]
    max_belief: float
    median_belief: float
    epsilon_from_sensitivity: float
    epsilon_from_belief: float
    epsilon_from_advantage: float
    epsilon_from_advantage_eq15: float
    mi_advantage: float
    mean_local_sensitivity: float
    global_sensitivity: float

    def as_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready plain values."""
        out = dict(self.__dict__)
        out["advantage_ci"] = list(self.advantage_ci)
        out["belief_violation_ci"] = list(self.belief_violation_ci)
        return out

    @property
    def advantage_consistent(self) -> bool:
        """Whether ``rho_alpha`` lies in the advantage's confidence interval."""
        low, high = self.advantage_ci
        return low <= self.rho_alpha <= high


def _wilson(successes: int, trials: int) -> tuple[float, float]:
    ci = binomtest(successes, trials).proportion_ci(
        confidence_level=0.95, method="wilson"
    )
    return float(ci.low), float(ci.high)


class DIAdversary:
    """Seed 002's DI adversary on full-batch DP-SGD (Algorithm 1).

    Parameters
    ----------
    model_factory : callable
        ``model_factory(seed)`` returns a fresh model (same architecture every
        time, initialised from ``seed``); the adversary knows the initial
        weights. Models must not hold buffers that change in training
        (no batch norm).
    neighbours : Neighbours
        ``D`` and ``D'``.
    steps : int
        Full-batch DP-SGD steps (the paper trains with batch gradient descent,
        so one step is one epoch).
    lr : float
        Learning rate; the update is ``theta -= lr * r / |D|``.
    max_grad_norm : float
        Per-example clipping norm ``C``.
    noise_multiplier : float
        ``z = sigma / sensitivity``; e.g.
        :func:`fedleak.privacy.identifiability.plan_dp_sgd` (...).noise_multiplier.
    sensitivity : {"local", "global"}, default="local"
        Scale the noise to the step's local sensitivity ``||g(D) - g(D')||``
        or to the global ``C`` (unbounded) / ``2C`` (bounded).
    loss : {"cross_entropy", "mse"}, default="cross_entropy"
        Per-example loss (``mse`` for regression with float targets).
    chunk_size : int, default=64
        Repetitions trained together in one batch (memory: ``chunk_size *
        (|D| + 1) * parameters`` floats).
    """

    def __init__(
        self,
        model_factory: ModelFactory,
        neighbours: Neighbours,
        *,
        steps: int,
        lr: float,
        max_grad_norm: float,
        noise_multiplier: float,
        sensitivity: Sensitivity = "local",
        loss: LossName = "cross_entropy",
        chunk_size: int = 64,
    ) -> None:
        if steps < 1 or lr <= 0 or max_grad_norm <= 0 or noise_multiplier <= 0:
            raise ConfigError(
                f"need steps >= 1, lr > 0, max_grad_norm > 0, noise_multiplier > 0; "
                f"got steps={steps}, lr={lr}, max_grad_norm={max_grad_norm}, "
                f"noise_multiplier={noise_multiplier}"
            )
        if sensitivity not in ("local", "global"):
            raise ConfigError(
                f"sensitivity must be 'local' or 'global'; got {sensitivity!r}"
            )
        if loss not in ("cross_entropy", "mse"):
            raise ConfigError(f"loss must be 'cross_entropy' or 'mse'; got {loss!r}")
        if chunk_size < 1:
            raise ConfigError(f"chunk_size must be >= 1; got {chunk_size}")
        self.model_factory = model_factory
        self.neighbours = neighbours
        self.steps = int(steps)
        self.lr = float(lr)
        self.max_grad_norm = float(max_grad_norm)
        self.noise_multiplier = float(noise_multiplier)
        self.sensitivity: Sensitivity = sensitivity
        self.loss: LossName = loss
        self.chunk_size = int(chunk_size)

    @property
    def global_sensitivity(self) -> float:
        """``C`` for unbounded neighbours, ``2C`` for bounded ones (Section 5.1)."""
        return (2.0 if self.neighbours.bounded else 1.0) * self.max_grad_norm

    # ----------------------------------------------------------- internals
    def _records(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Return the records of ``D`` and the replacement (if bounded), and ``|D|``."""
        nb = self.neighbours
        xs = nb.x
        ys: NDArray[Any] = nb.y
        if nb.replacement_x is not None and nb.replacement_y is not None:
            xs = np.concatenate([xs, np.asarray(nb.replacement_x, xs.dtype)[None]])
            ys = np.concatenate([ys, [nb.replacement_y]])
        x = torch.as_tensor(np.ascontiguousarray(xs), dtype=torch.float32)
        if self.loss == "mse":
            y = torch.as_tensor(np.asarray(ys, dtype=np.float32))
        else:
            y = torch.as_tensor(np.asarray(ys, dtype=np.int64))
        return x, y, len(nb.x)

    def _loss_fn(self, base: nn.Module) -> Callable[..., torch.Tensor]:
        mse = self.loss == "mse"

        def one(
            params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
        ) -> torch.Tensor:
            out = functional_call(base, params, (x.unsqueeze(0),))
            if mse:
                return F.mse_loss(out.reshape(-1), y.reshape(-1))
            return F.cross_entropy(out, y.unsqueeze(0))

        return one

    def _clipped_sums(
        self, grads: dict[str, torch.Tensor], names: list[str], n: int
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Sum the clipped per-example gradients of ``D`` and ``D'`` (Algorithm 1).

        ``grads`` holds ``(R, |D| [+ 1], ...)`` per-example gradients of every
        repetition; the sums differ by the removed record (unbounded) or by it
        and its replacement, the last row (bounded).
        """
        reps, rows = grads[names[0]].shape[:2]
        flat = torch.cat([grads[k].reshape(reps, rows, -1) for k in names], dim=2)
        flat = flat.double()
        norms = flat.norm(dim=2, keepdim=True)
        clipped = flat * torch.clamp(self.max_grad_norm / (norms + 1e-12), max=1.0)
        g_d = clipped[:, :n].sum(dim=1)
        g_dp = g_d - clipped[:, self.neighbours.index]
        if self.neighbours.bounded:
            g_dp = g_dp + clipped[:, n]
        return g_d.numpy(), g_dp.numpy()

    def _run_chunk(
        self, seeds: list[np.random.SeedSequence], keep_gradients: bool
    ) -> dict[str, NDArray[Any]]:
        models = []
        for ss in seeds:
            init_seed = int(ss.generate_state(1)[0] & 0x7FFFFFFF)
            models.append(self.model_factory(init_seed))
        if any(True for _ in models[0].buffers()):
            raise ConfigError(
                "the audited model holds buffers (e.g. batch norm); use a model "
                "without them so per-example gradients are well defined"
            )
        params, _ = stack_module_state(models)
        params = {k: v.detach() for k, v in params.items()}
        base = copy.deepcopy(models[0]).to("meta")
        one = self._loss_fn(base)
        per_example = vmap(grad(one), in_dims=(None, 0, 0))
        per_rep = vmap(per_example, in_dims=(0, None, None))
        x, y, n = self._records()
        reps = len(seeds)
        rngs = [np.random.default_rng(ss.spawn(1)[0]) for ss in seeds]
        trained_on_d = np.array([bool(g.integers(2)) for g in rngs])
        log_odds = np.zeros(reps)
        hist_lo = np.zeros((reps, self.steps))
        hist_ls = np.zeros((reps, self.steps))
        hist_sigma = np.zeros((reps, self.steps))
        kept: dict[str, list[NDArray[np.float64]]] = {"r": [], "gd": [], "gdp": []}
        names = list(params)
        shapes = [params[k].shape[1:] for k in names]
        sizes = [int(math.prod(s)) for s in shapes]
        for t in range(self.steps):
            g_d_np, g_dp_np = self._clipped_sums(per_rep(params, x, y), names, n)
            local = np.linalg.norm(g_d_np - g_dp_np, axis=1)
            scale = (
                local
                if self.sensitivity == "local"
                else np.full(reps, self.global_sensitivity)
            )
            sigma = self.noise_multiplier * scale
            noise = np.stack([g.standard_normal(g_d_np.shape[1]) for g in rngs])
            released = (
                np.where(trained_on_d[:, None], g_d_np, g_dp_np)
                + sigma[:, None] * noise
            )
            log_odds = posterior_update(log_odds, released, g_d_np, g_dp_np, sigma)
            hist_lo[:, t], hist_ls[:, t], hist_sigma[:, t] = log_odds, local, sigma
            if keep_gradients:
                kept["r"].append(released)
                kept["gd"].append(g_d_np)
                kept["gdp"].append(g_dp_np)
            update = torch.as_tensor(released * (self.lr / n), dtype=torch.float32)
            for name, chunk, shape in zip(
                names, torch.split(update, sizes, dim=1), shapes, strict=True
            ):
                params[name] = params[name] - chunk.reshape(reps, *shape)
        ties = log_odds == 0
        coin = np.array([bool(g.integers(2)) for g in rngs])
        guess_d = np.where(ties, coin, log_odds > 0)
        mi_member, mi_loss = self._loss_adversary(base, params, x, y, n)
        out: dict[str, NDArray[Any]] = {
            "trained_on_d": trained_on_d,
            "log_odds": hist_lo,
            "local_sensitivity": hist_ls,
            "sigma": hist_sigma,
            "guess_d": guess_d,
            "mi_member": mi_member,
            "mi_loss": mi_loss,
        }
        if keep_gradients:
            out["released"] = np.stack(kept["r"], axis=1)
            out["mean_d"] = np.stack(kept["gd"], axis=1)
            out["mean_d_prime"] = np.stack(kept["gdp"], axis=1)
        return out

    def _loss_adversary(
        self,
        base: nn.Module,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        n: int,
    ) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """Yeom et al.'s loss-threshold MI guess on the differing record, per run.

        The adversary knows the final model and the records ``D`` and ``D'``
        share; it calls the differing record a member when its loss is below
        their average loss
        (:class:`fedleak.attacks.membership.classifier.LossThresholdAttack`
        calibrated on them; the same rule on the squared error for ``mse``).
        """
        idx = self.neighbours.index
        shared = np.arange(n) != idx
        with torch.no_grad():
            out = vmap(lambda p: functional_call(base, p, (x,)), in_dims=0)(params)
        if self.loss == "mse":
            losses = (out.reshape(out.shape[0], -1) - y).double().pow(2).numpy()
            threshold = losses[:, :n][:, shared].mean(axis=1)
            return losses[:, idx] <= threshold, losses[:, idx]
        from fedleak.attacks.membership.classifier import (
            LossThresholdAttack,
            loss_scores,
        )

        probs = torch.softmax(out.double(), dim=-1).numpy()
        labels = y.numpy()
        member = np.empty(probs.shape[0], dtype=bool)
        loss = np.empty(probs.shape[0])
        for rep, p in enumerate(probs):
            attack = LossThresholdAttack().calibrate(p[:n][shared], labels[:n][shared])
            member[rep] = bool(
                attack.predict(p[idx : idx + 1], labels[idx : idx + 1])[0]
            )
            loss[rep] = -float(loss_scores(p[idx : idx + 1], labels[idx : idx + 1])[0])
        return member, loss

    # --------------------------------------------------------------- public
    def run(
        self,
        repetitions: int,
        *,
        seed: int,
        keep_gradients: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> DITrace:
        """Train ``repetitions`` times, recording the adversary's beliefs (Exp. 2).

        Parameters
        ----------
        repetitions : int
            Independent trainings (fresh coin ``b``, initial weights, noise).
        seed : int
            Root seed; repetition ``i`` draws from the ``i``-th child of
            ``SeedSequence(seed)``, so results do not depend on ``chunk_size``.
        keep_gradients : bool, default=False
            Also return every observation and gradient sum (for tests and
            small audits: ``R * steps * P`` floats each).
        progress : callable, optional
            Called as ``progress(done, repetitions)`` after each chunk.

        Returns
        -------
        DITrace
        """
        if repetitions < 1:
            raise ConfigError(f"repetitions must be >= 1; got {repetitions}")
        children = np.random.SeedSequence(seed).spawn(repetitions)
        parts: list[dict[str, NDArray[Any]]] = []
        for start in range(0, repetitions, self.chunk_size):
            parts.append(
                self._run_chunk(
                    children[start : start + self.chunk_size], keep_gradients
                )
            )
            if progress is not None:
                progress(min(start + self.chunk_size, repetitions), repetitions)
        merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return DITrace(**merged)

    def audit(
        self,
        repetitions: int,
        *,
        seed: int,
        epsilon: float,
        delta: float,
        progress: Callable[[int, int], None] | None = None,
    ) -> AuditReport:
        """Run the experiment and compute seed 002's empirical scores (Sec. 5.2-5.3).

        Parameters
        ----------
        repetitions : int
            Number of trainings (the paper uses 1,000).
        seed : int
            Root seed.
        epsilon, delta : float
            The guarantee the noise multiplier was calibrated for (e.g. from
            :func:`fedleak.privacy.identifiability.plan_dp_sgd`); they set the
            bound ``rho_beta`` and the conversions to empirical epsilon.
        progress : callable, optional
            As in :meth:`run`.

        Returns
        -------
        AuditReport
        """
        trace = self.run(repetitions, seed=seed, progress=progress)
        return self.report(trace, epsilon=epsilon, delta=delta)

    def report(self, trace: DITrace, *, epsilon: float, delta: float) -> AuditReport:
        """Summarise a :class:`DITrace` (see :meth:`audit`)."""
        reps = len(trace.trained_on_d)
        rho_beta = posterior_belief_bound(epsilon)
        final = trace.belief_in_truth[:, -1]
        wins = int(trace.success.sum())
        low, high = _wilson(wins, reps)
        violations = int((final > rho_beta).sum())
        # (i) From the sensitivities: the realised privacy loss of each run is
        # a Gaussian mechanism with mu^2 = sum_t (LS_t / sigma_t)^2; convert
        # with the same tail bound that calibrated the noise; max over runs.
        ratio = np.divide(
            trace.local_sensitivity,
            trace.sigma,
            out=np.zeros_like(trace.sigma),
            where=trace.sigma > 0,
        )
        mu = float(np.sqrt((ratio**2).sum(axis=1)).max())
        eps_sens = posterior_tail_epsilon(1.0 / mu, 1, delta) if mu > 0 else 0.0
        # (ii) From the largest posterior belief, Eq. (10).
        top = float(final.max())
        eps_belief = float(logit(top)) if top < 1.0 else math.inf
        eps_belief = max(eps_belief, 0.0)
        # (iii) From the advantage.
        adv = 2.0 * wins / reps - 1.0
        if adv <= 0:
            eps_adv = eps_adv15 = 0.0
        elif adv >= 1:
            eps_adv = eps_adv15 = math.inf
        else:
            z = noise_multiplier_for_composed_advantage(adv, self.steps)
            eps_adv = posterior_tail_epsilon(z, self.steps, delta)
            eps_adv15 = epsilon_for_expected_advantage(adv, delta)
        member = trace.mi_member
        on_d = trace.trained_on_d
        tpr = float(member[on_d].mean()) if on_d.any() else 0.0
        fpr = float(member[~on_d].mean()) if (~on_d).any() else 0.0
        v_low, v_high = _wilson(violations, reps)
        return AuditReport(
            repetitions=reps,
            steps=self.steps,
            sensitivity=self.sensitivity,
            bounded=self.neighbours.bounded,
            noise_multiplier=self.noise_multiplier,
            epsilon=float(epsilon),
            delta=float(delta),
            rho_beta=rho_beta,
            rho_alpha=composed_gaussian_advantage(self.noise_multiplier, self.steps),
            success_rate=wins / reps,
            advantage=adv,
            advantage_ci=(2 * low - 1, 2 * high - 1),
            belief_violation_rate=violations / reps,
            belief_violation_ci=(v_low, v_high),
            max_belief=top,
            median_belief=float(np.median(final)),
            epsilon_from_sensitivity=eps_sens,
            epsilon_from_belief=eps_belief,
            epsilon_from_advantage=eps_adv,
            epsilon_from_advantage_eq15=eps_adv15,
            mi_advantage=tpr - fpr,
            mean_local_sensitivity=float(trace.local_sensitivity.mean()),
            global_sensitivity=self.global_sensitivity,
        )
