"""How ``fedleak run`` ends: signals, resume, leftover processes, bad --out and Ray.

Every test acts as a user would: a real TOML file, the installed ``fedleak``
command in its own session (``start_new_session=True``, so the session id
names every process the run started), signals sent the way a terminal
(Ctrl-C: the whole process group) or a service manager (SIGTERM: the
process) sends them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_process import FEDLEAK
from cli_process import run_fedleak as fedleak

EXPERIMENT = """\
name = "lifecycle"
seed = 3
rounds = {rounds}
[data]
dataset = "digits"
[model]
name = "mlp"
[strategy]
name = "sync-sgd"
learning_rate = 0.05
[federation]
num_clients = 2
checkpoint_every = 5
"""


def write(tmp_path: Path, rounds: int = 80, extra: str = "") -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(EXPERIMENT.format(rounds=rounds) + extra)
    return path


def strict_load(path: Path) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"{path} holds {name}: not strict JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [FEDLEAK, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def wait_for_rounds(out: Path, rows: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 240
    path = out / "rounds.jsonl"
    while time.monotonic() < deadline:
        if path.is_file() and len(path.read_text().splitlines()) > rows:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the run did not reach the round in time")


def session_processes(sid: int) -> list[str]:
    """Processes (other than zombies) of session ``sid``, as ``ps`` lines."""
    listing = subprocess.run(  # -ww: whole command lines, whatever COLUMNS says
        ["ps", "-ww", "-eo", "pid=,sid=,stat=,args="], capture_output=True, text=True
    ).stdout
    alive = []
    for line in listing.splitlines():
        _, session, stat, *_ = line.split(None, 3)
        if int(session) == sid and not stat.startswith("Z"):
            alive.append(line)
    return alive


def assert_no_process_left(sid: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while session_processes(sid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert session_processes(sid) == [], session_processes(sid)


def stop_run(
    proc: subprocess.Popen[str], signum: int, group: bool
) -> tuple[float, str]:
    """Send ``signum``; return the seconds until the process exited, and stderr."""
    sent = time.monotonic()
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return time.monotonic() - sent, stderr


EXIT_LIMIT_S = 30.0
"""Seconds from the signal to the exit before a test calls the run hung.

The product aims at 15 s (about 5 s measured with the machine's 2 cores
under a load average near 20); the limit leaves room for a loaded CI
machine and still fails a run that hangs (one that waits for every
remaining round takes minutes).
"""


def report_exit(name: str, seconds: float) -> None:
    print(f"exit {seconds:.1f} s after {name} (load average {os.getloadavg()[0]:.1f})")
    assert seconds < EXIT_LIMIT_S, f"exit took {seconds:.1f} s after {name}"


def assert_interrupted_run(out: Path, stderr: str) -> dict:
    results = strict_load(out / "results.json")
    assert results["status"] == "interrupted"
    done = results["completed_rounds"]
    assert 1 <= done < results["config"]["rounds"]
    assert [row["round"] for row in results["rounds"]] == list(range(1, done + 1))
    assert results["final"]["round"] == done
    with np.load(out / "model.npz") as model:
        assert model.files and all(np.isfinite(model[k]).all() for k in model.files)
    last = [line for line in stderr.splitlines() if line.strip()][-1]
    assert f"after round {done} of" in last
    assert f"fedleak run --resume {out}" in last
    return results


@pytest.mark.slow
@pytest.mark.own_ray
@pytest.mark.in_default_run
def test_ctrl_c_stops_after_the_round_keeps_the_model_and_leaves_no_process(tmp_path):
    config, out = write(tmp_path), tmp_path / "run"
    proc = start("run", str(config), "--out", str(out), cwd=tmp_path)
    wait_for_rounds(out, 4, proc)
    seconds, stderr = stop_run(proc, signal.SIGINT, group=True)
    assert proc.returncode == 130, stderr
    report_exit("SIGINT", seconds)
    assert "Traceback" not in stderr
    assert_interrupted_run(out, stderr)
    assert_no_process_left(proc.pid)


@pytest.mark.slow
@pytest.mark.own_ray
def test_sigterm_stops_after_the_round_with_status_143(tmp_path):
    config, out = write(tmp_path), tmp_path / "run"
    proc = start("run", str(config), "--out", str(out), cwd=tmp_path)
    wait_for_rounds(out, 4, proc)
    seconds, stderr = stop_run(proc, signal.SIGTERM, group=False)
    assert proc.returncode == 143, stderr
    report_exit("SIGTERM", seconds)
    assert "Traceback" not in stderr and "ActorDiedError" not in stderr
    assert "SIGTERM received" not in stderr  # Ray's C++ handler did not run
    assert_interrupted_run(out, stderr)
    assert_no_process_left(proc.pid)


LOOP_OF_RUNS = """\
import sys
from fedleak.experiments.config import load_config
from fedleak.experiments.runner import run_experiment
from fedleak.runtime.lifecycle import RunInterrupted

config = load_config(sys.argv[1])
try:
    for i in range(2):  # as a benchmark runs its experiments
        run_experiment(config, out=f"{sys.argv[2]}/run-{i}")
except RunInterrupted as err:
    print(err, file=sys.stderr)
    sys.exit(err.exit_code)
print("both runs finished")
"""


@pytest.mark.slow
@pytest.mark.own_ray
@pytest.mark.parametrize(
    ("signum", "group", "code"),
    [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
)
def test_a_signal_stops_a_loop_of_runs_after_the_round(tmp_path, signum, group, code):
    """run_experiment without a RunControl watches the signals itself.

    Before, Ctrl-C in a benchmark raised KeyboardInterrupt in Flower's engine
    thread, which stopped the clients while the server thread waited for
    their replies: the process never exited.
    """
    script = tmp_path / "loop.py"
    script.write_text(LOOP_OF_RUNS)
    config, out = write(tmp_path), tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(config), str(out)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for_rounds(out / "run-0", 4, proc)
    seconds, stderr = stop_run(proc, signum, group=group)
    assert proc.returncode == code, stderr
    report_exit(signal.Signals(signum).name, seconds)
    assert "Traceback" not in stderr
    results = strict_load(out / "run-0" / "results.json")
    assert results["status"] == "interrupted"
    done = results["completed_rounds"]
    last = [line for line in stderr.splitlines() if line.strip()][-1]
    assert last.startswith(
        f"interrupted ({signal.Signals(signum).name}) after round {done}: "
    )
    assert last.endswith(f"go on with: fedleak run --resume {out / 'run-0'}")
    assert not (out / "run-1").exists()  # the loop stopped with its run
    assert_no_process_left(proc.pid)


def test_a_benchmark_stopped_by_a_signal_ends_in_one_line_with_its_status(tmp_path):
    """Typer turns a KeyboardInterrupt into a silent exit 130; the bench wrapper
    says where the run stopped and keeps SIGTERM's 143."""
    import typer
    from typer.testing import CliRunner

    import fedleak.cli as cli
    from fedleak.runtime.lifecycle import RunInterrupted

    def stopped(rounds: int = 7) -> None:
        raise RunInterrupted(tmp_path / "r", rounds, signal.SIGTERM)

    def finished(rounds: int = 7) -> None:
        print(f"done {rounds}")

    for command, code, text in (
        (stopped, 143, "interrupted (SIGTERM) after round 3: model.npz and "
         f"results.json in {tmp_path / 'r'}; no round completed, so there is "
         "nothing to resume"),
        (finished, 0, "done 3"),
    ):  # fmt: skip
        app = typer.Typer()
        app.command()(cli._stops_cleanly(command))
        result = CliRunner().invoke(app, ["--rounds", "3"])
        assert result.exit_code == code
        assert " ".join(result.output.split()) == text


@pytest.mark.slow
@pytest.mark.own_ray
@pytest.mark.needs_fashion_mnist
def test_ctrl_c_stops_a_benchmark_after_its_round_in_one_line(tmp_path):
    out = tmp_path / "bench.json"
    proc = start(
        "bench", "property", "model-averaging", "--quick", "--rounds", "300",
        "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    run = tmp_path / "bench-runs" / "K3-property-0"
    wait_for_rounds(run, 4, proc)
    seconds, stderr = stop_run(proc, signal.SIGINT, group=True)
    assert proc.returncode == 130, stderr
    report_exit("SIGINT", seconds)
    assert "Traceback" not in stderr
    assert strict_load(run / "results.json")["status"] == "interrupted"
    last = [line for line in stderr.splitlines() if line.strip()][-1]
    assert last.startswith("interrupted (SIGINT) after round ")
    assert last.endswith(f"go on with: fedleak run --resume {run}")
    assert not out.exists()  # no record from a stopped bench
    assert sorted(p.name for p in (tmp_path / "bench-runs").iterdir()) == [
        "K3-property-0"
    ]
    assert_no_process_left(proc.pid)


@pytest.mark.slow
@pytest.mark.own_ray
def test_sigkill_leaves_no_ray_process_behind(tmp_path):
    config, out = write(tmp_path, rounds=5000), tmp_path / "run"
    proc = start("run", str(config), "--out", str(out), cwd=tmp_path)
    wait_for_rounds(out, 2, proc)
    running = session_processes(proc.pid)
    assert any("raylet" in line for line in running), running
    proc.kill()
    proc.communicate()
    assert_no_process_left(proc.pid, within=10.0)


def assert_same_run(whole: Path, other: Path) -> dict:
    """Assert ``other`` ran ``whole``'s rounds and model exactly; return its results."""
    a, b = strict_load(whole / "results.json"), strict_load(other / "results.json")
    for row_a, row_b in zip(a["rounds"], b["rounds"], strict=True):
        assert row_a["server"] == row_b["server"], row_a["round"]
        assert row_a["train"] == row_b["train"], row_a["round"]
    with np.load(whole / "model.npz") as ma, np.load(other / "model.npz") as mb:
        assert ma.files == mb.files
        for key in ma.files:
            np.testing.assert_array_equal(ma[key], mb[key])
    return b


@pytest.mark.slow
def test_resume_gives_exactly_the_uninterrupted_run(tmp_path):
    rounds = 60
    config = write(tmp_path, rounds)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    result = fedleak("run", str(config), "--out", str(whole), cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr

    proc = start("run", str(config), "--out", str(parts), cwd=tmp_path)
    wait_for_rounds(parts, 7, proc)
    _, stderr = stop_run(proc, signal.SIGINT, group=True)
    assert proc.returncode == 130, stderr
    stopped = assert_interrupted_run(parts, stderr)["completed_rounds"]

    resumed = fedleak("run", "--resume", str(parts), cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    b = assert_same_run(whole, parts)
    assert b["status"] == "completed" and b["resumed_from"] == stopped
    assert len(b["rounds"]) == rounds
    lines = (parts / "rounds.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in lines] == list(range(rounds + 1))

    again = fedleak("run", "--resume", str(parts), cwd=tmp_path)
    assert again.returncode == 2 and "nothing to resume" in again.stderr


@pytest.mark.slow
def test_extending_a_completed_run_gives_the_run_started_with_more_rounds(tmp_path):
    """7 rounds, then --rounds 12: every round's numbers and the model are
    those of a 12-round run; the run's config says 12 from then on."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    longer, shorter = write(tmp_path / "a", 12), write(tmp_path / "b", 7)
    whole, grown = tmp_path / "whole", tmp_path / "grown"
    for config, out in ((longer, whole), (shorter, grown)):
        done = fedleak("run", str(config), "--out", str(out), cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr
    fewer = fedleak("run", "--resume", str(grown), "--rounds", "5", cwd=tmp_path)
    one_line_error(fewer, "already has 7 rounds")
    extended = fedleak(
        "run", "--resume", str(grown), "--rounds", "12", cwd=tmp_path, timeout=300
    )
    assert extended.returncode == 0, extended.stderr
    b = assert_same_run(whole, grown)
    assert b["status"] == "completed" and b["resumed_from"] == 7
    assert b["completed_rounds"] == 12 and len(b["rounds"]) == 12
    assert "rounds = 12" in (grown / "config.toml").read_text()
    again = fedleak("run", "--resume", str(grown), cwd=tmp_path)
    assert again.returncode == 2 and "nothing to resume" in again.stderr


def test_rounds_without_resume_is_refused(tmp_path):
    config = write(tmp_path, 2)
    one_line_error(
        fedleak("run", str(config), "--rounds", "5", cwd=tmp_path), "--set rounds=N"
    )


def one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and needle in lines[0], lines[0]


def test_an_unreachable_ray_address_fails_fast_naming_it(tmp_path):
    config = write(tmp_path, 2)
    for address in ("127.0.0.1:1", "bogus.invalid:1"):
        started = time.monotonic()
        result = fedleak(
            "run", str(config), "--out", str(tmp_path / "o"), "--ray-address",
            address, cwd=tmp_path, timeout=60,
        )  # fmt: skip
        one_line_error(result, address)
        assert time.monotonic() - started < 30
        assert not (tmp_path / "o").exists()


def test_more_cpus_per_client_than_ray_offers_is_refused(tmp_path):
    config = write(tmp_path, 2)
    result = fedleak(
        "run", str(config), "--set", "federation.cpus_per_client=4096", cwd=tmp_path
    )
    one_line_error(result, "federation.cpus_per_client")


@pytest.mark.parametrize("where", ["file", "below-file", "proc"])
def test_an_unusable_out_folder_is_one_line_exit_2(tmp_path, where):
    config = write(tmp_path, 2)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = {
        "file": blocker,
        "below-file": blocker / "run",
        "proc": Path("/proc/fedleak-run"),
    }[where]
    one_line_error(
        fedleak("run", str(config), "--out", str(out), cwd=tmp_path), "(--out)"
    )


def test_resume_needs_a_run_folder_and_no_config(tmp_path):
    config = write(tmp_path, 2)
    one_line_error(fedleak("run", "--resume", str(tmp_path), cwd=tmp_path), "resume")
    one_line_error(
        fedleak("run", str(config), "--resume", str(tmp_path), cwd=tmp_path),
        "resume",
    )


@pytest.mark.slow
def test_a_diverged_run_writes_strict_json_and_names_the_non_finite_values(tmp_path):
    config = write(tmp_path, 3)
    out = tmp_path / "run"
    result = fedleak(
        "run", str(config), "--out", str(out), "--set",
        "strategy.learning_rate=1e308", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    results = strict_load(out / "results.json")
    assert results["status"] == "completed", result.stderr
    assert results["non_finite"], "a 1e308 step must overflow somewhere"
    assert any(p.startswith("rounds[") for p in results["non_finite"])


@pytest.mark.slow
def test_a_client_crash_is_one_line_without_verbose(tmp_path):
    faults = "[faults]\ncrash_clients = [0]\ncrash_rounds = [1, 2]\n"
    config = write(tmp_path, 3, faults)
    result = fedleak(
        "run", str(config), "--out", str(tmp_path / "run"), cwd=tmp_path, timeout=300
    )
    assert result.returncode == 0, result.stderr
    failed = [line for line in result.stderr.splitlines() if "a client failed" in line]
    assert len(failed) == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) < 15, result.stderr
