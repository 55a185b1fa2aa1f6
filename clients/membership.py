"""The embedding-layer membership adversary as a Flower client (seed 000 Ch. 7.1.3).

:class:`EmbeddingMembershipAdversary` follows the protocol honestly and, in
every round ``t`` it takes part in, derives from the global models it
received the bag of words ``V_{t-1}`` of the other participants' batches in
round ``t - 1`` with :class:`fedleak.attacks.membership.EmbeddingMembership`:

- **synchronized SGD** (:class:`fedleak.strategies.SyncSGD`, one batch per
  round): ``Delta theta = theta_t - theta_{t-1} = -lr * (g_adv + sum_others)``;
  its own term is its gradient ``g_adv``;
- **model averaging** (:class:`fedleak.strategies.ModelAveraging`, Flower's
  ``FedAvg``): ``Delta theta = sum_k n_k/n (theta_k - theta_{t-1})``; its own
  term is its local model change, and the bag is the union of the words of
  the others' local steps of the round.

The scale with which its own term enters (``-lr``, ``n_adv / n``) is
estimated from the update itself
(:func:`fedleak.attacks.membership.contribution_scale`), so the adversary
needs no server settings. Under secure aggregation
(:class:`fedleak.strategies.SecureAggregation`) the server's aggregate, hence
the new global model, is the same up to the fixed-point rounding of the masked
sum: under a model-averaging weighted sum it moves every row slightly (under
synchronized SGD rows nobody touched still sum to exactly 0). The adversary
reads the fixed point of its own upload (scale, group size, weighting) from
the secure-aggregation client mod
(:data:`fedleak.clients.secagg.QUANTISATION_STATE`) and allows for that
rounding itself; ``adversary.membership.extra_tolerance`` adds a tolerance
by hand (in parameter units) for other rounding.

Bags go to ``<run dir>/adversary/membership-bags.jsonl`` (one line per
observed round); :func:`load_membership_attack` rebuilds the attack from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from fedleak.attacks.membership.embedding import EmbeddingMembership
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord

from fedleak import protocol
from fedleak.defenses import EMBEDDING_KEY
from fedleak.errors import ConfigError, DataError
from fedleak.settings import AdversarySettings, RunContext
from fedleak.task import TaskSpec

from .honest import HonestClient
from .records import array_record
from .secagg import QUANTISATION_STATE

__all__ = [
    "BAGS_FILE",
    "MEMBERSHIP_KIND",
    "EmbeddingMembershipAdversary",
    "load_membership_attack",
    "membership_behaviour",
]

MEMBERSHIP_KIND = "embedding-membership"
"""``adversary.kind`` of this adversary."""

BAGS_FILE = "membership-bags.jsonl"
"""File (under ``<run dir>/adversary/``) holding the observed bags."""

_STATE_PREVIOUS = "fedleak.membership.previous"
_STATE_META = "fedleak.membership.meta"


def _embedding(arrays: ArrayRecord) -> np.ndarray:
    if EMBEDDING_KEY not in arrays:
        raise ConfigError(
            f"the model has no {EMBEDDING_KEY!r}: the embedding-membership "
            "adversary needs a text model (text-cnn or text-gru)"
        )
    out: np.ndarray = arrays[EMBEDDING_KEY].numpy()
    return out


def _round_of(config: ConfigRecord | None) -> int:
    value = None if config is None else config.get(protocol.SERVER_ROUND, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class EmbeddingMembershipAdversary(HonestClient):
    """Honest uploads; on the side, the bag of words of the others' batches.

    Settings come from the message config: ``adversary.*``
    (:class:`fedleak.settings.AdversarySettings`) and the run directory
    (:class:`fedleak.settings.RunContext`).
    """

    kind: str = MEMBERSHIP_KIND

    def settings(self) -> AdversarySettings:
        """Return the adversary settings of the current message."""
        if self.config is None:
            raise ConfigError("the adversary was not bound to a message (bind())")
        return AdversarySettings.from_config(self.config)

    def run_dir(self) -> str:
        """Return the run directory of the current message ("" = none)."""
        if self.config is None:
            raise ConfigError("the adversary was not bound to a message (bind())")
        return RunContext.from_config(self.config).run_dir

    def _context(self) -> Context:
        if self.context is None:
            raise ConfigError("the adversary was not bound to a node (bind())")
        return self.context

    def gradient_reply(
        self, arrays: ArrayRecord, state: ConfigRecord
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Honest one-batch gradient (Alg. 1); observe round ``t - 1`` on the side."""
        out, metrics = super().gradient_reply(arrays, state)
        theta = _embedding(arrays)
        self._observe(theta)
        self._remember(theta, _embedding(out), self._own_quantum(metrics))
        return out, metrics

    def model_reply(
        self, arrays: ArrayRecord, config: ConfigRecord, server_round: int
    ) -> tuple[ArrayRecord, MetricRecord]:
        """Honest local training (Alg. 2); observe round ``t - 1`` on the side."""
        out, metrics = super().model_reply(arrays, config, server_round)
        theta = _embedding(arrays)
        self._observe(theta)
        self._remember(
            theta,
            _embedding(out).astype(np.float64) - theta,
            self._own_quantum(metrics),
        )
        return out, metrics

    def _own_quantum(self, metrics: MetricRecord) -> float:
        """Fixed-point rounding of this round's masked sum, in units of own update.

        The decoded sum of ``k`` encodings ``round(w v scale) / scale`` is off
        by at most ``k * 0.5 / scale``; the adversary's own update enters it
        with weight ``w`` (its example count under weighted aggregation, 1
        otherwise), so in units of its own update the bound is ``k * 0.5 /
        (scale * w)``. 0 without secure aggregation.
        """
        record = self._context().state.config_records.get(QUANTISATION_STATE)
        if record is None:
            return 0.0
        scale, size = record.get("scale"), record.get("group-size")
        if not isinstance(scale, float) or not isinstance(size, int) or scale <= 0:
            raise ConfigError(f"malformed {QUANTISATION_STATE} record: {record}")
        weight = 1.0
        if record.get("weighted"):
            n_k = metrics.get(protocol.NUM_EXAMPLES)
            if isinstance(n_k, bool) or not isinstance(n_k, int) or n_k <= 0:
                raise ConfigError(
                    "weighted secure aggregation, but the reply's "
                    f"{protocol.NUM_EXAMPLES} is {n_k!r}"
                )
            weight = float(n_k)
        return size * 0.5 / (scale * weight)

    def _observe(self, theta: np.ndarray) -> None:
        state = self._context().state
        meta = state.config_records.get(_STATE_META)
        server_round = _round_of(self.config)
        if meta is None or meta.get("round") != server_round - 1:
            return  # first round, or the adversary missed the previous round
        previous = state.array_records[_STATE_PREVIOUS]
        before, own = previous["theta"].numpy(), previous["own"].numpy()
        settings = self.settings()
        attack = EmbeddingMembership(theta.shape[0])
        quantum = meta.get("own-quantum", 0.0)
        bag = attack.observe(
            theta.astype(np.float64) - before,
            own=own,
            parameters=(before, theta),
            extra_tolerance=settings.membership.extra_tolerance,
            own_quantum=float(quantum) if isinstance(quantum, int | float) else 0.0,
        )
        run_dir = self.run_dir()
        if not run_dir:
            raise ConfigError(
                "experiment.run-dir is empty: the membership adversary needs a run "
                "directory for its observations (run through fedleak.experiments)"
            )
        path = Path(run_dir) / "adversary" / BAGS_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        row: dict[str, Any] = {
            "round": server_round - 1,
            "partition": self.partition_id,
            "bag": bag.tolist(),
        }
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")

    def _remember(self, theta: np.ndarray, own: np.ndarray, quantum: float) -> None:
        state = self._context().state
        state[_STATE_PREVIOUS] = array_record({"theta": theta, "own": own})
        state[_STATE_META] = ConfigRecord(
            {"round": _round_of(self.config), "own-quantum": float(quantum)}
        )


def load_membership_attack(run_dir: str | Path, vocab_size: int) -> EmbeddingMembership:
    """Rebuild the attack from the bags a run's adversary wrote.

    Raises
    ------
    DataError
        If the run has no bag file or a line is malformed (with its number).
    """
    path = Path(run_dir) / "adversary" / BAGS_FILE
    if not path.is_file():
        raise DataError(f"{path} not found: did the run have an embedding adversary?")
    attack = EmbeddingMembership(vocab_size)
    rows: list[tuple[int, list[int]]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
            rows.append((int(row["round"]), [int(i) for i in row["bag"]]))
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(f"{path}, line {number}: malformed bag ({err})") from None
    for _, bag in sorted(rows):
        attack.observe_bag(bag)
    return attack


def membership_behaviour(
    spec: TaskSpec, partition_id: int, config: ConfigRecord
) -> HonestClient | None:
    """Return the adversary for ``adversary.partition``, else None (fall back)."""
    settings = AdversarySettings.from_config(config)
    if settings.kind == MEMBERSHIP_KIND and partition_id == settings.partition:
        return EmbeddingMembershipAdversary(spec, partition_id)
    return None
