"""Rules of the reproduction table for the defenses of seed 000 Ch. 7.3.

Tables 7.5 and 7.7 and Ch. 7.3.4 with both of the seed's property
classifiers: the embedding-row attack (``property_auc``) and the whole-update
attack (``property_auc_whole_update``), measured on the same rounds.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from fedleak.bench.seed_claims import CLAIMS, assess, auc_standard_error

SHARES = (0.003, 0.01, 0.1, 1.0)


def _claim(row: str) -> Any:
    return next(c for c in CLAIMS if c.row == row)


def _two_se(a: float, b: float, rounds: int = 480) -> float:
    half = rounds // 2
    return 2 * math.hypot(
        auc_standard_error(a, half, half), auc_standard_error(b, half, half)
    )


def _share_record(
    home: float, embedding: list[float], whole: list[float] | None
) -> dict[str, Any]:
    rows = [
        {
            "table": "share_fraction",
            "setting": s,
            "property_auc": e,
            "model_accuracy": 0.8,
            "model_auc": 0.95,
            "rounds": 100,
            **({} if whole is None else {"property_auc_whole_update": whole[k]}),
        }
        for k, (s, e) in enumerate(zip(SHARES, embedding, strict=True))
    ]
    setup = {"num_train": 10, "property_rounds": 480, "home_fraction": home}
    return {"rows": rows, "setup": setup}


FLAT = [0.89, 0.87, 0.89, 0.90]


def test_table_7_5_without_the_whole_update_attack_is_the_embedding_verdict():
    records = {"defenses": _share_record(0.5, FLAT, None)}
    finding = assess(_claim("000 Table 7.5"), records)
    assert finding.verdict == "not reproduced"
    assert finding.reason.startswith("flat: AUC 0.900 at 100%")
    assert "whole-update" not in finding.fedleak + finding.reason


def test_table_7_5_whole_update_attack_is_judged_at_the_seeds_strength():
    # the main record's whole-update attack is saturated (0.999 at 100%) and
    # barely falls; the 0.3 record's (0.95 at 100%) is nearest the seed's
    # 0.93 and falls beyond 2 SE to the seed's 10%
    records = {
        "defenses": _share_record(0.5, FLAT, [0.94, 0.97, 0.996, 0.999]),
        "defenses-share-0.3": _share_record(0.3, FLAT, [0.81, 0.87, 0.90, 0.95]),
        "defenses-share-0.2": _share_record(0.2, FLAT, [0.63, 0.67, 0.79, 0.82]),
    }
    finding = assess(_claim("000 Table 7.5"), records)
    assert finding.verdict == "reproduced"
    assert finding.reason.startswith(
        "the whole-update attack (max pooling, random forest) at home fraction "
        "0.3, where its AUC with everything shared (0.950) is nearest the "
        "seed's 0.93: AUC falls by 0.050 (> 2 SE = "
        f"{_two_se(0.95, 0.90):.3f}) from 100% to 0.1 shared (seed: 0.93 -> 0.84)"
    )
    # the embedding-row attack's verdict and reason follow
    assert "; the embedding-row attack: not reproduced, flat: AUC 0.900" in (
        finding.reason
    )
    assert finding.fedleak.endswith(
        "whole-update attack (max pooling, random forest): "
        "0.810 / 0.870 / 0.900 / 0.950 at share 0.003 / 0.010 / 0.100 / 1.000"
    )
    assert finding.fedleak.startswith("embedding-row attack: property AUC 0.890")


@pytest.mark.parametrize(
    ("whole", "verdict", "words"),
    [
        ([0.80, 0.92, 0.93, 0.93], "partly", "falls by 0.130"),  # below 10% only
        ([0.92, 0.92, 0.93, 0.93], "not reproduced", "does not fall beyond 2 SE"),
        ([0.70, 0.95, 0.80, 0.93], "not reproduced", "does not fall"),  # unsteady
    ],
)
def test_table_7_5_whole_update_verdicts(whole, verdict, words):
    records = {"defenses": _share_record(0.5, FLAT, whole)}
    finding = assess(_claim("000 Table 7.5"), records)
    assert finding.verdict == verdict
    if verdict == "partly":  # better than the embedding's: it comes first
        assert finding.reason.startswith("the whole-update attack")
        assert "but not within the seed's 10-100%" in finding.reason
    else:  # not better: the embedding's reason comes first
        assert finding.reason.startswith("flat: AUC 0.900 at 100%")
    assert words in finding.reason


def test_table_7_5_the_embedding_verdict_rules_when_it_is_better():
    falls = [0.60, 0.80, 0.84, 0.93]
    records = {"defenses": _share_record(0.5, falls, [0.93, 0.93, 0.93, 0.93])}
    finding = assess(_claim("000 Table 7.5"), records)
    assert finding.verdict == "reproduced"
    assert finding.reason.startswith("AUC falls by 0.090")
    assert finding.reason.endswith(
        "nearest the seed's 0.93: AUC does not fall beyond 2 SE = "
        f"{_two_se(0.93, 0.93):.3f} as less is shared"
    )


def test_table_7_5_whole_update_on_an_undertrained_model_is_partly():
    record = _share_record(0.3, FLAT, [0.81, 0.87, 0.90, 0.95])
    for row in record["rows"]:
        row["model_accuracy"] = 0.4
    finding = assess(_claim("000 Table 7.5"), {"defenses": record})
    assert finding.verdict == "partly"
    assert "model test accuracy 0.40 < 0.6" in finding.reason


def test_table_7_5_skips_records_missing_the_whole_update_attack():
    partial = _share_record(0.3, FLAT, [0.81, 0.87, 0.90, 0.95])
    partial["rows"][1]["property_auc_whole_update"] = None  # diverged there
    records = {
        "defenses": _share_record(0.5, FLAT, [0.98, 0.99, 0.99, 0.99]),
        "defenses-share-0.3": partial,
    }
    finding = assess(_claim("000 Table 7.5"), records)
    assert "at home fraction 0.5" in finding.reason
    assert "at home fraction 0.3," not in finding.reason


def _dropout(embedding: list[float], whole: list[float] | None) -> dict[str, Any]:
    rows = [
        {
            "table": "dropout",
            "setting": p,
            "property_auc": e,
            "model_accuracy": 0.8,
            "model_auc": 0.9,
            "rounds": 100,
            **({} if whole is None else {"property_auc_whole_update": whole[k]}),
        }
        for k, (p, e) in enumerate(zip((0.1, 0.5, 0.9), embedding, strict=True))
    ]
    setup = {"num_train": 10, "property_rounds": 480}
    return {"defenses": {"rows": rows, "setup": setup}}


@pytest.mark.parametrize(
    ("embedding", "verdict", "start"),
    [
        ([0.89, 0.91, 0.96], "reproduced", "attack AUC rises by 0.070"),
        ([0.90, 0.91, 0.91], "partly", "dropout does not weaken the attack"),
        ([0.96, 0.93, 0.85], "not reproduced", "dropout weakens the attack by 0.110"),
    ],
)
def test_table_7_7_embedding_rule(embedding, verdict, start):
    finding = assess(_claim("000 Table 7.7"), _dropout(embedding, None))
    assert finding.verdict == verdict
    assert finding.reason.startswith(start)
    assert finding.fedleak.startswith(f"property AUC {embedding[0]:.3f}")
    assert "whole-update" not in finding.reason


def test_table_7_7_names_both_attacks():
    rising, falling = [0.89, 0.91, 0.96], [0.96, 0.95, 0.90]
    finding = assess(_claim("000 Table 7.7"), _dropout(rising, falling))
    assert finding.verdict == "reproduced"
    assert finding.reason == (
        f"embedding-row attack AUC rises by 0.070 (> 2 SE = "
        f"{_two_se(0.96, 0.89):.3f}) with dropout; dropout weakens the "
        "whole-update attack (max pooling, random forest) by 0.060 (> 2 SE)"
    )
    assert "(whole-update attack (max pooling, random forest): 0.960 / 0.950 / " in (
        finding.fedleak
    )
    swapped = assess(_claim("000 Table 7.7"), _dropout(falling, rising))
    assert swapped.verdict == "reproduced"
    assert swapped.reason.startswith(
        "whole-update attack (max pooling, random forest) AUC rises by 0.070"
    )
    assert swapped.reason.endswith(
        "; embedding-row attack: dropout weakens the attack by 0.060 (> 2 SE)"
    )


def _dp(prop: list[float | None], whole: list[float | None] | None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [
        {
            "table": "record_dp",
            "setting": s,
            "membership_precision": 0.5,
            "property_auc": p,
            "property_auc_dp_aware": None,
            "model_accuracy": 0.7,
            "rounds": 100,
            **(
                {}
                if whole is None
                else {
                    "property_auc_whole_update": whole[k],
                    "property_auc_whole_update_dp_aware": 0.5,
                }
            ),
        }
        for k, (s, p) in enumerate(zip((0.5, 1.0, 4.0), prop, strict=True))
    ]
    rows.append(
        {
            "table": "participant_dp",
            "setting": 1.0,
            "property_auc": None,
            "model_accuracy": 0.7,
            "rounds": 100,
        }
    )
    setup = {"num_train": 10, "property_rounds": 480}
    return {"defenses": {"rows": rows, "setup": setup}}


def test_ch_7_3_4_reads_the_whole_update_attack_too():
    chance = [0.50, 0.49, 0.51]
    alone = assess(_claim("000 Ch. 7.3.4"), _dp(chance, None))
    assert alone.verdict == "partly"
    assert "(also for a DP-aware adversary), against" in alone.reason
    assert "whole-update" not in alone.fedleak
    both = assess(_claim("000 Ch. 7.3.4"), _dp(chance, [0.48, 0.52, 0.50]))
    assert both.verdict == "partly"
    assert (
        "property AUC at most 0.520 (also for a DP-aware adversary and the "
        "whole-update attack)" in both.reason
    )
    assert (
        "; whole-update attack (max pooling, random forest) 0.480 / 0.520 / 0.500 "
        "(DP-aware 0.500 / 0.500 / 0.500)" in both.fedleak
    )
    # the whole-update attack survives DP at every noise: the seed's claim holds
    kept = assess(_claim("000 Ch. 7.3.4"), _dp(chance, [0.70, 0.65, 0.61]))
    assert kept.verdict == "reproduced"
    # one noise level where no attack reaches 0.6 is enough to miss it
    missed = assess(_claim("000 Ch. 7.3.4"), _dp(chance, [0.70, 0.65, None]))
    assert missed.verdict == "partly"


# ------------------------------------------------ exact findings, thresholds
def _scale() -> str:
    return (
        "100 training rounds, 480 property rounds, 10 records; per-word size "
        "of the embedding update, logistic regression"
    )


def _fall_between(last: float, low: float, high: float, rounds: int = 480) -> float:
    """An AUC whose fall to ``last`` lies strictly between low and high x 2 SE."""
    target = (low + high) / 2
    lo, hi = 0.5, last
    for _ in range(200):
        first = (lo + hi) / 2
        if last - first > target * _two_se(last, first, rounds):
            lo = first
        else:
            hi = first
    return lo


def _with_features(record: dict[str, Any]) -> dict[str, Any]:
    record["property_features"] = (
        "per-word size of the embedding update, logistic regression"
    )
    return record


def test_table_7_5_whole_update_findings_word_for_word():
    # a fall at the smallest share of 2.5 SE: partly (3 SE would not be)
    first = _fall_between(0.93, 1.0, 1.5)
    whole = [first, 0.92, 0.925, 0.93]
    record = _with_features(_share_record(0.5, FLAT, whole))
    record["rows"][-1]["model_accuracy"] = 0.9
    se2 = _two_se(0.93, first)
    finding = assess(_claim("000 Table 7.5"), {"defenses": record})
    embedding = assess(
        _claim("000 Table 7.5"),
        {"defenses": _with_features(_share_record(0.5, FLAT, None))},
    )
    assert finding.verdict == "partly"
    assert finding.utility == "model AUC 0.95 (plateau not recorded)"
    assert finding.scale == _scale()
    assert finding.fedleak == (
        f"embedding-row attack: {embedding.fedleak}; whole-update attack (max "
        f"pooling, random forest): {first:.3f} / 0.920 / 0.925 / 0.930 at share "
        "0.003 / 0.010 / 0.100 / 1.000"
    )
    assert finding.reason == (
        "the whole-update attack (max pooling, random forest) at home fraction "
        "0.5, where its AUC with everything shared (0.930) is nearest the seed's "
        f"0.93: AUC falls by {0.93 - first:.3f} (> 2 SE = {se2:.3f}) at 0.003, "
        f"but not within the seed's 10-100%; the embedding-row attack: not "
        f"reproduced, {embedding.reason}"
    )
    # a dip of 1.5 SE on the way is steady; 2.5 SE is not
    dip = [first, 0.92, 0.93 - 0.75 * _two_se(0.93, 0.9), 0.93]
    assert assess(
        _claim("000 Table 7.5"), {"defenses": _share_record(0.5, FLAT, dip)}
    ).verdict in {"partly", "reproduced"}
    far = [first, 0.93, 0.93 - 1.25 * se2, 0.93]
    assert assess(
        _claim("000 Table 7.5"), {"defenses": _share_record(0.5, FLAT, far)}
    ).reason.startswith("flat")


def test_table_7_5_whole_update_reproduced_at_two_and_a_half_se():
    at_seed = _fall_between(0.93, 1.0, 1.5)
    whole = [at_seed - 0.05, at_seed - 0.01, at_seed, 0.93]
    finding = assess(
        _claim("000 Table 7.5"),
        {"defenses": _with_features(_share_record(0.5, FLAT, whole))},
    )
    assert finding.verdict == "reproduced"
    assert f"AUC falls by {0.93 - at_seed:.3f} (> 2 SE = " in finding.reason
    assert f"{_two_se(0.93, at_seed):.3f}) from 100% to 0.1 shared" in (finding.reason)
    embedding = assess(
        _claim("000 Table 7.5"),
        {"defenses": _with_features(_share_record(0.5, FLAT, None))},
    )
    assert finding.utility == embedding.utility
    assert finding.scale == embedding.scale == _scale()


def test_share_records_need_two_rows_and_read_a_missing_strength_as_nan():
    from fedleak.bench.seed_claims import WHOLE_UPDATE_AUC, _share_records

    two = _share_record(0.3, FLAT, [0.8, 0.85, 0.9, 0.95])
    two["rows"] = two["rows"][2:]
    one = _share_record(0.2, FLAT, [0.8, 0.85, 0.9, 0.95])
    one["rows"] = one["rows"][3:]
    nameless = _share_record(0.4, FLAT, [0.8, 0.85, 0.9, 0.95])
    del nameless["setup"]["home_fraction"]
    found = _share_records(
        {
            "defenses-share-0.3": two,
            "defenses-share-0.2": one,
            "defenses-share-x": nameless,
        },
        WHOLE_UPDATE_AUC,
    )
    assert [rec is two for _, rec, _ in found] == [True, False]
    assert [len(rows) for _, _, rows in found] == [2, 4]
    assert found[0][0] == 0.3 and math.isnan(found[1][0])


def test_table_7_7_findings_word_for_word():
    rise = _fall_between(0.96, 1.0, 1.5)  # a rise of 2.5 SE from it to 0.96
    record = _dropout([rise, 0.93, 0.96], [0.99, 0.98, 0.99])
    record["defenses"]["rows"][0]["model_accuracy"] = 0.7
    finding = assess(_claim("000 Table 7.7"), record)
    assert finding.verdict == "reproduced"
    assert finding.utility == "model acc 0.70-0.80 (plateau not recorded)"
    assert finding.scale == (
        "100 training rounds, 480 property rounds, 10 records; bag of words"
    )
    assert finding.fedleak == (
        f"property AUC {rise:.3f} / 0.930 / 0.960 (whole-update attack (max "
        "pooling, random forest): 0.990 / 0.980 / 0.990); model AUC 0.900 / "
        "0.900 / 0.900 at p 0.1 / 0.5 / 0.9"
    )
    se2 = _two_se(0.99, 0.99)
    assert finding.reason == (
        f"embedding-row attack AUC rises by {0.96 - rise:.3f} (> 2 SE = "
        f"{_two_se(0.96, rise):.3f}) with dropout; dropout does not weaken the "
        f"whole-update attack (max pooling, random forest), but no rise beyond "
        f"2 SE = {se2:.3f} (+0.000)"
    )
    # a fall of 2.5 SE weakens the attack; 1.5 SE does not
    drop = _fall_between(0.96, 1.0, 1.5)
    weaker = assess(_claim("000 Table 7.7"), _dropout([0.96, 0.95, drop], None))
    assert weaker.verdict == "not reproduced"
    slight = _fall_between(0.96, 0.7, 0.8)
    kept = assess(_claim("000 Table 7.7"), _dropout([0.96, 0.95, slight], None))
    assert kept.verdict == "partly"
    # equal verdicts: the embedding-row attack's reason stays first
    both = assess(_claim("000 Table 7.7"), _dropout([0.9, 0.9, 0.9], [0.9] * 3))
    assert both.reason.startswith("embedding-row dropout does not weaken the attack")


def _dp_rows(mem: float, best: list[float | None]) -> dict[str, Any]:
    records = _dp(best, None)
    for row in records["defenses"]["rows"]:
        if row["table"] == "record_dp":
            row["membership_precision"] = mem
    return records


def test_ch_7_3_4_findings_word_for_word():
    records = _dp_rows(0.6, [0.6, 0.7, 0.65])  # both thresholds met exactly
    records["defenses"]["rows"][-1]["model_accuracy"] = 0.5
    records["defenses"]["rows"][-1]["property_auc"] = 0.55
    records["defenses"]["rows"][0]["property_auc_dp_aware"] = 0.45
    finding = assess(_claim("000 Ch. 7.3.4"), records)
    assert finding.verdict == "reproduced"
    assert finding.reason == "record-level DP stops membership, not property inference"
    assert finding.utility == "model acc 0.50-0.70 (plateau not recorded)"
    assert finding.scale == (
        "100 training rounds, 480 property rounds, 10 records; bag of words"
    )
    assert finding.fedleak == (
        "record DP: precision 0.600 / 0.600 / 0.600, property AUC 0.600 / 0.700 "
        "/ 0.650 (DP-aware adversary 0.450 / n/a / n/a); participant DP: "
        "property AUC 0.550"
    )
    leaks = assess(_claim("000 Ch. 7.3.4"), _dp_rows(0.61, [0.7, 0.7, 0.7]))
    assert leaks.verdict == "not reproduced"
    assert leaks.reason == "record-level DP leaves membership"
    nothing = assess(_claim("000 Ch. 7.3.4"), _dp_rows(0.5, [None, None, None]))
    assert nothing.verdict == "partly"
    assert nothing.reason == (
        "record-level DP stops membership; property AUC at most 0.000 (also for "
        "a DP-aware adversary), against the seed's 'does not prevent property "
        "inference' (a statement, not a measurement, in the seed)"
    )


def test_table_7_5_partly_reads_the_fall_from_everything_shared():
    # flat up to 1%, a fall only at the smallest share... read from 100%
    whole = [0.80, 0.80, 0.93, 0.93]
    finding = assess(
        _claim("000 Table 7.5"), {"defenses": _share_record(0.5, FLAT, whole)}
    )
    assert finding.verdict == "partly"
    assert "AUC falls by 0.130 (> 2 SE = " in finding.reason


def test_table_7_5_keeps_the_embedding_finding_when_it_is_better():
    falls = [0.60, 0.80, 0.84, 0.93]
    plain = assess(
        _claim("000 Table 7.5"), {"defenses": _share_record(0.5, falls, None)}
    )
    both = assess(
        _claim("000 Table 7.5"),
        {"defenses": _share_record(0.5, falls, [0.93, 0.93, 0.93, 0.93])},
    )
    assert both.verdict == plain.verdict == "reproduced"
    assert both.utility == plain.utility == "model AUC 0.95 (plateau not recorded)"
    assert both.scale == plain.scale
    assert both.fedleak == (
        f"embedding-row attack: {plain.fedleak}; whole-update attack (max "
        "pooling, random forest): 0.930 / 0.930 / 0.930 / 0.930 at share "
        "0.003 / 0.010 / 0.100 / 1.000"
    )


def test_ch_7_3_4_names_the_dp_aware_adversary_only_when_measured():
    chance = [0.50, 0.49, 0.51]
    both = assess(_claim("000 Ch. 7.3.4"), _dp(chance, [0.48, 0.52, 0.50]))
    assert both.fedleak == (
        "record DP: precision 0.500 / 0.500 / 0.500, property AUC 0.500 / 0.490 "
        "/ 0.510; whole-update attack (max pooling, random forest) 0.480 / 0.520 "
        "/ 0.500 (DP-aware 0.500 / 0.500 / 0.500); participant DP: property AUC "
        "n/a"
    )
    records = _dp(chance, [0.48, 0.52, 0.50])
    records["defenses"]["rows"][1]["property_auc_dp_aware"] = 0.47
    aware = assess(_claim("000 Ch. 7.3.4"), records)
    assert aware.fedleak.startswith(
        "record DP: precision 0.500 / 0.500 / 0.500, property AUC 0.500 / 0.490 "
        "/ 0.510 (DP-aware adversary n/a / 0.470 / n/a); whole-update attack"
    )


def test_table_7_5_matches_the_strength_by_the_auc_with_everything_shared():
    # at 10% the 0.2 record is nearest 0.93; with everything shared, 0.4 is
    records = {
        "defenses": _share_record(0.5, FLAT, [0.95, 0.97, 0.99, 0.999]),
        "defenses-share-0.2": _share_record(0.2, FLAT, [0.80, 0.85, 0.93, 0.99]),
        "defenses-share-0.4": _share_record(0.4, FLAT, [0.80, 0.85, 0.97, 0.94]),
    }
    finding = assess(_claim("000 Table 7.5"), records)
    assert "at home fraction 0.4, where its AUC with everything shared (0.940)" in (
        finding.reason
    )


def test_table_7_7_gives_and_gates_on_the_property_runs_model():
    rise = _fall_between(0.96, 1.0, 1.5)
    record = _dropout([rise, 0.93, 0.96], [0.99, 0.98, 0.99])
    rows = record["defenses"]["rows"]
    for row, final in zip(rows, (0.90, 0.91, 0.88), strict=True):
        row["accuracy_curve"] = {"plateau": True}
        row["property_accuracy_curve"] = {
            "test_accuracy": [0.5, 0.99, final],  # the last point is the model's
            "plateau": True,
        }
    finding = assess(_claim("000 Table 7.7"), record)
    assert finding.verdict == "reproduced"
    assert finding.utility == (
        "model acc 0.80 (plateau); property runs' model test acc 0.88-0.91 (plateau)"
    )
    # the property attack watched a model off its plateau: partly, and why
    rows[1]["property_accuracy_curve"]["plateau"] = False
    finding = assess(_claim("000 Table 7.7"), record)
    assert finding.verdict == "partly"
    assert finding.reason.endswith("; but the model was not at plateau in 1/3 runs")
    assert finding.utility.endswith("test acc 0.88-0.91 (not at plateau in 1/3 runs)")
    # a diverged property run (no curve) is left out, not counted as a plateau
    rows[1]["property_accuracy_curve"] = None
    finding = assess(_claim("000 Table 7.7"), record)
    assert finding.verdict == "reproduced"
    assert finding.utility.endswith("test acc 0.88-0.90 (plateau)")


def test_model_utility_without_rows_claims_nothing():
    from fedleak.bench.seed_claims import _model_utility

    assert _model_utility([]) == "not recorded"
    assert _model_utility([{"model_accuracy": 0.9}]) == (
        "model acc 0.90 (plateau not recorded)"
    )


def test_the_scale_gives_the_dp_rows_longer_training_apart():
    chance = [0.5, 0.5, 0.5]
    record = _dp(chance, None)
    rows = record["defenses"]["rows"]
    # a record of DP rows alone: their rounds are the training rounds
    assert assess(_claim("000 Ch. 7.3.4"), record).scale.startswith(
        "100 training rounds, 480 property rounds, 10 records; "
    )
    rows.append({"table": "dropout", "setting": 0.5, "rounds": 25})
    for row in rows[:4]:
        row["rounds"] = 400 if row["table"] == "record_dp" else 300
    scale = assess(_claim("000 Ch. 7.3.4"), record).scale
    assert scale.startswith(
        "25 training rounds (up to 400 for the DP rows), 480 property rounds, "
        "10 records; "
    )
    # DP rows no longer than the others are not set apart
    for row in rows[:4]:
        row["rounds"] = 25
    scale = assess(_claim("000 Ch. 7.3.4"), record).scale
    assert scale.startswith("25 training rounds, 480 property rounds")
    # a setup without the property rounds says it does not know them
    del record["defenses"]["setup"]["property_rounds"]
    scale = assess(_claim("000 Ch. 7.3.4"), record).scale
    assert scale.startswith("25 training rounds, ? property rounds")


def _vocabulary_record(
    precision: list[float], model_auc: list[float], **setup: Any
) -> dict[str, Any]:
    """A defenses record's vocabulary table: cuts all / 1000 / 300 / 100."""
    rows = [
        {
            "table": "vocabulary",
            "setting": n,
            "membership_precision": p,
            "model_auc": a,
            "model_accuracy": 0.6 + 0.1 * k,
            "rounds": 100,
        }
        for k, (n, p, a) in enumerate(
            zip((None, 1000, 300, 100), precision, model_auc, strict=True)
        )
    ]
    return {"rows": rows, "setup": {"num_train": 10, "property_rounds": 480, **setup}}


def _signal(aucs: list[float], kept: float) -> list[dict[str, Any]]:
    cuts = (None, 1000, 300, 100)
    shares = (1.0, 0.9, 0.8, kept)
    return [
        {"top_n": n, "kept_token_share": s, "bag_auc": a}
        for n, s, a in zip(cuts, shares, aucs, strict=True)
    ]


FALLING = [0.99, 0.96, 0.72, 0.51]


CUT = "smaller vocabularies cut the attack and the model's AUC"


@pytest.mark.parametrize(
    ("precision", "model_auc", "verdict", "reason"),
    [
        (FALLING, [0.11, 0.10, 0.08, 0.06], "reproduced", CUT),  # drop 0.05
        # a rise within 0.01 still falls
        ([0.99, 0.96, 0.965, 0.51], [0.70, 0.68, 0.60, 0.64], "reproduced", CUT),
        (
            FALLING,
            [0.70, 0.68, 0.66, 0.651],
            "partly",
            "attack precision falls as in the seed; model AUC drops by 0.049 only "
            "(seed 0.64 -> 0.50, 0.91 -> 0.84)",
        ),
        (
            [0.99, 0.96, 0.975, 0.51],
            [0.70, 0.68, 0.60, 0.50],
            "not reproduced",
            "precision does not fall with N",
        ),
    ],
)
def test_table_7_6_verdict_needs_the_attack_and_the_model_to_fall(
    precision: list[float], model_auc: list[float], verdict: str, reason: str
) -> None:
    records = {"defenses": _vocabulary_record(precision, model_auc)}
    finding = assess(_claim("000 Table 7.6"), records)
    assert (finding.verdict, finding.reason) == (verdict, reason)
    assert finding.fedleak == (
        f"precision {' / '.join(f'{p:.3f}' for p in precision)}; model AUC "
        f"{' / '.join(f'{a:.3f}' for a in model_auc)} at top-N all / 1000 / 300 / 100"
    )
    assert finding.utility == "model acc 0.60-0.90 (plateau not recorded)"
    assert (
        finding.scale
        == "100 training rounds, 480 property rounds, 10 records; bag of words"
    )


def test_table_7_6_reason_gives_the_signal_and_the_long_tail_stand_in() -> None:
    main = _vocabulary_record(FALLING, [0.979, 0.978, 0.974, 0.961])
    main["vocabulary_signal"] = _signal([0.988, 0.988, 0.987, 0.985], 0.622)
    tail = _vocabulary_record(
        [0.98, 0.9, 0.7, 0.5],
        [0.7, 0.66, 0.58, 0.52],
        neutral_head=300,
        attribute_shift=2.0,
        epochs=40,
    )
    tail["vocabulary_signal"] = _signal([0.716, 0.683, 0.595, 0.491], 0.571)
    records = {"defenses": main, "defenses-neutral-head": tail}
    finding = assess(_claim("000 Table 7.6"), records)
    assert finding.verdict == "partly"
    assert finding.reason == (
        "attack precision falls as in the seed; model AUC drops by 0.018 only "
        "(seed 0.64 -> 0.50, 0.91 -> 0.84); a logistic regression on the counts "
        "of the kept venues alone gives AUC 0.988 / 0.988 / 0.987 / 0.985 at top-N "
        "all / 1000 / 300 / 100, the top 100 holding 62% of the check-ins; with "
        "the attribute's signal in the long tail only (the 300 most popular "
        "venues favoured by nobody, preference factor 2, 40 training passes; "
        "model acc 0.60-0.90 (plateau not recorded)): "
        "model AUC 0.700 / 0.660 / 0.580 / 0.520, precision 0.980 / 0.900 / "
        "0.700 / 0.500 at top-N all / 1000 / 300 / 100, a logistic regression on "
        "the counts of the kept venues alone gives AUC 0.716 / 0.683 / 0.595 / "
        "0.491 at top-N all / 1000 / 300 / 100, the top 100 holding 57% of the "
        "check-ins"
    )
    del tail["vocabulary_signal"]
    finding = assess(_claim("000 Table 7.6"), records)
    assert finding.reason.endswith("0.700 / 0.500 at top-N all / 1000 / 300 / 100")
