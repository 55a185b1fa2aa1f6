"""Seeded two-party simulations of the embedding-membership attack (Table 7.2)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from fedleak.attacks.membership.simulation import (
    MembershipSetup,
    _BatchWalker,
    precision_floor,
    simulate_membership,
)

from fedleak.data.checkins import checkin_dataset, synthetic_checkins
from fedleak.data.text import TextDataset, Vocabulary
from fedleak.errors import ConfigError

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def small_checkins() -> TextDataset:
    synthetic = synthetic_checkins(
        num_users=2000, num_venues=500, num_areas=5, mean_checkins=15.0, seed=3
    )
    return checkin_dataset(
        synthetic.table,
        synthetic.attribute_map(),
        vocab_size=None,
        length=30,
        test_fraction=0.5,
        seed=3,
    )


def _setup(**kwargs: object) -> MembershipSetup:
    base: dict[str, object] = {"embedding_dim": 8, "batch_size": 20, "epochs": 2}
    base.update(kwargs)
    return MembershipSetup(**base)  # type: ignore[arg-type]


def test_recall_is_one_and_precision_falls_with_the_batch(
    small_checkins: TextDataset,
) -> None:
    """Table 7.2's shape: precision falls as the batch (and its bag) grows.

    Recall is 1 by construction, so precision falls exactly when the
    non-members' false-positive rate rises. With 2000 users (379 members and
    379 non-members here) the rates at batch 5, 20 and 80 are 0.003, 0.09 and
    0.56; each step up is asserted to exceed three standard errors of the
    difference of two proportions (it is six and fifteen).
    """
    runs = [
        simulate_membership(small_checkins, _setup(batch_size=b), seed=0)
        for b in (5, 20, 80)
    ]
    for run in runs:
        assert run.scores.recall == 1.0
    for smaller, larger in itertools.pairwise(r.scores for r in runs):
        assert smaller.precision > larger.precision
        assert smaller.mean_bag_size < larger.mean_bag_size
        rates = [
            s.false_positives / (s.false_positives + s.true_negatives)
            for s in (smaller, larger)
        ]
        counts = [s.false_positives + s.true_negatives for s in (smaller, larger)]
        se = math.sqrt(sum(p * (1 - p) / n for p, n in zip(rates, counts, strict=True)))
        assert rates[1] - rates[0] > 3 * se, (rates, se)
    large = runs[2]
    again = simulate_membership(small_checkins, _setup(batch_size=80), seed=0)
    assert again.scores == large.scores  # seeded


def test_server_weight_decay_kills_the_signal(small_checkins: TextDataset) -> None:
    outcome = simulate_membership(
        small_checkins, _setup(server_weight_decay=1e-3), seed=0
    )
    # every nonzero row moves every round: every record looks like a member
    assert outcome.scores.mean_bag_size == small_checkins.vocab_size - 1
    assert outcome.scores.recall == 1.0
    assert outcome.scores.precision == pytest.approx(0.5)


def test_server_momentum_degrades_the_signal(small_checkins: TextDataset) -> None:
    plain = simulate_membership(small_checkins, _setup(), seed=0)
    momentum = simulate_membership(small_checkins, _setup(server_momentum=0.9), seed=0)
    # rows keep moving after their tokens were seen: the bags only grow
    assert momentum.scores.mean_bag_size > 2 * plain.scores.mean_bag_size
    assert momentum.scores.precision < plain.scores.precision
    assert momentum.scores.recall == 1.0


@pytest.mark.parametrize(("records", "batch_size"), [(261, 10), (40, 7), (5, 9)])
def test_batch_walker_uses_every_record_once_per_epoch_in_even_batches(
    records: int, batch_size: int
) -> None:
    indices = np.arange(100, 100 + records)
    walker = _BatchWalker(indices, batch_size, seed=4)
    for _ in range(2):  # two epochs
        batches = [walker.next() for _ in range(walker.per_epoch)]
        assert np.array_equal(np.sort(np.concatenate(batches)), indices)
        sizes = {b.size for b in batches}
        # no remainder batch of a single record: sizes differ by at most one
        assert max(sizes) - min(sizes) <= 1 and max(sizes) <= batch_size


def test_iterations_override_the_epochs(small_checkins: TextDataset) -> None:
    """The thesis trains a fixed 3,000 iterations; ``iterations`` sets the rounds."""
    fixed = simulate_membership(
        small_checkins, _setup(batch_size=80, iterations=7), seed=0
    )
    assert fixed.rounds == 7
    by_epochs = simulate_membership(small_checkins, _setup(batch_size=80), seed=0)
    assert by_epochs.rounds != 7
    with pytest.raises(ConfigError, match="round"):
        simulate_membership(small_checkins, _setup(iterations=0), seed=0)


def test_the_run_records_its_test_accuracy_curve_without_changing_the_run(
    small_checkins: TextDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedleak.attacks.membership import simulation

    setup = _setup(batch_size=40, iterations=85, dropout=0.3, learning_rate=0.3)
    outcome = simulate_membership(small_checkins, setup, seed=1)
    curve = outcome.accuracy_curve
    # 85 rounds, CURVE_POINTS = 40: every 2nd round and the last one
    assert curve["rounds"] == [*range(2, 85, 2), 85]
    assert curve["test_accuracy"][-1] == outcome.accuracy
    assert all(0.0 <= a <= 1.0 for a in curve["test_accuracy"])
    assert len(set(curve["test_accuracy"])) > 1  # measured, not repeated
    assert isinstance(curve["plateau"], bool)
    # measuring (eval mode between rounds) leaves dropout and every stream alone
    monkeypatch.setattr(
        simulation, "accuracy_recorder", lambda *a, **k: (lambda t, p: None, [])
    )
    plain = simulate_membership(small_checkins, setup, seed=1)
    assert plain.accuracy_curve["plateau"] is None
    assert plain.accuracy == outcome.accuracy
    assert plain.scores.as_dict() == outcome.scores.as_dict()


def test_precision_floor_flags_the_non_members_whose_words_the_target_holds() -> None:
    """Every training record holds words 2-4, so the target holds them whatever
    the split; two of the four non-members use only those words."""
    words = tuple(f"w{i}" for i in range(6))  # ids 2..7
    x_train = np.tile(np.array([[2, 3, 4]]), (8, 1))
    x_test = np.array([[2, 3, 0], [2, 5, 0], [4, 0, 0], [7, 2, 0]])
    data = TextDataset(
        x_train=x_train,
        y_train=np.zeros(8, np.int64),
        x_test=x_test,
        y_test=np.zeros(4, np.int64),
        vocabulary=Vocabulary(words),
        categories=("a", "b"),
        source="test",
    )
    # 4 members (half of the 8) against 4 non-members, 2 of them coverable
    assert precision_floor(data, _setup(), seed=0) == pytest.approx(4 / 6)
    # fewer records scored: 2 members against 2 of the non-members
    assert precision_floor(data, _setup(), seed=0, max_eval_records=2) in (
        1,
        2 / 3,
        0.5,
    )


def test_large_batches_approach_the_precision_floor(
    small_checkins: TextDataset,
) -> None:
    """A bag of the target's whole data flags what no smaller bag can miss;
    a full batch (the target holds 379 records here) reads that bag."""
    floor = precision_floor(small_checkins, _setup(), seed=0)
    assert 0.5 < floor < 0.6
    small = simulate_membership(small_checkins, _setup(batch_size=80), seed=0)
    assert small.scores.precision > floor + 0.05
    full = _setup(batch_size=379, epochs=3)
    floor_run = simulate_membership(small_checkins, full, seed=0)
    assert floor_run.scores.precision == floor  # the same split and records
    # the same draw of scored records as the simulation's
    scored = simulate_membership(small_checkins, full, seed=0, max_eval_records=50)
    assert scored.scores.precision == precision_floor(
        small_checkins, _setup(), seed=0, max_eval_records=50
    )
    # the seed draws the split: another one, another floor; 0 by default
    assert precision_floor(small_checkins, _setup(), seed=1) != floor
    assert precision_floor(small_checkins, _setup()) == floor
    # same seed, same records: 379 members against 340 coverable non-members
    # of 379 drawn, and 50 against 47 of 50 (pinned: a change of the draw
    # changes every published precision)
    assert floor == 379 / (379 + 340)
    assert scored.scores.precision == 50 / (50 + 47)


def test_the_run_records_which_non_members_it_flagged(
    small_checkins: TextDataset,
) -> None:
    outcome = simulate_membership(small_checkins, _setup(batch_size=80), seed=0)
    flags = outcome.false_flags
    assert outcome.scores.false_positives > 0  # something to break down
    assert sum(b["records"] for b in flags["bands"]) == (
        outcome.scores.false_positives + outcome.scores.true_negatives
    )
    assert sum(b["flagged"] for b in flags["bands"]) == outcome.scores.false_positives
    assert outcome.as_dict()["false_flags"] == flags
    assert flags["median_words_flagged"] <= flags["median_words_not_flagged"]
