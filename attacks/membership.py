"""Membership inference from the embedding-layer updates (seed 000 Ch. 7.1.3).

The gradient of an embedding matrix ``W_emb`` (``|V| x d``) is sparse in the
input words: a row changes only if its token occurs in a training batch
(Ch. 7.1.2). An adversary taking part in collaborative learning observes the
joint update ``Delta theta_t = theta_t - theta_{t-1}`` every round; removing
its own contribution leaves the aggregated update of the other participants,
whose changed embedding rows are the bag of words ``V_t`` of their batches.
After ``T`` rounds it holds ``[V_1, ..., V_T]`` and decides that a record
``r`` with words ``V_r`` was a member if ``V_r subset of V_t`` for some ``t``
(Ch. 7.1.3, Ch. 7.2.2). Recall is 1 by construction (a member's batch contains
all its words); precision falls as batches grow (Table 7.2).

Removing the adversary's own contribution
-----------------------------------------
Rows the adversary did not touch change only if another participant's batch
contains the token, and then by a nonzero amount: they are tested exactly.
For rows the adversary touched too, :meth:`EmbeddingMembership.observe` takes
the adversary's own update ``u`` (its gradient, or its local model change) and
estimates the server's scale ``c`` with which ``u`` enters the joint update
(``-lr`` for synchronized SGD, ``n_adv / n`` for model averaging) from the
least-squares coefficients of ``Delta theta_row`` on ``u_row``: most of those
rows are the adversary's alone, so their median is ``c`` up to rounding, and
a pooled fit over the rows that agree with it removes the rounding (this
needs no knowledge of the server's settings; see
:func:`contribution_scale`). The residual ``Delta theta - c u`` of those
rows is then compared with a tolerance of a few float32 ulps of the
row's largest parameter (rounding of the server's float64 update cast back
to float32); every row is also allowed any quantisation step given (secure
aggregation's fixed point). Another
participant's update below half an ulp of the parameter is invisible: float32
parameters cannot record it (vanishing GRU gradients of early tokens can be
that small; fedleak's models start embeddings small for this reason).

Server optimisers that destroy the signal
-----------------------------------------
The attack needs rows of unseen tokens to stay exactly unchanged. Two common
server-side optimisers break that:

- **weight decay** on the server (``theta_t = (1 - lr lambda) theta_{t-1} -
  lr g``) moves every nonzero row every round: ``V_t`` is the whole
  vocabulary, every record looks like a member, precision drops to the base
  rate (tested);
- **momentum** on the server (``v_t = mu v_{t-1} + g``) keeps moving every
  row ever touched: ``V_t`` becomes the union of all earlier batches and
  precision decays round after round (tested).

Adaptive server optimisers (FedAdam, FedYogi) carry momentum too. Plain
:class:`fedleak.strategies.SyncSGD` and :class:`fedleak.strategies.ModelAveraging`
(and Flower's ``FedAvg``) keep the signal.

Everything here is Flower-free and works on numpy arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fedleak.errors import ConfigError

__all__ = [
    "DEFAULT_ULPS",
    "EmbeddingMembership",
    "MembershipScores",
    "changed_rows",
    "contribution_scale",
    "record_bag",
    "rounding_tolerance",
    "score_membership",
]

DEFAULT_ULPS = 4.0
"""Rounding tolerance in float32 ulps of the parameters (see module notes)."""


def _as_matrix(update: ArrayLike, name: str) -> np.ndarray:
    array = np.asarray(update)
    if array.ndim != 2:
        raise ConfigError(
            f"{name} must be an embedding update of shape (vocabulary, dim), "
            f"got shape {array.shape}"
        )
    return array


def changed_rows(
    update: ArrayLike,
    *,
    tolerance: ArrayLike = 0.0,
    ignore: Iterable[int] = (0,),
) -> np.ndarray:
    """Return the ids of the embedding rows that changed (the bag of words V_t).

    Parameters
    ----------
    update : array_like
        An embedding update (or residual) of shape ``(|V|, d)``.
    tolerance : float or array_like, default=0.0
        An entry counts as changed if its absolute value exceeds this
        (broadcast against ``update``); 0 tests for exact nonzeros.
    ignore : iterable of int, default=(0,)
        Ids never reported, by default the padding token: it is not a word,
        and its row never changes in fedleak's models (``padding_idx``); a
        defense that adds noise to every row (DP-SGD) may move it anyway.

    Returns
    -------
    numpy.ndarray
        Sorted int64 row ids.
    """
    matrix = _as_matrix(update, "update")
    # "not within tolerance" also flags non-finite entries (a diverged model)
    moved = (~(np.abs(matrix) <= np.asarray(tolerance))).any(axis=1)
    for i in ignore:
        if 0 <= i < moved.shape[0]:
            moved[i] = False
    return np.flatnonzero(moved).astype(np.int64)


def rounding_tolerance(
    *parameters: ArrayLike, ulps: float = DEFAULT_ULPS
) -> np.ndarray:
    """Return ``ulps`` float32 ulps of each row's largest parameter magnitude.

    The server updates in float64 and casts to float32, and the adversary
    removes its own contribution with an estimated scale: the residual of a
    row no one else touched is a few float32 ulps of the row's largest
    entry, at most. Returns shape ``(rows, 1)`` (broadcasts over a row).
    """
    if not parameters:
        raise ConfigError("give at least one parameter array")
    scale = np.abs(_as_matrix(parameters[0], "parameters").astype(np.float32))
    for p in parameters[1:]:
        scale = np.maximum(
            scale, np.abs(_as_matrix(p, "parameters").astype(np.float32))
        )
    row_max = scale.max(axis=1, keepdims=True)
    out: np.ndarray = ulps * np.spacing(row_max).astype(np.float64)
    return out


def contribution_scale(
    delta: ArrayLike, own: ArrayLike, *, row_tolerance: ArrayLike | None = None
) -> float:
    """Estimate ``c`` in ``delta = c * own + others`` from the rows ``own`` touches.

    For each row with ``own_row != 0`` the least-squares coefficient
    ``<delta_row, own_row> / <own_row, own_row>`` is ``c`` (up to float32
    rounding of ``delta``) when no other participant touched the row. The
    median coefficient picks ``c`` out of the rows touched by others; the
    rows that agree with it are then pooled into one least-squares fit,
    dominated by the largest rows, whose rounding error relative to ``own``
    is the smallest (module notes). A row agrees if its residual under the
    median is within 8 times ``row_tolerance`` (shape ``(rows, 1)``, e.g.
    :func:`rounding_tolerance`), or, without it, if its coefficient is
    within 0.1% of the median. Returns 0 when ``own`` touches no row.
    """
    d = _as_matrix(delta, "delta").astype(np.float64)
    u = _as_matrix(own, "own update").astype(np.float64)
    if d.shape != u.shape:
        raise ConfigError(f"delta {d.shape} and own update {u.shape} differ in shape")
    norms = np.einsum("ij,ij->i", u, u)
    rows = norms > 0
    if not rows.any():
        return 0.0
    products = np.einsum("ij,ij->i", d[rows], u[rows])
    coefficients = products / norms[rows]
    median = float(np.median(coefficients))
    if row_tolerance is None:
        inliers = np.abs(coefficients - median) <= 1e-3 * abs(median)
    else:
        tolerance = np.broadcast_to(np.asarray(row_tolerance), d.shape)[rows]
        residual = np.abs(d[rows] - median * u[rows])
        inliers = (residual <= 8.0 * tolerance).all(axis=1)
    if not inliers.any():
        return median
    return float(products[inliers].sum() / norms[rows][inliers].sum())


def record_bag(ids: ArrayLike, *, ignore: Iterable[int] = (0,)) -> np.ndarray:
    """Return the sorted distinct token ids ``V_r`` of one record (padding dropped)."""
    bag = np.unique(np.asarray(ids, dtype=np.int64).ravel())
    drop = np.asarray(list(ignore), dtype=np.int64)
    return bag[~np.isin(bag, drop)]


@dataclass(frozen=True)
class MembershipScores:
    """Outcome of the decision ``V_r subset of V_t for some t`` on labelled records.

    Attributes
    ----------
    precision, recall : float
        Of the "member" decisions (``nan`` when undefined).
    true_positives, false_positives, false_negatives, true_negatives : int
        Confusion counts.
    num_rounds : int
        Number of observed bags ``T``.
    mean_bag_size : float
        Mean ``|V_t|`` over the observed rounds.
    """

    precision: float
    recall: float
    true_positives: int
    false_positives: int
    false_negatives: int
    true_negatives: int
    num_rounds: int
    mean_bag_size: float

    def as_dict(self) -> dict[str, float | int]:
        """Return the scores as a JSON-ready dict."""
        return {
            "precision": self.precision,
            "recall": self.recall,
            "true_positives": self.true_positives,
            "false_positives": self.false_positives,
            "false_negatives": self.false_negatives,
            "true_negatives": self.true_negatives,
            "num_rounds": self.num_rounds,
            "mean_bag_size": self.mean_bag_size,
        }


def score_membership(
    decisions: ArrayLike, truth: ArrayLike, *, num_rounds: int, mean_bag_size: float
) -> MembershipScores:
    """Compute precision and recall of binary membership ``decisions``."""
    d = np.asarray(decisions, dtype=bool)
    t = np.asarray(truth, dtype=bool)
    if d.shape != t.shape:
        raise ConfigError(f"decisions {d.shape} and truth {t.shape} differ in shape")
    tp, fp = int((d & t).sum()), int((d & ~t).sum())
    fn, tn = int((~d & t).sum()), int((~d & ~t).sum())
    return MembershipScores(
        precision=tp / (tp + fp) if tp + fp else float("nan"),
        recall=tp / (tp + fn) if tp + fn else float("nan"),
        true_positives=tp,
        false_positives=fp,
        false_negatives=fn,
        true_negatives=tn,
        num_rounds=num_rounds,
        mean_bag_size=mean_bag_size,
    )


class EmbeddingMembership:
    """The embedding-layer membership attack of seed 000 Ch. 7.1.3 / 7.2.2.

    Feed it one observation per round (:meth:`observe`, or
    :meth:`observe_bag` for an already extracted bag), then ask
    :meth:`infer` / :meth:`evaluate` about candidate records.

    Parameters
    ----------
    vocab_size : int
        Number of embedding rows ``|V|``.
    ignore : iterable of int, default=(0,)
        Token ids never part of a bag (padding).
    ulps : float, default=DEFAULT_ULPS
        Rounding tolerance in float32 ulps (see :func:`rounding_tolerance`).

    Examples
    --------
    >>> import numpy as np
    >>> attack = EmbeddingMembership(vocab_size=5)
    >>> update = np.zeros((5, 2)); update[[2, 3]] = 0.1
    >>> attack.observe(update).tolist()
    [2, 3]
    >>> attack.infer([[2, 3, 0], [2, 4, 0]]).tolist()
    [True, False]
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        ignore: Iterable[int] = (0,),
        ulps: float = DEFAULT_ULPS,
    ) -> None:
        if vocab_size < 1:
            raise ConfigError(f"vocab_size must be >= 1, got {vocab_size}")
        if not ulps >= 0:
            raise ConfigError(f"ulps must be >= 0, got {ulps}")
        self.vocab_size = int(vocab_size)
        self.ignore = tuple(int(i) for i in ignore)
        self.ulps = float(ulps)
        self._bags: list[np.ndarray] = []

    @property
    def bags(self) -> list[np.ndarray]:
        """The observed bags of words ``[V_1, ..., V_T]`` (sorted id arrays)."""
        return list(self._bags)

    def observe(
        self,
        delta: ArrayLike,
        *,
        own: ArrayLike | None = None,
        parameters: Sequence[ArrayLike] = (),
        extra_tolerance: float = 0.0,
    ) -> np.ndarray:
        """Extract and store ``V_t`` from one round's joint embedding update.

        Parameters
        ----------
        delta : array_like
            ``theta_t - theta_{t-1}`` of the embedding matrix (what every
            participant sees), or directly the other participants' aggregate.
        own : array_like, optional
            The adversary's own update of the same matrix this round (its
            gradient in synchronized SGD, its local model change in model
            averaging); its contribution is removed with the scale estimated
            by :func:`contribution_scale`.
        parameters : sequence of array_like
            The embedding matrix before and after the round; sets the float32
            rounding tolerance on the rows ``own`` touches (other rows, and
            all rows when empty, are tested exactly: a row nobody touched
            keeps its exact value).
        extra_tolerance : float, default=0.0
            Added to the tolerance, e.g. the fixed-point step of secure
            aggregation times the number of summed clients.

        Returns
        -------
        numpy.ndarray
            The bag ``V_t`` (also appended to :attr:`bags`).
        """
        d = _as_matrix(delta, "delta").astype(np.float64)
        if d.shape[0] != self.vocab_size:
            raise ConfigError(
                f"the update has {d.shape[0]} rows, the attack expects "
                f"{self.vocab_size} (vocab_size)"
            )
        tolerance = np.full((d.shape[0], 1), float(extra_tolerance))
        if own is not None:
            u = _as_matrix(own, "own update").astype(np.float64)
            rounding = (
                rounding_tolerance(*parameters, ulps=self.ulps) if parameters else None
            )
            d = d - contribution_scale(d, u, row_tolerance=rounding) * u
            if rounding is not None:
                # Rounding residue only where the adversary's own update was
                # subtracted; rows it did not touch are tested exactly.
                mine = np.abs(u).sum(axis=1) > 0
                tolerance = tolerance + np.where(mine[:, None], rounding, 0.0)
        bag = changed_rows(d, tolerance=tolerance, ignore=self.ignore)
        self._bags.append(bag)
        return bag

    def observe_bag(self, bag: Iterable[int]) -> np.ndarray:
        """Store an already extracted bag of token ids (e.g. from a saved run)."""
        ids = np.unique(np.asarray(list(bag), dtype=np.int64))
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ConfigError(f"bag ids must lie in [0, {self.vocab_size})")
        ids = ids[~np.isin(ids, self.ignore)]
        self._bags.append(ids)
        return ids

    def _bag_matrix(self) -> np.ndarray:
        matrix = np.zeros((len(self._bags), self.vocab_size), dtype=bool)
        for t, bag in enumerate(self._bags):
            matrix[t, bag] = True
        return matrix

    def infer(self, records: Iterable[ArrayLike]) -> np.ndarray:
        """Decide membership: ``V_r subset of V_t`` for some observed ``t``.

        Parameters
        ----------
        records : iterable of array_like
            Token-id records (padding allowed; ids outside the vocabulary are
            never in a bag).

        Returns
        -------
        numpy.ndarray of bool
            One decision per record. A record with no words is never a member.
        """
        matrix = self._bag_matrix()
        out: list[bool] = []
        for record in records:
            words = record_bag(record, ignore=self.ignore)
            if words.size == 0 or matrix.shape[0] == 0:
                out.append(False)
                continue
            if words.max() >= self.vocab_size or words.min() < 0:
                out.append(False)
                continue
            out.append(bool(matrix[:, words].all(axis=1).any()))
        return np.asarray(out, dtype=bool)

    def evaluate(
        self, members: Iterable[ArrayLike], non_members: Iterable[ArrayLike]
    ) -> MembershipScores:
        """Precision and recall of :meth:`infer` on known members and non-members."""
        member_list, other_list = list(members), list(non_members)
        decisions = np.concatenate(
            [self.infer(member_list), self.infer(other_list)]
        ).astype(bool)
        truth = np.r_[np.ones(len(member_list), bool), np.zeros(len(other_list), bool)]
        sizes = [b.size for b in self._bags]
        return score_membership(
            decisions,
            truth,
            num_rounds=len(self._bags),
            mean_bag_size=float(np.mean(sizes)) if sizes else 0.0,
        )
