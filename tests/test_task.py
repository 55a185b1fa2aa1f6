from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord

from fedleak.errors import ConfigError
from fedleak.task import TaskSpec, client_data, training_pool


def test_task_spec_round_trips_through_a_config_record():
    spec = TaskSpec(
        dataset="digits",
        num_partitions=3,
        partition="dirichlet",
        dirichlet_alpha=0.3,
        seed=9,
        batch_size=16,
        learning_rate=0.2,
    )
    record = ConfigRecord(spec.to_config())
    record["server-round"] = 4  # other keys are ignored
    assert TaskSpec.from_config(record) == spec


def test_task_spec_from_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="no fedleak task"):
        TaskSpec.from_config({"server-round": 1})
    with pytest.raises(ConfigError, match=r"task\.batch_size"):
        TaskSpec.from_config({"task.batch_size": "big"})
    with pytest.raises(ConfigError, match=r"unknown task key 'task\.colour'"):
        TaskSpec.from_config({"task.colour": "red"})
    with pytest.raises(ConfigError, match="partition"):
        TaskSpec(partition="random")


def test_client_partitions_are_disjoint_cover_and_deterministic():
    spec = TaskSpec(dataset="digits", num_partitions=5, seed=1)
    _, y, _, parts = training_pool(spec)
    joined = np.concatenate(parts)
    assert len(joined) == len(np.unique(joined)) == len(y)
    a, b = (
        client_data(spec, 2),
        client_data(TaskSpec(dataset="digits", num_partitions=5, seed=1), 2),
    )
    assert a.num_train == len(parts[2])
    assert bool((a.x_train == b.x_train).all())
    other_seed = client_data(TaskSpec(dataset="digits", num_partitions=5, seed=2), 2)
    assert not bool((a.y_train == other_seed.y_train).all())
    with pytest.raises(ConfigError, match="partition id 5"):
        client_data(spec, 5)


def test_property_task_gives_the_target_its_fraction():
    spec = TaskSpec(
        dataset="digits",
        num_partitions=4,
        partition="property",
        property_target=1,
        property_target_fraction=0.5,
        property_others_fraction=0.0,
    )
    target = client_data(spec, 1)
    assert target.has_property.mean() == pytest.approx(0.5, abs=0.01)
    for other in (0, 2, 3):
        assert not client_data(spec, other).has_property.any()
