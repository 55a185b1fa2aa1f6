"""The engine bench's probe of two CPUs alone and at once."""

from __future__ import annotations

import os
import subprocess

import pytest

from fedleak.bench import cpu_pairs
from fedleak.bench.cpu_pairs import measure_cpu_pairs, pair_throughput

_CPUS = (
    len(os.sched_getaffinity(0))
    if hasattr(os, "sched_getaffinity")
    else (os.cpu_count() or 1)
)


def test_pair_throughput_is_the_counts_together_over_the_counts_alone() -> None:
    assert pair_throughput([100, 300], [100, 300]) == 1.0
    assert pair_throughput([100, 100], [75, 75]) == 0.75
    assert pair_throughput([200, 100], [150, 60]) == 0.7
    assert pair_throughput([1, 0], [1, 0]) == 1.0


@pytest.mark.parametrize(
    ("solo", "pair", "words"),
    [
        ([1, 2], [1], "^solo and pair need one count per CPU, for the same CPUs$"),
        ([], [], "^solo and pair need one count per CPU, for the same CPUs$"),
        ([0, 0], [1, 1], "^the CPUs made no pass of the probe alone$"),
    ],
)
def test_pair_throughput_refuses_counts_that_do_not_pair_up(
    solo: list[int], pair: list[int], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        pair_throughput(solo, pair)


def _affinity(cpus: set[int]):
    """A stand-in for ``os.sched_getaffinity`` that answers for this process only."""

    def affinity(pid: int) -> set[int]:
        assert pid == 0
        return cpus

    return affinity


def test_the_probe_counts_each_cpu_alone_then_both_in_windows_of_one_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[list[int], float]] = []
    counts = {(0,): [40], (1,): [60], (0, 1): [30, 45]}

    def count(cpus: list[int], window_s: float) -> list[int]:
        calls.append((list(cpus), window_s))
        return counts[tuple(cpus)]

    monkeypatch.setattr(cpu_pairs, "_count", count)
    monkeypatch.setattr(os, "sched_getaffinity", _affinity({1, 0, 3}), raising=False)
    found = measure_cpu_pairs(window_s=0.25)
    assert calls == [([0], 0.25), ([1], 0.25), ([0, 1], 0.25)]
    assert found == {
        "cpus": [0, 1],
        "window_s": 0.25,
        "solo": [40, 60],
        "pair": [30, 45],
        "pair_throughput": 0.75,
    }


def test_one_cpu_gives_no_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(cpus: list[int], window_s: float) -> list[int]:
        raise AssertionError("no probe should run on one CPU")

    monkeypatch.setattr(cpu_pairs, "_count", never)
    monkeypatch.setattr(os, "sched_getaffinity", _affinity({2}), raising=False)
    assert measure_cpu_pairs() == {"cpus": [2], "pair_throughput": None}


@pytest.mark.parametrize(("count", "cpus"), [(4, [0, 1]), (1, [0]), (None, [0])])
def test_without_affinity_the_probe_takes_the_first_cpus_of_the_count(
    monkeypatch: pytest.MonkeyPatch, count: int | None, cpus: list[int]
) -> None:
    probed: list[list[int]] = []

    def record(chosen: list[int], window_s: float) -> list[int]:
        probed.append(list(chosen))
        return [5] * len(chosen)

    monkeypatch.setattr(cpu_pairs, "_count", record)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: count)
    found = measure_cpu_pairs()
    assert found["cpus"] == cpus
    assert probed == ([[0], [1], [0, 1]] if len(cpus) == 2 else [])
    if len(cpus) == 2:
        assert found["window_s"] == 0.5  # the documented default


def test_a_probe_process_that_fails_is_an_error_naming_its_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu_pairs, "_PROBE", "import sys; sys.exit(3)")
    with pytest.raises(RuntimeError, match="the CPU probe exited with status 3"):
        cpu_pairs._count([0], 0.01)


@pytest.mark.skipif(_CPUS < 2, reason="the probe needs two CPUs")
def test_the_real_probe_counts_passes_on_two_cpus() -> None:
    found = measure_cpu_pairs(window_s=0.1)
    assert len(found["solo"]) == len(found["pair"]) == 2
    assert all(n > 0 for n in found["solo"] + found["pair"])
    assert 0.0 < found["pair_throughput"] < 2.0


def test_a_failed_probe_leaves_no_other_probe_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    real = subprocess.Popen

    def popen(argv: list[str], **options: object) -> subprocess.Popen[bytes]:
        cpu = int(argv[3])
        # the first probe fails at once, the second would spin for minutes
        code = "import sys; sys.exit(4)" if cpu == 0 else "import time; time.sleep(300)"
        child = real([argv[0], "-c", code], **options)  # type: ignore[call-overload]
        started.append(child)
        return child

    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(RuntimeError, match="status 4"):
        cpu_pairs._count([0, 1], 0.01)
    assert len(started) == 2
    assert all(child.poll() is not None for child in started)
