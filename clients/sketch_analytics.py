"""ClientApp side of federated sketch analytics with secure aggregation.

:func:`make_sketch_client_app` builds a Flower ``ClientApp`` that answers the
``query`` messages of :class:`fedleak.strategies.sketch_analytics.SketchAnalytics`
(seed 000 Ch. 4.1.2). The protocol -- session key, guards, masking, shares,
unmasking -- is :mod:`fedleak.secagg`'s client session, run by
:func:`fedleak.clients.secagg.run_secagg_stage` exactly as for models; this
module only sketches the local stream when an upload request passed the
guards.

The local stream comes from a *data source*, ``source(context, config) ->
(items, counts)``; :func:`recommender_source` is the one of the private
recommender (Ch. 4.1): the node's users of a synthetic Zipf population,
their co-view pairs and counts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from fedleak import protocol
from fedleak.errors import ProtocolError
from fedleak.secagg import FixedPoint
from fedleak.secagg.client import ClientGuards, UploadPlan
from fedleak.secagg.constants import RECORD
from fedleak.sketches import messages as msgs
from fedleak.sketches.recommender import pair_ids, zipf_population

from .secagg import run_secagg_stage

__all__ = ["DataSource", "make_sketch_client_app", "recommender_source"]

#: ``source(context, config) -> (items, counts)``: the node's local stream.
DataSource = Callable[[Context, ConfigRecord], tuple[np.ndarray, np.ndarray]]


def _int(record: ConfigRecord, key: str) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"sketch message lacks integer {key!r}")
    return value


def _sketch_words(
    msg: Message, context: Context, plan: UploadPlan, source: DataSource
) -> np.ndarray:
    """Sketch the local stream and encode its table for an accepted upload."""
    if msgs.RECORD not in msg.content.config_records:
        raise ProtocolError(f"sketch upload lacks its {msgs.RECORD!r} record")
    record = msg.content.config_records[msgs.RECORD]
    cls = msgs.sketch_class(record.get(msgs.KIND))
    sketch = cls(
        _int(record, msgs.DEPTH),
        _int(record, msgs.WIDTH),
        seed=_int(record, msgs.HASH_SEED),
    )
    if sketch.size != plan.length:
        raise ProtocolError(
            f"the sketch has {sketch.size} counters, the protocol {plan.length}"
        )
    max_count = _int(record, msgs.MAX_COUNT)
    code = FixedPoint(float(max_count), 1.0, plan.modulus_bits)
    code.check_capacity(plan.group_size)  # the server must not make the sum overflow
    items, counts = source(context, record)
    sketch.update(items, counts)
    largest = int(np.abs(sketch.table).max())
    if largest > max_count:
        raise ProtocolError(
            f"a local counter is {largest}, above the run's max-count {max_count}"
        )
    encoded, _ = code.encode(sketch.table.reshape(-1))
    return encoded


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


def make_sketch_client_app(
    source: DataSource = recommender_source,
    *,
    min_group: int = 3,
    min_online: int = 3,
    accept_thesis: bool = False,
) -> ClientApp:
    """Build a ClientApp that takes part in a secure sketch-analytics run.

    Parameters
    ----------
    source : callable, default=recommender_source
        ``source(context, config) -> (items, counts)``: the local stream.
    min_group, min_online : int, default=3
        The node's own floors (see :class:`fedleak.secagg.ClientGuards`).
    accept_thesis : bool, default=False
        Take part in ``mode="thesis"`` runs.

    Returns
    -------
    flwr.clientapp.ClientApp
    """
    guards = ClientGuards(
        min_group=min_group, min_online=min_online, accept_thesis=accept_thesis
    )
    app = ClientApp()

    def handle(msg: Message, context: Context) -> Message:
        if RECORD not in msg.content.config_records:
            raise ProtocolError(f"sketch message lacks its {RECORD!r} record")
        return run_secagg_stage(
            msg,
            context,
            guards,
            lambda plan: _sketch_words(msg, context, plan, source),
        )

    for kind in (msgs.ADVERTISE, msgs.UPLOAD, msgs.RECOVER):
        app.query(kind.split(".", 1)[1])(handle)
    return app
