"""Flower ClientApps, client behaviours and client mods (``fedleak.clients``).

``fedleak.clients:app`` is the honest ClientApp; point a Flower app's
``clientapp`` component at it, or build one with :func:`make_honest_client_app`.

What is here:

- the honest client (:class:`HonestClient`, :func:`make_honest_client_app`)
  and the secure-aggregation client mod (:func:`secagg_mod`);
- :func:`legacy_client_mod`, which lets Flower's ``NumPyClient`` / ``Client``
  apps answer Message-API strategies (``secagg_mod`` includes it);
- the property-inference adversaries of seed 000 Ch. 7.1.4-7.1.5
  (:class:`PassivePropertyAdversary`, :class:`ActivePropertyAdversary`) and
  the scripted target (:class:`PropertyTarget`), picked per node by
  :func:`property_behaviour`;
- the embedding-layer membership adversary of Ch. 7.1.3
  (:class:`EmbeddingMembershipAdversary`, :func:`membership_behaviour`);
- the defended honest client of Ch. 7.3 (:class:`DefendedClient`,
  :func:`defended_behaviour`);
- the sketch-analytics client app (:mod:`fedleak.clients.sketch_analytics`).

The adversaries and the defended client load their modules (and the attack
algorithms of :mod:`fedleak.attacks`) on first use.
"""

from fedleak._lazy import lazy_exports

from .honest import (
    HonestClient,
    add_identify_handler,
    make_honest_client_app,
    partition_id_of,
)
from .legacy import legacy_client_mod
from .secagg import secagg_mod

#: The honest ClientApp, ready for fedleak's strategies with or without secure
#: aggregation (``secagg_mod`` passes every other message through untouched).
app = make_honest_client_app(mods=[secagg_mod])

_LAZY = {
    "ActivePropertyAdversary": "property",
    "PassivePropertyAdversary": "property",
    "PropertyTarget": "property",
    "property_behaviour": "property",
    "EmbeddingMembershipAdversary": "membership",
    "membership_behaviour": "membership",
    "DefendedClient": "defenses",
    "defended_behaviour": "defenses",
}

__getattr__, _ = lazy_exports(__name__, _LAZY)

__all__ = [
    "ActivePropertyAdversary",
    "DefendedClient",
    "EmbeddingMembershipAdversary",
    "HonestClient",
    "PassivePropertyAdversary",
    "PropertyTarget",
    "add_identify_handler",
    "app",
    "defended_behaviour",
    "legacy_client_mod",
    "make_honest_client_app",
    "membership_behaviour",
    "partition_id_of",
    "property_behaviour",
    "secagg_mod",
]


def __dir__() -> list[str]:
    return list(__all__)
