"""Property inference from embedding-layer gradients on real short texts.

The text analogue of seed 000's Yelp experiments (Ch. 7.2.3 "Yelp-health" and
"Yelp-author", Table 7.4, Figs. 7.4(b) and 7.7(b)) on Debian's ``fortunes``
corpus (:func:`fedleak.data.text.load_fortunes`), the real short texts
available offline:

- **main task** (sentiment-free, like the review score's independence from
  the author): is the entry an attributed quotation (it ends with a
  ``-- Author`` line) or not;
- **property**: the entry comes from one fortune category (``startrek``,
  ``linux``, ``food``, ...), the stand-in for "written by this author" /
  "reviews this doctor specialty": a topic with its own vocabulary;
- **model**: an embedding model of :func:`fedleak.models.build_text_model`;
- **attack features**: the bag of words of the embedding-layer update
  (Ch. 7.1.2: the rows of the words in the batch change), a logistic
  regression (the seed's choice for embedding gradients), and the words with
  the largest positive coefficients (Table 7.4).

The bags are the words the float32 model *records*. The observed one is
read exactly as the membership attack reads it
(:meth:`fedleak.attacks.membership.EmbeddingMembership.observe`: every row
that moved beyond what the adversary's own gradient explains, to the ulp).
The adversary's labelled bags emulate that observation: the rows its
auxiliary gradient would move in the float32 model the server steps
(:func:`recorded_rows`). Late in training a word's step falls below float32's
resolution for many rows, so the recorded bag is smaller than the batch's
(about a third of the words from round 500 on, startrek at batch 32). Bags
read with a threshold relative to the update's largest row instead
(``gradient_features(..., "bow")``, as before this version) lost more words
than float32 did and, by round 1,500, added words no batch held, while the
labelled bags lost other words: the classifier was fitted to one
distribution and scored another, and its AUC at 3,000 rounds fell to
0.67-0.68 for three of four categories (1.00 at 150 rounds).

:func:`run_text_property_attack` simulates synchronized SGD (seed 000 Alg. 1)
in-process with ``participants`` parties -- target, adversary and honest
others, the training data split evenly -- and the passive adversary of
Ch. 7.1.4 (Alg. 7): it derives the others' summed gradient from consecutive
models, labels gradients of its own batches with and without the property,
and scores every observed round. The image experiments run through Flower
(:mod:`fedleak.bench.property`); fedleak's Flower task carries
image datasets only, so the text experiment runs the same protocol here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from fedleak.attacks.membership.embedding import EmbeddingMembership
from fedleak.attacks.property.classifier import (
    BatchPropertyClassifier,
    cross_validated_scores,
    single_batch_auc,
)

from fedleak.curves import evaluation_interval, summarise_curve
from fedleak.errors import ConfigError, DataError

__all__ = [
    "DEFAULT_TEXT_CATEGORIES",
    "TextAttackResult",
    "TextPropertyTask",
    "fortunes_property_task",
    "recorded_rows",
    "run_text_property_attack",
]

#: Fortune categories of the default task (each has >= 130 short entries).
DEFAULT_TEXT_CATEGORIES: tuple[str, ...] = (
    "computers",
    "food",
    "linux",
    "love",
    "men-women",
    "people",
    "politics",
    "science",
    "startrek",
    "work",
)

_ATTRIBUTION = re.compile(r"\n\s*--\s*\S")


@dataclass(frozen=True)
class TextPropertyTask:
    """Encoded texts with a main label and a category (the property source).

    Attributes
    ----------
    x_train, x_test : numpy.ndarray
        int64 token ids ``(n, length)``.
    y_train, y_test : numpy.ndarray
        Main label: 1 = attributed quotation.
    c_train, c_test : numpy.ndarray
        Category index of every record.
    categories : tuple of str
        Category names.
    words : tuple of str
        ``words[i]`` is the token of id ``i`` (padding and unknown included).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    c_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    c_test: np.ndarray
    categories: tuple[str, ...]
    words: tuple[str, ...]

    def category(self, name: str) -> int:
        """Return the index of category ``name``."""
        if name not in self.categories:
            raise ConfigError(
                f"unknown category {name!r}; the task has {list(self.categories)}"
            )
        return self.categories.index(name)


def fortunes_property_task(
    categories: tuple[str, ...] = DEFAULT_TEXT_CATEGORIES,
    *,
    vocab_size: int = 3000,
    length: int = 40,
    max_chars: int = 400,
    seed: int = 0,
    directory: str | None = None,
) -> TextPropertyTask:
    """Load the fortunes categories as an attribution task with category labels.

    The vocabulary is the ``vocab_size`` most frequent training words (the
    seed uses 3,000 for Yelp-author).
    """
    from fedleak.data.text import load_fortunes, split_text_dataset

    corpus = load_fortunes(directory, categories=list(categories), max_chars=max_chars)
    attributed = np.asarray(
        [bool(_ATTRIBUTION.search(t)) for t in corpus.texts], dtype=np.int64
    )
    combined = corpus.labels * 2 + attributed
    names = [f"{c}/{a}" for c in corpus.categories for a in (0, 1)]
    data = split_text_dataset(
        corpus.tokens(),
        combined,
        names,
        vocab_size=vocab_size,
        length=length,
        test_fraction=0.2,
        seed=seed,
        source=corpus.source,
    )
    words = ("<pad>", "<unk>", *data.vocabulary.words)
    if len(words) != data.vocabulary.size:
        raise DataError("the vocabulary's special ids changed; update this module")
    return TextPropertyTask(
        x_train=data.x_train,
        y_train=data.y_train % 2,
        c_train=data.y_train // 2,
        x_test=data.x_test,
        y_test=data.y_test % 2,
        c_test=data.y_test // 2,
        categories=tuple(corpus.categories),
        words=words,
    )


@dataclass(frozen=True)
class TextAttackResult:
    """Outcome of one text property attack."""

    property_category: str
    auc: float
    top_words: tuple[str, ...]
    correlation: float
    test_accuracy: float
    rounds: int
    participants: int
    batch_fraction: float
    scores: np.ndarray
    truth: np.ndarray
    accuracy_curve: dict[str, Any] = field(default_factory=dict)
    auxiliary_cv_auc: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-serialisable fields (scores and truth as lists)."""
        return {
            "property": self.property_category,
            "auc": self.auc,
            "top_words": list(self.top_words),
            "correlation": self.correlation,
            "test_accuracy": self.test_accuracy,
            "rounds": self.rounds,
            "participants": self.participants,
            "batch_fraction": self.batch_fraction,
            "accuracy_curve": self.accuracy_curve,
            "auxiliary_cv_auc": self.auxiliary_cv_auc,
        }


def _gradient(
    model: torch.nn.Module, x: np.ndarray, y: np.ndarray
) -> dict[str, np.ndarray]:
    model.zero_grad(set_to_none=True)
    logits = model(torch.from_numpy(x))
    torch.nn.functional.cross_entropy(logits, torch.from_numpy(y)).backward()  # type: ignore[no-untyped-call]
    return {
        n: p.grad.detach().numpy().astype(np.float64)
        for n, p in model.named_parameters()
        if p.grad is not None
    }


def _draw(
    rng: np.random.Generator,
    with_prop: np.ndarray,
    without: np.ndarray,
    size: int,
    fraction: float,
) -> np.ndarray:
    n_prop = round(fraction * size)
    parts = []
    for pool, count in ((with_prop, n_prop), (without, size - n_prop)):
        if count:
            parts.append(rng.choice(pool, size=count, replace=count > pool.size))
    return np.concatenate(parts)


_EMBEDDING = "embedding.weight"


@dataclass(frozen=True)
class _Parties:
    """Every party's records; the target's and adversary's by property."""

    parts: list[np.ndarray]
    target_with: np.ndarray
    target_without: np.ndarray
    adv_with: np.ndarray
    adv_without: np.ndarray


def _split_parties(
    task: TextPropertyTask, prop: int, participants: int, rng: np.random.Generator
) -> _Parties:
    """Split the records evenly; only target (0) and adversary (1) keep the category.

    Raises
    ------
    DataError
        If the target or the adversary gets fewer than two of its records.
    """
    order = rng.permutation(task.x_train.shape[0])
    parts = np.array_split(order, participants)
    is_prop = task.c_train == prop
    parts = [p if i < 2 else p[~is_prop[p]] for i, p in enumerate(parts)]
    parties = _Parties(
        parts=parts,
        target_with=parts[0][is_prop[parts[0]]],
        target_without=parts[0][~is_prop[parts[0]]],
        adv_with=parts[1][is_prop[parts[1]]],
        adv_without=parts[1][~is_prop[parts[1]]],
    )
    if min(parties.target_with.size, parties.adv_with.size) < 2:
        raise DataError(
            f"category {task.categories[prop]!r} has too few records to split "
            "between the target and the adversary"
        )
    return parties


def _auxiliary_pair(
    model: torch.nn.Module,
    task: TextPropertyTask,
    parties: _Parties,
    rng: np.random.Generator,
    batch_size: int,
    batch_fraction: float,
    embedding: np.ndarray,
    learning_rate: float,
) -> list[tuple[int, np.ndarray]]:
    """Alg. 7 lines 6-9 at the current model: one labelled pair of features.

    The others' aggregate is emulated with ``participants - 1`` batches of
    the adversary's records, one with the property (label 1) or none (0);
    its features are the rows that aggregate would move in the float32
    ``embedding`` (:func:`recorded_rows`).
    """
    shared = [
        _draw(rng, parties.adv_with, parties.adv_without, batch_size, 0.0)
        for _ in range(len(parties.parts) - 2)
    ]
    pair = []
    for label, fraction in ((1, batch_fraction), (0, 0.0)):
        ids = np.concatenate(
            [
                _draw(rng, parties.adv_with, parties.adv_without, batch_size, fraction),
                *shared,
            ]
        )
        x_aux = task.x_train[ids]
        g = np.zeros_like(embedding, dtype=np.float64)
        for start in range(0, ids.size, batch_size):
            part = slice(start, start + batch_size)
            g += _gradient(model, x_aux[part], task.y_train[ids][part])[_EMBEDDING]
        pair.append((label, recorded_rows(embedding, g, learning_rate)))
    return pair


def recorded_rows(
    embedding: np.ndarray, gradient: np.ndarray, learning_rate: float
) -> np.ndarray:
    """Return 1.0 for each row a sync-SGD step on ``gradient`` moves, else 0.0.

    The step is :func:`_server_step`'s, ``embedding - float32(lr * gradient)``
    in float32: a row counts when float32 records a change in any of its
    entries, so a word whose step is below half an ulp of its parameters is
    left out, as it is from what an observer of the model sees.
    """
    start = np.asarray(embedding, dtype=np.float32)
    step = np.asarray(learning_rate * np.asarray(gradient), dtype=np.float32)
    moved = (start - step != start).any(axis=1)
    return np.where(moved, 1.0, 0.0)


def _server_step(
    model: torch.nn.Module, uploads: list[dict[str, np.ndarray]], learning_rate: float
) -> None:
    """``theta -= lr * sum_k g_k`` in place: the sum in float64, the step in float32.

    This experiment's recorded figures were made with this arithmetic (the
    step rounded to float32 before it is subtracted), not with
    :func:`fedleak.federated.sgd_step` (subtraction in float64), so it keeps
    its own two lines.
    """
    with torch.no_grad():
        for n, p in model.named_parameters():
            total = np.sum([u[n] for u in uploads], axis=0)
            step = np.asarray(learning_rate * total, dtype=np.float32)
            p.sub_(torch.from_numpy(step))


def _play_round(
    model: torch.nn.Module,
    task: TextPropertyTask,
    parties: _Parties,
    rng: np.random.Generator,
    *,
    batch_size: int,
    target_fraction: float,
    aux_fraction: float,
    learning_rate: float,
    reader: EmbeddingMembership,
) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """One synchronized-SGD round with the passive adversary observing.

    Every party uploads the gradient of one batch (the target's has the
    property in ``target_fraction``), the adversary computes its labelled
    auxiliary pair at the current model, the server steps, and the adversary
    reads the others' bag of words from the two models and its own gradient
    (Ch. 7.1.2, with ``reader``'s exact residual test). Returns the pair and
    the observation's features (1.0 for each word of the bag).
    """
    start = model.get_parameter(_EMBEDDING).detach().numpy().copy()
    batch = _draw(
        rng, parties.target_with, parties.target_without, batch_size, target_fraction
    )
    uploads = [_gradient(model, task.x_train[batch], task.y_train[batch])]
    own_batch = rng.choice(parties.parts[1], size=batch_size, replace=False)
    own = _gradient(model, task.x_train[own_batch], task.y_train[own_batch])
    uploads.append(own)
    for honest in parties.parts[2:]:
        b = rng.choice(honest, size=batch_size, replace=False)
        uploads.append(_gradient(model, task.x_train[b], task.y_train[b]))
    pair = _auxiliary_pair(
        model, task, parties, rng, batch_size, aux_fraction, start, learning_rate
    )
    _server_step(model, uploads, learning_rate)
    end = model.get_parameter(_EMBEDDING).detach().numpy()
    bag = reader.observe(
        end.astype(np.float64) - start, own=own[_EMBEDDING], parameters=(start, end)
    )
    seen = np.zeros(start.shape[0])
    seen[bag] = 1.0
    return pair, seen


def _test_accuracy(model: torch.nn.Module, task: TextPropertyTask) -> float:
    """Return the main task's test accuracy, leaving the model's mode as it was.

    :func:`fedleak.training.evaluate` switches to eval mode (no dropout draw).
    """
    from fedleak.training import evaluate

    was_training = model.training
    with torch.no_grad():
        result = evaluate(
            model, torch.from_numpy(task.x_test), torch.from_numpy(task.y_test)
        )
    model.train(was_training)
    return result.accuracy


def _accuracy_recorder(
    model: torch.nn.Module, task: TextPropertyTask, rounds: int
) -> tuple[Callable[[int], None], list[tuple[int, float]]]:
    """Return a callback measuring test accuracy at evenly spread rounds.

    :data:`fedleak.curves.CURVE_POINTS` of them
    (:func:`fedleak.curves.evaluation_interval`). The ``(round, accuracy)``
    points, the last round among them, land in the
    returned list; :func:`fedleak.curves.summarise_curve` judges from them
    whether the main task had stopped improving (its plateau).
    """
    every = evaluation_interval(rounds)
    points: list[tuple[int, float]] = []

    def record(t: int) -> None:
        if t % every == 0 or t == rounds:
            points.append((t, _test_accuracy(model, task)))

    return record, points


def _run_rounds(
    model: torch.nn.Module,
    task: TextPropertyTask,
    parties: _Parties,
    rng: np.random.Generator,
    *,
    rounds: int,
    property_every: int,
    batch_size: int,
    batch_fraction: float,
    learning_rate: float,
    after_round: Callable[[int], None] | None = None,
) -> tuple[list[np.ndarray], list[int], list[np.ndarray], list[int]]:
    """Play ``rounds`` rounds: auxiliary features and labels, observations, truth.

    ``after_round(t)`` is called after round ``t`` (from 1) with the model
    stepped; it must draw from no random stream.
    """
    observed: list[np.ndarray] = []
    truth: list[int] = []
    aux: list[np.ndarray] = []
    labels: list[int] = []
    reader = EmbeddingMembership(len(task.words))
    for server_round in range(1, rounds + 1):
        has = server_round % property_every == 0
        pair, seen = _play_round(
            model,
            task,
            parties,
            rng,
            batch_size=batch_size,
            target_fraction=batch_fraction if has else 0.0,
            aux_fraction=batch_fraction,
            learning_rate=learning_rate,
            reader=reader,
        )
        for label, features in pair:
            aux.append(features)
            labels.append(label)
        observed.append(seen)
        truth.append(int(has))
        if after_round is not None:
            after_round(server_round)
    return aux, labels, observed, truth


def _label_correlation(task: TextPropertyTask, prop: int) -> float:
    """Pearson correlation of the main-task label with the property."""
    return float(np.corrcoef(task.y_train, (task.c_train == prop).astype(float))[0, 1])


def auxiliary_cv_auc(
    features: np.ndarray, labels: np.ndarray, *, folds: int = 5, seed: int = 0
) -> float:
    """Cross-validated AUC of ``f_prop`` on the adversary's own labelled bags.

    The ceiling the classifier reaches on bags drawn like those it was fitted
    to (stratified, shuffled folds; fewer than ``folds`` when a label has
    fewer bags, as in a run of a few rounds). Far above the attack's AUC on
    the target's bags, it says the classifier learnt the adversary's
    property records rather than what every record of the property shares.
    """
    from sklearn.metrics import roc_auc_score

    if np.unique(labels).size < 2:
        raise DataError(
            "cross-validating the property classifier needs the adversary's bags "
            "with and without the property; got one label only"
        )
    unfitted = BatchPropertyClassifier(kind="logistic", random_state=seed)
    scores = cross_validated_scores(unfitted, features, labels, folds=folds, seed=seed)
    return float(roc_auc_score(labels, scores))


def run_text_property_attack(
    task: TextPropertyTask,
    property_category: str,
    *,
    rounds: int = 300,
    participants: int = 2,
    batch_size: int = 32,
    learning_rate: float = 0.3,
    batch_fraction: float = 1.0,
    property_every: int = 2,
    model_name: str = "text-cnn",
    embedding_dim: int = 32,
    top_k: int = 5,
    seed: int = 0,
    cross_validate: bool = False,
) -> TextAttackResult:
    """Passive property inference from embedding-gradient bags of words.

    Parameters
    ----------
    task : TextPropertyTask
        The data (:func:`fortunes_property_task`).
    property_category : str
        The category whose presence in the target's batch is inferred.
    rounds : int, default=300
        Synchronized-SGD rounds (the seed trains Yelp-author for 3,000).
    participants : int, default=2
        Parties: target (0), adversary (1) and ``participants - 2`` honest
        ones, the training records split evenly among them; only the target
        and the adversary hold records of ``property_category`` (Ch. 7.2.6).
    batch_size : int, default=32
        Records per batch.
    learning_rate : float, default=0.3
        The server step of Alg. 1 (``theta -= lr * sum_k g_k``).
    batch_fraction : float, default=1.0
        Fraction of a property batch from ``property_category`` (Fig. 7.4).
    property_every : int, default=2
        ``1/m`` of the target's batches are property batches (``m = 2``).
    model_name : {"text-cnn", "text-gru"}, default="text-cnn"
        Embedding model (:func:`fedleak.models.build_text_model`); the CNN
        learns the main task faster on a CPU than the thesis' Yelp GRU.
    embedding_dim : int, default=32
        Embedding dimension (smaller than the thesis' 100 for a CPU).
    top_k : int, default=5
        Words reported (Table 7.4 lists five).
    seed : int, default=0
        Split, batches, model initialisation and classifier.
    cross_validate : bool, default=False
        Also give :func:`auxiliary_cv_auc` (five more classifier fits).
    """
    from fedleak.models import build_text_model

    if participants < 2:
        raise ConfigError(f"participants must be >= 2, got {participants}")
    if rounds < 4:
        raise ConfigError(
            f"rounds must be >= 4 to see both kinds of batch, got {rounds}"
        )
    prop = task.category(property_category)
    rng = np.random.default_rng([seed, 0x7E47])
    torch.manual_seed(seed)
    parties = _split_parties(task, prop, participants, rng)
    model = build_text_model(
        model_name, len(task.words), 2, seed=seed, embedding_dim=embedding_dim
    )
    after_round, points = _accuracy_recorder(model, task, rounds)
    aux, labels, observed, truth = _run_rounds(
        model,
        task,
        parties,
        rng,
        rounds=rounds,
        property_every=property_every,
        batch_size=batch_size,
        batch_fraction=batch_fraction,
        learning_rate=learning_rate,
        after_round=after_round,
    )
    features, label_array = np.stack(aux), np.asarray(labels)
    clf = BatchPropertyClassifier(kind="logistic", random_state=seed)
    scores = clf.fit(features, label_array).property_scores(np.stack(observed))
    accuracy = _test_accuracy(model, task)
    correlation = _label_correlation(task, prop)
    cv = auxiliary_cv_auc(features, label_array, seed=seed) if cross_validate else None
    return TextAttackResult(
        property_category=property_category,
        auc=single_batch_auc(np.asarray(truth), scores),
        top_words=tuple(task.words[i] for i in clf.top_features(top_k)),
        correlation=correlation,
        test_accuracy=accuracy,
        rounds=rounds,
        participants=participants,
        batch_fraction=batch_fraction,
        scores=scores,
        truth=np.asarray(truth),
        accuracy_curve=summarise_curve(points),
        auxiliary_cv_auc=cv,
    )
