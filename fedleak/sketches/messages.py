"""Message types and record keys of the federated sketch analytics run.

Shared by :mod:`fedleak.strategies.sketch_analytics` (server) and
:mod:`fedleak.clients.sketch_analytics` (ClientApp); no Flower imports. The
run (seed 000 Ch. 4.1.2 over Flower ``query`` messages):

:data:`ADVERTISE` (server -> every node)
    The node draws an X25519 key pair and replies :data:`PUBLIC_KEY`.
:data:`UPLOAD` (server -> nodes with a key)
    Carries the group (:data:`PEERS` packed by
    :func:`fedleak.protocol.pack_ids`, :data:`PEER_KEYS`), the sketch shape
    (:data:`KIND`, :data:`DEPTH`, :data:`WIDTH`, :data:`HASH_SEED`), the code
    (:data:`MAX_COUNT`, :data:`MODULUS_BITS`) and the analysis' own settings;
    the node sketches its local stream and replies only its masked table
    (:data:`MASKED`).
:data:`RECOVER` (server -> online members of a group with dropouts)
    Carries :data:`DROPPED`; the node replies its recovery mask.

All content sits in one ConfigRecord :data:`RECORD`.
"""

from __future__ import annotations

from typing import Final

from ..errors import ProtocolError
from .base import LinearSketch
from .count_min import CountMinSketch
from .count_sketch import CountSketch

__all__ = [
    "ADVERTISE",
    "DEPTH",
    "DROPPED",
    "GROUP",
    "HASH_SEED",
    "KIND",
    "MASKED",
    "MAX_COUNT",
    "MIN_ONLINE",
    "MODULUS_BITS",
    "PEERS",
    "PEER_KEYS",
    "PUBLIC_KEY",
    "RECORD",
    "RECOVER",
    "ROUND",
    "UPLOAD",
    "WIDTH",
    "sketch_class",
    "sketch_kind",
]

ADVERTISE: Final = "query.fedleak_sketch_advertise"
UPLOAD: Final = "query.fedleak_sketch_upload"
RECOVER: Final = "query.fedleak_sketch_recover"

RECORD: Final = "fedleak-sketch"
ROUND: Final = "round"
GROUP: Final = "group"
PUBLIC_KEY: Final = "public-key"
PEERS: Final = "peers"
PEER_KEYS: Final = "peer-keys"
KIND: Final = "kind"
DEPTH: Final = "depth"
WIDTH: Final = "width"
HASH_SEED: Final = "hash-seed"
MAX_COUNT: Final = "max-count"
MODULUS_BITS: Final = "modulus-bits"
MIN_ONLINE: Final = "min-online"
MASKED: Final = "masked"
DROPPED: Final = "dropped"

_KINDS: dict[str, type[LinearSketch]] = {
    "count-min": CountMinSketch,
    "count": CountSketch,
}


def sketch_kind(sketch: LinearSketch) -> str:
    """Return the wire name of a sketch's kind (``"count-min"`` or ``"count"``)."""
    for name, cls in _KINDS.items():
        if type(sketch) is cls:
            return name
    raise ProtocolError(f"{type(sketch).__name__} cannot be sent in a sketch run.")


def sketch_class(kind: object) -> type[LinearSketch]:
    """Return the sketch class of a wire name.

    Raises
    ------
    ProtocolError
        If the name is unknown.
    """
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ProtocolError(
            f"unknown sketch kind {kind!r}; expected one of {sorted(_KINDS)}."
        )
    return _KINDS[kind]
