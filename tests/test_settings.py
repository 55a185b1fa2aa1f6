"""One schema per settings object: round trips, strict values, finite floats."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.defenses import ClientDefenses
from fedleak.errors import ConfigError
from fedleak.experiments.config import load_config, validate
from fedleak.settings import (
    ADVERSARY_KINDS,
    AdversarySettings,
    MembershipAttackSettings,
    PropertyAttackSettings,
    ProtocolFacts,
    RunContext,
    SettingsModel,
    TargetSchedule,
)
from fedleak.task import TaskSpec

SIM_CONFIGS = sorted((Path(__file__).parents[1] / "sim_configs").glob("*.toml"))
finite = {"allow_nan": False, "allow_infinity": False}

adversaries = st.builds(
    AdversarySettings,
    kind=st.sampled_from(ADVERSARY_KINDS),
    partition=st.integers(0, 50),
    property=st.builds(
        PropertyAttackSettings,
        pooling=st.sampled_from(["max", "raw"]),
        aux_pairs=st.integers(1, 8),
        aux_fraction=st.floats(0.01, 1.0),
        emulate=st.integers(0, 8),
        alpha=st.floats(0.0, 1.0),
        head_learning_rate=st.floats(1e-4, 10.0),
    ),
    membership=st.builds(
        MembershipAttackSettings, extra_tolerance=st.floats(0.0, 1e3, **finite)
    ),
)
targets = st.builds(
    TargetSchedule,
    property_every=st.integers(0, 10),
    batch_fraction=st.floats(0.01, 1.0),
    property_rounds=st.one_of(
        st.just(()),
        st.tuples(st.integers(1, 50), st.integers(1, 50))
        .filter(lambda r: r[0] < r[1])
        .map(tuple),
    ),
    join_round=st.integers(1, 100),
    control=st.booleans(),
)
defenses = st.builds(
    ClientDefenses,
    share_fraction=st.floats(0.001, 1.0),
    vocab_top_n=st.one_of(st.none(), st.integers(1, 50_000)),
    dp_noise_multiplier=st.one_of(st.none(), st.floats(0.0, 100.0)),
    dp_max_grad_norm=st.floats(1e-3, 100.0),
    dp_delta=st.floats(1e-9, 0.5),
)
protocols = st.builds(
    ProtocolFacts,
    learning_rate=st.floats(1e-5, 10.0),
    reduction=st.sampled_from(["sum", "mean"]),
    num_clients=st.integers(1, 100),
)
contexts = st.builds(RunContext, run_dir=st.text(max_size=20))


@settings(max_examples=40, deadline=None)
@given(st.one_of(adversaries, targets, defenses, protocols, contexts))
def test_from_config_inverts_to_config(model: SettingsModel) -> None:
    flat = model.to_config()
    assert all(key.startswith(model.prefix + ".") for key in flat)
    assert all(not isinstance(v, dict | tuple) for v in flat.values())
    assert type(model).from_config(flat) == model
    # other entries of the message config are ignored
    assert type(model).from_config({**flat, "task.seed": 3, "other.x": 1}) == model


def test_task_spec_round_trips_through_its_config() -> None:
    spec = TaskSpec(dataset="fortunes", crash_partitions=(1, 2), learning_rate=0.3)
    assert TaskSpec.from_config(spec.to_config()) == spec


def test_defaults_come_back_from_an_empty_config() -> None:
    for cls in (AdversarySettings, TargetSchedule, ClientDefenses, RunContext):
        assert cls.from_config({}) == cls()
    with pytest.raises(ConfigError, match=r"protocol\.learning-rate: Field required"):
        ProtocolFacts.from_config({})


def test_off_is_written_as_the_sentinels_of_files_and_messages() -> None:
    flat = ClientDefenses().to_config()
    assert flat["defenses.vocab_top_n"] == 0
    assert flat["defenses.dp_noise_multiplier"] == -1.0
    decoded = ClientDefenses.from_config(
        {"defenses.vocab_top_n": 0, "defenses.dp_noise_multiplier": -3}
    )
    assert decoded.vocab_top_n is None and decoded.dp_noise_multiplier is None
    assert not decoded.active
    with pytest.raises(ConfigError, match="vocab_top_n"):
        ClientDefenses(vocab_top_n=0)  # in Python, off is None


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    ("cls", "field"),
    [
        (cls, name)
        for cls in (
            PropertyAttackSettings,
            MembershipAttackSettings,
            TargetSchedule,
            ClientDefenses,
            ProtocolFacts,
        )
        for name in cls.model_fields
        if "float" in str(cls.model_fields[name].annotation)
    ],
)
def test_non_finite_floats_are_rejected_naming_the_key(
    cls: type[SettingsModel], field: str, value: float
) -> None:
    key = f"{cls.prefix}.{cls.model_fields[field].alias or field}"
    base: dict[str, Any] = {"protocol.learning-rate": 0.1, "protocol.num-clients": 2}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        cls.from_config({**base, key: value})


def test_the_dp_noise_nan_of_the_issue_fails_in_the_experiment_file() -> None:
    with pytest.raises(ConfigError, match=r"defenses\.dp_noise_multiplier"):
        validate({"defenses": {"dp_noise_multiplier": math.nan}}, "t", "t")
    with pytest.raises(ConfigError, match=r"defenses\.dp_noise_multiplier"):
        validate({"defenses": {"dp_noise_multiplier": -math.inf}}, "t", "t")
    with pytest.raises(ConfigError, match=r"strategy\.learning_rate"):
        validate({"strategy": {"learning_rate": math.inf}}, "t", "t")
    with pytest.raises(ConfigError, match=r"task\.dirichlet_alpha"):
        TaskSpec(dirichlet_alpha=math.inf)


@pytest.mark.parametrize(
    ("entries", "key"),
    [
        ({"adversary.partition": True}, "adversary.partition"),
        ({"adversary.partition": 1.0}, "adversary.partition"),
        ({"adversary.property.aux_pairs": "2"}, "adversary.property.aux_pairs"),
        ({"adversary.kind": "sybil"}, "adversary.kind"),
        ({"adversary.property.alpah": 0.1}, "adversary.property.alpah"),
    ],
)
def test_wrong_message_entries_name_their_key(
    entries: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        AdversarySettings.from_config(entries)


def test_target_window_is_checked_on_both_ends() -> None:
    with pytest.raises(ConfigError, match=r"target\.property_rounds"):
        TargetSchedule(property_rounds=(5, 2))
    with pytest.raises(ConfigError, match=r"target\.property_rounds"):
        TargetSchedule.from_config({"target.property_rounds": [5, 2]})
    with pytest.raises(ConfigError, match=r"target\.property_rounds"):
        validate({"target": {"property_rounds": [1, 2, 3]}}, "t", "t")


@pytest.mark.parametrize("path", SIM_CONFIGS, ids=lambda p: p.stem)
def test_every_experiment_file_reaches_the_clients_unchanged(path: Path) -> None:
    config = load_config(path)
    flat = config.client_config("/runs/x")
    assert AdversarySettings.from_config(flat) == config.adversary
    assert TargetSchedule.from_config(flat) == config.target
    assert ClientDefenses.from_config(flat) == config.defenses
    assert ProtocolFacts.from_config(flat) == ProtocolFacts(
        learning_rate=config.strategy.learning_rate,
        reduction=config.strategy.reduction,
        num_clients=config.federation.num_clients,
    )
    assert RunContext.from_config(flat).run_dir == "/runs/x"
    assert TaskSpec.from_config(config.task().to_config()) == config.task()
    # the resolved config written to a run directory loads back the same
    assert validate(config.model_dump(mode="json"), "resolved", "x") == config
