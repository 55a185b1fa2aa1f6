from __future__ import annotations

import pytest
import torch

from fedleak.errors import ConfigError
from fedleak.models import MLP, ImageCNN, build_model, count_parameters


@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 28, 28), (3, 62, 47), (1, 3, 3)])
def test_cnn_sizes_itself_from_the_input_shape(shape):
    model = ImageCNN(shape, num_classes=7)
    out = model(torch.zeros(5, *shape))
    assert out.shape == (5, 7)


def test_cnn_has_the_thesis_layers():
    model = ImageCNN((1, 28, 28), 10)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 64, 128]
    assert all(c.kernel_size == (3, 3) for c in convs)
    assert sum(isinstance(m, torch.nn.MaxPool2d) for m in model.modules()) == 3
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [lin.out_features for lin in linears] == [256, 10]
    assert linears[0].in_features == 128 * 3 * 3


def test_mlp_forward_and_parameter_count():
    model = MLP((1, 8, 8), 10, hidden=(16,))
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    assert count_parameters(model) == 64 * 16 + 16 + 16 * 10 + 10


def test_build_model_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("cnn", (1, 8, 8), 10, seed=5)
    after = torch.rand(1)
    assert torch.equal(before, after)
    b = build_model("cnn", (1, 8, 8), 10, seed=5)
    c = build_model("cnn", (1, 8, 8), 10, seed=6)
    for (_, pa), (_, pb) in zip(
        a.state_dict().items(), b.state_dict().items(), strict=True
    ):
        assert torch.equal(pa, pb)
    assert not all(
        torch.equal(x, y) for x, y in zip(a.parameters(), c.parameters(), strict=True)
    )


@pytest.mark.parametrize(
    ("name", "shape", "classes"),
    [("resnet", (1, 8, 8), 10), ("cnn", (8, 8), 10), ("mlp", (1, 8, 8), 1)],
)
def test_bad_model_arguments_raise_config_error(name, shape, classes):
    with pytest.raises(ConfigError):
        build_model(name, shape, classes)
