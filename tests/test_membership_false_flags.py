"""The breakdown of the embedding attack's false flags by record size."""

from __future__ import annotations

import pytest
from fedleak.attacks.membership import EmbeddingMembership, false_flags_by_size
from fedleak.attacks.membership.false_flags import SIZE_EDGES

from fedleak.errors import ConfigError


def _attack(*bags: list[int]) -> EmbeddingMembership:
    attack = EmbeddingMembership(vocab_size=40)
    for bag in bags:
        attack.observe_bag(bag)
    return attack


def test_counts_flags_per_band_of_distinct_words() -> None:
    attack = _attack(list(range(1, 13)), list(range(20, 40)))
    records = [
        [1, 2, 3, 0, 0],  # 3 words, covered by the first bag
        [1, 2, 30, 0, 0],  # 3 words, spread over two bags: not flagged
        [*range(20, 34), 20],  # 14 distinct words (a repeat), covered
        [*range(1, 12), 25],  # 12 words, not covered
        list(range(20, 32)),  # 12 words, covered
    ]
    out = false_flags_by_size(attack, records, edges=(4, 13))
    assert out["bands"] == [
        {"distinct_words": "<4", "records": 2, "flagged": 1, "rate": 0.5},
        {"distinct_words": "4-12", "records": 2, "flagged": 1, "rate": 0.5},
        {"distinct_words": ">=13", "records": 1, "flagged": 1, "rate": 1.0},
    ]
    assert out["median_words_flagged"] == 12.0  # sizes 3, 14, 12
    assert out["median_words_not_flagged"] == 7.5  # sizes 3, 12


def test_padding_does_not_count_and_empty_bands_are_left_out() -> None:
    attack = _attack([5, 6, 7])
    out = false_flags_by_size(attack, [[5, 6, 0, 0, 0, 0]], edges=SIZE_EDGES)
    assert out["bands"] == [
        {"distinct_words": "<10", "records": 1, "flagged": 1, "rate": 1.0}
    ]
    assert out["median_words_flagged"] == 2.0
    assert out["median_words_not_flagged"] is None


def test_a_size_on_an_edge_opens_its_band_and_empty_bands_between_are_skipped() -> None:
    attack = _attack(list(range(1, 20)))
    records = [[1, 2], list(range(1, 5)), list(range(1, 14)), list(range(1, 16))]
    out = false_flags_by_size(attack, records, edges=(4, 8, 13))
    assert [(b["distinct_words"], b["records"]) for b in out["bands"]] == [
        ("<4", 1),
        ("4-7", 1),
        (">=13", 2),
    ]


def test_the_attack_s_own_ignored_ids_do_not_count() -> None:
    attack = EmbeddingMembership(vocab_size=40, ignore=(0, 1))
    attack.observe_bag([2, 3, 4])
    out = false_flags_by_size(attack, [[1, 1, 2, 3, 4]], edges=(4,))
    assert out["bands"] == [
        {"distinct_words": "<4", "records": 1, "flagged": 1, "rate": 1.0}
    ]


@pytest.mark.parametrize("edges", [(), (5, 5), (10, 8)])
def test_edges_must_increase(edges: tuple[int, ...]) -> None:
    with pytest.raises(ConfigError, match="strictly increasing"):
        false_flags_by_size(_attack([1]), [[1]], edges=edges)
