"""Passive property inference from gradient updates (seed 000 Ch. 7.1.4, Alg. 7).

The adversary of Ch. 7.1.2 derives, from consecutive global models, the
aggregate update of the other participants, ``g_obs = dtheta_t - dtheta_adv_t``.
Alongside, every round it computes gradients at the current model on
auxiliary batches with and without the property (Alg. 7, lines 6-9). This
module turns both into feature vectors, trains the batch property classifier
``f_prop`` (Alg. 7, line 11) and scores the observations:

- :func:`gradient_features`: global max pooling of each layer's update, as in
  the seed ("we apply the global max pooling operator on the observed
  gradient updates"), the raw flattened update for small models, or the
  bag of words of an embedding layer's update (its non-zero rows, Ch. 7.1.2);
- :class:`BatchPropertyClassifier`: a scikit-learn estimator wrapping a random
  forest of 50 trees (the seed's best classifier for image models) or a
  logistic regression (the seed's choice for embedding-layer gradients);
- :func:`single_batch_auc`, :func:`dataset_score` (mean score over rounds:
  inference about the target's whole dataset) and :func:`score_series` (the
  per-round scores that show *when* a property occurs, Ch. 7.2.4);
- :class:`PropertyObservations` and :class:`ObservationLog`: what the
  adversary saw, persisted one file per round so a run can be re-scored
  offline without re-training.

Nothing here imports Flower or torch: the inputs are NumPy arrays.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, cast

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer, StandardScaler
from sklearn.utils.validation import check_is_fitted

from fedleak.errors import ConfigError, DataError
from fedleak.validation import check_int, check_option, check_positive

__all__ = [
    "CLASSIFIER_KINDS",
    "POOLINGS",
    "BatchPropertyClassifier",
    "ObservationLog",
    "PropertyObservations",
    "cross_validated_scores",
    "dataset_score",
    "gradient_features",
    "load_observations",
    "score_series",
    "single_batch_auc",
]

Pooling = Literal["max", "raw", "bow"]
POOLINGS: Final[tuple[str, ...]] = ("max", "raw", "bow")
"""Feature extractions :func:`gradient_features` knows."""

CLASSIFIER_KINDS: Final[tuple[str, ...]] = ("random-forest", "logistic")
"""Classifiers :class:`BatchPropertyClassifier` can wrap."""

_ROUND_FILE = "round-{:06d}.npz"


def gradient_features(
    update: Mapping[str, np.ndarray],
    pooling: str = "max",
    *,
    layers: Sequence[str] | None = None,
    bow_tolerance: float = 1e-4,
) -> np.ndarray:
    """Turn one (aggregate) gradient update into a feature vector.

    Seed 000 Ch. 7.1.4: "the number of the features is [...] equal to the
    model's parameters [...]. To downsample the features representation, we
    apply the global max pooling operator on the observed gradient updates."

    Parameters
    ----------
    update : mapping of str to numpy.ndarray
        The update of every layer, keyed like the model's parameters, in the
        model's order (a ``dict`` keeps it).
    pooling : {"max", "raw", "bow"}, default="max"
        ``"max"``: global max pooling of each tensor over every axis but the
        first, i.e. one feature per output unit (a filter of a convolution, a
        row of a fully connected weight); a 1-D tensor (a bias) is kept as it
        is. A ``(out, in, kh, kw)`` convolution weight gives ``out`` features,
        an ``(out, in)`` weight ``out``. ``"raw"``: every entry, flattened
        (for small models only). ``"bow"``: for an embedding matrix
        ``(|V|, d)``, 1.0 for every row (word) with a non-zero update and 0.0
        otherwise -- the batch's bag of words that the sparse embedding
        gradient reveals (Ch. 7.1.2); 1-D tensors as for ``"max"``.
    layers : sequence of str, optional
        Use only these tensors (e.g. the embedding layer's gradient for text
        models); default every tensor of ``update``.
    bow_tolerance : float, default=1e-4
        ``"bow"``: a row counts as non-zero when its largest magnitude exceeds
        this fraction of the tensor's largest magnitude, so the float32
        rounding left in an update derived from two models (rows only the
        adversary touched) is not mistaken for a word. The cut is relative:
        late in training it also drops words whose update is small (in the
        text experiment about 43% of a 32-record batch's words by round
        1,000, where float32 itself lost about 31%). For the exact bag of a
        round, read the two models with
        :meth:`fedleak.attacks.membership.EmbeddingMembership.observe`
        (:mod:`fedleak.attacks.property.text` does).

    Returns
    -------
    numpy.ndarray
        1-D float64 feature vector; its layout depends only on the tensors'
        names and shapes.

    Raises
    ------
    ConfigError
        If ``pooling`` is unknown or a requested layer is missing.
    DataError
        If ``update`` holds no tensor.
    """
    check_option("pooling", pooling, POOLINGS)
    names = list(update) if layers is None else list(layers)
    missing = [name for name in names if name not in update]
    if missing:
        raise ConfigError(f"the update has no tensor(s) {missing}; have {list(update)}")
    if not names:
        raise DataError("the update holds no tensor to extract features from")
    parts: list[np.ndarray] = []
    for name in names:
        tensor = np.asarray(update[name], dtype=np.float64)
        if pooling == "raw" or tensor.ndim <= 1:
            parts.append(tensor.reshape(-1))
        elif pooling == "bow":
            rows = np.abs(tensor.reshape(tensor.shape[0], -1)).max(axis=1)
            cut = bow_tolerance * float(rows.max()) if rows.size else 0.0
            parts.append((rows > cut).astype(np.float64))
        else:
            parts.append(tensor.reshape(tensor.shape[0], -1).max(axis=1))
    return np.concatenate(parts)


class BatchPropertyClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """The batch property classifier ``f_prop`` of seed 000 Alg. 7 (line 11).

    A scikit-learn estimator: label 1 is "the batch (aggregate) has the
    property", 0 "it does not"; :meth:`predict_proba` ``[:, 1]`` is the score in
    ``[0, 1]`` of Ch. 7.1.4.

    Parameters
    ----------
    kind : {"random-forest", "logistic"}, default="random-forest"
        The seed found random forests with 50 trees best for gradient
        features of image models and used logistic regression for
        embedding-layer gradients (Ch. 7.1.4). The logistic regression runs
        on standardised features.
    n_estimators : int, default=50
        Trees of the random forest.
    C : float, default=1.0
        Inverse L2 regularisation of the logistic regression.
    random_state : int, default=0
        Seed of the forest's bootstrap and feature sampling.
    normalize : bool, default=False
        Scale every feature row to unit L2 norm first. Max pooling is
        positively homogeneous, so this equals normalising the update itself:
        the classifier then sees the update's direction only, which keeps it
        valid when the observed aggregate sums a different number of updates
        than the emulated ones (a participant joining or leaving, Fig. 7.9).

    Attributes
    ----------
    estimator_ : sklearn estimator
        The fitted classifier.
    classes_ : numpy.ndarray
        ``[0, 1]``.
    """

    def __init__(
        self,
        kind: str = "random-forest",
        n_estimators: int = 50,
        C: float = 1.0,
        random_state: int = 0,
        normalize: bool = False,
    ) -> None:
        self.kind = kind
        self.n_estimators = n_estimators
        self.C = C
        self.random_state = random_state
        self.normalize = normalize

    def _build(self) -> Any:
        check_option("kind", self.kind, CLASSIFIER_KINDS)
        steps: list[Any] = [Normalizer()] if self.normalize else []
        if self.kind == "random-forest":
            check_int("n_estimators", self.n_estimators, low=1)
            return make_pipeline(
                *steps,
                RandomForestClassifier(
                    n_estimators=self.n_estimators,
                    random_state=self.random_state,
                    n_jobs=1,
                ),
            )
        check_positive("C", self.C)
        return make_pipeline(
            *steps,
            StandardScaler(),
            LogisticRegression(C=self.C, max_iter=2000),
        )

    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchPropertyClassifier:
        """Fit on labelled gradient features (Alg. 7, lines 10-11).

        Raises
        ------
        DataError
            If ``X`` is not 2-D, lengths differ, or ``y`` lacks a class.
        """
        features, labels = _check_xy(X, y)
        if set(np.unique(labels).tolist()) != {0, 1}:
            raise DataError(
                "the batch property classifier needs gradients of batches with "
                "(label 1) and without (label 0) the property; got labels "
                f"{sorted(set(labels.tolist()))}"
            )
        self.estimator_ = self._build()
        self.estimator_.fit(features, labels)
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = features.shape[1]
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Return ``[P(no property), P(property)]`` for every row of ``X``.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit`.
        """
        check_is_fitted(self, "estimator_")
        features = np.asarray(X, dtype=np.float64)
        if features.ndim != 2 or features.shape[1] != self.n_features_in_:
            raise DataError(
                f"expected features of shape (n, {self.n_features_in_}), got "
                f"{features.shape}: extract them with the same pooling and model"
            )
        return cast(np.ndarray, self.estimator_.predict_proba(features))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Return 1 where the property is more likely than not.

        A tie (``P(property) = 0.5``) is 0, as the fitted scikit-learn
        estimator's own ``predict`` (the first class of the ``argmax``) gives.
        """
        return (self.predict_proba(X)[:, 1] > 0.5).astype(np.int64)

    def property_scores(self, X: np.ndarray) -> np.ndarray:
        """Return the score ``f_prop(g) = P(property)`` of every row of ``X``."""
        return self.predict_proba(X)[:, 1]

    def top_features(self, k: int = 5) -> np.ndarray:
        """Return the ``k`` features with the largest positive coefficients.

        Only for ``kind="logistic"``: with embedding-gradient features (one per
        vocabulary word), these are the words with the highest predictive
        power for the property (seed 000 Table 7.4).

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before :meth:`fit`.
        ConfigError
            If the fitted classifier is not a logistic regression.
        """
        check_is_fitted(self, "estimator_")
        if not isinstance(self.estimator_[-1], LogisticRegression):
            raise ConfigError(
                f"top_features needs kind='logistic'; the fitted kind is {self.kind!r}."
            )
        coef = np.asarray(self.estimator_[-1].coef_[0])
        return np.argsort(-coef, kind="stable")[:k]


def _check_xy(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    features = np.asarray(X, dtype=np.float64)
    labels = np.asarray(y).astype(np.int64)
    if features.ndim != 2:
        raise DataError(f"features must be 2-D (n, d), got shape {features.shape}")
    if labels.shape != (features.shape[0],):
        raise DataError(
            f"{features.shape[0]} feature rows but labels of shape {labels.shape}"
        )
    return features, labels


def cross_validated_scores(
    unfitted: BatchPropertyClassifier,
    features: np.ndarray,
    labels: np.ndarray,
    *,
    folds: int,
    seed: int,
) -> np.ndarray:
    """Score every labelled example by a clone of ``unfitted`` fitted without it.

    Stratified, shuffled folds (``seed``), fewer than ``folds`` when a label
    has fewer examples. The caller makes sure both labels occur at least
    twice.
    """
    from sklearn.model_selection import StratifiedKFold

    smallest = int(np.bincount(labels).min())
    scores = np.empty(labels.size)
    splitter = StratifiedKFold(min(folds, smallest), shuffle=True, random_state=seed)
    for train, test in splitter.split(features, labels):
        fitted = clone(unfitted).fit(features[train], labels[train])
        scores[test] = fitted.property_scores(features[test])
    return scores


def single_batch_auc(truth: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC of single-batch property inference (seed 000 Ch. 7.2.3).

    Parameters
    ----------
    truth : numpy.ndarray
        1 where the observed update came from a batch with the property.
    scores : numpy.ndarray
        The classifier's scores of the same updates.

    Raises
    ------
    DataError
        If the lengths differ or ``truth`` holds a single class.
    """
    labels = np.asarray(truth).astype(np.int64)
    values = np.asarray(scores, dtype=np.float64)
    if labels.shape != values.shape:
        raise DataError(f"truth {labels.shape} and scores {values.shape} differ")
    if np.unique(labels).size != 2:
        raise DataError(
            "the AUC needs observed updates with and without the property; the "
            "target's schedule gave only one kind (check target.property_every "
            "and target.property_rounds)"
        )
    return float(roc_auc_score(labels, values))


def dataset_score(scores: np.ndarray) -> float:
    """Whole-dataset inference: the mean batch score over rounds (Ch. 7.1.4).

    Raises
    ------
    DataError
        If there is no score.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        raise DataError("no observed round to score")
    return float(values.mean())


def score_series(
    rounds: np.ndarray, scores: np.ndarray, *, window: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Per-round scores in round order, optionally smoothed (Ch. 7.2.4, Fig. 7.5).

    Parameters
    ----------
    rounds, scores : numpy.ndarray
        Round of every observation and its score.
    window : int, default=1
        Trailing moving-average window (1 = raw scores).

    Returns
    -------
    rounds : numpy.ndarray
        Sorted rounds.
    scores : numpy.ndarray
        Their (smoothed) scores.
    """
    check_int("window", window, low=1)
    r = np.asarray(rounds)
    s = np.asarray(scores, dtype=np.float64)
    if r.shape != s.shape:
        raise DataError(f"rounds {r.shape} and scores {s.shape} differ")
    order = np.argsort(r, kind="stable")
    r, s = r[order], s[order]
    if window > 1 and s.size:
        cumulative = np.cumsum(np.insert(s, 0, 0.0))
        starts = np.maximum(np.arange(1, s.size + 1) - window, 0)
        s = (cumulative[1:] - cumulative[starts]) / (np.arange(1, s.size + 1) - starts)
    return r, s


@dataclass(frozen=True)
class PropertyObservations:
    """Everything a property adversary saw, as feature matrices.

    Attributes
    ----------
    observed_rounds : numpy.ndarray
        ``(T,)`` the round whose aggregate each observed row is.
    observed : numpy.ndarray
        ``(T, d)`` features of the derived others' updates ``g_obs``.
    aux_rounds : numpy.ndarray
        ``(M,)`` the round each auxiliary gradient was computed in.
    aux : numpy.ndarray
        ``(M, d)`` features of the auxiliary gradients (Alg. 7, lines 7-9).
    aux_labels : numpy.ndarray
        ``(M,)`` 1 for ``G_prop``, 0 for ``G_nonprop``.
    meta : dict
        Settings the adversary recorded (pooling, layer names, ...).
    aux_participants, observed_participants : numpy.ndarray, optional
        ``(M,)`` and ``(T,)``: the number of other participants whose
        aggregate the row emulates or is (from each round's
        ``emulated_participants``; model averaging reads it from the
        server's announced ``n``, so it changes when a participant joins).
        None when the log does not record it.
    """

    observed_rounds: np.ndarray
    observed: np.ndarray
    aux_rounds: np.ndarray
    aux: np.ndarray
    aux_labels: np.ndarray
    meta: dict[str, Any]
    aux_participants: np.ndarray | None = None
    observed_participants: np.ndarray | None = None

    def fit(
        self,
        classifier: BatchPropertyClassifier | None = None,
        *,
        max_round: int | None = None,
    ) -> BatchPropertyClassifier:
        """Train ``f_prop`` on the auxiliary gradients (Alg. 7, lines 10-11).

        Parameters
        ----------
        classifier : BatchPropertyClassifier, optional
            Default: a random forest of 50 trees, ``random_state=0``. It is
            cloned (``sklearn.base.clone``): the caller's object stays
            unfitted.
        max_round : int, optional
            Use only auxiliary gradients of rounds ``<= max_round``.

        Returns
        -------
        BatchPropertyClassifier
            The fitted clone.
        """
        keep = (
            np.ones(self.aux_rounds.shape, dtype=bool)
            if max_round is None
            else self.aux_rounds <= max_round
        )
        model = (
            clone(classifier) if classifier is not None else BatchPropertyClassifier()
        )
        return model.fit(self.aux[keep], self.aux_labels[keep])

    def scores(self, classifier: BatchPropertyClassifier) -> np.ndarray:
        """Score every observed aggregate with a fitted ``f_prop``."""
        if self.observed.shape[0] == 0:
            return np.zeros(0)
        return classifier.property_scores(self.observed)

    def scores_by_participants(self, classifier: BatchPropertyClassifier) -> np.ndarray:
        """Score each observed aggregate with an ``f_prop`` of its own ``K - 1``.

        When the number of participants changes during a run (a late join,
        Ch. 7.2.7), an aggregate of ``k`` others differs from one of ``j``
        in scale and mixture; the adversary knows ``k`` each round (the
        announced ``n``) and emulates aggregates of ``k`` others, so Alg. 7's
        classifier is trained once per ``k`` on the auxiliary gradients
        emulating ``k`` others and scores the rounds that observed ``k``.
        Without recorded counts, or for a count whose auxiliary gradients
        hold one label only, the classifier of all auxiliary gradients
        scores the rows.
        """
        if self.observed.shape[0] == 0:
            return np.zeros(0)
        if self.aux_participants is None or self.observed_participants is None:
            return self.scores(self.fit(classifier))
        scores = np.empty(self.observed.shape[0])
        pooled: BatchPropertyClassifier | None = None  # fitted only if needed
        for k in np.unique(self.observed_participants):
            rows = self.observed_participants == k
            mine = self.aux_participants == k
            if np.unique(self.aux_labels[mine]).size == 2:
                fitted = clone(classifier).fit(self.aux[mine], self.aux_labels[mine])
            else:
                if pooled is None:
                    pooled = self.fit(classifier)
                fitted = pooled
            scores[rows] = fitted.property_scores(self.observed[rows])
        return scores


def _write_npz_atomic(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            savez: Any = np.savez
            savez(handle, **arrays)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


class ObservationLog:
    """The adversary's observations on disk: one ``round-NNNNNN.npz`` per round.

    A file per round keeps every write atomic (temp file + rename) and lets an
    interrupted run keep what it observed; :func:`load_observations` stacks
    them in round order.

    Parameters
    ----------
    directory : str or pathlib.Path
        Created if missing.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def write_round(
        self,
        server_round: int,
        *,
        observed: np.ndarray | None,
        observed_round: int,
        aux: np.ndarray,
        aux_labels: np.ndarray,
        meta: Mapping[str, Any],
    ) -> Path:
        """Write what the adversary saw in ``server_round``.

        Parameters
        ----------
        server_round : int
            The round the adversary is in.
        observed : numpy.ndarray or None
            Features of the others' aggregate of ``observed_round`` (derived
            from this round's global model), or None in the first round.
        observed_round : int
            The round ``observed`` belongs to (-1 if None).
        aux, aux_labels : numpy.ndarray
            This round's auxiliary gradient features and labels.
        meta : mapping
            JSON-serialisable settings (pooling, layer names, ...).
        """
        width = aux.shape[1] if aux.ndim == 2 else 0
        path = self.directory / _ROUND_FILE.format(server_round)
        _write_npz_atomic(
            path,
            {
                "server_round": np.asarray(server_round),
                "observed_round": np.asarray(observed_round),
                "observed": (
                    np.zeros((0, width)) if observed is None else observed[None, :]
                ),
                "aux": np.asarray(aux, dtype=np.float64),
                "aux_labels": np.asarray(aux_labels, dtype=np.int64),
                "meta": np.asarray(json.dumps(dict(meta), sort_keys=True)),
            },
        )
        return path


def load_observations(directory: str | Path) -> PropertyObservations:
    """Reload an :class:`ObservationLog` directory (all rounds, in order).

    Raises
    ------
    DataError
        If the directory holds no round file or the files disagree in width.
    """
    folder = Path(directory)
    files = sorted(folder.glob("round-*.npz"))
    if not files:
        raise DataError(
            f"{folder} holds no property-adversary observations (round-*.npz); "
            "was the run configured with adversary.kind passive-/active-property?"
        )
    obs_rounds: list[int] = []
    observed: list[np.ndarray] = []
    aux_rounds: list[np.ndarray] = []
    aux: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    meta: dict[str, Any] = {}
    # a file's observed row and auxiliary rows share one count of others
    counts: list[int | None] = []
    observed_counts: list[int | None] = []
    for path in files:
        with np.load(path) as data:
            server_round = int(data["server_round"])
            meta = json.loads(str(data["meta"]))
            count = meta.get("emulated_participants")
            rows = np.asarray(data["observed"])
            if rows.shape[0]:
                obs_rounds.append(int(data["observed_round"]))
                observed.append(rows[0])
                observed_counts.append(count)
            block = np.asarray(data["aux"])
            aux.append(block)
            labels.append(np.asarray(data["aux_labels"]))
            aux_rounds.append(np.full(block.shape[0], server_round))
            counts += [count] * block.shape[0]
    widths = {a.shape[1] for a in aux if a.ndim == 2} | {o.shape[0] for o in observed}
    if len(widths) > 1:
        raise DataError(f"{folder}: observation files of different widths {widths}")
    width = widths.pop() if widths else 0
    return PropertyObservations(
        observed_rounds=np.asarray(obs_rounds, dtype=np.int64),
        observed=np.stack(observed) if observed else np.zeros((0, width)),
        aux_rounds=np.concatenate(aux_rounds).astype(np.int64),
        aux=np.concatenate(aux) if aux else np.zeros((0, width)),
        aux_labels=np.concatenate(labels).astype(np.int64),
        meta=meta,
        aux_participants=_counts(counts),
        observed_participants=_counts(observed_counts),
    )


def _counts(values: list[int | None]) -> np.ndarray | None:
    """Return the per-row participant counts (None if a round did not record one)."""
    if any(v is None for v in values):
        return None
    return np.asarray(values, dtype=np.int64)
