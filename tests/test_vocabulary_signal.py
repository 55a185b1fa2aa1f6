"""The label's signal in the top-N words (seed 000 Table 7.6's data check)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fedleak.bench.vocabulary_signal import bag_of_words, vocabulary_signal
from fedleak.data.text import FIRST_WORD_ID, TextDataset, Vocabulary
from fedleak.errors import DataError

COMMON = FIRST_WORD_ID  # the most frequent word: in every record
CLUE = FIRST_WORD_ID + 5  # sixth most frequent: only in label-1 records


def _records(labels: np.ndarray) -> np.ndarray:
    """Consecutive pairs hold both labels and share a filler word."""
    x = np.zeros((labels.size, 6), dtype=np.int64)
    x[:, 0] = COMMON
    x[:, 1] = FIRST_WORD_ID + 1 + (np.arange(labels.size) // 2) % 4
    x[:, 2] = np.where(labels == 1, CLUE, 0)
    return x


def _task(n: int = 80) -> TextDataset:
    y_train = np.arange(n) % 2
    y_test = (np.arange(n) + 1) % 2
    words = [f"w{i}" for i in range(8)]
    return TextDataset(
        x_train=_records(y_train),
        y_train=y_train,
        x_test=_records(y_test),
        y_test=y_test,
        vocabulary=Vocabulary(tuple(words)),
        categories=("a", "b"),
        source="test",
    )


def test_bag_of_words_counts_the_kept_words_only():
    x = np.array([[2, 2, 3, 0, 1], [4, 0, 0, 0, 0]])
    bags = bag_of_words(x, 6, None).toarray()
    np.testing.assert_array_equal(bags, [[0, 0, 2, 1, 0, 0], [0, 0, 0, 0, 1, 0]])
    cut = bag_of_words(x, 6, 1).toarray()  # ids < 1 + FIRST_WORD_ID = 3
    np.testing.assert_array_equal(cut, [[0, 0, 2, 0, 0, 0], [0, 0, 0, 0, 0, 0]])


def test_the_signal_leaves_with_the_word_that_carries_it():
    data = _task()
    signal = vocabulary_signal(data, [None, 6, 5, 1])
    assert [s["top_n"] for s in signal] == [None, 6, 5, 1]
    aucs = [s["bag_auc"] for s in signal]
    assert aucs[0] == aucs[1] == 1.0  # the clue is the 6th word
    assert aucs[2:] == pytest.approx(
        [0.5, 0.5]
    )  # cut away: nothing tells the labels apart
    # tokens: 80 common + 80 filler + 40 clues
    kept = [s["kept_token_share"] for s in signal]
    assert kept == [1.0, 1.0, 160 / 200, 80 / 200]


def test_the_signal_needs_both_labels_and_words():
    data = _task()
    one_label = replace(data, y_train=np.zeros_like(data.y_train))
    with pytest.raises(
        DataError, match=r"labels 0 and 1 in the training records, got \[0\]"
    ):
        vocabulary_signal(one_label, [None])
    empty = replace(data, x_train=np.zeros_like(data.x_train))
    with pytest.raises(
        DataError, match=r"^vocabulary signal: the training records hold no word$"
    ):
        vocabulary_signal(empty, [None])
    test_one_label = replace(data, y_test=np.ones_like(data.y_test))
    with pytest.raises(
        DataError, match=r"labels 0 and 1 in the test records, got \[1\]"
    ):
        vocabulary_signal(test_one_label, [None])


def _counts(x: np.ndarray, width: int, limit: int) -> np.ndarray:
    out = np.zeros((x.shape[0], width))
    for i, row in enumerate(x):
        for token in row:
            if FIRST_WORD_ID <= token < limit:
                out[i, token] += 1
    return out


def test_the_bag_auc_is_an_l2_logistic_regression_fitted_on_the_kept_words():
    """Noisy labels spread over words on both sides of the cut: every choice counts."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(3)
    width = FIRST_WORD_ID + 30
    lean = rng.normal(0, 1, width)  # each word's pull towards label 1

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.integers(FIRST_WORD_ID, width, (n, 8))
        y = (lean[x].sum(1) + rng.normal(0, 2, n) > 0).astype(np.int64)
        return x, y

    (x_train, y_train), (x_test, y_test) = split(150), split(150)
    data = TextDataset(
        x_train,
        y_train,
        x_test,
        y_test,
        Vocabulary(tuple(f"w{i}" for i in range(30))),
        ("a", "b"),
        "test",
    )
    for top_n, signal in zip(
        [None, 12], vocabulary_signal(data, [None, 12]), strict=True
    ):
        limit = width if top_n is None else top_n + FIRST_WORD_ID
        model = LogisticRegression(C=1.0, max_iter=2000)
        model.fit(_counts(x_train, width, limit), y_train)
        scores = model.predict_proba(_counts(x_test, width, limit))[:, 1]
        assert signal["bag_auc"] == pytest.approx(
            roc_auc_score(y_test, scores), abs=1e-9
        )
        assert signal["kept_token_share"] == pytest.approx(np.mean(x_train < limit))
