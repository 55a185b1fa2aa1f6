"""How much two CPUs give at once: one fixed loop alone on each CPU, then on both.

The engine bench's essential round divides the clients' work over the
simulation's actors as if they ran side by side at full speed. On a virtual
machine two vCPUs can share one physical core, or a host busy with other
guests, and then two busy processes each run slower than one alone: no engine
could reach that perfect split. This probe measures the state in the same run
as the rounds, so that a record says which state the machine was in.

Each probe process is pinned to one CPU (where the platform allows it), waits
for a common start time, counts passes of a small pure-Python loop (no memory
traffic beyond the first cache level, no system calls) until a common end
time, and prints the count. The probe runs each CPU alone, then both at once;
:func:`pair_throughput` is the counts run together over the counts run alone:
1.0 where two CPUs give twice one CPU, 0.75 where each runs a quarter slower
when the other is busy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["measure_cpu_pairs", "pair_throughput"]

#: The probe process: argv is (cpu, start time, end time) on ``time.time()``.
_PROBE = """
import os, sys, time
cpu, start, end = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {cpu})
while time.time() < start:
    pass
passes = 0
while time.time() < end:
    total = 0
    for i in range(2000):
        total += i * i
    passes += 1
print(passes)
"""

#: Seconds between starting the probe processes and their common start time
#: (an interpreter starts in well under this).
_LEAD_S = 0.4


def _count(cpus: Sequence[int], window_s: float) -> list[int]:
    """Run one probe process per CPU in ``cpus`` over one common window."""
    start = time.time() + _LEAD_S
    end = start + window_s
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _PROBE, str(cpu), repr(start), repr(end)],
            stdout=subprocess.PIPE,
        )
        for cpu in cpus
    ]
    counts = []
    try:
        for child in children:
            out, _ = child.communicate(timeout=window_s + 60)
            if child.returncode != 0:
                raise RuntimeError(
                    f"the CPU probe exited with status {child.returncode}"
                )
            counts.append(int(out))  # int() reads the ASCII digits of bytes
    finally:  # a failed or interrupted probe leaves no process spinning
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return counts


def pair_throughput(solo: Sequence[int], pair: Sequence[int]) -> float:
    """Return the passes two CPUs made together over those they made alone.

    Parameters
    ----------
    solo : sequence of int
        Each CPU's count in a window when it ran alone.
    pair : sequence of int
        Each CPU's count in a window of the same length when both ran.

    Returns
    -------
    float
        ``sum(pair) / sum(solo)``: 1.0 for CPUs that do not slow each other.
    """
    if len(solo) != len(pair) or not solo:
        raise ValueError("solo and pair need one count per CPU, for the same CPUs")
    if sum(solo) <= 0:
        raise ValueError("the CPUs made no pass of the probe alone")
    return sum(pair) / sum(solo)


def measure_cpu_pairs(window_s: float = 0.5) -> dict[str, Any]:
    """Probe the first two CPUs this process may run on, alone and together.

    Parameters
    ----------
    window_s : float, default=0.5
        Length of each counting window (three windows in all).

    Returns
    -------
    dict
        ``cpus`` probed, ``window_s``, the ``solo`` and ``pair`` counts and
        their :func:`pair_throughput`; with fewer than two CPUs, only ``cpus``
        and ``pair_throughput`` = ``None``.
    """
    allowed = (
        sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else list(range(os.cpu_count() or 1))
    )
    cpus = allowed[:2]
    if len(cpus) < 2:
        return {"cpus": cpus, "pair_throughput": None}
    solo = [_count([cpu], window_s)[0] for cpu in cpus]
    pair = _count(cpus, window_s)
    return {
        "cpus": cpus,
        "window_s": window_s,
        "solo": solo,
        "pair": pair,
        "pair_throughput": pair_throughput(solo, pair),
    }
