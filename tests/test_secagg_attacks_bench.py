"""``fedleak bench secagg-attacks --quick``: the record and the attacks' outcomes."""

from __future__ import annotations

import json

import pytest
from fedleak.attacks.secagg import ATTACKS, REQUIRED_ATTACKS

from fedleak.bench import find_benchmark
from fedleak.bench.secagg_attacks import expected_shape, run_secagg_attacks_bench


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "secagg-attacks.json"
    returned = run_secagg_attacks_bench(out, quick=True, seed=0)
    assert json.loads(out.read_text()) == returned
    return returned


def test_the_record_has_its_keys(record) -> None:
    assert record["benchmark"] == "secagg-attacks"
    assert record["quick"] is True
    assert {"settings", "results", "seed_client", "checks", "provenance"} <= set(record)
    assert set(record["results"]) == set(ATTACKS)
    for attack, modes in record["results"].items():
        expected = (
            {"double-masking"}
            if attack == "downgrade"
            else {
                "double-masking",
                "thesis",
            }
        )
        assert set(modes) == expected
        for outcome in modes.values():
            assert isinstance(outcome["recovered"], bool)
            assert {"max_abs_error", "tolerance", "refused_by"} <= set(outcome)
    assert set(record["seed_client"]) >= set(REQUIRED_ATTACKS)


def test_every_attack_fails_against_the_default_mode(record) -> None:
    for attack, modes in record["results"].items():
        assert modes["double-masking"]["recovered"] is False, attack
    assert record["checks"]["every_attack_fails_against_double_masking"] is True


def test_straggler_and_false_dropout_recover_the_target_in_thesis_mode(record) -> None:
    for attack in ("straggler", "false-dropout"):
        outcome = record["results"][attack]["thesis"]
        assert outcome["recovered"] is True
        assert outcome["max_abs_error"] <= outcome["tolerance"]
    assert record["checks"]["straggler_and_false_dropout_recover_in_thesis_mode"]


def test_the_checks_flag_a_result_of_the_wrong_shape() -> None:
    broken = {
        "straggler": {
            "double-masking": {"recovered": True},
            "thesis": {"recovered": True},
        },
        "false-dropout": {
            "double-masking": {"recovered": False},
            "thesis": {"recovered": False},
        },
    }
    assert expected_shape(broken) == {
        "every_attack_fails_against_double_masking": False,
        "straggler_and_false_dropout_recover_in_thesis_mode": False,
    }


def test_the_command_is_registered() -> None:
    assert find_benchmark("secagg-attacks").command().__module__ == (
        "fedleak.bench.secagg_attacks"
    )
