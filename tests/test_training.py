from __future__ import annotations

import numpy as np
import pytest
import torch

from fedleak.models import build_model
from fedleak.training import (
    batch_gradient,
    evaluate,
    get_arrays,
    native_threads,
    set_arrays,
    train_epochs,
)


def toy(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 8, 8, generator=g)
    y = (x.mean(dim=(1, 2, 3)) > 0.5).long()
    return x, y


def test_batch_gradient_equals_autograd_of_mean_cross_entropy():
    model = build_model("mlp", (1, 8, 8), 2, seed=0)
    x, y = toy(16)
    grads, loss, acc = batch_gradient(model, x, y)
    reference = build_model("mlp", (1, 8, 8), 2, seed=0)
    ref_loss = torch.nn.functional.cross_entropy(reference(x), y)
    ref_grads = torch.autograd.grad(ref_loss, list(reference.parameters()))
    names = [n for n, _ in reference.named_parameters()]
    assert list(grads) == names
    for name, ref in zip(names, ref_grads, strict=True):
        np.testing.assert_allclose(grads[name], ref.numpy(), rtol=1e-5, atol=1e-7)
    assert loss == pytest.approx(ref_loss.item())
    assert 0.0 <= acc <= 1.0


def test_train_epochs_reduces_loss_and_is_reproducible():
    x, y = toy(128)
    runs = []
    for _ in range(2):
        model = build_model("mlp", (1, 8, 8), 2, seed=1)
        before = evaluate(model, x, y).loss
        _, steps = train_epochs(
            model,
            x,
            y,
            epochs=5,
            batch_size=16,
            learning_rate=0.5,
            generator=torch.Generator().manual_seed(3),
        )
        assert steps == 5 * 8
        assert evaluate(model, x, y).loss < before
        runs.append(get_arrays(model))
    for name in runs[0]:
        np.testing.assert_array_equal(runs[0][name], runs[1][name])


def test_set_and_get_arrays_round_trip():
    a = build_model("cnn", (1, 8, 8), 10, seed=0)
    b = build_model("cnn", (1, 8, 8), 10, seed=1)
    set_arrays(b, get_arrays(a))
    for name, value in get_arrays(a).items():
        np.testing.assert_array_equal(get_arrays(b)[name], value)


def _loaded_by_torch(model, arrays):
    state = {k: torch.as_tensor(np.array(v)) for k, v in arrays.items()}
    model.load_state_dict(state, strict=True)
    return get_arrays(model)


def test_set_arrays_copies_what_load_state_dict_loads():
    source = build_model("cnn", (1, 8, 8), 10, seed=0)
    arrays = {k: v.astype(np.float64) * 1.5 for k, v in get_arrays(source).items()}
    fast = build_model("cnn", (1, 8, 8), 10, seed=1)
    set_arrays(fast, arrays)  # float64 into float32 tensors: cast as copy_ does
    expected = _loaded_by_torch(build_model("cnn", (1, 8, 8), 10, seed=2), arrays)
    for name, value in get_arrays(fast).items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, expected[name])
    views = {k: v.copy() for k, v in get_arrays(source).items()}
    for v in views.values():
        v.flags.writeable = False  # read-only views of a record's bytes
    set_arrays(fast, views)
    for name, value in get_arrays(fast).items():
        np.testing.assert_array_equal(value, views[name])
    assert next(fast.parameters()).requires_grad  # still trainable parameters


@pytest.mark.parametrize("change", ["missing", "unexpected", "shape"])
def test_set_arrays_refuses_what_does_not_match(change):
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    arrays = {k: v + 1 for k, v in get_arrays(model).items()}
    first = next(iter(arrays))
    if change == "missing":
        del arrays[first]
    elif change == "unexpected":
        arrays["extra.weight"] = np.zeros(3, np.float32)
    else:
        arrays[first] = np.zeros((1, 2, 3), np.float32)
    pattern = {
        "missing": "Missing key",
        "unexpected": "Unexpected key",
        "shape": "size mismatch",
    }[change]
    with pytest.raises(RuntimeError, match=pattern):  # load_state_dict's report
        set_arrays(model, arrays)


def test_evaluate_counts_accuracy():
    model = build_model("mlp", (1, 8, 8), 2, seed=0)
    x, y = toy(50)
    result = evaluate(model, x, y, batch_size=7)
    with torch.no_grad():
        expected = (model(x).argmax(1) == y).float().mean().item()
    assert result.accuracy == pytest.approx(expected)
    assert result.num_examples == 50


def _pool_threads() -> list[tuple[str, int]]:
    import scipy.linalg  # noqa: F401  (loads scipy's own BLAS next to numpy's)
    from threadpoolctl import threadpool_info

    return [(pool["filepath"], pool["num_threads"]) for pool in threadpool_info()]


@pytest.fixture
def two_thread_pools():
    """Every native pool and torch at 2 threads for the test, restored after."""
    from threadpoolctl import threadpool_limits

    _pool_threads()
    torch_before = torch.get_num_threads()
    with threadpool_limits(limits=2):
        torch.set_num_threads(2)
        try:
            yield
        finally:
            torch.set_num_threads(torch_before)


def test_native_threads_caps_every_pool_and_restores_them(two_thread_pools):
    before = _pool_threads()
    assert len(before) >= 2 and all(n == 2 for _, n in before), before
    with native_threads(1):
        inside = _pool_threads()
        assert torch.get_num_threads() == 1
    assert [path for path, _ in inside] == [path for path, _ in before]
    assert all(n == 1 for _, n in inside), inside
    assert torch.get_num_threads() == 2
    assert _pool_threads() == before


def test_native_threads_zero_leaves_pools_and_negative_is_refused(two_thread_pools):
    before = _pool_threads()
    with native_threads(0):
        assert _pool_threads() == before
        assert torch.get_num_threads() == 2
    refused = pytest.raises(ValueError, match=r"^num_threads must be >= 0, got -1$")
    with refused, native_threads(-1):
        pass
