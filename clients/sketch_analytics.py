"""ClientApp side of federated sketch analytics with masked aggregation.

:func:`make_sketch_client_app` builds a Flower ``ClientApp`` that answers the
``query`` messages of :class:`fedleak.strategies.sketch_analytics.SketchAnalytics`
(seed 000 Ch. 4.1.2): it advertises an X25519 public key, sketches its local
stream when asked and uploads only the table masked with the group's
pairwise masks (:func:`fedleak.secagg.mask`), and returns its recovery mask
(:func:`fedleak.secagg.recovery`) if group members dropped. The masking is
:mod:`fedleak.secagg`'s; this module is the Flower glue and the local
sketching.

The local stream comes from a *data source*, ``source(context, config) ->
(items, counts)``; :func:`recommender_source` is the one of the private
recommender (Ch. 4.1): the node's users of a synthetic Zipf population,
their co-view pairs and counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedleak import protocol
from fedleak.errors import ProtocolError
from fedleak.secagg import FixedPoint, KeyPair, mask, recovery
from fedleak.sketches import messages as msgs
from fedleak.sketches.recommender import pair_ids, zipf_population

__all__ = ["DataSource", "make_sketch_client_app", "recommender_source"]

#: ``source(context, config) -> (items, counts)``: the node's local stream.
DataSource = Callable[[Context, ConfigRecord], tuple[np.ndarray, np.ndarray]]

_STATE = "fedleak.sketch"
_KEY_BYTES = 32


def _int(record: ConfigRecord, key: str) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"sketch message lacks integer {key!r}")
    return value


def _state(context: Context) -> ConfigRecord:
    if _STATE not in context.state.config_records:
        context.state[_STATE] = ConfigRecord()
    return context.state.config_records[_STATE]


def _peers(record: ConfigRecord) -> dict[int, bytes]:
    ids, keys = record.get(msgs.PEERS), record.get(msgs.PEER_KEYS)
    if not isinstance(ids, bytes) or not isinstance(keys, bytes):
        raise ProtocolError("sketch upload lacks the group's members or keys")
    members = protocol.unpack_ids(ids)
    if len(keys) != _KEY_BYTES * len(members):
        raise ProtocolError("sketch upload: member and key counts differ")
    return {
        m: keys[i * _KEY_BYTES : (i + 1) * _KEY_BYTES] for i, m in enumerate(members)
    }


def _keypair(state: ConfigRecord) -> KeyPair:
    secret = state.get("secret")
    if not isinstance(secret, bytes):
        raise ProtocolError("no sketch key on this node: the server skipped setup")
    return KeyPair.from_secret(secret)


def _reply(msg: Message, values: dict[str, Any]) -> Message:
    return Message(RecordDict({msgs.RECORD: ConfigRecord(values)}), reply_to=msg)


def _record(msg: Message) -> ConfigRecord:
    if msgs.RECORD not in msg.content.config_records:
        raise ProtocolError(f"sketch message lacks its {msgs.RECORD!r} record")
    return msg.content.config_records[msgs.RECORD]


def _advertise(msg: Message, context: Context) -> Message:
    keypair = KeyPair.generate(secure_mode=True)
    _state(context)["secret"] = keypair.secret
    return _reply(msg, {msgs.PUBLIC_KEY: keypair.public})


def _upload(msg: Message, context: Context, source: DataSource) -> Message:
    record = _record(msg)
    own = msg.metadata.dst_node_id
    state = _state(context)
    keypair = _keypair(state)
    peers = _peers(record)
    if peers.get(own) != keypair.public:
        raise ProtocolError("the server announced a key for this node that is not ours")
    round_, group = _int(record, msgs.ROUND), _int(record, msgs.GROUP)
    cls = msgs.sketch_class(record.get(msgs.KIND))
    sketch = cls(
        _int(record, msgs.DEPTH),
        _int(record, msgs.WIDTH),
        seed=_int(record, msgs.HASH_SEED),
    )
    max_count = _int(record, msgs.MAX_COUNT)
    code = FixedPoint(float(max_count), 1.0, _int(record, msgs.MODULUS_BITS))
    code.check_capacity(len(peers))  # the server must not make the sum overflow
    items, counts = source(context, record)
    sketch.update(items, counts)
    largest = int(np.abs(sketch.table).max())
    if largest > max_count:
        raise ProtocolError(
            f"a local counter is {largest}, above the run's max-count {max_count}"
        )
    encoded, _ = code.encode(sketch.table.reshape(-1))
    masked = mask(encoded, own, keypair, peers, round=round_, group=group)
    state["round"] = round_
    state["group"] = group
    state[msgs.PEERS] = record[msgs.PEERS]
    state[msgs.PEER_KEYS] = record[msgs.PEER_KEYS]
    state["length"] = int(encoded.size)
    state[msgs.MODULUS_BITS] = code.modulus_bits
    state[msgs.MIN_ONLINE] = max(2, _int(record, msgs.MIN_ONLINE))
    return _reply(
        msg, {msgs.ROUND: round_, msgs.GROUP: group, msgs.MASKED: masked.tobytes()}
    )


def _recover(msg: Message, context: Context) -> Message:
    record = _record(msg)
    round_ = _int(record, msgs.ROUND)
    state = _state(context)
    if state.get("round") != round_ or state.get("group") != _int(record, msgs.GROUP):
        raise ProtocolError(
            f"recovery for round {round_}, but this node did not upload"
        )
    if state.get("recovered-round") == round_:
        # a second recovery with another dropped set would unmask single pairs
        raise ProtocolError(f"recovery for round {round_} was already sent")
    dropped_packed = record.get(msgs.DROPPED)
    if not isinstance(dropped_packed, bytes):
        raise ProtocolError("recovery message lacks the dropped members")
    peers = _peers(state)
    dropped = protocol.unpack_ids(dropped_packed)
    online = len(set(peers) - set(dropped))
    if online < _int(state, msgs.MIN_ONLINE):
        raise ProtocolError(
            f"recovery refused: only {online} group members would remain online"
        )
    bits = _int(state, msgs.MODULUS_BITS)
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
    return _reply(msg, {msgs.ROUND: round_, msgs.MASKED: k_prime.tobytes()})


def recommender_source(
    context: Context, config: ConfigRecord
) -> tuple[np.ndarray, np.ndarray]:
    """Co-view pairs of this node's users of a synthetic Zipf population (Ch. 4.1).

    The population is :func:`fedleak.sketches.recommender.zipf_population`
    with the upload's ``population-users``, ``population-items``,
    ``population-seed`` (and optional ``mean-views``); node ``partition-id``
    of ``num-partitions`` holds the users ``u`` with ``u % num-partitions ==
    partition-id`` (one user per node when the counts match).
    """
    part = context.node_config.get(protocol.PARTITION_ID)
    parts = context.node_config.get(protocol.NUM_PARTITIONS)
    if not isinstance(part, int) or not isinstance(parts, int):
        raise ProtocolError("this node has no partition-id / num-partitions")
    n_items = _int(config, "population-items")
    views = config.get("mean-views", 8.0)
    population = zipf_population(
        _int(config, "population-users"),
        n_items,
        mean_views=float(views) if isinstance(views, int | float) else 8.0,
        seed=_int(config, "population-seed"),
    )
    pairs = [
        pair_ids(population.items_of(u), n_items)
        for u in range(part, population.n_users, parts)
    ]
    items = np.concatenate(pairs) if pairs else np.zeros(0, dtype=np.int64)
    uniq, counts = np.unique(items, return_counts=True)
    return uniq, counts.astype(np.int64)


def make_sketch_client_app(source: DataSource = recommender_source) -> ClientApp:
    """Build a ClientApp that takes part in a masked sketch-analytics run.

    Parameters
    ----------
    source : callable, default=recommender_source
        ``source(context, config) -> (items, counts)``: the local stream.

    Returns
    -------
    flwr.clientapp.ClientApp
    """
    app = ClientApp()

    @app.query(msgs.ADVERTISE.split(".", 1)[1])
    def advertise(msg: Message, context: Context) -> Message:
        return _advertise(msg, context)

    @app.query(msgs.UPLOAD.split(".", 1)[1])
    def upload(msg: Message, context: Context) -> Message:
        return _upload(msg, context, source)

    @app.query(msgs.RECOVER.split(".", 1)[1])
    def recover(msg: Message, context: Context) -> Message:
        return _recover(msg, context)

    return app
