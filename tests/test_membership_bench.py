"""The quick settings of ``fedleak bench membership`` and ``fedleak bench defenses``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedleak.bench.defenses import run_defenses_bench
from fedleak.cli import app

pytestmark = pytest.mark.slow


def test_bench_membership_quick_writes_table_7_2(tmp_path: Path) -> None:
    out = tmp_path / "membership.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "membership",
            "--quick",
            "--dataset",
            "checkins",
            "--batch-size",
            "20",
            "--batch-size",
            "160",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["schema_version"] >= 1 and report["quick"] is True
    rows = report["rows"]
    assert [r["batch_size"] for r in rows] == [20, 160]
    assert all(r["recall"] == 1.0 for r in rows)
    assert rows[0]["precision"] > rows[1]["precision"]
    # the lowest precision its split allows, below every batch size's
    floor = report["setups"]["checkins"]["precision_floor"]
    assert 0.5 < floor <= rows[1]["precision"]
    assert report["recall_always_one"] is True
    assert (tmp_path / "membership-precision.png").is_file()
    assert "written:" in result.output


def test_bench_defenses_quick_reports_attack_utility_and_epsilon(
    tmp_path: Path,
) -> None:
    out = tmp_path / "defenses.json"
    # at the full run's 50% home check-ins the quick data's property is
    # saturated (AUC 1.0): 20% leaves the attack room to move
    report = run_defenses_bench(
        out,
        tables=("share_fraction", "participant_dp"),
        quick=True,
        seed=0,
        home_fraction=0.2,
    )
    assert json.loads(out.read_text())["rows"] == report["rows"]
    rows = {(r["table"], r["setting"]): r for r in report["rows"]}
    assert set(rows) == {
        ("share_fraction", 0.01),
        ("share_fraction", 1.0),
        ("participant_dp", 1.0),
    }
    full = rows["share_fraction", 1.0]
    assert full["membership_recall"] == 1.0
    # the undefended model is trained: clearly better than chance
    assert full["model_accuracy"] > 0.75 and full["model_auc"] > 0.9
    # the property is latent: visible but not saturated
    assert 0.7 < full["property_auc"] < 1.0
    shared = rows["share_fraction", 0.01]
    assert shared["property_auc"] < full["property_auc"]
    assert shared["membership_recall"] < 0.5
    dp = rows["participant_dp", 1.0]
    # participant-level DP trains four times the passes (its plateau comes later)
    assert dp["rounds"] == 4 * full["rounds"]
    assert report["setup"]["participant_dp_epochs"] == 4 * report["setup"]["epochs"]
    # noise on every coordinate: every row moves, every record looks like a member
    assert dp["membership_precision"] == pytest.approx(0.5)
    assert dp["participant_epsilon"] > 0 and dp["record_epsilon"] is None
    assert np.isfinite(dp["model_auc"])
    # the property simulation's model diverges under this noise: no AUC is
    # scored from NaN updates, and the row says why
    assert dp["property_auc"] is None and "diverged" in dp["property_note"]
    assert dp["property_auc_whole_update"] is None
    # the whole-update attack ran on the same rounds: it sees the other
    # layers' updates, which a 1% top-k share cuts
    assert shared["property_auc_whole_update"] < full["property_auc_whole_update"]
    for row in report["rows"]:
        if row is not dp:
            assert 0.0 <= row["property_auc"] <= 1.0
            assert 0.5 < row["property_auc_whole_update"] <= 1.0
            assert row["property_note"] is None
        assert row["property_auc_dp_aware"] is None  # record-level DP rows only
        assert row["property_auc_whole_update_dp_aware"] is None
        assert "model_auc" in row and "model_accuracy" in row
        # each row's model keeps its test-accuracy curve, ending at its accuracy
        curve = row["accuracy_curve"]
        assert curve["rounds"][-1] == row["rounds"]
        assert curve["test_accuracy"][-1] == row["model_accuracy"]
        assert isinstance(curve["plateau"], bool)
        # and the property run's own model its curve (none when it diverged)
        prop = row["property_accuracy_curve"]
        if row is dp:
            assert prop is None
        else:
            assert prop["rounds"][-1] == row["property_rounds"]
            assert row["property_rounds"] == report["setup"]["property_rounds"]
            assert 0.0 < prop["test_accuracy"][-1] <= 1.0
    assert "random forest" in report["property_features_whole_update"]
    # Table 7.5's denominator: a batch's gradient is partly zero (the rows
    # of absent words), so shares above its density drop nothing
    assert 0.05 < report["setup"]["update_density"] < 0.95
    assert (tmp_path / "defenses-tables.png").is_file()


@pytest.mark.in_default_run  # seconds: no simulation
def test_update_density_counts_the_non_zero_share_of_a_batch_gradient() -> None:
    from fedleak.attacks.membership.simulation import MembershipSetup

    from fedleak.bench.defenses import _dataset, _update_density

    data, _ = _dataset(True, 0)
    setup = MembershipSetup(
        model="text-cnn", embedding_dim=8, cnn_hidden=None, batch_size=10
    )
    density = _update_density(data, setup, 0)
    # every layer but the embedding matrix is dense; of the matrix a batch
    # touches only its words' rows
    assert 0.0 < density < 1.0
    assert density == _update_density(data, setup, 0)  # seeded
    bigger = MembershipSetup(
        model="text-cnn", embedding_dim=8, cnn_hidden=None, batch_size=40
    )
    assert _update_density(data, bigger, 0) > density  # more words, more rows


def _stubbed_row(table: str, setting: object) -> dict[str, object]:
    """A defenses-bench row without its simulation."""
    return {
        "table": table,
        "setting": setting,
        "membership_precision": None,
        "membership_recall": 0.0,
        "property_auc": 0.6,
        "property_auc_whole_update": 0.7,
        "model_accuracy": 0.8,
        "model_auc": 0.9,
        "record_epsilon": None,
        "participant_epsilon": None,
        "wall_s": 1.0,
    }


@pytest.mark.in_default_run  # seconds: the rows are stubbed
def test_bench_defenses_keeps_the_rows_measured_before_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedleak.bench.defenses as bench

    calls: list[tuple[str, object]] = []

    def row(table, setting, *_args, **_kwargs):
        calls.append((table, setting))
        if len(calls) == 2:
            raise RuntimeError("the second row fails")
        return _stubbed_row(table, setting)

    monkeypatch.setattr(bench, "_row", row)
    out = tmp_path / "defenses.json"
    with pytest.raises(RuntimeError, match="second row"):
        bench.run_defenses_bench(out, tables=("share_fraction",), quick=True)
    kept = json.loads(out.read_text())
    assert kept["complete"] is False
    assert [(r["table"], r["setting"]) for r in kept["rows"]] == [calls[0]]
    assert kept["setup"]["property_rounds"] == 30


def _share_table_cli(out: Path, *options: str) -> None:
    """Run ``fedleak bench defenses --quick --table share_fraction`` in process."""
    command = ["bench", "defenses", "--quick", "--table", "share_fraction"]
    result = CliRunner().invoke(app, [*command, *options, "--out", str(out)])
    assert result.exit_code == 0, result.output


@pytest.mark.in_default_run  # seconds: the rows are stubbed
def test_bench_defenses_home_fraction_sets_the_property_strength(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedleak.bench.defenses as bench

    seen: list[float] = []
    dataset = bench._dataset

    def spy(quick: bool, seed: int, stand_in: bench.StandIn):
        seen.append(stand_in.home_fraction)
        return dataset(quick, seed, stand_in)

    monkeypatch.setattr(bench, "_dataset", spy)
    monkeypatch.setattr(
        bench, "_row", lambda table, setting, *_a, **_k: _stubbed_row(table, setting)
    )
    out = tmp_path / "strong.json"
    _share_table_cli(out, "--home-fraction", "0.35")
    assert seen == [0.35]
    assert json.loads(out.read_text())["setup"]["home_fraction"] == 0.35
    # the fraction reaches the generator: more home check-ins, other records
    weak, _ = dataset(True, 0, bench.StandIn(0.2))
    strong, _ = dataset(True, 0, bench.StandIn(0.35))
    assert weak.x_train.shape[1:] == strong.x_train.shape[1:]
    assert not np.array_equal(weak.x_train, strong.x_train)


@pytest.mark.in_default_run  # seconds: the rows are stubbed
def test_bench_defenses_stand_in_options_reach_the_generator_and_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedleak.bench.defenses as bench
    import fedleak.data.checkins as checkins

    seen: list[tuple[float, int]] = []
    rounds: list[int] = []
    generate = checkins.synthetic_checkins

    def spy(*args, **kwargs):
        seen.append((kwargs["attribute_shift"], kwargs["neutral_head"]))
        return generate(*args, **kwargs)

    monkeypatch.setattr(checkins, "synthetic_checkins", spy)

    def row(table, setting, *_a, **kwargs):
        rounds.append(kwargs["property_rounds"])
        return _stubbed_row(table, setting)

    monkeypatch.setattr(bench, "_row", row)
    out = tmp_path / "tail.json"
    command = ["bench", "defenses", "--quick", "--table", "vocabulary"]
    options = ["--attribute-shift", "2.5", "--neutral-head", "40", "--epochs", "3"]
    options += ["--property-rounds", "64"]
    result = CliRunner().invoke(app, [*command, *options, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert seen == [(2.5, 40)]
    assert rounds and set(rounds) == {64}
    record = json.loads(out.read_text())
    assert record["setup"]["epochs"] == 3
    assert record["setup"]["property_rounds"] == 64
    assert (record["setup"]["attribute_shift"], record["setup"]["neutral_head"]) == (
        2.5,
        40,
    )
    # the vocabulary table's cuts, measured on the run's own data
    cuts = bench._settings(True, record["setup"]["vocab_size"])["vocabulary"]
    signal = record["vocabulary_signal"]
    assert [s["top_n"] for s in signal] == cuts
    assert signal[0]["kept_token_share"] == 1.0 > signal[-1]["kept_token_share"]
    assert all(0.0 <= s["bag_auc"] <= 1.0 for s in signal)
    # without the vocabulary table there is nothing to measure it for
    bench.run_defenses_bench(tmp_path / "dropout.json", tables=("dropout",), quick=True)
    assert "vocabulary_signal" not in json.loads(
        (tmp_path / "dropout.json").read_text()
    )


@pytest.mark.in_default_run  # no simulation: the values are refused first
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attribute_shift": 0.5}, "attribute_shift must be >= 1, got 0.5"),
        ({"attribute_shift": math.nan}, "attribute_shift must be >= 1, got nan"),
        ({"neutral_head": -1}, "neutral_head must be >= 0, got -1"),
        ({"epochs": 0}, "epochs must be >= 1, got 0"),
        ({"property_rounds": 1}, "property_rounds must be >= 2, got 1"),
    ],
)
def test_bench_defenses_refuses_a_stand_in_out_of_range(
    tmp_path: Path, options: dict[str, float], message: str
) -> None:
    from fedleak.errors import ConfigError

    out = tmp_path / "defenses.json"
    with pytest.raises(ConfigError, match=message):
        run_defenses_bench(out, quick=True, **options)  # type: ignore[arg-type]
    assert not out.exists()


@pytest.mark.in_default_run  # seconds: the rows are stubbed
def test_bench_defenses_share_selection_reaches_every_share_below_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedleak.bench.defenses as bench

    seen: list[tuple[object, str, float]] = []

    def stub(table, setting, _data, _top, setup, **_k):
        d = setup.defenses
        seen.append((setting, d.share_selection, d.share_fraction))
        return _stubbed_row(table, setting)

    monkeypatch.setattr(bench, "_row", stub)
    out = tmp_path / "random.json"
    _share_table_cli(out, "--share-selection", "random")
    shares = bench._settings(True, 10)["share_fraction"]
    assert [s for s, _, _ in seen] == list(shares)
    for setting, selection, fraction in seen:
        assert fraction == setting
        # sharing everything selects nothing: the undefended setup
        assert selection == ("largest" if setting == 1.0 else "random")
    assert json.loads(out.read_text())["setup"]["share_selection"] == "random"
    seen.clear()
    bench.run_defenses_bench(
        tmp_path / "top.json", tables=("share_fraction",), quick=True
    )
    assert {selection for _, selection, _ in seen} == {"largest"}
    assert (
        json.loads((tmp_path / "top.json").read_text())["setup"]["share_selection"]
        == "largest"
    )


@pytest.mark.in_default_run  # no simulation: the value is refused first
def test_bench_defenses_refuses_an_unknown_share_selection(tmp_path: Path) -> None:
    from fedleak.errors import ConfigError

    out = tmp_path / "defenses.json"
    message = r"share_selection must be one of \['largest', 'random'\], got 'smallest'"
    with pytest.raises(ConfigError, match=message):
        run_defenses_bench(out, quick=True, share_selection="smallest")
    assert not out.exists()


@pytest.mark.in_default_run  # no simulation: the value is refused first
@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_bench_defenses_refuses_a_home_fraction_outside_0_1(
    tmp_path: Path, fraction: float
) -> None:
    from fedleak.errors import ConfigError

    out = tmp_path / "defenses.json"
    with pytest.raises(ConfigError, match=r"home_fraction must be in \(0, 1\]"):
        run_defenses_bench(out, quick=True, home_fraction=fraction)
    assert not out.exists()


@pytest.mark.in_default_run  # seconds: the runs are stubbed
def test_bench_membership_keeps_the_rows_measured_before_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedleak.bench.membership as bench

    class Outcome:
        def __init__(self, batch_size: int) -> None:
            self.batch_size = batch_size

        def as_dict(self) -> dict[str, object]:
            return {
                "precision": 0.9,
                "recall": 1.0,
                "rounds": 3,
                "mean_bag_size": 10.0,
                "wall_s": 0.1,
            }

    sizes: list[int] = []

    def simulate(_data, setup, *, seed):
        sizes.append(setup.batch_size)
        if len(sizes) == 2:
            raise RuntimeError("the second run fails")
        return Outcome(setup.batch_size)

    monkeypatch.setattr(bench, "simulate_membership", simulate)
    out = tmp_path / "membership.json"
    with pytest.raises(RuntimeError, match="second run"):
        bench.run_membership_bench(
            out, datasets=("checkins",), batch_sizes=(20, 40), quick=True
        )
    kept = json.loads(out.read_text())
    assert kept["complete"] is False
    assert [(r["dataset"], r["batch_size"]) for r in kept["rows"]] == [("checkins", 20)]
    assert kept["setups"]["checkins"]["batch_size"] > 0
    assert kept["num_venues"] == 1500  # the quick data: as many venues as users


@pytest.mark.in_default_run  # one Flower run of 6 rounds
def test_bench_membership_through_flower_scores_the_adversary_client(
    tmp_path: Path,
) -> None:
    from fedleak.bench.membership import run_membership_bench

    out = tmp_path / "membership-flower.json"
    report = run_membership_bench(
        out,
        datasets=("checkins",),
        batch_sizes=(50,),
        quick=True,
        iterations=5,
        engine="flower",
    )
    assert report["engine"] == "flower" and report["complete"] is True
    # the federation splits the data its own way: no in-process floor
    assert "precision_floor" not in report["setups"]["checkins"]
    (row,) = report["rows"]
    assert row["engine"] == "flower" and row["dataset"] == "checkins"
    # 6 rounds: the adversary reads the change of rounds 1-5
    assert row["rounds"] == 6 and row["num_rounds"] == 5
    # only 250 of the target's 2,410 records were trained on, each caught
    assert row["true_positives"] > 200
    assert row["false_negatives"] > row["true_positives"]
    assert row["precision"] > 0.9
    assert 0.0 <= row["model_accuracy"] <= 1.0
    # the false flags by record size add up to the row's non-members
    bands = row["false_flags"]["bands"]
    assert sum(b["flagged"] for b in bands) == row["false_positives"]
    assert sum(b["records"] for b in bands) == (
        row["false_positives"] + row["true_negatives"]
    )
    # the server evaluated every round (6 < CURVE_POINTS)
    curve = row["accuracy_curve"]
    assert curve["rounds"] == [1, 2, 3, 4, 5, 6]
    assert curve["test_accuracy"][-1] == pytest.approx(row["model_accuracy"])
    assert isinstance(curve["plateau"], bool)
    run = tmp_path / "membership-flower-runs" / "checkins-b50"
    assert (run / "adversary" / "membership-bags.jsonl").is_file()
    assert json.loads((run / "results.json").read_text())["status"] == "completed"
    # the same data as the in-process bench: its setup says so
    assert report["setups"]["checkins"]["num_train"] == 4821


@pytest.mark.in_default_run  # no simulation: refused before any run
def test_bench_membership_through_flower_refuses_what_it_cannot_run(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from fedleak.bench.membership import default_setup, run_membership_bench
    from fedleak.bench.membership_flower import flower_membership_config
    from fedleak.errors import ConfigError

    with pytest.raises(ConfigError, match=r"no federation dataset for 'fortunes'"):
        run_membership_bench(
            tmp_path / "m.json", datasets=("fortunes",), engine="flower"
        )
    assert not (tmp_path / "m.json").exists()
    with pytest.raises(ConfigError, match=r"unknown engine 'ray'"):
        run_membership_bench(tmp_path / "m.json", engine="ray")
    for option, stand_in in (
        ("--mean-checkins", {"mean_checkins": 34}),
        ("--venues", {"num_venues": 30000}),
    ):
        with pytest.raises(ConfigError, match=rf"^{option}: the Flower runs use"):
            run_membership_bench(
                tmp_path / "m.json", datasets=("checkins",), engine="flower", **stand_in
            )
    assert not (tmp_path / "m.json").exists()
    setup = default_setup("checkins", quick=True)
    config = flower_membership_config("checkins", setup, rounds=7, seed=3)
    assert (config.rounds, config.seed) == (7, 3)
    assert config.data.dataset == "checkins-synthetic-large"
    assert config.model.embedding_dim == setup.embedding_dim
    assert config.strategy.learning_rate == setup.learning_rate
    assert config.strategy.reduction == "sum"
    assert config.client.batch_size == setup.batch_size
    with pytest.raises(ConfigError, match=r"not modelled: server_momentum$"):
        flower_membership_config(
            "checkins", replace(setup, server_momentum=0.9), rounds=7, seed=3
        )
    with pytest.raises(
        ConfigError, match=r"not modelled: participant_noise, cnn_hidden"
    ):
        flower_membership_config(
            "checkins",
            replace(setup, participant_noise=1.0, cnn_hidden=None),
            rounds=7,
            seed=3,
        )


@pytest.mark.in_default_run  # seconds: the quick check-in data only
def test_bench_membership_check_ins_grow_denser_with_mean_checkins() -> None:
    from fedleak.bench.membership import load_bench_dataset

    def distinct(data) -> float:
        return float(np.mean([np.unique(r[r != 0]).size for r in data.x_test]))

    sparse = load_bench_dataset("checkins", quick=True, seed=0)
    dense = load_bench_dataset("checkins", quick=True, seed=0, mean_checkins=34.0)
    assert distinct(sparse) == pytest.approx(
        distinct(load_bench_dataset("checkins", quick=True, seed=0, mean_checkins=20.0))
    )
    assert distinct(dense) > distinct(sparse) + 5


@pytest.mark.in_default_run  # seconds: the quick check-in data only
def test_bench_membership_check_ins_spread_over_more_venues() -> None:
    from fedleak.bench.membership import CHECKIN_USERS, load_bench_dataset
    from fedleak.bench.seed_claims import DEFAULT_VENUES

    def venues(data) -> set[int]:
        return set(np.unique(data.x_train)) - {0}

    default = load_bench_dataset("checkins", quick=True, seed=0)
    same = load_bench_dataset("checkins", quick=True, seed=0, num_venues=1500)
    wide = load_bench_dataset("checkins", quick=True, seed=0, num_venues=6000)
    assert np.array_equal(default.x_train, same.x_train)  # default: one per user
    assert DEFAULT_VENUES == CHECKIN_USERS  # the report's label of the default
    assert len(venues(wide)) > 1.5 * len(venues(default))

    def covered(data) -> float:
        """Share of the non-members' check-ins at venues some member holds."""
        held = data.x_test != 0
        return float(
            (np.isin(data.x_test, list(venues(data))) & held).sum() / held.sum()
        )

    assert covered(wide) < covered(default)  # what a large bag covers shrinks


@pytest.mark.in_default_run  # no simulation
def test_dp_rows_train_longer_where_their_steps_are_smaller() -> None:
    from fedleak.attacks.membership.simulation import MembershipSetup

    from fedleak.bench.defenses import _property_rounds, _setup_for

    base = MembershipSetup(epochs=8, learning_rate=0.3)
    # record-level DP: max(4, sigma) times the passes at lr / max(4, sigma)
    low = _setup_for("record_dp", 0.5, base)
    assert (low.epochs, low.learning_rate) == (32, 0.075)
    assert _setup_for("record_dp", 4.0, base).epochs == 32
    high = _setup_for("record_dp", 8.0, base)
    assert (high.epochs, high.learning_rate) == (64, pytest.approx(0.0375))
    assert high.defenses.dp_noise_multiplier == 8.0
    assert low.defenses.dp_noise_multiplier == 0.5
    # and the property simulations as many times the rounds
    assert _property_rounds("record_dp", 0.5, 480) == 1920
    assert _property_rounds("record_dp", 8.0, 480) == 3840
    assert _property_rounds("participant_dp", 4.0, 480) == 480
    assert _property_rounds("dropout", 0.5, 480) == 480
    # participant-level DP: four times the passes at the full step
    participant = _setup_for("participant_dp", 0.3, base)
    assert (participant.epochs, participant.learning_rate) == (32, 0.3)
    assert participant.participant_noise == 0.3
    # the other tables keep the undefended passes
    assert _setup_for("dropout", 0.5, base).epochs == 8
