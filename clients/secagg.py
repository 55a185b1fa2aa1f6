"""Client side of fedleak's secure aggregation, as a Flower mod.

``ClientApp(mods=[secagg_mod])`` makes any unchanged ClientApp train function
take part in :class:`fedleak.strategies.SecureAggregation`. A mod cannot add
message types, so the protocol rides on plain ``train`` messages carrying a
``fedleak-secagg`` ConfigRecord (:mod:`fedleak.protocol`); messages without it
pass through untouched.

- ``advertise``: a fresh X25519 key pair from the OS CSPRNG; the secret stays
  in ``Context.state``, the public key goes to the server. The train function
  is not called.
- ``upload``: the record is removed, the train function runs as usual, and its
  reply (one ArrayRecord, one MetricRecord) becomes one vector — arrays in the
  server's layout, the chosen metrics, the weight and the count of clipped
  values — fixed-point encoded, weighted (``n_k`` for averages) and masked
  with the group's pairwise masks (seed 000 Ch. 4.1, step 2). Nothing else
  leaves the node.
- ``recover``: the blinding shared with the dropped members (step 4).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable

from fedleak import protocol
from fedleak.errors import ProtocolError
from fedleak.secagg import FixedPoint, KeyPair, mask, recovery
from fedleak.secagg.layout import RAW_SLOTS, VectorLayout

__all__ = ["QUANTISATION_STATE", "secagg_mod"]

_STATE = "fedleak.secagg"
QUANTISATION_STATE = "fedleak.secagg.quantisation"
"""``context.state`` key of the current upload's fixed point, written before the
wrapped ClientApp trains: ``round``, ``scale``, ``clip``, ``group-size`` and
``weighted`` (a client reading its own contribution out of the aggregate,
e.g. :class:`fedleak.clients.membership.EmbeddingMembershipAdversary`,
bounds the rounding of the decoded sum with them); removed when it returns."""
_KEY_BYTES = 32


def _state(context: Context) -> ConfigRecord:
    if _STATE not in context.state.config_records:
        context.state[_STATE] = ConfigRecord()
    return context.state.config_records[_STATE]


def _keypair(state: ConfigRecord) -> KeyPair:
    secret = state.get("secret")
    if not isinstance(secret, bytes):
        raise ProtocolError(
            "no secure-aggregation key on this node: the server skipped setup"
        )
    return KeyPair.from_secret(secret)


def _peers(record: ConfigRecord) -> dict[int, bytes]:
    ids = record.get(protocol.SECAGG_PEERS)
    keys = record.get(protocol.SECAGG_PEER_KEYS)
    if not isinstance(ids, bytes) or not isinstance(keys, bytes):
        raise ProtocolError("upload message lacks the group's members or keys")
    members = protocol.unpack_ids(ids)
    if len(keys) != _KEY_BYTES * len(members):
        raise ProtocolError("upload message: member and key counts differ")
    return {
        m: keys[i * _KEY_BYTES : (i + 1) * _KEY_BYTES] for i, m in enumerate(members)
    }


def _int(record: ConfigRecord, key: str) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"secure-aggregation message lacks integer {key!r}")
    return value


def _float(record: ConfigRecord, key: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f"secure-aggregation message lacks number {key!r}")
    return float(value)


def _reply(msg: Message, values: dict[str, Any]) -> Message:
    record = ConfigRecord(values)
    return Message(RecordDict({protocol.SECAGG_RECORD: record}), reply_to=msg)


def _advertise(msg: Message, context: Context) -> Message:
    keypair = KeyPair.generate(secure_mode=True)
    _state(context)["secret"] = keypair.secret
    return _reply(
        msg,
        {
            protocol.SECAGG_STAGE: protocol.STAGE_ADVERTISE,
            protocol.SECAGG_PUBLIC_KEY: keypair.public,
        },
    )


class _UploadPlan:
    """What the server asked for in an upload message, checked before training."""

    def __init__(self, record: ConfigRecord, own_id: int) -> None:
        self.round = _int(record, protocol.SECAGG_ROUND)
        self.group = _int(record, "group")
        self.peers = _peers(record)
        if own_id not in self.peers:
            raise ProtocolError(
                f"this node ({own_id}) is not a member of its announced group"
            )
        self.layout = VectorLayout.from_config(record)
        self.weighted = record.get("mode") == "weighted"
        self.fixed = FixedPoint(
            _float(record, "clip"),
            _float(record, "scale"),
            _int(record, "modulus-bits"),
        )
        self.max_weight = _float(record, "max-weight")
        # a server must not make the sum overflow: check before any work
        self.fixed.check_capacity(
            len(self.peers), self.max_weight if self.weighted else 1.0
        )

    def encode(self, reply: Message) -> np.ndarray:
        """Turn the train function's reply into the encoded (unmasked) vector."""
        content = reply.content
        if len(content.array_records) != 1 or len(content.metric_records) != 1:
            raise ProtocolError(
                "secure aggregation needs a train reply with exactly one ArrayRecord "
                "and one MetricRecord"
            )
        arrays = {
            k: v.numpy() for k, v in next(iter(content.array_records.values())).items()
        }
        metrics = next(iter(content.metric_records.values()))
        weight = 1.0
        if self.weighted:
            n_k = metrics.get(protocol.NUM_EXAMPLES)
            if isinstance(n_k, bool) or not isinstance(n_k, int) or n_k <= 0:
                raise ProtocolError(
                    "weighted secure aggregation needs a positive integer "
                    f"{protocol.NUM_EXAMPLES}, got {n_k!r}"
                )
            if n_k > self.max_weight:
                raise ProtocolError(
                    f"{protocol.NUM_EXAMPLES}={n_k} exceeds the server's "
                    f"max_weight={self.max_weight:g}; raise "
                    "SecureAggregation(max_weight=...)"
                )
            weight = float(n_k)
        values = self.layout.flatten(arrays, fill_missing=not self.weighted)
        metric_values = []
        for name in self.layout.metric_names:
            value = metrics.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ProtocolError(f"metric {name!r} to aggregate securely is missing")
            metric_values.append(float(value))
        encoded, clipped = self.fixed.encode(
            np.concatenate([values, metric_values]), weight
        )
        raw = np.array([int(weight), clipped], dtype=np.int64).astype(self.fixed.dtype)
        assert raw.size == len(RAW_SLOTS)
        return np.concatenate([encoded, raw])


def _upload(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    record = msg.content.config_records[protocol.SECAGG_RECORD]
    del msg.content[protocol.SECAGG_RECORD]
    own = msg.metadata.dst_node_id
    plan = _UploadPlan(record, own)
    state = _state(context)
    keypair = _keypair(state)
    if plan.peers[own] != keypair.public:
        raise ProtocolError(
            "the server announced a public key for this node that is not ours"
        )
    context.state[QUANTISATION_STATE] = ConfigRecord(
        {
            "round": plan.round,
            "scale": plan.fixed.scale,
            "clip": plan.fixed.clip,
            "group-size": len(plan.peers),
            "weighted": plan.weighted,
        }
    )
    try:
        reply = call_next(msg, context)
    finally:
        del context.state[QUANTISATION_STATE]
    if reply.has_error():
        return reply
    vector = plan.encode(reply)
    masked = mask(vector, own, keypair, plan.peers, round=plan.round, group=plan.group)
    state["round"] = plan.round
    state["group"] = plan.group
    state[protocol.SECAGG_PEERS] = record[protocol.SECAGG_PEERS]
    state[protocol.SECAGG_PEER_KEYS] = record[protocol.SECAGG_PEER_KEYS]
    state["length"] = int(vector.size)
    state["modulus-bits"] = plan.fixed.modulus_bits
    state["min-online"] = max(2, _int(record, "min-online"))
    return _reply(
        msg,
        {
            protocol.SECAGG_STAGE: protocol.STAGE_UPLOAD,
            protocol.SECAGG_ROUND: plan.round,
            "group": plan.group,
            protocol.SECAGG_MASKED: masked.tobytes(),
        },
    )


def _recover(msg: Message, context: Context) -> Message:
    record = msg.content.config_records[protocol.SECAGG_RECORD]
    round_ = _int(record, protocol.SECAGG_ROUND)
    state = _state(context)
    if state.get("round") != round_ or state.get("group") != _int(record, "group"):
        raise ProtocolError(
            f"recovery asked for round {round_}, but this node last uploaded in round "
            f"{state.get('round')!r}"
        )
    dropped_packed = record.get(protocol.SECAGG_DROPPED)
    if not isinstance(dropped_packed, bytes):
        raise ProtocolError("recovery message lacks the dropped members")
    if state.get("recovered-round") == round_:
        # a second recovery with another dropped set would reveal single
        # pairwise masks, and with them a late upload: refuse
        raise ProtocolError(f"recovery for round {round_} was already sent")
    peers = _peers(state)
    dropped = protocol.unpack_ids(dropped_packed)
    online = len(set(peers) - set(dropped))
    if online < _int(state, "min-online"):
        raise ProtocolError(
            f"recovery refused: only {online} group members would remain online, "
            f"fewer than {_int(state, 'min-online')}"
        )
    bits = _int(state, "modulus-bits")
    k_prime = recovery(
        msg.metadata.dst_node_id,
        _keypair(state),
        peers,
        dropped,
        round=round_,
        group=_int(state, "group"),
        length=_int(state, "length"),
        dtype=np.uint32 if bits == 32 else np.uint64,
    )
    state["recovered-round"] = round_
    return _reply(
        msg,
        {
            protocol.SECAGG_STAGE: protocol.STAGE_RECOVER,
            protocol.SECAGG_ROUND: round_,
            protocol.SECAGG_MASKED: k_prime.tobytes(),
        },
    )


def secagg_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower client mod running fedleak's secure-aggregation client.

    Parameters
    ----------
    msg : flwr.app.Message
        The incoming message.
    context : flwr.app.Context
        The node's context (its ``state`` keeps the secret key).
    call_next : callable
        The wrapped ClientApp function.

    Returns
    -------
    flwr.app.Message
        The protocol reply, or the unchanged reply of ``call_next`` for
        messages that are not part of the protocol.

    Raises
    ------
    ProtocolError
        On a malformed protocol message (Flower turns it into an error reply).
    """
    if msg.metadata.message_type != "train" or (
        protocol.SECAGG_RECORD not in msg.content.config_records
    ):
        return call_next(msg, context)
    stage = msg.content.config_records[protocol.SECAGG_RECORD].get(
        protocol.SECAGG_STAGE
    )
    if stage == protocol.STAGE_ADVERTISE:
        return _advertise(msg, context)
    if stage == protocol.STAGE_UPLOAD:
        return _upload(msg, context, call_next)
    if stage == protocol.STAGE_RECOVER:
        return _recover(msg, context)
    raise ProtocolError(f"unknown secure-aggregation stage {stage!r}")
