"""Seeded two-party simulations of the embedding-membership attack (Table 7.2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fedleak.attacks.membership.simulation import (
    MembershipSetup,
    _BatchWalker,
    simulate_membership,
)

from fedleak.data.checkins import checkin_dataset, synthetic_checkins
from fedleak.data.text import TextDataset

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def small_checkins() -> TextDataset:
    synthetic = synthetic_checkins(
        num_users=500, num_venues=500, num_areas=5, mean_checkins=15.0, seed=3
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
    small = simulate_membership(small_checkins, _setup(batch_size=5), seed=0)
    large = simulate_membership(small_checkins, _setup(batch_size=80), seed=0)
    assert small.scores.recall == 1.0 and large.scores.recall == 1.0
    assert small.scores.precision > large.scores.precision
    assert small.scores.mean_bag_size < large.scores.mean_bag_size
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
