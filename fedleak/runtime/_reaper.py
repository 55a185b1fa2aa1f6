"""Stop the processes a fedleak run left behind, however the run ended.

Run as a script (``python _reaper.py PID``) by
:func:`fedleak.runtime.lifecycle.start_reaper`, with its standard input
the read end of a pipe that only the run's process ``PID`` holds open. It
notes the run's descendants (Ray's GCS, raylet, agents and workers) every
half second; once the pipe closes (the run exited, was killed, even with
SIGKILL) it sends SIGTERM to every noted process still alive, then SIGKILL to
those alive two seconds later. Ray's own fate sharing kills the processes the
driver started directly, but not their children (the dashboard and
runtime-env agents outlive a killed driver by many seconds).

Standard library only, and no fedleak import: it starts in milliseconds and
outlives the run's interpreter. Linux only (it reads ``/proc``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

SCAN_INTERVAL = 0.5
GRACE = 2.0


def _stat(pid: int) -> tuple[int, int] | None:
    """Return ``(ppid, start time)`` of ``pid`` from ``/proc``, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """Map each descendant pid of ``root`` to its start time."""
    children: dict[int, list[tuple[int, int]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = _stat(int(name))
            if info is not None:
                children.setdefault(info[0], []).append((int(name), info[1]))
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        for pid, started in children.get(todo.pop(), []):
            if pid not in found:
                found[pid] = started
                todo.append(pid)
    return found


def _alive(noted: dict[int, int]) -> list[int]:
    me = os.getpid()
    alive = []
    for pid, started in noted.items():
        info = _stat(pid)
        if pid != me and info is not None and info[1] == started:
            alive.append(pid)
    return alive


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def main(root: int) -> None:
    """Watch ``root`` until standard input closes, then stop its leftovers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the run's
    noted: dict[int, int] = {}
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], SCAN_INTERVAL)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break
        noted.update(descendants(root))
    noted.update(descendants(root))
    _signal(_alive(noted), signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while _alive(noted) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal(_alive(noted), signal.SIGKILL)


if __name__ == "__main__":
    main(int(sys.argv[1]))
