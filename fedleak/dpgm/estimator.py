"""DPGM, the differentially private mixture of generative models (Alg. 3).

``DPGM(k, epsilon=..., ...).fit(X, public=P).sample(n)``:

1. cluster ``X`` into ``k`` parts with private kernel k-means (Alg. 4; RBF
   random Fourier features, ``C_b = 1``, centres started on public records);
2. train one generative model per cluster (a VAE or a Bernoulli RBM) with
   DP-SGD (Alg. 5): each of the ``T_S`` steps picks model ``b`` with
   probability ``|X_b| / |X|``, takes a Poisson batch of rate ``L / |X_b|`` of
   its cluster (so every record is in a batch with probability ``q = L /
   |X|``), clips the per-sample gradients at the DPNorm bound (Alg. 6) or a
   fixed bound, and adds ``N(0, 2 sigma_G^2 C_b^2 I)``;
3. sample (Sec. 5.1.4): a component is picked in proportion to its (noisy,
   released) cluster size and generates one record; repeat.

The privacy spent is Theorem 5 (:func:`fedleak.privacy.accounting.dpgm_epsilon`);
given a target ``epsilon`` the gradient noise ``sigma_G`` is calibrated
before any work starts, and a budget the other mechanisms already exhaust is
refused with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ..errors import ConfigError, DataError
from ..privacy.accounting import dpgm_epsilon
from ..privacy.dpsgd import DPSGD, AdaptiveClipping, FixedClipping, torch_generator
from ..privacy.randomness import RngLike, check_rng
from ..validation import (
    check_delta,
    check_epsilon,
    check_int,
    check_option,
    check_positive,
)
from .components import ComponentKind, GenerativeComponent, make_component
from .kmeans import KMeansResult, private_kernel_kmeans

__all__ = ["DPGM", "calibrate_sigma_g"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class _Budget:
    q: float
    steps: int
    delta: float


def calibrate_sigma_g(
    epsilon: float,
    *,
    q: float,
    sgd_steps: int,
    delta: float,
    sigma_c: float | None,
    kmeans_iterations: int,
    sigma_k: float | None,
    lambdas: ArrayLike | None = None,
    tolerance: float = 1e-3,
) -> float:
    """Smallest ``sigma_G`` with Theorem 5's epsilon <= ``epsilon``.

    Bisection over ``sigma_G`` (epsilon falls as ``sigma_G`` grows); the upper
    end of the final bracket is returned, so the budget is never exceeded.

    Parameters
    ----------
    epsilon : float
        Target.
    q, sgd_steps, delta, sigma_c, kmeans_iterations, sigma_k, lambdas
        As in :func:`fedleak.privacy.accounting.dpgm_epsilon`.
    tolerance : float
        Relative width of the final bracket.

    Returns
    -------
    float

    Raises
    ------
    ConfigError
        If no ``sigma_G`` meets the budget: k-means and DPNorm alone spend it.
    """

    def spent(sigma_g: float) -> float:
        return dpgm_epsilon(
            q=q,
            sgd_steps=sgd_steps,
            sigma_g=sigma_g,
            sigma_c=sigma_c,
            kmeans_iterations=kmeans_iterations,
            sigma_k=sigma_k,
            delta=delta,
            lambdas=lambdas,
        )

    check_epsilon("epsilon", epsilon)
    floor = spent(1e6)
    if floor >= epsilon:
        raise ConfigError(
            f"DPGM cannot meet epsilon={epsilon} at delta={delta:.3g}: with "
            f"{kmeans_iterations} k-means iterations at sigma_k={sigma_k} and "
            f"DPNorm at sigma_c={sigma_c} over {sgd_steps} steps, the spend is "
            f"already {floor:.3f} before any gradient noise. Raise sigma_k or "
            "sigma_c, use fewer k-means iterations, fewer epochs or a smaller "
            "batch, fixed clipping, k=1, or a larger epsilon."
        )
    low, high = 0.05, 1.0
    while spent(high) > epsilon:
        low, high = high, 2.0 * high
    while high - low > tolerance * high:
        middle = 0.5 * (low + high)
        if spent(middle) > epsilon:
            low = middle
        else:
            high = middle
    return high


class DPGM(BaseEstimator):  # type: ignore[misc]
    """Differentially private mixture of generative models (seed 000 Alg. 3).

    A scikit-learn estimator: the constructor stores its parameters as given
    (``get_params``/``set_params``/``clone`` work), :meth:`fit` validates them
    and returns ``self``, and :meth:`sample` before :meth:`fit` raises
    :class:`sklearn.exceptions.NotFittedError`.

    Parameters
    ----------
    k : int
        Number of clusters / component models (1 skips clustering).
    component : {"vae", "vae2", "rbm"}
        One-layer VAE, two-layer VAE or Bernoulli RBM (200 hidden units).
    epsilon : float, optional
        Target epsilon; ``sigma_G`` is calibrated to it. Give this or
        ``sigma_g``.
    sigma_g : float, optional
        Gradient noise multiplier, if not calibrated from ``epsilon``.
    delta : float, optional
        Target delta; ``1 / |X|`` by default (the seed's convention).
    sigma_k : float
        k-means noise multiplier. The seed's Fig. 5.2 uses 4 to 16 with its
        Lemma 1 constant (half of the exact Gaussian moment, see
        :mod:`fedleak.privacy.accounting`); with the exact moment ``T_K = 20``
        iterations need ``sigma_k`` near 60 to leave room in a budget of 1.
    sigma_c : float
        DPNorm noise multiplier (seed: 4), used when ``adaptive_clipping``.
    adaptive_clipping : bool
        DPNorm per batch (Alg. 5) instead of the fixed ``max_grad_norm``.
    max_grad_norm : float
        Fixed clipping bound.
    c_max, bins : float, int
        DPNorm's ``C_max`` and ``w`` (seed: 10, 100).
    epochs : int
        ``T_S = epochs * ceil(|X| / batch_size)``.
    batch_size : int
        Expected batch size ``L``.
    lr : float, optional
        Learning rate; 1e-3 (Adam) for VAEs, 0.05 (SGD) for RBMs by default.
    kmeans_iterations : int
        ``T_K`` (seed: 20).
    rff_dim : int
        Random features ``d`` (seed: 200).
    gamma : float, optional
        RBF width; median heuristic on the public data by default.
    hidden, latent_dim : int
        Component sizes (seed: 200 hidden units, 2-d latent).
    density_prior : float, optional
        Public prior share of ones per feature (e.g. a published average
        ``||x||_1 / m``) used to start the output biases; free of privacy
        cost (see :func:`~fedleak.dpgm.components.make_component`).
    lambdas : array_like, optional
        Moment orders for Theorem 5 (seed: integers up to 32).
    seed : int, optional
        Seed of everything (clustering, initial weights, sampling, noise).
    progress : bool or callable
        ``True`` shows a rich progress bar on stderr; a callable is called as
        ``progress(phase, done, total)``.

    Attributes
    ----------
    epsilon_ : float
        Privacy spent (Theorem 5) for ``delta_``.
    delta_ : float
    sigma_g_ : float
        The gradient noise multiplier used.
    steps_ : int
        ``T_S``.
    weights_ : numpy.ndarray
        Sampling weights of the components (noisy cluster sizes, normalised).
    clustering_ : KMeansResult or None
        The private clustering (``None`` for ``k = 1``).
    components_ : list
        The trained component models.
    clip_norms_ : list of float
        The clipping bound of every step.
    """

    def __init__(
        self,
        k: int = 10,
        *,
        component: ComponentKind = "vae",
        epsilon: float | None = None,
        sigma_g: float | None = None,
        delta: float | None = None,
        sigma_k: float = 60.0,
        sigma_c: float = 8.0,
        adaptive_clipping: bool = True,
        max_grad_norm: float = 1.0,
        c_max: float = 10.0,
        bins: int = 100,
        epochs: int = 20,
        batch_size: int = 64,
        lr: float | None = None,
        kmeans_iterations: int = 20,
        rff_dim: int = 200,
        gamma: float | None = None,
        hidden: int = 200,
        latent_dim: int = 2,
        density_prior: float | None = None,
        lambdas: ArrayLike | None = None,
        seed: int | None = None,
        progress: bool | Progress = False,
    ) -> None:
        self.k = k
        self.component = component
        self.epsilon = epsilon
        self.sigma_g = sigma_g
        self.delta = delta
        self.sigma_k = sigma_k
        self.sigma_c = sigma_c
        self.adaptive_clipping = adaptive_clipping
        self.max_grad_norm = max_grad_norm
        self.c_max = c_max
        self.bins = bins
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.kmeans_iterations = kmeans_iterations
        self.rff_dim = rff_dim
        self.gamma = gamma
        self.hidden = hidden
        self.latent_dim = latent_dim
        self.density_prior = density_prior
        self.lambdas = lambdas
        self.seed = seed
        self.progress = progress

    # ------------------------------------------------------------ validation
    def _check(self, n: int) -> _Budget:
        check_int("k", self.k, low=1, high=n)
        check_option("component", self.component, ("vae", "vae2", "rbm"))
        if (self.epsilon is None) == (self.sigma_g is None):
            raise ConfigError(
                "give exactly one of epsilon (a target budget) and sigma_g "
                "(a gradient noise multiplier)."
            )
        check_int("epochs", self.epochs, low=1)
        check_int("batch_size", self.batch_size, low=1, high=n)
        check_int("kmeans_iterations", self.kmeans_iterations, low=0)
        delta = 1.0 / n if self.delta is None else check_delta("delta", self.delta)
        steps = self.epochs * math.ceil(n / self.batch_size)
        return _Budget(q=self.batch_size / n, steps=steps, delta=delta)

    def _kmeans_iterations(self) -> int:
        return self.kmeans_iterations if self.k > 1 else 0

    def _sigma_c(self) -> float | None:
        return self.sigma_c if self.adaptive_clipping else None

    def _resolve_sigma_g(self, budget: _Budget) -> float:
        if self.sigma_g is not None:
            return check_positive("sigma_g", self.sigma_g)
        return calibrate_sigma_g(
            float(self.epsilon or 0.0),
            q=budget.q,
            sgd_steps=budget.steps,
            delta=budget.delta,
            sigma_c=self._sigma_c(),
            kmeans_iterations=self._kmeans_iterations(),
            sigma_k=self.sigma_k,
            lambdas=self.lambdas,
        )

    # ------------------------------------------------------------------- fit
    def fit(self, X: ArrayLike, public: ArrayLike | None = None) -> Self:
        """Cluster ``X`` privately and train the component models.

        Parameters
        ----------
        X : array_like
            ``(n, m)`` records with values in ``[0, 1]`` (binary item sets or
            binarised images).
        public : array_like, optional
            Public records from the same distribution (not in ``X``); needed
            for ``k > 1`` to start the centres (Alg. 4 line 7).

        Returns
        -------
        DPGM
            ``self``.

        Raises
        ------
        DataError
            If ``X`` is not a non-empty 2-d array in ``[0, 1]``.
        ConfigError
            If a parameter is invalid or the budget cannot be met (raised
            before any training).
        """
        data = np.asarray(X, dtype=np.float32)
        if data.ndim != 2 or data.shape[0] < 2:
            raise DataError(f"X must be 2-d with >= 2 records; got shape {data.shape}.")
        if data.min() < 0 or data.max() > 1:
            raise DataError("X must hold values in [0, 1] (binary or binarised data).")
        n = data.shape[0]
        budget = self._check(n)
        if self.k > 1 and public is None:
            raise ConfigError(
                "private kernel k-means starts its centres on public records "
                "(Alg. 4 line 7): pass public=... (records from the same "
                "distribution, not in X), or use k=1."
            )
        sigma_g = self._resolve_sigma_g(budget)
        rng = check_rng(self.seed)
        report = self._reporter()
        labels, weights = self._cluster(data, public, rng)
        components = [
            make_component(
                self.component,
                data.shape[1],
                hidden=self.hidden,
                latent_dim=self.latent_dim,
                density_prior=self.density_prior,
                seed=int(rng.integers(0, 2**31 - 1)),
            )
            for _ in range(self.k)
        ]
        members = [np.flatnonzero(labels == b) for b in range(self.k)]
        clip_norms = self._train(
            data, members, components, sigma_g, budget, rng, report
        )
        self.sigma_g_ = sigma_g
        self.steps_ = budget.steps
        self.delta_ = budget.delta
        self.epsilon_ = dpgm_epsilon(
            q=budget.q,
            sgd_steps=budget.steps,
            sigma_g=sigma_g,
            sigma_c=self._sigma_c(),
            kmeans_iterations=self._kmeans_iterations(),
            sigma_k=self.sigma_k,
            delta=budget.delta,
            lambdas=self.lambdas,
        )
        self.weights_ = weights
        self.components_ = components
        self.clip_norms_ = clip_norms
        self.n_features_in_ = data.shape[1]
        self.n_samples_fit_ = n
        self._sample_rng = rng
        return self

    def _reporter(self) -> Progress | None:
        if callable(self.progress):
            return self.progress
        return _rich_progress() if self.progress else None

    def _cluster(
        self,
        data: NDArray[np.float32],
        public: ArrayLike | None,
        rng: np.random.Generator,
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        if self.k == 1:
            self.clustering_: KMeansResult | None = None
            return np.zeros(data.shape[0], dtype=np.int64), np.ones(1)
        result = private_kernel_kmeans(
            data,
            self.k,
            public=np.asarray(public),
            sigma_k=self.sigma_k,
            iterations=self.kmeans_iterations,
            d=self.rff_dim,
            gamma=self.gamma,
            seed=rng,
        )
        self.clustering_ = result
        sizes = np.maximum(result.noisy_sizes, 0.0)
        weights = (
            sizes / sizes.sum() if sizes.sum() > 0 else np.full(self.k, 1 / self.k)
        )
        return result.labels, weights

    def _train(
        self,
        data: NDArray[np.float32],
        members: list[NDArray[np.int64]],
        components: list[GenerativeComponent],
        sigma_g: float,
        budget: _Budget,
        rng: np.random.Generator,
        report: Progress | None,
    ) -> list[float]:
        vae = self.component != "rbm"
        lr = self.lr if self.lr is not None else (1e-3 if vae else 0.05)
        clipping: AdaptiveClipping | FixedClipping = (
            AdaptiveClipping(self.sigma_c, self.c_max, self.bins)
            if self.adaptive_clipping
            else FixedClipping(self.max_grad_norm)
        )
        trainers = [
            DPSGD(
                c.module,
                noise_multiplier=sigma_g,
                clipping=clipping,
                expected_batch_size=self.batch_size,
                lr=lr,
                optimizer="adam" if vae else "sgd",
                neighbouring="replace_one",
                rng=rng,
            )
            for c in components
        ]
        generator = torch_generator(rng)
        x = torch.from_numpy(data)
        n = data.shape[0]
        sizes = np.array([m.size for m in members], dtype=np.float64)
        clip_norms: list[float] = []
        for c in components:
            c.module.train()
        try:
            for step in range(budget.steps):
                b = int(rng.choice(self.k, p=sizes / n))
                rate = min(1.0, self.batch_size / sizes[b])
                batch = members[b][rng.random(members[b].size) < rate]
                loss = _batch_loss(components[b], x[torch.from_numpy(batch)], generator)
                stepped = trainers[b].step(loss if batch.size else None)
                clip_norms.append(stepped.clip_norm)
                done = step + 1
                if report is not None and (done % 10 == 0 or done == budget.steps):
                    report("train", done, budget.steps)
        finally:
            for t in trainers:
                t.close()
        for c in components:
            c.module.eval()
        return clip_norms

    # ---------------------------------------------------------------- sample
    def sample(
        self, n: int | None = None, *, binary: bool = True, seed: RngLike = None
    ) -> NDArray[np.float32]:
        """Generate records (Sec. 5.1.4).

        Parameters
        ----------
        n : int, optional
            Number of records; ``|X|`` by default (as the seed).
        binary : bool
            0/1 records (for counting queries) or the models' probabilities
            (for pictures).
        seed : numpy.random.Generator, int or None
            Seed of the sampling; by default the fit's generator continues.

        Returns
        -------
        numpy.ndarray
            ``(n, m)`` float32 records; components are picked in proportion
            to ``weights_`` and the rows are shuffled.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit`.
        """
        check_is_fitted(self, "components_")
        count = self.n_samples_fit_ if n is None else check_int("n", n, low=0)
        rng = self._sample_rng if seed is None else check_rng(seed)
        k = len(self.components_)
        picks = rng.choice(k, size=count, p=self.weights_)
        generator = torch_generator(rng)
        out = np.zeros((count, self.n_features_in_), dtype=np.float32)
        for b in range(k):
            rows = np.flatnonzero(picks == b)
            if rows.size:
                out[rows] = (
                    self.components_[b]
                    .sample(rows.size, generator, binary=binary)
                    .numpy()
                )
        return out

    def sample_component(
        self, b: int, n: int, *, binary: bool = False, seed: RngLike = None
    ) -> NDArray[np.float32]:
        """Generate ``n`` records from component ``b`` alone (Fig. 5.4 rows).

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit`.
        """
        check_is_fitted(self, "components_")
        check_int("b", b, low=0, high=len(self.components_) - 1)
        rng = self._sample_rng if seed is None else check_rng(seed)
        samples = self.components_[b].sample(n, torch_generator(rng), binary=binary)
        result: NDArray[np.float32] = samples.numpy().astype(np.float32)
        return result


def _batch_loss(
    component: GenerativeComponent, batch: torch.Tensor, generator: torch.Generator
) -> Callable[[], torch.Tensor]:
    def loss() -> torch.Tensor:
        return component.per_sample_loss(batch, generator)

    return loss


def _rich_progress() -> Progress:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
    )

    bar = Progress(
        TextColumn("DPGM {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    tasks: dict[str, TaskID] = {}

    def report(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            if not tasks:
                bar.start()
            tasks[phase] = bar.add_task(phase, total=total)
        bar.update(tasks[phase], completed=done)
        if done >= total:
            bar.stop()

    return report
