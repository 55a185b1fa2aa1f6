"""Tests of the embedding models of seed 000 Ch. 7.2.1 (TextCNN, TextGRU)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.errors import ConfigError
from fedleak.models import (
    MODEL_NAMES,
    PADDING_IDX,
    TEXT_MODEL_NAMES,
    ImageCNN,
    TextCNN,
    TextGRU,
    build_model,
    build_text_model,
)

torch.set_num_threads(1)


def _ids(n: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (n, length), generator=g)
    ids[:, length // 2 :] = PADDING_IDX  # right padding, as encode() produces
    return ids


def test_text_cnn_has_the_thesis_architecture() -> None:
    model = TextCNN(1000, 2)
    assert model.embedding.embedding_dim == 320
    convs = [c for c in model.convs if isinstance(c, torch.nn.Conv1d)]
    assert [c.kernel_size[0] for c in convs] == [3, 4, 5]
    assert all(c.out_channels == 100 for c in convs)
    linears = [m for m in model.classifier.children() if isinstance(m, torch.nn.Linear)]
    assert [m.out_features for m in linears] == [128, 2]
    single = next(TextCNN(1000, 2, hidden=None).classifier.children())
    assert isinstance(single, torch.nn.Linear) and single.in_features == 300
    assert TextGRU(1000, 5).embedding.embedding_dim == 100


@pytest.mark.parametrize("name", TEXT_MODEL_NAMES)
def test_padding_row_never_gets_a_gradient(name: str) -> None:
    model = build_text_model(name, 50, 3, seed=0, embedding_dim=8, dropout=0.3)
    embedding = model.get_submodule("embedding")
    assert isinstance(embedding, torch.nn.Embedding)
    assert embedding.weight[PADDING_IDX].abs().sum() == 0
    ids = _ids(6, 12, 50, seed=1)
    loss = torch.nn.functional.cross_entropy(model(ids), torch.tensor([0, 1, 2] * 2))
    loss.backward()  # type: ignore[no-untyped-call]
    grad = embedding.weight.grad
    assert grad is not None
    assert grad[PADDING_IDX].abs().sum() == 0
    used = set(torch.unique(ids).tolist()) - {PADDING_IDX}
    changed = set(torch.nonzero(grad.abs().sum(dim=1)).flatten().tolist())
    assert changed == used  # exactly the tokens in the batch (Ch. 7.1.2)


@settings(max_examples=15, deadline=None)
@given(length=st.integers(1, 9), pad=st.integers(0, 5))
def test_gru_output_ignores_trailing_padding(length: int, pad: int) -> None:
    model = build_text_model("text-gru", 30, 2, seed=0, embedding_dim=4).eval()
    ids = torch.arange(1, length + 1).unsqueeze(0) % 29 + 1
    padded = torch.cat([ids, torch.zeros(1, pad, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(ids), model(padded))


def test_cnn_accepts_sequences_shorter_than_its_windows() -> None:
    model = build_text_model("text-cnn", 30, 2, seed=0, embedding_dim=4)
    assert model(torch.tensor([[3, 4]])).shape == (1, 2)


def test_build_model_dispatches_text_names_and_keeps_image_models() -> None:
    assert set(TEXT_MODEL_NAMES) < set(MODEL_NAMES)
    assert {"cnn", "mlp"} < set(MODEL_NAMES)
    m = build_model("text-cnn", (20,), 2, seed=0, vocab_size=40, dropout=0.5)
    assert isinstance(m, TextCNN) and m.dropout.p == 0.5
    assert isinstance(build_model("cnn", (1, 8, 8), 10, seed=0), ImageCNN)
    with pytest.raises(ConfigError, match="vocab_size"):
        build_model("text-gru", (1, 8, 8), 2)
    with pytest.raises(ConfigError, match="dropout"):
        build_text_model("text-cnn", 10, 2, dropout=1.0)
    with pytest.raises(ConfigError, match="name must be one of 'text-cnn'"):
        build_text_model("cnn", 10, 2)


def test_seeded_text_models_are_reproducible() -> None:
    a = build_text_model("text-gru", 20, 2, seed=7, embedding_dim=4)
    b = build_text_model("text-gru", 20, 2, seed=7, embedding_dim=4)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb)
