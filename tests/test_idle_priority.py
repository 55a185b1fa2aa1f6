"""Threads on idle CPU time only (fedleak.runtime.idle_priority)."""

from __future__ import annotations

import os
import threading

import pytest

from fedleak.runtime import idle_priority

needs_idle = pytest.mark.skipif(
    not idle_priority.idle_priority_supported(), reason="no SCHED_IDLE here"
)


@needs_idle
def test_a_thread_goes_to_idle_time_and_back() -> None:
    seen: list[int] = []

    def body() -> None:
        assert idle_priority.to_idle_priority()
        seen.append(os.sched_getscheduler(0))
        assert idle_priority.to_normal_priority(threading.get_native_id())
        seen.append(os.sched_getscheduler(0))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [os.SCHED_IDLE, os.SCHED_OTHER]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this thread untouched


def test_a_refused_policy_change_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not hasattr(os, "sched_setscheduler"):
        pytest.skip("no sched_setscheduler here")

    def refuse(*args: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert idle_priority._set_policy(threading.get_native_id(), True) is False
    assert idle_priority._set_policy(threading.get_native_id(), False) is False
    idle_priority.idle_priority_supported.cache_clear()
    try:
        assert idle_priority.idle_priority_supported() is False
        assert idle_priority.to_idle_priority() is False
        assert idle_priority.to_normal_priority(threading.get_native_id()) is False
    finally:
        idle_priority.idle_priority_supported.cache_clear()
