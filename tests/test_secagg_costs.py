"""The in-process cost measurement: structure and correctness (no timing asserts)."""

from __future__ import annotations

import pytest

from fedleak.errors import ConfigError
from fedleak.secagg.costs import measure_costs, measure_round


def test_measure_costs_reports_both_modes_the_floor_and_ratios() -> None:
    (row,) = measure_costs(((5, 2000),), repeats=2)
    assert (row["n_clients"], row["length"]) == (5, 2000)
    double, thesis, floor = row["double-masking"], row["thesis"], row["floor"]
    for measured in (double, thesis):
        assert measured["max_abs_error"] < 5 * 2**-20  # the sum is right
        assert measured["client_upload_s"] > 0 and measured["server_total_s"] > 0
    assert thesis["client_unmask_s"] == 0  # no dropouts: no unmask stage
    assert (double["exchanges_per_round"], thesis["exchanges_per_round"]) == (2, 1)
    # double masking sends the same vector plus 4 sealed and 4 revealed shares
    assert double["bytes_up_per_client"] - thesis["bytes_up_per_client"] == 4 * (
        48 + 32
    )
    assert floor["threshold"] == 3
    assert floor["floor_client_s"] > floor["shamir_split_s"] > 0
    assert set(row["ratios"]) == {
        "client_double_vs_thesis",
        "server_double_vs_thesis",
        "client_upload_vs_floor",
        "shamir_pycryptodome_vs_fedleak",
    }
    assert all(v > 0 for v in row["ratios"].values())


def test_measure_round_and_validation() -> None:
    single = measure_round(4, 100, "double-masking", repeats=1)
    assert single["exchanges_per_round"] == 2 and single["max_abs_error"] < 1e-5
    with pytest.raises(ConfigError):
        measure_costs(((2, 10),))
    with pytest.raises(ConfigError):
        measure_round(4, 10, "plain")  # type: ignore[arg-type]
