"""How much of a text task's label the top-``N`` words carry (seed 000 Table 7.6).

Table 7.6 restricts the model's inputs to the ``N`` most frequent words
(locations) and reports the joint model's AUC next to the attack. Whether
that AUC can fall depends on the data before any model: if the label is
visible in the frequent words, a restricted model keeps it. For each ``N``
:func:`vocabulary_signal` measures, without the neural model,

- ``kept_token_share``: the share of the training records' tokens that are
  among the top ``N`` (what :func:`fedleak.defenses.restrict_inputs` keeps);
- ``bag_auc``: the test AUC of a logistic regression (scikit-learn, L2,
  ``C = 1``) on the counts of the kept words of each record, fitted on the
  training records: the label's signal left in the restricted inputs for the
  simplest model that can use it.

Written here because no library measures a label's signal per vocabulary
cut; the fit and the AUC are scikit-learn's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from fedleak.data.text import FIRST_WORD_ID, TextDataset
from fedleak.errors import DataError

__all__ = ["bag_of_words", "vocabulary_signal"]


def bag_of_words(x: np.ndarray, width: int, top_n: int | None) -> sp.csr_matrix:
    """Count each record's words among the top ``top_n`` (all words if None).

    Parameters
    ----------
    x : numpy.ndarray
        Token ids, shape ``(records, length)``; ids below
        :data:`~fedleak.data.text.FIRST_WORD_ID` (padding, unknown) are not
        words.
    width : int
        Number of columns (the largest id + 1).
    top_n : int or None
        Keep the ids ``< top_n + FIRST_WORD_ID`` (ids are frequency ordered).

    Returns
    -------
    scipy.sparse.csr_matrix
        ``(records, width)`` word counts.
    """
    rows, cols = np.nonzero(x >= FIRST_WORD_ID)
    ids = x[rows, cols]
    if top_n is not None:
        keep = ids < top_n + FIRST_WORD_ID
        rows, ids = rows[keep], ids[keep]
    counts = np.ones(rows.shape[0])
    return sp.csr_matrix((counts, (rows, ids)), shape=(x.shape[0], width))


def vocabulary_signal(
    data: TextDataset, top_ns: Sequence[int | None]
) -> list[dict[str, Any]]:
    """Return each ``N``'s kept token share and bag-of-words AUC (module docstring).

    Parameters
    ----------
    data : TextDataset
        A binary task (labels 0 and 1 in both splits).
    top_ns : sequence of int or None
        The vocabulary cuts; None is the whole vocabulary.

    Returns
    -------
    list of dict
        ``{"top_n", "kept_token_share", "bag_auc"}`` per cut, in order.

    Raises
    ------
    DataError
        If a split lacks one of the two labels, or has no word.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    for name, y in (("training", data.y_train), ("test", data.y_test)):
        if set(np.unique(y).tolist()) != {0, 1}:
            raise DataError(
                f"vocabulary signal needs labels 0 and 1 in the {name} records, "
                f"got {sorted(np.unique(y).tolist())}"
            )
    tokens = data.x_train[data.x_train >= FIRST_WORD_ID]
    if tokens.size == 0:
        raise DataError("vocabulary signal: the training records hold no word")
    width = int(max(data.x_train.max(), data.x_test.max())) + 1
    out = []
    for top_n in top_ns:
        limit = width if top_n is None else top_n + FIRST_WORD_ID
        model = LogisticRegression(C=1.0, max_iter=2000)
        model.fit(bag_of_words(data.x_train, width, top_n), data.y_train)
        scores = model.predict_proba(bag_of_words(data.x_test, width, top_n))[:, 1]
        out.append(
            {
                "top_n": top_n,
                "kept_token_share": float(np.mean(tokens < limit)),
                "bag_auc": float(roc_auc_score(data.y_test, scores)),
            }
        )
    return out
