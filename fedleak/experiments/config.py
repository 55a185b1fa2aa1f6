"""Experiment files: TOML validated with pydantic before any work starts.

An experiment file describes one Flower simulation::

    name = "quickstart"        # optional, defaults to the file's stem
    seed = 0
    rounds = 60

    [data]
    dataset = "digits"         # digits | fashion-mnist | mnist
    partition = "iid"          # iid | dirichlet | property

    [model]
    name = "cnn"               # cnn | mlp

    [strategy]
    name = "sync-sgd"          # sync-sgd | model-averaging | fedavg (Flower's)
    learning_rate = 0.05

    [federation]
    num_clients = 4

Every section and key is documented on the models below. Unknown keys and bad
values raise :class:`fedleak.errors.ConfigError` naming the key, e.g.
``strategy.learning_rate: must be > 0 (got -0.1)``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fedleak.errors import ConfigError
from fedleak.task import TaskSpec

__all__ = [
    "AdversaryConfig",
    "ClientConfig",
    "DataConfig",
    "DefensesConfig",
    "EvaluationConfig",
    "ExperimentConfig",
    "FaultsConfig",
    "FederationConfig",
    "MembershipAttackConfig",
    "ModelConfig",
    "PrivacyConfig",
    "PropertyAttackConfig",
    "SecureAggregationConfig",
    "StrategyConfig",
    "TargetConfig",
    "apply_overrides",
    "load_config",
    "parse_override",
    "validate",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class DataConfig(_Section):
    """``[data]``: the dataset and how it is split among clients."""

    dataset: Literal[
        "digits", "fashion-mnist", "mnist", "checkins-synthetic", "fortunes"
    ] = "digits"
    root: str = Field("", description="folder of the IDX files; '' = default search")
    partition: Literal["iid", "dirichlet", "property"] = "iid"
    alpha: float = Field(0.5, gt=0, description="Dirichlet concentration")
    property_kind: Literal["watermark", "inverted", "blurred"] = "watermark"
    property_pool_fraction: float = Field(0.5, ge=0, le=1)
    property_target: int = Field(0, ge=0)
    property_target_fraction: float = Field(0.5, ge=0, le=1)
    property_others_fraction: float = Field(0.0, ge=0, le=1)
    property_partition_size: int = Field(
        0, ge=0, description="records per client of the property split; 0 = max"
    )


class ModelConfig(_Section):
    """``[model]``: the network trained by the federation."""

    name: Literal["cnn", "mlp", "text-cnn", "text-gru"] = "cnn"
    dropout: float = Field(
        0.0, ge=0, lt=1, description="text models: dropout after pooling (Ch. 7.3.3)"
    )


class StrategyConfig(_Section):
    """``[strategy]``: the server algorithm.

    ``learning_rate`` is Alg. 1's server step for ``sync-sgd`` and the clients'
    local SGD step for ``model-averaging`` and ``fedavg``.
    """

    name: Literal["sync-sgd", "model-averaging", "fedavg"] = "sync-sgd"
    learning_rate: float = Field(0.05, gt=0)
    reduction: Literal["sum", "mean"] = "sum"
    fraction_train: float = Field(1.0, gt=0, le=1)
    local_epochs: int = Field(1, ge=1)
    fraction_evaluate: float = Field(0.0, ge=0, le=1)


class ClientConfig(_Section):
    """``[client]``: the clients' local settings."""

    batch_size: int = Field(32, ge=1)


class FederationConfig(_Section):
    """``[federation]``: the simulated federation on Ray.

    ``engine = "fedleak"`` (default) runs Flower's simulation engine without
    its 0.1 s polling steps (:mod:`fedleak.experiments.engine`): replies and
    new messages wake the waiting side at once, and ``poll_interval`` is only
    the fallback between polls (2 ms: a missed wake-up costs at most that,
    and an idle poll is one scan of the in-memory LinkState). ``"flower"``
    keeps Flower's own polling (0.1 s per message exchange), for comparison.
    Both give the same results for the same seed. ``server_threads`` caps
    torch's threads while the server evaluates the global model: its Ray
    actors hold the CPUs, and oversubscribed OpenMP threads wait for each
    other (0 leaves torch's own setting).
    """

    num_clients: int = Field(4, ge=1)
    cpus_per_client: float = Field(1.0, gt=0)
    ray_address: str = Field("", description="existing Ray cluster; '' = local")
    round_timeout: float = Field(600.0, gt=0, description="seconds to wait for replies")
    engine: Literal["fedleak", "flower"] = "fedleak"
    poll_interval: float = Field(
        0.002, gt=0, le=1, description="seconds between polls for replies"
    )
    server_threads: int = Field(
        1, ge=0, description="torch threads of the server's evaluation; 0 = torch's"
    )


class EvaluationConfig(_Section):
    """``[evaluation]``: server-side evaluation on the held-out test set."""

    server: bool = True
    max_test_examples: int = Field(0, ge=0, description="0 = the whole test set")


class PrivacyConfig(_Section):
    """``[privacy]``: an optional Flower central-DP wrapper around the strategy."""

    wrapper: Literal["none", "server-fixed-clipping", "server-adaptive-clipping"] = (
        "none"
    )
    noise_multiplier: float = Field(1.0, ge=0)
    clipping_norm: float = Field(1.0, gt=0)


class SecureAggregationConfig(_Section):
    """``[secure_aggregation]``: pairwise-mask secure aggregation (seed 000 Ch. 4.1).

    ``modulus_bits``, ``group_size`` and ``max_weight`` of 0 mean "automatic":
    32-bit sums for sync-sgd and 64-bit for weighted averages, one group, and
    a weight bound of 10,000 examples per client.
    """

    enabled: bool = False
    clip: float = Field(8.0, gt=0)
    modulus_bits: Literal[0, 32, 64] = 0
    group_size: int = Field(0, ge=0)
    min_online: int = Field(3, ge=2)
    max_weight: float = Field(0.0, ge=0)
    metric_names: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _group(self) -> SecureAggregationConfig:
        if 0 < self.group_size < 3:
            raise ValueError("secure_aggregation.group_size: must be 0 or >= 3")
        if 0 < self.max_weight < 1:
            raise ValueError("secure_aggregation.max_weight: must be 0 or >= 1")
        return self


class FaultsConfig(_Section):
    """``[faults]``: injected client crashes, to test robustness.

    Every client in ``crash_clients`` raises in its train function in every
    round of ``crash_rounds`` (after secure-aggregation setup, before upload).
    """

    crash_clients: list[int] = Field(default_factory=list)
    crash_rounds: list[int] = Field(default_factory=list)


class PropertyAttackConfig(_Section):
    """``[adversary.property]``: the property adversary (seed 000 Ch. 7.1.4-7.1.5).

    The adversary's auxiliary data (Alg. 7's ``X_prop`` / ``X_nonprop``) are
    its own records: half of them rendered with ``data.property_kind``.
    """

    pooling: Literal["max", "raw"] = Field(
        "max", description="gradient features: global max pooling or raw"
    )
    aux_pairs: int = Field(1, ge=1, description="labelled gradient pairs per round")
    aux_fraction: float = Field(
        1.0, gt=0, le=1, description="fraction of a positive aux batch with it"
    )
    emulate: int = Field(
        0, ge=0, description="other participants emulated; 0 = num_clients - 1"
    )
    alpha: float = Field(
        0.0, ge=0, le=1, description="active attack: weight of the property loss"
    )
    head_learning_rate: float = Field(0.05, gt=0)


class MembershipAttackConfig(_Section):
    """``[adversary.membership]``: the embedding-layer membership adversary.

    Seed 000 Ch. 7.1.3
    (:class:`fedleak.clients.membership.EmbeddingMembershipAdversary`).
    ``extra_tolerance`` is added to the float32 rounding tolerance when reading
    changed embedding rows: under secure aggregation with model averaging set
    it to about ``num_clients`` fixed-point steps.
    """

    extra_tolerance: float = Field(0.0, ge=0)


class DefensesConfig(_Section):
    """``[defenses]``: client-side defenses of seed 000 Ch. 7.3 (honest clients).

    ``share_fraction`` < 1 uploads only that fraction of the largest update
    coordinates; ``vocab_top_n`` > 0 restricts inputs and embedding uploads to
    the top-N tokens; ``dp_noise_multiplier`` >= 0 trains with record-level
    DP-SGD (Opacus) with clipping norm ``dp_max_grad_norm``. Participant-level
    DP is ``[privacy]`` (Flower's wrappers).
    """

    share_fraction: float = Field(1.0, gt=0, le=1)
    vocab_top_n: int = Field(0, ge=0, description="0 = no restriction")
    dp_noise_multiplier: float = Field(-1.0, description="< 0 = no DP-SGD")
    dp_max_grad_norm: float = Field(1.0, gt=0)
    dp_delta: float = Field(1e-5, gt=0, lt=1)


class AdversaryConfig(_Section):
    """``[adversary]``: which client is an adversary, and of which kind.

    ``kind = "none"`` makes every client honest. The adversary is client
    ``partition``; it follows the protocol and observes on the side (its
    observations go to ``<run dir>/adversary/``).
    """

    kind: Literal[
        "none", "passive-property", "active-property", "embedding-membership"
    ] = "none"
    partition: int = Field(1, ge=0)
    property: PropertyAttackConfig = PropertyAttackConfig()
    membership: MembershipAttackConfig = MembershipAttackConfig()


class TargetConfig(_Section):
    """``[target]``: the target client's behaviour in property experiments.

    The target is client ``data.property_target``; it holds the property
    records of the ``property`` split. Under sync-SGD, in every *eligible*
    round ``r`` with ``r % property_every == 0`` its batch has the property in
    fraction ``batch_fraction`` (``1/m`` of its batches, seed 000 Ch. 7.2.3);
    other batches have none. Rounds are eligible from ``join_round`` on and,
    if ``property_rounds = [a, b]`` is given, only for ``a <= r < b``
    (Ch. 7.2.4). Before ``join_round`` the target uploads a zero update (it
    has not joined, Fig. 7.9). ``control = true`` never uses a record with
    the property (control trials, Fig. 7.8). ``property_every = 0`` keeps
    the honest batch order. Under model averaging the target trains on its
    whole partition, whose share of property records is
    ``data.property_target_fraction`` (the thesis' p-hat).
    """

    property_every: int = Field(2, ge=0)
    batch_fraction: float = Field(1.0, gt=0, le=1)
    property_rounds: list[int] = Field(default_factory=list)
    join_round: int = Field(1, ge=1)
    control: bool = False

    @model_validator(mode="after")
    def _window(self) -> TargetConfig:
        r = self.property_rounds
        if r and (len(r) != 2 or not 1 <= r[0] < r[1]):
            raise ValueError(
                "target.property_rounds: must be [a, b] with 1 <= a < b (rounds "
                f"a to b-1), got {r}"
            )
        return self


class ExperimentConfig(_Section):
    """A whole experiment file."""

    name: str = Field("", pattern=r"^[A-Za-z0-9_.-]*$")
    seed: int = Field(0, ge=0)
    rounds: int = Field(10, ge=1)
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    strategy: StrategyConfig = StrategyConfig()
    client: ClientConfig = ClientConfig()
    federation: FederationConfig = FederationConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    secure_aggregation: SecureAggregationConfig = SecureAggregationConfig()
    faults: FaultsConfig = FaultsConfig()
    adversary: AdversaryConfig = AdversaryConfig()
    target: TargetConfig = TargetConfig()
    defenses: DefensesConfig = DefensesConfig()

    @model_validator(mode="after")
    def _adversary(self) -> ExperimentConfig:
        a = self.adversary
        if a.kind == "none":
            return self
        k = self.federation.num_clients
        if a.partition >= k:
            raise ValueError(
                f"adversary.partition: {a.partition} is not a client id "
                f"(federation.num_clients = {k})"
            )
        if a.kind == "embedding-membership" and not self.model.name.startswith("text-"):
            raise ValueError(
                "adversary.kind: the embedding-membership adversary needs a text "
                "model (model.name 'text-cnn' or 'text-gru')"
            )
        if a.kind.endswith("-property"):
            if self.data.partition != "property":
                raise ValueError(
                    "adversary.kind: a property adversary needs data.partition = "
                    "'property' (the target's records carry the property)"
                )
            if a.partition == self.data.property_target:
                raise ValueError(
                    "adversary.partition: the adversary cannot be the target "
                    f"(data.property_target = {self.data.property_target})"
                )
            if self.strategy.name == "fedavg":
                raise ValueError(
                    "adversary.kind: property adversaries run with strategy.name "
                    "'sync-sgd' or 'model-averaging'"
                )
            if self.strategy.fraction_train < 1:
                raise ValueError(
                    "strategy.fraction_train: the property adversary derives the "
                    "others' update from consecutive models and must take part in "
                    "every round; use 1.0"
                )
        if a.kind == "active-property" and self.strategy.name != "sync-sgd":
            raise ValueError(
                "adversary.kind: the active property attack uploads multi-task "
                "gradients and needs strategy.name 'sync-sgd'"
            )
        return self

    def client_config(self, run_dir: str = "") -> dict[str, Any]:
        """Entries the ClientApps receive beside ``task.*``.

        ``adversary.*`` and ``target.*`` flatten those sections (nested keys
        dotted, e.g. ``adversary.property.alpha``); ``protocol.*`` carry what
        an adversary knows of the protocol (server step, reduction, number of
        clients); ``experiment.run-dir`` is where observations go.
        """
        out: dict[str, Any] = {}

        def flatten(prefix: str, values: Mapping[str, Any]) -> None:
            for key, value in values.items():
                if isinstance(value, Mapping):
                    flatten(f"{prefix}.{key}", value)
                else:
                    out[f"{prefix}.{key}"] = value

        flatten("adversary", self.adversary.model_dump())
        flatten("target", self.target.model_dump())
        flatten("defenses", self.defenses.model_dump())
        out["protocol.learning-rate"] = self.strategy.learning_rate
        out["protocol.reduction"] = self.strategy.reduction
        out["protocol.num-clients"] = self.federation.num_clients
        out["experiment.run-dir"] = run_dir
        return out

    @model_validator(mode="after")
    def _consistent(self) -> ExperimentConfig:
        if self.secure_aggregation.enabled and self.privacy.wrapper != "none":
            raise ValueError(
                "secure_aggregation.enabled: Flower's server-side DP wrappers clip "
                "each client's update, which secure aggregation hides; disable one"
            )
        bad = [c for c in self.faults.crash_clients if c >= self.federation.num_clients]
        if bad:
            raise ValueError(f"faults.crash_clients: {bad} are not client ids")
        if self.privacy.wrapper != "none" and self.strategy.name == "sync-sgd":
            raise ValueError(
                "privacy.wrapper: Flower's central-DP wrappers clip model updates; "
                "use strategy.name 'model-averaging' or 'fedavg' (sync-sgd replies "
                "are gradients)"
            )
        if self.data.partition == "property" and (
            self.data.property_target >= self.federation.num_clients
        ):
            raise ValueError(
                f"data.property_target: {self.data.property_target} is not a client "
                f"id (federation.num_clients = {self.federation.num_clients})"
            )
        return self

    def task(self) -> TaskSpec:
        """Return the :class:`TaskSpec` the clients receive."""
        d = self.data
        return TaskSpec(
            dataset=d.dataset,
            data_root=d.root,
            num_partitions=self.federation.num_clients,
            partition=d.partition,
            dirichlet_alpha=d.alpha,
            property_kind=d.property_kind,
            property_pool_fraction=d.property_pool_fraction,
            property_target=d.property_target,
            property_target_fraction=d.property_target_fraction,
            property_others_fraction=d.property_others_fraction,
            property_partition_size=d.property_partition_size,
            model=self.model.name,
            model_dropout=self.model.dropout,
            seed=self.seed,
            batch_size=self.client.batch_size,
            learning_rate=self.strategy.learning_rate,
            local_epochs=self.strategy.local_epochs,
            crash_partitions=tuple(self.faults.crash_clients),
            crash_rounds=tuple(self.faults.crash_rounds),
        )


def _describe(err: ValidationError, source: str) -> str:
    parts = []
    for item in err.errors():
        key = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        elif item["type"] == "value_error":
            message = message.removeprefix("Value error, ")
            parts.append(f"{message}")
            continue
        got = item.get("input")
        suffix = (
            ""
            if item["type"] in ("missing",) or isinstance(got, dict)
            else f" (got {got!r})"
        )
        parts.append(f"{key}: {message}{suffix}")
    return f"{source}: " + "; ".join(parts)


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``--set key=value``: the value is read as TOML, else as a string.

    Raises
    ------
    ConfigError
        If ``text`` has no ``=`` or an empty key.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects key=value, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key, value


def apply_overrides(raw: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``raw`` with dotted ``key=value`` overrides applied."""
    result: dict[str, Any] = {
        k: dict(v) if isinstance(v, Mapping) else v for k, v in raw.items()
    }
    for text in overrides:
        key, value = parse_override(text)
        *path, leaf = key.split(".")
        node = result
        for part in path:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {key}: {part!r} is not a section")
            node = child
        node[leaf] = value
    return result


def validate(
    raw: Mapping[str, Any], source: str, default_name: str
) -> ExperimentConfig:
    """Validate a parsed experiment mapping.

    Raises
    ------
    ConfigError
        Naming every wrong key or value.
    """
    try:
        config = ExperimentConfig.model_validate(dict(raw))
    except ValidationError as err:
        raise ConfigError(_describe(err, source)) from None
    if not config.name:
        config = config.model_copy(update={"name": default_name})
    return config


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> ExperimentConfig:
    """Read, override and validate an experiment file.

    Parameters
    ----------
    path : str or pathlib.Path
        The TOML file.
    overrides : iterable of str
        ``key=value`` strings with dotted keys (``strategy.learning_rate=0.1``).

    Raises
    ------
    ConfigError
        If the file is missing, is not TOML, or holds a wrong key or value.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such experiment file") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
    return validate(apply_overrides(raw, overrides), str(path), path.stem)
