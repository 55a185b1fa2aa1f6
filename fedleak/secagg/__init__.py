"""Pairwise-mask secure aggregation (seed thesis Ch. 4.1; Kursawe et al.).

The server learns the sum of the users' vectors and nothing else about them.
This package is pure protocol code, free of Flower.

Protocol
--------
*Setup.* Every user ``i`` draws an X25519 :class:`KeyPair` and publishes its
public key; the server splits the users into groups (:func:`assign_groups`)
and sends every member the public keys of its group.

*Masking.* In round ``s`` user ``i`` encodes its vector in fixed point
(:class:`FixedPoint`, words mod ``2**b``) and uploads ``b_i = x_i + k_i`` with,
for every slot ``l``,

``k_il = sum_{j != i} PRG(seed_ij, s, group)[l] * (+1 if i < j else -1)``,

where ``seed_ij`` is derived from the shared secret ``X25519(sk_i, pk_j)``
(:func:`agree`, :func:`derive_seed`) and the PRG is AES-256-CTR
(:func:`expand`). The blinding factors of a group sum to zero, so the sum of
the ``b_i`` is the sum of the ``x_i`` (:func:`mask`).

*Fault tolerance.* If users drop out, the server fixes the online set
``U_on`` (:meth:`GroupTally.close`), and refuses to go on if ``|U_on| <
min_online`` (default 3; :class:`InsufficientParticipants`). Each online
user returns ``k'_i = sum_{j not in U_on} sign(i, j) PRG(seed_ij)``
(:func:`recovery`) and the server releases ``sum_{U_on} b_i - sum_{U_on}
k'_i = sum_{U_on} x_i``.

*Groups.* Splitting the users into groups bounds each user's work by the
group size; the server learns one sum per group.

Threat model
------------
The server is honest but curious: it follows the protocol and tries to learn
single inputs from everything it sees (all public keys, all uploads, all
recoveries). Users may collude with it; a coalition learns no more than the
sum of the honest users' inputs (of each group). Therefore:

- a *late upload*, arriving after ``U_on`` is fixed, is rejected
  (:meth:`GroupTally.add_upload`): the recoveries requested for its sender
  remove all of its masks, so accepting it would unmask its input;
- a member of ``U_on`` that fails to send its recovery makes the group fail.
  There is no second recovery round: two recoveries for different dropped
  sets would reveal a user's single pairwise masks;
- fewer than ``min_online`` online members release nothing: with two, each
  could subtract its own input from the sum.

Modules
-------
- :mod:`fedleak.secagg.keys` -- key pairs and X25519 agreement;
- :mod:`fedleak.secagg.prg` -- seed derivation and the AES-256-CTR PRG;
- :mod:`fedleak.secagg.fixed_point` -- fixed-point encoding mod ``2**b``;
- :mod:`fedleak.secagg.masking` -- the client side;
- :mod:`fedleak.secagg.tally` -- the server side, one group at a time;
- :mod:`fedleak.secagg.local` -- everything in one process, for tests and
  benchmarks.
"""

from __future__ import annotations

from .fixed_point import FixedPoint
from .keys import KeyPair, agree
from .local import LocalResult, secure_sum
from .masking import blinding, mask, recovery
from .prg import PRG_NAME, derive_seed, expand
from .tally import GroupTally, InsufficientParticipants, assign_groups

__all__ = [
    "FixedPoint",
    "GroupTally",
    "InsufficientParticipants",
    "KeyPair",
    "LocalResult",
    "PRG_NAME",
    "agree",
    "assign_groups",
    "blinding",
    "derive_seed",
    "expand",
    "mask",
    "recovery",
    "secure_sum",
]
