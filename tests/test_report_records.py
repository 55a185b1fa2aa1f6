"""REPRODUCTION.md's records section: which rows read each record, how it was made."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedleak.bench.report import load_records, render_report
from fedleak.bench.report_records import (
    ReadLog,
    bench_command,
    compute_seconds,
    created_date,
    later_sessions,
    records_section,
)

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def test_read_log_marks_the_records_looked_up_not_those_listed():
    log = ReadLog({"a": {"x": 1}, "b": {}, "c": {}})
    assert sorted(log) == ["a", "b", "c"]
    assert len(log) == 3
    assert log.read == set()
    assert log["a"] == {"x": 1}
    assert log.get("missing") is None
    assert "b" in log
    assert "missing" not in log
    assert log.read == {"a", "b"}


def test_read_log_raises_for_a_missing_record():
    with pytest.raises(KeyError):
        ReadLog({})["nothing"]


@pytest.mark.parametrize(
    ("record", "seconds"),
    [
        ({"wall_s": 12.5}, 12.5),
        ({"wall_s_total": 7}, 7.0),
        ({"total_s": 3.0}, 3.0),
        ({"wall_s": 0.0, "total_s": 9.0}, 0.0),
        ({"wall_s": {"a": 1.0, "total": 4.0}}, 4.0),
        ({"wall_s": {"a": 1.0}, "total_s": 2.0}, 2.0),
        ({"wall_s": True}, None),
        ({"wall_s": "12"}, None),
        ({}, None),
        # extended: the top times only the last invocation
        ({"wall_s": 7.5, "runs": [{"wall_s": 500.0}, {"wall_s": 40.0}]}, 540.0),
        # the bench's own setup around its runs
        ({"wall_s": 600.0, "runs": [{"wall_s": 500.0}, {"wall_s": 40.0}]}, 600.0),
        ({"runs": [{"wall_s": 5.0}, {"label": "no wall"}, "odd"]}, 5.0),
        ({"runs": [{"wall_s": 0.25}, {"wall_s": 0.5}]}, 0.75),
        ({"wall_s": 8.0, "runs": [{"label": "no wall"}]}, 8.0),
        ({"wall_s": 8.0, "runs": {"wall_s": 100.0}}, 8.0),
    ],
)
def test_compute_seconds(record, seconds):
    assert compute_seconds(record) == seconds


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("fedleak bench sketches --out benchmarks/s.json", "fedleak bench sketches --out benchmarks/s.json"),
        ("cli.py bench property fraction --out runs/b/s.json", "fedleak bench property fraction --out benchmarks/s.json"),
        ("/opt/env/bin/fedleak bench x --out s.json", "fedleak bench x --out benchmarks/s.json"),
        ("fedleak bench x --out runs/other.json", "fedleak bench x --out runs/other.json"),
        ("fedleak bench x --quick --out", "fedleak bench x --quick --out"),
        ("python scripts/run.py --out runs/s.json", "python scripts/run.py --out benchmarks/s.json"),
    ],
)  # fmt: skip
def test_bench_command_reruns_into_benchmarks(command, expected):
    assert bench_command({"provenance": {"command": command}}, "s") == expected


@pytest.mark.parametrize(
    "record",
    [{}, {"provenance": None}, {"provenance": {}}, {"provenance": {"command": "  "}}],
)
def test_bench_command_is_none_without_provenance(record):
    assert bench_command(record, "s") is None


def test_created_date_reads_provenance_then_the_top():
    assert created_date({"provenance": {"created": "2026-11-28T06:11:34+00:00"}}) == (
        "2026-11-28"
    )
    assert created_date({"created": "2026-11-22T13:34:52+00:00"}) == "2026-11-22"
    assert created_date({"provenance": {"created": None}, "created": "2026-01-02"}) == (
        "2026-01-02"
    )
    assert created_date({"provenance": {"command": "x"}}) is None
    assert created_date({"created": ""}) is None


def test_records_section_lines_up_rows_commands_dates_and_compute():
    records = {
        "made": {
            "benchmark": "sketches",
            "provenance": {
                "command": "fedleak bench sketches --note a|b --out x/made.json",
                "created": "2026-11-24T14:31:00+00:00",
            },
            "wall_s": 119.2,
        },
        "old": {"bench": "audit", "wall_s": 42.0},
        "older": {"benchmark": "dpgm", "wall_s": 60.0},
        "odd": {"benchmark": 3, "wall_s": 59.4},
        "bare": {},
        "spare": {"wall_s": 1.0},
        "spare2": {},
    }
    reads = {
        "Fig. 1": {"made", "old", "older", "odd"},
        "Fig. 2": {"made", "bare"},
        "Fig. 3": set(),
    }
    text = records_section(records, reads)
    lines = text.splitlines()
    assert lines[1] == "## Records"
    assert "| record | read by | command | written | compute |" in lines
    assert (
        "| `made.json` | Fig. 1; Fig. 2 | `fedleak bench sketches --note a\\|b --out "
        "benchmarks/made.json` | 2026-11-24 | 119 s (2 min) |"
    ) in lines
    assert (
        "| `old.json` | Fig. 1 | `fedleak bench audit ...` (options not recorded) "
        "| not recorded | 42 s |"
    ) in lines
    assert (
        "| `older.json` | Fig. 1 | `fedleak bench dpgm ...` (options not recorded) "
        "| not recorded | 60 s (1 min) |"
    ) in lines
    assert "| `odd.json` | Fig. 1 | not recorded | not recorded | 59 s |" in lines
    assert (
        "| `bare.json` | Fig. 2 | not recorded | not recorded | not recorded |" in lines
    )
    table = [line for line in lines if line.startswith("| `")]
    assert [line.split("`")[1] for line in table] == [
        "bare.json",
        "made.json",
        "odd.json",
        "old.json",
        "older.json",
    ]
    assert lines[-1] == "Read by no row: `spare.json`, `spare2.json`."


def test_records_section_says_what_its_columns_hold():
    text = records_section({}, {})
    assert text == (
        "\n## Records\n\n"
        "The records each row was judged on (read by its rule), the command that "
        "wrote each (program and `--out` as they rerun into `benchmarks/`), the "
        "day, and the compute behind it: the bench's wall time, or its runs' "
        "summed wall times where a run was extended or resumed by a later "
        "invocation (such a run times only its last session: *at least*).\n\n"
        "| record | read by | command | written | compute |\n"
        "|---|---|---|---|---|\n"
    )


def test_records_section_gives_hours_as_minutes_and_no_unread_line_when_all_read():
    text = records_section({"long": {"wall_s": 9880.4}}, {"Fig. 7.8": {"long"}})
    assert (
        "| `long.json` | Fig. 7.8 | not recorded | not recorded | 9,880 s (165 min) |"
        in (text)
    )
    assert "Read by no row" not in text


def test_the_committed_report_credits_each_record_to_the_rows_that_read_it():
    text, _ = render_report(load_records(BENCHMARKS))
    lines = {
        line.split("`")[1]: line
        for line in text.split("## Records", 1)[1].splitlines()
        if line.startswith("| `")
    }
    # Fig. 5.4 scans the names for dpgm-samples*: it opens those, not the rest
    assert "000 Fig. 5.4" in lines["dpgm-samples.json"]
    assert "000 Fig. 5.4" in lines["dpgm-samples-58000.json"]
    assert "000 Fig. 5.4" not in lines["dpgm-size.json"]
    # an optional record, read with records.get
    assert lines["defenses-random-share.json"].split(" | ")[1] == "000 Table 7.5"
    assert "engine.json" not in lines
    assert "`engine.json`" in text.rsplit("Read by no row:", 1)[1]


@pytest.mark.parametrize(
    ("record", "starts"),
    [
        ({}, []),
        ({"runs": {"extended_from": 3}}, []),
        ({"runs": [{"extended_from": None}, {"extended_from": 0}, "odd"]}, []),
        ({"runs": [{"extended_from": 240}, {}, {"extended_from": 20}]}, [240, 20]),
    ],
)
def test_later_sessions_names_the_runs_timed_from_a_later_round(record, starts):
    assert later_sessions(record) == starts


def test_records_section_says_at_least_for_runs_timed_from_a_later_round():
    records = {
        "one": {"runs": [{"wall_s": 300.0, "extended_from": 240}, {"wall_s": 90.0}]},
        "two": {
            "runs": [
                {"wall_s": 30.0, "extended_from": 20},
                {"wall_s": 40.0, "extended_from": 240},
            ]
        },
    }
    lines = records_section(records, {"Fig. 7.8": {"one", "two"}}).splitlines()
    assert (
        "| `one.json` | Fig. 7.8 | not recorded | not recorded | at least 390 s "
        "(6 min): 1 of 2 runs timed from round 240 on |"
    ) in lines
    assert (
        "| `two.json` | Fig. 7.8 | not recorded | not recorded | at least 70 s "
        "(1 min): 2 of 2 runs timed from rounds 20-240 on |"
    ) in lines
