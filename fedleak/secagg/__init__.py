"""Secure aggregation: the server learns the sum of the clients' vectors only.

This package is the whole protocol, free of Flower: one client session
object and one server session object (:mod:`~fedleak.secagg.client`,
:mod:`~fedleak.secagg.server`) exchange flat records whose stages and keys
are typed constants (:mod:`~fedleak.secagg.constants`). Thin Flower
adapters carry them: :class:`fedleak.strategies.SecureAggregation` with
:func:`fedleak.clients.secagg_mod` for models, and
:class:`fedleak.strategies.sketch_analytics.SketchAnalytics` with
:func:`fedleak.clients.sketch_analytics.make_sketch_client_app` for sketches;
:func:`secure_sum` runs it in one process.

Modes
-----
``"thesis"`` (seed 000 Ch. 4.1, Kursawe et al.)
    Every client ``i`` publishes an X25519 key once per session and uploads
    ``y_i = x_i + sum_{j != i} ±PRG(seed_ij, round, group) mod 2**b``; the
    masks of a group cancel in the sum. When members drop, the online ones
    return the masks they shared with them (their *recovery*). Table 4.1's
    bytes: one 32-byte key up, the group's keys down, one masked vector up.
    Safe only against an honest server with no stragglers: an upload that
    arrives after the online set is fixed decodes to its sender's input once
    the recoveries are in, and so does an upload the server declares
    dropped.
``"double-masking"`` (default; Bonawitz et al., CCS 2017)
    Every client also adds a self-mask ``PRG(b_i)`` for a fresh seed ``b_i``
    per round, Shamir-shared ``t``-of-``(n - 1)`` among its peers (``t >
    n/2``) and sealed peer to peer (ChaCha20-Poly1305, keys from the X25519
    agreement); the shares ride on the masked upload and the server forwards
    them at the unmask stage. Each survivor reveals, for every peer, either
    its share of ``b_j`` (peer online) or the mask it shares with ``j`` (peer
    dropped), never both, once per round. A late upload, or one declared
    dropped, keeps its self-mask: the server never holds ``t`` shares of it.

Threat model
------------
The server may be honest but curious, with stragglers, or may lie in its
messages: claim uploaded clients dropped, send a group of one, replay a
round, lower the thresholds, or tell clients different online sets. The
clients' guards (:class:`~fedleak.secagg.client.ClientGuards`) and double
masking defeat each of these; :mod:`fedleak.attacks.secagg` plays them and
measures what the server recovers. Not covered, as in Flower's SecAgg+:
without a public-key infrastructure a server that substitutes public keys or
invents clients (Sybils) can impersonate a client's peers; clients that
send wrong shares or masks can spoil the sum (but not learn inputs); and a
coalition of the server with ``c >= 2 t + 1 - n`` clients of a group can
unmask a member (:mod:`~fedleak.secagg.settings`).

Modules
-------
- :mod:`~fedleak.secagg.constants` -- modes, stages, record keys, refusals;
- :mod:`~fedleak.secagg.settings` -- the server's settings and the
  decryption floors they imply;
- :mod:`~fedleak.secagg.client` / :mod:`~fedleak.secagg.server` -- the
  sessions;
- :mod:`~fedleak.secagg.keys`, :mod:`~fedleak.secagg.prg`,
  :mod:`~fedleak.secagg.channel`, :mod:`~fedleak.secagg.shamir` -- X25519,
  BLAKE2b + AES-256-CTR masks, the share channel, vectorised Shamir;
- :mod:`~fedleak.secagg.fixed_point`, :mod:`~fedleak.secagg.layout` --
  encodings;
- :mod:`~fedleak.secagg.masking`, :mod:`~fedleak.secagg.tally` -- the seed's
  primitives (a client's masks and a group's running sum);
- :mod:`~fedleak.secagg.local` -- the protocol in one process;
- :mod:`~fedleak.secagg.costs` -- in-process cost measurements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedleak._lazy import lazy_exports

if TYPE_CHECKING:
    from .client import ClientGuards, ClientSession, ClientState, Refused, UploadPlan
    from .constants import MODES, Key, Mode, Refusal, Stage
    from .fixed_point import FixedPoint
    from .keys import KeyPair, agree
    from .local import LocalResult, secure_sum
    from .masking import blinding, mask, recovery
    from .prg import PRG_NAME, derive_seed, expand
    from .server import AggregationRound, GroupOutcome, RoundResult, ServerSession
    from .settings import ProtocolSettings
    from .tally import GroupTally, InsufficientParticipants, assign_groups

_WHERE = {
    "AggregationRound": "server",
    "ClientGuards": "client",
    "ClientSession": "client",
    "ClientState": "client",
    "FixedPoint": "fixed_point",
    "GroupOutcome": "server",
    "GroupTally": "tally",
    "InsufficientParticipants": "tally",
    "Key": "constants",
    "KeyPair": "keys",
    "LocalResult": "local",
    "MODES": "constants",
    "Mode": "constants",
    "PRG_NAME": "prg",
    "ProtocolSettings": "settings",
    "Refusal": "constants",
    "Refused": "client",
    "RoundResult": "server",
    "ServerSession": "server",
    "Stage": "constants",
    "UploadPlan": "client",
    "agree": "keys",
    "assign_groups": "tally",
    "blinding": "masking",
    "derive_seed": "prg",
    "expand": "prg",
    "mask": "masking",
    "recovery": "masking",
    "secure_sum": "local",
}

# Lazy: importing one module (e.g. the settings an experiment file is
# checked against) does not load the cryptography of the others.
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "MODES",
    "PRG_NAME",
    "AggregationRound",
    "ClientGuards",
    "ClientSession",
    "ClientState",
    "FixedPoint",
    "GroupOutcome",
    "GroupTally",
    "InsufficientParticipants",
    "Key",
    "KeyPair",
    "LocalResult",
    "Mode",
    "ProtocolSettings",
    "Refusal",
    "Refused",
    "RoundResult",
    "ServerSession",
    "Stage",
    "UploadPlan",
    "agree",
    "assign_groups",
    "blinding",
    "derive_seed",
    "expand",
    "mask",
    "recovery",
    "secure_sum",
]
