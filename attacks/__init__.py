"""Attack algorithms and their evaluation, Flower-free (``fedleak.attacks``).

Grouped by family; each family package re-exports its modules' public names:

:mod:`fedleak.attacks.membership`
    Membership inference: embedding-layer updates (seed 000 Ch. 7.1.3),
    classifiers (shadow models, loss threshold; seed 004 Ch. 4), generative
    models (white/black-box, auxiliary knowledge, Monte Carlo, reconstruction;
    seed 000 Ch. 6, seed 004 Ch. 4.4).
:mod:`fedleak.attacks.property`
    Property inference from gradient updates, passive and active (seed 000
    Ch. 7.1.4-7.1.5), and its text analogue.
:mod:`fedleak.attacks.audit`
    The differential-identifiability adversary that audits DP-SGD (seed 002).

Nothing here imports Flower: every attack runs on plain arrays and tensors,
and the Flower clients of :mod:`fedleak.clients` drive them in simulations.
"""

from importlib import import_module
from types import ModuleType

__all__ = ["audit", "membership", "property"]


def __getattr__(name: str) -> ModuleType:
    """Import a family on first access (``fedleak.attacks.membership``)."""
    if name in __all__:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
