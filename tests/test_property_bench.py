"""``fedleak bench property``: the CLI, and the quick settings end to end."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
from cli_process import run_fedleak
from fedleak.attacks.property.scoring import analyse_run, load_truth, phase_diagnostics
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from fedleak.bench.property import run_property_bench
from fedleak.cli import app
from fedleak.data import find_data_dir
from fedleak.errors import ConfigError, DataError
from fedleak.experiments.config import load_config

EXPERIMENTS = [
    "two-party",
    "fraction",
    "rounds",
    "active",
    "multi-party",
    "model-averaging",
    "join",
]


def test_every_experiment_has_a_valid_config():
    for name in EXPERIMENTS:
        config = load_config(f"sim_configs/property_{name.replace('-', '_')}.toml")
        assert config.adversary.kind in ("passive-property", "active-property")
        assert config.data.partition == "property"


def test_cli_lists_the_experiments_and_rejects_unknown_ones(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "property", "--help"])
    assert result.exit_code == 0
    # the help's table is cut to the terminal's width, so the list of
    # experiments is checked in the (unwrapped) error message below
    bad = run_fedleak("bench", "property", "nope", "--out", str(tmp_path / "x.json"))
    assert bad.returncode == 2
    assert "unknown property experiment" in bad.stderr
    assert "Traceback" not in bad.stderr
    for name in [*EXPERIMENTS, "text"]:
        assert repr(name) in bad.stderr
    with pytest.raises(ConfigError, match="two-party"):
        run_property_bench("nope", tmp_path / "x.json")


def test_set_overrides_every_run_but_not_the_keys_the_bench_sets(tmp_path, monkeypatch):
    import fedleak.experiments.runner as runner

    seen = []

    class Stop(Exception):
        pass

    def first_run(config, out, verbose):
        seen.append(config)
        raise Stop

    monkeypatch.setattr(runner, "run_experiment", first_run)
    asked = [
        "adversary.property.aux_records=held-out",
        "client.batch_size=16",
        "federation.num_clients=9",  # the bench's K
        "seed=4",  # the bench's seed
        "rounds=3",  # the bench's --rounds
    ]
    with pytest.raises(Stop):
        run_property_bench(
            "model-averaging", tmp_path / "m.json", rounds=7, overrides=asked
        )
    (config,) = seen
    assert config.adversary.property.aux_records == "held-out"
    assert config.client.batch_size == 16
    assert (config.federation.num_clients, config.seed, config.rounds) == (3, 0, 7)
    # a bad key or value fails before any run, naming it
    with pytest.raises(ConfigError, match=r"adversary\.property\.aux_records"):
        run_property_bench(
            "model-averaging",
            tmp_path / "bad.json",
            overrides=["adversary.property.aux_records=fresh"],
        )
    with pytest.raises(ConfigError, match="the text experiment has none"):
        run_property_bench("text", tmp_path / "t.json", overrides=["seed=1"])
    assert len(seen) == 1 and not (tmp_path / "bad-runs").exists()
    # --participants: the K values of model-averaging, checked first as well
    with pytest.raises(Stop):
        run_property_bench("model-averaging", tmp_path / "k.json", participants=[4])
    assert seen[-1].federation.num_clients == 4
    for experiment, ks in (("model-averaging", [3, 1]), ("join", [3])):
        with pytest.raises(
            ConfigError, match=rf"got {re.escape(str(ks))} for {experiment}$"
        ):
            run_property_bench(experiment, tmp_path / "k.json", participants=ks)
    assert len(seen) == 2
    bad = run_fedleak(
        "bench", "property", "join", "--set", "adversary.property.pooling=min",
        "--out", str(tmp_path / "cli.json"),
    )  # fmt: skip
    assert bad.returncode == 2 and "adversary.property.pooling" in bad.stderr
    assert "Traceback" not in bad.stderr


def _saved_run(folder, config, checkpoint=True):
    """A run folder as the bench leaves it: its config.toml and a checkpoint."""
    from fedleak.runtime.run_dir import write_config

    folder.mkdir(parents=True)
    write_config(folder / "config.toml", config)
    if checkpoint:
        (folder / "checkpoint.npz").write_bytes(b"")
    return folder


def test_only_a_shorter_run_of_the_same_experiment_is_extended(tmp_path):
    from fedleak.bench.property import _shorter_run

    path = "sim_configs/property_model_averaging.toml"
    asked = load_config(path, ["rounds=12", "seed=0"])
    same = _saved_run(tmp_path / "same", load_config(path, ["rounds=8", "seed=0"]))
    assert _shorter_run(same, asked) == 8
    assert _shorter_run(same, load_config(path, ["rounds=8", "seed=0"])) == 8
    longer = _saved_run(tmp_path / "longer", load_config(path, ["rounds=20", "seed=0"]))
    assert _shorter_run(longer, asked) is None
    other = _saved_run(tmp_path / "other", load_config(path, ["rounds=8", "seed=1"]))
    assert _shorter_run(other, asked) is None
    bare = _saved_run(
        tmp_path / "bare", load_config(path, ["rounds=8", "seed=0"]), checkpoint=False
    )
    assert _shorter_run(bare, asked) is None
    assert _shorter_run(tmp_path / "missing", asked) is None
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.toml").write_text("rounds = 'many'\n")
    (broken / "checkpoint.npz").write_bytes(b"")
    assert _shorter_run(broken, asked) is None


def test_an_extension_stopped_part_way_goes_on_not_read_as_done(tmp_path, monkeypatch):
    import fedleak.experiments.runner as runner
    from fedleak.bench.property import _extend

    path = "sim_configs/property_model_averaging.toml"
    asked = load_config(path, ["rounds=8", "seed=0"])
    # config.toml already says 8 rounds; results.json is the 5-round run's
    run = _saved_run(tmp_path / "run", asked)
    done = {"status": "completed", "completed_rounds": 5, "resumed_from": None}
    (run / "results.json").write_text(json.dumps(done))
    resumed = []
    finished = {"status": "completed", "completed_rounds": 8, "resumed_from": 5}

    def resume(run_dir, rounds, verbose):
        resumed.append((run_dir, rounds))
        return SimpleNamespace(results=finished)

    monkeypatch.setattr(runner, "resume_experiment", resume)
    results, ran = _extend(run, asked, 8, verbose=False)
    assert resumed == [(run, 8)] and ran
    assert results["completed_rounds"] == 8 and results["extended_from"] == 8
    # once the extension completed, the run is only read
    (run / "results.json").write_text(json.dumps(finished))
    results, ran = _extend(run, asked, 8, verbose=False)
    assert len(resumed) == 1 and not ran
    assert results["extended_from"] == 5  # the round its last session went on from
    # an unfinished run at the asked rounds goes on as well
    (run / "results.json").write_text(json.dumps({**finished, "status": "interrupted"}))
    assert _extend(run, asked, 8, verbose=False)[1]
    assert len(resumed) == 2


def _fashion_mnist() -> None:
    try:
        find_data_dir("fashion-mnist")
    except DataError:
        pytest.skip(
            "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
        )


@pytest.mark.slow
@pytest.mark.needs_fashion_mnist
def test_extended_runs_score_as_runs_started_with_their_rounds(tmp_path):
    _fashion_mnist()
    fresh, grown = tmp_path / "fresh.json", tmp_path / "grown.json"
    run = {"quick": True, "properties": ["inverted"]}
    report = run_property_bench("two-party", fresh, rounds=8, **run)
    run_property_bench("two-party", grown, rounds=5, **run)
    extended = run_property_bench("two-party", grown, rounds=8, extend=True, **run)
    (a,), (b,) = report["runs"], extended["runs"]
    assert a["extended_from"] is None and b["extended_from"] == 5
    assert b["rounds"] == 8
    assert b["series"] == a["series"] and b["auc"] == a["auc"]
    # the same test accuracy wherever both evaluated; the 5-round run also
    # evaluated its last round, off the every-4 schedule, and keeps it
    curves = [
        dict(zip(r["accuracy"]["rounds"], r["accuracy"]["test_accuracy"], strict=True))
        for r in (a, b)
    ]
    fresh_curve, grown_curve = curves
    assert set(grown_curve) == {*fresh_curve, 5}
    assert {r: grown_curve[r] for r in fresh_curve} == fresh_curve
    again = run_property_bench("two-party", grown, rounds=8, extend=True, **run)
    assert again["runs"][0]["series"] == a["series"]  # read, not run again
    assert again["runs"][0]["extended_from"] == 5
    # a run only read keeps its last session's simulation time
    read = json.loads(
        (tmp_path / again["runs"][0]["run_dir"] / "results.json").read_text()
    )
    assert again["runs"][0]["wall_s"] == read["timing"]["total_s"] > 0.0


@pytest.mark.slow
@pytest.mark.needs_fashion_mnist
def test_quick_two_party_writes_json_plots_and_rescorable_runs(tmp_path):
    _fashion_mnist()
    out = tmp_path / "two.json"
    # a property other than the default watermark; no secure-aggregation run:
    # two clients cannot be securely aggregated (each learns the other's input)
    report = run_property_bench(
        "two-party", out, quick=True, rounds=8, properties=["inverted"]
    )
    saved = json.loads(out.read_text())
    assert saved["schema_version"] == 1 and saved["experiment"] == "two-party"
    assert saved["scale"] == {
        "rounds": 8,
        "thesis_iterations": 3000,
        "factor": 8 / 3000,
    }
    labels = [r["label"] for r in saved["runs"]]
    assert labels == ["inverted"]
    assert "secagg_property" not in saved["summary"]
    assert "watermark_auc" not in saved["summary"]
    for row in saved["runs"]:
        assert len(row["series"]["scores"]) == 7  # rounds 1..7 observed in 2..8
        # the recorded AUC is scikit-learn's ROC AUC of the recorded scores
        # against the target's truth (property in the round's batch or not)
        truth = load_truth(tmp_path / row["run_dir"] / "target" / "truth.jsonl")
        labels = [1 if truth[r] > 0 else 0 for r in row["series"]["rounds"]]
        assert row["auc"] == pytest.approx(
            roc_auc_score(labels, row["series"]["scores"]), abs=1e-12
        )
        # the observations on disk re-score to the recorded AUC
        assert analyse_run(tmp_path / row["run_dir"])["auc"] == row["auc"]
    for plot in report["plots"]:  # names of files next to the JSON
        assert plot.endswith(".png") and "/" not in plot
        assert (tmp_path / plot).stat().st_size > 0


@pytest.mark.slow
def test_quick_text_experiment_reports_top_words(tmp_path):
    from fedleak.data.text import find_fortunes_dir

    try:
        find_fortunes_dir()
    except DataError:
        pytest.skip("Debian's fortunes package is not installed")
    out = tmp_path / "text.json"
    report = run_property_bench("text", out, quick=True, rounds=12)
    row = report["runs"][0]
    assert row["params"]["property"] == "startrek"
    assert len(row["top_words"]) == 5
    assert report["summary"]["top_words"]["startrek"] == row["top_words"]
    assert report["config_file"] is None and report["scale"]["rounds"] == 12
    assert (tmp_path / "text-text-words.png").is_file()


@pytest.mark.slow
@pytest.mark.needs_fashion_mnist
def test_quick_rounds_adds_a_run_whose_target_never_has_the_property(tmp_path):
    """Fig. 7.5(b)'s third classifier: a property absent from the target's data."""
    _fashion_mnist()
    out = tmp_path / "rounds.json"
    report = run_property_bench("rounds", out, quick=True, rounds=12)
    runs = {r["label"]: r for r in report["runs"]}
    assert set(runs) == {"window", "absent"}
    truth = load_truth(tmp_path / runs["absent"]["run_dir"] / "target" / "truth.jsonl")
    assert truth and all(v == 0 for v in truth.values())  # never in a batch
    window = load_truth(tmp_path / runs["window"]["run_dir"] / "target" / "truth.jsonl")
    assert any(v > 0 for v in window.values())
    absent = report["summary"]["absent"]
    scores = runs["absent"]["series"]["scores"]
    assert absent["median_score"] == pytest.approx(float(np.median(scores)))
    assert absent["max_score"] == max(scores)


@pytest.mark.parametrize(
    ("rounds", "window"),
    [(None, None), (2500, [500, 1500]), (250, [50, 150]), (1000, [200, 600])],
)
def test_fig_7_5_window_keeps_the_thesis_fractions_of_a_shorter_run(
    rounds, window, tmp_path
):
    from fedleak.bench.property import _Settings, _window_overrides

    s = _Settings(tmp_path / "r.json", False, 0, rounds, None, None, False, print)
    expected = [] if window is None else [f"target.property_rounds={window}"]
    assert _window_overrides(s) == expected


def test_fig_7_5_window_refuses_a_run_too_short_for_it(tmp_path):
    from fedleak.bench.property import _Settings, _window_overrides

    s = _Settings(tmp_path / "r.json", False, 0, 4, None, None, False, print)
    with pytest.raises(ConfigError, match="--rounds 4 is too few"):
        _window_overrides(s)


def test_window_aucs_compare_the_trials_within_each_window_of_rounds():
    from fedleak.bench.property import window_aucs

    def row(rounds, scores):
        return {"series": {"rounds": rounds, "scores": scores}}

    # rounds 1-6 in three windows: the property trial scores higher in the
    # first, lower in the second, the same in the third
    rows = [
        row([1, 2, 3, 4, 5, 6], [0.9, 0.7, 0.1, 0.3, 0.5, 0.5]),
        row([1, 2, 3, 4, 5, 6], [0.2, 0.4, 0.6, 0.8, 0.5, 0.5]),
    ]
    labels = np.asarray([True, False])
    assert window_aucs(rows, labels, 3) == [
        {"first_round": 1, "last_round": 2, "whole_dataset_auc": 1.0},
        {"first_round": 3, "last_round": 4, "whole_dataset_auc": 0.0},
        {"first_round": 5, "last_round": 6, "whole_dataset_auc": 0.5},
    ]
    # unequal windows: seven rounds in three give 3 / 2 / 2; a trial without
    # a score in a window gives no AUC there; the mean, not the median, counts
    rows = [
        row([1, 2, 3, 4, 5, 6, 7], [0.0, 0.0, 0.9, 0.9, 0.9, 0.9, 0.9]),
        row([1, 2, 4, 5], [0.2, 0.2, 0.1, 0.1]),
    ]
    found = window_aucs(rows, labels, 3)
    assert [(w["first_round"], w["last_round"]) for w in found] == [
        (1, 3),
        (4, 5),
        (6, 7),
    ]
    assert found[0]["whole_dataset_auc"] == 1.0  # mean 0.3 > 0.2, median 0 < 0.2
    assert found[1]["whole_dataset_auc"] == 1.0
    assert found[2]["whole_dataset_auc"] is None
    # more windows than rounds: empty windows are left out
    assert len(window_aucs(rows[:1] * 2, labels, 10)) == 7


@pytest.mark.slow
@pytest.mark.needs_fashion_mnist
def test_quick_model_averaging_compares_trials_per_window_with_diagnostics(tmp_path):
    """Fig. 7.8: one property and one control trial, their windows and diagnostics."""
    _fashion_mnist()
    out = tmp_path / "averaging.json"
    report = run_property_bench("model-averaging", out, quick=True, rounds=10)
    assert report["overrides"] == []
    runs = {r["label"]: r for r in report["runs"]}
    assert set(runs) == {"K3-property-0", "K3-control-0"}
    summary = report["summary"]
    windows = summary["K3"]["auc_by_window"]
    scored = runs["K3-property-0"]["series"]["rounds"]
    assert len(windows) == 5 and windows[0]["first_round"] == min(scored)
    assert windows[-1]["last_round"] == max(scored) >= 8
    for window in windows:
        means = [
            np.mean(
                [
                    y
                    for x, y in zip(*r["series"].values(), strict=True)
                    if window["first_round"] <= x <= window["last_round"]
                ]
            )
            for r in (runs["K3-property-0"], runs["K3-control-0"])
        ]
        auc = 1.0 if means[0] > means[1] else 0.0 if means[0] < means[1] else 0.5
        assert window["whole_dataset_auc"] == auc
    for label, row in runs.items():
        assert summary["diagnostics"][label] == phase_diagnostics(
            tmp_path / row["run_dir"], normalize=True
        )
        assert set(summary["diagnostics"][label]) == {"2"}  # two others, K = 3
    # refitted on the first 2, 4, ..., 10 rounds' emulations
    fits = summary["K3"]["auc_by_fit_rounds"]
    assert [f["fit_last_round"] for f in fits] == [2, 4, 6, 8, 10]
    assert fits[-1]["whole_dataset_auc"] == summary["K3"]["whole_dataset_auc"]
    for fit in fits:
        means = [
            analyse_run(
                tmp_path / runs[label]["run_dir"],
                normalize=True,
                fit_until=fit["fit_last_round"],
            )["dataset_score"]
            for label in ("K3-property-0", "K3-control-0")
        ]
        auc = 1.0 if means[0] > means[1] else 0.0 if means[0] < means[1] else 0.5
        assert fit["whole_dataset_auc"] == auc


@pytest.mark.slow
@pytest.mark.needs_fashion_mnist
def test_quick_join_scores_a_control_run_whose_target_joins_without_it(tmp_path):
    """Fig. 7.9: one classifier per observed count, and a control run scored alike."""
    _fashion_mnist()
    out = tmp_path / "join.json"
    report = run_property_bench("join", out, quick=True, rounds=10)
    runs = {r["label"]: r for r in report["runs"]}
    assert set(runs) == {"join", "control"}
    assert report["classifier"]["by_participants"] is True
    control = load_truth(
        tmp_path / runs["control"]["run_dir"] / "target" / "truth.jsonl"
    )
    assert control and all(v == 0 for v in control.values())
    summary = report["summary"]
    for prefix, label in (("", "join"), ("control_", "control")):
        xs, ys = runs[label]["series"]["rounds"], runs[label]["series"]["scores"]
        after = [y for x, y in zip(xs, ys, strict=True) if x >= summary["join_round"]]
        assert summary[f"{prefix}median_score_after"] == pytest.approx(
            float(np.median(after))
        )
    assert summary["participants_before"] == 2 and summary["participants_after"] == 3
    # the emulated vs observed diagnostics, per run and count, as the scorer gives
    for label in ("join", "control"):
        assert summary["diagnostics"][label] == phase_diagnostics(
            tmp_path / runs[label]["run_dir"], normalize=True
        )
        assert set(summary["diagnostics"][label]) == {"1", "2"}
    results = json.loads(
        (tmp_path / runs["join"]["run_dir"] / "results.json").read_text("utf-8")
    )
    (last_before,) = [
        r for r in results["rounds"] if r["round"] == summary["join_round"] - 1
    ]
    assert summary["train_loss_before_join"] == last_before["train"]["train-loss"]
