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
rows it touched (:func:`contribution_scale`: the rows nobody else touched all
agree on ``c`` up to rounding, the others scatter; this needs no knowledge of
the server's settings and works when those rows are a minority). It then
recomputes what the server would have written from ``u`` alone,
``float32(theta_{t-1} + c u)``, and flags a row if any parameter differs from
the new model by more than ``ulps`` float32 ulps (default 1: the server
rounds its float64 update to float32 once, and a scale known up to rounding
can move a rounding decision by one ulp). Every row is also allowed any
quantisation step given (secure aggregation's fixed point). Another
participant's update below about 1.5 ulps of a parameter the adversary also
moved, or below half an ulp of one it did not, is invisible: float32
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

DEFAULT_ULPS = 1.0
"""Tolerance, in float32 ulps of each parameter, of the residual test (module notes)."""

FIT_ULPS = 4.0
"""Rounding bound, in float32 ulps of a row's largest parameter, of the scale fit."""


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


def rounding_tolerance(*parameters: ArrayLike, ulps: float = FIT_ULPS) -> np.ndarray:
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
    ``a_i = <delta_row, own_row> / <own_row, own_row>`` is ``c`` up to
    rounding when no other participant touched the row, and something else
    when one did. Written by hand: this is a one-parameter robust fit that
    must find the rows nobody else touched even when they are a minority
    (large batches: most of the adversary's words are also the others').

    With ``row_tolerance`` (a bound on the rounding of ``delta``, shape
    ``(rows, 1)`` as from :func:`rounding_tolerance`, or per parameter), a
    consensus search: up to 128 coefficients, spread over the rows from the
    most to the least precise, are tried as ``c``; each is scored by the
    number of rows it explains (``|delta - c own| <= tolerance`` in every
    parameter). The rows nobody else touched all agree with the true scale
    while the others' coefficients scatter, so the winner is one of them;
    a pooled least-squares fit over the rows it explains (the largest rows,
    with the smallest relative error, dominate) removes the rounding, and is
    repeated once with the refined scale. Without ``row_tolerance``, the
    median coefficient and the rows within 0.1% of it are used. Returns 0
    when ``own`` touches no row.
    """
    d = _as_matrix(delta, "delta").astype(np.float64)
    u = _as_matrix(own, "own update").astype(np.float64)
    if d.shape != u.shape:
        raise ConfigError(f"delta {d.shape} and own update {u.shape} differ in shape")
    return _fit_scale(d, u, row_tolerance)[0]


_CANDIDATES = 128


def _fit_scale(
    d: np.ndarray, u: np.ndarray, tolerance: ArrayLike | None
) -> tuple[float, float]:
    """Return ``c`` and a bound on its error (0 without ``tolerance``).

    With ``tolerance`` two searches run (:func:`contribution_scale`): the
    consensus of up to 128 candidate coefficients, and the deepest overlap
    of the rows' coefficient intervals (:func:`_deepest_overlap`); each is
    refined, and the one whose scale explains more rows within the rows'
    own rounding wins (the consensus on a tie). The consensus alone can be
    won by an imprecise candidate: its width, added to every row's
    tolerance, explains rows of any scale. In a 3,000-round two-party run at
    batch 500 this happened in about one round in six after round 240 (the
    trained model's own-only rows hold small updates): the refined scale
    then explained no row and the whole of the adversary's bag (about 1,500
    words) was read as the target's.
    """
    norms = np.einsum("ij,ij->i", u, u)
    touched = np.flatnonzero(norms > 0)
    if touched.size == 0:
        return 0.0, 0.0
    dt, ut, nt = d[touched], u[touched], norms[touched]
    products = np.einsum("ij,ij->i", dt, ut)
    coefficients = products / nt
    if tolerance is None:
        median = float(np.median(coefficients))
        inliers = np.abs(coefficients - median) <= 1e-3 * abs(median)
        if not inliers.any():
            return median, 0.0
        return float(products[inliers].sum() / nt[inliers].sum()), 0.0
    tol = np.broadcast_to(np.asarray(tolerance, np.float64), d.shape)[touched]
    # a row's coefficient is off by at most ||tol_row|| / ||own_row||
    # (Cauchy-Schwarz) when nobody else touched it
    widths = np.sqrt(np.square(tol).sum(axis=1) / nt)
    abs_u = np.abs(ut)

    def explained(c: float, slack: float) -> np.ndarray:
        out: np.ndarray = (np.abs(dt - c * ut) <= tol + slack * abs_u).all(axis=1)
        return out

    def refined(scale: float, slack: float) -> tuple[float, float]:
        for _ in range(2):
            inliers = explained(scale, slack)
            if not inliers.any():
                break
            weight = float(nt[inliers].sum())
            scale = float(products[inliers].sum() / weight)
            # six standard errors of the pooled fit (rounding uniform within
            # +-tol/2: variance tol^2 / 12 per parameter)
            variance = (np.square(tol[inliers] * ut[inliers]) / 12.0).sum()
            slack = 6.0 * float(np.sqrt(variance)) / weight
        return scale, slack

    # candidates evenly spread over the rows sorted by precision (a row whose
    # coefficient is ~0 has infinite relative width: sorted last, as meant)
    with np.errstate(over="ignore"):
        relative = widths / np.maximum(np.abs(coefficients), 1e-300)
    order = np.argsort(relative)
    spread_at = np.unique(np.linspace(0, order.size - 1, _CANDIDATES).round())
    picks = order[spread_at.astype(np.int64)]
    counts = [int(explained(coefficients[k], widths[k]).sum()) for k in picks]
    best = int(picks[int(np.argmax(counts))])
    consensus = refined(float(coefficients[best]), float(widths[best]))
    deepest = refined(*_deepest_overlap(coefficients - widths, coefficients + widths))
    if explained(deepest[0], 0.0).sum() > explained(consensus[0], 0.0).sum():
        return deepest
    return consensus


def _deepest_overlap(lo: np.ndarray, hi: np.ndarray) -> tuple[float, float]:
    """Return the centre and half-length of the first segment most intervals cover.

    ``[lo_i, hi_i]`` are closed intervals (``lo <= hi``); a sweep over their
    ends, starts before ends at equal points. Written by hand: a few lines
    of numpy, where a geometry library would be a dependency for one call.
    """
    points = np.concatenate([lo, hi])
    ends = np.concatenate([np.zeros(lo.size), np.ones(hi.size)])
    order = np.lexsort((ends, points))
    depth = np.cumsum(np.where(ends[order] == 0, 1, -1))
    k = int(np.argmax(depth))  # a start: depth only grows at starts
    start, end = float(points[order[k]]), float(points[order[k + 1]])
    return (start + end) / 2.0, (end - start) / 2.0


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
        Tolerance of the residual test on the rows the adversary touched, in
        float32 ulps of each parameter (module notes). A server that rounds
        once, from float64, needs 1; one that aggregates in float32 may need
        a few (a higher value hides others' updates smaller than it).

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
        own_quantum: float = 0.0,
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
            The embedding matrix before and after the round (with ``own``):
            the rows ``own`` touches are tested in float32, against what the
            server would have written from ``own`` alone, with a tolerance of
            ``ulps`` ulps per parameter; other rows (and all rows when
            ``parameters`` is empty) are tested exactly: a row nobody
            touched keeps its exact value.
        extra_tolerance : float, default=0.0
            Added to the tolerance of every row, in parameter units.
        own_quantum : float, default=0.0
            The rounding of the aggregate in units of ``own`` (with ``own``):
            under secure aggregation's fixed point, ``group size * 0.5 /
            (scale * own weight)``; every row's tolerance grows by ``|c|``
            times it, ``c`` the fitted scale (so the adversary needs no
            server settings for it either).

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
        if not (extra_tolerance >= 0 and own_quantum >= 0):
            raise ConfigError(
                "extra_tolerance and own_quantum must be >= 0, got "
                f"{extra_tolerance} and {own_quantum}"
            )
        tolerance: np.ndarray = np.full((d.shape[0], 1), float(extra_tolerance))
        if own is not None:
            u = _as_matrix(own, "own update").astype(np.float64)
            if u.shape != d.shape:
                raise ConfigError(
                    f"delta {d.shape} and own update {u.shape} differ in shape"
                )
            if parameters:
                # a diverged model (the noised sum at float32's edge)
                # overflows the fit and the prediction: the residual is then
                # non-finite, which changed_rows flags as moved
                with np.errstate(over="ignore", invalid="ignore"):
                    before, after = self._before_after(parameters, d.shape)
                    ulp = np.spacing(np.maximum(np.abs(before), np.abs(after))).astype(
                        np.float64
                    )
                    fit_tolerance = ulp
                    if own_quantum:
                        rough = abs(contribution_scale(d, u))
                        fit_tolerance = ulp + 2.0 * rough * own_quantum
                    scale, spread = _fit_scale(d, u, fit_tolerance)
                    # What the server would have written had nobody else touched
                    # the rows: the residual is compared in float32 units, allowing
                    # for the error of the fitted scale.
                    predicted = (before.astype(np.float64) + scale * u).astype(
                        np.float32
                    )
                    d = after.astype(np.float64) - predicted.astype(np.float64)
                    ulp = np.spacing(
                        np.maximum(np.abs(after), np.abs(predicted))
                    ).astype(np.float64)
                    # rows the adversary did not touch are tested exactly, unless
                    # the aggregate is rounded (fixed point): then every row is
                    mine = np.abs(u).sum(axis=1, keepdims=True) > 0
                    if own_quantum:
                        mine = np.ones_like(mine)
                    tolerance = tolerance + np.where(
                        mine, self.ulps * ulp + spread * np.abs(u), 0.0
                    )
            else:
                scale = contribution_scale(d, u)
                d = d - scale * u
            tolerance = tolerance + abs(scale) * float(own_quantum)
        bag = changed_rows(d, tolerance=tolerance, ignore=self.ignore)
        self._bags.append(bag)
        return bag

    @staticmethod
    def _before_after(
        parameters: Sequence[ArrayLike], shape: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        if len(parameters) != 2:
            raise ConfigError(
                "parameters must be the embedding matrix before and after the "
                f"round (two arrays), got {len(parameters)}"
            )
        before, after = (
            _as_matrix(p, "parameters").astype(np.float32) for p in parameters
        )
        if before.shape != shape or after.shape != shape:
            raise ConfigError(
                f"parameters {before.shape} / {after.shape} differ in shape from "
                f"the update {shape}"
            )
        return before, after

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
