"""``fedleak bench engine`` at a tiny scale: the record's shape and invariants (slow)."""

from __future__ import annotations

import json

import pytest

from fedleak.bench.engine import COMPONENTS, run_engine_bench
from fedleak.runtime.engine import FLOWER_POLL_INTERVAL

pytestmark = pytest.mark.slow

ROUNDS, SECURE_ROUNDS = 3, 3


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "engine.json"
    returned = run_engine_bench(
        out, quick=True, rounds=ROUNDS, secure_rounds=SECURE_ROUNDS
    )
    assert json.loads(out.read_text()) == returned
    return returned


@pytest.mark.parametrize(
    ("name", "rounds"), [("quickstart", ROUNDS), ("secure_round", SECURE_ROUNDS)]
)
def test_every_way_reports_its_rounds_and_their_parts(record, name, rounds):
    experiment = record[name]
    assert experiment["rounds"] == rounds and record["blocks"] == 1
    # fedleak's simulation runs between two in-process runs
    assert experiment["essential"]["runs_per_block"] == 2
    for way, runs in (("essential", 2), ("fedleak", 1), ("flower", 1)):
        result = experiment[way]
        assert len(result["round_s"]) == runs * (rounds - 1)  # first rounds left out
        assert set(result["median"]) == set(COMPONENTS)
        assert all(value >= 0 for value in result["median"].values())
    fedleak, flower, essential = (
        experiment[w] for w in ("fedleak", "flower", "essential")
    )
    assert experiment["fedleak_vs_essential"] == pytest.approx(
        fedleak["median_round_s"] / essential["median_round_s"]
    )
    assert experiment["flower_vs_fedleak"] == pytest.approx(
        flower["median_round_s"] / fedleak["median_round_s"]
    )
    assert experiment["fedleak_vs_serial"] == pytest.approx(
        fedleak["median_round_s"] / essential["median_serial_round_s"]
    )
    assert fedleak["engine"]["actor_channels"] is True
    for result in (fedleak, flower, essential):
        assert result["total_round_s"] == pytest.approx(sum(result["round_s"]))
        assert len(result["block_median_round_s"]) == record["blocks"]
    assert experiment["flower_vs_fedleak_total"] == pytest.approx(
        flower["total_round_s"] / fedleak["total_round_s"]
    )
    assert experiment["fedleak_vs_essential_total"] == pytest.approx(
        fedleak["total_round_s"] / (essential["total_round_s"] / 2)
    )
    assert len(experiment["outcomes"]["essential"]) == 2
    # the machine's two CPUs, probed before and after fedleak's bracket
    assert len(experiment["cpu_pairs"]) == 2
    assert all(0 < t < 2 for t in experiment["cpu_pair_throughput"])
    # every round of the peer waits at least one whole poll for its replies
    steps = flower["rounds_by_poll_steps"]
    assert sum(steps.values()) == rounds - 1 and min(map(int, steps)) >= 1
    assert fedleak["rounds_by_poll_steps"] is None
    # spreading the clients over the actors can only shorten the round
    assert 1 <= experiment["actors"] <= experiment["num_clients"]
    assert essential["median_round_s"] <= essential["median_serial_round_s"]


@pytest.mark.parametrize("name", ["quickstart", "secure_round"])
def test_the_peer_runs_flowers_polling_and_pays_at_least_one_poll_a_round(record, name):
    experiment = record[name]
    assert experiment["flower"]["engine"] == {
        "engine": "flower",
        "poll_interval": FLOWER_POLL_INTERVAL,
        "wake_ups": False,
        "actor_batch": 1,
        "actor_channels": False,
    }
    assert experiment["fedleak"]["engine"]["wake_ups"] is True
    assert experiment["fedleak"]["engine"]["actor_batch"] == 16
    # Flower's Grid pulls once right after the push (no reply can be there yet:
    # the dispatcher has not even run) and then sleeps its 0.1 s
    assert min(experiment["flower"]["round_s"]) >= FLOWER_POLL_INTERVAL


@pytest.mark.parametrize("name", ["quickstart", "secure_round"])
def test_all_three_ways_compute_the_same_numbers(record, name):
    experiment = record[name]
    assert experiment["same_results"] is True
    digests = {o["digest"] for way in experiment["outcomes"].values() for o in way}
    assert len(digests) == 1


def test_the_secure_round_sums_exactly_up_to_the_fixed_point_step(record):
    for way in record["secure_round"]["outcomes"].values():
        # 3 rounds of a mean of 10 vectors, each entry quantised to 2**-20 or finer
        assert way[0]["max_abs_error"] < SECURE_ROUNDS * 2**-18
