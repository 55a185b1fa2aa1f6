"""``fedleak bench report``: REPRODUCTION.md is current, and its verdict rules judge."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from fedleak.bench import find_benchmark, seed_claims
from fedleak.bench.report import load_records, render_report
from fedleak.bench.seed_claims import CLAIMS, assess, auc_standard_error, monotone
from fedleak.bench.text_steps import text_label
from fedleak.errors import DataError

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _claim(row: str) -> Any:
    return next(c for c in CLAIMS if c.row == row)


def test_committed_report_matches_the_records(tmp_path):
    """Regenerate from benchmarks/*.json; fails when REPRODUCTION.md is stale."""
    text, judged = render_report(load_records(BENCHMARKS))
    committed = (BENCHMARKS / "REPRODUCTION.md").read_text(encoding="utf-8")
    (tmp_path / "REPRODUCTION.md").write_text(text, encoding="utf-8")
    assert committed == text, "run `fedleak bench report` and commit the result"
    assert len(judged) == len(CLAIMS)
    assert all(f.verdict != "no record" for _, f in judged)


def test_report_is_registered_as_a_benchmark():
    assert find_benchmark("report").module == "report"


def test_a_missing_record_gives_no_record():
    finding = assess(_claim("000 Fig. 7.6"), {})
    assert finding.verdict == "no record"
    assert "property-active" in finding.reason


def test_a_broken_record_is_named(tmp_path):
    (tmp_path / "x.json").write_text("{", encoding="utf-8")
    with pytest.raises(DataError, match=r"x\.json"):
        load_records(tmp_path)


def test_monotone_respects_the_tolerance():
    assert monotone([0.8, 0.85, 0.84, 0.9], increasing=True, tol=0.01)
    assert not monotone([0.8, 0.85, 0.83, 0.9], increasing=True, tol=0.01)
    assert monotone([0.9, 0.8, 0.7], increasing=False)


def _active(aucs: list[float], accuracy: float, rounds: int = 500) -> dict[str, Any]:
    truth = [0.5 if r % 2 else 0.0 for r in range(rounds)]
    runs = [
        {"params": {"alpha": a}, "auc": auc, "test_accuracy": accuracy, "truth": truth}
        for a, auc in zip([0.0, 0.3, 0.6, 0.9], aucs, strict=True)
    ]
    return {
        "property-active": {
            "runs": runs,
            "scale": {"rounds": 3000, "thesis_iterations": 3000},
            "quick": False,
        }
    }


@pytest.mark.parametrize(
    ("aucs", "accuracy", "verdict"),
    [
        ([0.80, 0.85, 0.84, 0.90], 0.8, "reproduced"),  # a dip within 1 SE
        ([0.80, 0.85, 0.85, 0.90], 0.2, "partly"),  # undertrained model
        ([0.68, 0.86, 0.84, 0.70], 0.8, "partly"),  # peaks, then falls back
        ([0.86, 0.85, 0.88, 0.87], 0.8, "not reproduced"),  # flat within noise
    ],
)
def test_fig_7_6_rule(aucs, accuracy, verdict):
    assert assess(_claim("000 Fig. 7.6"), _active(aucs, accuracy)).verdict == verdict


def test_property_findings_give_and_gate_on_the_plateau():
    record = _active([0.80, 0.85, 0.84, 0.90], 0.8)
    runs = record["property-active"]["runs"]
    for run in runs:
        run["accuracy"] = {"plateau": True}
    finding = assess(_claim("000 Fig. 7.6"), record)
    assert (finding.verdict, finding.utility) == (
        "reproduced",
        "test acc 0.80 (plateau)",
    )
    assert finding.scale == "3000/3000 it. = 1.00"
    runs[2]["accuracy"] = {"plateau": False}
    finding = assess(_claim("000 Fig. 7.6"), record)
    assert finding.verdict == "partly"
    assert finding.utility == "test acc 0.80 (not at plateau in 1/4 runs)"
    assert finding.reason.endswith("; but the model was not at plateau in 1/4 runs")
    # runs that ended below their best are counted with the largest fall;
    # a fall just under the tolerance, or none recorded, is no fall
    runs[0]["accuracy"] = {"plateau": True, "below_best": 0.031}
    runs[1]["accuracy"] = {"plateau": True, "below_best": 0.02}
    runs[3]["accuracy"] = {"plateau": True, "below_best": 0.0199}
    finding = assess(_claim("000 Fig. 7.6"), record)
    assert finding.utility == (
        "test acc 0.80 (not at plateau in 1/4 runs; 2/4 ended up to 0.03 below "
        "their best)"
    )
    runs[2]["accuracy"] = {"plateau": True, "below_best": None}
    finding = assess(_claim("000 Fig. 7.6"), record)
    assert finding.verdict == "reproduced"  # a fall caps nothing
    assert finding.utility == (
        "test acc 0.80 (plateau; 2/4 ended up to 0.03 below their best)"
    )
    # an accuracy curve under another key is not this record's
    for run in runs:
        run["accuracy_curve"] = run.pop("accuracy")
    finding = assess(_claim("000 Fig. 7.6"), record)
    assert (finding.verdict, finding.utility) == ("reproduced", "test acc 0.80")


def _text(rows: list[tuple], accuracy: float) -> dict:
    """A property-text record: (category, K, fraction, AUC[, lr]) per run.

    Runs without an ``lr`` carry no ``learning_rate``, as records made before
    the K sweep held ``lr * K`` (they ran at the two-party 0.3).
    """
    runs = []
    for c, k, f, auc, *rate in rows:
        params = {"property": c, "participants": k, "batch_fraction": f}
        if rate:
            params["learning_rate"] = rate[0]
        runs.append(
            {
                "label": text_label(params),
                "params": params,
                "auc": auc,
                "test_accuracy": accuracy,
                "accuracy": {"plateau": True},
            }
        )
    return {
        "property-text": {
            "runs": runs,
            "summary": {
                "auc": {r["label"]: r["auc"] for r in runs},
                "top_words": {"startrek": ["spock"], "linux": ["kernel"]},
            },
            "scale": {"rounds": 3000, "thesis_iterations": 3000},
            "quick": False,
        }
    }


def test_table_7_4_rule_gives_the_sweeps_and_gates_on_utility():
    rows = [
        ("startrek", 2, 1.0, 1.0),
        ("linux", 2, 1.0, 0.95),
        ("startrek", 2, 0.3, 0.97),
        ("startrek", 2, 0.1, 0.8),
        ("startrek", 8, 1.0, 0.9, 0.075),
    ]
    finding = assess(_claim("000 Table 7.4, Figs. 7.4(b), 7.7(b)"), _text(rows, 0.85))
    assert finding.verdict == "reproduced"
    assert finding.fedleak == (
        "AUC min 0.950 over 2 categories; startrek at fraction 0.3 0.970; top "
        "words for 2 categories; startrek AUC 0.800 / 0.970 / 1.000 at fraction "
        "0.1 / 0.3 / 1; startrek AUC 1.000 / 0.900 at K 2 / 8 (lr = 0.6 / K)"
    )
    assert finding.utility == "test acc 0.85 (plateau)"
    assert finding.scale == "3000/3000 it. = 1.00; Debian fortunes for Yelp"
    assert finding.reason == (
        "categories inferred (AUC >= 0.9; >= 0.95 at fraction 0.3) with topical "
        "top words"
    )
    # an undertrained main task caps the verdict
    low = assess(_claim("000 Table 7.4, Figs. 7.4(b), 7.7(b)"), _text(rows, 0.5))
    assert low.verdict == "partly" and "accuracy 0.50 < 0.6" in low.reason
    # fraction 0.3 below the seed's 0.95
    rows[2] = ("startrek", 2, 0.3, 0.94)
    weak = assess(_claim("000 Table 7.4, Figs. 7.4(b), 7.7(b)"), _text(rows, 0.85))
    assert (weak.verdict, weak.reason) == (
        "partly",
        "startrek at fraction 0.3 0.940 < the seed's 0.95",
    )
    rows[0] = ("startrek", 2, 1.0, 0.89)
    both = assess(_claim("000 Table 7.4, Figs. 7.4(b), 7.7(b)"), _text(rows, 0.85))
    assert both.reason == (
        "a category's AUC 0.890 < 0.9; startrek at fraction 0.3 0.940 < the seed's 0.95"
    )
    rows[0] = ("startrek", 2, 1.0, 1.0)
    # a sweep of one point is no sweep: no K series without the K=8 run
    alone = assess(_claim("000 Table 7.4, Figs. 7.4(b), 7.7(b)"), _text(rows[:4], 0.85))
    assert alone.fedleak.endswith("at fraction 0.1 / 0.3 / 1")
    # the seed's bounds are met on the bound; a record without top words
    rows[1], rows[2] = ("linux", 2, 1.0, 0.9), ("startrek", 2, 0.3, 0.95)
    edge = _text(rows, 0.85)
    del edge["property-text"]["summary"]["top_words"]
    at = assess(_claim("000 Table 7.4, Figs. 7.4(b), 7.7(b)"), edge)
    assert at.verdict == "reproduced"
    assert "top words for 0 categories" in at.fedleak


def _share(
    aucs: list[float],
    shares: tuple[float, ...] = (0.01, 0.1, 0.5, 1.0),
    bags: tuple[float | None, ...] | None = None,
) -> dict[str, Any]:
    rows = [
        {
            "table": "share_fraction",
            "setting": s,
            "property_auc": a,
            "model_accuracy": 0.9,
            "model_auc": 0.95,
            "rounds": 100,
            "mean_bag_size": None if bags is None else bags[i],
        }
        for i, (s, a) in enumerate(zip(shares, aucs, strict=True))
    ]
    setup = {"num_train": 10, "property_rounds": 240, "update_density": 0.34}
    return {"defenses": {"rows": rows, "setup": setup}}


@pytest.mark.parametrize(
    ("aucs", "verdict", "words"),
    [
        ([0.60, 0.80, 0.88, 0.93], "reproduced", "falls by 0.130"),
        ([0.50, 0.66, 0.66, 0.66], "partly", "not within the seed's 10-100%"),
        ([0.754, 0.767, 0.768, 0.768], "not reproduced", "flat"),  # old record
        ([0.90, 0.80, 0.75, 0.70], "not reproduced", "rises"),
        ([0.60, 0.93, 0.60, 0.93], "not reproduced", "flat"),  # not monotone
    ],
)
def test_table_7_5_rule_weighs_the_change_against_its_standard_error(
    aucs, verdict, words
):
    finding = assess(_claim("000 Table 7.5"), _share(aucs))
    assert finding.verdict == verdict
    assert words in finding.reason


def test_table_7_5_rule_reads_the_seed_share_and_the_visible_words():
    # the fall from 100% is read at the seed's smallest share (10%), not at
    # a smaller one, and the reason says what the update still shows there
    shares = (0.003, 0.03, 0.1, 0.5, 1.0)
    finding = assess(
        _claim("000 Table 7.5"),
        _share([0.50, 0.62, 0.649, 0.65, 0.65], shares, (30, 80, 98, 118, 118)),
    )
    assert finding.verdict == "partly"
    assert "0.649 at 0.1 vs 0.650 at 100%" in finding.reason
    assert "still shows 98 of 118 words" in finding.reason
    assert "non-zero share of an update 34%" in finding.reason
    assert "0.003 / 0.030 / 0.100 / 0.500 / 1.000" in finding.fedleak
    flat = assess(
        _claim("000 Table 7.5"),
        _share([0.60, 0.62, 0.62, 0.63, 0.63], shares, (30, 80, 98, 118, 118)),
    )
    assert flat.verdict == "not reproduced"
    assert flat.reason.startswith("flat: AUC 0.630 at 100% vs 0.600 at 0.003")
    assert "still shows 98 of 118 words" in flat.reason


def _strength(fraction: float, aucs: list[float]) -> dict[str, Any]:
    shares = (0.003, 0.01, 0.1, 1.0)
    rows = [
        {
            "table": "share_fraction",
            "setting": s,
            "property_auc": a,
            "model_accuracy": 0.70 + 0.04 * k,
        }
        for k, (s, a) in enumerate(zip(shares, aucs, strict=True))
    ]
    setup = {"home_fraction": fraction, "property_rounds": 480}
    return {"rows": rows, "setup": setup}


def test_table_7_5_reason_gives_each_strength_of_the_property():
    records = _share([0.60, 0.62, 0.62, 0.63])
    records["defenses-share-0.35"] = _strength(0.35, [0.695, 0.761, 0.785, 0.793])
    records["defenses-share-0.5"] = _strength(0.5, [0.892, 0.870, 0.890, 0.904])
    # a record whose property model diverged somewhere says nothing
    records["defenses-share-0.9"] = _strength(0.9, [0.9, 0.9, 0.9, 0.9])
    records["defenses-share-0.9"]["rows"][0]["property_auc"] = None
    finding = assess(_claim("000 Table 7.5"), records)
    assert finding.verdict == "not reproduced"  # the main record decides
    assert finding.reason.startswith("flat: AUC 0.630 at 100% vs 0.600 at 0.01")
    assert finding.reason.endswith(
        "; the property stronger or weaker, "
        "home fraction 0.35 (model acc 0.70-0.82): 0.793 at 100%, 0.785 at 0.1, "
        "0.695 at 0.003 (falls beyond 2 SE), "
        "home fraction 0.5 (model acc 0.70-0.82): 0.904 at 100%, 0.890 at 0.1, "
        "0.892 at 0.003 "
        "(flat within 2 SE)"
    )
    # 2 SE of a difference at 480 rounds is about 0.07: a fall of 0.06 is flat
    records["defenses-share-0.35"] = _strength(0.35, [0.733, 0.761, 0.785, 0.793])
    assert (
        "0.733 at 0.003 (flat within 2 SE)"
        in assess(_claim("000 Table 7.5"), records).reason
    )
    # a fall that is not monotone is flat too
    records["defenses-share-0.35"] = _strength(0.35, [0.60, 0.90, 0.70, 0.80])
    assert "(flat within 2 SE)" in assess(_claim("000 Table 7.5"), records).reason


def _fall_of(ratio: float, last: float, rounds: int) -> float:
    """The first AUC whose fall to ``last`` is ``ratio`` times 2 SE (bisection)."""
    half = rounds // 2
    lo, hi = 0.5, last
    for _ in range(200):
        first = (lo + hi) / 2
        se = math.hypot(
            auc_standard_error(last, half, half), auc_standard_error(first, half, half)
        )
        if last - first > ratio * 2 * se:
            lo = first
        else:
            hi = first
    return lo


def _ramp(first: float, last: float) -> list[float]:
    return [first, first + 0.3 * (last - first), first + 0.6 * (last - first), last]


@pytest.mark.parametrize(
    ("ratio", "outcome"), [(1.01, "falls beyond 2 SE"), (0.99, "flat within 2 SE")]
)
def test_a_strength_falls_only_beyond_two_standard_errors_of_its_own_rounds(
    ratio, outcome
):
    # the main record has 240 property rounds, the sweep 480: the sweep's own
    # standard error decides, for the fall from 100% to the smallest share
    first = _fall_of(ratio, 0.8, 480)
    records = _share([0.60, 0.62, 0.62, 0.63])
    records["defenses-share-0.35"] = _strength(0.35, _ramp(first, 0.8))
    reason = assess(_claim("000 Table 7.5"), records).reason
    assert reason.endswith(f"({outcome})")
    assert f"0.800 at 100%, {_ramp(first, 0.8)[2]:.3f} at 0.1, " in reason


@pytest.mark.parametrize(
    ("dip", "outcome"), [(1.5, "falls beyond 2 SE"), (2.5, "flat within 2 SE")]
)
def test_a_strength_may_step_back_by_two_standard_errors_and_still_fall(dip, outcome):
    first, last = 0.60, 0.80
    se = math.hypot(
        auc_standard_error(last, 240, 240), auc_standard_error(first, 240, 240)
    )
    aucs = [first, 0.75, 0.75 - dip * se, last]  # a step back at 10%
    records = _share([0.60, 0.62, 0.62, 0.63])
    records["defenses-share-0.35"] = _strength(0.35, aucs)
    assert assess(_claim("000 Table 7.5"), records).reason.endswith(f"({outcome})")


def test_a_strength_record_is_read_whatever_its_rows():
    records = _share([0.60, 0.62, 0.62, 0.63])
    # sorted first and unreadable (no rows at all): skipped, the rest read
    records["defenses-share-0.1"] = {"setup": {"home_fraction": 0.1}}
    # two shares, both below the seed's 10%: the smallest stands for it
    two = _strength(0.35, [0.70, 0.75, 0.76, 0.80])
    two["rows"] = two["rows"][:2]
    records["defenses-share-0.35"] = two
    reason = assess(_claim("000 Table 7.5"), records).reason
    assert reason.endswith(
        "; the property stronger or weaker, home fraction 0.35 (model acc "
        "0.70-0.74): 0.750 at 0.01, 0.700 at 0.003, 0.700 at 0.003 "
        "(flat within 2 SE)"
    )
    one = _strength(0.35, [0.70, 0.75, 0.76, 0.80])
    one["rows"] = one["rows"][:1]  # one share is no table
    records["defenses-share-0.35"] = one
    assert "stronger or weaker" not in assess(_claim("000 Table 7.5"), records).reason


@pytest.mark.parametrize(("rounds", "half"), [(7, 3), (2, 1), (480, 240)])
def test_the_difference_se_counts_half_the_property_rounds_per_auc(rounds, half):
    records = {"defenses": {"setup": {"property_rounds": rounds}}}
    expected = math.hypot(
        auc_standard_error(0.7, half, half), auc_standard_error(0.6, half, half)
    )
    assert seed_claims._difference_se(records, 0.7, 0.6) == pytest.approx(expected)
    assert seed_claims._se_of_difference(0.7, 0.6, rounds) == pytest.approx(expected)
    assert seed_claims._se_of_difference(0.7, 0.6, 10 * rounds) < expected


def test_auc_standard_error_is_hanley_mcneil():
    # A = 0.5, 30 + 30 scores: q1 = q2 = 1/3, var = (0.25 + 58/12) / 900
    assert auc_standard_error(0.5, 30, 30) == pytest.approx(0.07515, abs=1e-4)
    assert auc_standard_error(0.9, 120, 120) < auc_standard_error(0.9, 30, 30)


def test_fig_4_5a_rule_reads_the_overestimate():
    true = [1000.0 - i for i in range(50)]
    close = {
        "users": 10,
        "sketch_size": 4896,
        "true": true,
        "estimated": [t * 1.01 for t in true],
        "estimated_count_mean_min": true,
    }
    far = {**close, "estimated": [t * 1.85 for t in true]}
    for fig, verdict in ((close, "reproduced"), (far, "partly")):
        records = {"sketches": {"recommender": {"fig_4_5a": fig}}}
        finding = assess(_claim("000 Fig. 4.5(a)"), records)
        assert finding.verdict == verdict
    assert (
        "+85%"
        in assess(
            _claim("000 Fig. 4.5(a)"), {"sketches": {"recommender": {"fig_4_5a": far}}}
        ).reason
    )


def _join(
    before: float,
    after: float,
    control: tuple[float, float] | None = (0.1, 0.15),
    join_model: str | None = "K=2->3",
) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "median_score_before": before,
        "median_score_after": after,
    }
    if control is not None:
        summary["control_median_score_before"] = control[0]
        summary["control_median_score_after"] = control[1]
    if join_model is not None:
        summary["join_model"] = join_model
    return {
        "property-join": {
            "summary": summary,
            "scale": {},
            "runs": [{"test_accuracy": 0.8}],
        }
    }


@pytest.mark.parametrize(
    ("record", "verdict", "reason"),
    [
        (
            _join(0.1, 0.9),
            "reproduced",
            "scores jump from low to high when the target joins (K = 2 -> 3)",
        ),
        # the old join model, or no control run: at most partly
        (
            _join(0.1, 0.9, join_model=None),
            "partly",
            "scores rise by 0.80, 0.75 beyond the control's change, from 0.10 "
            "(seed: ~0 -> ~1); the late joiner is a zero update inside K = 3",
        ),
        (
            _join(0.1, 0.9, control=None),
            "partly",
            "scores rise by 0.80, 0.80 beyond the control's change, from 0.10 "
            "(seed: ~0 -> ~1)",
        ),
        # high before the join (the seed: ~0)
        (
            _join(0.46, 0.8),
            "partly",
            "scores rise by 0.34, 0.29 beyond the control's change, from 0.46 "
            "(seed: ~0 -> ~1)",
        ),
        # the control rises as much: the jump is the join's, not the property's
        (
            _join(0.1, 0.9, control=(0.1, 0.9)),
            "not reproduced",
            "no rise in scores after the join beyond the control's",
        ),
        # the edges: before 0.3 and after 0.7 still count as low and high
        (
            _join(0.3, 0.75, control=(0.25, 0.25)),
            "reproduced",
            "scores jump from low to high when the target joins (K = 2 -> 3)",
        ),
        (
            _join(0.25, 0.7, control=(0.25, 0.25)),
            "reproduced",
            "scores jump from low to high when the target joins (K = 2 -> 3)",
        ),
        (
            _join(0.25, 0.75, control=(0.25, 0.375)),
            "partly",
            "scores rise by 0.50, 0.38 beyond the control's change, from 0.25 "
            "(seed: ~0 -> ~1)",
        ),
        (
            _join(0.3125, 0.9, control=(0.25, 0.25)),
            "partly",
            "scores rise by 0.59, 0.59 beyond the control's change, from 0.31 "
            "(seed: ~0 -> ~1)",
        ),
        (
            _join(0.25, 0.6875, control=(0.25, 0.25)),
            "partly",
            "scores rise by 0.44, 0.44 beyond the control's change, from 0.25 "
            "(seed: ~0 -> ~1)",
        ),
    ],
)
def test_fig_7_9_rule_weighs_the_jump_against_a_control(record, verdict, reason):
    finding = assess(_claim("000 Fig. 7.9"), record)
    assert (finding.verdict, finding.reason) == (verdict, reason)


def test_fig_7_9_finding_names_the_control():
    finding = assess(_claim("000 Fig. 7.9"), _join(0.46, 0.8, control=(0.44, 0.4)))
    assert finding.fedleak == (
        "median score before / after join 0.46 / 0.80; control (target joins "
        "without it) 0.44 / 0.40"
    )
    bare = assess(_claim("000 Fig. 7.9"), _join(0.46, 0.8, control=None))
    assert bare.fedleak.endswith("; no control run")


def test_fig_7_9_rule_edges_and_a_half_recorded_control():
    # a net rise of exactly 0.4 is enough; exactly 0.05 is no rise
    edge = assess(_claim("000 Fig. 7.9"), _join(0.25, 0.75, control=(0.0, 0.1)))
    assert edge.verdict == "reproduced"
    flat = assess(_claim("000 Fig. 7.9"), _join(0.0, 0.05, control=(0.25, 0.25)))
    assert flat.verdict == "not reproduced"
    # a control with no score after the join is no control
    half = assess(_claim("000 Fig. 7.9"), _join(0.1, 0.9, control=(0.1, None)))
    assert half.verdict == "partly"
    assert half.fedleak.endswith("; no control run")
    record = _join(0.1, 0.9)
    assert assess(_claim("000 Fig. 7.9"), record).scale == (
        seed_claims._property_scale(record["property-join"])
    )


def _diagnosed_join(verdict_case: tuple[float, float]) -> dict[str, Any]:
    record = _join(*verdict_case)
    phase = {
        "aux_cv_auc": 0.9964,
        "aux_median_property": 0.84,
        "aux_median_none": 0.16,
        "observed_median": 0.46,
        "norm_ratio": 0.89,
        "norm_ratio_last_fifth": 0.27,
    }
    record["property-join"]["summary"].update(
        train_loss_before_join=0.00551,
        diagnostics={
            "join": {
                "1": phase,
                "2": {**phase, "aux_cv_auc": 0.9928, "norm_ratio_last_fifth": 0.0148},
            },
            "control": {"1": phase},
        },
    )
    return record


def test_fig_7_9_reason_gives_the_diagnostics_when_not_reproduced():
    finding = assess(_claim("000 Fig. 7.9"), _diagnosed_join((0.46, 0.8)))
    assert finding.verdict == "partly"
    assert finding.reason == (
        "scores rise by 0.34, 0.29 beyond the control's change, from 0.46 "
        "(seed: ~0 -> ~1); the adversary's classifiers separate its own emulated "
        "aggregates (cross-validated AUC 0.996 / 0.993, median scores 0.84 / 0.16 "
        "with one other), but the observed updates shrink as the clients' records "
        "are memorised (train loss 0.0055 before the join): at the end of each "
        "phase they are 0.27x / 0.01x the norm of the emulated ones, and the "
        "honest client's updates score 0.46, not near 0.16"
    )
    # with the two labels' norms: how the emulations with the property grow
    record = _diagnosed_join((0.46, 0.8))
    found = record["property-join"]["summary"]["diagnostics"]["join"]
    found["1"] = {
        **found["1"],
        "label_norm_ratio": 1.34,
        "label_norm_ratio_last_fifth": 7.2,
    }
    found["2"] = {
        **found["2"],
        "label_norm_ratio": 13.44,
        "label_norm_ratio_last_fifth": 57.6,
    }
    assert (
        "0.27x / 0.01x the norm of the emulated ones, while its emulations with "
        "the property grow to 7x / 58x the norm of those without by the end of "
        "each phase (1.3x / 13.4x over it: watermarked renderings of its records, "
        "never trained on, against the records themselves), and the honest"
    ) in assess(_claim("000 Fig. 7.9"), record).reason
    # one phase without the ratio: nothing said of it
    found["2"]["label_norm_ratio"] = None
    assert "grow to" not in assess(_claim("000 Fig. 7.9"), record).reason
    # without the loss the rest stays; a reproduced row needs no diagnosis
    record = _diagnosed_join((0.46, 0.8))
    del record["property-join"]["summary"]["train_loss_before_join"]
    assert "are memorised: at the end" in assess(_claim("000 Fig. 7.9"), record).reason
    reproduced = assess(_claim("000 Fig. 7.9"), _diagnosed_join((0.1, 0.9)))
    assert reproduced.reason == (
        "scores jump from low to high when the target joins (K = 2 -> 3)"
    )
    # one phase only (or none): nothing to compare, nothing added
    record = _diagnosed_join((0.46, 0.8))
    del record["property-join"]["summary"]["diagnostics"]["join"]["2"]
    assert assess(_claim("000 Fig. 7.9"), record).reason.endswith("(seed: ~0 -> ~1)")


def _averaging(k3: float, k5: float, **summary: Any) -> dict[str, Any]:
    return {
        "property-model-averaging": {
            "summary": {
                "trials": 2,
                "K3": {"whole_dataset_auc": k3, **summary.pop("K3", {})},
                "K5": {"whole_dataset_auc": k5, **summary.pop("K5", {})},
                **summary,
            },
            "scale": {},
            "runs": [{"test_accuracy": 0.8}],
        }
    }


def _averaging_phase(observed: float, cv: float, ratio: float) -> dict[str, Any]:
    return {
        "2": {
            "aux_cv_auc": cv,
            "aux_median_property": 0.86,
            "aux_median_none": 0.12,
            "observed_median": observed,
            "norm_ratio": 0.6,
            "norm_ratio_last_fifth": 0.02,
            "label_norm_ratio": ratio,
            "label_norm_ratio_last_fifth": 10 * ratio,
        }
    }


@pytest.mark.parametrize(
    ("k3", "k5", "verdict", "reason"),
    [
        (0.95, 0.9, "reproduced", "property trials score above control trials"),
        (0.9, 0.7, "partly", "separated at one K only"),
        (0.89, 0.7, "not reproduced", "property and control trials overlap"),
    ],
)
def test_fig_7_8_rule_needs_both_k_separated(k3, k5, verdict, reason):
    record = _averaging(k3, k5)
    record["property-model-averaging"]["scale"] = {
        "rounds": 500,
        "thesis_iterations": 500,
    }
    finding = assess(_claim("000 Fig. 7.8"), record)
    assert finding.verdict == verdict and finding.reason.startswith(reason)
    assert finding.fedleak == f"trial AUC K=3 {k3:.2f}, K=5 {k5:.2f} (2 trials per arm)"
    assert finding.scale == "500/500 it. = 1.00"


def test_fig_7_8_reason_gives_windows_refits_and_diagnostics():
    windows = {
        "auc_by_window": [
            {"first_round": 1, "last_round": 2, "whole_dataset_auc": 0.77},
            {"first_round": 3, "last_round": 4, "whole_dataset_auc": 0.844},
            {"first_round": 5, "last_round": 5, "whole_dataset_auc": None},
        ],
        "auc_by_fit_rounds": [
            {"fit_last_round": 100, "whole_dataset_auc": 1.0},
            {"fit_last_round": 200, "whole_dataset_auc": 0.9375},
        ],
    }
    k5 = {
        "auc_by_window": [
            {"first_round": 1, "last_round": 5, "whole_dataset_auc": 0.6}
        ],
        "auc_by_fit_rounds": [
            {"fit_last_round": 100, "whole_dataset_auc": 0.8125},
            {"fit_last_round": 200, "whole_dataset_auc": 0.71875},
        ],
    }
    diagnostics = {
        "K3-property-0": _averaging_phase(0.48, 0.98, 1.2),
        "K3-property-1": _averaging_phase(0.84, 1.0, 1.4),
        "K3-control-0": _averaging_phase(0.34, 0.99, 1.6),
        "K3-control-1": _averaging_phase(0.68, 0.97, 2.0),
        "K5-control-0": _averaging_phase(0.0, 0.0, 100.0),  # not read
    }
    record = _averaging(0.8, 0.7, K3=windows, K5=k5, diagnostics=diagnostics)
    finding = assess(_claim("000 Fig. 7.8"), record)
    assert finding.verdict == "not reproduced"
    assert finding.reason == (
        "property and control trials overlap; the overlap holds in every fifth of "
        "the rounds (trial AUC K=3 0.77-0.84, K=5 0.60); fitted on the emulations "
        "of the first 100 / 200 rounds only, the classifier gives K=3 1.00 / 0.94, "
        "K=5 0.81 / 0.72; the adversary's classifier separates its own emulated "
        "aggregates (K = 3, medians over the runs: cross-validated AUC 0.98, "
        "scores 0.86 with the property and 0.12 without) but scores the observed "
        "ones in between in both arms (median per run: property 0.48-0.84, "
        "control 0.34-0.68): they are 0.60x the norm of its emulations, and its "
        "emulations with the property 1.5x those without, 15x in the last fifth "
        "of the rounds (watermarked renderings of its records, never trained on, "
        "against the records themselves, trained on every round)"
    )
    # a reproduced row needs no diagnosis; a record without them adds nothing
    assert (
        assess(
            _claim("000 Fig. 7.8"),
            _averaging(0.95, 0.95, K3=windows, diagnostics=diagnostics),
        ).reason
        == "property trials score above control trials at K = 3 and 5"
    )
    assert assess(_claim("000 Fig. 7.8"), _averaging(0.8, 0.7)).reason == (
        "property and control trials overlap"
    )
    # a K without its summary, and figures missing from every run: "n/a"
    record = _averaging(0.8, 0.7, K3=windows, diagnostics=diagnostics)
    del record["property-model-averaging"]["summary"]["K5"]
    for phases in diagnostics.values():
        phases["2"].update(label_norm_ratio=None)
    diagnostics["K3-control-0"]["2"]["observed_median"] = None
    diagnostics["K3-control-1"]["2"]["observed_median"] = None
    with pytest.raises(KeyError):  # the rule itself reads both Ks
        assess(_claim("000 Fig. 7.8"), record)
    summary = record["property-model-averaging"]["summary"]
    text = seed_claims._averaging_diagnosis(summary)
    assert "(trial AUC K=3 0.77-0.84);" in text
    assert "the classifier gives K=3 1.00 / 0.94;" in text
    assert "control n/a)" in text
    assert "with the property n/ax those without, 15x" in text
    # diagnostics of one arm only: not compared
    one_arm = {k: v for k, v in diagnostics.items() if "control" not in k}
    reason = assess(
        _claim("000 Fig. 7.8"), _averaging(0.8, 0.7, diagnostics=one_arm)
    ).reason
    assert reason == "property and control trials overlap"


def test_fig_7_8_reason_adds_the_held_out_variant_where_it_was_run():
    held_out = {
        "summary": {
            "trials": 3,
            "K3": {"whole_dataset_auc": 0.889},
            "diagnostics": {
                "K3-property-0": _averaging_phase(0.6, 0.99, 0.99),
                "K3-control-0": _averaging_phase(0.4, 0.99, 0.95),
                "K3-control-1": _averaging_phase(0.3, 0.99, 1.03),
            },
        }
    }
    held_out["summary"]["diagnostics"]["K3-control-1"]["2"].update(
        norm_ratio=0.1, norm_ratio_last_fifth=0.0049
    )
    record = {**_averaging(0.8, 0.7), seed_claims.MA_HELD_OUT: held_out}
    finding = assess(_claim("000 Fig. 7.8"), record)
    assert finding.verdict == "not reproduced"  # the variant does not judge
    assert "trial AUC K=3 0.89; the emulations" in finding.reason  # no labels
    # the main record's runs of the same trials (labels) are compared
    held_out["runs"] = [
        {"label": label} for label in ("K3-property-0", "K3-control-0", "K3-control-1")
    ]
    record["property-model-averaging"]["runs"] = [
        {"label": "K3-property-0", "dataset_score": 0.6, "test_accuracy": 0.8},
        {"label": "K3-property-1", "dataset_score": 0.1, "test_accuracy": 0.8},
        {"label": "K3-control-0", "dataset_score": 0.6, "test_accuracy": 0.8},
        {"label": "K3-control-1", "dataset_score": 0.7, "test_accuracy": 0.8},
        {"label": "K3-control-2", "dataset_score": 0.0, "test_accuracy": 0.8},
    ]  # property-1 and control-2 are not in the variant: left out
    finding = assess(_claim("000 Fig. 7.8"), record)
    assert finding.reason == (
        "property and control trials overlap; with held-out auxiliary records "
        "(training-pool records no client holds, 3 trials per arm): trial AUC "
        "K=3 0.89 (the main record's runs of the same trials: 0.25); the emulations with the property are 0.99x the norm of those "
        "without (9.90x in the last fifth), the observed aggregates 0.60x the "
        "norm of the emulations (0.020x in the last fifth)"
    )
    # a K5 in the variant is read too, in order; missing figures are n/a
    held_out["summary"]["K5"] = {"whole_dataset_auc": 0.5}
    for run in held_out["summary"]["diagnostics"].values():
        run["2"]["label_norm_ratio"] = None
    text = seed_claims._emulation_variants(record)
    assert (
        "trial AUC K=3 0.89 (the main record's runs of the same trials: 0.25), K=5 0.50;"
        in text
    )  # no K = 5 runs of the variant's trials in the main record
    assert "the property are n/ax the norm" in text
    # pairs ordered right count 1, ties 1/2, wrong 0
    assert seed_claims._trial_auc([0.9, 0.5], [0.1, 0.5, 0.7]) == pytest.approx(
        (3 + 1 + 0.5 + 0) / 6  # 0.9 above all three; 0.5 above 0.1, ties 0.5
    )
    # only one arm of the variant's trials in the main record: no comparison
    held_out["runs"] = [{"label": "K3-property-0"}]
    assert "the same trials" not in seed_claims._emulation_variants(record)
    # a variant record without diagnostics gives its AUCs alone
    del held_out["summary"]["diagnostics"]
    assert seed_claims._emulation_variants(record).endswith(
        "K=5 0.50; the emulations with the property are n/ax the norm "
        "of those without (n/ax in the last fifth), the observed aggregates "
        "n/ax the norm of the emulations (n/ax in the last fifth)"
    )
    # a reproduced row says nothing of it
    record = {**_averaging(0.95, 0.95), seed_claims.MA_HELD_OUT: held_out}
    assert assess(_claim("000 Fig. 7.8"), record).reason == (
        "property trials score above control trials at K = 3 and 5"
    )


def test_fig_7_8_reason_adds_each_variant_in_order_with_its_settings():
    def variant(auc: float, overrides: list[str]) -> dict[str, Any]:
        return {
            "overrides": overrides,
            "summary": {"trials": 3, "K3": {"whole_dataset_auc": auc}},
        }

    own_property = variant(
        0.5,
        [
            "data.property_adversary_fraction=0.2",
            "data.property_adversary_fraction=0.5",  # the last one counts
            "adversary.property.aux_records=own-property",
        ],
    )
    record = {
        **_averaging(0.8, 0.7),
        seed_claims.MA_OWN_PROPERTY: own_property,
        seed_claims.MA_HELD_OUT: variant(0.75, []),
    }
    reason = assess(_claim("000 Fig. 7.8"), record).reason
    held = reason.index("; with held-out auxiliary records (training-pool")
    own = reason.index(
        "; with its own records with and without the property as auxiliary "
        "records (a fraction 0.5 of its records carry it, the federation trains "
        "on both, 3 trials per arm): trial AUC K=3 0.50; the emulations"
    )
    assert held < own  # held-out first, then own-property, joined as they are
    assert "in the last fifth); with its own records with" in reason
    assert seed_claims._override({"overrides": ["k=1", "k=2=3", "k=4"]}, "k") == "4"
    assert seed_claims._override({"overrides": ["kk=1", "k=2=3"]}, "k") == "2=3"
    own_property["overrides"] = []
    assert "(a fraction ? of its records" in seed_claims._emulation_variants(record)


def _rounds(absent: float | None) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "window": {
            "auc": 0.95,
            "median_score_inside": 0.8,
            "median_score_outside": 0.3,
        },
    }
    if absent is not None:
        summary["absent"] = {"median_score": absent, "max_score": absent}
    return {
        "property-rounds": {
            "summary": summary,
            "scale": {},
            "runs": [{"label": "window", "test_accuracy": 0.8}],
        }
    }


@pytest.mark.parametrize(
    ("absent", "verdict"),
    [(0.1, "reproduced"), (0.5, "partly"), (None, "partly")],
)
def test_fig_7_5_needs_a_low_scoring_absent_property(absent, verdict):
    assert assess(_claim("000 Fig. 7.5"), _rounds(absent)).verdict == verdict


def test_fig_4_5a_reason_reports_the_skew_measurement():
    true = [1000.0 - i for i in range(50)]
    fig = {
        "users": 10,
        "sketch_size": 4896,
        "true": true,
        "estimated": [t * 1.85 for t in true],
        "zipf_exponent_sensitivity": {
            "users": 100,
            "1.0": {
                "median_relative_overestimate": 0.85,
                "top50_share_of_coviews": 0.18,
            },
            "2.0": {
                "median_relative_overestimate": 0.02,
                "top50_share_of_coviews": 0.80,
            },
        },
    }
    finding = assess(
        _claim("000 Fig. 4.5(a)"), {"sketches": {"recommender": {"fig_4_5a": fig}}}
    )
    assert finding.verdict == "not reproduced"
    assert "2.0: +2% (top 50 hold 80% of co-views)" in finding.reason


def _monte_carlo(hog: tuple[float, float], pca: tuple[float, float]) -> dict[str, Any]:
    rows = [
        {
            "model": model,
            "distance": distance,
            "heuristic": "median",
            "set_accuracy": acc,
        }
        for distance, pair in (("hog", hog), ("pca", pca))
        for model, acc in zip(("vae", "gan"), pair, strict=True)
    ]
    mc = {"trials": 50, "rows": rows, "samples": 10, "set_size": 30}
    settings = {"target_epochs": 400, "vae_epochs": 300}
    return {seed_claims.MI_THESIS: {"monte_carlo": mc, "settings": settings}}


@pytest.mark.parametrize(
    ("hog", "pca", "verdict"),
    [
        ((0.84, 0.64), (1.00, 0.75), "reproduced"),  # the seed's own numbers
        ((0.84, 0.64), (0.80, 0.88), "partly"),  # one tie (2 SE = 0.15)
        ((0.80, 0.72), (0.80, 0.88), "not reproduced"),  # the CPU-scale record
        ((0.84, 0.64), (0.60, 0.95), "not reproduced"),  # reversed
    ],
)
def test_monte_carlo_rule_compares_per_distance_with_standard_errors(hog, pca, verdict):
    finding = assess(_claim("004 Tables 4.5-4.6"), _monte_carlo(hog, pca))
    assert finding.verdict == verdict


def test_monte_carlo_rule_cites_the_cpu_scale_beside_the_seed_scale():
    records = _monte_carlo((0.84, 0.64), (0.80, 0.88))
    cpu = _monte_carlo((0.50, 0.50), (0.50, 0.90))[seed_claims.MI_THESIS]
    records[seed_claims.MI_CPU] = {
        **cpu,
        "settings": {"pool_size": 1000, "member_fraction": 0.1, "target_epochs": 1000},
    }
    finding = assess(_claim("004 Tables 4.5-4.6"), records)
    # the verdict is the seed scale's alone (one tie), the CPU scale is cited
    assert finding.verdict == "partly"
    assert "100 members x 1000 epochs, 50 trials of sets of 30: HOG VAE 0.50" in (
        finding.fedleak
    )
    assert "PCA VAE 0.50 vs GAN 0.90 (reversed" in finding.fedleak
    assert "GAN 400 / VAE 300 epochs" in finding.scale


def _mi_record(
    white: list[float],
    black: tuple[float, float],
    *,
    channels: tuple[int, int] = (32, 64),
    members: int = 600,
    epochs: int = 400,
) -> dict[str, Any]:
    """A mi-generative record: white-box finals with a rising curve, black-box."""
    half = epochs // 2
    return {
        "scale": "thesis",
        "device": "cuda",
        "settings": {
            "pool_size": members * 10,
            "member_fraction": 0.1,
            "target_epochs": epochs,
            "gan_generator_channels": channels[0],
            "gan_discriminator_channels": channels[1],
        },
        "white_box": [
            {
                "final_accuracy": w,
                "baseline": 0.1,
                "curve": [
                    {"epoch": half, "accuracy": w / 2},
                    {"epoch": epochs, "accuracy": w},
                ],
            }
            for w in white
        ],
        "black_box": [
            {"target": t, "final_accuracy": b, "baseline": 0.1}
            for t, b in zip(("dcgan", "vae"), black, strict=True)
        ],
    }


@pytest.mark.parametrize(
    ("thesis", "wide", "verdict", "reason"),
    [
        ([0.9, 0.85], None, "reproduced", "on the seed's schedule"),
        ([0.6, 0.62], None, "partly", "(0.60 / 0.62 at epoch 400 from 0.30 / 0.31"),
        ([0.6, 0.62], [0.85], "reproduced", "usual widths; the narrower 32/64"),
        ([0.6, 0.62], [0.79], "partly", "below the seed's 0.8-0.98"),
        ([0.79, 0.9], None, "partly", "below the seed's"),  # each target counts
    ],
)
def test_fig_6_7_reads_the_seed_scale_and_the_dcgan_widths(
    thesis, wide, verdict, reason
):
    records: dict[str, Any] = {seed_claims.MI_THESIS: _mi_record(thesis, (0.2, 0.2))}
    if wide is not None:
        records[seed_claims.MI_THESIS_WIDE] = _mi_record(
            wide, (0.2, 0.2), channels=(64, 128)
        )
    finding = assess(_claim("000 Fig. 6.7"), records)
    assert finding.verdict == verdict
    assert reason in finding.reason
    assert "600 members of a pool of 6000 (thesis, cuda)" in finding.scale
    if wide is not None:
        assert "(64/128 channels)" in finding.fedleak


@pytest.mark.parametrize(
    ("black", "verdict"),
    [
        ((0.40, 0.38), "reproduced"),
        ((0.20, 0.14), "partly"),
        ((0.20, 0.13), "not reproduced"),  # 0.13 is not above 1.3x chance
        ((0.12, 0.12), "not reproduced"),
    ],
)
def test_fig_6_8_verdict_is_the_seed_scales_and_cites_the_others(black, verdict):
    records: dict[str, Any] = {
        seed_claims.MI_THESIS: _mi_record([0.6, 0.6], black),
        seed_claims.MI_THESIS_WIDE: _mi_record([0.85], (0.5, 0.5), channels=(64, 128)),
        seed_claims.MI_CPU: _mi_record([0.98], (0.5, 0.5), members=100, epochs=1000),
    }
    finding = assess(_claim("000 Fig. 6.8"), records)
    # the wider and the CPU-scale records, though better, do not set the verdict
    assert finding.verdict == verdict
    assert "64/128-channel DCGAN target: dcgan 0.50, vae 0.50 (white-box 0.85)" in (
        finding.fedleak
    )
    assert "100 members x 1000 epochs: dcgan 0.50" in finding.fedleak
    if verdict != "reproduced":
        assert "the same targets reaches 0.60 / 0.60" in finding.reason


def test_ch_6_1_4_judges_the_seed_scale_and_says_what_holds_at_cpu_scale():
    def with_aux(
        record: dict[str, Any], test_only: float, train: float, both: float
    ) -> dict[str, Any]:
        def row(setting: str, scenario: str, acc: float, base: float) -> dict:
            return {
                "setting": setting,
                "scenario": scenario,
                "delay_steps": 1000,
                "final_accuracy": acc,
                "baseline": base,
            }

        record["auxiliary"] = [
            row("discriminative", "test", test_only, 0.12),
            row("generative", "train", train, 0.08),
            row("generative", "train+test", both, 0.1),
        ]
        return record

    thesis = with_aux(_mi_record([0.6], (0.13, 0.13)), 0.15, 0.14, 0.2)
    records: dict[str, Any] = {seed_claims.MI_THESIS: thesis}
    finding = assess(_claim("000 Figs. 6.9-6.11"), records)
    assert finding.verdict == "reproduced"  # 0.15 <= 1.3 x 0.12; 0.14, 0.2 > 0.13
    thesis = with_aux(_mi_record([0.6], (0.13, 0.13)), 0.16, 0.10, 0.12)
    records = {
        seed_claims.MI_THESIS: thesis,
        seed_claims.MI_CPU: with_aux(
            _mi_record([0.98], (0.21, 0.14), members=100, epochs=1000), 0.31, 0.1, 0.25
        ),
    }
    finding = assess(_claim("000 Figs. 6.9-6.11"), records)
    assert finding.verdict == "not reproduced"
    assert finding.reason.endswith(
        "at 100 members x 1000 epochs holds: train+test knowledge beats the plain "
        "black-box"
    )
    assert "100 members x 1000 epochs: disc. test-only 0.31" in finding.fedleak


def test_fig_5_5_reason_cites_the_size_check_when_recorded():
    def run(all_error: float) -> dict[str, Any]:
        return {
            "all": {"mean": all_error},
            "any": {"mean": 0.3},
            "avg_items_per_sample": 10.0,
        }

    fig = {
        "records": 20000,
        "avg_items_per_record": 11.0,
        "dpgm": {"epochs": 3, "runs": {"k=1,eps=1": run(0.04)}},
        "mwem": {"runs": {"1": {"all": {"mean": 0.06}}}},
    }
    records: dict[str, Any] = {"dpgm": {"fig_5_5": fig}}
    claim = _claim("000 Fig. 5.5")
    assert assess(claim, records).verdict == "partly"
    assert "size" not in assess(claim, records).reason
    records["dpgm-size"] = {
        "fig_5_5_size": {"20000": {"dpgm_all": 0.0246}, "80000": {"dpgm_all": 0.0076}}
    }
    reason = assess(claim, records).reason
    assert "0.0246 (20,000 records) -> 0.0076 (80,000 records)" in reason


def test_bench_report_command_writes_the_table(tmp_path):
    from typer.testing import CliRunner

    from fedleak.cli import app

    out = tmp_path / "R.md"
    result = CliRunner().invoke(
        app, ["bench", "report", "--records", str(BENCHMARKS), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == (
        BENCHMARKS / "REPRODUCTION.md"
    ).read_text(encoding="utf-8")
    assert "written:" in result.output


def _table_4_1_rows(n_users: tuple[int, ...]) -> list[dict[str, Any]]:
    from fedleak.bench.table_4_1 import THESIS_TABLE_4_1

    seed = {row.n_users: row for row in THESIS_TABLE_4_1}
    return [
        {
            "n_users": n,
            "sketch_size": seed[n].sketch_size,
            "from_error_sketch_size": seed[n].from_error_sketch_size,
            "rounding_differs": seed[n].from_error_sketch_size != seed[n].sketch_size,
            "thesis_user_to_tally_bytes": seed[n].user_to_tally_bytes,
            "thesis_tally_to_user_bytes": seed[n].tally_to_user_bytes,
        }
        for n in n_users
    ]


def test_table_4_1_rule_compares_every_row_with_the_seed():
    claim = _claim("000 Table 4.1")
    every = tuple(range(100, 1001, 100))
    found = assess(claim, {"secagg": {"table_4_1": _table_4_1_rows(every)}})
    assert found.verdict == "reproduced"
    assert "19,584" in found.fedleak and "32,000" in found.fedleak
    assert "N = 500: 990 vs 972" in found.reason
    some = assess(claim, {"secagg": {"table_4_1": _table_4_1_rows((100, 200))}})
    assert (some.verdict, some.reason) == ("partly", "2 of 10 rows measured, all equal")
    rows = _table_4_1_rows(every)
    rows[2]["thesis_user_to_tally_bytes"] += 4  # one word more at N = 300
    wrong = assess(claim, {"secagg": {"table_4_1": rows}})
    assert wrong.verdict == "not reproduced"
    assert wrong.reason.startswith("bytes differ from the seed's at N = [300]")


def _samples(vae: float, rbm: float, se: float = 0.002) -> dict[str, Any]:
    def model(mmd2: float) -> dict[str, Any]:
        return {"epsilon": 2.7, "sample_mmd2": {"mmd2": mmd2, "se": se}}

    return {
        "epochs": 20,
        "records": 6000,
        "quality": {"real_vs_real": {"mmd2": 0.0003, "se": 0.0005}},
        "models": {"vae_mixture": model(vae), "rbm_mixture": model(rbm)},
    }


@pytest.mark.parametrize(
    ("vae", "rbm", "verdict"),
    [
        (0.030, 0.050, "reproduced"),  # VAE closer to the real records
        (0.050, 0.045, "partly"),  # within 2 SE = 0.0057
        (0.050, 0.030, "not reproduced"),  # RBM closer
    ],
)
def test_fig_5_4_rule_orders_the_mixtures_by_sample_mmd(vae, rbm, verdict):
    old = {"epochs": 3, "records": 6000, "models": {"vae_mixture": {}}}
    records: dict[str, Any] = {"dpgm": {"fig_5_4": old}}
    claim = _claim("000 Fig. 5.4")
    assert assess(claim, records).verdict == "partly"  # no quality figure
    records["dpgm-samples"] = {"fig_5_4": _samples(vae, rbm)}
    finding = assess(claim, records)
    assert finding.verdict == verdict
    assert finding.scale.startswith("20 epochs")  # the sample-quality record
    assert "0.0003" in finding.utility
    if verdict == "not reproduced":
        assert "clusters" not in finding.reason
        weights = [0.3, 0.005, 0.695]
        records["dpgm-samples"]["fig_5_4"]["models"]["vae_mixture"]["weights"] = weights
        assert "1 of 3 private k-means clusters" in assess(claim, records).reason
        models = records["dpgm-samples"]["fig_5_4"]["models"]
        models["vae_mixture_nonprivate"] = {"sample_mmd2": {"mmd2": 0.021, "se": 0}}
        models["rbm_mixture_nonprivate"] = {"sample_mmd2": {"mmd2": 0.011, "se": 0}}
        reason = assess(claim, records).reason
        assert (
            "without DP noise (sigma_G = sigma_K = 0.001) VAE 0.0210 vs RBM" in reason
        )


def test_fig_5_4_rule_judges_the_largest_sample_record():
    claim = _claim("000 Fig. 5.4")
    small = _samples(0.035, 0.013)  # 6,000 records: the RBM closer
    large = {**_samples(0.010, 0.020), "records": 58000}
    records: dict[str, Any] = {
        "dpgm": {"fig_5_4": {"epochs": 3, "records": 6000, "models": {}}},
        "dpgm-samples": {"fig_5_4": small},
        "dpgm-samples-58000": {"fig_5_4": large},
        "dpgm-size": {"fig_5_5_size": {}},  # not a sample record
    }
    finding = assess(claim, records)
    assert finding.verdict == "reproduced"
    assert finding.reason.startswith(
        "VAE mixture's samples closer to real records by 0.0100 (> 2 SE = 0.0057)"
    )
    assert finding.scale == "20 epochs, 58,000 records"
    assert finding.reason.endswith(
        "; at 6,000 records VAE mixture 0.0350 vs RBM mixture 0.0130"
    )
    # the order of the names does not matter, the sizes do
    records["dpgm-samples-58000"], records["dpgm-samples"] = (
        records["dpgm-samples"],
        records["dpgm-samples-58000"],
    )
    assert assess(claim, records).scale == "20 epochs, 58,000 records"
    # a smaller record without its quality figures is not cited
    del small["models"]["rbm_mixture"]
    assert assess(claim, records).reason == (
        "VAE mixture's samples closer to real records by 0.0100 (> 2 SE = 0.0057)"
    )
    # within 2 SE, the reason still gives the direction
    close = {**_samples(0.0052, 0.0098, se=0.0017), "records": 58000}
    records["dpgm-samples"] = {"fig_5_4": close}
    finding = assess(claim, records)
    assert finding.verdict == "partly"
    assert finding.reason.startswith(
        "VAE and RBM mixtures within 2 SE = 0.0048 of each other (VAE mixture "
        "lower by 0.0046: the seed's order)"
    )
    records["dpgm-samples"] = {"fig_5_4": {**_samples(0.0098, 0.0052, se=0.0017)}}
    records["dpgm-samples"]["fig_5_4"]["records"] = 58000
    assert "(VAE mixture higher by 0.0046: the reverse of the seed's)" in (
        assess(claim, records).reason
    )


def _fig_5_4_record(vae: float, rbm: float, **models: Any) -> dict[str, Any]:
    fig = _samples(vae, rbm, se=0.00123)
    fig["models"].update(models)
    fig["quality"]["real_vs_real"]["mmd2"] = 0.00037
    return {"dpgm": {"fig_5_4": {}}, "dpgm-samples": {"fig_5_4": fig}}


def _mmd(value: float, se: float = 0.00051) -> dict[str, Any]:
    return {"sample_mmd2": {"mmd2": value, "se": se}}


def test_fig_5_4_findings_word_for_word():
    claim = _claim("000 Fig. 5.4")
    two_se = 2 * math.hypot(0.00123, 0.00123)
    # RBM closer by 2.5 SE; DP-free mixtures in the seed's order by 2.5 SE
    gap = 1.25 * two_se
    records = _fig_5_4_record(
        0.03456,
        0.03456 - gap,
        single_vae=_mmd(0.05678),
        vae_mixture_nonprivate=_mmd(0.00111),
        rbm_mixture_nonprivate=_mmd(0.00111 + 2.5 * math.hypot(0.00051, 0.00051)),
    )
    records["dpgm-samples"]["fig_5_4"]["models"]["vae_mixture"]["weights"] = [
        0.5,
        0.01,
        0.0099,
        0.4801,
    ]
    finding = assess(claim, records)
    assert finding.verdict == "not reproduced"
    assert finding.fedleak == (
        "sample MMD^2 to held-out records: VAE mixture 0.0346, RBM mixture "
        f"{0.03456 - gap:.4f}, single VAE 0.0568"
    )
    assert finding.utility == "real vs real MMD^2 0.0004 (the floor)"
    assert finding.scale == "20 epochs, 6,000 records"
    quiet_rbm = 0.00111 + 2.5 * math.hypot(0.00051, 0.00051)
    assert finding.reason == (
        f"RBM mixture's samples closer to real records by {gap:.4f} (> 2 SE = "
        f"{two_se:.4f}); 1 of 4 private k-means clusters hold < 1% of the "
        "records (both mixtures share them); nearly without DP noise (sigma_G "
        f"= sigma_K = 0.001) VAE 0.0011 vs RBM {quiet_rbm:.4f}, the seed's "
        "order: the DP noise reverses it"
    )
    models = records["dpgm-samples"]["fig_5_4"]["models"]
    # the DP-free VAE's error counts as much as the RBM's
    models["vae_mixture_nonprivate"] = _mmd(0.00111, 0.002)
    assert "reverses" not in assess(claim, records).reason
    models["vae_mixture_nonprivate"] = _mmd(0.00111)
    # one DP-free mixture alone is not compared
    del models["vae_mixture_nonprivate"]
    alone = assess(claim, records)
    assert alone.reason.endswith("(both mixtures share them)")
    models["vae_mixture_nonprivate"] = _mmd(0.00111)
    # DP-free mixtures within 1.5 SE: no claim that the noise reverses it
    models["rbm_mixture_nonprivate"] = _mmd(
        0.00111 + 1.5 * math.hypot(0.00051, 0.00051)
    )
    assert "reverses" not in assess(claim, records).reason
    # and none where the private order is already the seed's
    models["rbm_mixture_nonprivate"] = _mmd(0.0099)
    models["rbm_mixture"] = _mmd(0.03456 + gap, 0.00123)
    models["vae_mixture"]["weights"] = [0.5, 0.5]
    better = assess(claim, records)
    assert better.verdict == "reproduced"
    assert better.reason == (
        f"VAE mixture's samples closer to real records by {gap:.4f} (> 2 SE = "
        f"{two_se:.4f}); nearly without DP noise (sigma_G = sigma_K = 0.001) VAE "
        "0.0011 vs RBM 0.0099"
    )
    # 1.5 SE apart either way: partly
    models["rbm_mixture"] = _mmd(0.03456 - 0.75 * two_se, 0.00123)
    assert assess(claim, records).verdict == "partly"
    models["rbm_mixture"] = _mmd(0.03456 + 0.75 * two_se, 0.00123)
    assert assess(claim, records).verdict == "partly"
    # no quality figure: the models are named
    del models["rbm_mixture"]
    bare = assess(claim, records)
    assert bare == type(bare)(
        "samples of rbm_mixture_nonprivate, single_vae, vae_mixture, "
        "vae_mixture_nonprivate",
        "no quality metric recorded",
        "20 epochs, 6,000 records",
        "partly",
        "samples drawn; the record has no quality figure to order VAE vs RBM",
    )


def test_fig_5_4_cites_every_smaller_record():
    claim = _claim("000 Fig. 5.4")
    records = _fig_5_4_record(0.0052, 0.0098)
    records["dpgm-samples"]["fig_5_4"]["records"] = 58000
    for n in (3000, 6000):
        small = _samples(0.03456, 0.01271)
        small["records"] = n
        records[f"dpgm-samples-{n}"] = {"fig_5_4": small}
    records["dpgm-other"] = {"fig_5_4": {**_samples(0.1, 0.2), "records": 99000}}
    reason = assess(claim, records).reason
    assert reason.endswith(
        "; at 3,000 records VAE mixture 0.0346 vs RBM mixture 0.0127"
        "; at 6,000 records VAE mixture 0.0346 vs RBM mixture 0.0127"
    )


def _membership(precisions: list[float], accuracy: float, rounds: list[int]) -> Any:
    batches = [100, 200, 500, 1000, 2000]
    rows = [
        {
            "dataset": "checkins",
            "batch_size": b,
            "precision": p,
            "recall": 1.0,
            "model_accuracy": accuracy,
            "num_rounds": r,
        }
        for b, p, r in zip(batches, precisions, rounds, strict=True)
    ]
    seed = {
        "foursquare": [
            [b, p] for b, p in zip(batches, [0.99, 0.98, 0.91, 0.76, 0.62], strict=True)
        ],
        "yelp-health": [],
    }
    return {
        "membership": {
            "rows": rows,
            "thesis_table_7_2": seed,
            "precision_falls_with_batch": {"checkins": True},
            "setups": {"checkins": {"epochs": 3}},
        }
    }


@pytest.mark.parametrize(
    ("precisions", "accuracy", "verdict"),
    [
        ([0.99, 0.97, 0.90, 0.80, 0.70], 0.88, "reproduced"),
        ([0.99, 0.97, 0.90, 0.80, 0.70], 0.51, "partly"),  # model at chance
        ([0.99, 0.97, 0.90, 0.80, 0.45], 0.88, "partly"),  # a gap of 0.17
    ],
)
def test_table_7_2_rule_needs_the_seed_numbers_and_a_trained_model(
    precisions, accuracy, verdict
):
    rounds = [300] * 5
    finding = assess(_claim("000 Table 7.2"), _membership(precisions, accuracy, rounds))
    assert finding.verdict == verdict
    assert finding.scale.startswith("300/3000 it. = 0.10 at every batch size")


def test_table_7_2_scale_names_epochs_when_the_runs_differ_in_length():
    record = _membership([0.99] * 5, 0.9, [75, 39, 15, 9, 6])
    assert assess(_claim("000 Table 7.2"), record).scale.startswith(
        "6-75/3000 it. (3 epochs)"
    )


def _seed_scale(precisions: dict[tuple[str, int], float]) -> dict[str, Any]:
    """3,000-iteration rows for ``(dataset, batch) -> precision``, split as stored."""

    def row(dataset: str, batch: int, precision: float) -> dict[str, Any]:
        return {
            "dataset": dataset,
            "batch_size": batch,
            "precision": precision,
            "recall": 1.0,
            "model_accuracy": 0.9,
            "num_rounds": 3000,
            "accuracy_curve": {"plateau": True, "below_best": 0.0},
        }

    rows = [row(d, b, p) for (d, b), p in precisions.items()]
    return {
        "membership-3000": {"rows": [r for r in rows if r["dataset"] == "checkins"]},
        "membership-3000-fortunes": {
            "rows": [r for r in rows if r["dataset"] == "fortunes"]
        },
    }


def test_table_7_2_is_judged_on_the_seed_scale_runs_once_they_cover_it():
    short = _membership([0.99, 0.97, 0.90, 0.80, 0.70], 0.88, [300] * 5)
    short["membership"]["thesis_table_7_2"]["yelp-health"] = [[32, 0.92], [64, 0.84]]
    short["membership"]["rows"] += [
        {**short["membership"]["rows"][0], "dataset": "fortunes", "batch_size": b}
        for b in (32, 64)
    ]
    # seed-scale runs of every batch size but one: the short runs are judged
    partial = _seed_scale({("checkins", 100): 0.5, ("fortunes", 32): 0.9})
    finding = assess(_claim("000 Table 7.2"), {**short, **partial})
    assert finding.scale.startswith("300/3000 it.")
    assert finding.fedleak.startswith("checkins 0.990 / 0.970")
    # every batch size at 3,000 iterations: those are judged, in batch order
    precisions = {
        ("checkins", 2000): 0.61,
        ("checkins", 100): 0.95,
        ("checkins", 200): 0.93,
        ("checkins", 500): 0.85,
        ("checkins", 1000): 0.75,
        ("fortunes", 64): 0.82,
        ("fortunes", 32): 0.90,
    }
    full = {**short, **_seed_scale(precisions)}
    finding = assess(_claim("000 Table 7.2"), full)
    assert finding.scale.startswith("3000/3000 it. = 1.00 at every batch size")
    assert finding.fedleak == (
        "checkins 0.950 / 0.930 / 0.850 / 0.750 / 0.610; fortunes 0.900 / 0.820"
    )
    assert finding.verdict == "reproduced"
    assert "(plateau)" in finding.utility
    # rows rerun after the scale-fit fix stand in for the older ones here too
    fixed = {**full["membership-3000"]["rows"][3], "precision": 0.84}  # B=500
    refit = {**full, "membership-3000-refit-500": {"rows": [fixed]}}
    assert assess(_claim("000 Table 7.2"), refit).fedleak.startswith(
        "checkins 0.950 / 0.930 / 0.840 / 0.750"
    )
    # their fall is judged on them (up to 0.02 back up still falls) ...
    full["membership-3000"]["rows"][0]["precision"] = 0.97  # B=2000 above B=1000
    finding = assess(_claim("000 Table 7.2"), full)
    assert (finding.verdict, finding.reason) == (
        "not reproduced",
        "precision does not fall or recall < 1",
    )
    full["membership-3000"]["rows"][0]["precision"] = 0.77  # 0.02 above: a fall
    assert assess(_claim("000 Table 7.2"), full).verdict == "partly"  # gap 0.15
    # ... as is their recall
    full["membership-3000"]["rows"][0]["precision"] = 0.61
    full["membership-3000-fortunes"]["rows"][1]["recall"] = 0.99
    assert assess(_claim("000 Table 7.2"), full).verdict == "not reproduced"


@pytest.fixture
def quarter_se(monkeypatch):
    """Fix the SE of a difference at 0.125 (2 SE = 0.25, exact in binary)."""
    from fedleak.bench import seed_claims

    calls: list[tuple[float, float]] = []

    def se(_records, a, b):
        calls.append((a, b))
        return 0.125

    monkeypatch.setattr(seed_claims, "_difference_se", se)
    return calls


@pytest.mark.parametrize(
    ("aucs", "verdict", "reason"),
    [
        # a fall of exactly 2 SE is not beyond it, at the seed's 10% or below
        (
            [0.5, 0.5, 0.75, 0.75],
            "not reproduced",
            "flat: AUC 0.750 at 100% vs 0.500 at 0.01, within 2 SE = 0.250 "
            "(seed: 0.93 vs 0.84) (non-zero share of an update 34%)",
        ),
        (
            [0.5, 0.75, 0.75, 0.75],
            "not reproduced",
            "flat: AUC 0.750 at 100% vs 0.500 at 0.01, within 2 SE = 0.250 "
            "(seed: 0.93 vs 0.84) (non-zero share of an update 34%)",
        ),
        # nor is a rise of exactly 2 SE
        (
            [0.75, 0.5, 0.5, 0.5],
            "not reproduced",
            "flat: AUC 0.500 at 100% vs 0.750 at 0.01, within 2 SE = 0.250 "
            "(seed: 0.93 vs 0.84) (non-zero share of an update 34%)",
        ),
        (
            [0.875, 0.5, 0.5, 0.5],
            "not reproduced",
            "AUC rises by 0.375 (> 2 SE = 0.250) as less is shared",
        ),
        (
            [0.0, 0.5, 0.75, 0.8125],
            "reproduced",
            "AUC falls by 0.312 (> 2 SE = 0.250) from 100% to 0.1 shared "
            "(seed: 0.93 -> 0.84)",
        ),
        # a dip of 0.1 (< 2 SE) is noise; one of 0.3 (> 2 SE) breaks the fall
        (
            [0.0, 0.6, 0.5, 1.0],
            "reproduced",
            "AUC falls by 0.400 (> 2 SE = 0.250) from 100% to 0.1 shared "
            "(seed: 0.93 -> 0.84)",
        ),
        (
            [0.0, 0.6, 0.3, 1.0],
            "not reproduced",
            "flat: AUC 1.000 at 100% vs 0.000 at 0.01, within 2 SE = 0.250 "
            "(seed: 0.93 vs 0.84) (non-zero share of an update 34%)",
        ),
        (
            [0.25, 0.625, 0.625, 0.75],
            "partly",
            "AUC falls as less is shared, by 0.500 (> 2 SE = 0.250) at 0.01, but "
            "not within the seed's 10-100%: 0.625 at 0.1 vs 0.750 at 100% "
            "(non-zero share of an update 34%)",
        ),
    ],
)
def test_table_7_5_rule_reads_its_thresholds_exactly(quarter_se, aucs, verdict, reason):
    finding = assess(_claim("000 Table 7.5"), _share(aucs))
    assert (finding.verdict, finding.reason) == (verdict, reason)
    assert quarter_se == [(aucs[-1], aucs[0])]  # 100% against the smallest share
    assert finding.fedleak == (
        f"property AUC {' / '.join(f'{a:.3f}' for a in aucs)} at share "
        "0.010 / 0.100 / 0.500 / 1.000"
    )
    assert finding.utility == "model AUC 0.95 (plateau not recorded)"
    assert finding.scale == (
        "100 training rounds, 240 property rounds, 10 records; bag of words"
    )


def test_defenses_scale_names_the_longer_dp_runs():
    rows = [
        {"table": "dropout", "rounds": 552, "property_rounds": 480},
        {"table": "participant_dp", "rounds": 2208, "property_rounds": 480},
        {"table": "record_dp", "rounds": 1104, "property_rounds": 960},
        {"table": "record_dp", "rounds": 2208, "property_rounds": 1920},
    ]
    setup = {"property_rounds": 480, "num_train": 1375}
    records = {"defenses": {"rows": rows, "setup": setup, "property_features": "f"}}
    assert seed_claims._defenses_scale(records) == (
        "552 training rounds (up to 2208 for the DP rows), 480 property rounds "
        "(up to 1920 for the record-DP rows), 1375 records; f"
    )
    # rows of records before the field, or all at the base: nothing added
    for row in rows:
        row.pop("property_rounds")
    rows[0]["property_rounds"] = 480
    assert seed_claims._defenses_scale(records) == (
        "552 training rounds (up to 2208 for the DP rows), 480 property rounds, "
        "1375 records; f"
    )


def test_table_7_5_rule_without_a_measured_density_or_bags(quarter_se):
    record = _share([0.5, 0.5, 0.75, 0.75])
    del record["defenses"]["setup"]["update_density"]
    finding = assess(_claim("000 Table 7.5"), record)
    assert finding.reason.endswith("(seed: 0.93 vs 0.84)")
    # words are reported only when both the seed's share and 100% have a bag
    partial = _share([0.5, 0.5, 0.75, 0.75], bags=(10, 20, 30, None))
    assert "words" not in assess(_claim("000 Table 7.5"), partial).reason
    partial = _share([0.5, 0.5, 0.75, 0.75], bags=(10, None, 30, 40))
    assert "words" not in assess(_claim("000 Table 7.5"), partial).reason
    both = _share([0.5, 0.5, 0.75, 0.75], bags=(10, 20, 30, 40))
    assert assess(_claim("000 Table 7.5"), both).reason.endswith(
        "; at 0.1 the update still shows 20 of 40 words of a batch"
    )


def test_table_7_5_rule_without_the_seed_share_reads_the_largest(quarter_se):
    record = _share([0.25, 0.5, 0.75], shares=(0.003, 0.01, 0.03))
    finding = assess(_claim("000 Table 7.5"), record)
    assert finding.verdict == "reproduced"
    assert "from 100% to 0.003 shared" in finding.reason


def _two_columns(**change: Any) -> Any:
    """A Table 7.2 record with both columns; ``change`` edits it."""
    rows = [
        ("checkins", 100, 0.99, 75, 0.9),
        ("checkins", 200, 0.95, 39, 0.9),
        ("checkins", 1000, 0.70, 9, 0.9),  # no B = 500 row: skipped
        ("fortunes", 32, 0.90, 126, 0.7),
        ("fortunes", 64, 0.80, 63, 0.7),
    ]
    record = {
        "rows": [
            {
                "dataset": d,
                "batch_size": b,
                "precision": p,
                "recall": 1.0,
                "num_rounds": n,
                "model_accuracy": a,
            }
            for d, b, p, n, a in rows
        ],
        "thesis_table_7_2": {
            "foursquare": [[100, 0.99], [200, 0.98], [500, 0.91], [1000, 0.76]],
            "yelp-health": [[32, 0.92], [64, 0.84]],
        },
        "precision_falls_with_batch": {"checkins": True, "fortunes": True},
        "setups": {"checkins": {"epochs": 3}, "fortunes": {"epochs": 3}},
    }
    record.update(change)
    return {"membership": record}


def test_table_7_2_rule_reads_both_columns_exactly():
    finding = assess(_claim("000 Table 7.2"), _two_columns())
    assert finding.fedleak == "checkins 0.990 / 0.950 / 0.700; fortunes 0.900 / 0.800"
    assert finding.utility == "model acc 0.70-0.90 (plateau not recorded)"
    assert finding.scale == "9-126/3000 it. (3 epochs)"
    assert finding.verdict == "reproduced"
    assert finding.reason == "precision falls with the batch, recall 1, |gap| <= 0.06"


def test_table_7_2_rule_refuses_a_column_that_does_not_fall_or_a_missed_member():
    falls = {"checkins": True, "fortunes": False}
    finding = assess(
        _claim("000 Table 7.2"), _two_columns(precision_falls_with_batch=falls)
    )
    assert (finding.verdict, finding.reason) == (
        "not reproduced",
        "precision does not fall or recall < 1",
    )
    record = _two_columns()
    record["membership"]["rows"][0]["recall"] = 0.999
    assert assess(_claim("000 Table 7.2"), record).verdict == "not reproduced"
    record = _two_columns()
    del record["membership"]["precision_falls_with_batch"]
    assert assess(_claim("000 Table 7.2"), record).verdict == "reproduced"


def test_table_7_2_rule_gap_of_exactly_0_1_is_within_and_none_is_partly():
    exact = _two_columns(
        rows=[
            {
                "dataset": "checkins",
                "batch_size": 100,
                "precision": 0.1,
                "recall": 1.0,
                "num_rounds": 15,
                "model_accuracy": 0.9,
            }
        ],
        thesis_table_7_2={"foursquare": [[100, 0.0]], "yelp-health": []},
    )
    del exact["membership"]["setups"]
    finding = assess(_claim("000 Table 7.2"), exact)
    assert finding.verdict == "reproduced"
    assert finding.scale == "15/3000 it. = 0.01 at every batch size"
    exact["membership"]["thesis_table_7_2"]["foursquare"] = [[200, 0.0]]
    unmatched = assess(_claim("000 Table 7.2"), exact)
    assert (unmatched.verdict, unmatched.reason) == (
        "partly",
        "shape holds; no batch size in common with the seed",
    )


def test_table_7_2_scale_joins_the_epochs_of_both_columns():
    record = _two_columns(setups={"checkins": {"epochs": 3}, "fortunes": {"epochs": 5}})
    assert assess(_claim("000 Table 7.2"), record).scale in (
        "9-126/3000 it. (3/5 epochs)",
        "9-126/3000 it. (5/3 epochs)",
    )


def test_table_7_2_scale_without_setups():
    record = _two_columns()
    del record["membership"]["setups"]
    assert assess(_claim("000 Table 7.2"), record).scale == "9-126/3000 it. ( epochs)"


def test_table_7_2_rule_names_the_largest_gap_when_it_is_beyond_0_1():
    record = _two_columns()
    record["membership"]["rows"][2]["precision"] = 0.5  # seed 0.76: gap 0.26
    finding = assess(_claim("000 Table 7.2"), record)
    assert (finding.verdict, finding.reason) == (
        "partly",
        "shape holds; largest gap to the seed 0.26",
    )
    assert finding.fedleak.startswith("checkins 0.990 / 0.950 / 0.500;")


def _full(precision: float, accuracy: float, recall: float = 1.0) -> Any:
    row = {
        "dataset": "checkins",
        "batch_size": 100,
        "precision": precision,
        "recall": recall,
        "num_rounds": 3000,
        "model_accuracy": accuracy,
        "model_auc": 0.95,
    }
    other = {**row, "batch_size": 150}  # not in the seed's table: skipped
    seed = {"foursquare": [[100, 0.99]], "yelp-health": [[32, 0.92]]}
    return {"membership-3000": {"rows": [other, row], "thesis_table_7_2": seed}}


@pytest.mark.parametrize(
    ("precision", "accuracy", "recall", "verdict", "reason"),
    [
        (
            0.975,
            0.88,
            1.0,
            "reproduced",
            "precision within 0.015 of the seed at its scale, recall 1",
        ),
        (
            0.75,
            0.88,
            1.0,
            "partly",
            "recall 1; precision off by 0.240 (at checkins B=100)",
        ),
        (0.975, 0.88, 0.99, "not reproduced", "recall below 1"),
        (
            0.975,
            0.51,
            1.0,
            "partly",
            "precision within 0.015 of the seed at its scale, recall 1; but "
            "model test accuracy 0.51 < 0.6",
        ),
    ],
)
def test_table_7_2_at_3000_iterations_rule(
    precision, accuracy, recall, verdict, reason
):
    finding = assess(
        _claim("000 Table 7.2, 3,000 iterations"), _full(precision, accuracy, recall)
    )
    assert (finding.verdict, finding.reason) == (verdict, reason)
    assert finding.fedleak == (
        f"checkins B=100: precision {precision:.3f} (seed 0.99), recall {recall:.3f}"
    )
    assert finding.utility == (
        f"checkins: model acc {accuracy:.2f} (plateau not recorded), "
        "model AUC 0.950 / 0.950"
    )
    assert finding.scale == "3000/3000 it. = 1.00; checkins batch 150, 100"


def test_table_7_2_at_3000_iterations_reads_both_columns_and_the_edges():
    record = _full(0.975, 0.88)
    fortunes = {
        "dataset": "fortunes",
        "batch_size": 32,
        "precision": 0.1,
        "recall": 1.0,
        "num_rounds": 1500,
        "model_accuracy": 0.7,
        "model_auc": 0.8,
    }
    record["membership-3000"]["rows"].append(fortunes)
    record["membership-3000"]["thesis_table_7_2"]["yelp-health"] = [[32, 0.0]]
    claim = _claim("000 Table 7.2, 3,000 iterations")
    finding = assess(claim, record)
    assert finding.fedleak == (
        "checkins B=100: precision 0.975 (seed 0.99), recall 1.000; "
        "fortunes B=32: precision 0.100 (seed 0.0), recall 1.000"
    )
    # a gap of exactly 0.1 is within the bar
    assert (finding.verdict, finding.reason) == (
        "reproduced",
        "precision within 0.100 of the seed at its scale, recall 1",
    )
    assert finding.scale == (
        "1500/3000/3000 it. = 0.50; checkins batch 150, 100; fortunes batch 32"
    )
    assert finding.utility == (
        "checkins: model acc 0.88 (plateau not recorded), model AUC 0.950 / "
        "0.950; fortunes: model acc 0.70 (plateau not recorded), model AUC 0.800"
    )
    record["membership-3000"]["thesis_table_7_2"] = {
        "foursquare": [[5, 0.9]],
        "yelp-health": [],
    }
    assert (assess(claim, record).verdict, assess(claim, record).reason) == (
        "partly",
        "recall 1; no batch size in common with the seed",
    )


def test_table_7_2_at_3000_iterations_reads_the_fortunes_record_too():
    record = _full(0.975, 0.88)
    fortunes = {
        "dataset": "fortunes",
        "batch_size": 32,
        "precision": 0.75,
        "recall": 1.0,
        "num_rounds": 3000,
        "model_accuracy": 0.58,
        "model_auc": 0.8,
    }
    record["membership-3000-fortunes"] = {"rows": [fortunes]}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.fedleak.endswith(
        "; fortunes B=32: precision 0.750 (seed 0.92), recall 1.000"
    )
    assert (finding.verdict, finding.reason) == (
        "partly",
        "recall 1; precision off by 0.170 (at fortunes B=32)",
    )
    assert (
        finding.scale
        == "3000/3000 it. = 1.00; checkins batch 150, 100; fortunes batch 32"
    )
    # its recall counts too
    fortunes["recall"] = 0.9
    assert assess(_claim("000 Table 7.2, 3,000 iterations"), record).verdict == (
        "not reproduced"
    )


def _flags(bands: list[tuple[str, int, int]], flagged: float | None, other) -> dict:
    return {
        "bands": [
            {"distinct_words": w, "records": n, "flagged": k, "rate": k / n}
            for w, n, k in bands
        ],
        "median_words_flagged": flagged,
        "median_words_not_flagged": other,
    }


def test_table_7_2_at_3000_iterations_says_which_non_members_the_worst_row_flags():
    claim = _claim("000 Table 7.2, 3,000 iterations")
    record = _full(0.75, 0.88)
    worst, other = (
        record["membership-3000"]["rows"][1],
        record["membership-3000"]["rows"][0],
    )
    # the skipped row's breakdown is not the one the reason reads
    other["false_flags"] = _flags([("<10", 9, 9)], 3.0, None)
    assert assess(claim, record).reason == (
        "recall 1; precision off by 0.240 (at checkins B=100)"
    )
    worst["false_flags"] = _flags([("<10", 40, 12), ("10-12", 60, 3)], 7.5, 12.0)
    assert assess(claim, record).reason == (
        "recall 1; precision off by 0.240 (at checkins B=100); there 15 of 100 "
        "scored non-members are flagged, with a median of 7.5 distinct words "
        "against 12 for the others; 12 of the 40 with <10 distinct words"
    )
    # every non-member flagged: no median for the others
    worst["false_flags"] = _flags([("<10", 4, 4)], 6.0, None)
    assert assess(claim, record).reason.endswith(
        "with a median of 6 distinct words against n/a for the others; 4 of the "
        "4 with <10 distinct words"
    )
    # none flagged: nothing to say
    worst["false_flags"] = _flags([("<10", 4, 0)], None, 9.0)
    assert assess(claim, record).reason == (
        "recall 1; precision off by 0.240 (at checkins B=100)"
    )


def test_table_7_2_at_3000_iterations_reads_the_dense_runs_after_an_empty_flower_record():
    record = _full(0.975, 0.88)
    dense = {**record["membership-3000"]["rows"][1], "precision": 0.99}
    record["membership-3000-flower"] = {"rows": []}  # adds nothing ...
    record["membership-3000-dense"] = {"rows": [dense]}  # ... this still shows
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.fedleak.endswith(
        "; ? check-ins a user: checkins B=100: precision 0.990 (sparser 0.975), "
        "recall 1.000"
    )


def test_table_7_2_at_3000_iterations_shows_the_flower_runs_beside():
    record = _full(0.975, 0.88)
    flower = {
        "dataset": "checkins",
        "batch_size": 100,
        "precision": 0.5,
        "recall": 1.0,
        "num_rounds": 3000,
        "model_accuracy": 0.91,
        "engine": "flower",
    }
    unmatched = {**flower, "batch_size": 300, "precision": 0.7, "recall": 0.98}
    record["membership-3000-flower"] = {"rows": [flower, unmatched]}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.fedleak == (
        "checkins B=100: precision 0.975 (seed 0.99), recall 1.000; through "
        "Flower: checkins B=100: precision 0.500 (in-process 0.975), recall "
        "1.000, checkins B=300: precision 0.700, recall 0.980"
    )
    assert finding.utility == (
        "checkins: model acc 0.88 (plateau not recorded), model AUC 0.950 / "
        "0.950; through Flower: model acc 0.91 (plateau not recorded)"
    )
    # the verdict reads the in-process rows
    assert (finding.verdict, finding.reason) == (
        "reproduced",
        "precision within 0.015 of the seed at its scale, recall 1",
    )
    dense = {**flower, "precision": 0.99, "model_accuracy": 0.96}
    record["membership-3000-dense"] = {"mean_checkins": 34.0, "rows": [dense]}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.fedleak.endswith(
        "; 34.0 check-ins a user: checkins B=100: precision 0.990 (sparser "
        "0.975), recall 1.000"
    )
    assert finding.utility.endswith(
        "; through Flower: model acc 0.91 (plateau not recorded); 34.0 check-ins "
        "a user: model acc 0.96 (plateau not recorded)"
    )
    assert finding.verdict == "reproduced"
    record["membership-3000-dense"]["rows"] = []  # an empty record adds nothing
    assert assess(_claim("000 Table 7.2, 3,000 iterations"), record).fedleak.endswith(
        "checkins B=300: precision 0.700, recall 0.980"
    )


def _full_to_batch_200() -> tuple[dict, list]:
    """Table 7.2 records at 3,000 iterations with check-in batches 100 and 200."""
    record = _full(0.75, 0.92)
    rows = record["membership-3000"]["rows"]
    rows.append({**rows[1], "batch_size": 200, "precision": 0.6})
    record["membership-3000"]["thesis_table_7_2"]["foursquare"].append([200, 0.98])
    return record, rows


def test_table_7_2_at_3000_iterations_gives_the_gain_of_denser_users():
    record, rows = _full_to_batch_200()
    dense = [
        {**rows[1], "precision": 0.77},
        {**rows[1], "batch_size": 200, "precision": 0.66},
        {**rows[1], "batch_size": 400, "precision": 0.5},  # no sparser twin
    ]
    record["membership-3000-dense"] = {"mean_checkins": 34.0, "rows": dense}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.reason == (
        "recall 1; precision off by 0.380 (at checkins B=200); with 34.0 check-ins "
        "a user (the seed's mean) precision gains +0.020 / +0.060 at B = 100 / 200"
    )
    del record["membership-3000-dense"]["mean_checkins"]
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.reason.endswith(
        "; with ? check-ins a user (the seed's mean) "
        "precision gains +0.020 / +0.060 at B = 100 / 200"
    )
    record["membership-3000-dense"]["rows"] = dense[2:]
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.reason == "recall 1; precision off by 0.380 (at checkins B=200)"


def test_table_7_2_at_3000_iterations_shows_the_stand_in_over_more_venues():
    record, rows = _full_to_batch_200()
    wide = [
        {**rows[1], "precision": 0.95, "model_accuracy": 0.9},
        {**rows[1], "batch_size": 200, "precision": 0.85, "model_accuracy": 0.9},
    ]
    record["membership-3000-venues"] = {"num_venues": 30000, "rows": wide}
    record["membership-3000-dense"] = {"mean_checkins": 34.0, "rows": wide[:1]}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.fedleak.endswith(
        "; 30,000 venues: checkins B=100: precision 0.950 (10,000 venues 0.750), "
        "recall 1.000, checkins B=200: precision 0.850 (10,000 venues 0.600), "
        "recall 1.000"
    )
    assert finding.utility.endswith(
        "; 30,000 venues: model acc 0.90 (plateau not recorded)"
    )
    # both variants' gains, the denser users' first; the verdict reads the main rows
    assert finding.reason == (
        "recall 1; precision off by 0.380 (at checkins B=200); with 34.0 check-ins "
        "a user (the seed's mean) precision gains +0.200 at B = 100; with 30,000 "
        "venues (the seed's top locations) precision gains +0.200 / +0.250 at "
        "B = 100 / 200"
    )
    # its floor, and the seed's rows below it, where the record has one
    seed = record["membership-3000"]["thesis_table_7_2"]["foursquare"]
    seed += [[1000, 0.76], [2000, 0.62]]
    record["membership-3000-venues"]["setups"] = {"checkins": {"precision_floor": 0.8}}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.reason.endswith(
        "+0.200 / +0.250 at B = 100 / 200 (its precision floor 0.800, above the "
        "seed's 0.760 / 0.620 at B = 1,000 / 2,000)"
    )
    record["membership-3000-venues"]["setups"]["checkins"]["precision_floor"] = 0.76
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.reason.endswith("above the seed's 0.620 at B = 2,000)")
    record["membership-3000-venues"]["setups"]["checkins"]["precision_floor"] = 0.5
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.reason.endswith("at B = 100 / 200 (its precision floor 0.500)")
    del record["membership-3000-venues"]["setups"]
    # a batch size run on its own (membership-3000-venues-500) joins in order
    later = {**rows[1], "batch_size": 500, "precision": 0.8, "model_accuracy": 0.9}
    record["membership-3000-venues-500"] = {"num_venues": 30000, "rows": [later]}
    record["membership-3000-venues"]["rows"] = wide[::-1]
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.fedleak.endswith(
        "(10,000 venues 0.600), recall 1.000, checkins B=500: precision 0.800, "
        "recall 1.000"
    )
    assert finding.reason.endswith("+0.200 / +0.250 at B = 100 / 200")
    # a record without rows adds none; rows go by dataset, then batch size
    record["membership-3000-venues-600"] = {"num_venues": 30000}
    text = {**rows[1], "dataset": "fortunes", "batch_size": 32, "precision": 0.7}
    record["membership-3000-venues-fortunes"] = {"num_venues": 30000, "rows": [text]}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.fedleak.endswith(
        "checkins B=500: precision 0.800, recall 1.000, fortunes B=32: precision "
        "0.700, recall 1.000"
    )
    del record["membership-3000-venues-fortunes"]
    del record["membership-3000-venues"]["num_venues"]
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert "; ? venues: checkins B=100: precision 0.950 (10,000 venues" in (
        finding.fedleak
    )


def test_table_7_2_at_3000_iterations_takes_the_refit_rows_in_place_of_older():
    record = _full(0.75, 0.92)
    main = record["membership-3000"]["rows"][1]
    refit = {**main, "precision": 0.97}
    added = {**main, "batch_size": 400, "precision": 0.6}
    record["membership-3000-refit"] = {"rows": [refit, added]}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.fedleak == (
        "checkins B=100: precision 0.970 (seed 0.99), recall 1.000"
    )
    assert (finding.verdict, finding.reason) == (
        "reproduced",
        "precision within 0.020 of the seed at its scale, recall 1; rerun with "
        "the fixed scale fit: checkins B=100 (before 0.750); checkins B=150 "
        "predate the fix",
    )
    assert finding.scale == "3000/3000 it. = 1.00; checkins batch 150, 100, 400"
    # every membership-3000-refit-* record too (not a stem that merely starts alike)
    record["membership-3000-refit-150"] = {"rows": [{**main, "batch_size": 150}]}
    record["membership-3000-refitted"] = {"rows": [{**main, "batch_size": 999}]}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.reason.endswith(
        "; rerun with the fixed scale fit: checkins B=100 (before 0.750), "
        "checkins B=150 (before 0.750)"
    )
    assert "999" not in finding.scale + finding.fedleak
    # a refit record of batch sizes the others lack replaces nothing
    del record["membership-3000-refit-150"]
    record["membership-3000-refit"] = {"rows": [added]}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.reason == (
        "recall 1; precision off by 0.240 (at checkins B=100); rerun with the "
        "fixed scale fit: checkins B=400; checkins B=150, checkins B=100 predate "
        "the fix"
    )
    for empty in ({"rows": []}, {}):  # no rows: nothing replaced or named
        record["membership-3000-refit"] = empty
        finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
        assert finding.reason == "recall 1; precision off by 0.240 (at checkins B=100)"
    # the replaced rows are named in batch order, whatever the records' order
    early = {**main, "batch_size": 150, "precision": 0.9}
    record["membership-3000-refit"] = {"rows": [early, refit]}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.reason.endswith(
        "fixed scale fit: checkins B=100 (before 0.750), checkins B=150 (before 0.750)"
    )


def test_utility_span_collapses_when_both_ends_print_alike():
    record = _full(0.975, 0.923)
    second = {**record["membership-3000"]["rows"][1], "model_accuracy": 0.922}
    record["membership-3000"]["rows"].append(second)
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.utility.startswith("checkins: model acc 0.92 (plateau not")
    record["membership-3000"]["rows"][-1]["model_accuracy"] = 0.914
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.utility.startswith("checkins: model acc 0.91-0.92 (plateau")


def _aux_row(
    setting: str, scenario: str, acc: float, base: float, delay: int = 1000
) -> dict[str, Any]:
    return {
        "setting": setting,
        "scenario": scenario,
        "delay_steps": delay,
        "final_accuracy": acc,
        "baseline": base,
    }


def test_ch_6_1_4_rows_read_exactly_and_delay_zero_runs_are_ignored():
    thesis = _mi_record([0.6], (0.13, 0.11))
    thesis["auxiliary"] = [
        # the runs with the auxiliary data from the start are not the seed's
        _aux_row("discriminative", "test", 0.99, 0.5, delay=0),
        _aux_row("generative", "train", 0.01, 0.5, delay=0),
        _aux_row("discriminative", "test", 0.15, 0.12),
        _aux_row("generative", "train", 0.12, 0.08),
        _aux_row("generative", "train+test", 0.2, 0.1),
    ]
    finding = assess(_claim("000 Figs. 6.9-6.11"), {seed_claims.MI_THESIS: thesis})
    # 0.15 <= 1.3 x 0.12 holds; 0.12 is not above the plain 0.13; 0.2 is
    assert finding.verdict == "partly"
    assert finding.reason == (
        "holds: test-only knowledge at chance; train+test knowledge beats the "
        "plain black-box. fails: train-only knowledge beats the plain black-box"
    )
    assert finding.fedleak == (
        "disc. test-only 0.15 (chance 0.12); gen. train-only 0.12, train+test "
        "0.20; plain black-box 0.13"
    )
    assert finding.utility == "target as Fig. 6.8"
    assert (
        finding.scale == "400 GAN epochs, 600 members of a pool of 6000 (thesis, cuda)"
    )
    # at the boundaries: 1.3 x chance is still at chance, a tie with the plain
    # black-box does not beat it
    thesis["auxiliary"][2] = _aux_row("discriminative", "test", 0.13, 0.1)
    thesis["auxiliary"][4] = _aux_row("generative", "train+test", 0.13, 0.1)
    finding = assess(_claim("000 Figs. 6.9-6.11"), {seed_claims.MI_THESIS: thesis})
    assert finding.reason == (
        "holds: test-only knowledge at chance. fails: train-only knowledge beats "
        "the plain black-box; train+test knowledge beats the plain black-box"
    )
    cpu = _mi_record([0.98], (0.21, 0.14), members=100, epochs=1000)
    cpu["auxiliary"] = [
        _aux_row("discriminative", "test", 0.5, 0.12),
        _aux_row("generative", "train", 0.1, 0.08),
        _aux_row("generative", "train+test", 0.1, 0.1),
    ]
    records = {seed_claims.MI_THESIS: thesis, seed_claims.MI_CPU: cpu}
    finding = assess(_claim("000 Figs. 6.9-6.11"), records)
    assert finding.reason.endswith("; at 100 members x 1000 epochs none holds")


def _diagnosed(row: dict[str, Any], *values: float | None) -> dict[str, Any]:
    """Add knowledge_diagnosis's fields, in its order, to an auxiliary row."""
    keys = (
        "rank_known_members",
        "rank_unknown_members",
        "rank_unknown_non_members",
        "rank_known_non_members",
        "unknown_auc",
        "accuracy_all_records",
    )
    return {**row, **dict(zip(keys, values, strict=True))}


def test_ch_6_1_4_mechanism_reads_each_run_where_the_record_has_it():
    thesis = _mi_record([0.6], (0.13, 0.11))
    thesis["auxiliary"] = [
        _aux_row("discriminative", "test", 0.18, 0.12),
        _aux_row("generative", "train", 0.1, 0.08),
        _aux_row("generative", "train+test", 0.13, 0.1),
    ]
    cpu = _mi_record([0.98], (0.21, 0.14), members=100, epochs=1000)
    cpu["auxiliary"] = [
        _diagnosed(
            _aux_row("discriminative", "test", 0.31, 0.12),
            None, 0.734, 0.506, 0.351, 0.726, 0.31,
        ),
        # a delay-0 run of the same scenario is not the seed's: never read
        _diagnosed(
            _aux_row("generative", "train", 0.9, 0.08, delay=0),
            0.9, 0.9, 0.9, None, 0.9, 0.9,
        ),
        _diagnosed(
            _aux_row("generative", "train", 0.1, 0.08),
            0.875, 0.55, 0.488, None, 0.563, 0.19,
        ),
        _diagnosed(
            _aux_row("generative", "train+test", 0.214, 0.1),
            0.959, 0.591, 0.489, 0.452, 0.604, 0.4,
        ),
    ]  # fmt: skip
    records = {seed_claims.MI_THESIS: thesis, seed_claims.MI_CPU: cpu}
    finding = assess(_claim("000 Figs. 6.9-6.11"), records)
    assert finding.reason.endswith(
        "; at 100 members x 1000 epochs holds: train+test knowledge beats the "
        "plain black-box; mechanism at 100 members x 1000 epochs: test-only "
        "discriminative ranks the unknown members 0.73 against the unknown "
        "non-members 0.51 (mean percentile, AUC 0.73): it learns the target's "
        "samples, which lie near its members; the generative attackers "
        "(train-only / train+test) rank the members they were shown 0.88 / 0.96 "
        "but the unknown members 0.55 / 0.59 against 0.49 / 0.49 (AUC 0.56 / "
        "0.60): the knowledge is learnt as those records, not as what members "
        "share; counted over every record of X as the seed's text feeds them, "
        "accuracy 0.19 / 0.40 against the plain 0.21 (unknown records only: "
        "0.10 / 0.21)"
    )
    # a record from before the diagnosis: no mechanism, the rest unchanged
    del cpu["auxiliary"][3]["accuracy_all_records"]
    older = assess(_claim("000 Figs. 6.9-6.11"), records)
    assert older.reason.endswith(
        "holds: train+test knowledge beats the plain black-box"
    )
    assert older.verdict == finding.verdict == "not reproduced"


def test_fig_6_8_strings_in_full():
    thesis = _mi_record([0.6, 0.62], (0.2, 0.14))
    thesis["black_box"][0]["baseline"] = 0.1
    finding = assess(_claim("000 Fig. 6.8"), {seed_claims.MI_THESIS: thesis})
    assert finding.fedleak == "dcgan 0.20, vae 0.14 (chance 0.10)"
    assert finding.reason == (
        "above chance but below the seed's 0.38-0.63, although the white-box "
        "attack on the same targets reaches 0.60 / 0.62"
    )
    assert finding.utility == "target fixed after training (seed: epoch 400)"
    assert (
        finding.scale == "400 GAN epochs, 600 members of a pool of 6000 (thesis, cuda)"
    )
    low = _mi_record([0.6], (0.1, 0.12))
    finding = assess(_claim("000 Fig. 6.8"), {seed_claims.MI_THESIS: low})
    assert finding.reason == (
        "black-box within 1.3x chance at the seed's scale, although the white-box "
        "attack on the same targets reaches 0.60"
    )
    high = _mi_record([0.99], (0.35, 0.6))
    finding = assess(_claim("000 Fig. 6.8"), {seed_claims.MI_THESIS: high})
    assert finding.verdict == "reproduced"
    assert finding.reason == "black-box accuracy of the seed's size (0.38-0.63)"
    # 0.35 is the lowest that counts; the baseline is the record's own
    thesis = _mi_record([0.6], (0.349, 0.6))
    assert assess(_claim("000 Fig. 6.8"), {seed_claims.MI_THESIS: thesis}).verdict == (
        "partly"
    )
    for row in thesis["black_box"]:
        row["baseline"] = 0.3
    assert assess(_claim("000 Fig. 6.8"), {seed_claims.MI_THESIS: thesis}).verdict == (
        "not reproduced"
    )


def test_fig_6_7_strings_in_full():
    records: dict[str, Any] = {
        seed_claims.MI_THESIS: _mi_record([0.6, 0.62], (0.1, 0.1)),
        seed_claims.MI_THESIS_WIDE: _mi_record([0.85], (0.1, 0.1), channels=(64, 128)),
        seed_claims.MI_CPU: _mi_record(
            [0.98, 0.86], (0.2, 0.1), members=100, epochs=1000
        ),
    }
    finding = assess(_claim("000 Fig. 6.7"), records)
    assert finding.fedleak == (
        "white-box at epoch 400: 0.60 / 0.62 (32/64 channels), 0.85 (64/128 "
        "channels) (chance 0.10); 100 members x 1000 epochs: 0.98 / 0.86"
    )
    assert finding.reason == (
        "the seed's 0.8-0.98 at epoch 400 with the DCGAN's usual widths; the "
        "narrower 32/64-channel DCGAN overfits more slowly (0.60 / 0.62 at epoch "
        "400 from 0.30 / 0.31 at half of it)"
    )
    assert finding.utility == "target GAN trained to overfitting (as the seed)"
    # a curve point after half the epochs is not the halfway figure
    rec = records[seed_claims.MI_THESIS]
    rec["white_box"][0]["curve"].insert(1, {"epoch": 240, "accuracy": 0.5})
    rec["white_box"][1]["curve"] = [{"epoch": 400, "accuracy": 0.62}]
    del records[seed_claims.MI_THESIS_WIDE]
    finding = assess(_claim("000 Fig. 6.7"), records)
    assert finding.reason == (
        "white-box below the seed's 0.8-0.98 at epoch 400 (0.60 / 0.62 at epoch 400 "
        "from 0.30 / n/a at half of it)"
    )
    assert finding.fedleak.startswith("white-box at epoch 400: 0.60 / 0.62 (32/64 ")
    records[seed_claims.MI_THESIS] = _mi_record([0.8, 0.9], (0.1, 0.1))
    finding = assess(_claim("000 Fig. 6.7"), records)
    assert finding.verdict == "reproduced"
    assert (
        finding.reason == "white-box attack of the seed's size on the seed's schedule"
    )


def _mc_record(
    pairs: dict[str, tuple[float, float]], trials: int = 100, set_size: int = 100
) -> dict[str, Any]:
    rows = [
        {
            "model": model,
            "distance": distance,
            "heuristic": heuristic,
            "set_accuracy": acc,
        }
        for distance, pair in pairs.items()
        for model, acc in zip(("vae", "gan"), pair, strict=True)
        # a percentile heuristic's rows are not the seed's median heuristic
        for heuristic, acc in (("median", acc), ("0.01%", 1.0 - acc))
    ]
    mc = {"trials": trials, "rows": rows, "samples": 10000, "set_size": set_size}
    return {
        "monte_carlo": mc,
        "settings": {
            "target_epochs": 400,
            "vae_epochs": 300,
            "pool_size": 6000,
            "member_fraction": 0.1,
        },
    }


@pytest.mark.parametrize(
    ("pairs", "verdict", "reason"),
    [
        (
            {"hog": (0.9, 0.5), "pca": (0.9, 0.5)},
            "reproduced",
            "the VAE is more exposed than the GAN under both distances",
        ),
        (
            {"hog": (0.9, 0.5), "pca": (0.5, 0.9)},
            "not reproduced",
            "the GAN is significantly more exposed under one distance",
        ),
        (
            {"hog": (0.9, 0.5), "pca": (0.5, 0.5)},
            "partly",
            "VAE above GAN under one distance; under the other they differ by less "
            "than 2 standard errors of 100 trials",
        ),
        (
            {"hog": (0.5, 0.5), "pca": (0.5, 0.5)},
            "not reproduced",
            "no distance separates VAE and GAN by 2 standard errors of 100 trials, "
            "where the seed's gaps (0.20, 0.25) would",
        ),
    ],
)
def test_monte_carlo_rule_strings_in_full(pairs, verdict, reason):
    records = {seed_claims.MI_THESIS: _mc_record(pairs)}
    finding = assess(_claim("004 Tables 4.5-4.6"), records)
    assert finding.verdict == verdict
    assert finding.reason == reason
    assert finding.utility == "targets as Ch. 6 rows"
    assert finding.scale == (
        "Fashion-MNIST, GAN 400 / VAE 300 epochs, 10000 MC samples, sets of 100, "
        "100 trials"
    )


def test_monte_carlo_rule_reads_each_distance_at_its_standard_error():
    # SE of 0.9 vs 0.5 over 100 trials: sqrt((0.09 + 0.25) / 100) = 0.0583
    records = {
        seed_claims.MI_THESIS: _mc_record({"hog": (0.9, 0.5), "pca": (0.5, 0.65)})
    }
    finding = assess(_claim("004 Tables 4.5-4.6"), records)
    assert finding.fedleak == (
        "median-heuristic set accuracy: HOG VAE 0.90 vs GAN 0.50 (holds, 2 SE = "
        "0.12); PCA VAE 0.50 vs GAN 0.65 (reversed, 2 SE = 0.14)"
    )
    # 0.15 lies between 2 SE (0.138) and 3 SE (0.207): reversed, not a tie
    assert finding.verdict == "not reproduced"
    # equal at certainty: no standard error, no difference: a tie, not "holds"
    records = {
        seed_claims.MI_THESIS: _mc_record({"hog": (1.0, 1.0), "pca": (1.0, 1.0)})
    }
    finding = assess(_claim("004 Tables 4.5-4.6"), records)
    assert finding.fedleak.count("(tie, 2 SE = 0.00)") == 2
    # a distance without rows is not measured: n/a, and no verdict from it
    records = {seed_claims.MI_THESIS: _mc_record({"pca": (0.9, 0.5)})}
    finding = assess(_claim("004 Tables 4.5-4.6"), records)
    assert "HOG VAE n/a vs GAN n/a (tie, 2 SE = n/a)" in finding.fedleak
    assert finding.verdict == "partly"


def test_monte_carlo_rule_cites_the_cpu_record_after_the_seed_scales():
    thesis = _mc_record({"hog": (0.9, 0.5), "pca": (0.9, 0.5)})
    cpu = _mc_record({"hog": (0.5, 0.9), "pca": (0.5, 0.5)}, trials=50, set_size=30)
    cpu["settings"].update(pool_size=1000, target_epochs=1000)
    records = {seed_claims.MI_THESIS: thesis, seed_claims.MI_CPU: cpu}
    finding = assess(_claim("004 Tables 4.5-4.6"), records)
    assert finding.verdict == "reproduced"  # the CPU record's reversal is cited only
    assert finding.fedleak == (
        "median-heuristic set accuracy: HOG VAE 0.90 vs GAN 0.50 (holds, 2 SE = "
        "0.12); PCA VAE 0.90 vs GAN 0.50 (holds, 2 SE = 0.12); 100 members x 1000 "
        "epochs, 50 trials of sets of 30: HOG VAE 0.50 vs GAN 0.90 (reversed, 2 SE "
        "= 0.16); PCA VAE 0.50 vs GAN 0.50 (tie, 2 SE = 0.20)"
    )


def test_monte_carlo_rule_wants_the_vae_above_chance_not_only_above_the_gan():
    # VAE 0.55 vs GAN 0.38 over 200 trials: the order holds (2 SE = 0.098), but
    # the VAE is 0.05 above chance, inside 2 SE = 0.070 (sqrt(.55 * .45 / 200))
    records = {
        seed_claims.MI_THESIS: _mc_record(
            {"hog": (0.55, 0.38), "pca": (0.905, 0.63)}, trials=200
        )
    }
    finding = assess(_claim("004 Tables 4.5-4.6"), records)
    assert finding.verdict == "partly"
    assert finding.reason == (
        "VAE above GAN under both distances, but the VAE's set accuracy is within "
        "2 SE of chance under HOG (0.55): the seed's order holds there, not its "
        "exposure"
    )
    # both distances near chance: both named
    both = _mc_record({"hog": (0.55, 0.38), "pca": (0.52, 0.30)}, trials=200)
    finding = assess(_claim("004 Tables 4.5-4.6"), {seed_claims.MI_THESIS: both})
    assert "within 2 SE of chance under HOG (0.55), PCA (0.52): " in finding.reason
    # VAE 0.56 over 400 trials: 2 SE = 0.050 < 0.06 above chance
    records[seed_claims.MI_THESIS]["monte_carlo"]["trials"] = 400
    records[seed_claims.MI_THESIS]["monte_carlo"]["rows"][0]["set_accuracy"] = 0.56
    assert assess(_claim("004 Tables 4.5-4.6"), records).verdict == "reproduced"


def test_monte_carlo_rule_reads_the_seed_epochs_record_and_cites_the_others():
    mc = _mc_record({"hog": (0.9, 0.5), "pca": (0.9, 0.5)}, trials=200)
    mc["settings"]["target_epochs"] = 500
    thesis = _mc_record({"hog": (0.5, 0.5), "pca": (0.9, 0.5)})
    cpu = _mc_record({"hog": (0.5, 0.9), "pca": (0.5, 0.5)}, trials=50, set_size=30)
    cpu["settings"].update(pool_size=1000, target_epochs=1000)
    records = {
        seed_claims.MI_THESIS_MC: mc,
        seed_claims.MI_THESIS: thesis,
        seed_claims.MI_CPU: cpu,
    }
    finding = assess(_claim("004 Tables 4.5-4.6"), records)
    assert finding.verdict == "reproduced"  # the 500-epoch record decides
    assert finding.fedleak == (
        "median-heuristic set accuracy: HOG VAE 0.90 vs GAN 0.50 (holds, 2 SE = "
        "0.08); PCA VAE 0.90 vs GAN 0.50 (holds, 2 SE = 0.08); 600 members x 400 "
        "epochs, 100 trials of sets of 100: HOG VAE 0.50 vs GAN 0.50 (tie, 2 SE = "
        "0.14); PCA VAE 0.90 vs GAN 0.50 (holds, 2 SE = 0.12); 100 members x 1000 "
        "epochs, 50 trials of sets of 30: HOG VAE 0.50 vs GAN 0.90 (reversed, 2 SE "
        "= 0.16); PCA VAE 0.50 vs GAN 0.50 (tie, 2 SE = 0.20)"
    )
    assert finding.scale == (
        "Fashion-MNIST, GAN 500 / VAE 300 epochs, 10000 MC samples, sets of 100, "
        "200 trials"
    )
    # without it, the 400-epoch record decides (its HOG tie: partly)
    del records[seed_claims.MI_THESIS_MC]
    assert assess(_claim("004 Tables 4.5-4.6"), records).verdict == "partly"


def test_ch_6_1_4_reproduced_and_reversed_strings_and_the_cpu_scale_in_full():
    def record(
        test_only: float, train: float, both: float, members: int, epochs: int
    ) -> dict[str, Any]:
        rec = _mi_record([0.6], (0.13, 0.11), members=members, epochs=epochs)
        rec["auxiliary"] = [
            {  # a run without a delay entry is not one of the seed's
                "setting": "generative",
                "scenario": "train",
                "final_accuracy": 0.99,
                "baseline": 0.5,
            },
            _aux_row("discriminative", "test", test_only, 0.12, delay=1),
            _aux_row("generative", "train", train, 0.08, delay=1),
            _aux_row("generative", "train+test", both, 0.1, delay=1),
        ]
        return rec

    thesis = record(0.15, 0.2, 0.2, 600, 400)
    cpu = record(0.15, 0.2, 0.13, 100, 1000)  # 0.13 ties the plain black-box
    records = {seed_claims.MI_THESIS: thesis, seed_claims.MI_CPU: cpu}
    finding = assess(_claim("000 Figs. 6.9-6.11"), records)
    assert finding.verdict == "reproduced"
    assert finding.reason == (
        "test-only knowledge useless, train knowledge helps; at 100 members x 1000 "
        "epochs holds: test-only knowledge at chance; train-only knowledge beats "
        "the plain black-box"
    )
    assert finding.fedleak == (
        "disc. test-only 0.15 (chance 0.12); gen. train-only 0.20, train+test 0.20; "
        "plain black-box 0.13; 100 members x 1000 epochs: disc. test-only 0.15 "
        "(chance 0.12); gen. train-only 0.20, train+test 0.13; plain black-box 0.13"
    )
    records = {seed_claims.MI_THESIS: record(0.5, 0.13, 0.1, 600, 400)}
    finding = assess(_claim("000 Figs. 6.9-6.11"), records)
    assert finding.verdict == "not reproduced"
    assert finding.reason == (
        "reversed: test-only discriminative above chance, generative with training "
        "knowledge not above the plain black-box"
    )


def test_fig_6_7_and_6_8_read_the_first_rows_baseline_and_cite_in_order():
    thesis = _mi_record([0.6, 0.62], (0.2, 0.14))
    thesis["white_box"][1]["baseline"] = 0.5
    thesis["black_box"][1]["baseline"] = 0.5
    wide = _mi_record([0.8], (0.1, 0.1), channels=(64, 128))
    del thesis["device"]  # older records name no device: the CPU
    records = {seed_claims.MI_THESIS: thesis, seed_claims.MI_THESIS_WIDE: wide}
    finding = assess(_claim("000 Fig. 6.7"), records)
    assert "(chance 0.10)" in finding.fedleak
    assert finding.verdict == "reproduced"  # 0.8 with the usual widths is enough
    assert (
        finding.scale == "400 GAN epochs, 600 members of a pool of 6000 (thesis, cpu)"
    )
    finding = assess(_claim("000 Fig. 6.8"), records)
    assert finding.fedleak == (
        "dcgan 0.20, vae 0.14 (chance 0.10); 64/128-channel DCGAN target: dcgan "
        "0.10, vae 0.10 (white-box 0.80)"
    )
    assert finding.verdict == "partly"


def _random_share(aucs: list[float], recall: list[float]) -> dict[str, Any]:
    rec = _strength(0.5, aucs)
    for row, r, words in zip(rec["rows"], recall, (11, 33, 114, 118), strict=True):
        row["membership_recall"] = r
        row["mean_bag_size"] = words
    return rec


def test_table_7_5_reason_gives_the_random_share_selection_last():
    records = _share([0.60, 0.62, 0.62, 0.63])
    records["defenses-share-0.35"] = _strength(0.35, [0.695, 0.761, 0.785, 0.793])
    records[seed_claims.RANDOM_SHARE] = _random_share(
        [0.762, 0.851, 0.934, 0.904], [0.0, 0.05, 0.79, 1.0]
    )
    finding = assess(_claim("000 Table 7.5"), records)
    assert finding.verdict == "not reproduced"  # the main record decides
    assert finding.reason.endswith(
        "(falls beyond 2 SE); the shared coordinates drawn at random, not the "
        "largest (model acc 0.70-0.82): 0.904 at 100%, 0.934 at 0.1, 0.762 at "
        "0.003 (falls beyond 2 SE); at 0.1 the update still shows 114 of 118 words "
        "of a batch; membership recall 1.00 / 0.79 / 0.00 at 100% / 0.1 / 0.003"
    )
    # its own rounds' standard error: a fall of 0.03 at 480 rounds is flat
    records[seed_claims.RANDOM_SHARE] = _random_share(
        [0.874, 0.881, 0.934, 0.904], [0.0, 0.0, 0.79, 1.0]
    )
    assert "0.874 at 0.003 (flat within 2 SE); at 0.1" in (
        assess(_claim("000 Table 7.5"), records).reason
    )
    # fewer than two shares or an unmeasured AUC: nothing is said of it
    records[seed_claims.RANDOM_SHARE]["rows"][1]["property_auc"] = None
    assert "at random" not in assess(_claim("000 Table 7.5"), records).reason
    del records[seed_claims.RANDOM_SHARE]
    assert assess(_claim("000 Table 7.5"), records).reason.endswith(
        "0.695 at 0.003 (falls beyond 2 SE)"
    )


def test_the_random_share_record_is_not_read_as_a_strength():
    records = _share([0.60, 0.62, 0.62, 0.63])
    records[seed_claims.RANDOM_SHARE] = _random_share(
        [0.762, 0.851, 0.934, 0.904], [0.0, 0.0, 0.79, 1.0]
    )
    reason = assess(_claim("000 Table 7.5"), records).reason
    assert "stronger or weaker" not in reason
    assert "home fraction" not in reason


def test_committed_records_name_no_absolute_path():
    """A record's provenance says how to rerun it, not where it once ran."""
    for path in sorted(BENCHMARKS.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        command = record.get("provenance", {}).get("command", "")
        assert not re.search(r"(^|\s|=)/", command), (path.name, command)


def test_the_wide_targets_auxiliary_run_is_cited_not_judged():
    thesis = _mi_record([0.6], (0.13, 0.11))
    thesis["auxiliary"] = [
        _aux_row("discriminative", "test", 0.18, 0.12),
        _aux_row("generative", "train", 0.10, 0.08),
        _aux_row("generative", "train+test", 0.13, 0.1),
    ]
    wide = _mi_record([0.91], (0.1, 0.1), channels=(64, 128))
    del wide["black_box"]  # its own run: no plain black-box attack to compare
    wide["auxiliary"] = [
        _aux_row("discriminative", "test", 0.156, 0.12),  # <= 1.3 x chance
        _aux_row("generative", "train", 0.11, 0.08),
        _aux_row("generative", "train+test", 0.12, 0.1),
    ]
    records = {seed_claims.MI_THESIS: thesis, seed_claims.MI_THESIS_WIDE_AUX: wide}
    finding = assess(_claim("000 Figs. 6.9-6.11"), records)
    assert finding.verdict == "not reproduced"  # the seed-scale record decides
    assert finding.fedleak == (
        "disc. test-only 0.18 (chance 0.12); gen. train-only 0.10, train+test "
        "0.13; plain black-box 0.13; 64/128-channel target (white-box 0.91): "
        "disc. test-only 0.16 (chance 0.12); gen. train-only 0.11, train+test 0.12"
    )
    assert finding.reason == (
        "reversed: test-only discriminative above chance, generative with training "
        "knowledge not above the plain black-box; with the 64/128-channel target "
        "test-only knowledge is at chance"
    )
    wide["auxiliary"][0] = _aux_row("discriminative", "test", 0.16, 0.12)
    assert assess(_claim("000 Figs. 6.9-6.11"), records).reason.endswith(
        "test-only knowledge is above chance"
    )
    # Fig. 6.7 cites the wide run's white-box as a second run of the settings
    records[seed_claims.MI_THESIS_WIDE] = _mi_record(
        [0.85], (0.1, 0.1), channels=(64, 128)
    )
    finding = assess(_claim("000 Fig. 6.7"), records)
    assert (
        "0.85 (64/128 channels; 0.91 in a second run of the same settings and seed)"
        in finding.fedleak
    )


def test_fig_6_8_reason_reads_how_near_the_gans_samples_lie_to_its_members():
    thesis = _mi_record([0.6], (0.12, 0.12))
    thesis["monte_carlo"] = {
        "rows": [
            {
                "model": "gan",
                "distance": "pca",
                "heuristic": "median",
                "single_accuracy": 0.517,
            },
            {
                "model": "gan",
                "distance": "hog",
                "heuristic": "median",
                "single_accuracy": 0.49,
            },
            # other models and heuristics are not the black-box attacker's data
            {
                "model": "vae",
                "distance": "pca",
                "heuristic": "median",
                "single_accuracy": 0.9,
            },
            {
                "model": "gan",
                "distance": "pca",
                "heuristic": "0.01%",
                "single_accuracy": 0.8,
            },
        ]
    }
    finding = assess(_claim("000 Fig. 6.8"), {seed_claims.MI_THESIS: thesis})
    assert finding.reason == (
        "black-box within 1.3x chance at the seed's scale, although the white-box "
        "attack on the same targets reaches 0.60; the DCGAN's samples lie barely "
        "nearer its members than other records (Monte Carlo single-record accuracy "
        "at most 0.52 over the distances, chance 0.50)"
    )
    thesis["monte_carlo"]["rows"] = thesis["monte_carlo"]["rows"][2:3]  # no GAN row
    assert (
        "Monte Carlo"
        not in assess(_claim("000 Fig. 6.8"), {seed_claims.MI_THESIS: thesis}).reason
    )
    high = _mi_record([0.99], (0.4, 0.5))
    high["monte_carlo"] = {"rows": thesis["monte_carlo"]["rows"]}
    finding = assess(_claim("000 Fig. 6.8"), {seed_claims.MI_THESIS: high})
    assert finding.reason == "black-box accuracy of the seed's size (0.38-0.63)"


def test_membership_rows_say_whether_their_model_had_plateaued():
    record = _full(0.975, 0.88)
    rows = record["membership-3000"]["rows"]
    for row in rows:
        row["accuracy_curve"] = {"plateau": True}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.utility.startswith("checkins: model acc 0.88 (plateau), ")
    assert finding.verdict == "reproduced"
    # one run still improving caps the verdict and says so
    rows[0]["accuracy_curve"] = {"plateau": False}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.utility.startswith(
        "checkins: model acc 0.88 (not at plateau in 1/2 runs), "
    )
    assert (finding.verdict, finding.reason) == (
        "partly",
        "precision within 0.015 of the seed at its scale, recall 1; but the model "
        "was not at plateau in 1/2 runs",
    )
    # a curve without a plateau flag (no points) neither claims nor denies one
    rows[0]["accuracy_curve"] = {"plateau": None}
    finding = assess(_claim("000 Table 7.2, 3,000 iterations"), record)
    assert finding.verdict == "reproduced"
    assert finding.utility.startswith("checkins: model acc 0.88 (plateau), ")


def test_table_7_4_k_sweep_holds_the_summed_step_and_reports_the_literal_run():
    claim = _claim("000 Table 7.4, Figs. 7.4(b), 7.7(b)")
    rows = [
        ("startrek", 2, 1.0, 1.0, 0.3),
        ("linux", 2, 1.0, 0.99, 0.3),
        ("startrek", 2, 0.3, 0.96, 0.3),
        ("startrek", 4, 1.0, 0.98, 0.15),
        ("startrek", 8, 1.0, 0.7, 0.075),
        ("startrek", 8, 1.0, 0.6, 0.3),
        ("startrek", 3, 1.0, 0.65, 0.1),  # off the sweep: lr * K = 0.3
        ("startrek", 2, 0.5, 0.75, 0.1),  # not the fraction sweep's lr
    ]
    record = _text(rows, 0.85)
    runs = record["property-text"]["runs"]
    runs[5]["test_accuracy"] = 0.55
    finding = assess(claim, record)
    assert finding.fedleak.endswith(
        "startrek AUC 0.960 / 1.000 at fraction 0.3 / 1; "
        "startrek AUC 1.000 / 0.980 / 0.700 at K 2 / 4 / 8 (lr = 0.6 / K); "
        "K = 8 at lr 0.3 (lr * K = 2.4): AUC 0.600, model acc 0.55; "
        "K = 3 at lr 0.1 (lr * K = 0.3): AUC 0.650, model acc 0.85"
    )
    # the literal run documents the choice and does not gate the verdict
    assert (finding.verdict, finding.utility) == (
        "reproduced",
        "test acc 0.85 (plateau)",
    )
    # a held-step run that trains poorly does gate it
    runs[4]["test_accuracy"] = 0.55
    gated = assess(claim, record)
    assert gated.verdict == "partly" and "accuracy 0.55 < 0.6" in gated.reason


def test_table_7_4_miss_at_fraction_0_3_gives_its_diagnosis():
    claim = _claim("000 Table 7.4, Figs. 7.4(b), 7.7(b)")
    rows = [("startrek", 2, 1.0, 1.0), ("startrek", 2, 0.3, 0.91)]
    record = _text(rows, 0.85)
    plain = assess(claim, record)
    assert plain.reason == "startrek at fraction 0.3 0.910 < the seed's 0.95"
    run = record["property-text"]["runs"][1]
    run["auc_by_fifth"] = [0.95, 0.93, 0.9, 0.9, None]
    run["auxiliary_cv_auc"] = 0.99
    told = assess(claim, record)
    assert told.reason == (
        "startrek at fraction 0.3 0.910 < the seed's 0.95 (AUC by fifth of the "
        "rounds 0.950 / 0.930 / 0.900 / 0.900 / n/a; the classifier separates "
        "the adversary's own held-out bags at cross-validated AUC 0.990)"
    )
    run.pop("auc_by_fifth")
    assert (
        told.reason.replace(
            "AUC by fifth of the rounds 0.950 / 0.930 / 0.900 / 0.900 / n/a; ", ""
        )
        == assess(claim, record).reason
    )
    # the fifths alone, and a record whose fraction run is another one's
    run["auc_by_fifth"], run["auxiliary_cv_auc"] = [0.9] * 5, None
    assert assess(claim, record).reason.endswith(
        "(AUC by fifth of the rounds 0.900 / 0.900 / 0.900 / 0.900 / 0.900)"
    )
    run["params"]["participants"] = 3
    record["property-text"]["summary"]["auc"]["startrek-K2-f0.3"] = 0.91
    assert assess(claim, record).reason == plain.reason


def _ppgf_summary(source: float, gap: float) -> dict[str, Any]:
    return {
        "reference_auc": {
            "black_box": 0.49,
            "loss_threshold": 0.516,
            "white_box": 0.51,
        },
        "source_max_auc": source,
        "source_test_accuracy": 0.805,
        "ppgf_max_abs_auc_gap": gap,
        "accuracy_ratio_vs_source": {"ppgf@1.0": 0.774},
    }


def _ppgf_row(method: str, aucs: tuple[float, float, float], acc: float):
    attacks = ("black_box", "loss_threshold", "white_box")
    return {
        "method": method,
        "test_accuracy": acc,
        **{a: {"auc": v} for a, v in zip(attacks, aucs, strict=True)},
    }


def _ppgf_few(source: float, gap: float) -> dict[str, Any]:
    summary = {
        **_ppgf_summary(source, gap),
        "reference_auc": {
            "black_box": 0.535,
            "loss_threshold": 0.526,
            "white_box": 0.5,
        },
        "source_test_accuracy": 0.74,
    }
    return {
        "parameters": {"members": 300},
        "summary": summary,
        "rows": [
            _ppgf_row("source", (0.601, 0.604, 0.608), 0.74),
            _ppgf_row("ppgf", (0.496, 0.534, 0.536), 0.55),
            _ppgf_row("ppgf", (0.562, 0.552, 0.548), 0.613),
            _ppgf_row("dp-sgd", (0.556, 0.582, 0.575), 0.383),
            _ppgf_row("dp-sgd", (0.5, 0.589, 0.562), 0.54),
        ],
    }


FEW_TEXT = (
    "; with 300 members the source's MI AUC is 0.608 (test acc 0.74): "
    "PPGF's strongest attack 0.536-0.562 (gap to 0.5 up to {gap}; a model never trained on "
    "the members 0.535), DP-SGD's 0.582-0.589 at the same epsilons; test acc PPGF "
    "0.550-0.613, DP-SGD 0.383-0.540"
)
LITTLE = (
    "the undefended source model leaks little (MI AUC 0.574), so the defense has "
    "little to remove"
)


@pytest.mark.parametrize(
    ("main", "few", "verdict", "reason"),
    [
        ((0.574, 0.029), None, "partly", LITTLE),
        ((0.6, 0.05), None, "reproduced", "PPGF brings a leaking model's MI AUC to chance"),
        ((0.599, 0.01), None, "partly", LITTLE.replace("0.574", "0.599")),
        ((0.65, 0.0501), None, "partly", LITTLE.replace("0.574", "0.650")),
        ((0.574, 0.029), (0.608, 0.062), "partly", LITTLE + FEW_TEXT.format(gap="0.062")),
        (
            (0.574, 0.029),
            (0.608, 0.05),
            "reproduced",
            "PPGF brings a leaking model's MI AUC to chance"
            + FEW_TEXT.format(gap="0.050"),
        ),
    ],
)  # fmt: skip
def test_seed_003_judges_the_main_run_and_the_run_on_fewer_members(
    main, few, verdict, reason
):
    records: dict[str, Any] = {
        seed_claims.PPGF_RECORD: {"summary": _ppgf_summary(*main)}
    }
    if few is not None:
        records[seed_claims.PPGF_FEW_MEMBERS] = _ppgf_few(*few)
    finding = assess(_claim("003 MI vs eps"), records)
    assert (finding.verdict, finding.reason) == (verdict, reason)
    assert finding.fedleak == (
        f"MI AUC reference 0.516, source {main[0]:.3f}, PPGF gap to 0.5 <= {main[1]:.3f}"
    )
    assert finding.utility == "source test acc 0.81; PPGF at eps 1 0.77x of it"


def test_seed_003_names_its_data_and_a_missing_utility_ratio():
    summary = {**_ppgf_summary(0.574, 0.029), "accuracy_ratio_vs_source": {}}
    finding = assess(
        _claim("003 MI vs eps"), {seed_claims.PPGF_RECORD: {"summary": summary}}
    )
    assert finding.scale == "Fashion-MNIST"
    assert finding.utility == "source test acc 0.81; PPGF at eps 1 n/a"
