"""``fedleak bench strategies`` at a tiny scale: engine recorded, ratios (slow)."""

from __future__ import annotations

import json

import pytest

from fedleak.bench.strategies import run_strategy_bench
from fedleak.errors import ConfigError
from fedleak.runtime.engine import DEFAULT_ACTOR_BATCH, DEFAULT_POLL_INTERVAL


@pytest.mark.slow
def test_the_strategies_run_on_fedleaks_engine_and_the_record_says_so(tmp_path):
    out = tmp_path / "strategies.json"
    record = run_strategy_bench(out, clients=3, rounds=3, blocks=1)
    assert json.loads(out.read_text()) == record
    assert record["engine"] == {
        "engine": "fedleak",
        "poll_interval": DEFAULT_POLL_INTERVAL,
        "wake_ups": True,
        "actor_batch": DEFAULT_ACTOR_BATCH,
        "actor_channels": True,
    }
    assert set(record["strategies"]) == {"sync-sgd", "model-averaging", "fedavg"}
    for name, stats in record["strategies"].items():
        assert len(stats["round_s"]) == 2  # round 1 of the start() call is left out
        assert record["ratios_vs_fedavg"][name] == pytest.approx(
            stats["median_round_s"] / record["strategies"]["fedavg"]["median_round_s"]
        )


def test_an_unknown_engine_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="engine"):
        run_strategy_bench(tmp_path / "x.json", engine="grpc")  # type: ignore[arg-type]
