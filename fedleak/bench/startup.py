"""How long the ``fedleak`` command takes to answer, next to Flower's ``flwr``.

A command line tool is used interactively: ``fedleak --help``, ``fedleak run
--help`` and a configuration error must answer without importing torch,
Flower or Ray (:mod:`fedleak.cli` loads them only for the command that needs
them). Each command runs ``repeats`` times as a fresh process; the median
wall time is reported, with ``flwr --help`` measured the same way as the
peer's figure.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["measure_cli_startup"]

#: A configuration file with one error: an unknown key in ``[federation]``.
_BAD_CONFIG = 'name = "startup"\nrounds = 2\n[federation]\nnum_clients = 4\nbogus = 1\n'


def _console_script(name: str) -> list[str] | None:
    """Return the command line of the console script ``name`` of this interpreter."""
    here = Path(sys.executable).with_name(name)
    if here.exists():
        return [str(here)]
    found = shutil.which(name)
    return [found] if found else None


def _median_wall(argv: list[str], repeats: int) -> dict[str, Any]:
    times = []
    status = 0
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(
            argv,
            capture_output=True,
            env={**os.environ, "COLUMNS": "120"},
            check=False,
            timeout=120,
        )
        times.append(time.perf_counter() - start)
        status = done.returncode
    return {"median_s": statistics.median(times), "times_s": times, "exit": status}


def measure_cli_startup(repeats: int = 5) -> dict[str, Any]:
    """Time ``fedleak --help``, ``fedleak run --help``, a config error, ``flwr --help``.

    Parameters
    ----------
    repeats : int, default=5
        Fresh processes per command; the median is the figure.

    Returns
    -------
    dict
        Per command: ``median_s``, every time, and the last exit status (0 for
        help, 2 for the configuration error); commands whose console script
        is not installed are left out.
    """
    fedleak = _console_script("fedleak")
    flwr = _console_script("flwr")
    found: dict[str, Any] = {"repeats": repeats}
    with tempfile.TemporaryDirectory(prefix="fedleak-startup-") as tmp:
        bad = Path(tmp) / "bad.toml"
        bad.write_text(_BAD_CONFIG, encoding="utf-8")
        if fedleak:
            found["fedleak_help"] = _median_wall([*fedleak, "--help"], repeats)
            found["fedleak_run_help"] = _median_wall(
                [*fedleak, "run", "--help"], repeats
            )
            found["fedleak_config_error"] = _median_wall(
                [*fedleak, "run", str(bad), "--out", str(Path(tmp) / "run")], repeats
            )
        if flwr:
            found["flwr_help"] = _median_wall([*flwr, "--help"], repeats)
    return found
