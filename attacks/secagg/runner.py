"""Run every attack against every mode, in this process, and score it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedleak.errors import ConfigError
from fedleak.secagg import MODES, FixedPoint, Mode
from fedleak.secagg.client import ClientGuards

from .outcome import (
    ATTACKS,
    CLIENT_FEDLEAK,
    CLIENT_SEED,
    AttackOutcome,
    AttackReport,
)
from .plays import PLAYS, AttackSetup, Attempt
from .victims import LocalVictims

__all__ = ["run_secagg_attacks", "score"]

_CLIP = 2.0
_DOUBLE_ONLY = ("downgrade",)


def score(
    attack: str,
    mode: str,
    client: str,
    attempt: Attempt,
    truth: np.ndarray,
    tolerance: float,
) -> AttackOutcome:
    """Compare an attempt's reconstruction with the truth.

    Parameters
    ----------
    attack, mode, client : str
        What ran.
    attempt : Attempt
        The server's side.
    truth : numpy.ndarray
        The vector the server wanted (the target's input, or for
        round-replay the difference of its two inputs).
    tolerance : float
        Largest error that counts as recovered (fixed-point rounding).

    Returns
    -------
    AttackOutcome
    """
    error: float | None = None
    if attempt.guess is not None:
        diff = np.asarray(attempt.guess, dtype=np.float64) - truth
        error = float(np.max(np.abs(diff))) if diff.size else 0.0
    return AttackOutcome(
        attack=attack,
        mode=mode,
        client=client,
        recovered=error is not None and error <= tolerance,
        max_abs_error=error,
        tolerance=tolerance,
        server_action=attempt.server_action,
        refused_by=tuple(attempt.refused_by),
        refusals=len(attempt.refused_by),
    )


def _check_arguments(
    attacks: Sequence[str], modes: Sequence[Mode], n_clients: int, length: int
) -> None:
    """Refuse :func:`run_secagg_attacks`' unknown attacks and modes and bad sizes."""
    unknown = [a for a in attacks if a not in PLAYS]
    if unknown:
        raise ConfigError(f"unknown attack(s) {unknown}; choose from {list(ATTACKS)}")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ConfigError(f"unknown mode(s) {bad}; choose from {list(MODES)}")
    if n_clients < 8:
        raise ConfigError(f"n_clients must be >= 8, got {n_clients}")
    if length < 1:
        raise ConfigError(f"length must be >= 1, got {length}")


def _planned_runs(
    attacks: Sequence[str], modes: Sequence[Mode], seed_client: bool
) -> list[tuple[str, Mode, str]]:
    """Return the ``(attack, mode, client)`` triples to play, in order.

    fedleak's client faces every attack in every mode (``downgrade`` in
    double-masking only); with ``seed_client`` the seed's client then faces
    the attack in thesis mode.
    """
    runs: list[tuple[str, Mode, str]] = []
    for attack in attacks:
        for mode in modes:
            if attack in _DOUBLE_ONLY and mode != "double-masking":
                continue
            runs.append((attack, mode, CLIENT_FEDLEAK))
        if seed_client and attack not in _DOUBLE_ONLY:
            runs.append((attack, "thesis", CLIENT_SEED))
    return runs


@dataclass(frozen=True)
class _Federation:
    """The clients every attack plays against: their inputs and encoding.

    The inputs are uniform in ``[-1, 1]`` and a function of ``(seed, node,
    tag)``; the server targets ``target`` with ``colluder``'s help.
    """

    nodes: list[int]
    fixed: FixedPoint
    length: int
    seed: int

    @property
    def target(self) -> int:
        """The node whose input the server wants."""
        return self.nodes[2]

    @property
    def colluder(self) -> int:
        """The node that shares its input with the server."""
        return self.nodes[0]

    def inputs(self, node: int, tag: int) -> np.ndarray:
        """Return ``node``'s input vector of round ``tag``."""
        return np.random.default_rng([self.seed, node, tag]).uniform(
            -1.0, 1.0, self.length
        )

    def play(self, k: int, attack: str, mode: Mode, client: str) -> Attempt:
        """Play run ``k``: ``attack`` against ``client``'s clients in ``mode``."""
        victims = LocalVictims(
            self.inputs,
            self.fixed,
            client=client,
            guards=ClientGuards(accept_thesis=mode == "thesis"),
            rng=np.random.default_rng([self.seed, 0x4B455953, k]),
        )
        setup = AttackSetup(
            victims=victims,
            nodes=self.nodes,
            mode=mode,
            fixed_point=self.fixed,
            length=self.length,
            target=self.target,
            colluder=self.colluder,
            colluder_input=self.inputs(self.colluder, 0),
            decode=self.fixed.decode,
            seed=self.seed,
        )
        return PLAYS[attack](setup)

    def truth(self, attempt: Attempt) -> np.ndarray:
        """Return what ``attempt`` wanted: the target's input, or a difference."""
        truth = self.inputs(self.target, 0)
        if attempt.diff_tags:
            truth = self.inputs(self.target, attempt.diff_tags[0]) - self.inputs(
                self.target, attempt.diff_tags[1]
            )
        return truth


def run_secagg_attacks(
    *,
    n_clients: int = 8,
    length: int = 64,
    attacks: Sequence[str] = ATTACKS,
    modes: Sequence[Mode] = MODES,
    seed_client: bool = True,
    seed: int = 0,
) -> AttackReport:
    """Play every attack against every mode and measure what the server learns.

    fedleak's clients (:class:`~fedleak.secagg.client.ClientSession`, default
    guards; clients opt into thesis mode for the thesis runs) hold
    uniform vectors in ``[-1, 1]``; the server wants client 2's. With
    ``seed_client`` the required attacks and ``split-view`` also run against
    the seed's unguarded client in thesis mode, which shows that each play
    works when nothing refuses it.

    Parameters
    ----------
    n_clients : int, default=8
        Clients in the one group (>= 8 so that ``split-view`` can leave the
        target 3 online members, above the floor of 3 but below ``t + 1``).
    length : int, default=64
        Entries per vector.
    attacks : sequence of str, default=ATTACKS
        Which attacks to run.
    modes : sequence of str, default=("double-masking", "thesis")
        Which modes to attack (``downgrade`` runs in double-masking only).
    seed_client : bool, default=True
        Also attack the seed's client.
    seed : int, default=0
        Seed of the inputs, keys and groups. Failed attacks' errors are those
        of pseudo-random residues (self-mask seeds always come from the OS).

    Returns
    -------
    AttackReport
        Outcomes per attack, mode and client; ``to_dict()`` is JSON-ready.

    Raises
    ------
    ConfigError
        On an unknown attack or mode, or fewer than 8 clients.
    """
    _check_arguments(attacks, modes, n_clients, length)
    fixed = FixedPoint.auto(_CLIP, n_clients, modulus_bits=32)
    tolerance = fixed.max_abs_error(2) + 1e-12
    federation = _Federation(
        [1000 + 17 * i for i in range(n_clients)], fixed, length, seed
    )
    outcomes = []
    for k, (attack, mode, client) in enumerate(
        _planned_runs(attacks, modes, seed_client)
    ):
        attempt = federation.play(k, attack, mode, client)
        truth = federation.truth(attempt)
        outcomes.append(score(attack, mode, client, attempt, truth, tolerance))
    settings: dict[str, Any] = {
        "n_clients": n_clients,
        "length": length,
        "seed": seed,
        "threshold": "floor(n / 2) + 1",
        "client_floors": {"min_group": 3, "min_online": 3},
        "fixed_point": {"clip": fixed.clip, "scale": fixed.scale, "bits": 32},
    }
    return AttackReport(tuple(outcomes), settings)
