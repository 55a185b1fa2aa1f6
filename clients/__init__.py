"""Flower ClientApps and client behaviours (installed as ``fedleak.clients``).

``fedleak.clients:app`` is the honest ClientApp; point a Flower app's
``clientapp`` component at it, or build one with :func:`make_honest_client_app`.
"""

from .honest import (
    HonestClient,
    add_identify_handler,
    make_honest_client_app,
    partition_id_of,
)
from .secagg import secagg_mod

#: The honest ClientApp, ready for fedleak's strategies with or without secure
#: aggregation (``secagg_mod`` passes every other message through untouched).
app = make_honest_client_app(mods=[secagg_mod])

__all__ = [
    "HonestClient",
    "add_identify_handler",
    "app",
    "make_honest_client_app",
    "partition_id_of",
    "secagg_mod",
]
