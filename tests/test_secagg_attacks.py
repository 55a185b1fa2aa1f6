"""A malicious server against secure aggregation: what each attack recovers."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from fedleak.attacks.secagg import (
    ATTACKS,
    CLIENT_SEED,
    REQUIRED_ATTACKS,
    run_secagg_attacks,
)

from fedleak.errors import ConfigError
from fedleak.secagg.constants import Refusal

#: The guard that stops each attack against fedleak's clients (double masking
#: needs none against the straggler: the self-mask keeps the late bytes hidden).
GUARD = {
    "false-dropout": Refusal.UNMASK_REPEATED,
    "group-of-one": Refusal.GROUP_TOO_SMALL,
    "round-replay": Refusal.ROUND_REPLAYED,
    "split-view": Refusal.ONLINE_TOO_FEW,
    "downgrade": Refusal.MODE_REFUSED,
}


@pytest.fixture(scope="module")
def report():
    return run_secagg_attacks(seed=3)


def test_every_attack_fails_against_the_default_mode(report) -> None:
    for attack in ATTACKS:
        outcome = report.outcome(attack, "double-masking")
        assert not outcome.recovered, attack
        if outcome.max_abs_error is not None:  # what it decoded is noise
            assert outcome.max_abs_error > 1.0
        if attack in GUARD:
            assert GUARD[attack] in outcome.refused_by, attack
    low = report.outcome("low-threshold", "double-masking")
    assert low.refused_by == (Refusal.THRESHOLD_TOO_LOW,)
    assert report.outcome("straggler", "double-masking").refused_by == ()


def test_the_straggler_and_false_dropout_attacks_succeed_in_thesis_mode(report) -> None:
    # the seed protocol's limit, now measured (so this test can fail)
    for attack in ("straggler", "false-dropout", "split-view"):
        outcome = report.outcome(attack, "thesis")
        assert outcome.recovered, attack
        assert outcome.max_abs_error is not None
        assert outcome.max_abs_error <= outcome.tolerance
        assert outcome.refused_by == ()


def test_each_client_guard_refuses_its_attack_which_works_on_the_seed_client(
    report,
) -> None:
    thesis_guards = {
        "group-of-one": Refusal.GROUP_TOO_SMALL,
        "round-replay": Refusal.ROUND_REPLAYED,
        "low-threshold": Refusal.ONLINE_TOO_FEW,
    }
    for attack, guard in thesis_guards.items():
        fedleak = report.outcome(attack, "thesis")
        seed = report.outcome(attack, "thesis", CLIENT_SEED)
        assert not fedleak.recovered and guard in fedleak.refused_by, attack
        assert seed.recovered and seed.refused_by == (), attack
    for attack in REQUIRED_ATTACKS:
        assert report.outcome(attack, "thesis", CLIENT_SEED).recovered


def test_the_report_is_json_ready(report) -> None:
    data = json.loads(json.dumps(report.to_dict()))
    assert data["schema_version"] == 1
    assert set(data["results"]) == set(ATTACKS)
    for attack in REQUIRED_ATTACKS:
        for mode in ("double-masking", "thesis"):
            row = data["results"][attack][mode]
            assert isinstance(row["recovered"], bool)
            assert set(row) >= {
                "max_abs_error",
                "tolerance",
                "server_action",
                "refused_by",
            }
    assert data["results"]["downgrade"].keys() == {"double-masking"}
    assert data["seed_client"]["straggler"]["thesis"]["recovered"] is True


def test_the_runner_validates() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^unknown attack\(s\) \['nope'\]; choose from \['straggler', 'false-dropout', 'group-of-one', 'round-replay', 'low-threshold', 'split-view', 'downgrade'\]$",
    ):
        run_secagg_attacks(attacks=["nope"])
    with pytest.raises(
        ConfigError,
        match=r"^unknown mode\(s\) \['plain'\]; choose from \['double-masking', 'thesis'\]$",
    ):
        run_secagg_attacks(modes=["plain"])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"^n_clients must be >= 8, got 5$"):
        run_secagg_attacks(n_clients=5)


# ------------------------------------------------- over a Flower Grid


def _update(partition: int, tag: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([77, partition, tag])
    return {
        "w": rng.uniform(-1, 1, (4, 3)).astype(np.float32),
        "b": rng.uniform(-1, 1, 3).astype(np.float32),
    }


def _client_app():
    from fedleak.clients import add_identify_handler
    from fedleak.clients.secagg import make_secagg_mod
    from fedleak.strategies.malicious_secagg import ATTACK_TAG
    from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    from fedleak import protocol

    app = ClientApp(mods=[make_secagg_mod(accept_thesis=True)])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        tag = int(msg.content[protocol.CONFIG_KEY].get(ATTACK_TAG, 0))
        arrays = ArrayRecord({k: Array(v) for k, v in _update(partition, tag).items()})
        metrics = MetricRecord({protocol.NUM_EXAMPLES: 1})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    return add_identify_handler(app)


def _initial():
    from fedleak.strategies import numpy_to_arrays

    return numpy_to_arrays(
        {"w": np.zeros((4, 3), np.float32), "b": np.zeros(3, np.float32)}
    )


def _check(outcomes: dict[tuple[str, str], bool]) -> None:
    assert outcomes[("straggler", "thesis")]
    assert outcomes[("false-dropout", "thesis")]
    assert not any(v for (a, m), v in outcomes.items() if m == "double-masking")
    assert not outcomes[("group-of-one", "thesis")]
    assert not outcomes[("round-replay", "thesis")]


@pytest.mark.usefixtures("task_identity")
def test_the_malicious_strategy_over_an_in_process_grid() -> None:
    from fedleak.strategies.malicious_secagg import MaliciousSecureAggregation
    from flower_fakes import LocalGrid
    from flwr.app import ConfigRecord

    grid = LocalGrid(_client_app(), {5000 + 3 * p: p for p in range(8)})
    strategy = MaliciousSecureAggregation(truth=_update)
    assert list(strategy.configure_train(1, _initial(), ConfigRecord(), grid)) == []
    _check({(o.attack, o.mode): o.recovered for o in strategy.outcomes})
    _, metrics = strategy.aggregate_train(1, [])
    assert metrics["attack-straggler-thesis-recovered"] == 1
    assert metrics["attack-straggler-double-masking-recovered"] == 0
    assert metrics["attack-group-of-one-double-masking-refusals"] == 1


@pytest.mark.slow
def test_the_malicious_strategy_in_a_flower_simulation() -> None:
    from fedleak.strategies.malicious_secagg import MaliciousSecureAggregation
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    played: dict[str, MaliciousSecureAggregation] = {}
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = MaliciousSecureAggregation(truth=_update)
        strategy.start(grid=grid, initial_arrays=_initial(), num_rounds=1)
        played["strategy"] = strategy

    run_simulation(
        server_app=server,
        client_app=_client_app(),
        num_supernodes=8,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {
                "include_dashboard": False,
                "logging_level": logging.ERROR,
                "log_to_driver": False,
            },
        },
    )
    outcomes = {(o.attack, o.mode): o.recovered for o in played["strategy"].outcomes}
    assert len(outcomes) == 2 * len(REQUIRED_ATTACKS)
    _check(outcomes)
