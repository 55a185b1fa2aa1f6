"""The fedleak command: exit codes and one-line errors, nothing written on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_process import run_fedleak as fedleak


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "sets", "needle"),
    [
        ("[strategy]\nlearnin_rate = 0.1\n", [], "strategy.learnin_rate: unknown key"),
        ("[strategy]\nlearning_rate = -0.5\n", [], "strategy.learning_rate"),
        (
            "rounds = 2\n",
            ["--set", "strategy.learning_rate=-1"],
            "strategy.learning_rate",
        ),
        ("[data]\ndataset = 'mnist'\nroot = 'no-such-folder'\n", [], "mnist"),
    ],
    ids=["wrong-key", "negative-lr", "negative-lr-override", "missing-dataset"],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path, text, sets, needle
):
    config = write(tmp_path, text)
    out = tmp_path / "out"
    result = fedleak("run", str(config), "--out", str(out), *sets, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert needle in lines[0]
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert not (tmp_path / "runs").exists()


def test_missing_config_file(tmp_path):
    result = fedleak("run", "nope.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "no such experiment file" in result.stderr


def test_refuses_to_overwrite_a_previous_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    result = fedleak(
        "run", str(write(tmp_path, "rounds = 1\n")), "--out", str(out), cwd=tmp_path
    )
    assert result.returncode == 2
    assert "already holds a run" in result.stderr
    assert (out / "results.json").read_text() == "{}"


def test_datasets_lists_every_dataset(tmp_path):
    result = fedleak("datasets", cwd=tmp_path)
    assert result.returncode == 0
    for name in ("digits", "fashion-mnist", "mnist"):
        assert name in result.stdout


def test_help_lists_the_commands(tmp_path):
    result = fedleak("--help", cwd=tmp_path)
    assert result.returncode == 0
    for command in ("run", "quickstart", "datasets", "bench"):
        assert command in result.stdout
