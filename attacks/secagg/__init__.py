"""A malicious server against secure aggregation (``fedleak.attacks.secagg``).

Flower-free.

:func:`run_secagg_attacks` plays each attack of :mod:`~.plays` (straggler,
false dropout, group of one, round replay, low threshold, split view,
downgrade) against fedleak's client sessions in both modes, and against the
seed's unguarded client, and reports per attack and mode whether the server
recovered the target's vector, the error against the truth, what the server
did and which client guard refused (:class:`AttackReport`, JSON-ready).
Against ``mode="thesis"`` the straggler and false-dropout attacks succeed:
that is the seed protocol's limit, now measured. Against the default double
masking every attack fails.
:class:`fedleak.strategies.malicious_secagg.MaliciousSecureAggregation`
plays the same attacks over a Flower Grid.
"""

from __future__ import annotations

from .outcome import (
    ATTACKS,
    CLIENT_FEDLEAK,
    CLIENT_SEED,
    REQUIRED_ATTACKS,
    AttackOutcome,
    AttackReport,
)
from .plays import PLAYS, AttackSetup, Attempt
from .runner import run_secagg_attacks, score
from .victims import InputFn, LocalVictims, SeedClient, Victims

__all__ = [
    "ATTACKS",
    "CLIENT_FEDLEAK",
    "CLIENT_SEED",
    "PLAYS",
    "REQUIRED_ATTACKS",
    "AttackOutcome",
    "AttackReport",
    "AttackSetup",
    "Attempt",
    "InputFn",
    "LocalVictims",
    "SeedClient",
    "Victims",
    "run_secagg_attacks",
    "score",
]
