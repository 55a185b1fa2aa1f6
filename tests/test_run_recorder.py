"""The server's round records: evaluations in the background keep order and numbers."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from flwr.app import ArrayRecord

from fedleak.experiments.config import validate
from fedleak.experiments.server import RunRecorder
from fedleak.runtime.idle_priority import idle_priority_supported


def config(**evaluation: object):
    raw = {
        "name": "recorder",
        "seed": 3,
        "rounds": 3,
        "data": {"dataset": "digits"},
        "model": {"name": "mlp"},
        "evaluation": {"max_test_examples": 100, **evaluation},
    }
    return validate(raw, "test", "recorder")


def models(seed: int, count: int) -> list[ArrayRecord]:
    """``count`` different global models of the experiment's MLP."""
    out = []
    for i in range(count):
        torch.manual_seed(seed + i)
        out.append(ArrayRecord(config().task().new_model().state_dict()))
    return out


def test_background_evaluations_write_the_same_rows_in_round_order(tmp_path):
    arrays = models(11, 4)
    serial = RunRecorder(config(), tmp_path / "a")
    (tmp_path / "a").mkdir()
    for r, model in enumerate(arrays):
        serial.evaluate_fn(r, model)

    seen: list[tuple[int, str]] = []
    overlapped = RunRecorder(
        config(),
        tmp_path / "b",
        on_round=lambda r, _row: seen.append((r, threading.current_thread().name)),
    )
    (tmp_path / "b").mkdir()
    overlapped.evaluate_fn(0, arrays[0])
    for r in (1, 2, 3):
        overlapped.end_round(r, arrays[r])
        # the row of round r waits for its evaluation; earlier rows are written
        assert sorted(overlapped.rows) == list(range(r))
    overlapped.close()
    assert [r for r, _ in seen] == [0, 1, 2, 3]
    assert all(name == threading.current_thread().name for _, name in seen)
    for r in range(4):
        assert overlapped.rows[r]["server"] == serial.rows[r]["server"]
        assert "test-accuracy" in overlapped.rows[r]["server"]
    logged = (tmp_path / "b" / "rounds.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in logged] == [0, 1, 2, 3]
    for r in (1, 2, 3):
        timing = overlapped.timings[r]
        assert timing["evaluate_s"] > 0  # measured on the worker thread
        assert timing["server_s"] == pytest.approx(
            timing["wall_s"] - timing["wait_s"] - timing["evaluate_blocked_s"]
        )


def test_rounds_without_an_evaluation_are_written_at_once(tmp_path):
    recorder = RunRecorder(config(every=2), None)
    arrays = models(5, 4)
    recorder.evaluate_fn(0, arrays[0])
    recorder.end_round(1, arrays[1])  # not due: written now, empty
    assert recorder.rows[1]["server"] == {}
    assert recorder.timings[1]["evaluate_s"] == 0.0
    recorder.end_round(2, arrays[2])  # due: pending
    assert 2 not in recorder.rows
    recorder.flush()
    assert "test-accuracy" in recorder.rows[2]["server"]
    recorder.end_round(3, arrays[3])  # the last round is always evaluated
    recorder.close()
    assert "test-accuracy" in recorder.rows[3]["server"]
    recorder.close()  # a second close changes nothing
    assert sorted(recorder.rows) == [0, 1, 2, 3]


def _policy(tid: int) -> int:
    import os

    return os.sched_getscheduler(tid)


@pytest.mark.skipif(not idle_priority_supported(), reason="no SCHED_IDLE here")
def test_background_evaluation_runs_on_idle_time_until_the_server_waits(tmp_path):
    import os

    recorder = RunRecorder(config(), None)
    arrays = models(7, 3)
    started, release = threading.Event(), threading.Event()
    policies: dict[str, int] = {}
    measure = recorder._timed_metrics

    def slow(arrays):  # type: ignore[no-untyped-def]
        policies["running"] = _policy(0)
        started.set()
        assert release.wait(10)
        policies["after wait"] = _policy(0)
        return measure(arrays)

    recorder._timed_metrics = slow  # type: ignore[method-assign]
    recorder.evaluate_fn(0, arrays[0])
    recorder.end_round(1, arrays[1])
    assert started.wait(10)
    assert policies["running"] == os.SCHED_IDLE  # only idle CPU time
    flushing = threading.Thread(target=recorder.flush)
    flushing.start()  # the server now waits: the evaluation is the critical path
    tid = recorder._evaluator_tid
    assert tid is not None
    for _ in range(1000):
        if _policy(tid) != os.SCHED_IDLE:
            break
        threading.Event().wait(0.005)
    release.set()
    flushing.join(10)
    assert policies["after wait"] == os.SCHED_OTHER
    assert "test-accuracy" in recorder.rows[1]["server"]
    started.clear()
    release.clear()
    recorder.end_round(2, arrays[2])  # the next evaluation is idle again
    assert started.wait(10)
    assert policies["running"] == os.SCHED_IDLE
    release.set()
    recorder.close()
    assert sorted(recorder.rows) == [0, 1, 2]


def test_an_evaluation_the_server_already_waits_for_keeps_normal_priority():
    import os

    from fedleak.runtime import idle_priority

    if not idle_priority.idle_priority_supported():
        pytest.skip("no SCHED_IDLE here")
    recorder = RunRecorder(config(), None)
    arrays = models(9, 2)
    seen: list[int] = []
    measure = recorder._timed_metrics

    def record(arrays):  # type: ignore[no-untyped-def]
        seen.append(_policy(0))
        return measure(arrays)

    recorder._timed_metrics = record  # type: ignore[method-assign]
    urgent = threading.Event()
    urgent.set()  # as flush() marks it before the worker starts the task
    try:
        assert idle_priority.to_idle_priority()  # as a previous task left the thread
        recorder._background_metrics(arrays[1], urgent)
        assert seen == [os.SCHED_OTHER]
        recorder._background_metrics(arrays[1], threading.Event())
        assert seen == [os.SCHED_OTHER, os.SCHED_IDLE]
    finally:
        idle_priority.to_normal_priority(threading.get_native_id())
    recorder.close()
