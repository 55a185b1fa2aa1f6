"""Which non-members the embedding-layer attack flags, by the size of their record.

Seed 000 Ch. 7.2.2 flags a record ``r`` as a member when its distinct words
``V_r`` lie inside one round's bag ``V_t``. A non-member is flagged in error
when some batch of the target happens to use every word of it, which is
likelier the fewer distinct words it has and the more rounds there are.
:func:`false_flags_by_size` counts those errors per band of ``|V_r|``: the
measurement behind the explanation of Table 7.2's precision on sparse
stand-in data (the README's membership section). No library computes this
breakdown of a bag-subset rule, hence the few lines here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fedleak.errors import ConfigError

from .embedding import EmbeddingMembership, record_bag

__all__ = ["SIZE_EDGES", "false_flags_by_size"]

SIZE_EDGES: tuple[int, ...] = (10, 13, 16, 20)
"""Band edges of distinct words per record: ``< 10``, 10-12, 13-15, 16-19,
``>= 20`` (the synthetic check-in users have at least 10 check-ins)."""


def _label(lo: int | None, hi: int | None) -> str:
    if lo is None:
        return f"<{hi}"
    if hi is None:
        return f">={lo}"
    return f"{lo}-{hi - 1}"


def false_flags_by_size(
    attack: EmbeddingMembership,
    non_members: Iterable[ArrayLike],
    *,
    edges: Sequence[int] = SIZE_EDGES,
) -> dict[str, Any]:
    """Count the non-members ``attack`` flags, per band of distinct words.

    Parameters
    ----------
    attack : EmbeddingMembership
        An attack that has observed its rounds' bags.
    non_members : iterable of array_like
        Token-id records known not to be in the target's data.
    edges : sequence of int, default=SIZE_EDGES
        Strictly increasing band edges of ``|V_r|`` (padding not counted).

    Returns
    -------
    dict
        ``bands``: one ``{"distinct_words", "records", "flagged", "rate"}``
        per band that holds a record (``rate`` is ``flagged / records``);
        ``median_words_flagged`` and ``median_words_not_flagged`` (``None``
        when the group is empty).

    Raises
    ------
    ConfigError
        If ``edges`` is empty or not strictly increasing.
    """
    bounds = [int(e) for e in edges]
    if not bounds or any(b <= a for a, b in itertools.pairwise(bounds)):
        raise ConfigError(f"edges must be strictly increasing, got {list(edges)}")
    records = list(non_members)
    flagged = attack.infer(records)
    sizes = np.array([record_bag(r, ignore=attack.ignore).size for r in records])
    band_of = np.searchsorted(np.asarray(bounds), sizes, side="right")
    limits = [None, *bounds, None]
    bands = []
    for k, (lo, hi) in enumerate(itertools.pairwise(limits)):
        inside = band_of == k
        if not inside.any():
            continue
        count, hits = int(inside.sum()), int(flagged[inside].sum())
        bands.append(
            {
                "distinct_words": _label(lo, hi),
                "records": count,
                "flagged": hits,
                "rate": hits / count,
            }
        )

    def median(group: np.ndarray) -> float | None:
        return float(np.median(group)) if group.size else None

    return {
        "bands": bands,
        "median_words_flagged": median(sizes[flagged]),
        "median_words_not_flagged": median(sizes[~flagged]),
    }
