"""Learning-curve summaries: the plateau judged on the last fifth against the best before."""

from __future__ import annotations

import pytest

from fedleak.curves import (
    CURVE_POINTS,
    PLATEAU_TOLERANCE,
    evaluation_interval,
    run_curve,
    summarise_curve,
)


def test_a_curve_still_rising_in_its_last_fifths_is_no_plateau() -> None:
    # ten points: last fifth (rounds 9-10) mean 0.675, previous (7-8) 0.575
    points = [(r, 0.05 * r + 0.2) for r in range(1, 11)]
    summary = summarise_curve(points)
    assert summary["last_fifth"] == pytest.approx(0.675)
    assert summary["previous_fifth"] == pytest.approx(0.575)
    assert summary["plateau"] is False
    assert summary["rounds"] == list(range(1, 11))


def test_a_flat_end_is_a_plateau_and_the_tolerance_is_strict() -> None:
    rising_then_flat = [(r, min(0.1 * r, 0.8)) for r in range(1, 21)]
    assert summarise_curve(rising_then_flat)["plateau"] is True
    # the last fifth exactly the tolerance above the best before: not a plateau
    edge = [(r, 0.0) for r in range(1, 9)] + [(9, PLATEAU_TOLERANCE), (10, 0.02)]
    summary = summarise_curve(edge)
    assert summary["last_fifth"] - summary["best_earlier_fifth"] == PLATEAU_TOLERANCE
    assert summary["plateau"] is False
    assert summary["below_best"] == 0.0


def test_the_last_fifth_is_judged_against_the_best_earlier_fifth() -> None:
    # DP-SGD's shape: best early (fifth 2: 0.9), a dip, a partial recovery
    wander = [0.5, 0.6, 0.9, 0.9, 0.8, 0.8, 0.7, 0.7, 0.85, 0.85]
    summary = summarise_curve(list(enumerate(wander, 1)))
    assert summary["last_fifth"] == pytest.approx(0.85)
    assert summary["previous_fifth"] == pytest.approx(0.7)  # a rise of 0.15 ...
    assert summary["best_earlier_fifth"] == pytest.approx(0.9)  # ... to below
    assert summary["plateau"] is True
    assert summary["below_best"] == pytest.approx(0.05)
    # a rise beyond every earlier fifth is no plateau, however late
    late = [0.5, 0.6, 0.9, 0.9, 0.8, 0.8, 0.7, 0.7, 0.93, 0.93]
    assert summarise_curve(list(enumerate(late, 1)))["plateau"] is False
    # just under the tolerance above the best: a plateau
    near = [0.5, 0.6, 0.9, 0.9, 0.8, 0.8, 0.7, 0.7, 0.915, 0.915]
    assert summarise_curve(list(enumerate(near, 1)))["plateau"] is True
    # a fall is a plateau with the fall given; the first fifth counts too
    falling = [(r, 0.9 - 0.05 * r) for r in range(1, 11)]
    summary = summarise_curve(falling)
    assert summary["plateau"] is True
    assert summary["best_earlier_fifth"] == pytest.approx(0.825)
    assert summary["below_best"] == pytest.approx(0.4)
    # with 11 points the first point is in no fifth (fifths of 2 from the end)
    first_high = [(0, 1.0)] + [(r, 0.5) for r in range(1, 11)]
    assert summarise_curve(first_high)["below_best"] == 0.0


def test_thinning_keeps_every_nth_point_and_the_last() -> None:
    points = [(r, 0.5) for r in range(10, 110, 10)]
    summary = summarise_curve(points, every=4)
    assert summary["rounds"] == [10, 50, 90, 100]
    assert summary["test_accuracy"] == [0.5] * 4


def test_short_and_empty_curves() -> None:
    # five to nine points: one point a fifth (the last against each before)
    five = [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.5), (5, 0.5)]
    assert summarise_curve(five)["plateau"] is True
    assert summarise_curve(five)["previous_fifth"] == 0.5
    assert summarise_curve(five)["best_earlier_fifth"] == 0.5
    # fewer than five points: one point a fifth
    assert summarise_curve([(1, 0.2), (2, 0.9)])["plateau"] is False
    assert summarise_curve([(1, 0.9), (2, 0.2), (3, 0.3)])["below_best"] == (
        pytest.approx(0.6)
    )
    one = summarise_curve([(1, 0.7)])  # nothing before: judged against itself
    assert one["plateau"] is True and one["best_earlier_fifth"] == 0.7
    assert summarise_curve([]) == {"rounds": [], "test_accuracy": [], "plateau": None}
    with pytest.raises(ValueError, match="every must be >= 1"):
        summarise_curve([(1, 0.5)], every=0)


def test_run_curve_reads_the_rounds_the_server_evaluated() -> None:
    results = {
        "rounds": [
            {"round": 1, "server": {"test-accuracy": 0.4, "test-loss": 1.0}},
            {"round": 2, "server": {}},  # not evaluated this round
            {"round": 3, "server": {"test-accuracy": 0.6}},
            {"round": 4},
            {"round": 5, "server": {"test-accuracy": 0.61}},
        ]
    }
    curve = run_curve(results, every=1)
    assert curve["rounds"] == [1, 3, 5]
    assert curve["test_accuracy"] == [0.4, 0.6, 0.61]
    assert curve["plateau"] is True  # 0.61 against 0.6
    assert run_curve(results)["rounds"] == [1, 5]  # every 25th and the last
    long = {
        "rounds": [{"round": r, "server": {"test-accuracy": 0.5}} for r in range(30)]
    }
    assert run_curve(long)["rounds"] == [0, 25, 29]
    assert run_curve({"status": "completed"})["plateau"] is None


@pytest.mark.parametrize(
    ("rounds", "every"), [(1, 1), (39, 1), (80, 2), (85, 2), (3000, 75), (3001, 75)]
)
def test_a_run_evaluates_at_curve_points_rounds(rounds: int, every: int) -> None:
    assert CURVE_POINTS == 40  # 8 a fifth: one dip moves a fifth's mean little
    assert evaluation_interval(rounds) == every
