"""Tests of the client-side defenses of seed 000 Ch. 7.3 (fedleak.defenses)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from opacus.layers import DPGRU

from fedleak.data.text import FIRST_WORD_ID, UNK_ID
from fedleak.defenses import (
    EMBEDDING_KEY,
    ClientDefenses,
    make_dp_compatible,
    participant_level_epsilon,
    private_batch_gradient,
    record_level_epsilon,
    restrict_inputs,
    share_random_fraction,
    share_top_fraction,
    zero_rows_outside_vocabulary,
)
from fedleak.errors import ConfigError
from fedleak.models import build_text_model
from fedleak.privacy.accounting import sgm_epsilon

torch.set_num_threads(1)
VOCAB = 40
SHARE_CASES = given(
    fraction=st.floats(0.01, 1.0),
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
"""A fraction and an update of up to four arrays, drawn from a seed."""


def _batch(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, VOCAB, (n, 10), generator=g)
    x[:, 7:] = 0
    return x, torch.arange(n) % 2


def _flat_norm(update: dict[str, np.ndarray]) -> float:
    return math.sqrt(
        sum(float((v.astype(np.float64) ** 2).sum()) for v in update.values())
    )


@settings(max_examples=30, deadline=None)
@SHARE_CASES
def test_share_top_fraction_keeps_exactly_the_k_largest(
    fraction: float, sizes: list[int], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    update = {
        f"a{i}": rng.normal(size=s).astype(np.float32) for i, s in enumerate(sizes)
    }
    out = share_top_fraction(update, fraction)
    flat_in = np.concatenate([update[k] for k in update])
    flat_out = np.concatenate([out[k] for k in update])
    k = math.ceil(fraction * flat_in.size)
    assert np.count_nonzero(flat_out) == k
    kept = np.flatnonzero(flat_out)
    np.testing.assert_array_equal(flat_out[kept], flat_in[kept])
    dropped = np.setdiff1d(np.arange(flat_in.size), kept)
    if dropped.size:
        assert np.abs(flat_in[dropped]).max() <= np.abs(flat_in[kept]).min()
    assert all(out[n].shape == update[n].shape for n in update)


def test_share_top_fraction_rejects_bad_fractions() -> None:
    with pytest.raises(
        ConfigError, match=r"share fraction must lie in \(0, 1\], got 0.0"
    ):
        share_top_fraction({"a": np.ones(3)}, 0.0)


@pytest.mark.parametrize(
    "share",
    [
        lambda u, f: share_top_fraction(u, f),
        lambda u, f: share_random_fraction(u, f, seed=3),
    ],
    ids=["top", "random"],
)
def test_sharing_everything_or_nothing_returns_copies(share) -> None:
    update = {"a": np.arange(4.0, dtype=np.float32), "b": np.ones((2, 2))}
    out = share(update, 1.0)
    for name, value in update.items():
        np.testing.assert_array_equal(out[name], value)
        assert out[name].dtype == value.dtype
        assert not np.shares_memory(out[name], value)  # a copy, not a view
    assert share({}, 0.5) == {}  # an empty update shares nothing, whatever the fraction


@pytest.mark.parametrize(("seed", "fraction"), [(36, 0.9), (0, 0.1), (1, 0.5)])
def test_share_top_fraction_keeps_the_top_k_of_a_large_update(
    seed: int, fraction: float
) -> None:
    # thousands of distinct magnitudes: any partition off by one position
    # shows (seed 36 at 90% is a case where selecting around k - 2 differs)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1000, 5000))
    values = (rng.permutation(n) + 1) * rng.choice([-1, 1], size=n)
    out = share_top_fraction({"a": values.astype(np.float64)}, fraction)
    k = math.ceil(fraction * n)
    expected = np.zeros(n, dtype=bool)
    expected[np.argsort(-np.abs(values))[:k]] = True
    np.testing.assert_array_equal(out["a"] != 0, expected)


def test_share_top_fraction_reads_unsigned_magnitudes_without_wrapping() -> None:
    update = {"counts": np.array([0, 200, 1, 0], dtype=np.uint8)}
    out = share_top_fraction(update, 0.25)
    np.testing.assert_array_equal(out["counts"], [0, 200, 0, 0])
    assert out["counts"].dtype == np.uint8


def test_share_top_fraction_keeps_the_single_largest_and_the_dtype() -> None:
    rng = np.random.default_rng(0)
    values = rng.permutation(np.arange(1, 201, dtype=np.float32))
    values[::2] *= -1
    update = {"a": values[:120].reshape(12, 10), "b": values[120:]}
    out = share_top_fraction(update, 0.005)  # k = 1 of 200
    assert out["a"].dtype == out["b"].dtype == np.float32
    flat = np.concatenate([out["a"].ravel(), out["b"]])
    assert np.count_nonzero(flat) == 1
    assert np.abs(flat).max() == 200.0


@settings(max_examples=30, deadline=None)
@SHARE_CASES
def test_share_random_fraction_keeps_exactly_k_coordinates_unchanged(
    fraction: float, sizes: list[int], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    # no zeros in the update: every kept coordinate is visible
    update = {
        f"a{i}": (rng.uniform(1, 2, size=s) * rng.choice([-1, 1], size=s)).astype(
            np.float32
        )
        for i, s in enumerate(sizes)
    }
    out = share_random_fraction(update, fraction, seed=seed)
    flat_in = np.concatenate([update[k] for k in update])
    flat_out = np.concatenate([out[k] for k in update])
    k = math.ceil(fraction * flat_in.size)
    assert np.count_nonzero(flat_out) == k
    kept = np.flatnonzero(flat_out)
    np.testing.assert_array_equal(flat_out[kept], flat_in[kept])
    assert all(out[n].shape == update[n].shape for n in update)
    assert all(out[n].dtype == update[n].dtype for n in update)
    # same seed, same choice; the input is not touched
    again = share_random_fraction(update, fraction, seed=seed)
    assert all(np.array_equal(out[n], again[n]) for n in update)
    assert all(np.count_nonzero(update[n]) == update[n].size for n in update)


def test_share_random_fraction_ignores_magnitudes_and_covers_every_array() -> None:
    """Unlike the top fraction, small coordinates survive as often as large ones."""
    update = {"big": np.full(500, 100.0), "small": np.full(500, 0.01)}
    kept_small = []
    for seed in range(40):
        out = share_random_fraction(update, 0.1, seed=seed)
        assert np.count_nonzero(out["big"]) + np.count_nonzero(out["small"]) == 100
        kept_small.append(np.count_nonzero(out["small"]))
    # hypergeometric: 50 of 100 expected, standard deviation 3.5 per draw
    assert 45 <= np.mean(kept_small) <= 55
    assert len(set(kept_small)) > 5  # the choice moves with the seed
    top = share_top_fraction(update, 0.1)
    assert np.count_nonzero(top["small"]) == 0


def test_share_random_fraction_refuses_bad_fractions_and_a_missing_seed() -> None:
    with pytest.raises(ConfigError, match=r"share fraction must lie in \(0, 1\]"):
        share_random_fraction({"a": np.ones(3)}, 1.5, seed=0)
    with pytest.raises(
        ConfigError, match=r"^a random share selection needs a seed or a generator$"
    ):
        share_random_fraction({"a": np.ones(3)}, 0.5, seed=None)
    # sharing everything draws nothing and needs no seed either way
    whole = share_random_fraction({"a": np.arange(3.0)}, 1.0, seed=None)
    np.testing.assert_array_equal(whole["a"], np.arange(3.0))


def test_client_defenses_choose_the_share_selection() -> None:
    rng = np.random.default_rng(0)
    update = {"a": rng.normal(size=200), "b": rng.normal(size=50)}
    largest = ClientDefenses(share_fraction=0.2)
    assert largest.share_selection == "largest"
    expected = share_top_fraction(update, 0.2)
    got = largest.upload(update)
    assert all(np.array_equal(got[n], expected[n]) for n in update)
    random = ClientDefenses(share_fraction=0.2, share_selection="random")
    expected = share_random_fraction(update, 0.2, seed=7)
    got = random.upload(update, selection_seed=7)
    assert all(np.array_equal(got[n], expected[n]) for n in update)
    with pytest.raises(ConfigError, match="needs a seed"):
        random.upload(update)
    with pytest.raises(ValueError, match="share_selection"):
        ClientDefenses(share_selection="smallest")
    # the setting travels through the message config and back
    assert ClientDefenses.from_config(random.to_config()) == random


def test_random_selection_in_gradient_uses_its_own_seed_not_the_noise() -> None:
    model = build_text_model("text-cnn", VOCAB, 2, seed=0, embedding_dim=4)
    x, y = _batch(8)
    defenses = ClientDefenses(share_fraction=0.3, share_selection="random")
    a = defenses.gradient(model, x, y, seed=0, selection_seed=1)
    b = defenses.gradient(model, x, y, seed=5, selection_seed=1)  # no DP: same
    c = defenses.gradient(model, x, y, seed=0, selection_seed=2)
    assert all(np.array_equal(a[n], b[n]) for n in a)
    assert any(not np.array_equal(a[n], c[n]) for n in a)
    full = ClientDefenses().gradient(model, x, y, seed=0)
    total = sum(v.size for v in full.values())
    assert sum(np.count_nonzero(v) for v in a.values()) <= math.ceil(0.3 * total)
    for n in a:  # a coordinate is either the gradient's or zero
        kept = a[n] != 0
        np.testing.assert_array_equal(a[n][kept], full[n][kept])


def test_vocabulary_restriction_maps_inputs_and_zeroes_rows() -> None:
    ids = torch.tensor([[0, 1, 2, 5, 6, 39]])
    assert restrict_inputs(ids, 4).tolist() == [[0, 1, 2, 5, UNK_ID, UNK_ID]]
    update = {EMBEDDING_KEY: np.ones((VOCAB, 3)), "fc": np.ones(2)}
    out = zero_rows_outside_vocabulary(update, 4)
    assert (out[EMBEDDING_KEY][: 4 + FIRST_WORD_ID] == 1).all()
    assert (out[EMBEDDING_KEY][4 + FIRST_WORD_ID :] == 0).all()
    assert (out["fc"] == 1).all() and (update[EMBEDDING_KEY] == 1).all()
    with pytest.raises(ConfigError, match="embedding"):
        zero_rows_outside_vocabulary({"fc": np.ones(2)}, 4)


def test_defended_gradient_composes_vocabulary_and_top_fraction() -> None:
    model = build_text_model("text-cnn", VOCAB, 2, seed=0, embedding_dim=4)
    x, y = _batch(8)
    defenses = ClientDefenses(share_fraction=0.1, vocab_top_n=5)
    out = defenses.gradient(model, x, y, seed=0)
    total = sum(v.size for v in out.values())
    assert sum(np.count_nonzero(v) for v in out.values()) <= math.ceil(0.1 * total)
    assert not out[EMBEDDING_KEY][5 + FIRST_WORD_ID :].any()
    assert defenses.active and not ClientDefenses().active


@pytest.mark.parametrize("name", ["text-cnn", "text-gru"])
def test_record_level_clipping_bounds_each_record(name: str) -> None:
    model = build_text_model(name, VOCAB, 2, seed=0, embedding_dim=4)
    for i in range(3):
        x, y = _batch(1, seed=i)
        grads = private_batch_gradient(
            model, x, y, noise_multiplier=0.0, max_grad_norm=0.05, seed=0
        )
        assert _flat_norm(grads) <= 0.05 * (1 + 1e-4)
    x, y = _batch(6)
    grads = private_batch_gradient(
        model, x, y, noise_multiplier=0.0, max_grad_norm=0.05, seed=0
    )
    assert _flat_norm(grads) <= 0.05 * (1 + 1e-4)  # mean of clipped records
    assert set(grads) == {n for n, _ in model.named_parameters()}
    assert isinstance(make_dp_compatible(model), torch.nn.Module)


def test_gru_becomes_opacus_dpgru_with_the_same_parameter_names() -> None:
    model = build_text_model("text-gru", VOCAB, 2, seed=0, embedding_dim=4)
    fixed = make_dp_compatible(model)
    assert isinstance(fixed.gru, DPGRU)
    assert {n for n, _ in fixed.named_parameters()} == {
        n for n, _ in model.named_parameters()
    }


def test_record_level_noise_has_the_configured_std() -> None:
    model = build_text_model("text-cnn", VOCAB, 2, seed=0, embedding_dim=16)
    x, y = _batch(4)
    sigma, clip = 2.0, 0.5
    clean = private_batch_gradient(
        model, x, y, noise_multiplier=0.0, max_grad_norm=clip, seed=1
    )
    noisy = private_batch_gradient(
        model, x, y, noise_multiplier=sigma, max_grad_norm=clip, seed=1
    )
    noise = np.concatenate([(noisy[k] - clean[k]).ravel() for k in clean])
    expected = sigma * clip / x.shape[0]
    assert noise.size > 10_000
    assert abs(noise.mean()) < 5 * expected / math.sqrt(noise.size)
    assert noise.std() == pytest.approx(expected, rel=0.03)
    # the padding row moves too: DP noise covers every coordinate
    assert np.abs(noisy[EMBEDDING_KEY][0]).sum() > 0


def test_epsilons_come_from_the_sampled_gaussian_accountant() -> None:
    eps = record_level_epsilon(
        batch_size=10, num_records=100, steps=50, noise_multiplier=1.0, delta=1e-5
    )
    assert eps == pytest.approx(sgm_epsilon(0.1, 1.0, 50, 1e-5))
    assert eps > record_level_epsilon(
        batch_size=10, num_records=100, steps=50, noise_multiplier=2.0, delta=1e-5
    )
    participant = participant_level_epsilon(
        noise_multiplier=1.0, sampled_clients=2, total_clients=2, rounds=10, delta=1e-5
    )
    assert participant == pytest.approx(sgm_epsilon(1.0, 1.0, 10, 1e-5))
    assert math.isinf(
        participant_level_epsilon(
            noise_multiplier=0.0,
            sampled_clients=1,
            total_clients=2,
            rounds=1,
            delta=0.1,
        )
    )
    with pytest.raises(ConfigError):
        participant_level_epsilon(
            noise_multiplier=1.0,
            sampled_clients=3,
            total_clients=2,
            rounds=1,
            delta=0.1,
        )


def test_client_defenses_validate_their_settings() -> None:
    with pytest.raises(ConfigError, match="share_fraction"):
        ClientDefenses(share_fraction=1.5)
    with pytest.raises(ConfigError, match="vocab_top_n"):
        ClientDefenses(vocab_top_n=0)
    with pytest.raises(ConfigError, match="dp_max_grad_norm"):
        ClientDefenses(dp_max_grad_norm=0.0)
