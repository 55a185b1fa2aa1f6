"""The unmask stage asks each group's quorum first, the others only if needed."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest
from fedleak.clients.secagg import make_secagg_mod
from fedleak.strategies import SecureAggregation
from flower_fakes import LocalGrid
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import FedAvg

from fedleak.errors import ConfigError
from fedleak.secagg import FixedPoint, ProtocolSettings
from fedleak.secagg.client import ClientGuards, ClientSession
from fedleak.secagg.constants import RECORD, Key, Mode, Stage
from fedleak.secagg.server import UNMASK_SPARE, AggregationRound, ServerSession

pytestmark = pytest.mark.usefixtures("task_identity")

LENGTH = 50
FIXED = FixedPoint(clip=4.0, scale=2.0**16)


class Federation:
    """One round of ``n`` in-process clients, uploads in; unmask left to the test."""

    def __init__(
        self, n: int, mode: Mode = "double-masking", silent: Iterable[int] = ()
    ):
        self.server = ServerSession(ProtocolSettings(mode=mode), seed=0)
        guards = ClientGuards(accept_thesis=True)
        rng = np.random.default_rng(n)
        self.clients = {
            i: ClientSession.start(i, guards, rng=rng) for i in range(100, 100 + n)
        }
        for i, client in self.clients.items():
            self.server.add_advertisement(i, client.advertise_reply())
        self.round: AggregationRound = self.server.begin_round(
            self.clients, length=LENGTH, modulus_bits=32
        )
        data = np.random.default_rng(7)
        self.inputs = {i: data.uniform(-1, 1, LENGTH) for i in self.clients}
        self.uploaded = [i for i in self.clients if i not in set(silent)]
        for i, request in self.round.upload_requests().items():
            if i in self.uploaded:
                plan = self.clients[i].plan_upload(request)
                words, _ = FIXED.encode(self.inputs[i])
                self.round.add_upload(i, self.clients[i].upload(plan, words, rng=rng))
        self.round.close()

    def answer(self, requests: dict[int, dict], silent: Iterable[int] = ()) -> None:
        for node, request in requests.items():
            if node not in set(silent):
                self.round.add_unmask(node, self.clients[node].unmask(request))

    def total(self) -> np.ndarray:
        (group,) = self.round.finish().groups
        assert group.total is not None, group.failure
        return FIXED.decode(group.total)

    def expected(self) -> np.ndarray:
        return sum(FIXED.decode(FIXED.encode(self.inputs[i])[0]) for i in self.uploaded)


def test_a_group_with_nobody_dropped_asks_t_plus_one_and_a_spare() -> None:
    fed = Federation(10)
    t = ProtocolSettings().shamir_threshold(10)
    quorum = fed.round.unmask_quorum()
    assert sorted(quorum) == sorted(fed.clients)[: t + 1 + UNMASK_SPARE]  # 8 of 10
    fed.answer(quorum)
    assert fed.round.unmask_shortfall() == {}
    np.testing.assert_allclose(fed.total(), fed.expected(), atol=1e-9)
    # the others revealed nothing and still await this round's unmask stage
    for node in sorted(fed.clients)[t + 1 + UNMASK_SPARE :]:
        pending = fed.clients[node].state.pending
        assert pending is not None and not pending.unmasked


def test_the_quorum_unmasks_the_same_sum_as_everyone() -> None:
    everyone = Federation(9)
    everyone.answer(everyone.round.unmask_requests())
    quorum = Federation(9)
    quorum.answer(quorum.round.unmask_quorum(spare=0))
    np.testing.assert_array_equal(quorum.total(), everyone.total())


def test_the_others_are_asked_only_when_too_few_of_the_quorum_answer() -> None:
    fed = Federation(10)
    quorum = fed.round.unmask_quorum()
    fed.answer(quorum, silent=sorted(quorum)[:2])  # one more than the spare
    rest = fed.round.unmask_shortfall()
    assert sorted(rest) == sorted(set(fed.clients) - set(quorum))
    fed.answer(rest)
    assert fed.round.unmask_shortfall() == {}  # everyone was asked
    np.testing.assert_allclose(fed.total(), fed.expected(), atol=1e-9)

    spared = Federation(10)
    quorum = spared.round.unmask_quorum()
    spared.answer(quorum, silent=sorted(quorum)[:1])  # the spare covers one
    assert spared.round.unmask_shortfall() == {}
    np.testing.assert_allclose(spared.total(), spared.expected(), atol=1e-9)


@pytest.mark.parametrize("mode", ["double-masking", "thesis"])
def test_every_online_member_is_asked_where_members_dropped(mode: Mode) -> None:
    fed = Federation(10, mode, silent=[104])
    quorum = fed.round.unmask_quorum()
    assert sorted(quorum) == [i for i in sorted(fed.clients) if i != 104]
    assert all(request[Key.STAGE] == Stage.UNMASK for request in quorum.values())
    fed.answer(quorum)
    np.testing.assert_allclose(fed.total(), fed.expected(), atol=1e-9)


def test_thesis_mode_without_dropouts_needs_no_unmask_stage() -> None:
    fed = Federation(6, "thesis")
    assert fed.round.unmask_quorum() == {} == fed.round.unmask_shortfall()
    np.testing.assert_allclose(fed.total(), fed.expected(), atol=1e-9)


@pytest.mark.parametrize("spare", [-1, True, 1.0])
def test_the_spare_is_checked(spare: object) -> None:
    with pytest.raises(ConfigError, match=r"^spare must be an integer >= 0, got "):
        Federation(6).round.unmask_quorum(spare=spare)  # type: ignore[arg-type]


# ------------------------------------------------------------- the strategy
NODES = {7000 + 11 * p: p for p in range(10)}


def app() -> ClientApp:
    client = ClientApp(mods=[make_secagg_mod()])

    @client.train()
    def train(msg: Message, context: Context) -> Message:
        p = int(context.node_config["partition-id"])
        update = ArrayRecord({"w": Array(np.full(4, 0.01 * p, dtype=np.float32))})
        metrics = MetricRecord({"num-examples": 1})
        return Message(RecordDict({"arrays": update, "metrics": metrics}), reply_to=msg)

    return client


def unmask_requests_sent(grid: LocalGrid) -> list[int]:
    return [
        m.metadata.dst_node_id
        for m in grid.sent
        if isinstance(m.content.get(RECORD), ConfigRecord)
        and m.content[RECORD].get(Key.STAGE) == Stage.UNMASK
    ]


@pytest.mark.parametrize(("silent", "exchanges", "asked"), [(0, 3, 8), (2, 4, 10)])
def test_the_strategy_asks_the_quorum_then_the_rest(
    silent: int, exchanges: int, asked: int
) -> None:
    quorum = sorted(NODES)[: ProtocolSettings().shamir_threshold(10) + 2]
    mute = set(quorum[:silent])
    grid = LocalGrid(
        app(),
        NODES,
        drop={
            n: (lambda m: m.content[RECORD].get(Key.STAGE) == Stage.UNMASK)
            for n in mute
        },
    )
    strategy = SecureAggregation(FedAvg(min_available_nodes=10), max_weight=1)
    zeros = ArrayRecord({"w": Array(np.zeros(4, dtype=np.float32))})
    messages = list(strategy.configure_train(1, zeros, ConfigRecord(), grid))
    arrays, metrics = strategy.aggregate_train(1, grid.send_and_receive(messages))
    assert arrays is not None and metrics["secagg-exchanges"] == exchanges
    assert len(unmask_requests_sent(grid)) == asked
    mean = np.mean([0.01 * p for p in range(10)])
    np.testing.assert_allclose(arrays["w"].numpy(), np.full(4, mean), atol=1e-5)
