"""Sketch statistics and private aggregation (seed 000 Ch. 2.2 and Ch. 4).

- :class:`CountMinSketch`, :class:`CountSketch` -- linear integer sketches
  (Definition 7; the paired-bucket Count Sketch);
- :func:`aggregate_sketches` -- masked aggregation with
  :mod:`fedleak.secagg` (groups, dropout recovery);
- :mod:`~fedleak.sketches.recommender` -- private ItemKNN from co-view
  sketches (Ch. 4.1);
- :mod:`~fedleak.sketches.heatmaps` -- location heat maps and EWMA
  prediction (Ch. 4.2);
- :mod:`~fedleak.sketches.elgamal` and :mod:`~fedleak.sketches.median` --
  additively homomorphic EC-ElGamal with several authorities and the private
  median (Ch. 4.3);
- :mod:`~fedleak.sketches.messages` -- the names of the Flower run
  (:mod:`fedleak.strategies.sketch_analytics`,
  :mod:`fedleak.clients.sketch_analytics`).
"""

from __future__ import annotations

from .base import MERSENNE_PRIME, LinearSketch
from .count_min import CountMinSketch
from .count_sketch import CountSketch
from .masked import MaskedAggregate, aggregate_sketches
from .median import MedianResult, bisect_median, private_median

__all__ = [
    "MERSENNE_PRIME",
    "CountMinSketch",
    "CountSketch",
    "LinearSketch",
    "MaskedAggregate",
    "MedianResult",
    "aggregate_sketches",
    "bisect_median",
    "private_median",
]
