"""Federated sketch analytics in a Flower simulation, and the bench (slow)."""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pytest
from fedleak.clients.sketch_analytics import make_sketch_client_app, recommender_source
from fedleak.strategies.sketch_analytics import SketchAnalytics, SketchAnalyticsResult
from flwr.app import ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from fedleak.sketches import CountMinSketch
from fedleak.sketches.recommender import user_sketch, zipf_population

pytestmark = pytest.mark.slow

POPULATION = {"population-users": 6, "population-items": 40, "population-seed": 4}


def simulate(crash_partition: int | None, mode: str) -> SketchAnalyticsResult:
    outcome: dict[str, SketchAnalyticsResult] = {}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        analytics = SketchAnalytics(
            CountMinSketch(5, 64, seed=7),
            max_count=100,
            min_nodes=6,
            config=POPULATION,
            mode=mode,  # type: ignore[arg-type]
        )
        outcome["result"] = analytics.run(grid)

    def source(context: Context, config: ConfigRecord) -> tuple[Any, Any]:
        if context.node_config["partition-id"] == crash_partition:
            raise RuntimeError("this node crashes before uploading")
        return recommender_source(context, config)

    run_simulation(
        server_app=server,
        client_app=make_sketch_client_app(source, accept_thesis=mode == "thesis"),
        num_supernodes=6,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {
                "include_dashboard": False,
                "logging_level": logging.ERROR,
                "log_to_driver": False,
            },
        },
    )
    return outcome["result"]


def expected_sketch(skip: int | None) -> CountMinSketch:
    population = zipf_population(6, 40, seed=4)
    total = CountMinSketch(5, 64, seed=7)
    for user in range(6):
        if user != skip:
            total.merge(user_sketch(population.items_of(user), 40, total))
    return total


@pytest.mark.parametrize(
    "mode",
    [pytest.param("double-masking", marks=pytest.mark.in_default_run), "thesis"],
)
def test_recommender_run_with_a_crashed_node_gives_the_survivors_sketch(
    mode: str,
) -> None:
    result = simulate(crash_partition=2, mode=mode)
    assert len(result.contributors) == 5 and len(result.dropped) == 1
    assert result.failed_groups == []
    assert result.refusals == {}
    assert result.bytes_up["recover"] == 5 * 5 * 64 * 4  # five recoveries, uint32
    if mode == "double-masking":
        # every uploader sealed one self-mask share per peer; the unmask stage
        # revealed those of the five online members to each other
        assert result.bytes_up["shares"] == 5 * 5 * 48
        assert result.bytes_up["revealed-shares"] == 5 * 4 * 32
    assert result.exchanges == 3  # advertise, upload, unmask
    assert result.sketch == expected_sketch(skip=2)
    assert np.all(result.sketch.table >= 0)


def test_bench_quick_writes_json_and_plots(tmp_path) -> None:
    from fedleak.bench.sketches import run_sketch_bench

    out = tmp_path / "sketches.json"
    run_sketch_bench(out, quick=True)
    report = json.loads(out.read_text())
    assert report["schema_version"] == 1
    tp = report["throughput"]
    assert tp["parameters"]["n_items"] == 1_000_000
    assert tp["update_ratio"] > 0 and tp["query_ratio"] > 0
    assert tp["accuracy"]["fedleak"]["underestimates"] == 0
    rec = report["recommender"]
    assert set(rec["fig_4_5b"]["average_error"]) == {"0.01", "0.05", "0.1"}
    assert all(row["masked_equals_plain"] for row in rec["table_4_1"])
    assert rec["table_4_1"][0]["user_to_tally_bytes"] == 19_584
    assert report["heatmaps"]["masked_slot"]["equals_plain_sketch"]
    median = report["median"]
    assert median["encrypted_run"]["same_as_plaintext"]
    assert median["encrypted_run"]["decryptions"] <= 10
    errors = [row["mean_relative_error"] for row in median["fig_4_10"]]
    assert errors[0] <= errors[-1]  # the largest sketch is the most accurate
    for plot in report["plots"]:
        assert (tmp_path / plot.rsplit("/", 1)[-1]).stat().st_size > 0
