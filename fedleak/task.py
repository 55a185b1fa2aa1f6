"""The learning task a federation works on: data, split, model, client settings.

A :class:`TaskSpec` travels from the server to the clients inside every
``train``/``evaluate`` message (as flat ``task.*`` keys of the message's
ConfigRecord), so a fedleak ClientApp needs no other configuration: the same
ClientApp serves ``fedleak run``, ``flwr run`` and Flower's own strategies
(which forward ``train_config`` to the clients unchanged).

Every client derives its partition from ``(dataset, split settings, seed)``,
so all clients and the server agree on the split without exchanging data;
loaded partitions are cached per process (a Ray actor serves many nodes).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np
import torch

from .data import (
    Dataset,
    add_property,
    load_dataset,
    partition_dirichlet,
    partition_iid,
    partition_property,
)
from .data.text import TEXT_TASK_DATASETS, load_text_task
from .errors import ConfigError
from .models import TEXT_MODEL_NAMES, build_model

__all__ = [
    "PARTITIONERS",
    "ClientData",
    "TaskSpec",
    "client_data",
    "training_pool",
]

PARTITIONERS: tuple[str, ...] = ("iid", "dirichlet", "property")
_PREFIX = "task."


@dataclass(frozen=True)
class TaskSpec:
    """Everything a client needs to know about the learning task.

    Attributes
    ----------
    dataset : str
        Name for :func:`fedleak.data.load_dataset`.
    data_root : str
        Folder of the dataset files ("" = the default search order).
    num_partitions : int
        Number of clients the training set is split into.
    partition : {"iid", "dirichlet", "property"}
        The partitioner.
    dirichlet_alpha : float
        Concentration of the Dirichlet label skew.
    property_kind : str
        Label-independent property (:data:`fedleak.data.PROPERTY_NAMES`) used by
        the ``"property"`` split.
    property_pool_fraction : float
        Fraction of the training pool rendered with the property.
    property_target : int
        The partition holding the property.
    property_target_fraction : float
        Fraction of the target's records with the property.
    property_others_fraction : float
        Fraction of every other partition's records with the property.
    property_partition_size : int
        Records per partition of the ``"property"`` split (0 = the largest
        size the pool allows).
    property_adversary : int
        A partition given ``property_adversary_fraction`` of its records with
        the property (-1 = none).
    property_adversary_fraction : float
        That partition's fraction with the property.
    model : str
        Name for :func:`fedleak.models.build_model`.
    model_dropout : float
        Dropout after the pooling layer of the text models (seed 000 Ch. 7.3.3).
    model_embedding_dim : int
        Embedding width of the text models (0 = the thesis': 320 for the CNN,
        100 for the GRU).
    seed : int
        Run seed; split, model initialisation and client RNGs derive from it.
    batch_size : int
        Mini-batch size of the clients.
    learning_rate : float
        The clients' local SGD step size (model averaging).
    local_epochs : int
        Local epochs per round (model averaging).
    crash_partitions, crash_rounds : tuple of int
        Fault injection: these clients' train function raises in these rounds
        (a crash mid-round, after key setup and before upload).
    """

    dataset: str = "digits"
    data_root: str = ""
    num_partitions: int = 4
    partition: str = "iid"
    dirichlet_alpha: float = 0.5
    property_kind: str = "watermark"
    property_pool_fraction: float = 0.5
    property_target: int = 0
    property_target_fraction: float = 0.5
    property_others_fraction: float = 0.0
    property_partition_size: int = 0
    property_adversary: int = -1
    property_adversary_fraction: float = 0.0
    model: str = "cnn"
    model_dropout: float = 0.0
    model_embedding_dim: int = 0
    seed: int = 0
    batch_size: int = 32
    learning_rate: float = 0.05
    local_epochs: int = 1
    crash_partitions: tuple[int, ...] = ()
    crash_rounds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{_PREFIX}{f.name} must be finite, got {value}")
        if self.partition not in PARTITIONERS:
            raise ConfigError(
                f"unknown partition {self.partition!r}; "
                f"choose one of {list(PARTITIONERS)}"
            )
        if self.num_partitions < 1:
            raise ConfigError(f"num_partitions must be >= 1, got {self.num_partitions}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.model_embedding_dim < 0:
            raise ConfigError(
                f"model_embedding_dim must be >= 0, got {self.model_embedding_dim}"
            )
        if self.local_epochs < 1:
            raise ConfigError(f"local_epochs must be >= 1, got {self.local_epochs}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate must be > 0, got {self.learning_rate}")

    def to_config(self) -> dict[str, Any]:
        """Return the spec as flat ``task.*`` ConfigRecord entries."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[_PREFIX + f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def crashes_in(self, partition_id: int, server_round: int) -> bool:
        """Return whether fault injection makes this client crash in this round."""
        return (
            partition_id in self.crash_partitions and server_round in self.crash_rounds
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TaskSpec:
        """Rebuild a spec from a message ConfigRecord (its ``task.*`` entries).

        Raises
        ------
        ConfigError
            If no ``task.*`` entry is present or a value has the wrong type.
        """
        values = {
            k[len(_PREFIX) :]: v for k, v in config.items() if k.startswith(_PREFIX)
        }
        if not values:
            raise ConfigError(
                "the message config holds no fedleak task (task.* keys): run the "
                "federation through fedleak.experiments, or pass "
                "TaskSpec(...).to_config() as the strategy's train_config"
            )
        known = _field_types()
        kwargs: dict[str, Any] = {}
        for name, value in values.items():
            if name not in known:
                raise ConfigError(f"unknown task key {_PREFIX + name!r}")
            expected = known[name]
            if (
                expected is float
                and isinstance(value, int)
                and not isinstance(value, bool)
            ):
                value = float(value)
            if expected is tuple and isinstance(value, list):
                if not all(
                    isinstance(v, int) and not isinstance(v, bool) for v in value
                ):
                    raise ConfigError(
                        f"task key {_PREFIX + name!r} must be a list of integers"
                    )
                value = tuple(value)
            if type(value) is not expected:
                raise ConfigError(
                    f"task key {_PREFIX + name!r} must be {expected.__name__}, "
                    f"got {type(value).__name__}"
                )
            kwargs[name] = value
        return cls(**kwargs)

    def data_key(self) -> tuple[Any, ...]:
        """Return the fields that determine the clients' data (a cache key)."""
        return (
            self.dataset,
            self.data_root,
            self.num_partitions,
            self.partition,
            self.dirichlet_alpha,
            self.property_kind,
            self.property_pool_fraction,
            self.property_target,
            self.property_target_fraction,
            self.property_others_fraction,
            self.seed,
            self.property_partition_size,
            self.property_adversary,
            self.property_adversary_fraction,
        )

    def load(self) -> Dataset:
        """Load the task's dataset.

        The text datasets (:data:`fedleak.data.text.TEXT_TASK_DATASETS`) come
        as int64 token ids of shape ``(n, length)`` in ``x_train``/``x_test``.
        """
        if self.dataset in TEXT_TASK_DATASETS:
            text = load_text_task(self.dataset, seed=self.seed)
            return Dataset(
                name=self.dataset,
                x_train=text.x_train,
                y_train=text.y_train,
                x_test=text.x_test,
                y_test=text.y_test,
                num_classes=text.num_classes,
                source=text.source,
            )
        return load_dataset(self.dataset, self.data_root or None)

    def new_model(self) -> torch.nn.Module:
        """Build the task's model with the run's seeded initial weights."""
        data = self.load()
        if self.model in TEXT_MODEL_NAMES or self.dataset in TEXT_TASK_DATASETS:
            if self.dataset not in TEXT_TASK_DATASETS:
                raise ConfigError(
                    f"model {self.model!r} needs a text dataset "
                    f"({list(TEXT_TASK_DATASETS)}), got {self.dataset!r}"
                )
            text = load_text_task(self.dataset, seed=self.seed)
            return build_model(
                self.model,
                (text.sequence_length,),
                text.num_classes,
                seed=self.seed,
                vocab_size=text.vocab_size,
                dropout=self.model_dropout,
                embedding_dim=self.model_embedding_dim or None,
            )
        return build_model(
            self.model, data.input_shape, data.num_classes, seed=self.seed
        )


@cache
def _field_types() -> dict[str, type]:
    """Each :class:`TaskSpec` field's type, as its default value has it.

    :meth:`TaskSpec.from_config` checks every ``task.*`` entry against it for
    every message; building a default spec per entry to look it up took a
    tenth of a quickstart client's handler.
    """
    default = TaskSpec()
    return {
        f.name: type(getattr(default, f.name)) for f in dataclasses.fields(TaskSpec)
    }


@dataclass(frozen=True)
class ClientData:
    """One client's share of the task, as tensors ready for training."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    has_property: np.ndarray

    @property
    def num_train(self) -> int:
        """Number of local training records ``n_k``."""
        return int(self.y_train.shape[0])


def _split_seeds(seed: int) -> list[np.random.SeedSequence]:
    return np.random.SeedSequence([seed, 0xDA7A]).spawn(3)


def training_pool(
    spec: TaskSpec,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Build the training pool and its partition (same result on every process).

    Returns
    -------
    x : numpy.ndarray
        Training images, with the property rendered where ``has_property``.
    y : numpy.ndarray
        Training labels.
    has_property : numpy.ndarray of bool
        Which records carry the property (all False unless ``partition="property"``).
    parts : list of numpy.ndarray
        Index arrays of the ``num_partitions`` clients.
    """
    return _training_pool(spec.data_key())


@lru_cache(maxsize=4)
def _training_pool(
    key: tuple[Any, ...],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    spec = _spec_from_key(key)
    data = spec.load()
    x, y = data.x_train, data.y_train
    prop_seed, split_seed, _ = _split_seeds(spec.seed)
    has_property = np.zeros(len(y), dtype=bool)
    rng_split = np.random.default_rng(split_seed)
    if spec.partition == "iid":
        parts = partition_iid(len(y), spec.num_partitions, rng_split)
    elif spec.partition == "dirichlet":
        parts = partition_dirichlet(
            y, spec.num_partitions, spec.dirichlet_alpha, rng_split
        )
    else:
        x, has_property = add_property(
            x,
            spec.property_pool_fraction,
            spec.property_kind,
            seed=np.random.default_rng(prop_seed),
        )
        parts = partition_property(
            has_property,
            spec.num_partitions,
            target=spec.property_target,
            target_fraction=spec.property_target_fraction,
            others_fraction=spec.property_others_fraction,
            partition_size=spec.property_partition_size or None,
            seed=rng_split,
            adversary=spec.property_adversary if spec.property_adversary >= 0 else None,
            adversary_fraction=spec.property_adversary_fraction,
        )
    return x, y, has_property, parts


def _spec_from_key(key: tuple[Any, ...]) -> TaskSpec:
    names = (
        "dataset",
        "data_root",
        "num_partitions",
        "partition",
        "dirichlet_alpha",
        "property_kind",
        "property_pool_fraction",
        "property_target",
        "property_target_fraction",
        "property_others_fraction",
        "seed",
        "property_partition_size",
        "property_adversary",
        "property_adversary_fraction",
    )
    return TaskSpec(**dict(zip(names, key, strict=True)))


def client_data(spec: TaskSpec, partition_id: int) -> ClientData:
    """Return client ``partition_id``'s training share and its share of the test set.

    The test set is split IID into ``num_partitions`` parts for client-side
    evaluation.

    Raises
    ------
    ConfigError
        If ``partition_id`` is outside ``[0, num_partitions)``.
    """
    if not 0 <= partition_id < spec.num_partitions:
        raise ConfigError(
            f"partition id {partition_id} outside [0, {spec.num_partitions}): the "
            "federation has more nodes than the task has partitions"
        )
    return _client_data(spec.data_key(), partition_id)


@lru_cache(maxsize=64)
def _client_data(key: tuple[Any, ...], partition_id: int) -> ClientData:
    spec = _spec_from_key(key)
    x, y, has_property, parts = _training_pool(key)
    data = spec.load()
    _, _, test_seed = _split_seeds(spec.seed)
    test_parts = partition_iid(
        len(data.y_test), spec.num_partitions, np.random.default_rng(test_seed)
    )
    idx, test_idx = parts[partition_id], test_parts[partition_id]
    # token ids (text datasets) stay integers for the embedding layer
    x_dtype = np.int64 if np.issubdtype(x.dtype, np.integer) else np.float32
    return ClientData(
        x_train=torch.from_numpy(np.ascontiguousarray(x[idx], dtype=x_dtype)),
        y_train=torch.from_numpy(np.ascontiguousarray(y[idx], dtype=np.int64)),
        x_test=torch.from_numpy(
            np.ascontiguousarray(data.x_test[test_idx], dtype=x_dtype)
        ),
        y_test=torch.from_numpy(
            np.ascontiguousarray(data.y_test[test_idx], dtype=np.int64)
        ),
        has_property=has_property[idx],
    )
