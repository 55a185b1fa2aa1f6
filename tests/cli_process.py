"""Run the installed ``fedleak`` command as a user would: a separate process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FEDLEAK = str(Path(sys.executable).with_name("fedleak"))


def run_fedleak(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``fedleak ARGS`` and return its exit status and output."""
    # a wide terminal: rich tables wrap names at the caller's width otherwise
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [FEDLEAK, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env=env,
    )
