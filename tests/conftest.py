"""Shared fixtures: Flower's task identity, and one Ray cluster for the slow tests.

Starting a local Ray instance costs several seconds per simulation (its
processes start and stop each time), which dominated the slow tests. The slow
tests therefore join one Ray cluster that the session starts once
(:func:`ray_cluster`; ``RAY_ADDRESS`` names it, as for any Ray driver, and
fedleak's runs follow that variable). A test marked ``own_ray`` starts its own
local instance, as ``fedleak run`` does by default: the tests of what a run
leaves behind (processes after Ctrl-C, SIGTERM, SIGKILL). With
``FEDLEAK_TEST_OWN_RAY=1`` every simulation starts its own instance.

Under mutation testing (``scripts/mutation.py``, which runs the tests inside
mutmut's process) Hypothesis does not shrink a failing example: a mutant is
killed by the first failure, and shrinking a failing protocol run (many
clients, many rounds) takes longer than mutmut's time limit, so a detected
mutant would be recorded as a timeout instead of a kill.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from flwr.supercore.task_identity import TaskIdentity
from hypothesis import Phase, settings

settings.register_profile(
    "mutation", phases=(Phase.explicit, Phase.reuse, Phase.generate)
)
if "mutmut" in sys.modules:
    settings.load_profile("mutation")

RAY_BIN = Path(sys.executable).parent / "ray"
#: messages up to 8 MiB travel inline, as on fedleak's own local instance
RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": 8 * 1024 * 1024}


@pytest.fixture
def task_identity() -> Iterator[None]:
    """Set the identity Flower stamps on instruction messages (as a ServerApp has)."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _processes_under(folder: str) -> list[int]:
    """Process ids whose command line names ``folder`` (one Ray cluster's)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if folder.encode() in cmdline:
            pids.append(int(entry.name))
    return pids


def stop_ray_cluster(temp_dir: str) -> None:
    """Stop the processes of the Ray cluster kept in ``temp_dir``, and only them.

    ``ray stop`` would stop every Ray process of the user, other runs' too.
    """
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        pids = _processes_under(temp_dir)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            time.sleep(0.1)
            pids = [p for p in pids if Path(f"/proc/{p}").exists()]
    shutil.rmtree(temp_dir, ignore_errors=True)


def start_ray_cluster() -> tuple[str, str]:
    """Start a Ray head on a free port; return its address and temp folder."""
    # Ray's socket paths must stay under ~107 characters: a short temp folder
    temp_dir = tempfile.mkdtemp(prefix="ray")
    port = _free_port()
    env = {**os.environ, "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
    env.pop("RAY_ADDRESS", None)
    start = subprocess.run(
        [
            str(RAY_BIN),
            "start",
            "--head",
            f"--port={port}",
            "--include-dashboard=false",
            f"--temp-dir={temp_dir}",
            "--disable-usage-stats",
            f"--system-config={json.dumps(RAY_SYSTEM_CONFIG)}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    if start.returncode != 0:
        stop_ray_cluster(temp_dir)
        raise RuntimeError(f"cannot start a local Ray head: {start.stderr[-800:]}")
    return f"127.0.0.1:{port}", temp_dir


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """One Ray cluster for the session's slow tests; its address."""
    address, temp_dir = start_ray_cluster()
    try:
        yield address
    finally:
        stop_ray_cluster(temp_dir)


@pytest.fixture(autouse=True)
def _ray_address(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Point slow tests at the session's Ray cluster; every other test at none."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    node = request.node
    if (
        node.get_closest_marker("slow") is None
        or node.get_closest_marker("own_ray") is not None
        or os.environ.get("FEDLEAK_TEST_OWN_RAY") == "1"
    ):
        return
    monkeypatch.setenv("RAY_ADDRESS", request.getfixturevalue("ray_cluster"))
