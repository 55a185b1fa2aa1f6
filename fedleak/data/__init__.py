"""Datasets, partitioners and label-independent image properties.

- :mod:`fedleak.data.idx` -- the IDX file format of MNIST and Fashion-MNIST;
- :mod:`fedleak.data.datasets` -- loading ``digits``, ``fashion-mnist`` and
  ``mnist`` from local files (never from the network);
- :mod:`fedleak.data.partition` -- IID, Dirichlet label-skew and
  property-aware splits among clients;
- :mod:`fedleak.data.properties` -- synthetic properties (watermark,
  inversion, blur) for property inference experiments.
"""

from __future__ import annotations

from .datasets import (
    DATASET_NAMES,
    DEFAULT_DATA_DIRS,
    Dataset,
    DatasetStatus,
    dataset_status,
    find_data_dir,
    load_dataset,
)
from .idx import read_idx, write_idx
from .partition import (
    partition_dirichlet,
    partition_iid,
    partition_property,
    partition_sizes,
)
from .properties import (
    PROPERTY_NAMES,
    add_property,
    apply_property,
    choose_property_subset,
)

__all__ = [
    "DATASET_NAMES",
    "DEFAULT_DATA_DIRS",
    "Dataset",
    "DatasetStatus",
    "PROPERTY_NAMES",
    "add_property",
    "apply_property",
    "choose_property_subset",
    "dataset_status",
    "find_data_dir",
    "load_dataset",
    "partition_dirichlet",
    "partition_iid",
    "partition_property",
    "partition_sizes",
    "read_idx",
    "write_idx",
]
