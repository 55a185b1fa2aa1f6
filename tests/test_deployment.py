"""The message-API example in Flower's Deployment Engine, one SuperNode killed (slow).

A real ``flower-superlink`` and five ``flower-supernode`` processes on
loopback, then ``flwr run <example> <connection>`` (Flower 1.41: the
connection lives in ``$FLWR_HOME/config.toml``; the CLI ships the app as a
FAB, which the SuperLink and each SuperNode install under their own
``FLWR_HOME``; no dependency is installed at run time). After round 1 one
SuperNode (with its children) is killed with SIGKILL. The run must finish,
and every round's global model must be the exact weighted mean of the
updates of the nodes that contributed (all five, or the four survivors),
recomputed here from the example's deterministic training, within the
fixed-point error bound the server reports.

Why five nodes: with the default double masking a group of ``n`` needs
``max(3, floor(n / 2) + 2)`` uploads, so five is the smallest federation that
survives a node dying in the middle of a round (three nodes minus one leave
two, which fedleak never decrypts: each would learn the other's input).
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr_processes import (
    flower_env,
    free_port,
    kill_group,
    start,
    write_connection,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "message-api-app"
NODES = 5
KILLED = 4  # partition id of the SuperNode that dies
ROUNDS = 3

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(__import__("os"), "killpg"), reason="POSIX only"),
]


def _wait_for(condition, seconds: float, what: str, procs) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited ({proc.returncode}) while {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:g} s {what}")
        time.sleep(0.5)


def _read_rounds(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _expected_mean(task, model, partitions, server_round):  # type: ignore[no-untyped-def]
    """The weighted mean of the partitions' updates (the example's own training)."""
    total, acc = 0, None
    for p in partitions:
        x, y = task.load_partition(p, NODES)
        trained, _ = task.train(
            model, x, y, epochs=1, lr=0.5, seed=1000 * p + server_round
        )
        weighted = [len(x) * t for t in trained]
        acc = (
            weighted
            if acc is None
            else [a + w for a, w in zip(acc, weighted, strict=True)]
        )
        total += len(x)
    assert acc is not None
    return [a / total for a in acc]


def test_survivors_aggregate_is_exact_after_a_supernode_is_killed(tmp_path):
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__"))
    rounds_file = tmp_path / "rounds.jsonl"
    logs = tmp_path / "logs"
    logs.mkdir()
    port = free_port()
    procs: dict[str, Any] = {}
    try:
        procs["superlink"] = start(
            [
                "flower-superlink",
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--disable-runtime-dependency-installation",
            ],
            logs / "superlink.log",
            flower_env(tmp_path / "home-superlink"),
        )
        for i in range(NODES):
            procs[f"supernode-{i}"] = start(
                [
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{port}",
                    "--port",
                    str(free_port()),
                    "--node-config",
                    f"partition-id={i} num-partitions={NODES}",
                ],
                logs / f"supernode-{i}.log",
                flower_env(tmp_path / f"home-supernode-{i}"),
            )

        def registered() -> bool:
            return all(
                "SuperNode ID:" in (logs / f"supernode-{i}.log").read_text()
                for i in range(NODES)
            )

        _wait_for(registered, 180, "waiting for the SuperNodes to register", procs)
        cli_home = tmp_path / "home-cli"
        write_connection(cli_home, "deployment", f"127.0.0.1:{port}")
        run_config = (
            f"num-nodes={NODES} num-server-rounds={ROUNDS} "
            f"on-too-few-nodes='proceed' node-wait-timeout=5.0 "
            f"rounds-file='{rounds_file}'"
        )
        procs["flwr run"] = start(
            [
                "flwr",
                "run",
                str(app),
                "deployment",
                "--stream",
                "--run-config",
                run_config,
            ],
            logs / "run.log",
            flower_env(cli_home),
        )
        _wait_for(
            lambda: any(r.get("round") == 1 for r in _read_rounds(rounds_file)),
            900,
            "waiting for round 1",
            procs,
        )
        kill_group(procs.pop(f"supernode-{KILLED}"))
        _wait_for(
            lambda: procs["flwr run"].poll() is not None,
            900,
            "waiting for the run to finish",
            {},
        )
    finally:
        for proc in procs.values():
            kill_group(proc)
    log = (logs / "run.log").read_text()
    assert procs["flwr run"].returncode == 0, log[-4000:]

    records = _read_rounds(rounds_file)
    models = {
        r["round"]: [
            np.asarray(a, dtype=d)
            for a, d in zip(r["arrays"], r["dtypes"], strict=True)
        ]
        for r in records
        if "round" in r
    }
    train = records[-1]["train-metrics"]
    assert sorted(models) == list(range(ROUNDS + 1))
    assert sorted(train) == [str(r) for r in range(1, ROUNDS + 1)]
    contributors = [int(train[str(r)]["num-replies"]) for r in range(1, ROUNDS + 1)]
    assert contributors[0] == NODES  # round 1 ran before the kill
    assert NODES - 1 in contributors  # the kill took effect
    assert set(contributors) <= {NODES, NODES - 1}

    sys.path.insert(0, str(app))
    try:
        task = importlib.import_module("fedleak_msg_example.task")
    finally:
        sys.path.remove(str(app))
    everyone = list(range(NODES))
    survivors = [p for p in everyone if p != KILLED]
    for server_round, count in enumerate(contributors, start=1):
        previous, got = models[server_round - 1], models[server_round]
        who = everyone if count == NODES else survivors
        want = _expected_mean(task, previous, who, server_round)
        other = _expected_mean(
            task, previous, survivors if count == NODES else everyone, server_round
        )
        bound = float(train[str(server_round)]["secagg-error-bound"])
        for g, w, o in zip(got, want, other, strict=True):
            assert g.dtype == np.float64
            # exact up to the fixed-point bound (plus float64 summation order)
            assert np.max(np.abs(g - w)) <= bound + 1e-12
            # and distinguishable from the mean over the other set of nodes
            assert np.max(np.abs(o - w)) > 1e-4
    # the SuperLink's logs came through once: one round header per round
    for server_round in range(1, ROUNDS + 1):
        assert log.count(f"[ROUND {server_round}/{ROUNDS}]") == 1
