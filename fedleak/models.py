"""The models of the seed thesis, as plain :class:`torch.nn.Module` objects.

Seed 000, Ch. 7.2.1: the collaborative image models are "convolutional neural
networks with three spatial convolution layers with 32, 64, and 128 filters,
kernel size set to (3,3), and max pooling layers with pooling size set to 2,
followed by two fully connected layers of size 256 and [the number of classes].
We use rectified linear unit (ReLU) as the activation function for all layers."

:class:`ImageCNN` implements that network and sizes itself from the input
shape, so the same class serves 8x8 digits, 28x28 (Fashion-)MNIST and 62x47
faces. :class:`MLP` is a small fully connected alternative for quick runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .errors import ConfigError

__all__ = ["MODEL_NAMES", "MLP", "ImageCNN", "build_model", "count_parameters"]

MODEL_NAMES: tuple[str, ...] = ("cnn", "mlp")


def _check_input_shape(
    input_shape: Sequence[int], num_classes: int
) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ConfigError(
            f"input_shape must be (channels, height, width) with positive sizes, "
            f"got {tuple(input_shape)}"
        )
    if num_classes < 2:
        raise ConfigError(f"num_classes must be >= 2, got {num_classes}")
    return shape[0], shape[1], shape[2]


class ImageCNN(nn.Module):
    """Three-block CNN of seed 000 Ch. 7.2.1, sized from the input shape.

    Each block is ``conv 3x3 (padding 1) -> ReLU -> max-pool 2``; a block skips
    its pooling when the feature map is already smaller than 2x2, so tiny
    inputs such as 8x8 digits still fit. The head is ``FC hidden -> ReLU ->
    FC num_classes``.

    Parameters
    ----------
    input_shape : sequence of int
        ``(channels, height, width)`` of one input.
    num_classes : int
        Number of output logits.
    channels : sequence of int, default=(32, 64, 128)
        Filters of the convolution layers (the thesis' 32/64/128).
    hidden : int, default=256
        Width of the first fully connected layer (the thesis' 256).
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        channels: Sequence[int] = (32, 64, 128),
        hidden: int = 256,
    ) -> None:
        super().__init__()
        in_ch, height, width = _check_input_shape(input_shape, num_classes)
        layers: list[nn.Module] = []
        for out_ch in channels:
            layers += [nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1), nn.ReLU()]
            if min(height, width) >= 2:
                layers.append(nn.MaxPool2d(2))
                height, width = height // 2, width // 2
            in_ch = out_ch
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_ch * height * width, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the logits for a batch ``x`` of shape ``(n, C, H, W)``."""
        out: torch.Tensor = self.classifier(self.features(x))
        return out


class MLP(nn.Module):
    """A small fully connected network: flatten, ReLU hidden layers, logits.

    Parameters
    ----------
    input_shape : sequence of int
        ``(channels, height, width)`` of one input.
    num_classes : int
        Number of output logits.
    hidden : sequence of int, default=(128, 64)
        Widths of the hidden layers.
    """

    def __init__(
        self,
        input_shape: Sequence[int],
        num_classes: int,
        *,
        hidden: Sequence[int] = (128, 64),
    ) -> None:
        super().__init__()
        in_ch, height, width = _check_input_shape(input_shape, num_classes)
        layers: list[nn.Module] = [nn.Flatten()]
        width_in = in_ch * height * width
        for width_out in hidden:
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
            width_in = width_out
        layers.append(nn.Linear(width_in, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the logits for a batch ``x`` of shape ``(n, C, H, W)``."""
        out: torch.Tensor = self.net(x)
        return out


def build_model(
    name: str, input_shape: Sequence[int], num_classes: int, *, seed: int | None = None
) -> nn.Module:
    """Build a model by name, optionally with seeded initial weights.

    Parameters
    ----------
    name : {"cnn", "mlp"}
        ``"cnn"`` is :class:`ImageCNN`, ``"mlp"`` is :class:`MLP`.
    input_shape : sequence of int
        ``(channels, height, width)`` of one input.
    num_classes : int
        Number of output logits.
    seed : int, optional
        Seed of the weight initialisation. The global torch RNG is left
        untouched: initialisation runs under a forked RNG state.

    Returns
    -------
    torch.nn.Module
        The model, in training mode, on the CPU.
    """
    if name not in MODEL_NAMES:
        raise ConfigError(f"unknown model {name!r}; choose one of {list(MODEL_NAMES)}")
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        if name == "cnn":
            return ImageCNN(input_shape, num_classes)
        return MLP(input_shape, num_classes)


def count_parameters(model: nn.Module) -> int:
    """Return the number of trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
