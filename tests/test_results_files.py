"""Run files are written atomically and with ordinary permissions."""

from __future__ import annotations

import json
import os
import stat

import pytest

from fedleak.experiments.results import (
    ROUND_TIMING_KEYS,
    SCHEMA_VERSION,
    check_results,
)
from fedleak.files import write_atomic, write_json_atomic


def test_json_is_written_whole_and_readable_like_a_plain_file(tmp_path):
    path = tmp_path / "results.json"
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    write_json_atomic(path, {"old": True})

    def broken(tmp):
        tmp.write_text("partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomic(path, broken)
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def _results(version: int) -> dict:
    row = {"round": 1, "server": {}, "train": {}, "evaluate": {}}
    timing: dict = {"total_s": 1.0, "round_s": [0.5]}
    if version >= 2:
        timing |= {
            "rounds": [{"round": 1, **dict.fromkeys(ROUND_TIMING_KEYS[1:], 0.1)}],
            "median_after_first": {},
            "engine": {"engine": "fedleak", "poll_interval": 0.002, "wake_ups": True},
        }
    return {
        "schema_version": version,
        "name": "x",
        "seed": 0,
        "created": "2026-01-01T00:00:00+00:00",
        "versions": dict.fromkeys(("fedleak", "flwr", "torch", "numpy"), "1"),
        "config": {},
        "final": {"round": 1},
        "rounds": [row],
        "timing": timing,
    }


def test_results_of_every_schema_version_are_read():
    assert SCHEMA_VERSION == 3
    current = _results(3) | {
        "status": "interrupted",
        "privacy": {"noise": "os-entropy"},
        "non_finite": [],
    }
    assert check_results(current) == []
    assert any("status" in p for p in check_results(current | {"status": "done"}))
    assert check_results(_results(2)) == []
    assert check_results(_results(1)) == []  # files written before the engine timing


def test_a_version_2_file_without_the_round_timing_is_flagged():
    missing = _results(2)
    del missing["timing"]["rounds"]
    assert check_results(missing) == ["timing.rounds missing"]
    partial = _results(2)
    del partial["timing"]["rounds"][0]["wait_s"]
    assert any("timing.rounds rows" in p for p in check_results(partial))
    future = _results(2) | {"schema_version": 4}
    assert any("schema_version 4" in p for p in check_results(future))
