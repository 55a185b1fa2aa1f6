"""Hand-made Flower messages and a scripted Grid for strategy unit tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.app.error import Error
from flwr.app.metadata import Metadata
from flwr.serverapp import Grid

from fedleak import protocol


def metadata(
    src: int, dst: int = 0, message_type: str = "train", group: str = "1"
) -> Metadata:
    return Metadata(
        run_id=1,
        message_id=f"m-{src}-{dst}-{time.monotonic_ns()}",
        src_node_id=src,
        dst_node_id=dst,
        reply_to_message_id="",
        group_id=group,
        created_at=time.time(),
        ttl=3600.0,
        message_type=message_type,
    )


def reply(
    src: int,
    arrays: dict[str, np.ndarray] | None = None,
    metrics: dict[str, int | float] | None = None,
    message_type: str = "train",
) -> Message:
    """A reply from node ``src`` with one ArrayRecord and one MetricRecord."""
    content = RecordDict()
    if arrays is not None:
        content[protocol.ARRAYS_KEY] = ArrayRecord(
            {k: Array(v) for k, v in arrays.items()}
        )
    content[protocol.METRICS_KEY] = MetricRecord(metrics or {protocol.NUM_EXAMPLES: 1})
    return Message(content, metadata=metadata(src, message_type=message_type))


def error_reply(src: int, reason: str = "boom") -> Message:
    return Message(metadata=metadata(src), error=Error(code=2, reason=reason))


class _ScriptedGrid(Grid):
    """The parts of the Grid API the strategies never call in these tests."""

    def set_run(self, run_id: int) -> None:  # type: ignore[override]
        pass

    @property
    def run(self):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # type: ignore[no-untyped-def]
        return Message(
            content,
            dst_node_id=dst_node_id,
            message_type=message_type,
            group_id=group_id,
        )

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def pull_messages(self, message_ids):  # type: ignore[no-untyped-def]
        raise NotImplementedError


class FakeGrid(_ScriptedGrid):
    """A Grid whose nodes answer the identify query from a partition map.

    ``appear_after`` makes ``get_node_ids`` return no node for that many calls
    (the start-up race); ``no_identity`` lists nodes whose identify reply is
    an error (a ClientApp without the handler).
    """

    def __init__(
        self,
        partitions: dict[int, int],
        *,
        appear_after: int = 0,
        no_identity: Iterable[int] = (),
        on_send: Callable[[list[Message]], list[Message]] | None = None,
    ) -> None:
        self.partitions = partitions
        self.appear_after = appear_after
        self.no_identity = set(no_identity)
        self.on_send = on_send
        self.sent: list[Message] = []
        self.calls = 0

    def get_node_ids(self) -> list[int]:
        self.calls += 1
        if self.calls <= self.appear_after:
            return []
        return list(self.partitions)

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        messages = list(messages)
        self.sent.extend(messages)
        out = []
        for message in messages:
            node = message.metadata.dst_node_id
            if message.metadata.message_type == protocol.IDENTIFY_MESSAGE_TYPE:
                if node in self.no_identity:
                    out.append(error_reply(node, "No query function registered"))
                else:
                    record = MetricRecord(
                        {protocol.PARTITION_ID: self.partitions[node]}
                    )
                    out.append(
                        Message(
                            RecordDict({protocol.IDENTITY_RECORD: record}),
                            metadata=metadata(
                                node, message_type=protocol.IDENTIFY_MESSAGE_TYPE
                            ),
                        )
                    )
        if self.on_send is not None:
            out.extend(self.on_send(messages))
        return out


class LocalGrid(_ScriptedGrid):
    """An in-process federation: every message is handled by a real ClientApp.

    Each node keeps its own ``Context`` across messages (as in Flower), and a
    ClientApp exception becomes an error reply (as Flower's runtime does).
    ``drop`` maps a node id to a predicate on the message: when it returns True
    the node does not reply at all (a crash or a timeout).
    """

    def __init__(self, app, partitions: dict[int, int], drop=None) -> None:  # type: ignore[no-untyped-def]
        from flwr.app import Context

        self.app = app
        self.partitions = partitions
        self.drop = drop or {}
        self.contexts = {
            node: Context(
                run_id=1,
                node_id=node,
                node_config={"partition-id": p, "num-partitions": len(partitions)},
                state=RecordDict(),
                run_config={},
            )
            for node, p in partitions.items()
        }
        self.sent: list[Message] = []

    def get_node_ids(self) -> list[int]:
        return list(self.partitions)

    def send_and_receive(self, messages, *, timeout=None):  # type: ignore[no-untyped-def]
        out = []
        for message in messages:
            self.sent.append(message)
            node = message.metadata.dst_node_id
            predicate = self.drop.get(node)
            if predicate is not None and predicate(message):
                continue
            try:
                out.append(self.app(message, self.contexts[node]))
            except Exception as err:
                out.append(
                    Message(
                        metadata=metadata(
                            node, message_type=message.metadata.message_type
                        ),
                        error=Error(code=2, reason=f"{type(err).__name__}: {err}"),
                    )
                )
        return out
