"""``fedleak bench secagg``: Table 4.1, the acceptance checks, a tiny full run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedleak.bench.secagg import (
    PARTS,
    acceptance,
    parse_sizes,
    run_secagg_bench,
    seed_table,
)
from fedleak.bench.secagg_federated import (
    METHODS,
    STAGES,
    _client_app,
    payload_bytes,
)
from fedleak.bench.table_4_1 import THESIS_TABLE_4_1, from_error_size, seed_size
from fedleak.errors import ConfigError


def test_table_4_1_has_every_row_of_the_seed_with_its_own_rounding() -> None:
    assert [r.n_users for r in THESIS_TABLE_4_1] == list(range(100, 1001, 100))
    for row in THESIS_TABLE_4_1:
        assert seed_size(row.epsilon) == row.sketch_size
        assert row.user_to_tally_bytes == 4 * row.sketch_size
        assert row.tally_to_user_bytes == 32 * row.n_users
    differs = {
        r.n_users: (r.sketch_size, r.from_error_sketch_size)
        for r in THESIS_TABLE_4_1
        if r.sketch_size != r.from_error_sketch_size
    }
    assert differs == {
        500: (972, 990),
        600: (810, 828),
        900: (540, 558),
        1000: (486, 504),
    }
    assert from_error_size(0.01) == 4896


def test_the_thesis_mode_run_matches_the_seeds_bytes() -> None:
    (row,) = seed_table(THESIS_TABLE_4_1[:1])
    assert row["user_to_server_bytes"] == row["thesis_user_to_tally_bytes"] == 19584
    assert row["server_to_user_key_bytes"] == row["thesis_tally_to_user_bytes"]
    assert row["user_key_bytes"] == 32
    assert row["server_to_user_roster_bytes"] == 8 * 100
    assert row["rounding_differs"] is False


def test_payload_bytes_counts_arrays_config_bytes_and_numbers() -> None:
    array = Array(np.zeros(10, "f4"))
    # Flower ships numpy arrays as .npy: the 40 data bytes and a header
    assert len(array.data) >= 40
    content = RecordDict(
        {
            "a": ArrayRecord({"w": array}),
            "c": ConfigRecord({"k": b"12345", "s": "ab", "n": 3, "l": [b"x", b"yz"]}),
            "m": MetricRecord({"x": 1.0}),
        }
    )
    assert payload_bytes(content) == len(array.data) + 5 + 2 + 8 + 3 + 8


def test_the_client_app_travels_by_name_to_the_actors() -> None:
    """Flower's Ray backend pickles the ClientApp with every message."""
    from ray import cloudpickle

    app = _client_app(1000)
    data = cloudpickle.dumps(app)
    assert len(data) < 200  # a reference, not the closures' code (about 7 kB)
    assert cloudpickle.loads(data) is app
    assert _client_app(2000) is not app


def test_sizes_parse_and_bad_items_are_named() -> None:
    assert parse_sizes("30x100000, 100x10", "--sizes") == [(30, 100_000), (100, 10)]
    for bad in ("30", "30x", "x5", "3.5x10", "30x1e5"):
        with pytest.raises(ConfigError, match=r"^--sizes: .* is not NxL"):
            parse_sizes(f"10x10,{bad}", "--sizes")


def test_only_the_chosen_parts_run(tmp_path) -> None:
    out = tmp_path / "secagg.json"
    record = run_secagg_bench(out, parts=["table_4_1"], table_users=100)
    assert record["settings"]["parts"] == ["table_4_1"]
    assert "federated" not in record and "client_work" not in record
    assert [row["n_users"] for row in record["table_4_1"]] == [100]
    assert record["acceptance"] == {}  # no target's size was measured
    assert json.loads(out.read_text()) == record
    (row,) = run_secagg_bench(
        out, parts=["client_work"], work_sizes=[(4, 500)], work_repeats=1
    )["client_work"]
    assert (row["n_clients"], row["length"]) == (4, 500)
    assert PARTS == ("federated", "client_work", "table_4_1")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"parts": ["federated", "tables"]}, r"^bench secagg parts must be some of"),
        ({"parts": []}, r"^bench secagg parts must be some of"),
        ({"sizes": [(2, 100)]}, r"^bench secagg needs rounds >= 2"),
        ({"work_sizes": [(30, 0)]}, r"L >= 1; got"),
        ({"rounds": 1}, r"rounds=1"),
    ],
)
def test_bad_settings_are_refused_before_any_work(tmp_path, kwargs, message) -> None:
    out = tmp_path / "secagg.json"
    with pytest.raises(ConfigError, match=message):
        run_secagg_bench(out, **kwargs)
    assert not out.exists()


def _report(plus: float, double: float, thesis: float, error: float) -> dict:
    methods = {"secagg-double": {"max_rel_error": error}}
    ratios = {
        "secaggplus_vs_double": plus / double,
        "double_vs_thesis": double / thesis,
    }
    work = {
        "n_clients": 100,
        "length": 100_000,
        "floor": {"floor_client_s": 1.0, "floor_client_cpu_s": 0.5},
        "double-masking": {
            "client_upload_s": 1.5,
            "client_total_s": 2.5,
            "client_upload_cpu_s": 0.9,
            "client_total_cpu_s": 1.1,
        },
    }
    return {
        "federated": [
            {"n_clients": 30, "length": 100_000, "methods": methods, "ratios": ratios}
        ],
        "client_work": [work],
    }


def test_acceptance_states_each_target_and_whether_it_held() -> None:
    checks = acceptance(_report(plus=3.3, double=1.0, thesis=0.8, error=1e-7))
    assert {name: c["met"] for name, c in checks.items()} == {
        "secaggplus_vs_double_at_30_1e5": True,
        "double_vs_thesis_at_30_1e5": True,
        "double_rel_error_at_30_1e5": True,
        "client_upload_vs_floor_at_100_1e5": True,
        "client_upload_and_unmask_vs_floor_at_100_1e5": False,
        "client_upload_cpu_vs_floor_at_100_1e5": True,  # 0.9 / 0.5
        "client_upload_and_unmask_cpu_vs_floor_at_100_1e5": False,  # 1.1 / 0.5
    }
    assert checks["client_upload_cpu_vs_floor_at_100_1e5"]["value"] == 1.8
    # a record from before CPU time was measured keeps its wall-clock checks
    old = _report(plus=3.3, double=1.0, thesis=0.8, error=1e-7)
    work = old["client_work"][0]
    del work["floor"]["floor_client_cpu_s"]
    assert not any("cpu" in name for name in acceptance(old))
    missed = acceptance(_report(plus=2.0, double=1.0, thesis=0.5, error=2e-6))
    assert not any(
        missed[k]["met"]
        for k in (
            "secaggplus_vs_double_at_30_1e5",
            "double_vs_thesis_at_30_1e5",
            "double_rel_error_at_30_1e5",
        )
    )
    assert missed["double_vs_thesis_at_30_1e5"]["value"] == pytest.approx(2.0)
    assert acceptance({}) == {}


@pytest.mark.slow
def test_a_tiny_run_records_every_method_stage_and_error(tmp_path) -> None:
    out = tmp_path / "secagg.json"
    n, length = 4, 500
    record = run_secagg_bench(
        out,
        sizes=[(n, length)],
        rounds=3,
        blocks=1,
        work_repeats=1,
        work_sizes=[(4, 1000)],
        table_users=100,
    )
    assert json.loads(out.read_text()) == record
    assert record["machine"]["cpus_used"] >= 1
    assert len(record["machine"]["load_average_after"]) == 3
    (fed,) = record["federated"]
    assert fed["engine"]["engine"] == "fedleak"
    assert fed["engine"]["poll_interval"] <= 0.001
    assert fed["engine"]["wake_ups"] is True
    for name in METHODS:
        method = fed["methods"][name]
        assert len(method["round_s"]) == 2  # round 1 of the start() is left out
        assert set(method["stages"]) == set(STAGES[name])
        assert method["exchanges_per_round"] == len(STAGES[name])
    for name in ("secagg-double", "secagg-thesis"):
        assert fed["methods"][name]["max_rel_error"] < 1e-6
        upload = fed["methods"][name]["stages"]["upload"]
        assert upload["bytes_up_per_client"] >= 4 * length  # the masked uint32 words
        assert fed["methods"][name]["server_compute"]["upload_s"] > 0
    assert fed["methods"]["fedavg"]["stages"]["train"]["bytes_up_per_client"] >= (
        4 * length
    )
    assert fed["ratios"]["double_vs_thesis"] == pytest.approx(
        fed["methods"]["secagg-double"]["median_round_s"]
        / fed["methods"]["secagg-thesis"]["median_round_s"]
    )
    (work,) = record["client_work"]
    assert work["ratios"]["client_total_vs_floor"] > 0
    (row,) = record["table_4_1"]
    assert row["user_to_server_bytes"] == 19584
