"""MWEM, the baseline for counting queries (Hardt, Ligett, McSherry, NIPS 2012).

"A Simple and Practical Algorithm for Differentially Private Data Release".
No maintained PyPI package implements it (the available ones are unmaintained
research snapshots), so it is written here, following the paper's Alg. 1:

    A_0 = uniform distribution times n
    for t = 1..T:
        select a query q_t with the exponential mechanism (epsilon / 2T),
            score |q(A_{t-1}) - q(B)|
        measure m_t = q_t(B) + Laplace(Delta * 2T / epsilon)
        multiplicative weights: A(x) *= exp(q(x) (m - q(A)) / (2n)) for every
            measurement so far (several passes), renormalise to n
    release the average of A_1..A_T

The seed applies it to item-set data as a histogram over the ``m`` items:
every record is clipped to at most ``clip`` items (the seed: 12), so one
record changes the histogram ``B`` by at most ``clip`` in L1 and a 0/1 linear
query by at most ``Delta = clip``; the total mass ``n = ||B||_1`` is released
with a small share of the budget. The workload's linear queries are "visits
to the items of Q". Set-counting answers (records containing all / any of Q)
are read off the learnt item frequencies ``p_i = A_i / |X|`` assuming items
independent: ``all = |X| prod p_i``, ``any = |X| (1 - prod (1 - p_i))``
(``|X|`` is public, as in the paper).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import sparse

from ..errors import ConfigError, DataError
from ..privacy.randomness import RngLike, check_rng
from ..validation import check_epsilon, check_int, check_probability
from .queries import QueryMode, QueryWorkload

__all__ = ["MWEMResult", "clip_records", "mwem"]


@dataclass(frozen=True)
class MWEMResult:
    """The synthetic item histogram MWEM releases.

    Attributes
    ----------
    histogram : numpy.ndarray
        ``(m,)`` estimated (clipped) visits per item.
    n_records : int
        ``|X|`` (public).
    epsilon : float
        Budget spent (pure epsilon-DP).
    selected : list of int
        The query picked in every round.
    """

    histogram: NDArray[np.float64]
    n_records: int
    epsilon: float
    selected: list[int]

    def item_frequencies(self) -> NDArray[np.float64]:
        """Return ``p_i``, the estimated share of records holding item ``i``."""
        frequencies: NDArray[np.float64] = np.clip(
            self.histogram / self.n_records, 0.0, 1.0
        )
        return frequencies

    def answer(self, workload: QueryWorkload, mode: QueryMode) -> NDArray[np.float64]:
        """Estimate the set-counting answers assuming independent items."""
        p = self.item_frequencies()
        log_p = np.log(np.maximum(p, 1e-300))
        log_q = np.log(np.maximum(1.0 - p, 1e-300))
        out = np.empty(len(workload.items))
        for i, query in enumerate(workload.items):
            if mode == "all":
                out[i] = self.n_records * math.exp(log_p[query].sum())
            elif mode == "any":
                out[i] = self.n_records * (1.0 - math.exp(log_q[query].sum()))
            else:
                raise ConfigError(f"mode must be 'all' or 'any'; got {mode!r}.")
        return out


def clip_records(
    records: ArrayLike | sparse.spmatrix, clip: int, rng: np.random.Generator
) -> sparse.csr_matrix:
    """Keep at most ``clip`` random items of every record (L1 clipping)."""
    data = sparse.csr_matrix(records, dtype=np.float64)
    rows, cols = [], []
    for i in range(data.shape[0]):
        items = data.indices[data.indptr[i] : data.indptr[i + 1]]
        if items.size > clip:
            items = rng.choice(items, size=clip, replace=False)
        rows.append(np.full(items.size, i))
        cols.append(items)
    row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    col = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    return sparse.csr_matrix((np.ones(row.size), (row, col)), shape=data.shape)


def mwem(
    records: ArrayLike | sparse.spmatrix,
    workload: QueryWorkload,
    epsilon: float,
    *,
    iterations: int = 50,
    clip: int = 12,
    total_share: float = 0.05,
    update_passes: int = 10,
    seed: RngLike = None,
) -> MWEMResult:
    """Run MWEM on the item histogram of ``records`` for the workload.

    Parameters
    ----------
    records : array_like or scipy sparse matrix
        ``(n, m)`` 0/1 records.
    workload : QueryWorkload
        The queries (linear: visits to the query's items).
    epsilon : float
        Total budget (pure DP), > 0.
    iterations : int
        ``T`` (seed: 50).
    clip : int
        Items kept per record, the L1 sensitivity (seed: 12).
    total_share : float
        Share of ``epsilon`` spent on the histogram's total mass.
    update_passes : int
        Multiplicative-weights passes over all measurements each round.
    seed : numpy.random.Generator, int or None

    Returns
    -------
    MWEMResult
    """
    check_epsilon("epsilon", epsilon)
    check_int("iterations", iterations, low=1)
    check_int("clip", clip, low=1)
    check_probability("total_share", total_share, closed="neither")
    rng = check_rng(seed)
    data = clip_records(records, clip, rng)
    if data.shape[1] != workload.n_items:
        raise DataError(
            f"records have {data.shape[1]} items; the workload {workload.n_items}."
        )
    n_records = data.shape[0]
    truth = np.asarray(data.sum(axis=0)).ravel()
    queries = workload.matrix()
    true_answers = queries @ truth
    eps_total = total_share * epsilon
    eps_round = (epsilon - eps_total) / iterations
    mass = max(truth.sum() + rng.laplace(0.0, clip / eps_total), 1.0)
    estimate = np.full(workload.n_items, mass / workload.n_items)
    average = np.zeros_like(estimate)
    measured: list[tuple[int, float]] = []
    for _ in range(iterations):
        scores = np.abs(queries @ estimate - true_answers)
        logits = (eps_round / 2.0) * scores / (2.0 * clip)
        probabilities = np.exp(logits - logits.max())
        chosen = int(rng.choice(len(scores), p=probabilities / probabilities.sum()))
        noisy = true_answers[chosen] + rng.laplace(0.0, clip / (eps_round / 2.0))
        measured.append((chosen, float(noisy)))
        for _ in range(update_passes):
            for index, value in measured:
                row = queries.getrow(index).toarray().ravel()
                error = value - float(row @ estimate)
                estimate = estimate * np.exp(row * error / (2.0 * mass))
                estimate *= mass / estimate.sum()
        average += estimate
    return MWEMResult(
        histogram=average / iterations,
        n_records=n_records,
        epsilon=float(epsilon),
        selected=[index for index, _ in measured],
    )
