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

Every section and key is documented on the models below; the sections the
clients receive have one schema each, shared with the clients
(:mod:`fedleak.settings`): ``[adversary]``
(:class:`~fedleak.settings.AdversarySettings`), ``[target]``
(:class:`~fedleak.settings.TargetSchedule`), ``[defenses]``
(:class:`~fedleak.defenses.ClientDefenses`), and the task the other sections
describe is a :class:`~fedleak.task.TaskSpec` (:meth:`ExperimentConfig.task`).
Unknown keys and bad values (NaN and infinities included) raise
:class:`fedleak.errors.ConfigError` naming the key, e.g.
``strategy.learning_rate: Input should be greater than 0 (got -0.1)``.
"""

from __future__ import annotations

import copy
import math
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from fedleak.defenses import ClientDefenses
from fedleak.errors import ConfigError
from fedleak.secagg.settings import ProtocolSettings
from fedleak.settings import (
    STRICT_MODEL_CONFIG,
    AdversarySettings,
    ProtocolFacts,
    RunContext,
    TargetSchedule,
    describe_validation_error,
    dotted_section,
)

if TYPE_CHECKING:  # the task module imports torch: load it when a task is built
    from fedleak.task import TaskSpec

__all__ = [
    "ClientConfig",
    "DataConfig",
    "EvaluationConfig",
    "ExperimentConfig",
    "FaultsConfig",
    "FederationConfig",
    "ModelConfig",
    "PrivacyConfig",
    "SecureAggregationConfig",
    "StrategyConfig",
    "apply_overrides",
    "extended",
    "load_config",
    "parse_override",
    "validate",
]


class _Section(BaseModel):
    """Every section: unknown keys refused, strict types, finite numbers.

    Strict: ``rounds = "2"`` or ``rounds = true`` is an error, not 2 or 1; an
    integer is accepted where a float is expected. Finite: NaN and infinity
    are refused everywhere.
    """

    model_config = STRICT_MODEL_CONFIG.copy()


class DataConfig(_Section):
    """``[data]``: the dataset and how it is split among clients."""

    dataset: Literal[
        "digits",
        "fashion-mnist",
        "mnist",
        "checkins-synthetic",
        "checkins-synthetic-large",
        "fortunes",
    ] = "digits"
    root: str = Field("", description="folder of the IDX files; '' = default search")
    partition: Literal["iid", "dirichlet", "property"] = "iid"
    alpha: float = Field(0.5, gt=0, description="Dirichlet concentration")
    property_kind: Literal["watermark", "inverted", "blurred"] = "watermark"
    property_pool_fraction: float = Field(0.5, ge=0, le=1)
    property_target: int = Field(0, ge=0)
    property_target_fraction: float = Field(0.5, ge=0, le=1)
    property_others_fraction: float = Field(0.0, ge=0, le=1)
    property_adversary_fraction: float = Field(
        0.0,
        ge=0,
        le=1,
        description="fraction of the property adversary's records with the property",
    )
    property_partition_size: int = Field(
        0, ge=0, description="records per client of the property split; 0 = max"
    )


class ModelConfig(_Section):
    """``[model]``: the network trained by the federation."""

    name: Literal["cnn", "mlp", "text-cnn", "text-gru"] = "cnn"
    dropout: float = Field(
        0.0, ge=0, lt=1, description="text models: dropout after pooling (Ch. 7.3.3)"
    )
    embedding_dim: int = Field(
        0,
        ge=0,
        description="text models: embedding width; 0 = the thesis' (320 CNN, 100 GRU)",
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
    its 0.1 s polling steps (:mod:`fedleak.runtime.engine`): replies and
    new messages wake the waiting side at once, and ``poll_interval`` is only
    the fallback between polls (2 ms: a missed wake-up costs at most that,
    and an idle poll is one scan of the in-memory LinkState). ``"flower"``
    keeps Flower's own polling (0.1 s per message exchange), for comparison.
    Both give the same results for the same seed. ``actor_batch`` is the most
    messages the fedleak engine hands a Ray actor in one call
    (:mod:`fedleak.runtime.actor_batches`; 1 = one per call, as Flower):
    with 30 clients per exchange one call each cost more than the clients'
    work. ``actor_channels`` sends those batches to actors on the server's
    node through a socket to a thread of the actor's process instead of a Ray
    call (:mod:`fedleak.runtime.actor_channels`: 0.4 ms against 2.5 ms for a
    quickstart batch). ``server_threads`` caps
    the server process's native threads (torch, BLAS, OpenMP) for the whole
    run: its Ray actors hold the CPUs, and oversubscribed pools spin and wait
    for each other (:func:`fedleak.training.native_threads`; 0 leaves the
    libraries' own settings).
    """

    num_clients: int = Field(4, ge=1)
    cpus_per_client: float = Field(1.0, gt=0)
    ray_address: str = Field(
        "", description="existing Ray cluster; '' = $RAY_ADDRESS, else a local one"
    )
    round_timeout: float = Field(600.0, gt=0, description="seconds to wait for replies")
    engine: Literal["fedleak", "flower"] = "fedleak"
    poll_interval: float = Field(
        0.002, gt=0, le=1, description="seconds between polls for replies"
    )
    actor_batch: int = Field(
        16,
        ge=1,
        description="most messages the fedleak engine hands a Ray actor in one "
        "call; 1 = one per call, as Flower's engine",
    )
    actor_channels: bool = Field(
        True,
        description="send the fedleak engine's batches to actors on the server's "
        "node through a socket instead of a Ray call",
    )
    server_threads: int = Field(
        1,
        ge=0,
        description="native threads (torch, BLAS, OpenMP) of the server process; "
        "0 = the libraries' own",
    )
    checkpoint_every: int = Field(
        10,
        ge=0,
        description="write checkpoint.npz every this many rounds (and at a stop, "
        "and after the last round); 0 = only at a stop and at the end",
    )


class EvaluationConfig(_Section):
    """``[evaluation]``: server-side evaluation on the held-out test set."""

    server: bool = True
    max_test_examples: int = Field(0, ge=0, description="0 = the whole test set")
    every: int = Field(
        1,
        ge=1,
        description="evaluate after round 0, every this many rounds and after the "
        "last round; 1 = every round (a long run's curve needs fewer points, and "
        "the server's evaluation can cost more than the round it measures)",
    )

    overlap: bool = Field(
        False,
        description="evaluate round r's model on a background thread while round "
        "r+1 runs (same numbers); the thread runs on idle CPU time only (Linux "
        "SCHED_IDLE) until the server waits for its result, so the Ray actors "
        "keep their CPUs; on by default in the 2-CPU quickstart (fedleak.runtime."
        "idle_priority)",
    )

    def due(self, server_round: int, last_round: int) -> bool:
        """Whether the server evaluates the global model after ``server_round``."""
        return self.server and (
            server_round % self.every == 0 or server_round == last_round
        )


class PrivacyConfig(_Section):
    """``[privacy]``: an optional Flower central-DP wrapper, and the noise's source.

    DP noise (Flower's server-side wrappers here, and the clients' record-
    and participant-level DP of ``[defenses]``) comes from the operating
    system's entropy by default: two runs with the same ``seed`` add
    different noise, and nobody can recompute it from the experiment file.
    ``noise_seed`` makes the noise a function of that seed instead, to
    reproduce a figure exactly. **That is not private**: anyone who knows
    ``noise_seed`` can subtract the noise. ``results.json`` records which
    source a run used (``privacy.noise``).
    """

    wrapper: Literal["none", "server-fixed-clipping", "server-adaptive-clipping"] = (
        "none"
    )
    noise_multiplier: float = Field(1.0, ge=0)
    clipping_norm: float = Field(1.0, gt=0)
    noise_seed: int | None = Field(
        None, ge=0, lt=2**63, description="reproducible, NOT private DP noise"
    )


class SecureAggregationConfig(_Section):
    """``[secure_aggregation]``: secure aggregation (seed 000 Ch. 4.1; Bonawitz et al.).

    ``mode`` is ``"double-masking"`` (default: a Shamir-shared self-mask hides
    stragglers and falsely dropped clients) or ``"thesis"`` (the seed's
    pairwise masks alone); ``threshold`` is the double-masking share
    threshold as a fraction of a group (``floor(threshold * n) + 1`` shares).
    ``modulus_bits``, ``group_size`` and ``max_weight`` of 0 mean "automatic":
    32-bit sums for sync-sgd and 64-bit for weighted averages, one group, and
    a weight bound of 10,000 examples per client. Settings under which no
    group could ever be decrypted (too few sampled clients, groups below the
    floor) and metric names the clients do not report are refused at load.
    """

    enabled: bool = False
    mode: Literal["double-masking", "thesis"] = "double-masking"
    threshold: float = Field(0.5, ge=0.5, lt=1.0)
    clip: float = Field(8.0, gt=0)
    modulus_bits: Literal[0, 32, 64] = 0
    group_size: int = Field(0, ge=0)
    min_online: int = Field(3, ge=3)
    max_weight: float = Field(0.0, ge=0)
    metric_names: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _group(self) -> SecureAggregationConfig:
        if 0 < self.max_weight < 1:
            raise ValueError("secure_aggregation.max_weight: must be 0 or >= 1")
        try:
            self.protocol_settings()
        except ConfigError as err:
            raise ValueError(f"secure_aggregation: {err}") from None
        return self

    def protocol_settings(self) -> ProtocolSettings:
        """Return the protocol settings these keys describe (raises ConfigError)."""
        return ProtocolSettings(
            mode=self.mode,
            min_online=self.min_online,
            threshold=self.threshold,
            group_size=self.group_size or None,
        )


#: Metrics fedleak's clients report with their train replies, by strategy.
_TRAIN_METRICS = {
    "sync-sgd": ("train-accuracy", "train-loss"),
    "model-averaging": ("train-loss",),
    "fedavg": ("train-loss",),
}


class FaultsConfig(_Section):
    """``[faults]``: injected client crashes, to test robustness.

    Every client in ``crash_clients`` raises in its train function in every
    round of ``crash_rounds`` (after secure-aggregation setup, before upload).
    """

    crash_clients: list[int] = Field(default_factory=list)
    crash_rounds: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _both_or_neither(self) -> FaultsConfig:
        if bool(self.crash_clients) != bool(self.crash_rounds):
            raise ValueError(
                "faults: crash_clients and crash_rounds go together (which clients "
                f"crash, and in which rounds); got crash_clients={self.crash_clients} "
                f"and crash_rounds={self.crash_rounds}"
            )
        return self


class ExperimentConfig(_Section):
    """A whole experiment file."""

    name: str = Field("", pattern=r"^[A-Za-z0-9_.-]*$", max_length=100)
    seed: int = Field(0, ge=0, lt=2**63)
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
    adversary: AdversarySettings = AdversarySettings()
    target: TargetSchedule = TargetSchedule()
    defenses: ClientDefenses = ClientDefenses()

    @field_validator("defenses", mode="before")
    @classmethod
    def _defenses_off_sentinels(cls, value: Any) -> Any:
        return ClientDefenses.decode(value) if isinstance(value, Mapping) else value

    @model_validator(mode="after")
    def _adversary(self) -> ExperimentConfig:
        a = self.adversary
        if self.data.property_adversary_fraction > 0 and not a.kind.endswith(
            "-property"
        ):
            raise ValueError(
                "data.property_adversary_fraction: only a property adversary "
                "(adversary.kind 'passive-property' or 'active-property') holds "
                "records with the property"
            )
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

        The ``to_config()`` of each settings object (:mod:`fedleak.settings`):
        ``adversary.*``, ``target.*`` and ``defenses.*`` (nested keys dotted,
        e.g. ``adversary.property.alpha``), ``protocol.*`` (what an adversary
        knows of the protocol: server step, reduction, number of clients) and
        ``experiment.run-dir`` (where observations go).
        """
        protocol = ProtocolFacts(
            learning_rate=self.strategy.learning_rate,
            reduction=self.strategy.reduction,
            num_clients=self.federation.num_clients,
        )
        return {
            **self.adversary.to_config(),
            **self.target.to_config(),
            **self.defenses.to_config(),
            **protocol.to_config(),
            **RunContext(run_dir=run_dir).to_config(),
        }

    @model_validator(mode="after")
    def _secure_aggregation(self) -> ExperimentConfig:
        sa = self.secure_aggregation
        if not sa.enabled:
            return self
        k, fraction = self.federation.num_clients, self.strategy.fraction_train
        sampled = min(k, max(math.floor(fraction * k + 1e-9), 1))
        try:
            sa.protocol_settings().check_count(
                sampled,
                f"federation.num_clients = {k} with strategy.fraction_train = "
                f"{fraction:g}",
            )
        except ConfigError as err:
            raise ValueError(f"secure_aggregation.enabled: {err}") from None
        known = _TRAIN_METRICS[self.strategy.name]
        unknown = [m for m in sa.metric_names if m not in known]
        if unknown:
            raise ValueError(
                f"secure_aggregation.metric_names: {unknown} are not reported by the "
                f"clients of strategy {self.strategy.name!r} (they report "
                f"{list(known)}); every upload would fail"
            )
        return self

    @model_validator(mode="after")
    def _consistent(self) -> ExperimentConfig:
        if self.secure_aggregation.enabled and self.privacy.wrapper != "none":
            raise ValueError(
                "secure_aggregation.enabled: Flower's server-side DP wrappers clip "
                "each client's update, which secure aggregation hides; disable one"
            )
        if self.name in (".", ".."):
            raise ValueError(
                f"name: {self.name!r} is not a run name (it names the run's folder "
                "under runs/; use letters, digits, '_', '-' or '.')"
            )
        k = self.federation.num_clients
        bad = [c for c in self.faults.crash_clients if not 0 <= c < k]
        if bad:
            raise ValueError(
                f"faults.crash_clients: {bad} are not client ids (0 to {k - 1})"
            )
        late = [r for r in self.faults.crash_rounds if not 1 <= r <= self.rounds]
        if late:
            raise ValueError(
                f"faults.crash_rounds: {late} are not rounds of this run (1 to "
                f"{self.rounds})"
            )
        if self.data.root and self.data.dataset in (
            "digits",
            "checkins-synthetic",
            "checkins-synthetic-large",
        ):
            raise ValueError(
                f"data.root: {self.data.dataset} needs no files (it is bundled or "
                "generated); data.root applies to fashion-mnist, mnist and fortunes"
            )
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
        from fedleak.task import TaskSpec

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
            property_adversary=(
                self.adversary.partition if d.property_adversary_fraction > 0 else -1
            ),
            property_adversary_fraction=d.property_adversary_fraction,
            model=self.model.name,
            model_dropout=self.model.dropout,
            model_embedding_dim=self.model.embedding_dim,
            seed=self.seed,
            batch_size=self.client.batch_size,
            learning_rate=self.strategy.learning_rate,
            local_epochs=self.strategy.local_epochs,
            crash_partitions=tuple(self.faults.crash_clients),
            crash_rounds=tuple(self.faults.crash_rounds),
        )


def _describe(err: ValidationError, source: str) -> str:
    return f"{source}: " + "; ".join(describe_validation_error(err))


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


def _thawed(value: Any) -> Any:
    """Return a deep copy of ``value`` in which every mapping is a ``dict``."""
    if isinstance(value, Mapping):
        return {key: _thawed(item) for key, item in value.items()}
    return copy.deepcopy(value)


def apply_overrides(raw: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with dotted ``key=value`` overrides applied.

    ``raw`` and everything in it are left untouched, however deep the
    overridden key.

    Examples
    --------
    >>> raw = {"strategy": {"name": "sync-sgd", "dp": {"sigma": 1.0}}}
    >>> apply_overrides(raw, ["strategy.dp.sigma=2.0"])["strategy"]["dp"]
    {'sigma': 2.0}
    >>> raw["strategy"]["dp"]
    {'sigma': 1.0}
    """
    result: dict[str, Any] = _thawed(raw)
    for text in overrides:
        key, value = parse_override(text)
        node, leaf = dotted_section(
            result, key, lambda key, part: f"--set {key}: {part!r} is not a section"
        )
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


def extended(config: ExperimentConfig, rounds: int, where: object) -> ExperimentConfig:
    """Return ``config`` with ``rounds`` rounds, for extending the run at ``where``.

    Raises
    ------
    fedleak.errors.ConfigError
        If ``rounds`` is below the run's own count (a run only grows; growing
        keeps every other key valid).
    """
    if rounds < config.rounds:
        raise ConfigError(
            f"--rounds {rounds}: the run at {where} already has {config.rounds} "
            "rounds; give more to extend it"
        )
    return config.model_copy(update={"rounds": rounds})


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
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {err.start}); experiment files are TOML"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a folder, not an experiment file") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
    return validate(apply_overrides(raw, overrides), str(path), path.stem)
