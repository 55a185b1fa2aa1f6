from __future__ import annotations

from pathlib import Path

import pytest

from fedleak.errors import ConfigError
from fedleak.experiments import apply_overrides, load_config, parse_override

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "path", sorted((REPO / "sim_configs").glob("*.toml")), ids=lambda p: p.name
)
def test_every_bundled_config_validates(path):
    config = load_config(path)
    assert config.name
    assert config.rounds >= 1


def test_defaults_and_name_from_file_stem(tmp_path):
    config = load_config(write(tmp_path, "rounds = 3\n", "my-exp.toml"))
    assert config.name == "my-exp"
    assert config.strategy.name == "sync-sgd"
    assert config.task().num_partitions == config.federation.num_clients


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[strategy]\nlearning_rate = -0.1\n",
            "strategy.learning_rate: Input should be greater than 0 (got -0.1)",
        ),
        ("[data]\ndataset = 'cifar'\n", "data.dataset"),
        ("[strategy]\nlr = 0.1\n", "strategy.lr: unknown key"),
        ("colour = 'red'\n", "colour: unknown key"),
        ("rounds = 'many'\n", "rounds"),
        ("[federation]\nnum_clients = 0\n", "federation.num_clients"),
        ("[privacy]\nwrapper = 'server-fixed-clipping'\n", "privacy.wrapper"),
        (
            "[data]\npartition = 'property'\nproperty_target = 9\n",
            "data.property_target",
        ),
        ("rounds = [\n", "not valid TOML"),
        (
            "[evaluation]\nevery = 0\n",
            "evaluation.every: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            "[model]\nembedding_dim = -4\n",
            "model.embedding_dim: Input should be greater than or equal to 0",
        ),
    ],
)
def test_bad_configs_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_embedding_dim_reaches_the_text_model(tmp_path):
    text = (
        "[data]\ndataset = 'checkins-synthetic'\n[model]\nname = 'text-cnn'\n"
        "embedding_dim = 12\n[evaluation]\nserver = false\n"
    )
    task = load_config(write(tmp_path, text)).task()
    assert task.model_embedding_dim == 12
    assert task.new_model().state_dict()["embedding.weight"].shape[1] == 12
    default = load_config(write(tmp_path, text.replace("embedding_dim = 12\n", "")))
    # 0: the thesis' width
    assert default.task().new_model().state_dict()["embedding.weight"].shape[1] == 320


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such experiment file"):
        load_config(tmp_path / "nope.toml")


def test_overrides_are_parsed_as_toml_values(tmp_path):
    config = load_config(
        write(tmp_path, "rounds = 3\n"),
        [
            "rounds=7",
            "strategy.learning_rate=0.5",
            "data.dataset=fashion-mnist",
            "evaluation.server=false",
        ],
    )
    assert config.rounds == 7
    assert config.strategy.learning_rate == 0.5
    assert config.data.dataset == "fashion-mnist"
    assert config.evaluation.server is False
    assert parse_override("name=abc") == ("name", "abc")
    with pytest.raises(ConfigError, match="key=value"):
        parse_override("rounds")
    with pytest.raises(ConfigError, match="not a section"):
        apply_overrides({"rounds": 3}, ["rounds.x=1"])
    with pytest.raises(ConfigError, match=r"strategy\.bogus: unknown key"):
        load_config(write(tmp_path, ""), ["strategy.bogus=1"])


def test_count_usable_rounds_reads_both_strategy_kinds():
    from fedleak.experiments.results import count_usable_rounds

    fedleak_rounds = {
        "rounds": [{"train": {"num-replies": 0}}, {"train": {"num-replies": 2}}]
    }
    flower_rounds = {
        "rounds": [{"train": {}}, {"train": {"train-loss": 1.0}}, {"train": {}}]
    }
    failed = {"rounds": [{"train": {"num-replies": 0, "num-errors": 3}}] * 4}
    assert count_usable_rounds(fedleak_rounds) == 1
    assert count_usable_rounds(flower_rounds) == 1
    assert count_usable_rounds(failed) == 0


# --- strict values: no coercion, finite numbers, safe names, faults in range


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('rounds = "2"\n', "rounds: Input should be a valid integer"),
        ("rounds = true\n", "rounds: Input should be a valid integer"),
        ('[secure_aggregation]\nenabled = "yes"\n', "secure_aggregation.enabled"),
        ("[secure_aggregation]\nenabled = 1\n", "secure_aggregation.enabled"),
        ("[strategy]\nlearning_rate = inf\n", "strategy.learning_rate"),
        ("[strategy]\nlearning_rate = nan\n", "strategy.learning_rate"),
        ('name = ".."\n', "name: '..' is not a run name"),
        ('name = "../x"\n', "name: String should match pattern"),
        ("seed = 1180591620717411303424\n", "seed"),
        (
            "[faults]\ncrash_clients = [-1]\ncrash_rounds = [1]\n",
            "faults.crash_clients: [-1] are not client ids",
        ),
        (
            "rounds = 3\n[faults]\ncrash_clients = [0]\ncrash_rounds = [0, 4]\n",
            "faults.crash_rounds: [0, 4] are not rounds of this run",
        ),
        (
            "[faults]\ncrash_clients = [0]\n",
            "crash_clients and crash_rounds go together",
        ),
        (
            '[data]\ndataset = "digits"\nroot = "somewhere"\n',
            "data.root: digits needs no files",
        ),
    ],
)
def test_strict_values_are_refused_naming_the_key(tmp_path, text, needle):
    path = tmp_path / "exp.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert needle in str(err.value)


def test_a_config_file_that_is_not_utf8_is_one_clear_error(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes("name = 'caf\xe9'\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(path)


@pytest.mark.parametrize(
    ("section", "due_after"),
    [
        ("", [0, 1, 2, 3, 4, 5, 6, 7]),
        ("[evaluation]\nevery = 3\n", [0, 3, 6, 7]),
        ("[evaluation]\nevery = 10\n", [0, 7]),
        ("[evaluation]\nevery = 3\nserver = false\n", []),
    ],
)
def test_the_server_evaluates_every_nth_round_and_the_last(
    tmp_path, section, due_after
):
    config = load_config(write(tmp_path, "rounds = 7\n" + section))
    due = [r for r in range(8) if config.evaluation.due(r, config.rounds)]
    assert due == due_after
