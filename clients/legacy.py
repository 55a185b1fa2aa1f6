"""Message-API strategies for Flower's legacy ``NumPyClient`` / ``Client`` apps.

Flower 1.41 runs a ``ClientApp(client_fn=...)`` (a ``NumPyClient`` or
``Client``) through its legacy handler, which reads the old record layout
(``fitins.parameters``, ``fitins.config``; ``evaluateins.*``) and answers in it
(``fitres.parameters``, ``fitres.num_examples``, ``fitres.metrics``;
``evaluateres.*``). Message-API strategies (Flower's
``flwr.serverapp.strategy.FedAvg``, fedleak's) send the new layout
(``arrays``, ``config``) and read replies with one ArrayRecord and one
MetricRecord, so such a client fails with ``KeyError: 'fitins.parameters'``.

:func:`call_with_layout` bridges the two inside a mod: it first passes the
message on unchanged; when the wrapped app turns out to be a legacy one
(that exact ``KeyError``, raised before the client's ``fit`` runs) it adds the
legacy records, calls again and translates the reply back, and remembers the
answer in ``Context.state`` so later messages go straight to the legacy
layout. The conversions are Flower's own (:mod:`flwr.compat.common.
recorddict_compat`); only the naming is added here: the reply's arrays take
the names of the arrays the server sent, in order, and the legacy
``num_examples`` becomes ``num-examples``.

:func:`legacy_client_mod` is that bridge on its own (for fedleak's
``ModelAveraging`` or Flower's Message-API ``FedAvg`` without secure
aggregation); :func:`fedleak.clients.secagg_mod` includes it. Both also answer
fedleak's identify query (``query.fedleak_identify``) for legacy apps, whose
mods see every message.
"""

from __future__ import annotations

from collections.abc import Mapping
from logging import WARNING
from typing import Final, TypeVar

from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import Code, EvaluateIns, FitIns, log, parameters_to_ndarrays
from flwr.compat.common.recorddict_compat import (
    arrayrecord_to_parameters,
    evaluateins_to_recorddict,
    fitins_to_recorddict,
    recorddict_to_evaluateres,
    recorddict_to_fitres,
)

from fedleak import protocol
from fedleak.errors import ProtocolError

from .records import array_record

__all__ = [
    "LEGACY_STATE",
    "call_with_layout",
    "identify_reply",
    "legacy_client_mod",
    "record_of",
]

LEGACY_STATE: Final = "fedleak.legacy-layout"
"""``context.state`` record remembering that the wrapped app is a legacy one."""

_LEGACY_INPUT = {"train": "fitins", "evaluate": "evaluateins"}
_SCALARS = (bool, int, float, str, bytes)
_WARNED = "warned-dropped"
_R = TypeVar("_R", ArrayRecord, ConfigRecord, MetricRecord)


def identify_reply(msg: Message, context: Context) -> Message:
    """Answer fedleak's identify query from the node's ``node_config``.

    A node without an integer ``partition-id`` answers with no identity (the
    server then orders it by node id) instead of raising.
    """
    content = RecordDict()
    partition = context.node_config.get(protocol.PARTITION_ID)
    if isinstance(partition, int) and not isinstance(partition, bool):
        record = MetricRecord({protocol.PARTITION_ID: partition})
        num = context.node_config.get(protocol.NUM_PARTITIONS)
        if isinstance(num, int) and not isinstance(num, bool):
            record[protocol.NUM_PARTITIONS] = num
        content[protocol.IDENTITY_RECORD] = record
    return Message(content, reply_to=msg)


def record_of(records: RecordDict, name: str, kind: type[_R]) -> _R | None:
    """Return the record ``name`` of ``records`` if it is a ``kind``, else None.

    Reads that one entry: Flower's ``RecordDict.config_records`` (and
    ``array_records``, ``metric_records``) build and check a new mapping of
    all the records of their kind on every call, about 20 us each, and a
    protocol message looks records up several times per stage.
    """
    record = records.get(name)
    return record if isinstance(record, kind) else None


def _is_legacy(context: Context) -> bool:
    return record_of(context.state, LEGACY_STATE, ConfigRecord) is not None


def _new_layout(msg: Message) -> bool:
    """Whether ``msg`` carries the Message-API layout and not the legacy one."""
    kind = _LEGACY_INPUT.get(msg.metadata.message_type)
    content = msg.content
    return (
        kind is not None
        and record_of(content, protocol.ARRAYS_KEY, ArrayRecord) is not None
        and record_of(content, f"{kind}.parameters", ArrayRecord) is None
    )


def _add_legacy_input(msg: Message) -> None:
    """Add the legacy ``fitins.*`` / ``evaluateins.*`` records to ``msg``.

    The content is replaced by a shallow copy first: a strategy may share one
    RecordDict among its messages.
    """
    content = RecordDict(dict(msg.content.items()))
    msg.content = content
    arrays = content.array_records[protocol.ARRAYS_KEY]
    config = content.config_records.get(protocol.CONFIG_KEY, ConfigRecord())
    # legacy configs hold scalars only (flwr.common.Scalar)
    scalars = {k: v for k, v in config.items() if isinstance(v, _SCALARS)}
    parameters = arrayrecord_to_parameters(arrays, keep_input=True)
    if msg.metadata.message_type == "train":
        legacy = fitins_to_recorddict(FitIns(parameters, scalars), keep_input=True)
    else:
        legacy = evaluateins_to_recorddict(
            EvaluateIns(parameters, scalars), keep_input=True
        )
    for name, record in legacy.items():
        content[name] = record


def _numeric_metrics(
    metrics: Mapping[str, object], context: Context, source: str
) -> MetricRecord:
    """Keep a legacy metrics dict's numbers; name the rest once per node."""
    kept = MetricRecord()
    dropped = []
    for key, value in metrics.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            kept[key] = value
        else:
            dropped.append(key)
    state = context.state.config_records[LEGACY_STATE]
    if dropped and not state.get(_WARNED):
        state[_WARNED] = True
        log(
            WARNING,
            "fedleak: the %s metrics %s are not numbers and are left out of the "
            "reply (Message-API MetricRecords hold int and float only)",
            source,
            sorted(dropped),
        )
    return kept


def _check_status(code: Code, message: str, kind: str) -> None:
    if code != Code.OK:
        raise ProtocolError(
            f"the client's {kind} returned status {code.name}: {message}"
        )


def _translate_reply(msg: Message, reply: Message, context: Context) -> Message:
    """Turn a legacy ``fitres.*`` / ``evaluateres.*`` reply into the new layout."""
    if reply.has_error():
        return reply
    content = reply.content
    if msg.metadata.message_type == "train":
        fitres = recorddict_to_fitres(content, keep_input=True)
        _check_status(fitres.status.code, fitres.status.message, "fit")
        values = parameters_to_ndarrays(fitres.parameters)
        names = list(msg.content.array_records[protocol.ARRAYS_KEY].keys())
        if len(values) != len(names):
            raise ProtocolError(
                f"the client's fit returned {len(values)} arrays for a model of "
                f"{len(names)} ({names}); return one array per parameter, in the "
                "order received"
            )
        arrays = array_record(dict(zip(names, values, strict=True)))
        metrics = _numeric_metrics(fitres.metrics, context, "fit")
        metrics[protocol.NUM_EXAMPLES] = int(fitres.num_examples)
        new = RecordDict({protocol.ARRAYS_KEY: arrays, protocol.METRICS_KEY: metrics})
    else:
        evalres = recorddict_to_evaluateres(content)
        _check_status(evalres.status.code, evalres.status.message, "evaluate")
        metrics = _numeric_metrics(evalres.metrics, context, "evaluate")
        metrics["loss"] = float(evalres.loss)
        metrics[protocol.NUM_EXAMPLES] = int(evalres.num_examples)
        new = RecordDict({protocol.METRICS_KEY: metrics})
    return Message(new, reply_to=msg)


def call_with_layout(
    msg: Message, context: Context, call_next: ClientAppCallable
) -> Message:
    """Call the wrapped app, in the legacy layout if it is a legacy app.

    Parameters
    ----------
    msg : flwr.app.Message
        A ``train`` or ``evaluate`` message in either layout (others pass
        through unchanged).
    context : flwr.app.Context
        The node's context (remembers whether the app is a legacy one).
    call_next : callable
        The wrapped ClientApp.

    Returns
    -------
    flwr.app.Message
        The reply, in the Message-API layout (one ArrayRecord ``arrays`` and
        one MetricRecord ``metrics`` with ``num-examples``) whenever the
        request was in that layout.

    Raises
    ------
    ProtocolError
        If a legacy client's reply cannot be translated (a non-OK status, a
        different number of arrays than the model's).
    """
    if not _new_layout(msg):
        return call_next(msg, context)
    kind = _LEGACY_INPUT[msg.metadata.message_type]
    if not _is_legacy(context):
        try:
            return call_next(msg, context)
        except KeyError as err:
            # raised by Flower's legacy handler before the client's fit runs
            if err.args != (f"{kind}.parameters",):
                raise
        context.state[LEGACY_STATE] = ConfigRecord({"legacy": True})
    _add_legacy_input(msg)
    return _translate_reply(msg, call_next(msg, context), context)


def legacy_client_mod(
    msg: Message, context: Context, call_next: ClientAppCallable
) -> Message:
    """Flower mod: let a ``NumPyClient`` / ``Client`` app answer Message-API strategies.

    ``ClientApp(client_fn=client_fn, mods=[legacy_client_mod])`` trains and
    evaluates for Flower's ``flwr.serverapp.strategy.FedAvg`` and fedleak's
    strategies, and answers fedleak's identify query from ``node_config``.
    Message-API apps pass through unchanged. (With secure aggregation use
    :func:`fedleak.clients.secagg_mod`, which includes this.)

    Parameters
    ----------
    msg : flwr.app.Message
        The incoming message.
    context : flwr.app.Context
        The node's context.
    call_next : callable
        The wrapped ClientApp function.

    Returns
    -------
    flwr.app.Message
        The reply, in the layout the server sent.
    """
    if msg.metadata.message_type == protocol.IDENTIFY_MESSAGE_TYPE:
        return identify_reply(msg, context)
    return call_with_layout(msg, context, call_next)
