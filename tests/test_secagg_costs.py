"""The in-process cost measurement: structure and correctness (no timing asserts)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedleak.errors import ConfigError
from fedleak.secagg.costs import measure_costs, measure_floor, measure_round


def test_measure_costs_reports_both_modes_the_floor_and_ratios() -> None:
    (row,) = measure_costs(((5, 2000),), repeats=2)
    assert (row["n_clients"], row["length"]) == (5, 2000)
    double, thesis, floor = row["double-masking"], row["thesis"], row["floor"]
    for measured in (double, thesis):
        assert measured["max_abs_error"] < 5 * 2**-20  # the sum is right
        assert measured["client_upload_s"] > 0 and measured["server_total_s"] > 0
    assert thesis["client_unmask_s"] == 0  # no dropouts: no unmask stage
    assert (double["exchanges_per_round"], thesis["exchanges_per_round"]) == (2, 1)
    # double masking sends the same vector plus 4 sealed and 4 revealed shares
    assert double["bytes_up_per_client"] - thesis["bytes_up_per_client"] == 4 * (
        48 + 32
    )
    assert floor["threshold"] == 3
    assert floor["floor_client_s"] > floor["shamir_split_s"] > 0
    assert set(row["ratios"]) == {
        "client_double_vs_thesis",
        "server_double_vs_thesis",
        "client_upload_vs_floor",
        "client_upload_cpu_vs_floor",
        "shamir_pycryptodome_vs_fedleak",
    }
    assert floor["floor_client_cpu_s"] > floor["shamir_split_cpu_s"] > 0
    assert double["client_upload_cpu_s"] > 0
    assert all(v > 0 for v in row["ratios"].values())


def test_measure_round_and_validation() -> None:
    single = measure_round(4, 100, "double-masking", repeats=1)
    assert single["exchanges_per_round"] == 2 and single["max_abs_error"] < 1e-5
    with pytest.raises(ConfigError):
        measure_costs(((2, 10),))
    with pytest.raises(ConfigError):
        measure_round(4, 10, "plain")  # type: ignore[arg-type]


class _Clock:
    """A stand-in for ``time`` in the costs module: the clock moves only when
    a patched primitive says how long it took, the thread's CPU time by half
    as much (the other half spent waiting for a core); pycryptodome's calls
    are kept."""

    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 7.0
        self.pycryptodome: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def perf_counter(self) -> float:
        return self.now

    def thread_time(self) -> float:
        return self.cpu

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.cpu += seconds / 2


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    """Every primitive of the floor and each client's upload and unmask take a
    known time on a fake clock (the server's own timing is not patched)."""
    from Crypto.Protocol.SecretSharing import Shamir

    from fedleak.secagg import costs
    from fedleak.secagg.client import ClientSession

    fake = _Clock()
    monkeypatch.setattr(costs, "time", fake)

    def timed(function: Any, seconds: float, name: str = "") -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            if name:
                fake.pycryptodome.append((name, args, kwargs))
            out = function(*args, **kwargs)
            fake.advance(seconds)
            return out

        return run

    class Numpy:
        """numpy, with an addition that takes 3e-4 s."""

        add = staticmethod(timed(np.add, 3e-4))

        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

    monkeypatch.setattr(costs, "np", Numpy())

    monkeypatch.setattr(costs, "agree", timed(costs.agree, 1e-4))
    monkeypatch.setattr(costs, "expand", timed(costs.expand, 2e-3))
    monkeypatch.setattr(costs, "split", timed(costs.split, 5e-4))
    monkeypatch.setattr(Shamir, "split", timed(Shamir.split, 1e-2, "split"))
    monkeypatch.setattr(Shamir, "combine", timed(Shamir.combine, 3e-2, "combine"))
    monkeypatch.setattr(ClientSession, "upload", timed(ClientSession.upload, 1e-3))
    monkeypatch.setattr(ClientSession, "unmask", timed(ClientSession.unmask, 2e-3))
    return fake


def test_the_floor_adds_up_what_its_primitives_take(clock: _Clock) -> None:
    """floor = (N - 1) agreements + N (expansion + addition) + one split; the
    speed-up is pycryptodome's split of two chunks over fedleak's split, for
    N - 1 holders and combined from the threshold's shares (plain Shamir, no
    SSSS)."""
    floor = measure_floor(5, 64, repeats=2)
    splits = [c for c in clock.pycryptodome if c[0] == "split"]
    combines = [c for c in clock.pycryptodome if c[0] == "combine"]
    assert splits and combines
    for _, (threshold, holders, chunk), kwargs in splits:
        assert (threshold, holders, len(chunk), kwargs) == (3, 4, 16, {"ssss": False})
    for _, (shares,), kwargs in combines:
        assert len(shares) == 3 and kwargs == {"ssss": False}
    assert floor == {
        "n_clients": 5,
        "length": 64,
        "threshold": 3,
        "x25519_s": pytest.approx(1e-4),
        "aes_ctr_s": pytest.approx(2e-3),
        "add_s": pytest.approx(3e-4),
        "shamir_split_s": pytest.approx(5e-4),
        "pycryptodome_split_s": pytest.approx(2e-2),
        "pycryptodome_combine_s": pytest.approx(6e-2),
        "floor_client_s": pytest.approx(4 * 1e-4 + 5 * (2e-3 + 3e-4) + 5e-4),
        "shamir_speedup": pytest.approx(40.0),
        "x25519_cpu_s": pytest.approx(0.5e-4),
        "aes_ctr_cpu_s": pytest.approx(1e-3),
        "add_cpu_s": pytest.approx(1.5e-4),
        "shamir_split_cpu_s": pytest.approx(2.5e-4),
        "floor_client_cpu_s": pytest.approx((4 * 1e-4 + 5 * (2e-3 + 3e-4) + 5e-4) / 2),
    }


def test_a_round_reports_each_clients_stages_and_bytes(clock: _Clock) -> None:
    double = measure_round(5, 100, "double-masking", repeats=2)
    assert double["client_upload_s"] == pytest.approx(1e-3)
    assert double["client_unmask_s"] == pytest.approx(2e-3)
    assert double["client_total_s"] == pytest.approx(3e-3)
    assert double["client_upload_cpu_s"] == pytest.approx(0.5e-3)
    assert double["client_unmask_cpu_s"] == pytest.approx(1e-3)
    assert double["client_total_cpu_s"] == pytest.approx(1.5e-3)
    assert double["server_total_s"] == pytest.approx(
        double["server_upload_s"] + double["server_unmask_s"]
    )
    thesis = measure_round(5, 100, "thesis", repeats=1)
    assert thesis["client_unmask_s"] == 0.0
    assert thesis["client_total_s"] == pytest.approx(1e-3)
    # bytes per client, integers: the vector up (no key advertisement); the
    # roster's keys and ids down
    assert thesis["bytes_up_per_client"] == 4 * 100
    assert thesis["bytes_down_per_client"] == 5 * (32 + 8)
    assert type(thesis["bytes_up_per_client"]) is int  # one round: no median
    assert type(thesis["bytes_down_per_client"]) is int
    assert double["bytes_up_per_client"] == 4 * 100 + 4 * (48 + 32)
    for figures, mode, exchanges in (
        (double, "double-masking", 2),
        (thesis, "thesis", 1),
    ):
        assert (figures["mode"], figures["n_clients"], figures["length"]) == (
            mode,
            5,
            100,
        )
        assert figures["exchanges_per_round"] == exchanges


def test_costs_pair_the_modes_and_the_floor_block_by_block(clock: _Clock) -> None:
    (row,) = measure_costs(((3, 16),), repeats=4)
    assert row["repeats"] == 4 and (row["n_clients"], row["length"]) == (3, 16)
    floor = 2 * 1e-4 + 3 * (2e-3 + 3e-4) + 5e-4
    assert row["floor"]["floor_client_s"] == pytest.approx(floor)
    ratios = row["ratios"]
    assert ratios["client_double_vs_thesis"] == pytest.approx(3e-3 / 1e-3)
    assert ratios["client_upload_vs_floor"] == pytest.approx(1e-3 / floor)
    assert row["floor"]["floor_client_cpu_s"] == pytest.approx(floor / 2)
    assert ratios["client_upload_cpu_vs_floor"] == pytest.approx(1e-3 / floor)
    assert ratios["shamir_pycryptodome_vs_fedleak"] == pytest.approx(40.0)
    server = row["double-masking"]["server_total_s"] / row["thesis"]["server_total_s"]
    assert 0 < ratios["server_double_vs_thesis"] < 100 * server
    assert measure_costs(((3, 4),))[0]["repeats"] == 5  # the default
    (one,) = measure_costs(((3, 4),), repeats=1)  # one block: the ratio itself
    assert one["ratios"]["server_double_vs_thesis"] == pytest.approx(
        one["double-masking"]["server_total_s"] / one["thesis"]["server_total_s"]
    )


def test_figures_are_medians_and_the_error_is_the_largest() -> None:
    from fedleak.secagg.costs import _medians

    rows = [
        {"t": 1.0, "max_abs_error": 1e-9},
        {"t": 5.0, "max_abs_error": 3e-9},
        {"t": 2.0, "max_abs_error": 2e-9},
    ]
    assert _medians(rows) == {"t": 2.0, "max_abs_error": 3e-9}


@pytest.mark.parametrize(
    ("sizes", "repeats", "message"),
    [
        (((2, 10),), 1, r"got \(2, 10\), 1$"),
        (((3, 0),), 1, r"got \(3, 0\), 1$"),
        (((3, 10),), 0, r"got \(3, 10\), 0$"),
    ],
)
def test_cost_sizes_are_checked(
    sizes: tuple[tuple[int, int], ...], repeats: int, message: str
) -> None:
    with pytest.raises(
        ConfigError, match=r"^sizes need N >= 3 and L >= 1 and repeats >= 1, " + message
    ):
        measure_costs(sizes, repeats=repeats)
    with pytest.raises(
        ConfigError,
        match=r"^mode must be one of \['double-masking', 'thesis'\], got 'plain'$",
    ):
        measure_round(4, 10, "plain")  # type: ignore[arg-type]


def test_the_smallest_sizes_are_measured(clock: _Clock) -> None:
    (row,) = measure_costs(((3, 1),), repeats=1)
    assert row["thesis"]["bytes_up_per_client"] == 4


def test_each_block_measures_both_modes_and_the_floor_in_a_rotated_order(
    clock: _Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedleak.secagg import costs

    calls: list[str] = []
    real_round, real_floor = costs._round_once, costs._floor_once

    def round_once(n: int, length: int, mode: str, *rest: Any) -> Any:
        calls.append(mode)
        return real_round(n, length, mode, *rest)  # type: ignore[arg-type]

    def floor_once(n: int, length: int) -> Any:
        calls.append("floor")
        return real_floor(n, length)

    monkeypatch.setattr(costs, "_round_once", round_once)
    monkeypatch.setattr(costs, "_floor_once", floor_once)
    measure_costs(((3, 4),), repeats=4)
    double, thesis, floor = "double-masking", "thesis", "floor"
    assert calls == [
        *(double, thesis, floor),
        *(thesis, floor, double),
        *(floor, double, thesis),
        *(double, thesis, floor),
    ]
