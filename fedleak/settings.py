"""The settings objects an experiment sends to its clients: one schema each.

Each settings object is a frozen pydantic model (:class:`SettingsModel`) that
serves both ends of a run:

- the experiment file: :class:`fedleak.experiments.config.ExperimentConfig`
  uses it as its TOML section (``[adversary]``, ``[target]``, ``[defenses]``),
  so a wrong key or value fails before any work starts, naming the key;
- the message config: :meth:`SettingsModel.to_config` flattens it into the
  dotted entries the ClientApps receive (``adversary.property.alpha``) and
  :meth:`SettingsModel.from_config`, its exact inverse, rebuilds and
  validates it on the client.

The objects:

``[adversary]``
    :class:`AdversarySettings`, with :class:`PropertyAttackSettings`
    (``[adversary.property]``) and :class:`MembershipAttackSettings`
    (``[adversary.membership]``);
``[target]``
    :class:`TargetSchedule`;
``[defenses]``
    :class:`fedleak.defenses.ClientDefenses` (the defenses' own module);
``task.*``
    :class:`fedleak.task.TaskSpec` (built by ``ExperimentConfig.task()``);

plus two that are no TOML section: :class:`ProtocolFacts` (``protocol.*``,
what an adversary knows of the server's protocol, from ``[strategy]`` and
``[federation]``) and :class:`RunContext` (``experiment.run-dir``, where
observations go).

Every float field must be finite: NaN and infinities are rejected with a
:class:`~fedleak.errors.ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Final, Literal, Self, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    model_validator,
)

from .errors import ConfigError

__all__ = [
    "ADVERSARY_KINDS",
    "AdversaryKind",
    "AdversarySettings",
    "MembershipAttackSettings",
    "PropertyAttackSettings",
    "ProtocolFacts",
    "RunContext",
    "STRICT_MODEL_CONFIG",
    "SettingsModel",
    "TargetSchedule",
    "describe_validation_error",
    "dotted_section",
]

AdversaryKind = Literal[
    "none", "passive-property", "active-property", "embedding-membership"
]
"""Values of ``adversary.kind``."""

#: The values of :data:`AdversaryKind`.
ADVERSARY_KINDS: tuple[str, ...] = get_args(AdversaryKind)


def describe_validation_error(err: ValidationError, prefix: str = "") -> list[str]:
    """Turn a pydantic error into one ``key: what is wrong (got value)`` per problem.

    Parameters
    ----------
    err : pydantic.ValidationError
        The error.
    prefix : str, default=""
        Dotted name of the validated object (``"adversary"``), put in front
        of each key.

    Returns
    -------
    list of str
        One line per problem. A model validator's own message is kept as it
        is (it names its keys itself).
    """
    parts = []
    for item in err.errors():
        loc = [str(p) for p in item["loc"]]
        key = ".".join([prefix, *loc] if prefix else loc)
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        elif item["type"] == "value_error":
            parts.append(message.removeprefix("Value error, "))
            continue
        got = item.get("input")
        suffix = (
            ""
            if item["type"] == "missing" or isinstance(got, dict)
            else f" (got {got!r})"
        )
        parts.append(f"{key or '(top level)'}: {message}{suffix}")
    return parts


def dotted_section(
    tree: dict[str, Any], key: str, clash: Callable[[str, str], str]
) -> tuple[dict[str, Any], str]:
    """Return the section of ``tree`` a dotted ``key`` lands in, and its last part.

    ``"a.b.c"`` lands in ``tree["a"]["b"]`` as ``"c"``; missing sections are
    created on the way.

    Raises
    ------
    ConfigError
        With the message ``clash(key, part)`` if a ``part`` of the way holds
        a value instead of a section.
    """
    *path, leaf = key.split(".")
    node = tree
    for part in path:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(clash(key, part))
        node = child
    return node, leaf


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "c": 2}`` -> ``{"a": {"b": 1}, "c": 2}``."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        node, leaf = dotted_section(
            nested, key, lambda key, part: f"{key!r} and {part!r} cannot both be set"
        )
        if isinstance(node.get(leaf), dict):
            raise ConfigError(f"{key!r} names a section, not a value")
        node[leaf] = value
    return nested


def _flatten(prefix: str, values: Mapping[str, Any], out: dict[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, Mapping):
            _flatten(f"{prefix}.{key}", value, out)
        else:
            out[f"{prefix}.{key}"] = value


#: The validation policy of every settings object and of every section of an
#: experiment file (:mod:`fedleak.experiments.config`): unknown keys refused,
#: frozen, strict types (an int field takes no bool and no float, a string
#: field no number; a float field takes an int), defaults validated too, and
#: NaN and infinities refused.
STRICT_MODEL_CONFIG: Final = ConfigDict(
    extra="forbid",
    frozen=True,
    strict=True,
    validate_default=True,
    allow_inf_nan=False,
)


class SettingsModel(BaseModel):
    """Base of the settings objects: frozen, strict, finite, flat-config aware.

    A subclass sets :attr:`prefix` (its dotted name in the message config)
    and declares its fields with pydantic. Values are checked strictly (an
    int field takes no bool and no float, a string field no number; a float
    field takes an int), unknown keys are errors, floats must be finite.
    Constructing one with a bad value raises
    :class:`~fedleak.errors.ConfigError` naming the key.
    """

    model_config = STRICT_MODEL_CONFIG.copy()

    #: Dotted name of the object in the message config (``"adversary"``).
    prefix: ClassVar[str] = ""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:
            raise ConfigError(
                "; ".join(describe_validation_error(err, self.prefix))
            ) from None

    @classmethod
    def decode(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """Map the file and message encoding of ``values`` to field values.

        Files and message configs have no null: a subclass whose optional
        fields are written as a sentinel there (``0`` = off) maps it back to
        ``None`` here. The default changes nothing.
        """
        return dict(values)

    def to_config(self) -> dict[str, Any]:
        """Return the flat message-config entries, ``<prefix>.<key>`` (nested dotted).

        Tuples become lists (a ConfigRecord holds lists); the exact inverse is
        :meth:`from_config`.
        """
        out: dict[str, Any] = {}
        _flatten(self.prefix, self.model_dump(mode="json", by_alias=True), out)
        return out

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """Rebuild the settings from a message config's ``<prefix>.*`` entries.

        Missing entries take their defaults; other entries are ignored.

        Raises
        ------
        ConfigError
            Naming each unknown key, missing required key or wrong value.
        """
        head = cls.prefix + "."
        values = _nest(
            {k[len(head) :]: v for k, v in config.items() if k.startswith(head)}
        )
        try:
            return cls.model_validate(cls.decode(values))
        except ValidationError as err:
            problems = "; ".join(describe_validation_error(err, cls.prefix))
            raise ConfigError(f"message config: {problems}") from None


class PropertyAttackSettings(SettingsModel):
    """``[adversary.property]``: the property adversary (seed 000 Ch. 7.1.4-7.1.5).

    The adversary's auxiliary data (Alg. 7's ``X_prop`` / ``X_nonprop``) are
    its own records or held-out ones, rendered with ``data.property_kind`` for
    ``X_prop`` (:func:`fedleak.clients.property.auxiliary_pools`).

    Attributes
    ----------
    pooling : {"max", "raw"}
        Gradient features: global max pooling or raw.
    aux_pairs : int
        Labelled gradient pairs per round (>= 1).
    aux_fraction : float
        Fraction of a positive auxiliary batch with the property, in (0, 1].
    aux_records : {"own", "held-out", "own-property"}
        Where ``X_prop`` / ``X_nonprop`` come from: the adversary's training
        records (which the model memorises as training goes on), as many
        training-pool records that no client holds (seed 000 Ch. 7.1.4: "from
        the same class ... otherwise can be unrelated"), or its own records
        with and without the property (``data.property_adversary_fraction``).
    emulate : int
        Other participants emulated; 0 = ``num_clients - 1``.
    alpha : float
        Active attack: weight of the property loss, in [0, 1].
    head_learning_rate : float
        Active attack: step size of the property head (> 0).
    """

    prefix: ClassVar[str] = "adversary.property"

    pooling: Literal["max", "raw"] = "max"
    aux_pairs: int = Field(1, ge=1)
    aux_fraction: float = Field(1.0, gt=0, le=1)
    aux_records: Literal["own", "held-out", "own-property"] = "own"
    emulate: int = Field(0, ge=0)
    alpha: float = Field(0.0, ge=0, le=1)
    head_learning_rate: float = Field(0.05, gt=0)


class MembershipAttackSettings(SettingsModel):
    """``[adversary.membership]``: the embedding-layer membership adversary.

    Seed 000 Ch. 7.1.3
    (:class:`fedleak.clients.membership.EmbeddingMembershipAdversary`).

    Attributes
    ----------
    extra_tolerance : float
        Added to the float32 rounding tolerance when reading changed
        embedding rows (>= 0, in parameter units); under secure aggregation
        the adversary allows for the fixed-point rounding itself.
    """

    prefix: ClassVar[str] = "adversary.membership"

    extra_tolerance: float = Field(0.0, ge=0)


class AdversarySettings(SettingsModel):
    """``[adversary]``: which client is an adversary, and of which kind.

    ``kind = "none"`` makes every client honest. The adversary is client
    ``partition``; it follows the protocol and observes on the side (its
    observations go to ``<run dir>/adversary/``).

    Attributes
    ----------
    kind : {"none", "passive-property", "active-property", "embedding-membership"}
        The adversary (:data:`ADVERSARY_KINDS`).
    partition : int
        Its partition id (>= 0).
    property : PropertyAttackSettings
        Settings of the property adversaries.
    membership : MembershipAttackSettings
        Settings of the membership adversary.
    """

    prefix: ClassVar[str] = "adversary"

    kind: AdversaryKind = "none"
    partition: int = Field(1, ge=0)
    property: PropertyAttackSettings = PropertyAttackSettings()
    membership: MembershipAttackSettings = MembershipAttackSettings()


class TargetSchedule(SettingsModel):
    """``[target]``: when the target's batches have the property.

    The target is client ``data.property_target``; it holds the property
    records of the ``property`` split. Under sync-SGD, in every *eligible*
    round ``r`` with ``r % property_every == 0`` its batch has the property in
    fraction ``batch_fraction`` (``1/m`` of its batches, seed 000 Ch. 7.2.3);
    other batches have none. Rounds are eligible from ``join_round`` on and,
    if ``property_rounds = [a, b]`` is given, only for ``a <= r < b``
    (Ch. 7.2.4). Before ``join_round`` the target takes no part: it replies
    with weight 0 and ``abstained`` (:data:`fedleak.protocol.ABSTAINED`), and
    the server averages the others only (Fig. 7.9: ``K - 1`` participants,
    then ``K`` from the join on). ``control = true`` never uses a record with
    the property (control trials, Fig. 7.8). ``property_every = 0`` keeps
    the honest batch order. Under model averaging the target trains on its
    whole partition, whose share of property records is
    ``data.property_target_fraction`` (the thesis' p-hat).

    Attributes
    ----------
    property_every : int
        ``m`` (>= 0; 0 = the honest batch order).
    batch_fraction : float
        Share of a property batch with the property, in (0, 1].
    property_rounds : tuple of int
        Empty, or the window ``(a, b)`` with ``1 <= a < b``.
    join_round : int
        First round the target takes part in (>= 1).
    control : bool
        Never use a record with the property.
    """

    prefix: ClassVar[str] = "target"

    property_every: int = Field(2, ge=0)
    batch_fraction: float = Field(1.0, gt=0, le=1)
    property_rounds: Annotated[tuple[StrictInt, ...], Field(strict=False)] = ()
    join_round: int = Field(1, ge=1)
    control: bool = False

    @model_validator(mode="after")
    def _window(self) -> Self:
        r = self.property_rounds
        if r and (len(r) != 2 or not 1 <= r[0] < r[1]):
            raise ValueError(
                "target.property_rounds: must be [a, b] with 1 <= a < b (rounds "
                f"a to b-1), got {list(r)}"
            )
        return self

    def joined(self, server_round: int) -> bool:
        """Whether the target takes part in ``server_round``."""
        return server_round >= self.join_round

    def has_property(self, server_round: int) -> bool:
        """Whether the scripted batch of ``server_round`` has the property."""
        if self.control or self.property_every == 0 or not self.joined(server_round):
            return False
        if self.property_rounds:
            a, b = self.property_rounds
            if not a <= server_round < b:
                return False
        return server_round % self.property_every == 0


class ProtocolFacts(SettingsModel):
    """``protocol.*``: what an adversary knows of the server's protocol.

    Not a section of the experiment file: ``ExperimentConfig.client_config``
    fills it from ``[strategy]`` and ``[federation]``. The property adversary
    inverts the server step with it (seed 000 Ch. 7.1.2).

    Attributes
    ----------
    learning_rate : float
        The server step ``eta`` of Alg. 1 (key ``protocol.learning-rate``).
    reduction : {"sum", "mean"}
        How the server combines the gradients.
    num_clients : int
        The number of clients ``K`` (key ``protocol.num-clients``).
    """

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True)
    prefix: ClassVar[str] = "protocol"

    learning_rate: float = Field(gt=0, alias="learning-rate")
    reduction: Literal["sum", "mean"] = "sum"
    num_clients: int = Field(ge=1, alias="num-clients")


class RunContext(SettingsModel):
    """``experiment.*``: where the run keeps what its clients observe.

    Attributes
    ----------
    run_dir : str
        The run directory (key ``experiment.run-dir``; "" = none).
    """

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True)
    prefix: ClassVar[str] = "experiment"

    run_dir: str = Field("", alias="run-dir")
