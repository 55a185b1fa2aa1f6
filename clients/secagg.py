"""Client side of fedleak's secure aggregation, as a Flower mod.

``ClientApp(mods=[secagg_mod])`` makes any unchanged ClientApp train function
take part in :class:`fedleak.strategies.SecureAggregation`. The protocol is
:mod:`fedleak.secagg`'s :class:`~fedleak.secagg.client.ClientSession`; this
module only carries its records. A mod cannot add message types, so the
protocol rides on plain ``train`` messages carrying a
:data:`~fedleak.secagg.constants.RECORD` ConfigRecord; messages without it
pass through untouched.

- ``advertise``: a fresh X25519 key pair (OS CSPRNG); the secret stays in
  ``Context.state``, the public key goes to the server. The train function is
  not called.
- ``upload``: the request is checked against the client's guards *before*
  training (a refusal is replied by name and the train function is not
  called); then the train function runs as usual and its reply (one
  ArrayRecord, one MetricRecord) becomes one vector -- arrays in the server's
  layout, the chosen metrics, the weight and the count of clipped values --
  fixed-point encoded, weighted (``n_k`` for averages) and masked. Nothing
  else leaves the node. A reply that sits the round out (``num-examples`` 0
  and :data:`fedleak.protocol.ABSTAINED` = 1: a client that has not joined
  yet) uploads a masked zero vector of weight 0: it stays in its group and
  the sum is that of the others.
- ``unmask``: the shares for online peers and the masks shared with dropped
  ones (never both for one peer, once per round).

Flower's legacy apps (``ClientApp(client_fn=...)`` around a ``NumPyClient`` or
``Client``) take part unchanged: every ``train`` and ``evaluate`` message is
passed on in the layout the app reads (:mod:`fedleak.clients.legacy`), and
the mod answers fedleak's identify query for them from ``node_config``.

Once per node the mod warns when values were clipped to ``[-clip, clip]``
(with the count and this client's largest value, which stays in its log) and
names the train metrics that are not aggregated (not in the server's
``metric_names``).

The client's guards (:class:`~fedleak.secagg.client.ClientGuards`: floors on
group size and online members, default 3; thesis mode opt-in) are a setting
of the mod, :func:`make_secagg_mod`; no message can lower them.

The session lives in ``Context.state`` as an explicitly serialised record
(:meth:`fedleak.secagg.client.ClientState.to_record`), holding one session
and its pending round: a request for another session or round is refused by
name, and the server re-keys a node whose upload did not count. Flower's
simulation engine may run a node's next message on another actor while a
late one still runs, and writes back whichever state finishes last; a stale
write can roll the session's last round back and let a replayed upload
request through. In double-masking mode the replayed upload carries a fresh
self-mask whose shares the peers (which already unmasked that round) do not
reveal; in thesis mode it would leak the difference of the two inputs. The
deployment engine runs one message per node at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import WARNING

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.common import log

from fedleak import protocol
from fedleak.errors import ProtocolError
from fedleak.secagg import FixedPoint
from fedleak.secagg.client import (
    ClientGuards,
    ClientSession,
    ClientState,
    Refused,
    UploadPlan,
    refusal_reply,
)
from fedleak.secagg.constants import (
    ENCODING_RECORD,
    RECORD,
    STATE_RECORD,
    Key,
    Refusal,
    Stage,
)
from fedleak.secagg.layout import RAW_SLOTS, VectorLayout
from fedleak.secagg.records import Record
from fedleak.training import arrays_from_records

from .legacy import call_with_layout, identify_reply, record_of

__all__ = [
    "QUANTISATION_STATE",
    "load_session",
    "make_secagg_mod",
    "run_secagg_stage",
    "save_session",
    "secagg_mod",
]

QUANTISATION_STATE = "fedleak.secagg.quantisation"
"""``context.state`` key of the current upload's fixed point, written before the
wrapped ClientApp trains: ``round``, ``scale``, ``clip``, ``group-size`` and
``weighted`` (a client reading its own contribution out of the aggregate,
e.g. :class:`fedleak.clients.membership.EmbeddingMembershipAdversary`,
bounds the rounding of the decoded sum with them); removed when it returns."""

NOTES_STATE = "fedleak.secagg.notes"
"""``context.state`` record of what this node already warned about (clipping,
metrics left out), so each warning appears once per node and run."""

#: ``encode(plan) -> words``: the vector to mask for an accepted upload plan,
#: or a Message (e.g. the train function's error reply) to return as is.
EncodeFn = Callable[[UploadPlan], "np.ndarray | Message"]


def load_session(
    context: Context, own_id: int, guards: ClientGuards
) -> ClientSession | None:
    """Return the node's session from ``context.state``, or None if it has none."""
    record = record_of(context.state, STATE_RECORD, ConfigRecord)
    if record is None:
        return None
    return ClientSession(own_id, ClientState.from_record(dict(record)), guards)


def save_session(context: Context, session: ClientSession) -> None:
    """Write the session's state to ``context.state`` (explicitly serialised)."""
    context.state[STATE_RECORD] = ConfigRecord(dict(session.state.to_record()))


def _reply(msg: Message, record: Record) -> Message:
    return Message(RecordDict({RECORD: ConfigRecord(dict(record))}), reply_to=msg)


def run_secagg_stage(
    msg: Message, context: Context, guards: ClientGuards, encode: EncodeFn
) -> Message:
    """Run one protocol stage for a message carrying a :data:`RECORD`.

    Shared by the model mod and the sketch ClientApp: the engine's session
    lives in ``context.state``; ``encode`` produces the vector to mask once the
    upload request passed the guards.

    Parameters
    ----------
    msg : flwr.app.Message
        The request.
    context : flwr.app.Context
        The node's context.
    guards : ClientGuards
        The client's own floors.
    encode : callable
        ``encode(plan)``: the words to mask, or a Message to return as is.

    Returns
    -------
    flwr.app.Message
        The protocol reply, a named refusal, or what ``encode`` returned.

    Raises
    ------
    ProtocolError
        On a malformed request (Flower turns it into an error reply).
    """
    record = record_of(msg.content, RECORD, ConfigRecord)
    if record is None:
        raise ProtocolError(f"the message carries no {RECORD!r} ConfigRecord")
    request = dict(record)
    stage = request.get(Key.STAGE)
    own = msg.metadata.dst_node_id
    try:
        if stage == Stage.ADVERTISE:
            session = ClientSession.start(own, guards)
            save_session(context, session)
            return _reply(msg, session.advertise_reply())
        if stage not in (Stage.UPLOAD, Stage.UNMASK):
            raise ProtocolError(f"unknown secure-aggregation stage {stage!r}")
        loaded = load_session(context, own, guards)
        if loaded is None:
            raise Refused(
                Refusal.UNKNOWN_SESSION,
                "this node has no secure-aggregation session (its state was "
                "lost); advertise again",
            )
        if stage == Stage.UPLOAD:
            plan = loaded.plan_upload(request)
            vector = encode(plan)
            if isinstance(vector, Message):
                return vector
            answer = loaded.upload(plan, vector)
        else:
            answer = loaded.unmask(request)
        save_session(context, loaded)
        return _reply(msg, answer)
    except Refused as refused:
        return _reply(msg, refusal_reply(str(stage), refused))


def _float(record: ConfigRecord, key: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProtocolError(f"secure-aggregation encoding lacks number {key!r}")
    return float(value)


class _Encoding:
    """How the server asked to encode the train reply, checked before training."""

    def __init__(self, record: ConfigRecord, plan: UploadPlan) -> None:
        self.layout = VectorLayout.from_config(record)
        self.weighted = record.get("weighted") is True
        if record.get(Key.MODULUS_BITS) != plan.modulus_bits:
            raise ProtocolError("the encoding's word size differs from the protocol's")
        self.fixed = FixedPoint(
            _float(record, "clip"), _float(record, "scale"), plan.modulus_bits
        )
        self.max_weight = _float(record, "max-weight")
        self.clipped = 0
        self.largest = 0.0  # the largest |value| of the reply, when any was clipped
        self.kept_metrics: list[str] = []
        if self.layout.length != plan.length:
            raise ProtocolError(
                f"the layout has {self.layout.length} words, the protocol {plan.length}"
            )
        # a server must not make the sum overflow: check before any work
        self.fixed.check_capacity(
            plan.group_size, self.max_weight if self.weighted else 1.0
        )

    def encode(self, reply: Message) -> np.ndarray:
        """Turn the train function's reply into the encoded (unmasked) vector."""
        content = reply.content
        array_records = [r for r in content.values() if isinstance(r, ArrayRecord)]
        metric_records = [r for r in content.values() if isinstance(r, MetricRecord)]
        if len(array_records) != 1 or len(metric_records) != 1:
            raise ProtocolError(
                "secure aggregation needs a train reply with exactly one ArrayRecord "
                "and one MetricRecord"
            )
        arrays = arrays_from_records(array_records[0])
        metrics = metric_records[0]
        if _abstains(metrics):
            return self._abstention()
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
        layout = self.layout
        # one float64 vector (arrays, then metrics) and one vector of words
        # (fixed point, then the raw slots): no intermediate copies
        plain = np.empty(layout.fixed_length, dtype=np.float64)
        layout.flatten(
            arrays, fill_missing=not self.weighted, out=plain[: layout.model_length]
        )
        for k, name in enumerate(layout.metric_names):
            value = metrics.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ProtocolError(f"metric {name!r} to aggregate securely is missing")
            plain[layout.model_length + k] = float(value)
        words = np.empty(layout.length, dtype=self.fixed.dtype)
        _, clipped = self.fixed.encode(plain, weight, out=words[: layout.fixed_length])
        self.clipped = clipped
        self.largest = float(np.max(np.abs(plain))) if clipped else 0.0
        self.kept_metrics = sorted(
            k
            for k in metrics
            if k != protocol.NUM_EXAMPLES and k not in self.layout.metric_names
        )
        raw = np.array([int(weight), clipped], dtype=np.int64).astype(self.fixed.dtype)
        assert raw.size == len(RAW_SLOTS)
        words[layout.fixed_length :] = raw
        return words

    def _abstention(self) -> np.ndarray:
        """Return the vector of a client that sits the round out: zeros, weight 0.

        It stays in its masking group (its masks cancel as usual), adds
        nothing to the sum and 0 to the weight slot, so the decoded sum and
        weight are those of the other members (a weighted mean over them;
        for a plain sum the weight slot counts the members that took part).
        """
        self.clipped, self.largest, self.kept_metrics = 0, 0.0, []
        return np.zeros(self.layout.length, dtype=self.fixed.dtype)


def _abstains(metrics: MetricRecord) -> bool:
    """Whether a train reply sits the round out (:data:`protocol.ABSTAINED`).

    Raises
    ------
    ProtocolError
        If it sets the flag with a weight other than 0, or the flag to a value
        other than 0 or 1.
    """
    flag = metrics.get(protocol.ABSTAINED)
    if flag is None or (flag == 0 and not isinstance(flag, bool)):
        return False
    if isinstance(flag, bool) or flag != 1:
        raise ProtocolError(
            f"{protocol.ABSTAINED}={flag!r}; expected 1 (sits the round out) or 0"
        )
    n_k = metrics.get(protocol.NUM_EXAMPLES)
    if isinstance(n_k, bool) or n_k != 0:
        raise ProtocolError(
            f"an abstaining train reply ({protocol.ABSTAINED}=1) must have "
            f"{protocol.NUM_EXAMPLES}=0, got {n_k!r}"
        )
    return True


def _warn_once(context: Context, encoding: _Encoding) -> None:
    """Name, once per node, values clipped and metrics that stay on the node."""
    notes = record_of(context.state, NOTES_STATE, ConfigRecord)
    if notes is None:
        notes = context.state[NOTES_STATE] = ConfigRecord()
    if encoding.clipped and not notes.get("clipped"):
        notes["clipped"] = True
        log(
            WARNING,
            "fedleak secure aggregation: %d value(s) of this client's update lie "
            "outside [-%g, %g] and were clipped (largest |value| %.6g); the "
            "aggregate differs from the plain mean: raise SecureAggregation(clip=...) "
            "above %.3g",
            encoding.clipped,
            encoding.fixed.clip,
            encoding.fixed.clip,
            encoding.largest,
            encoding.largest,
        )
    if encoding.kept_metrics and not notes.get("metrics"):
        notes["metrics"] = True
        log(
            WARNING,
            "fedleak secure aggregation: the train metrics %s are not aggregated "
            "(not in SecureAggregation(metric_names=...)) and never leave this node",
            encoding.kept_metrics,
        )


def make_secagg_mod(
    *, min_group: int = 3, min_online: int = 3, accept_thesis: bool = False
) -> Mod:
    """Build the secure-aggregation client mod with the client's own guards.

    Parameters
    ----------
    min_group : int, default=3
        Fewest group members this client masks with (>= 3).
    min_online : int, default=3
        Fewest online members for which it answers an unmask request (>= 3;
        in double-masking mode also at least the threshold plus one).
    accept_thesis : bool, default=False
        Take part in ``mode="thesis"`` (the seed's scheme, which leaks a
        straggler's input to a server that follows the protocol). Without it
        the client refuses thesis mode (``mode-refused``), so a server cannot
        downgrade it.

    Returns
    -------
    Mod
        A Flower client mod.

    Raises
    ------
    ConfigError
        If a floor is below 3.
    """
    guards = ClientGuards(
        min_group=min_group, min_online=min_online, accept_thesis=accept_thesis
    )

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type == protocol.IDENTIFY_MESSAGE_TYPE:
            # reached only in legacy (client_fn) apps, whose mods see every message
            return identify_reply(msg, context)
        if msg.metadata.message_type != "train" or (
            record_of(msg.content, RECORD, ConfigRecord) is None
        ):
            return call_with_layout(msg, context, call_next)

        def encode(plan: UploadPlan) -> np.ndarray | Message:
            record = record_of(msg.content, ENCODING_RECORD, ConfigRecord)
            if record is None:
                raise ProtocolError("upload request lacks its encoding record")
            encoding = _Encoding(record, plan)
            del msg.content[RECORD]
            del msg.content[ENCODING_RECORD]
            context.state[QUANTISATION_STATE] = ConfigRecord(
                {
                    "round": plan.round,
                    "scale": encoding.fixed.scale,
                    "clip": encoding.fixed.clip,
                    "group-size": plan.group_size,
                    "weighted": encoding.weighted,
                }
            )
            try:
                reply = call_with_layout(msg, context, call_next)
            finally:
                del context.state[QUANTISATION_STATE]
            if reply.has_error():
                return reply
            words = encoding.encode(reply)
            _warn_once(context, encoding)
            return words

        return run_secagg_stage(msg, context, guards, encode)

    mod.__doc__ = (
        f"fedleak's secure-aggregation client mod (min_group={min_group}, "
        f"min_online={min_online}, accept_thesis={accept_thesis})."
    )
    return mod


def secagg_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower client mod running fedleak's secure-aggregation client (default guards).

    Floors of 3 group members and 3 online members; double-masking mode only
    (thesis mode needs ``make_secagg_mod(accept_thesis=True)``).

    Parameters
    ----------
    msg : flwr.app.Message
        The incoming message.
    context : flwr.app.Context
        The node's context (its ``state`` keeps the session).
    call_next : callable
        The wrapped ClientApp function.

    Returns
    -------
    flwr.app.Message
        The protocol reply or named refusal, or the unchanged reply of
        ``call_next`` for messages that are not part of the protocol.

    Raises
    ------
    ProtocolError
        On a malformed protocol message (Flower turns it into an error reply).
    """
    return _DEFAULT_MOD(msg, context, call_next)


_DEFAULT_MOD = make_secagg_mod()
