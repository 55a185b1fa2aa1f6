"""``fedleak bench dpgm --quick`` writes the four figure analogues."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedleak.cli import app


@pytest.mark.slow
def test_quick_bench_writes_json_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "dpgm.json"
    result = CliRunner().invoke(app, ["bench", "dpgm", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["schema_version"] == 1
    assert set(report["plots"]) == {"fig5_2", "fig5_3", "fig5_4", "fig5_5", "fig5_6"}
    for name in report["plots"].values():
        assert (tmp_path / name).stat().st_size > 1000
    f52 = report["fig_5_2"]
    for curves in f52["epsilon"].values():
        for eps in curves.values():
            assert all(a <= b + 1e-12 for a, b in itertools.pairwise(eps))
    assert len(report["fig_5_3"]["accuracy"]["standard_dp_kmeans"]) == len(
        report["fig_5_3"]["epsilons"]
    )
    cdr = report["fig_5_5"]
    assert cdr["queries"] == 1000
    run = cdr["dpgm"]["runs"]["k=1,eps=1"]
    assert run["epsilon_spent"] <= 1.0
    assert set(run["all"]["groups"]) == {"20%", "40%", "60%", "80%", "100%"}
    assert "1" in cdr["mwem"]["runs"]
    acceptance = report["acceptance"]
    assert set(acceptance) == {
        "dpgm_below_mwem_at_eps1_cdr",
        "kernel_kmeans_beats_standard_below_eps_0_5",
    }
    # the verdicts are the recorded figures compared, not free-standing flags
    mwem_run = cdr["mwem"]["runs"]["1"]
    assert set(acceptance["dpgm_below_mwem_at_eps1_cdr"]) == {"all", "any"}
    for mode, below in acceptance["dpgm_below_mwem_at_eps1_cdr"].items():
        assert below is (run[mode]["mean"] < mwem_run[mode]["mean"])
    f53 = report["fig_5_3"]
    small = [i for i, e in enumerate(f53["epsilons"]) if e < 0.5]
    best_kernel = [
        max(acc[i] for acc in f53["accuracy"]["kernel_rff"].values())
        for i in range(len(f53["epsilons"]))
    ]
    standard = f53["accuracy"]["standard_dp_kmeans"]
    assert acceptance["kernel_kmeans_beats_standard_below_eps_0_5"] is (
        bool(small) and all(best_kernel[i] > standard[i] for i in small)
    )
    assert "written:" in result.output


@pytest.mark.slow
def test_sample_quality_scores_every_model_against_held_out_records(
    tmp_path: Path,
) -> None:
    out = tmp_path / "new-folder" / "dpgm-samples.json"  # the folder is created
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "dpgm",
            "--sample-quality",
            "--quick",
            "--records",
            "1200",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    fig = report["fig_5_4"]
    assert fig["epochs"] == 1
    assert fig["records"] == 1200
    assert fig["batch_size"] == 32  # a sixtieth of 1,200 is below the floor
    floor = fig["quality"]["real_vs_real"]
    assert set(fig["models"]) == {
        "vae_mixture",
        "rbm_mixture",
        "single_vae",
        "vae_mixture_nonprivate",  # the same mixtures nearly without DP noise
        "rbm_mixture_nonprivate",
    }
    assert fig["models"]["vae_mixture_nonprivate"]["epsilon"] > 1e6
    for model in fig["models"].values():
        mmd = model["sample_mmd2"]
        assert mmd["gamma"] == floor["gamma"]  # one kernel for every model
        # a 1-epoch generator is further from the real records than they are
        # from each other, by many standard errors
        assert mmd["mmd2"] - floor["mmd2"] > 4 * (mmd["se"] + floor["se"])
    assert (out.parent / report["plots"]["fig5_4"]).stat().st_size > 1000


@pytest.mark.in_default_run  # no training: refused before any work
def test_records_go_with_sample_quality_only(tmp_path: Path) -> None:
    out = tmp_path / "dpgm.json"
    result = CliRunner().invoke(
        app, ["bench", "dpgm", "--records", "1000", "--out", str(out)]
    )
    assert result.exit_code == 2
    assert "--records goes with --sample-quality" in result.output
    assert not out.exists()


def test_more_images_than_the_data_set_holds_are_refused() -> None:
    from fedleak.bench.dpgm import _binary_images
    from fedleak.errors import ConfigError

    with pytest.raises(ConfigError, match=r"10,000,000 training images asked of"):
        _binary_images(False, print, 10_000_000)
    _, x, y, _ = _binary_images(True, print, 500)
    assert x.shape[0] == 500 == y.shape[0]
    assert set(np.unique(x)) <= {0.0, 1.0}
