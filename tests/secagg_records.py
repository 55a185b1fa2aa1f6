"""A pending secure-aggregation round as a client state record holds it (tests)."""

from __future__ import annotations

from typing import Any

from fedleak.secagg.records import pack_ids

#: the ``pending.*`` fields of a client state record: round 1, group 0, a
#: thesis-mode group of three peers, vectors of 4 words of 32 bits
PENDING_ROUND: dict[str, Any] = {
    "pending.round": 1,
    "pending.group": 0,
    "pending.mode": "thesis",
    "pending.peers": pack_ids([1, 2, 3]),
    "pending.keys": bytes(96),
    "pending.shared": bytes(96),
    "pending.threshold": 0,
    "pending.online-floor": 3,
    "pending.length": 4,
    "pending.modulus-bits": 32,
    "pending.unmasked": False,
}
