"""Round snapshots: every finished round's metrics, each converted once."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord
from flwr.serverapp.strategy import FedAvg, Result

from fedleak.runtime import checkpoint
from fedleak.runtime.checkpoint import RoundCheckpoints, load_checkpoint


class _Noise:
    def to_json(self) -> None:
        return None


def _round(result: Result, r: int) -> None:
    result.train_metrics_clientapp[r] = MetricRecord({"loss": 1.0 / r, "n": r})
    result.evaluate_metrics_clientapp[r] = MetricRecord({"acc": r / 100})


def test_each_snapshot_holds_every_round_so_far_converting_each_round_once(
    tmp_path, monkeypatch
):
    calls: list[object] = []
    plain = checkpoint._plain
    monkeypatch.setattr(
        checkpoint, "_plain", lambda record: calls.append(record) or plain(record)
    )
    checkpoints = RoundCheckpoints(
        tmp_path, every=0, last_round=50, strategy=FedAvg(), noise=_Noise(),
        clients=None, saved_round=0,
    )  # fmt: skip
    model = ArrayRecord({"w": Array(np.arange(3, dtype=np.float32))})
    result = Result()
    for r in range(1, 51):
        _round(result, r)
        checkpoints.after_round(r, model, result)
        assert checkpoints.pending is not None
        snapshot = checkpoints.pending[0]
        assert snapshot.round == r
        assert sorted(snapshot.train_metrics) == list(range(1, r + 1))
        assert snapshot.train_metrics[r] == {"loss": 1.0 / r, "n": r}
        assert snapshot.evaluate_metrics[1] == {"acc": 0.01}
    assert len(calls) == 2 * 50  # train and evaluate, once per round
    # a snapshot is not changed by later rounds
    early = checkpoints.pending[0]
    _round(result, 51)
    assert 51 not in early.train_metrics
    # the last round's snapshot is written whole at the end
    checkpoints.last_round = 51
    checkpoints.after_round(51, model, result)
    saved = load_checkpoint(tmp_path)
    assert saved.round == 51
    assert sorted(saved.train_metrics) == list(range(1, 52))
    assert saved.train_metrics[7] == {"loss": 1.0 / 7, "n": 7}
