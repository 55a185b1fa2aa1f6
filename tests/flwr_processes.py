"""Start and stop Flower's own processes (SuperLink, SuperNodes, ``flwr run``) in tests.

Every process starts in its own session (process group), so stopping it
also stops the ``flower-superexec`` and app processes it spawned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    """Return a loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def flower_env(flwr_home: Path, **extra: str) -> dict[str, str]:
    """The environment of a Flower process: its own FLWR_HOME, apps run in this venv."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "FLWR_HOME": str(flwr_home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
        **extra,
    }


def write_connection(flwr_home: Path, name: str, address: str) -> None:
    """Write ``$FLWR_HOME/config.toml`` naming one SuperLink connection (Flower 1.41)."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    insecure = "" if address.startswith(":") else "insecure = true\n"
    (flwr_home / "config.toml").write_text(
        f'[superlink]\ndefault = "{name}"\n[superlink.{name}]\n'
        f'address = "{address}"\n{insecure}'
    )


def start(command: list[str], log: Path, env: dict[str, str], cwd: Path | None = None):  # type: ignore[no-untyped-def]
    """Start ``command`` (a Flower executable name first) in a new session."""
    with log.open("w") as out:
        return subprocess.Popen(
            [str(BIN / command[0]), *command[1:]],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:  # type: ignore[type-arg]
    """Send ``sig`` to the process group of ``process`` and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)


def kill_local_superlink(flwr_home: Path) -> None:
    """Stop the SuperLink ``flwr run`` started for a ``:local:`` connection.

    The CLI starts it detached (its own session) and leaves it running; its
    command line names ``flwr_home`` (log file and database).
    """
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "flower-superlink" in cmdline and str(flwr_home) in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(int(proc.name)), signal.SIGKILL)
