"""Latent metric-privacy synthetic data: seed 003's privacy-preserving framework.

The framework (PPGF, seed 003 Section 4) turns a labelled source dataset into
a synthetic one that a downstream model can be trained on instead:

1. **Extractor and reconstructor** (Section 4.2): a VAE trained on the source
   data (:class:`fedleak.generative.VAE`; 784-400-20 for 28x28 images,
   seed 003 Table C1). The extractor maps ``x`` to a latent code ``z`` drawn
   from the encoder's ``q(z|x)``; the reconstructor is the decoder.
2. **Noise in the latent space** (Section 4.3, Theorem 1, Algorithm 1): the
   mechanism with density ``p(z'|z) proportional to exp(-epsilon d_2(z, z'))``
   satisfies ``epsilon d_2``-privacy (d_x-privacy, Chatzikokolakis et al.
   2013). In ``k`` dimensions its radius ``||z' - z||`` follows the marginal
   ``r^(k-1) exp(-epsilon r)``, i.e. ``Gamma(k, scale=1/epsilon)``
   (Appendix B), and its direction is uniform on the unit sphere
   (:func:`dx_noise`).
3. **Label transfer** (Section 4.4, Algorithm 2): a classifier trained on the
   source codes and labels labels each noisy code ``z'``
   (:class:`LabelTransfer`).

By post-processing (Corollary 1, Theorem 3) the synthetic records are
``epsilon d_2``-private in the latent space: two source records whose codes
are ``d`` apart are ``e^(epsilon d)``-indistinguishable. The *empirical
sensitivity* (Section 4.3, Definition 2: the largest distance between codes,
estimated by the empirical rule because each latent dimension is close to a
Gaussian) turns this into a DP-like statement: any two records of the data
are ``epsilon * sensitivity``-indistinguishable
(:attr:`SyntheticData.epsilon_dp`). With ``scale_by_sensitivity=True`` the
noise is instead calibrated so that ``epsilon`` itself is that bound.

:func:`synthesize` runs the whole pipeline; :class:`LatentSynthesizer` keeps
the trained VAE and label model to synthesise at several epsilons.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch
from numpy.typing import NDArray
from scipy.spatial.distance import pdist
from sklearn.base import BaseEstimator, clone
from sklearn.utils.validation import check_is_fitted

from ..errors import ConfigError, DataError
from ..generative import VAE, train_vae
from ..validation import check_epsilon, check_int, check_option, check_positive

__all__ = [
    "LabelTransfer",
    "LatentSynthesizer",
    "SyntheticData",
    "dx_noise",
    "dx_privatize",
    "empirical_sensitivity",
    "synthesize",
]

SensitivityRule = Literal["empirical_rule", "max_pairwise"]


class _Classifier(Protocol):
    def fit(self, x: Any, y: Any) -> Any: ...

    def predict(self, x: Any) -> Any: ...


def dx_noise(
    n: int, k: int, epsilon: float, rng: np.random.Generator, *, scale: float = 1.0
) -> NDArray[np.float64]:
    """Draw ``n`` noise vectors of the ``k``-dim. d_x mechanism (seed 003 Alg. 1).

    Radius ``r ~ Gamma(k, scale / epsilon)`` (the marginal of Eq. 4, Appendix
    B) times a direction uniform on the unit ``(k-1)``-sphere (a normalised
    standard Gaussian vector). Adding it to ``z`` samples ``z'`` with density
    proportional to ``exp(-(epsilon / scale) ||z' - z||)``.

    Parameters
    ----------
    n, k : int
        Number of vectors and dimension.
    epsilon : float
        Privacy level per unit of ``scale``, ``> 0``; ``math.inf`` gives zeros.
    rng : numpy.random.Generator
        Source of randomness.
    scale : float, default=1.0
        Distance unit (e.g. the sensitivity).

    Returns
    -------
    numpy.ndarray
        Shape ``(n, k)``.
    """
    eps = check_epsilon("epsilon", epsilon, allow_inf=True)
    check_int("n", n, low=0)
    check_int("k", k, low=1)
    check_positive("scale", scale)
    if math.isinf(eps):
        return np.zeros((n, k))
    direction = rng.standard_normal((n, k))
    norms = np.linalg.norm(direction, axis=1, keepdims=True)
    direction /= np.where(norms > 0, norms, 1.0)
    radius = rng.gamma(shape=k, scale=scale / eps, size=(n, 1))
    return np.asarray(radius * direction, dtype=np.float64)


def dx_privatize(
    codes: NDArray[np.floating],
    epsilon: float,
    rng: np.random.Generator,
    *,
    scale: float = 1.0,
) -> NDArray[np.float64]:
    """Return ``codes + dx_noise`` row by row (seed 003 Algorithm 1)."""
    z = np.asarray(codes, dtype=np.float64)
    if z.ndim != 2:
        raise DataError(f"codes must be a 2-d array (n, k); got shape {z.shape}")
    return z + dx_noise(z.shape[0], z.shape[1], epsilon, rng, scale=scale)


def empirical_sensitivity(
    codes: NDArray[np.floating],
    rule: SensitivityRule = "empirical_rule",
    *,
    num_std: float = 3.0,
) -> float:
    """Estimate the largest distance between latent codes (seed 003 Definition 2).

    ``"empirical_rule"`` (seed 003 Section 4.3): each dimension of a
    well-trained VAE's code is close to a Gaussian, so 99.7 % of its values
    lie within ``mean +- 3 std``; the sensitivity is the diagonal of that box,
    ``||2 * num_std * std||_2``. ``"max_pairwise"``: the exact largest
    Euclidean distance between two of the given codes (``scipy`` ``pdist``,
    quadratic in ``n``).

    Parameters
    ----------
    codes : numpy.ndarray
        Latent codes ``(n, k)``.
    rule : {"empirical_rule", "max_pairwise"}
        Estimator.
    num_std : float, default=3.0
        Half-width of the box in standard deviations (empirical rule).

    Returns
    -------
    float
    """
    z = np.asarray(codes, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] < 2:
        raise DataError(f"need at least two codes of shape (n, k); got {z.shape}")
    if rule == "empirical_rule":
        return float(np.linalg.norm(2.0 * num_std * z.std(axis=0)))
    if rule == "max_pairwise":
        return float(pdist(z).max())
    raise ConfigError(
        f"rule must be one of 'empirical_rule', 'max_pairwise'; got {rule!r}."
    )


class LabelTransfer(BaseEstimator):  # type: ignore[misc]
    """Seed 003's model-driven label transfer (Algorithm 2).

    A classifier fitted on the source records' latent codes and labels
    labels the noisy codes the synthetic records are decoded from. A
    scikit-learn estimator: ``classifier`` is stored as given and
    :meth:`fit` trains a copy of it (``sklearn.base.clone``), so the
    caller's object is never fitted in place.

    Parameters
    ----------
    classifier : scikit-learn classifier, optional
        Any object with ``fit`` and ``predict``; ``None`` means a multinomial
        ``LogisticRegression(max_iter=2000)`` (the codes are low-dimensional
        and close to Gaussian, so a linear model suffices).

    Attributes
    ----------
    classifier_ : scikit-learn classifier
        The fitted copy.
    """

    def __init__(self, classifier: _Classifier | None = None) -> None:
        self.classifier = classifier

    def fit(
        self, codes: NDArray[np.floating], labels: NDArray[np.integer]
    ) -> LabelTransfer:
        """Fit on source codes ``(n, k)`` and labels ``(n,)``; return ``self``."""
        if self.classifier is None:
            from sklearn.linear_model import LogisticRegression

            model: _Classifier = LogisticRegression(max_iter=2000)
        else:
            model = clone(self.classifier, safe=False)
        model.fit(np.asarray(codes), np.asarray(labels))
        self.classifier_ = model
        return self

    def predict(self, codes: NDArray[np.floating]) -> NDArray[np.int64]:
        """Label (noisy) codes.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit`.
        """
        check_is_fitted(self, "classifier_")
        return np.asarray(self.classifier_.predict(np.asarray(codes)), dtype=np.int64)


@dataclass(frozen=True)
class SyntheticData:
    """Synthetic records and what produced them.

    Attributes
    ----------
    x, y : numpy.ndarray
        Synthetic records (same shape as the source) and transferred labels.
    epsilon : float
        The d_x privacy level of the noise (per unit of ``noise_scale``).
    noise_scale : float
        Distance unit of the noise: 1 (seed 003's ``epsilon d_2``) or the
        sensitivity (``scale_by_sensitivity=True``).
    sensitivity : float
        Empirical sensitivity of the source codes.
    epsilon_dp : float
        ``epsilon * sensitivity / noise_scale``: the indistinguishability of
        any two source records whose codes are at most ``sensitivity`` apart.
    label_agreement : float
        Fraction of synthetic labels equal to the source record's label.
    """

    x: NDArray[np.float32]
    y: NDArray[np.int64]
    epsilon: float
    noise_scale: float
    sensitivity: float
    epsilon_dp: float
    label_agreement: float


class LatentSynthesizer(BaseEstimator):  # type: ignore[misc]
    """Seed 003's PPGF: VAE extractor/reconstructor + d_x noise + label transfer.

    A scikit-learn estimator: the constructor stores its parameters as given
    (``get_params``/``set_params``/``clone`` work), :meth:`fit` trains and
    returns ``self``, and :meth:`synthesize` before :meth:`fit` raises
    :class:`sklearn.exceptions.NotFittedError`.

    Parameters
    ----------
    hidden : sequence of int, default=(400,)
        VAE hidden widths (seed 003 Table C1: 784-400-20).
    latent_dim : int, default=20
        ``k``.
    epochs, batch_size, lr : int, int, float
        VAE training (Adam).
    sensitivity_rule : {"empirical_rule", "max_pairwise"}
        See :func:`empirical_sensitivity`.
    scale_by_sensitivity : bool, default=False
        Measure distances in units of the sensitivity, so that ``epsilon``
        bounds the indistinguishability of any two source records.
    label_classifier : scikit-learn classifier, optional
        For :class:`LabelTransfer` (cloned, never fitted in place).

    Attributes
    ----------
    vae_ : fedleak.generative.VAE
        The trained extractor (encoder) and reconstructor (decoder).
    sensitivity_ : float
        Empirical sensitivity of the source codes.
    label_transfer_ : LabelTransfer
        The fitted label model.
    record_shape_ : tuple of int
        Shape of one source record.
    """

    def __init__(
        self,
        *,
        hidden: Sequence[int] = (400,),
        latent_dim: int = 20,
        epochs: int = 10,
        batch_size: int = 128,
        lr: float = 1e-3,
        sensitivity_rule: SensitivityRule = "empirical_rule",
        scale_by_sensitivity: bool = False,
        label_classifier: _Classifier | None = None,
    ) -> None:
        self.hidden = hidden
        self.latent_dim = latent_dim
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.sensitivity_rule = sensitivity_rule
        self.scale_by_sensitivity = scale_by_sensitivity
        self.label_classifier = label_classifier

    @property
    def sensitivity(self) -> float:
        """The fitted :attr:`sensitivity_` (a read-only alias)."""
        check_is_fitted(self, "sensitivity_")
        return float(self.sensitivity_)

    def _codes(
        self, x: NDArray[np.floating], generator: torch.Generator
    ) -> NDArray[np.float64]:
        """Draw ``z ~ q(z|x)`` for every record (the extractor ``E``)."""
        with torch.no_grad():
            flat = torch.as_tensor(np.asarray(x, np.float32).reshape(len(x), -1))
            mu, logvar = self.vae_.encode(flat)
            z = self.vae_.reparameterize(mu, logvar, generator)
        return z.double().numpy()

    def fit(
        self, x: NDArray[np.floating], y: NDArray[np.integer], *, seed: int = 0
    ) -> LatentSynthesizer:
        """Train the VAE, record the source codes, fit the label model (stages 1 and 3).

        Parameters
        ----------
        x : numpy.ndarray
            Source records ``(n, ...)`` with values in ``[0, 1]``.
        y : numpy.ndarray
            Integer labels ``(n,)``.
        seed : int, default=0
            Seeds the VAE initialisation, its training and the code sampling.

        Returns
        -------
        LatentSynthesizer
            ``self``.

        Raises
        ------
        ConfigError
            If a parameter is invalid (before any training).
        DataError
            If the records or labels are malformed.
        """
        check_option(
            "sensitivity_rule",
            self.sensitivity_rule,
            ("empirical_rule", "max_pairwise"),
        )
        xs = np.array(x, dtype=np.float32)  # a writable copy for torch
        ys = np.asarray(y, dtype=np.int64)
        if len(xs) != len(ys) or len(xs) < 2:
            raise DataError(
                f"need >= 2 records with one label each; got {len(xs)} and {len(ys)}"
            )
        if xs.min() < 0 or xs.max() > 1:
            raise DataError("records must have values in [0, 1] (the VAE is Bernoulli)")
        shape = tuple(int(size) for size in xs.shape[1:])
        vae = VAE(
            int(np.prod(shape)),
            hidden=tuple(self.hidden),
            latent_dim=self.latent_dim,
            seed=seed,
        )
        train_vae(
            vae,
            xs.reshape(len(xs), -1),
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            seed=seed,
        )
        self.vae_ = vae
        self.record_shape_ = shape
        codes = self._codes(xs, torch.Generator().manual_seed(seed + 1))
        self.sensitivity_ = empirical_sensitivity(codes, self.sensitivity_rule)
        self.label_transfer_ = LabelTransfer(self.label_classifier).fit(codes, ys)
        return self

    def synthesize(
        self,
        x: NDArray[np.floating],
        y: NDArray[np.integer],
        epsilon: float,
        *,
        seed: int = 0,
    ) -> SyntheticData:
        """Turn records into synthetic ones at privacy level ``epsilon`` (stage 2).

        Parameters
        ----------
        x, y : numpy.ndarray
            Records to transform (usually the fitted source) and their labels
            (used only to report ``label_agreement``).
        epsilon : float
            d_x privacy level, ``> 0``; ``math.inf`` gives the non-private
            reconstructions (seed 003's N-PPGF baseline).
        seed : int, default=0
            Seeds the code sampling and the noise.

        Returns
        -------
        SyntheticData

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit`.
        """
        eps = check_epsilon("epsilon", epsilon, allow_inf=True)
        check_is_fitted(self, "vae_")
        xs = np.array(x, dtype=np.float32)
        if xs.shape[1:] != self.record_shape_:
            raise DataError(
                f"records have shape {xs.shape[1:]}, the VAE was fitted on "
                f"{self.record_shape_}"
            )
        ss = np.random.SeedSequence(seed)
        torch_seed, noise_seed = ss.generate_state(2)
        codes = self._codes(xs, torch.Generator().manual_seed(int(torch_seed)))
        scale = self.sensitivity_ if self.scale_by_sensitivity else 1.0
        noisy = dx_privatize(codes, eps, np.random.default_rng(noise_seed), scale=scale)
        with torch.no_grad():
            decoded = self.vae_.decode(torch.as_tensor(noisy, dtype=torch.float32))
        labels = self.label_transfer_.predict(noisy)
        agreement = float(np.mean(labels == np.asarray(y, dtype=np.int64)))
        return SyntheticData(
            x=decoded.numpy().reshape(len(xs), *self.record_shape_).astype(np.float32),
            y=labels,
            epsilon=eps,
            noise_scale=scale,
            sensitivity=self.sensitivity_,
            epsilon_dp=eps * self.sensitivity_ / scale,
            label_agreement=agreement,
        )


def synthesize(
    x: NDArray[np.floating],
    y: NDArray[np.integer],
    epsilon: float,
    *,
    seed: int = 0,
    **options: Any,
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """Seed 003's pipeline in one call: ``(X, y, epsilon) -> (X_syn, y_syn)``.

    Fits a :class:`LatentSynthesizer` (``options`` are its keyword
    arguments) on ``(x, y)`` and synthesises one record per source record.

    Parameters
    ----------
    x : numpy.ndarray
        Source records ``(n, ...)`` in ``[0, 1]``.
    y : numpy.ndarray
        Integer labels.
    epsilon : float
        d_x privacy level (``math.inf``: non-private reconstructions).
    seed : int, default=0
        Seeds everything.
    **options
        Passed to :class:`LatentSynthesizer`.

    Returns
    -------
    tuple of numpy.ndarray
        Synthetic records (same shape as ``x``) and labels.
    """
    synth = LatentSynthesizer(**options).fit(x, y, seed=seed)
    data = synth.synthesize(x, y, epsilon, seed=seed + 1)
    return data.x, data.y
