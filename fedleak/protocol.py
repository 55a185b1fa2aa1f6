"""Names shared by fedleak's server strategies and ClientApps.

The strategies (``fedleak.strategies``) and the ClientApps (``fedleak.clients``)
talk through Flower messages; this module holds the message types and record
keys they agree on, and nothing else (it imports no Flower code), so the two
sides cannot drift apart. Keys are kebab-case, as in Flower (``num-examples``).

Messages
--------
``query.fedleak_identify`` (server -> every node, once per new node set)
    Asks a node for its partition id. The reply holds a MetricRecord
    :data:`IDENTITY_RECORD` with :data:`PARTITION_ID` (and
    :data:`NUM_PARTITIONS`). Nodes that cannot answer are ordered by node id.
``train`` (server -> sampled nodes)
    Content: the global model under :data:`ARRAYS_KEY` and a ConfigRecord under
    :data:`CONFIG_KEY` holding :data:`SERVER_ROUND`, :data:`TRAIN_MODE` and
    whatever the caller passed as ``train_config``. With mode
    :data:`MODE_GRADIENT` (seed 000 Alg. 1) the reply's one ArrayRecord holds
    the gradient of the loss on one mini-batch, keyed like the model's
    parameters; with :data:`MODE_MODEL` (Alg. 2) it holds the locally trained
    model. The reply's one MetricRecord holds :data:`NUM_EXAMPLES`.
``evaluate`` (server -> sampled nodes)
    Content as for ``train``; the reply's MetricRecord holds
    :data:`NUM_EXAMPLES` and the metrics to average.

Secure aggregation (:class:`fedleak.strategies.SecureAggregation` and
:func:`fedleak.clients.secagg_mod`) rides on plain ``train`` messages; its
record name, stages and keys are defined with the protocol engine, in
:mod:`fedleak.secagg.constants`.

A reply that stands for the aggregate of several clients (what the secure
aggregation wrapper hands to its inner strategy) carries a ConfigRecord
:data:`AGGREGATE_RECORD` listing them (:data:`AGGREGATE_CONTRIBUTORS`).

A client that takes no part in a round (a participant that has not joined
the training yet, seed 000 Fig. 7.9) still answers its ``train`` message:
its MetricRecord holds :data:`NUM_EXAMPLES` = 0 and :data:`ABSTAINED` = 1.
The strategies leave such a reply out of the aggregate and out of the
participant count; a weight of 0 without the flag is still malformed.

:class:`fedleak.strategies.ModelAveraging` reports the weight ``n = sum_k
n_k`` of each round's average as the round metric
:data:`AGGREGATED_EXAMPLES` and sends it to the next round's clients as
:data:`PREVIOUS_AGGREGATED_EXAMPLES` (Alg. 2, line 8 divides by it).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ABSTAINED",
    "AGGREGATED_EXAMPLES",
    "AGGREGATE_CONTRIBUTORS",
    "AGGREGATE_RECORD",
    "ARRAYS_KEY",
    "CONFIG_KEY",
    "IDENTIFY_MESSAGE_TYPE",
    "IDENTITY_RECORD",
    "LEARNING_RATE",
    "LOCAL_EPOCHS",
    "METRICS_KEY",
    "MODE_GRADIENT",
    "MODE_MODEL",
    "NUM_EXAMPLES",
    "NUM_PARTITIONS",
    "PARTITION_ID",
    "PREVIOUS_AGGREGATED_EXAMPLES",
    "SERVER_ROUND",
    "TRAIN_MODE",
    "pack_ids",
    "unpack_ids",
]

IDENTIFY_MESSAGE_TYPE: Final = "query.fedleak_identify"
IDENTITY_RECORD: Final = "fedleak-identity"
PARTITION_ID: Final = "partition-id"
NUM_PARTITIONS: Final = "num-partitions"

ARRAYS_KEY: Final = "arrays"
CONFIG_KEY: Final = "config"
METRICS_KEY: Final = "metrics"

SERVER_ROUND: Final = "server-round"
TRAIN_MODE: Final = "fedleak-mode"
MODE_GRADIENT: Final = "gradient"
MODE_MODEL: Final = "model"
LEARNING_RATE: Final = "lr"
LOCAL_EPOCHS: Final = "local-epochs"
NUM_EXAMPLES: Final = "num-examples"
ABSTAINED: Final = "abstained"
AGGREGATED_EXAMPLES: Final = "aggregated-examples"
PREVIOUS_AGGREGATED_EXAMPLES: Final = "previous-aggregated-examples"

AGGREGATE_RECORD: Final = "fedleak-aggregate"
AGGREGATE_CONTRIBUTORS: Final = "contributors"

_ID_BYTES = 8


def pack_ids(ids: list[int] | tuple[int, ...]) -> bytes:
    """Pack node ids (0 <= id < 2**64) as 8-byte big-endian words.

    Flower node ids use the whole unsigned 64-bit range, which a ConfigRecord
    integer (signed 64-bit on the wire) cannot hold; bytes can.
    """
    try:
        return b"".join(int(i).to_bytes(_ID_BYTES, "big") for i in ids)
    except OverflowError:
        raise ValueError("node ids must lie in [0, 2**64)") from None


def unpack_ids(data: bytes) -> list[int]:
    """Inverse of :func:`pack_ids`.

    Raises
    ------
    ValueError
        If ``data`` is not a whole number of 8-byte words.
    """
    if len(data) % _ID_BYTES:
        raise ValueError(
            f"packed ids must be a multiple of {_ID_BYTES} bytes, got {len(data)}"
        )
    return [
        int.from_bytes(data[i : i + _ID_BYTES], "big")
        for i in range(0, len(data), _ID_BYTES)
    ]
