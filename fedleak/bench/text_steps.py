"""The text property experiment's learning rates and run labels.

Kept apart from :mod:`fedleak.bench.property` so that the reproduction
report (:mod:`fedleak.bench.seed_claims`) reads the same K sweep without
importing the bench.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

TEXT_TWO_PARTY_LEARNING_RATE: Final = 0.3
"""Server step of the two-party text runs (``theta -= lr * sum_k g_k``)."""

TEXT_SUMMED_STEP: Final = 2 * TEXT_TWO_PARTY_LEARNING_RATE
"""``lr * K`` of every run of the text K sweep (Fig. 7.7(b)).

Alg. 1 sums the K gradients. The seed trains its multi-party models "with
the same hyper-parameters as in the two-party case"; at the two-party
``lr = 0.3`` the sum of eight gradients overshoots and the K = 8 model ends at
test accuracy 0.60 (0.84-0.86 for K <= 4). The sweep therefore holds the
summed step at the two-party size, ``lr = 0.6 / K`` (what the strategy's
``reduction = "mean"`` does), and the plan adds K = 8 at the two-party
``lr`` beside it, so both readings of the seed are on record.
"""


def text_learning_rate(participants: int) -> float:
    """Return the text K sweep's learning rate for ``participants`` parties."""
    return TEXT_SUMMED_STEP / participants


def text_label(params: Mapping[str, Any]) -> str:
    """Return a text run's label: category, K, fraction, and ``lr`` if not 0.3."""
    label = (
        f"{params['property']}-K{params['participants']}-f{params['batch_fraction']}"
    )
    rate = params.get("learning_rate", TEXT_TWO_PARTY_LEARNING_RATE)
    if rate != TEXT_TWO_PARTY_LEARNING_RATE:
        label += f"-lr{rate:g}"
    return label


def on_text_fraction_sweep(params: Mapping[str, Any]) -> bool:
    """Whether a text run belongs to the fraction sweep (two parties, ``lr`` 0.3)."""
    rate = float(params.get("learning_rate", TEXT_TWO_PARTY_LEARNING_RATE))
    return params["participants"] == 2 and rate == TEXT_TWO_PARTY_LEARNING_RATE


def on_text_k_sweep(params: Mapping[str, Any]) -> bool:
    """Whether a text run belongs to the K sweep (full batch, ``lr * K`` held).

    Rows recorded before the sweep held the step carry no ``learning_rate``;
    they ran at the two-party rate.
    """
    rate = float(params.get("learning_rate", TEXT_TWO_PARTY_LEARNING_RATE))
    product = rate * int(params["participants"])
    # isclose's default tolerance, 1e-9 relative, absorbs 0.6 / K * K's rounding
    return params["batch_fraction"] == 1.0 and math.isclose(product, TEXT_SUMMED_STEP)
