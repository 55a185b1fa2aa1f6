"""Syntactic privacy metrics on the worked examples of seed 004 Ch. 2-3."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.errors import ConfigError, DataError
from fedleak.privacy import ldp
from fedleak.privacy.syntactic import (
    Table,
    distinct_l_diversity,
    earth_movers_distance,
    entropy_l_diversity,
    equivalence_classes,
    k_anonymity,
    randomized_response,
    randomized_response_epsilon,
    t_closeness,
)

QI = ["DoB", "Sex", "ZIP"]
NAMES = [*QI, "Disease"]

# Seed 004 Fig. 2.1(a): the de-identified medical dataset.
FIG_2_1 = [
    ("1960/05/02", "F", "10041", "stroke"),
    ("1960/05/20", "M", "10032", "dyspepsia"),
    ("1960/05/12", "M", "10037", "achlorhydria"),
    ("1960/05/05", "F", "10044", "epilepsy"),
    ("1955/09/01", "M", "10043", "helicobacter"),
    ("1955/09/02", "M", "10042", "helicobacter"),
    ("1955/09/10", "F", "10039", "helicobacter"),
    ("1955/09/20", "F", "10030", "helicobacter"),
    ("1955/12/07", "M", "10030", "dermatitis"),
    ("1955/12/05", "M", "10031", "retinitis"),
    ("1958/12/11", "F", "10180", "epilepsy"),
    ("1955/12/25", "F", "10042", "dermatitis"),
    ("1955/12/30", "F", "10045", "gastritis"),
    ("1960/04/02", "F", "10036", "stroke"),
    ("1960/04/05", "F", "10034", "labyrinthitis"),
    ("1960/04/10", "M", "10047", "gastritis"),
    ("1960/04/30", "M", "10048", "dyspepsia"),
]

# Seed 004 Fig. 3.1: 4-anonymous (DoB to month, Sex suppressed, ZIP to 100**).
FIG_3_1 = (
    [
        ("1960/05", "*", "100**", d)
        for d in ("stroke", "dyspepsia", "achlorhydria", "epilepsy")
    ]
    + [("1955/09", "*", "100**", "helicobacter") for _ in range(4)]
    + [
        ("1955/12", "*", "100**", d)
        for d in ("dermatitis", "retinitis", "dermatitis", "gastritis")
    ]
    + [
        ("1960/04", "*", "100**", d)
        for d in ("stroke", "labyrinthitis", "gastritis", "dyspepsia")
    ]
)

# Seed 004 Fig. 3.3: 4-anonymous and 3-diverse.
FIG_3_3 = (
    [
        ("1955", "M", "100**", d)
        for d in ("helicobacter", "helicobacter", "dermatitis", "retinitis")
    ]
    + [
        ("1960", "F", "100**", d)
        for d in ("stroke", "epilepsy", "stroke", "labyrinthitis")
    ]
    + [
        ("1955", "F", "100**", d)
        for d in ("helicobacter", "helicobacter", "dermatitis", "gastritis")
    ]
    + [
        ("1960", "M", "100**", d)
        for d in ("dyspepsia", "achlorhydria", "gastritis", "dyspepsia")
    ]
)

# Seed 004 Fig. 3.4 (Anatomy): group id -> (disease, count) of the sensitive fragment.
FIG_3_4 = {
    "G1": [("helicobacter", 2), ("dermatitis", 1), ("retinitis", 1)],
    "G2": [("stroke", 2), ("epilepsy", 1), ("labyrinthitis", 1)],
    "G3": [("helicobacter", 2), ("dermatitis", 1), ("gastritis", 1)],
    "G4": [("dyspepsia", 2), ("achlorhydria", 1), ("gastritis", 1)],
}


def test_fig_2_1_zip_only_is_1_anonymous_and_8_anonymous_after_suppression() -> None:
    table = Table.from_rows(FIG_2_1, NAMES)
    assert k_anonymity(table, ["ZIP"]) == 1  # only one person in 10180
    # Suppress record 11 (Kathy) and drop the last ZIP digit: 8-anonymity.
    kept = [row for i, row in enumerate(FIG_2_1) if i != 10]
    generalized = [(*row[:2], row[2][:4] + "*", row[3]) for row in kept]
    assert k_anonymity(Table.from_rows(generalized, NAMES), ["ZIP"]) == 8
    # Without suppression, only removing the last three digits gives k > 1.
    coarse = [(*row[:2], row[2][:2] + "***", row[3]) for row in FIG_2_1]
    assert k_anonymity(Table.from_rows(coarse, NAMES), ["ZIP"]) == 17


def test_fig_3_1_is_4_anonymous_but_only_1_diverse() -> None:
    table = Table.from_rows(FIG_3_1, NAMES)
    assert k_anonymity(table, QI) == 4
    assert len(equivalence_classes(table, QI)) == 4
    # Homogeneity attack: the 1955/09 class is all helicobacter.
    assert distinct_l_diversity(table, QI, "Disease") == 1
    assert entropy_l_diversity(table, QI, "Disease") == pytest.approx(1.0)


def test_fig_3_3_is_4_anonymous_and_3_diverse() -> None:
    table = Table.from_rows(FIG_3_3, NAMES)
    assert k_anonymity(table, QI) == 4
    assert distinct_l_diversity(table, QI, "Disease") == 3
    # Classes with counts (2, 1, 1): H = 1.5 ln 2, so l_entropy = 2^1.5.
    assert entropy_l_diversity(table, QI, "Disease") == pytest.approx(2**1.5)


def test_fig_3_3_skewness_attack_and_t_closeness() -> None:
    table = Table.from_rows(FIG_3_3, NAMES)
    # "Alice": class (1960, F) has stroke in 2 of 4 records vs 12.5 % overall.
    rows = equivalence_classes(table, QI)[1]
    diseases = table.column("Disease")
    assert np.mean(diseases[rows] == "stroke") == 0.5
    assert np.mean(diseases == "stroke") == 0.125
    # Categorical EMD = total variation distance; computed by hand per class.
    overall: dict[str, float] = {}
    for d in diseases:
        overall[d] = overall.get(d, 0.0) + 1 / 16
    worst = 0.0
    for cls in equivalence_classes(table, QI):
        local: dict[str, float] = {}
        for d in diseases[cls]:
            local[d] = local.get(d, 0.0) + 1 / len(cls)
        tv = 0.5 * sum(abs(local.get(k, 0.0) - v) for k, v in overall.items())
        worst = max(worst, tv)
    assert t_closeness(table, QI, "Disease") == pytest.approx(worst)
    assert t_closeness(table, QI, "Disease") == pytest.approx(0.75)


def test_fig_3_4_anatomy_buckets_are_3_diverse() -> None:
    rows = [
        (gid, d) for gid, counts in FIG_3_4.items() for d, c in counts for _ in range(c)
    ]
    table = Table.from_rows(rows, ["GroupID", "Disease"])
    assert k_anonymity(table, ["GroupID"]) == 4
    assert distinct_l_diversity(table, ["GroupID"], "Disease") == 3


def test_fig_3_2_microaggregation_is_3_anonymous() -> None:
    ages = [25, 25, 25, 40, 40, 40]
    diseases = ["flu", "gastritis", "dermatitis", "stroke", "dyspepsia", "asthma"]
    table = Table({"Age": np.array(ages), "Disease": np.array(diseases, dtype=object)})
    assert k_anonymity(table, ["Age"]) == 3
    assert distinct_l_diversity(table, ["Age"], "Disease") == 3
    original = Table({"Age": np.array([20, 25, 30, 35, 40, 45])})
    assert k_anonymity(original, ["Age"]) == 1


def test_ordered_emd_matches_li_et_al_example() -> None:
    # Li et al. 2007: salaries {3..11}k, class {3k, 4k, 5k} vs uniform overall.
    p = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0], dtype=float)
    q = np.ones(9)
    assert earth_movers_distance(p, q, ordered=True) == pytest.approx(0.375)
    p2 = np.array([0, 0, 0, 1, 0, 1, 0, 0, 1], dtype=float)  # {6k, 8k, 11k}
    assert earth_movers_distance(p2, q, ordered=True) == pytest.approx(1 / 6, abs=1e-3)


def test_t_closeness_with_order() -> None:
    table = Table(
        {
            "zip": np.array(["a", "a", "a", "b", "b", "b"], dtype=object),
            "salary": np.array([3, 4, 5, 6, 7, 8]),
        }
    )
    t = t_closeness(table, ["zip"], "salary", order=[3, 4, 5, 6, 7, 8])
    assert t == pytest.approx(
        earth_movers_distance(np.array([1, 1, 1, 0, 0, 0.0]), np.ones(6), ordered=True)
    )
    with pytest.raises(DataError, match="not in `order`"):
        t_closeness(table, ["zip"], "salary", order=[3, 4, 5])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=40)
)
def test_metric_invariants(rows: list[tuple[int, int]]) -> None:
    table = Table.from_rows(rows, ["q", "s"])
    k = k_anonymity(table, ["q"])
    classes = equivalence_classes(table, ["q"])
    assert sum(len(c) for c in classes) == len(rows)
    assert k == min(len(c) for c in classes)
    l_distinct = distinct_l_diversity(table, ["q"], "s")
    l_entropy = entropy_l_diversity(table, ["q"], "s")
    assert 1 <= l_entropy <= l_distinct + 1e-9 <= k + 1e-9
    t = t_closeness(table, ["q"], "s")
    assert 0.0 <= t <= 1.0
    if len(classes) == 1:
        assert t == pytest.approx(0.0)


def test_errors_name_the_problem() -> None:
    table = Table.from_rows(FIG_3_3, NAMES)
    with pytest.raises(ConfigError, match="unknown attribute 'Age'"):
        k_anonymity(table, ["Age"])
    with pytest.raises(ConfigError, match="at least one quasi-identifier"):
        k_anonymity(table, [])
    with pytest.raises(DataError, match="different lengths"):
        Table({"a": np.zeros(2), "b": np.zeros(3)})


def test_randomized_response_is_reexported_with_its_epsilon() -> None:
    assert randomized_response is ldp.randomized_response
    # Seed 004 Ch. 3.2.3: a fair coin gives Pr[yes|yes] / Pr[yes|no] = 3, eps = ln 3.
    assert randomized_response_epsilon(0.5) == pytest.approx(math.log(3))
    rng = np.random.default_rng(0)
    bits = np.ones(20000, dtype=np.int64)
    noisy = randomized_response(bits, math.log(3), rng)
    assert np.mean(noisy) == pytest.approx(0.75, abs=0.02)
