"""The mi-generative and mi-classifier benchmarks: quick runs, JSON, plots, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from fedleak.attacks.membership.metrics import top_n_accuracy

from fedleak.bench.mi_classifier import run_mi_classifier_bench
from fedleak.bench.mi_generative import knowledge_diagnosis, run_mi_generative_bench
from fedleak.data import skewed_purchases
from fedleak.errors import ConfigError

FEDLEAK = str(Path(sys.executable).with_name("fedleak"))
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

torch.set_num_threads(1)


@pytest.mark.slow
def test_mi_generative_quick_writes_report_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "gen.json"
    report = run_mi_generative_bench(out, quick=True, seed=0)
    saved = json.loads(out.read_text())
    assert saved["schema_version"] == 1 and saved["benchmark"] == "mi-generative"
    assert saved["data"]["dataset"] == "digits" and saved["data"]["members"] == 40
    white = saved["white_box"][0]
    assert [p["epoch"] for p in white["curve"]][-1] == saved["settings"][
        "target_epochs"
    ]
    assert white["final_accuracy"] > 2 * white["baseline"]  # overfitted DCGAN
    assert {r["setting"] for r in saved["auxiliary"]} == {
        "discriminative",
        "generative",
    }
    assert {r["scenario"] for r in saved["auxiliary"]} == {
        "test",
        "train",
        "train+test",
    }
    for run in saved["auxiliary"]:  # the final scores' two views (seed 000 Ch. 6.1.4)
        assert 0.0 <= run["accuracy_all_records"] <= 1.0
        assert 0.0 <= run["unknown_auc"] <= 1.0
        assert (run["rank_known_members"] is None) == (
            run["known_train_fraction"] == 0.0
        )
        assert (run["rank_known_non_members"] is None) == (
            run["known_test_fraction"] == 0.0
        )
    rows = saved["monte_carlo"]["rows"]
    assert {r["distance"] for r in rows} == {"pca", "hog", "chist"}
    median = [r for r in rows if r["heuristic"] == "median" and r["distance"] == "pca"]
    for model in ("vae", "gan"):
        eps, d = (
            next(r for r in median if r["model"] == model and r["variant"] == v)
            for v in ("MC-eps", "MC-d")
        )
        assert (
            eps["single_accuracy"] == d["single_accuracy"]
            and eps["set_accuracy"] == d["set_accuracy"]
        )
    assert 0.0 <= saved["monte_carlo"]["reconstruction"]["set_accuracy"] <= 1.0
    for plot in report["plots"]:  # names of files next to the JSON
        assert Path(plot).name == plot and plot.startswith("gen-")
        assert (out.with_name(plot)).exists()
    assert {Path(p).name for p in report["plots"]} >= {
        "gen-white-box.png",
        "gen-samples.png",
    }


def test_knowledge_diagnosis_ranks_each_group_and_scores_all_records() -> None:
    # 10 records: 4 members (0-3); the attacker knew records 0, 1 (members)
    # and 9 (a non-member)
    scores = np.array([10.0, 9.0, 5.5, 8.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0])
    member = np.arange(10) < 4
    known = np.isin(np.arange(10), [0, 1, 9])
    out = knowledge_diagnosis(scores, member, known, seed=0)
    # ranks (1 = highest): 1.0, 0.9, 0.6, 0.8, 0.2, 0.3, 0.4, 0.5, 0.7, 0.1
    assert out["rank_known_members"] == pytest.approx(0.95)
    assert out["rank_unknown_members"] == pytest.approx(0.7)  # records 2 and 3
    assert out["rank_unknown_non_members"] == pytest.approx(0.42)  # records 4-8
    assert out["rank_known_non_members"] == pytest.approx(0.1)
    # unknown: members 2 (score 5.5), 3 (score 8) against 4-8 (scores 2-6)
    assert out["unknown_auc"] == pytest.approx(9 / 10)
    # top 4 over every record: 0, 1, 3 and 8 -> three members
    assert out["accuracy_all_records"] == pytest.approx(0.75)
    # columns and 0/1 masks read as the flat boolean ones
    column = knowledge_diagnosis(
        scores.reshape(-1, 1),
        member.astype(int).reshape(-1, 1),
        known.astype(int).reshape(-1, 1),
        seed=0,
    )
    assert column == out
    # one unknown member is enough for an AUC; none, or only members, is not
    one = knowledge_diagnosis(scores, member, np.isin(np.arange(10), [0, 1, 2]), 0)
    assert one["unknown_auc"] == 1.0  # record 3 (score 8) above records 4-9
    only_members = knowledge_diagnosis(scores, member, ~member, 0)
    assert only_members["unknown_auc"] is None


def test_knowledge_diagnosis_ties_empty_groups_seeds_and_bad_lengths() -> None:
    member = np.array([True, False, False, True])
    out = knowledge_diagnosis(np.ones(4), member, np.zeros(4, dtype=bool), seed=0)
    assert out["rank_unknown_members"] == out["rank_unknown_non_members"] == 0.625
    assert out["rank_known_members"] is None and out["rank_known_non_members"] is None
    assert out["unknown_auc"] == 0.5
    # every unknown record a non-member: no AUC
    known = member.copy()
    assert knowledge_diagnosis(np.arange(4.0), member, known, 0)["unknown_auc"] is None
    with pytest.raises(ValueError, match="differ in length: 4, 3, 4"):
        knowledge_diagnosis(np.ones(4), member[:3], known, 0)
    # ties at the cut are broken by the seed given
    many = np.arange(60) < 20
    for seed in range(5):
        expected = top_n_accuracy(np.ones(60), many, np.random.default_rng(seed))
        got = knowledge_diagnosis(np.ones(60), many, np.zeros(60, dtype=bool), seed)
        assert got["accuracy_all_records"] == expected


@pytest.mark.slow
def test_mi_classifier_quick_writes_report_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "cls.json"
    report = run_mi_classifier_bench(out, quick=True, seed=0)
    saved = json.loads(out.read_text())
    assert (
        saved["benchmark"] == "mi-classifier"
        and saved["data"]["ldp_randomizer"] == "randomized-response"
    )
    settings = [p["setting"] for p in saved["points"]]
    assert settings == ["original", "ldp", "ldp", "cdp", "cdp"]
    cdp = [p for p in saved["points"] if p["setting"] == "cdp"]
    assert cdp[0]["epsilon"] > cdp[1]["epsilon"] > 0  # more noise, smaller epsilon
    for point in saved["points"]:
        assert 0.0 <= point["precision"] <= 1.0 and 0.0 <= point["auc"] <= 1.0
    assert set(saved["trends"]) == {"ldp", "cdp"}
    assert out.with_name(report["plots"][0]).exists()


def test_skewed_purchases_follows_the_seed_recipe() -> None:
    rng = np.random.default_rng(0)
    x, y = skewed_purchases(3000, num_classes=5, rng=rng)
    assert set(np.unique(y)) == set(range(5))
    assert x.shape == (3000, 600) and set(np.unique(x)) == {0.0, 1.0}
    # 10% indicator bits at 0.8, the rest at 0.2
    assert x.mean() == pytest.approx(0.1 * 0.8 + 0.9 * 0.2, abs=0.01)
    x2, _ = skewed_purchases(3000, num_classes=5, p_noise=0.5, rng=rng)
    assert x2.mean() == pytest.approx(0.1 * 0.8 + 0.9 * 0.5, abs=0.01)
    with pytest.raises(ConfigError):
        skewed_purchases(5, num_classes=1, rng=rng)


@pytest.mark.slow
def test_bench_refuses_bad_input_without_work(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        run_mi_classifier_bench(tmp_path / "x.json", dataset="cifar")
    with pytest.raises(ConfigError):
        run_mi_generative_bench(tmp_path / "missing" / "x.json", quick=True)
    result = subprocess.run(
        [
            FEDLEAK,
            "bench",
            "mi-classifier",
            "--dataset",
            "cifar",
            "--out",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "cifar" in result.stderr + result.stdout
    assert not (tmp_path / "x.json").exists()


def test_cli_refuses_an_unknown_part_before_any_work(tmp_path):
    from cli_process import run_fedleak

    out = tmp_path / "x.json"
    result = run_fedleak(
        "bench", "mi-generative", "--quick", "--part", "bogus", "--out", str(out)
    )
    assert result.returncode == 2
    assert "unknown part" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_cli_refuses_an_unknown_monte_carlo_distance_before_any_work(tmp_path):
    from cli_process import run_fedleak

    out = tmp_path / "x.json"
    result = run_fedleak(
        "bench", "mi-generative", "--quick", "--mc-distance", "ssim", "--out", str(out)
    )
    assert result.returncode == 2
    assert "Monte Carlo distance(s) ['ssim']" in result.stderr
    assert "'pca', 'hog', 'chist', 'pixels'" in result.stderr
    assert not out.exists()


def test_cli_overrides_epochs_trials_and_distances_of_the_scale(tmp_path):
    from cli_process import run_fedleak

    out = tmp_path / "mc.json"
    result = run_fedleak(
        "bench", "mi-generative", "--quick", "--target-epochs", "2",
        "--mi-trials", "3", "--mc-distance", "hog", "--part", "monte-carlo",
        "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    saved = json.loads(out.read_text())
    assert saved["settings"]["target_epochs"] == 2
    assert saved["white_box"][0]["curve"][-1]["epoch"] == 2
    assert saved["settings"]["mi_trials"] == saved["monte_carlo"]["trials"] == 3
    assert {r["distance"] for r in saved["monte_carlo"]["rows"]} == {"hog"}
    # the rest of the quick scale is kept
    assert saved["settings"]["pool_size"] == 400
    assert saved["parts"] == ["white-box", "monte-carlo"]


def test_scales_are_named_and_checked_before_any_work(tmp_path: Path) -> None:
    from fedleak.bench.mi_generative import CPU, FULL, FULL_WIDE, QUICK, SCALES

    assert SCALES == {
        "quick": QUICK,
        "cpu": CPU,
        "thesis": FULL,
        "thesis-wide": FULL_WIDE,
    }
    # the default (cpu) is Fashion-MNIST, smaller than the thesis scale
    assert CPU.dataset == FULL.dataset == "fashion-mnist"
    assert CPU.pool_size < FULL.pool_size
    assert CPU.gan_discriminator_channels < FULL.gan_discriminator_channels
    # the seed's targets are fixed at epoch 400 (seed 000 Ch. 6.2.4)
    assert FULL.target_epochs == FULL_WIDE.target_epochs == 400
    # the wide scale differs from the thesis scale in the DCGAN's widths only
    # (and leaves out the conditional target)
    assert (FULL_WIDE.gan_generator_channels, FULL_WIDE.gan_discriminator_channels) == (
        64,
        128,
    )
    assert (
        replace(
            FULL_WIDE,
            gan_generator_channels=FULL.gan_generator_channels,
            gan_discriminator_channels=FULL.gan_discriminator_channels,
            conditional=True,
        )
        == FULL
    )
    out = tmp_path / "x.json"
    with pytest.raises(ConfigError, match=r"unknown scale 'huge'.*thesis"):
        run_mi_generative_bench(out, scale="huge")
    with pytest.raises(ConfigError, match="--quick contradicts --scale thesis"):
        run_mi_generative_bench(out, quick=True, scale="thesis")
    assert not out.exists()


@pytest.mark.parametrize(
    ("record", "scale"),
    [
        ("mi-generative-fashion-mnist", "cpu"),
        ("mi-generative-fashion-mnist-thesis", "thesis"),
        ("mi-generative-fashion-mnist-thesis-wide", "thesis-wide"),
        ("mi-generative-fashion-mnist-thesis-wide-aux", "thesis-wide"),
    ],
)
def test_landed_records_hold_their_named_scales_settings(
    record: str, scale: str
) -> None:
    """A record named after a scale was run with exactly that scale's settings."""
    from fedleak.bench.mi_generative import SCALES

    saved = json.loads((BENCHMARKS / f"{record}.json").read_text(encoding="utf-8"))
    assert saved["scale"] == scale
    expected = json.loads(json.dumps(asdict(SCALES[scale])))  # tuples -> lists
    assert saved["settings"] == expected
    for plot in saved["plots"]:
        assert (BENCHMARKS / plot).is_file(), plot
