"""``fedleak bench defenses``: the defenses of seed 000 Ch. 7.3 against both attacks.

Every row is a two-party synchronized-SGD run in this process (the simulation
of :mod:`fedleak.bench.membership`) on the synthetic check-ins
(:func:`fedleak.data.checkins.synthetic_checkins`; main task: the binary
user attribute, the stand-in for FourSquare's gender), with the target
defended. The model is the embedding + CNN with the single FC layer of the
thesis' CSI model (``cnn_hidden=None``): under plain server SGD at
``lr = 0.3`` it leaves its initial plateau within about 100 rounds, where
the two-layer FourSquare head needs about 250 (measured on the quick data),
so the utility columns are those of a trained model. Each row reports

- **membership**: precision and recall of
  :class:`fedleak.attacks.membership.EmbeddingMembership` (Ch. 7.1.3);
- **property**: the single-batch AUC of the passive property attack
  (:mod:`fedleak.attacks.property.classifier`, Alg. 7) for the property "the user lives
  in the top region" (home area 0; the thesis' "Top region (Antwerpen)" of
  the CSI corpus): half of the target's batches are drawn from its users in
  the top region, half from the others (``m = 2``, Ch. 7.2.3); every round
  the adversary computes gradients on :data:`AUX_BATCHES` auxiliary batches
  of each kind from its own users, and a logistic regression on the size
  of every word row's update of the embedding layer (the seed's classifier
  for embedding-layer attacks, Ch. 7.1.4; :data:`PROPERTY_FEATURES`) scores
  the target's observed updates. On the same rounds a second classifier,
  a random forest on the global max pooling of every layer's observed update
  (the seed's classifier for every other property attack, Ch. 7.1.5;
  :data:`WHOLE_UPDATE_FEATURES`), gives ``property_auc_whole_update``: the
  seed does not say which of the two its CSI tables used, and they answer
  Table 7.5 differently (a top-k share keeps the rows of the batch's words,
  the embedding attack's whole signal, but cuts the other layers' updates).
  The home area is a latent trait of the
  user, not a function of the tokens: :data:`HOME_FRACTION` (50%) of a
  user's check-ins are drawn in the home area, the rest city-wide, so a
  venue of area 0 in a batch is evidence, not proof (the undefended AUC is
  0.90, the seed's 0.93; with the generator's default 70% the batch's bag of
  words gives the property away and the AUC is 1.0 under every defense but
  DP);
- **model**: accuracy and AUC of the joint model on held-out users;
- **epsilon** where the defense is differentially private.

Tables (seed figures for comparison in the JSON):

``vocabulary`` (Table 7.6)
    top-``N`` venues; the adversary tests a record's restricted bag. The
    record's ``vocabulary_signal`` gives, per ``N``, the share of check-ins
    kept and the AUC of a logistic regression on the kept venues' counts
    (:mod:`fedleak.bench.vocabulary_signal`): how much of the main task the
    restricted inputs still carry, whatever the model.
``share_fraction`` (Table 7.5)
    fraction of the update's coordinates the target uploads, the largest
    by magnitude over the whole update (0.3/1/3/10/50/100%: the seed's
    10/50/100% and three smaller shares). The record's
    ``setup.update_density`` is the measured share of non-zero coordinates
    of a batch's gradient; the embedding rows of the batch's words are its
    largest entries, so they survive every share down to a few percent
    (``mean_bag_size`` per row: the words still visible). With
    ``--share-selection random`` the shared coordinates are drawn uniformly
    instead (Shokri and Shmatikov's other criterion; the seed names neither),
    so every word's row loses coordinates in proportion
    (``benchmarks/defenses-random-share.json``).
``dropout`` (Table 7.7)
    dropout after the max-pool layer, p = 0.1 ... 0.9.
``participant_dp`` (Ch. 7.3.4)
    each client's update clipped with Flower's ``clip_inputs_inplace``, the
    sum noised with ``noise_multiplier * clipping_norm`` (Flower's
    ``compute_stdv`` for the sum); participant-level epsilon from
    dp-accounting. (Flower's ``DifferentialPrivacyServerSide*`` wrappers do
    the same in a federation: ``[privacy]`` of an experiment file.)
``record_dp``
    the target trains with DP-SGD (Opacus per-sample gradients, clipping
    norm 1): record-level epsilon from dp-accounting. The server step is
    ``lr / max(4, sigma)`` (the row's ``learning_rate``,
    :func:`record_dp_factor`): a quarter of the undefended step, and above
    ``sigma = 4`` a step that keeps the noise per step that of ``sigma = 4``;
    at the full step ``sigma = 4`` diverged, and ``sigma = 0.5``
    oscillated and diverged in longer runs.

The participant-level DP rows train :data:`DP_EPOCH_FACTOR` times the passes
of the others and the record-level ones ``max(4, sigma)`` times (their
property simulations as many times the rounds): their test accuracy reaches
its plateau later.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Final, Literal, cast

import numpy as np
import torch
import typer
from rich.table import Table

from fedleak.attacks.membership.simulation import (
    MembershipSetup,
    SimulationOutcome,
    accuracy_recorder,
    inputs_and_model,
    simulate_membership,
)
from fedleak.attacks.property.simulation import simulate_property_attacks
from fedleak.curves import summarise_curve
from fedleak.data.checkins import checkin_users, synthetic_checkin_task
from fedleak.data.text import TextDataset
from fedleak.defenses import ClientDefenses
from fedleak.errors import ConfigError, DataError
from fedleak.files import write_figure
from fedleak.training import batch_gradient

from .console import fmt, say, written
from .console import out as console
from .options import OutOption, SeedOption
from .record import BenchRecord, record_path
from .vocabulary_signal import vocabulary_signal

__all__ = [
    "AUX_BATCHES",
    "DP_EPOCH_FACTOR",
    "ATTRIBUTE_SHIFT",
    "HOME_FRACTION",
    "SHARE_FRACTIONS",
    "StandIn",
    "TABLES",
    "run_defenses_bench",
]

ProgressFn = Callable[[str], None]

HOME_FRACTION = 0.5
"""Share of a user's check-ins drawn in the home area (the property's signal).

Chosen so that the undefended attack is about as strong as the seed's: the
top-region AUC with the whole update shared is 0.90 here, 0.93 in the seed
(Table 7.5). At 0.2 and 0.35 it was 0.63 and 0.79, too weak for a defense to
have room to act. ``--home-fraction`` changes it for one run;
``benchmarks/defenses-share-<fraction>.json`` hold Table 7.5 at 0.2 and
0.35."""

ATTRIBUTE_SHIFT = 3.0
"""Preference factor of the main task's attribute (the generator's default).

With ``--neutral-head 300`` the 300 most popular venues carry none of it:
the stand-in whose signal lives in the long tail only, as the seed's
FourSquare gender signal (``benchmarks/defenses-neutral-head.json``)."""

AUX_BATCHES = 4
"""Auxiliary batches of each kind the property adversary uses per round."""

_FEATURE_NAMES: Final = {
    "embedding": "per-word size of the embedding update, logistic regression",
    "max": "max-pooled updates of every layer, random forest",
    "bow": "bag of words of the embedding update, logistic regression",
}

PROPERTY_ROUNDS: Final = 480
"""Rounds of the property simulation (half of them property batches). With 60
rounds the AUC's standard error (Hanley-McNeil, 30 + 30 scores) was about
0.06, as large as the seed's gaps in Tables 7.5 and 7.7; 480 cuts it to
about 0.025 (the difference of two AUCs: 0.035)."""

SHARE_FRACTIONS: Final = (0.003, 0.01, 0.03, 0.1, 0.5, 1.0)
"""Shares of Table 7.5: the seed's 10/50/100% and three smaller ones, where
the top-k starts to cut the embedding rows of the batch's words."""

ShareSelection = Literal["largest", "random"]

SHARE_SELECTIONS: Final = ("largest", "random")
"""Values of ``--share-selection``: Shokri and Shmatikov's two criteria for the
shared coordinates (largest magnitude, or at random); the seed names neither."""

DP_EPOCH_FACTOR: Final = 4
"""The participant-level DP rows train this many times the undefended model's
passes: clipped, noised updates approach the plateau more slowly. At 8 passes
(552 rounds) their test accuracy was still rising (0.65-0.73); at 32 it had
stopped (0.58-0.78). Record-level DP rows train ``max(4, sigma)`` times the
passes instead (:func:`record_dp_factor`), which undoes their smaller step.
Their epsilons are those of the longer runs."""

RECORD_DP_MIN_FACTOR: Final = 4.0
"""The record-level DP rows' step is at most the undefended one over this.
At the full step (lr 0.3) DP-SGD at sigma 0.5 oscillated (the property run's
test accuracy 0.52-0.91 between evaluations, not at its plateau after 480
rounds) and diverged at round 712 of 960 (and at 32 passes in the membership
run), and at sigma 1 the membership run ended 0.12 below its best. At half
the step over twice the passes the sigma-1 membership run still dipped to
0.60 between evaluations and ended off its plateau (its last fifth 0.023
above its best earlier one). At a quarter of the step over four times the
passes (lr 0.075, 2,208 rounds; the property runs 1,920), as sigma 4 ran
already, every record-level DP run reached its plateau, in trial runs and
in ``benchmarks/defenses.json`` (membership test accuracy 0.88-0.91), with
the same property AUCs (0.50-0.52)."""


def record_dp_factor(sigma: float) -> float:
    """Return how many times smaller the record-DP step, and longer the run, is.

    ``max(RECORD_DP_MIN_FACTOR, sigma)``: the server step is ``lr / factor``
    and the row trains ``factor`` times the passes (its property simulation
    ``factor`` times the rounds), so the distance the parameters can travel
    stays the undefended run's; above ``sigma = 4`` the noise per step
    ``lr * sigma * C / B`` stays that of ``sigma = 4``.
    """
    return max(RECORD_DP_MIN_FACTOR, float(sigma))


DENSITY_BATCHES: Final = 20
"""Batches whose gradients give ``setup.update_density``."""

PROPERTY_FEATURES: Final = "embedding"
"""Features of the property classifier: the seed's classifier for attacks on
embedding-layer updates (seed 000 Ch. 7.1.4), the size of every word row's
update, max-pooled per row, with a logistic regression
(:data:`fedleak.attacks.property.simulation.FEATURES`). The bag of words of the
embedding update alone ignores magnitudes, which made Table 7.5 flat and
record-level DP look like it defeats property inference (every row moves
under DP noise, so the bag is constant)."""

WHOLE_UPDATE_FEATURES: Final = "max"
"""Features of the second property classifier, run on the same rounds: the
seed's classifier for every property attack other than those on
embedding-layer gradients (Ch. 7.1.5: global max pooling of the observed
update of every layer, random forest of 50 trees)."""

TABLES: tuple[str, ...] = (
    "vocabulary",
    "share_fraction",
    "dropout",
    "participant_dp",
    "record_dp",
)

#: Seed 000 figures: Table 7.5 (CSI, top region AUC), 7.6 (FourSquare: top-N,
#: attack precision, model AUC), 7.7 (CSI: dropout, attack AUC, model AUC).
THESIS: dict[str, list[list[float]]] = {
    "share_fraction": [[0.1, 0.84], [0.5, 0.86], [1.0, 0.93]],
    "vocabulary": [
        [30000, 0.91, 0.64],
        [10000, 0.86, 0.59],
        [3000, 0.65, 0.51],
        [1000, 0.52, 0.50],
    ],
    "dropout": [
        [0.1, 0.94, 0.87],
        [0.3, 0.97, 0.87],
        [0.5, 0.98, 0.87],
        [0.7, 0.99, 0.86],
        [0.9, 0.99, 0.84],
    ],
}


@dataclass(frozen=True)
class StandIn:
    """The synthetic check-ins' settings a run chooses (:func:`synthetic_checkins`).

    Attributes
    ----------
    home_fraction : float
        Share of a user's check-ins in the home area, in (0, 1]: the
        strength of the top-region property.
    attribute_shift : float
        Preference factor of the main task's attribute (>= 1).
    neutral_head : int
        Most popular venues that carry no preference (>= 0): the attribute's
        signal only in the long tail (Table 7.6's test of the stand-in,
        ``benchmarks/defenses-neutral-head.json``).
    """

    home_fraction: float = HOME_FRACTION
    attribute_shift: float = ATTRIBUTE_SHIFT
    neutral_head: int = 0

    def check(self) -> None:
        """Raise :class:`ConfigError` naming the first setting out of range."""
        if not 0.0 < self.home_fraction <= 1.0:
            raise ConfigError(
                f"home_fraction must be in (0, 1], got {self.home_fraction}"
            )
        if not self.attribute_shift >= 1.0:
            raise ConfigError(
                f"attribute_shift must be >= 1, got {self.attribute_shift}"
            )
        if self.neutral_head < 0:
            raise ConfigError(f"neutral_head must be >= 0, got {self.neutral_head}")


def _dataset(
    quick: bool, seed: int, stand_in: StandIn = StandIn()
) -> tuple[TextDataset, np.ndarray]:
    data, synthetic = synthetic_checkin_task(
        800 if quick else 2000,
        num_areas=5,
        test_fraction=0.3,
        seed=seed,
        home_fraction=stand_in.home_fraction,
        attribute_shift=stand_in.attribute_shift,
        neutral_head=stand_in.neutral_head,
    )
    users = np.asarray(checkin_users(synthetic.table, synthetic.attribute_map()))
    top_region = synthetic.home_area[users[data.train_index]] == 0
    return data, top_region


def _property_aucs(
    data: TextDataset,
    top_region: np.ndarray,
    setup: MembershipSetup,
    rounds: int,
    seed: int,
    *,
    emulate: bool,
) -> tuple[dict[str, float | None], str | None, dict[str, Any] | None]:
    """Return both classifiers' AUCs by feature set (Nones and why if diverged).

    The third item is the property run's own model's test-accuracy curve
    (:func:`fedleak.curves.summarise_curve`); None if the model diverged or
    with ``emulate`` (the row keeps the curve of the plain run).
    """
    kinds = (PROPERTY_FEATURES, WHOLE_UPDATE_FEATURES)
    record, points = None, None
    if not emulate:
        x_test = setup.defenses.inputs(torch.from_numpy(data.x_test))
        architecture = inputs_and_model(data, setup, np.random.SeedSequence(0))[2]
        record, points = accuracy_recorder(
            architecture, x_test, torch.from_numpy(data.y_test), rounds
        )
    try:
        aucs = simulate_property_attacks(
            data,
            top_region,
            setup,
            rounds=rounds,
            seed=seed,
            aux_batches=AUX_BATCHES,
            features=kinds,
            emulate_defenses=emulate,
            after_round=record,
        )
    except DataError as err:  # the defense's noise made the model diverge
        return dict.fromkeys(kinds), str(err), None
    curve = None if points is None else summarise_curve(points)
    return {k: aucs[k] for k in kinds}, None, curve


def _row(
    table: str,
    setting: float | int | None,
    data: TextDataset,
    top_region: np.ndarray,
    setup: MembershipSetup,
    *,
    property_rounds: int,
    seed: int,
) -> dict[str, Any]:
    started = time.perf_counter()
    outcome: SimulationOutcome = simulate_membership(data, setup, seed=seed)
    aucs, note, property_curve = _property_aucs(
        data, top_region, setup, property_rounds, seed, emulate=False
    )
    # Alg. 7 trains f_prop on the adversary's plain gradients; under DP noise
    # a DP-aware adversary would add the same noise to them (emulation)
    emulated = (
        _property_aucs(data, top_region, setup, property_rounds, seed, emulate=True)[0]
        if table == "record_dp"
        else dict.fromkeys(aucs)
    )
    return {
        "table": table,
        "setting": setting,
        # undefined (None) when the attack judged no record a member
        "membership_precision": (
            None if math.isnan(outcome.scores.precision) else outcome.scores.precision
        ),
        "membership_recall": outcome.scores.recall,
        "mean_bag_size": outcome.scores.mean_bag_size,
        "property_auc": aucs[PROPERTY_FEATURES],
        "property_auc_whole_update": aucs[WHOLE_UPDATE_FEATURES],
        "property_note": note,
        "property_auc_dp_aware": emulated[PROPERTY_FEATURES],
        "property_auc_whole_update_dp_aware": emulated[WHOLE_UPDATE_FEATURES],
        "model_accuracy": outcome.accuracy,
        "model_auc": outcome.auc,
        "accuracy_curve": outcome.accuracy_curve,
        # the model the property attack watched (its own run)
        "property_accuracy_curve": property_curve,
        "record_epsilon": outcome.record_epsilon,
        "participant_epsilon": outcome.participant_epsilon,
        "rounds": outcome.rounds,
        "property_rounds": property_rounds,
        "learning_rate": setup.learning_rate,
        "wall_s": time.perf_counter() - started,
    }


def _settings(quick: bool, vocab: int) -> dict[str, list[Any]]:
    if quick:
        return {
            "vocabulary": [None, 100],
            "share_fraction": [0.01, 1.0],
            "dropout": [0.5],
            "participant_dp": [1.0],
            "record_dp": [1.0],
        }
    return {
        "vocabulary": [None, *[n for n in (1000, 300, 100) if n < vocab]],
        "share_fraction": list(SHARE_FRACTIONS),
        "dropout": [0.1, 0.5, 0.9],
        "participant_dp": [0.3, 1.0, 4.0],
        "record_dp": [0.5, 1.0, 4.0],
    }


def _update_density(data: TextDataset, setup: MembershipSetup, seed: int) -> float:
    """Median share of non-zero coordinates in a batch's gradient (initial model).

    The denominator of Table 7.5's shares: a top-k share above it drops
    nothing. Measured on :data:`DENSITY_BATCHES` random batches.
    """
    x, y, model, _ = inputs_and_model(data, setup, np.random.SeedSequence([seed, 75]))
    rng = np.random.default_rng([seed, 75])
    shares = []
    for _ in range(DENSITY_BATCHES):
        batch = np.sort(rng.choice(x.shape[0], setup.batch_size, replace=False))
        index = torch.from_numpy(batch)
        grads, _, _ = batch_gradient(model, x[index], y[index])
        nonzero = sum(int(np.count_nonzero(g)) for g in grads.values())
        shares.append(nonzero / sum(g.size for g in grads.values()))
    return float(np.median(shares))


def _property_rounds(table: str, setting: Any, rounds: int) -> int:
    """Return a row's property-simulation rounds: more for record-level DP."""
    if table == "record_dp":
        return round(rounds * record_dp_factor(setting))
    return rounds


def _setup_for(
    table: str,
    setting: Any,
    base: MembershipSetup,
    share_selection: ShareSelection = "largest",
) -> MembershipSetup:
    if table == "vocabulary":
        return replace(base, defenses=ClientDefenses(vocab_top_n=setting))
    if table == "share_fraction":
        # sharing everything selects nothing: one setup (and one run) for both
        selection = share_selection if setting < 1.0 else "largest"
        return replace(
            base,
            defenses=ClientDefenses(share_fraction=setting, share_selection=selection),
        )
    if table == "dropout":
        return replace(base, dropout=setting)
    if table == "participant_dp":
        return replace(
            base,
            participant_noise=setting,
            participant_clip=1.0,
            epochs=base.epochs * DP_EPOCH_FACTOR,
        )
    if table == "record_dp":
        # The noise of a step is lr * sigma * C / B per coordinate: the step
        # shrinks by 1 / max(4, sigma), so above sigma = 4 the parameters'
        # random walk stays that of sigma = 4 (RECORD_DP_MIN_FACTOR)
        factor = record_dp_factor(setting)
        return replace(
            base,
            epochs=round(base.epochs * factor),
            learning_rate=base.learning_rate / factor,
            defenses=ClientDefenses(dp_noise_multiplier=setting, dp_max_grad_norm=1.0),
        )
    raise ConfigError(f"unknown defense table {table!r}; choose from {list(TABLES)}")


def _plot(path: Path, rows: list[dict[str, Any]], tables: Sequence[str]) -> None:
    """Plot membership precision, property AUC and model AUC per setting."""

    def draw(fig: Any) -> None:
        axes = np.atleast_1d(fig.subplots(1, len(tables)))
        for ax, table in zip(axes, tables, strict=True):
            mine = [r for r in rows if r["table"] == table]
            labels = [
                "none" if r["setting"] is None else str(r["setting"]) for r in mine
            ]
            x = np.arange(len(mine))
            for key, marker in (
                ("membership_precision", "o"),
                ("property_auc", "s"),
                ("property_auc_whole_update", "D"),
                ("model_auc", "^"),
            ):
                values = [np.nan if r.get(key) is None else r[key] for r in mine]
                ax.plot(x, values, marker=marker, label=key)
            ax.set_xticks(x, labels, fontsize=7)
            ax.set_ylim(0, 1.05)
            ax.set_title(table, fontsize=9)
        axes[0].legend(fontsize=6)

    write_figure(path, draw, (3.2 * len(tables), 3.2))


def run_defenses_bench(
    out: str | Path,
    *,
    tables: Sequence[str] = TABLES,
    quick: bool = False,
    seed: int = 0,
    home_fraction: float = HOME_FRACTION,
    share_selection: str = "largest",
    progress: ProgressFn | None = None,
    attribute_shift: float = ATTRIBUTE_SHIFT,
    neutral_head: int = 0,
    epochs: int | None = None,
    property_rounds: int | None = None,
) -> dict[str, Any]:
    """Run the defense tables and write the JSON report (and a PNG) atomically.

    Parameters
    ----------
    out : path
        JSON file; the plot goes to ``<out stem>-tables.png``.
    tables : sequence of str
        Among :data:`TABLES`.
    quick : bool
        CI-sized data (800 users instead of 2,000), embedding 16 instead of
        32, 5 epochs instead of 8 (the quick target has a third of the
        records, hence a third of the rounds per epoch), one or two
        settings per table, 30 property rounds instead of
        :data:`PROPERTY_ROUNDS`. (The default took 12.6 minutes on a
        shared 2-core machine, with 8 training passes; at 2 passes it took
        8.5.)
    seed : int
        Seed of everything.
    home_fraction : float, default=HOME_FRACTION
        Share of a user's check-ins drawn in the home area, in (0, 1]: the
        strength of the "top region" property (:data:`HOME_FRACTION`).
    share_selection : {"largest", "random"}, default="largest"
        Which coordinates Table 7.5's shares keep
        (:attr:`fedleak.defenses.ClientDefenses.share_selection`).
    progress : callable, optional
        Receives one line per row.
    attribute_shift : float, default=ATTRIBUTE_SHIFT
        Preference factor of the main task's attribute (>= 1).
    neutral_head : int, default=0
        Most popular venues that carry no preference (:class:`StandIn`).
    epochs : int, optional
        Training passes of the rows (default 8, quick 5; the DP rows train
        their multiple of it): a weaker main task needs more to reach its
        plateau.
    property_rounds : int, optional
        Rounds of each row's property simulation (default
        :data:`PROPERTY_ROUNDS`, quick 30; the record-level DP rows run their
        multiple of it): a weaker main task needs more for the property
        simulation's model to reach its plateau too.
    """
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        raise ConfigError(
            f"unknown defense tables {unknown}; choose from {list(TABLES)}"
        )
    stand_in = StandIn(home_fraction, attribute_shift, neutral_head)
    stand_in.check()
    if epochs is not None and epochs < 1:
        raise ConfigError(f"epochs must be >= 1, got {epochs}")
    if property_rounds is not None and property_rounds < 2:
        raise ConfigError(f"property_rounds must be >= 2, got {property_rounds}")
    if share_selection not in SHARE_SELECTIONS:
        raise ConfigError(
            f"share_selection must be one of {list(SHARE_SELECTIONS)}, "
            f"got {share_selection!r}"
        )
    say = progress or (lambda _: None)
    torch.set_num_threads(1)
    record = BenchRecord("defenses", record_path(out, make_folder=True))
    started = time.perf_counter()
    logging.getLogger().addFilter(_quiet_accountant)
    try:
        return _run(
            record,
            tables,
            quick,
            seed,
            stand_in,
            say,
            started,
            cast(ShareSelection, share_selection),
            epochs,
            property_rounds,
        )
    finally:
        logging.getLogger().removeFilter(_quiet_accountant)


def _quiet_accountant(record: logging.LogRecord) -> bool:
    """Drop dp-accounting's per-order convergence warnings (orders it skips)."""
    return "_compute_log_a_frac failed to converge" not in record.getMessage()


def _header(
    data: TextDataset,
    top_region: np.ndarray,
    base: MembershipSetup,
    *,
    quick: bool,
    seed: int,
    property_rounds: int,
    stand_in: StandIn,
    share_selection: ShareSelection,
    tables: Sequence[str],
) -> dict[str, Any]:
    """Return the record's entries other than its rows."""
    return {
        "description": __doc__,
        "quick": quick,
        "seed": seed,
        "setup": {
            "model": base.model,
            "embedding_dim": base.embedding_dim,
            "cnn_hidden": base.cnn_hidden,
            "batch_size": base.batch_size,
            "epochs": base.epochs,
            "participant_dp_epochs": base.epochs * DP_EPOCH_FACTOR,
            "learning_rate": base.learning_rate,
            "property_rounds": property_rounds,
            "update_density": _update_density(data, base, seed),
            "property_aux_batches": AUX_BATCHES,
            "home_fraction": stand_in.home_fraction,
            "attribute_shift": stand_in.attribute_shift,
            "neutral_head": stand_in.neutral_head,
            "share_selection": share_selection,
            "num_train": int(data.x_train.shape[0]),
            "num_test": int(data.x_test.shape[0]),
            "vocab_size": data.vocab_size,
            "top_region_fraction": float(top_region.mean()),
            "delta": base.delta,
            "source": data.source,
        },
        **_signal_entry(data, quick, tables),
        "property_features": _FEATURE_NAMES[PROPERTY_FEATURES],
        "property_features_whole_update": _FEATURE_NAMES[WHOLE_UPDATE_FEATURES],
        "property_attack": (
            "attacks/property/simulation.py (passive, Alg. 7, features "
            f"{PROPERTY_FEATURES!r} and {WHOLE_UPDATE_FEATURES!r} on the same rounds)"
        ),
        "thesis": THESIS,
    }


def _signal_entry(
    data: TextDataset, quick: bool, tables: Sequence[str]
) -> dict[str, Any]:
    """``vocabulary_signal`` of the vocabulary table's cuts, where it runs."""
    if "vocabulary" not in tables:
        return {}
    cuts = _settings(quick, data.vocab_size)["vocabulary"]
    return {"vocabulary_signal": vocabulary_signal(data, cuts)}


def _say_row(say: ProgressFn, row: dict[str, Any]) -> None:
    eps = row["record_epsilon"] or row["participant_epsilon"]
    say(
        f"{row['table']}={row['setting']}: membership precision "
        f"{fmt(row['membership_precision'])} recall "
        f"{row['membership_recall']:.3f}, property AUC "
        f"{fmt(row['property_auc'])} (whole update "
        f"{fmt(row['property_auc_whole_update'])}), model AUC "
        f"{row['model_auc']:.3f}"
        + (f", epsilon {eps:.3g}" if eps is not None else "")
        + f" ({row['wall_s']:.1f} s)"
    )


def _run(
    record: BenchRecord,
    tables: Sequence[str],
    quick: bool,
    seed: int,
    stand_in: StandIn,
    say: ProgressFn,
    started: float,
    share_selection: ShareSelection,
    epochs: int | None,
    property_rounds: int | None,
) -> dict[str, Any]:
    """Measure every row; the record is rewritten after each (a crash keeps them)."""
    data, top_region = _dataset(quick, seed, stand_in)
    base = MembershipSetup(
        model="text-cnn",
        embedding_dim=16 if quick else 32,
        cnn_hidden=None,
        batch_size=10,
        # 8 passes (552 rounds): the test accuracy's plateau (0.93; after
        # the 2 passes of earlier records it was 0.82 and still rising)
        epochs=epochs or (5 if quick else 8),
        learning_rate=0.3,
    )
    property_rounds = property_rounds or (30 if quick else PROPERTY_ROUNDS)
    rows = record.start_rows(
        _header(
            data,
            top_region,
            base,
            quick=quick,
            seed=seed,
            property_rounds=property_rounds,
            stand_in=stand_in,
            share_selection=share_selection,
            tables=tables,
        )
    )
    done: dict[MembershipSetup, dict[str, Any]] = {}
    for table in tables:
        for setting in _settings(quick, data.vocab_size)[table]:
            setup = _setup_for(table, setting, base, share_selection)
            if setup in done:  # e.g. no vocabulary limit = sharing 100%
                first = done[setup]
                row = {
                    **first,
                    "table": table,
                    "setting": setting,
                    "same_run_as": [first["table"], first["setting"]],
                }
            else:
                row = _row(
                    table,
                    setting,
                    data,
                    top_region,
                    setup,
                    property_rounds=_property_rounds(table, setting, property_rounds),
                    seed=seed,
                )
                done[setup] = row
            record.add_row(row, started)
            _say_row(say, row)
    plot_path = record.sibling("tables.png")
    _plot(plot_path, rows, [t for t in TABLES if t in tables])
    return record.finish_rows(started, {}, [plot_path.name])


EpochsOption = Annotated[
    int | None,
    typer.Option("--epochs", help="Training passes of each row (default 8, quick 5)."),
]
PropertyRoundsOption = Annotated[
    int | None,
    typer.Option(
        "--property-rounds",
        help=f"Rounds of each row's property simulation (default "
        f"{PROPERTY_ROUNDS}, quick 30).",
    ),
]


def command(
    out: OutOption = Path("bench-defenses.json"),
    quick: Annotated[
        bool, typer.Option("--quick", help="CI-sized data and fewer settings.")
    ] = False,
    table_name: Annotated[
        list[str] | None,
        typer.Option(
            "--table",
            help="vocabulary, share_fraction, dropout, participant_dp, "
            "record_dp (repeatable; default all).",
        ),
    ] = None,
    seed: SeedOption = 0,
    home_fraction: Annotated[
        float,
        typer.Option(
            "--home-fraction",
            help="Share of a user's check-ins in the home area, in (0, 1]: "
            "the strength of the top-region property.",
        ),
    ] = HOME_FRACTION,
    share_selection: Annotated[
        str,
        typer.Option(
            "--share-selection",
            help="Which coordinates Table 7.5's shares keep: largest (by "
            "magnitude) or random.",
        ),
    ] = "largest",
    attribute_shift: Annotated[
        float,
        typer.Option(
            "--attribute-shift",
            help="Preference factor of the main task's attribute (>= 1): the "
            "strength of the model's signal.",
        ),
    ] = ATTRIBUTE_SHIFT,
    neutral_head: Annotated[
        int,
        typer.Option(
            "--neutral-head",
            help="Most popular venues that carry no preference (>= 0): the "
            "attribute's signal in the long tail only.",
        ),
    ] = 0,
    epochs: EpochsOption = None,
    property_rounds: PropertyRoundsOption = None,
) -> None:
    """Defenses of Ch. 7.3 vs membership and property inference (Tables 7.5-7.7).

    Columns: membership precision / recall (MI P, MI R), property AUC,
    model accuracy and AUC, record- or participant-level epsilon.
    """
    report = run_defenses_bench(
        out,
        tables=tuple(table_name) if table_name else TABLES,
        quick=quick,
        seed=seed,
        home_fraction=home_fraction,
        share_selection=share_selection,
        progress=say,
        attribute_shift=attribute_shift,
        neutral_head=neutral_head,
        epochs=epochs,
        property_rounds=property_rounds,
    )
    table = Table(
        "defense",
        "setting",
        "MI P",
        "MI R",
        "prop AUC",
        "whole upd.",
        "acc",
        "AUC",
        "eps",
        "s",
    )
    for row in report["rows"]:
        eps = row["record_epsilon"] or row["participant_epsilon"]
        table.add_row(
            row["table"],
            "none" if row["setting"] is None else str(row["setting"]),
            fmt(row["membership_precision"]),
            fmt(row["membership_recall"]),
            fmt(row["property_auc"]),
            fmt(row["property_auc_whole_update"]),
            fmt(row["model_accuracy"]),
            fmt(row["model_auc"]),
            fmt(eps),
            f"{row['wall_s']:.1f}",
        )
    console.print(table)
    written(out)
