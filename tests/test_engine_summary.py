"""``fedleak bench engine``'s summary of the timed rounds: medians, sums, blocks, polls."""

from __future__ import annotations

import re
import statistics
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from fedleak.bench import engine as engine_bench
from fedleak.bench.engine import (
    _experiment,
    _spread_line,
    contention_warning,
    rounds_by_poll_steps,
)

POLLING = {"engine": "flower", "poll_interval": 0.1, "wake_ups": False}
WOKEN = {"engine": "fedleak", "poll_interval": 0.002, "wake_ups": True}


def _row(wall: float, wait: float, server: float = 0.0, evaluate: float = 0.0):
    return {
        "wall_s": wall,
        "wait_s": wait,
        "client_compute_s": wait,
        "evaluate_s": evaluate,
        "server_s": server,
    }


def _run(walls: list[float], engine: dict[str, Any] | None = None, **parts: float):
    # the first round is left out of every summary: make it absurd
    rows = [_row(99.0, 99.0)] + [_row(w, w - 0.015, **parts) for w in walls]
    timing: dict[str, Any] = {"rounds": rows}
    if engine is not None:
        timing["engine"] = engine
    return timing, {"digest": "same"}


def test_rounds_by_poll_steps_counts_whole_intervals_of_the_wait():
    rows = [_row(0, w) for w in (0.1016, 0.2016, 0.1002, 0.3001, 0.0999, 0.2)]
    assert rounds_by_poll_steps(rows, POLLING) == {"0": 1, "1": 2, "2": 2, "3": 1}
    slower = {**POLLING, "poll_interval": 0.05}
    assert rounds_by_poll_steps(rows[:2], slower) == {"2": 1, "4": 1}


@pytest.mark.parametrize("engine", [WOKEN, {"poll_interval": 0.1}])
def test_rounds_by_poll_steps_is_none_for_an_engine_woken_by_replies(engine):
    assert rounds_by_poll_steps([_row(0.1, 0.1)], engine) is None


def test_experiment_gives_medians_sums_and_each_blocks_ratio():
    runs = {
        "essential": [
            _run([0.03, 0.05, 0.04], server=0.01, evaluate=0.005),
            _run([0.02, 0.06, 0.06], server=0.01, evaluate=0.005),
        ],
        "fedleak": [
            _run([0.04, 0.05, 0.045], WOKEN),
            _run([0.05, 0.06, 0.07], WOKEN),
        ],
        "flower": [
            _run([0.12, 0.22, 0.23], POLLING),
            _run([0.12, 0.13, 0.22], POLLING),
        ],
    }
    out = _experiment(runs, actors=2)
    essential, fedleak, flower = out["essential"], out["fedleak"], out["flower"]
    # essential: server + evaluation + the clients' wait over 2 actors
    split = [0.015 + (w - 0.015) / 2 for w in (0.03, 0.05, 0.04, 0.02, 0.06, 0.06)]
    assert essential["round_s"] == pytest.approx(split)
    assert essential["total_round_s"] == pytest.approx(sum(split))
    assert essential["block_median_round_s"] == pytest.approx(
        [statistics.median(split[:3]), statistics.median(split[3:])]
    )
    assert essential["median_serial_round_s"] == pytest.approx(0.045)
    assert fedleak["median_round_s"] == pytest.approx(0.05)
    assert fedleak["block_median_round_s"] == pytest.approx([0.045, 0.06])
    assert fedleak["total_round_s"] == pytest.approx(0.315)
    assert flower["median_round_s"] == pytest.approx(0.175)
    assert flower["block_median_round_s"] == pytest.approx([0.22, 0.13])
    assert flower["total_round_s"] == pytest.approx(1.04)
    assert flower["rounds_by_poll_steps"] == {"1": 3, "2": 3}
    assert fedleak["rounds_by_poll_steps"] is None
    assert out["flower_vs_fedleak"] == pytest.approx(0.175 / 0.05)
    assert out["flower_vs_fedleak_total"] == pytest.approx(1.04 / 0.315)
    assert out["flower_vs_fedleak_by_block"] == pytest.approx(
        [0.22 / 0.045, 0.13 / 0.06]
    )
    assert out["fedleak_vs_essential"] == pytest.approx(0.05 / statistics.median(split))
    assert out["fedleak_vs_essential_by_block"] == pytest.approx(
        [0.045 / statistics.median(split[:3]), 0.06 / statistics.median(split[3:])]
    )
    assert out["fedleak_vs_essential_total"] == pytest.approx(0.315 / sum(split))
    assert out["fedleak_vs_serial"] == pytest.approx(0.05 / 0.045)
    assert out["same_results"] is True
    assert out["actors"] == 2
    assert fedleak["engine"] == WOKEN and flower["engine"] == POLLING
    assert fedleak["round_s"] == [0.04, 0.05, 0.045, 0.05, 0.06, 0.07]
    assert fedleak["median"]["wall_s"] == pytest.approx(0.05)
    assert flower["median"]["wait_s"] == pytest.approx(0.175 - 0.015)
    assert essential["median"]["server_s"] == pytest.approx(0.01)
    assert essential["median"]["evaluate_s"] == pytest.approx(0.005)
    assert out["outcomes"] == {
        way: [{"digest": "same"}] * 2 for way in ("essential", "fedleak", "flower")
    }


@pytest.mark.parametrize("odd", ["essential", "fedleak", "flower"])
def test_experiment_notices_a_different_result(odd):
    runs = {
        "essential": [_run([0.03, 0.04])],
        "fedleak": [_run([0.04, 0.05], WOKEN)],
        "flower": [_run([0.12, 0.22], POLLING)],
    }
    runs[odd] = [(runs[odd][0][0], {"digest": "other"})]
    assert _experiment(runs, actors=1)["same_results"] is False


def test_experiment_refuses_blocks_that_do_not_pair_up():
    runs = {
        "essential": [_run([0.03, 0.04])],
        "fedleak": [_run([0.04, 0.05], WOKEN)],
        "flower": [_run([0.12, 0.22], POLLING), _run([0.12, 0.22], POLLING)],
    }
    with pytest.raises(ValueError, match="zip"):
        _experiment(runs, actors=1)


def test_two_in_process_runs_a_block_make_one_essential_block():
    runs = {
        "essential": [
            _run([0.03, 0.05, 0.04]),
            _run([0.05, 0.07, 0.06]),
            _run([0.02, 0.02, 0.02]),
            _run([0.04, 0.04, 0.04]),
        ],
        "fedleak": [_run([0.04, 0.05, 0.045], WOKEN), _run([0.05, 0.06], WOKEN)],
        "flower": [_run([0.12, 0.22], POLLING), _run([0.12, 0.13], POLLING)],
    }
    out = _experiment(runs, actors=1)
    essential = out["essential"]
    assert essential["runs_per_block"] == 2
    # each round's essential compute: its wait (wall - 0.015) on one actor
    assert essential["block_median_round_s"] == pytest.approx([0.035, 0.015])
    assert essential["median_round_s"] == pytest.approx(0.025)
    assert essential["total_round_s"] == pytest.approx(0.3)
    # the sums' ratio sets fedleak's rounds against one in-process run a block
    assert out["fedleak_vs_essential_total"] == pytest.approx(0.245 / 0.15)
    assert out["fedleak_vs_essential"] == pytest.approx(0.05 / 0.025)
    assert out["fedleak_vs_essential_by_block"] == pytest.approx(
        [0.045 / 0.035, 0.055 / 0.015]
    )


def test_one_in_process_run_a_block_is_the_default():
    timings = [_run([0.03, 0.05])[0], _run([0.02, 0.04])[0]]
    essential = engine_bench._essential(timings, actors=1)
    assert essential["runs_per_block"] == 1
    assert essential["block_median_round_s"] == pytest.approx([0.025, 0.015])


def test_in_process_runs_that_do_not_split_over_the_blocks_are_refused():
    runs = {
        "essential": [_run([0.03, 0.04])] * 3,
        "fedleak": [_run([0.04, 0.05], WOKEN)] * 2,
        "flower": [_run([0.12, 0.22], POLLING)] * 2,
    }
    with pytest.raises(ValueError, match="3 in-process runs do not split evenly"):
        _experiment(runs, actors=1)


def _bracket_both_ways(
    log: list[str], said: list[str], probe: Any = None
) -> dict[str, list[Any]]:
    """Bracket fedleak's then Flower's simulation; each step logs a letter."""
    runs: dict[str, list[Any]] = {"essential": [], "fedleak": [], "flower": []}
    for fast in (True, False):
        engine_bench._bracketed(
            runs,
            fast,
            lambda: log.append("E") or "e",
            lambda fast=fast: log.append("F" if fast else "W") or "s",
            said.append,
            probe,
        )
    return runs


def test_fedleaks_simulation_runs_between_two_in_process_runs(monkeypatch):
    monkeypatch.setattr(engine_bench, "SETTLE_S", 0.0)
    log: list[str] = []
    said: list[str] = []
    runs = _bracket_both_ways(log, said)
    assert log == ["E", "F", "E", "W"]
    assert said == ["in process", "fedleak engine", "in process", "flower engine"]
    assert runs == {"essential": ["e", "e"], "fedleak": ["s"], "flower": ["s"]}


def test_the_cpu_probe_runs_around_fedleaks_in_process_runs_only(monkeypatch):
    monkeypatch.setattr(engine_bench, "SETTLE_S", 0.0)
    log: list[str] = []
    said: list[str] = []

    def probe() -> dict[str, Any]:
        log.append("P")
        return {"pair_throughput": 0.5 + 0.25 * log.count("P")}

    runs = _bracket_both_ways(log, said, probe)
    assert log == ["P", "E", "F", "E", "P", "W"]
    assert said[0] == said[4] == "two CPUs alone and at once"
    assert runs["cpu_pairs"] == [{"pair_throughput": 0.75}, {"pair_throughput": 1.0}]


def test_experiment_keeps_the_cpu_probes_and_their_throughputs():
    probes = [{"pair_throughput": 0.98, "solo": [1, 2]}, {"pair_throughput": 0.74}]
    runs = {
        "essential": [_run([0.03, 0.04])] * 2,
        "fedleak": [_run([0.04, 0.05], WOKEN)],
        "flower": [_run([0.12, 0.22], POLLING)],
        "cpu_pairs": probes,
    }
    out = _experiment(runs, actors=1)
    assert out["cpu_pairs"] == probes
    assert out["cpu_pair_throughput"] == [0.98, 0.74]
    assert set(out["outcomes"]) == {"essential", "fedleak", "flower"}
    del runs["cpu_pairs"]
    assert _experiment(runs, actors=1)["cpu_pair_throughput"] == []


def test_spread_line_ends_with_the_cpu_probes_where_there_are_some():
    row = {
        "fedleak_vs_essential_total": 1.0,
        "flower_vs_fedleak_total": 4.0,
        "fedleak_vs_essential_by_block": [1.0],
        "flower_vs_fedleak_by_block": [4.0],
        "flower": {"rounds_by_poll_steps": {"1": 1}},
    }
    plain = _spread_line("q", row)
    assert plain.endswith("by poll steps 1: 100%")
    row["cpu_pair_throughput"] = [0.981, None, 0.7449]
    assert _spread_line("q", row) == (
        plain + "; two CPUs at once ran at 0.98 / 0.74 of their speed alone"
    )


def test_spread_line_gives_the_sums_the_blocks_and_the_poll_split():
    row = {
        "fedleak_vs_essential_total": 1.382,
        "flower_vs_fedleak_total": 3.997,
        "fedleak_vs_essential_by_block": [1.3112, 1.7049],
        "flower_vs_fedleak_by_block": [5.1447, 2.8527],
        "flower": {"rounds_by_poll_steps": {"1": 151, "2": 147}},
    }
    assert _spread_line("quickstart", row) == (
        "quickstart: rounds summed fedleak / essential 1.38x, Flower / fedleak "
        "4.00x; by block fedleak / essential 1.31x / 1.70x, Flower / fedleak "
        "5.14x / 2.85x; Flower's rounds by poll steps 1: 51%, 2: 49%"
    )


def test_a_run_whose_cpus_slowed_each_other_is_flagged():
    record = {
        "quickstart": {"cpu_pair_throughput": [0.98, None, 0.85]},
        "secure_round": {"cpu_pair_throughput": [0.86, 0.8449]},
    }
    assert contention_warning(record) == (
        "warning: in 1 of 4 probes two CPUs at once ran at as little as 0.84 of "
        "their speed alone: the simulation's clients slowed each other, so "
        "fedleak / essential reads high; compare runs on a quiet machine"
    )
    record["secure_round"]["cpu_pair_throughput"] = [0.86, 0.85]
    assert contention_warning(record) is None


@pytest.mark.parametrize(
    "record",
    [{}, {"quickstart": {}}, {"quickstart": {"cpu_pair_throughput": [None]}}],
)
def test_a_run_without_probes_is_not_flagged(record):
    assert contention_warning(record) is None


def _summarised(table: list[float], same: bool, probes: list[float]) -> dict[str, Any]:
    essential, fedleak, flower, vs_essential, vs_fedleak = table
    return {
        "essential": {"median_round_s": essential},
        "fedleak": {"median_round_s": fedleak},
        "flower": {"median_round_s": flower, "rounds_by_poll_steps": {"1": 3}},
        "fedleak_vs_essential": vs_essential,
        "flower_vs_fedleak": vs_fedleak,
        "same_results": same,
        "fedleak_vs_essential_total": 1.22,
        "flower_vs_fedleak_total": 4.57,
        "fedleak_vs_essential_by_block": [1.31],
        "flower_vs_fedleak_by_block": [4.68],
        "cpu_pair_throughput": probes,
    }


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_HEADERS = (
    "experiment | essential round (s) | fedleak engine (s) | Flower engine (s) | "
    "fedleak / essential | Flower / fedleak | same numbers"
)


@pytest.mark.parametrize(("low", "flagged"), [(0.7, True), (0.95, False)])
def test_the_command_prints_the_table_the_spread_and_a_contention_warning(
    monkeypatch, tmp_path, low, flagged
):
    record = {
        "quickstart": _summarised([0.0201, 0.0252, 0.1103, 1.27, 4.41], True, [1, low]),
        "secure_round": _summarised([0.0199, 0.0273, 0.3094, 1.39, 11.3], False, []),
        "cli_startup": {
            "repeats": 5,
            "fedleak_help": {"median_s": 0.16},
            "flwr_help": {"median_s": 0.81},
        },
    }
    asked: dict[str, Any] = {}
    wrote: list[Path] = []

    def bench(out, **options):
        asked.update(options, out=out)
        return record

    def terminal(file: StringIO) -> Console:
        return Console(
            file=file, width=300, force_terminal=True, color_system="standard"
        )

    stdout, stderr = StringIO(), StringIO()
    monkeypatch.setattr(engine_bench, "run_engine_bench", bench)
    monkeypatch.setattr(engine_bench, "console", terminal(stdout))
    monkeypatch.setattr(engine_bench, "err", terminal(stderr))
    monkeypatch.setattr(engine_bench, "written", wrote.append)
    out = tmp_path / "e.json"
    engine_bench.command(out=out, quick=True, rounds=7, secure_rounds=5, verbose=True)
    assert asked == {
        "out": out,
        "quick": True,
        "rounds": 7,
        "secure_rounds": 5,
        "verbose": True,
        "progress": engine_bench.say,
    }
    assert wrote == [out]
    printed = stdout.getvalue()
    plain = _ANSI.sub("", printed).splitlines()
    header = next(line for line in plain if "experiment" in line)
    assert " | ".join(cell.strip() for cell in header.strip("┃").split("┃")) == _HEADERS
    rows = {line.split()[1]: line for line in plain if "x " in line and "┃" not in line}
    quick_row = [c.strip() for c in rows["quickstart"].strip("│ ").split("│")]
    assert quick_row == [
        "quickstart",
        "0.0201",
        "0.0252",
        "0.1103",
        "1.27x",
        "4.41x",
        "True",
    ]
    secure_row = [c.strip() for c in rows["secure_round"].strip("│ ").split("│")]
    assert secure_row[1:] == ["0.0199", "0.0273", "0.3094", "1.39x", "11.30x", "False"]
    # the lines are printed without highlighting: verbatim in the terminal's output
    assert _spread_line("quickstart", record["quickstart"]) in printed
    assert _spread_line("secure_round", record["secure_round"]) in printed
    assert (
        "CLI start-up (median of 5): fedleak_help 0.16 s, flwr_help 0.81 s\n" in printed
    )
    warning = contention_warning(record)
    assert (warning is not None) is flagged
    if flagged:
        assert f"\x1b[33m{warning}\x1b[0m" in stderr.getvalue()
    else:
        assert stderr.getvalue() == ""


def test_the_command_runs_a_full_bench_by_default(monkeypatch, tmp_path):
    asked: dict[str, Any] = {}

    def bench(out, **options):
        asked.update(options)
        raise KeyboardInterrupt  # stop before anything is printed

    monkeypatch.setattr(engine_bench, "run_engine_bench", bench)
    with pytest.raises(KeyboardInterrupt):
        engine_bench.command(out=tmp_path / "e.json")
    assert asked == {
        "quick": False,
        "rounds": None,
        "secure_rounds": None,
        "verbose": False,
        "progress": engine_bench.say,
    }
