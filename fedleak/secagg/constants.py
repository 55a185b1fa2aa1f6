"""Typed names of the secure-aggregation protocol: modes, stages, record keys.

The client and the server sessions (:mod:`fedleak.secagg.client`,
:mod:`fedleak.secagg.server`) exchange flat records (``dict`` of ``str`` to
``int``, ``float``, ``str``, ``bytes`` or ``bool``: what a Flower
``ConfigRecord`` holds); every key and value they agree on is named here, in
the style of Flower's ``secaggplus_constants``, so neither side spells a bare
string. Node ids are packed as 8-byte big-endian words
(:func:`fedleak.protocol.pack_ids`): Flower's node ids use the whole unsigned
64-bit range, which a record integer cannot hold.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "ENCODING_RECORD",
    "MODES",
    "RECORD",
    "STATE_RECORD",
    "Key",
    "Mode",
    "Refusal",
    "Stage",
]

#: ``"double-masking"`` (default): pairwise masks plus a Shamir-shared
#: self-mask (Bonawitz et al., CCS 2017); ``"thesis"``: the seed's pairwise
#: masks alone (seed 000 Ch. 4.1), safe only against an honest server with no
#: stragglers.
Mode = Literal["double-masking", "thesis"]
MODES: Final[tuple[Mode, ...]] = get_args(Mode)

#: Name of the record that carries the protocol in a Flower message.
RECORD: Final = "fedleak-secagg"
#: Name of the record that carries a model adapter's encoding (fixed point,
#: layout) beside :data:`RECORD`.
ENCODING_RECORD: Final = "fedleak-secagg-encoding"
#: Name of the client's state record in a Flower ``Context.state``.
STATE_RECORD: Final = "fedleak.secagg"


class _Names:
    """A namespace of string constants that cannot be instantiated."""

    def __new__(cls) -> _Names:  # pragma: no cover - guard only
        raise TypeError(f"{cls.__name__} cannot be instantiated.")

    @classmethod
    def all(cls) -> tuple[str, ...]:
        """Return every value of the namespace, in definition order."""
        return tuple(
            value
            for name, value in vars(cls).items()
            if name.isupper() and isinstance(value, str)
        )


class Stage(_Names):
    """The stages of one session, in protocol order.

    ``ADVERTISE`` opens a session (once per node, or after a node lost its
    state); every round then has ``UPLOAD`` and, in double-masking mode
    always and in thesis mode only when members dropped, ``UNMASK``.
    """

    ADVERTISE: Final = "advertise"
    UPLOAD: Final = "upload"
    UNMASK: Final = "unmask"


class Key(_Names):
    """Keys of the records the two sides exchange."""

    STAGE: Final = "stage"
    SESSION: Final = "session"
    ROUND: Final = "round"
    GROUP: Final = "group"
    MODE: Final = "mode"
    PUBLIC_KEY: Final = "public-key"
    PEERS: Final = "peers"
    PEER_KEYS: Final = "peer-keys"
    THRESHOLD: Final = "threshold"
    MIN_ONLINE: Final = "min-online"
    LENGTH: Final = "length"
    MODULUS_BITS: Final = "modulus-bits"
    MASKED: Final = "masked"
    SHARES: Final = "shares"
    ONLINE: Final = "online"
    DROPPED: Final = "dropped"
    FORWARDED: Final = "forwarded"
    REVEALED: Final = "revealed"
    RECOVERY: Final = "recovery"
    REFUSAL: Final = "refusal"
    REASON: Final = "reason"


class Refusal(_Names):
    """Named refusals a client replies with instead of following a request.

    Each guards the client against a server that lies (see
    :class:`fedleak.secagg.client.ClientGuards`); the server counts them per
    name (``secagg-refused-<name>``).
    """

    #: The group holds fewer members than the client's floor (the
    #: "group of one" attack: a lone member's upload would be its input).
    GROUP_TOO_SMALL: Final = "group-too-small"
    #: An unmask request leaves fewer members online than the client's floor
    #: (or, in double-masking mode, than the threshold plus one).
    ONLINE_TOO_FEW: Final = "online-too-few"
    #: An upload for a round not above the client's last one in the session
    #: (the replay attack: masks reused for two inputs).
    ROUND_REPLAYED: Final = "round-replayed"
    #: A Shamir threshold of at most half the group.
    THRESHOLD_TOO_LOW: Final = "threshold-too-low"
    #: A Shamir threshold the group's other members cannot reach.
    THRESHOLD_UNREACHABLE: Final = "threshold-unreachable"
    #: An unmask request naming one peer both online and dropped.
    BOTH_SHARES: Final = "both-shares"
    #: A second unmask request for one round: with another online set it
    #: would reveal, for some peer, both its self-mask share and the masks
    #: shared with it.
    UNMASK_REPEATED: Final = "unmask-repeated"
    #: A mode the client does not accept (thesis mode is opt-in).
    MODE_REFUSED: Final = "mode-refused"
    #: The request names another session than the client's current one.
    UNKNOWN_SESSION: Final = "unknown-session"
    #: The roster does not list this client with its own key, or lists
    #: repeated ids or keys.
    BAD_ROSTER: Final = "bad-roster"
    #: An unmask request that does not fit the pending round (round, online
    #: and dropped sets, forwarded shares).
    BAD_UNMASK: Final = "bad-unmask"
    #: A forwarded share that fails authentication (tampered, replayed or
    #: redirected by the server).
    BAD_SHARE: Final = "bad-share"
