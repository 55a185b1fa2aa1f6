"""Typed, JSON-ready results of the secure-aggregation attacks."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "ATTACKS",
    "CLIENT_FEDLEAK",
    "CLIENT_SEED",
    "REQUIRED_ATTACKS",
    "AttackOutcome",
    "AttackReport",
]

#: The attacks of the issue, each run against both modes.
REQUIRED_ATTACKS: Final = (
    "straggler",
    "false-dropout",
    "group-of-one",
    "round-replay",
    "low-threshold",
)
#: Every attack: the required ones, a server that shows clients different
#: online sets, and a downgrade to thesis mode (double-masking clients only).
ATTACKS: Final = (*REQUIRED_ATTACKS, "split-view", "downgrade")
#: fedleak's client sessions, with their guards.
CLIENT_FEDLEAK: Final = "fedleak"
#: The seed's client (thesis mode, no guards): what the attacks do to it.
CLIENT_SEED: Final = "seed"


@dataclass(frozen=True)
class AttackOutcome:
    """What one attack against one mode achieved.

    Attributes
    ----------
    attack : str
        One of :data:`ATTACKS`.
    mode : str
        ``"double-masking"`` or ``"thesis"``.
    client : str
        :data:`CLIENT_FEDLEAK` (guarded sessions) or :data:`CLIENT_SEED`.
    recovered : bool
        Whether the server's best reconstruction of the target's vector
        (round-replay: of the difference of its two inputs) lies within
        ``tolerance`` of the truth.
    max_abs_error : float or None
        The largest absolute error of that reconstruction against the
        truth; None when the server had nothing to decode (every request
        refused).
    tolerance : float
        The fixed-point rounding bound that counts as recovered.
    server_action : str
        What the server did.
    refused_by : tuple of str
        The names of the client guards that refused a request.
    refusals : int
        How many requests were refused.
    """

    attack: str
    mode: str
    client: str
    recovered: bool
    max_abs_error: float | None
    tolerance: float
    server_action: str
    refused_by: tuple[str, ...] = ()
    refusals: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the outcome as JSON-ready values (infinite errors as None)."""
        error = self.max_abs_error
        if error is not None and not math.isfinite(error):
            error = None
        return {
            "attack": self.attack,
            "mode": self.mode,
            "client": self.client,
            "recovered": self.recovered,
            "max_abs_error": error,
            "tolerance": self.tolerance,
            "server_action": self.server_action,
            "refused_by": list(self.refused_by),
            "refusals": self.refusals,
        }


@dataclass(frozen=True)
class AttackReport:
    """Every outcome of one run of :func:`~fedleak.attacks.secagg.run_secagg_attacks`.

    Attributes
    ----------
    outcomes : tuple of AttackOutcome
        In run order.
    settings : dict
        The run's settings (clients, vector length, seed, threshold).
    """

    outcomes: tuple[AttackOutcome, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    def outcome(
        self, attack: str, mode: str, client: str = CLIENT_FEDLEAK
    ) -> AttackOutcome:
        """Return the outcome of ``attack`` against ``mode`` and ``client``.

        Raises
        ------
        KeyError
            If that combination was not run.
        """
        for o in self.outcomes:
            if (o.attack, o.mode, o.client) == (attack, mode, client):
                return o
        raise KeyError(f"no outcome for attack {attack!r}, mode {mode!r}, {client}")

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready values.

        ``results[attack][mode]`` holds fedleak's clients' outcomes,
        ``seed_client[attack][mode]`` the seed client's.
        """
        results: dict[str, dict[str, Any]] = {}
        seed: dict[str, dict[str, Any]] = {}
        for o in self.outcomes:
            target = results if o.client == CLIENT_FEDLEAK else seed
            target.setdefault(o.attack, {})[o.mode] = o.to_dict()
        return {
            "schema_version": 1,
            "settings": dict(self.settings),
            "results": results,
            "seed_client": seed,
        }
