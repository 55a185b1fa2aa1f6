"""A thread that runs on idle CPU time only, until someone waits for it.

The server's overlapped evaluation (``[evaluation] overlap``) computes round
r's test metrics while round r+1 trains. On a machine whose CPUs the Ray
actors fill, an evaluation thread of normal priority takes its share from
the actors and slows the round it overlaps (the quickstart on 2 CPUs was no
faster than with its evaluation in line). A round leaves CPU idle while the
server and the actors hand work to each other (about a third of two CPUs on
the quickstart); an evaluation at Linux's ``SCHED_IDLE`` policy runs only
there, so the actors keep their CPUs. Once the server needs the result it
waits, and the thread goes back to normal priority: it is then the round's
critical path, and an idle-policy thread could starve behind other
processes' work.

Linux only; elsewhere, or where the process may not move a thread to
``SCHED_IDLE`` and back (:func:`idle_priority_supported` tries it once), the
thread keeps its normal priority.
"""

from __future__ import annotations

import os
import threading
from functools import cache

__all__ = ["idle_priority_supported", "to_idle_priority", "to_normal_priority"]


def _set_policy(tid: int, idle: bool) -> bool:
    policy = os.SCHED_IDLE if idle else os.SCHED_OTHER
    try:
        os.sched_setscheduler(tid, policy, os.sched_param(0))
    except OSError:
        return False
    return True


@cache
def idle_priority_supported() -> bool:
    """Whether a thread here can go to ``SCHED_IDLE`` and back to normal.

    Tried once, on a throwaway thread.
    """
    if not hasattr(os, "SCHED_IDLE") or not hasattr(os, "sched_setscheduler"):
        return False
    result: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        result.append(_set_policy(tid, True) and _set_policy(tid, False))

    thread = threading.Thread(target=probe, name="fedleak-priority-probe")
    thread.start()
    thread.join()
    return bool(result and result[0])


def to_idle_priority() -> bool:
    """Put the calling thread on idle CPU time only; False where unsupported."""
    return idle_priority_supported() and _set_policy(threading.get_native_id(), True)


def to_normal_priority(tid: int) -> bool:
    """Give thread ``tid`` (a native thread id) its normal priority back."""
    return idle_priority_supported() and _set_policy(tid, False)
