"""Datasets, partitioners and label-independent image properties.

- :mod:`fedleak.data.idx` -- the IDX file format of MNIST and Fashion-MNIST;
- :mod:`fedleak.data.datasets` -- loading ``digits``, ``fashion-mnist`` and
  ``mnist`` from local files (never from the network);
- :mod:`fedleak.data.partition` -- IID, Dirichlet label-skew and
  property-aware splits among clients;
- :mod:`fedleak.data.properties` -- synthetic properties (watermark,
  inversion, blur) for property inference experiments;
- :mod:`fedleak.data.text` -- the ``fortunes`` corpus and top-N tokenisation
  for the embedding models;
- :mod:`fedleak.data.checkins` -- FourSquare check-ins (public TSV format)
  and a synthetic check-in generator;
- :mod:`fedleak.data.yelp` -- Yelp reviews (public JSON-lines format);
- :mod:`fedleak.data.purchases` -- seed 004's synthetic shopping carts;
- :mod:`fedleak.data.audit_tasks` -- small sets and replacement pools for
  auditing DP-SGD (seed 002).
"""

from __future__ import annotations

from .audit_tasks import AUDIT_DATASETS, AuditTask, load_audit_task
from .checkins import (
    CheckinTable,
    checkin_dataset,
    read_foursquare_tsv,
    synthetic_checkins,
)
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
from .purchases import skewed_purchases
from .text import (
    PAD_ID,
    TEXT_TASK_DATASETS,
    UNK_ID,
    TextCorpus,
    TextDataset,
    Vocabulary,
    build_vocabulary,
    fortunes_dataset,
    load_fortunes,
    load_text_task,
    tokenize,
)
from .yelp import read_yelp_businesses, read_yelp_reviews, yelp_dataset

__all__ = [
    "AUDIT_DATASETS",
    "AuditTask",
    "CheckinTable",
    "DATASET_NAMES",
    "DEFAULT_DATA_DIRS",
    "Dataset",
    "DatasetStatus",
    "PAD_ID",
    "PROPERTY_NAMES",
    "TEXT_TASK_DATASETS",
    "TextCorpus",
    "TextDataset",
    "UNK_ID",
    "Vocabulary",
    "add_property",
    "apply_property",
    "build_vocabulary",
    "checkin_dataset",
    "choose_property_subset",
    "dataset_status",
    "find_data_dir",
    "fortunes_dataset",
    "load_audit_task",
    "load_dataset",
    "load_fortunes",
    "load_text_task",
    "partition_dirichlet",
    "partition_iid",
    "partition_property",
    "partition_sizes",
    "read_foursquare_tsv",
    "read_idx",
    "read_yelp_businesses",
    "read_yelp_reviews",
    "skewed_purchases",
    "synthetic_checkins",
    "tokenize",
    "write_idx",
    "yelp_dataset",
]
