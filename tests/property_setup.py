"""A small property-inference experiment and a client context (tests)."""

from __future__ import annotations

from typing import Any

from flwr.app import Context, RecordDict

from fedleak.experiments.config import ExperimentConfig, validate

#: three clients on digits, client 0 the target (half its records carry the
#: property), client 1 the passive adversary, synchronized SGD on an MLP
BASE: dict[str, Any] = {
    "seed": 5,
    "data": {
        "dataset": "digits",
        "partition": "property",
        "property_target": 0,
        "property_target_fraction": 0.5,
        "property_partition_size": 120,
    },
    "model": {"name": "mlp"},
    "strategy": {"name": "sync-sgd", "learning_rate": 0.1},
    "client": {"batch_size": 16},
    "federation": {"num_clients": 3},
    "adversary": {"kind": "passive-property", "partition": 1},
}


def property_experiment(
    name: str, *layers: dict[str, dict[str, Any]]
) -> ExperimentConfig:
    """Validate :data:`BASE` with each layer's sections merged over it, in order."""
    raw: dict[str, Any] = {key: value for key, value in BASE.items()}
    for layer in layers:
        for section, values in layer.items():
            raw[section] = {**raw.get(section, {}), **values}
    return validate(raw, "test", name)


def client_context(partition: int, num_partitions: int = 3) -> Context:
    """A fresh Context of the ClientApp on ``partition`` (node id ``10 + partition``)."""
    return Context(
        run_id=1,
        node_id=10 + partition,
        node_config={"partition-id": partition, "num-partitions": num_partitions},
        state=RecordDict(),
        run_config={},
    )
