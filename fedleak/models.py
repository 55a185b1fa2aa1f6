"""The models of the seed thesis, as plain :class:`torch.nn.Module` objects.

Seed 000, Ch. 7.2.1: the collaborative image models are "convolutional neural
networks with three spatial convolution layers with 32, 64, and 128 filters,
kernel size set to (3,3), and max pooling layers with pooling size set to 2,
followed by two fully connected layers of size 256 and [the number of classes].
We use rectified linear unit (ReLU) as the activation function for all layers."

:class:`ImageCNN` implements that network and sizes itself from the input
shape, so the same class serves 8x8 digits, 28x28 (Fashion-)MNIST and 62x47
faces. :class:`MLP` is a small fully connected alternative for quick runs.

The token/location models of Ch. 7.2.1 embed integer ids (see
:mod:`fedleak.data.text`: id 0 pads, id 1 is unknown):

- :class:`TextCNN` (FourSquare and CSI): "an embedding layer [...] of
  dimension 320, then [...] three spatial convolutional layers with 100
  filters and variable kernel windows of size (3,320), (4,320) and (5,320)
  and max pooling" over the whole sequence, then fully connected layers
  (128 and 2 for FourSquare, 2 for CSI);
- :class:`TextGRU` (Yelp): "a word-embedding layer of dimension 100 [...]
  fed to a gated recurrent unit (GRU) layer [...] a fully connected
  classification layer [on] the last hidden vector of the sequence".

Both give the padding token a zero embedding row with ``padding_idx``: its
gradient is zero for every input, so the row never changes and never reveals
anything (Ch. 7.1.2). Embeddings start uniform in ``[-0.05, 0.05]`` (the
Keras/Lasagne convention) rather than torch's ``N(0, 1)``: with unit-scale
float32 weights, an SGD step of ``0.01 * 1e-5`` on a rare token's row is below
half an ulp and is lost, so the row would not change at all. Both take a
``dropout`` probability applied after the pooling layer (Ch. 7.3.3, Table 7.7).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .errors import ConfigError
from .validation import check_int, check_option, check_probability

__all__ = [
    "MODEL_NAMES",
    "MLP",
    "EMBEDDING_INIT_RANGE",
    "PADDING_IDX",
    "TEXT_MODEL_NAMES",
    "ImageCNN",
    "TextCNN",
    "TextGRU",
    "build_model",
    "build_text_model",
    "count_parameters",
]

TEXT_MODEL_NAMES: tuple[str, ...] = ("text-cnn", "text-gru")
"""The embedding models (inputs: int64 token ids of shape ``(n, length)``)."""

MODEL_NAMES: tuple[str, ...] = ("cnn", "mlp", *TEXT_MODEL_NAMES)

PADDING_IDX = 0
"""Token id of padding (equals :data:`fedleak.data.text.PAD_ID`)."""


def _image_shape(input_shape: Sequence[int]) -> tuple[int, int, int]:
    """Return ``(channels, height, width)``, each an integer >= 1."""
    shape = tuple(input_shape)
    if len(shape) != 3:
        raise ConfigError(
            f"input_shape must be (channels, height, width); got {shape!r}."
        )
    channels, height, width = (
        check_int(f"input_shape[{i}]", size, low=1) for i, size in enumerate(shape)
    )
    return channels, height, width


class _MaxPool2d(nn.MaxPool2d):
    """``nn.MaxPool2d`` that pools in channels-last memory when no gradient is needed.

    PyTorch's CPU kernel for channels-first tensors is several times slower
    than its channels-last one: the three pools of the quickstart CNN on its
    360 test images take 8.2 ms against 2.8 ms with the layout copies. A
    maximum does not depend on the layout, so the values are identical. With
    autograd on, the plain kernel is as fast and is kept (measured on a
    batch of 32).
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Pool ``input``; a 4-d input without autograd goes through channels-last."""
        if torch.is_grad_enabled() or input.dim() != 4:
            plain: torch.Tensor = super().forward(input)
            return plain
        pooled: torch.Tensor = super().forward(
            input.contiguous(memory_format=torch.channels_last)
        )
        return pooled.contiguous()


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
        in_ch, height, width = _image_shape(input_shape)
        check_int("num_classes", num_classes, low=2)
        layers: list[nn.Module] = []
        for out_ch in channels:
            layers += [nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1), nn.ReLU()]
            if min(height, width) >= 2:
                layers.append(_MaxPool2d(2))
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
        in_ch, height, width = _image_shape(input_shape)
        check_int("num_classes", num_classes, low=2)
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


EMBEDDING_INIT_RANGE = 0.05
"""Half-width of the uniform initialisation of the embedding matrices."""


def _embedding(vocab_size: int, embedding_dim: int) -> nn.Embedding:
    embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=PADDING_IDX)
    with torch.no_grad():
        embedding.weight.uniform_(-EMBEDDING_INIT_RANGE, EMBEDDING_INIT_RANGE)
        embedding.weight[PADDING_IDX].zero_()
    return embedding


class TextCNN(nn.Module):
    """Embedding + multi-window convolution classifier of seed 000 Ch. 7.2.1.

    ``embedding (padding row 0) -> for each window k: conv over k consecutive
    embeddings (the thesis' (k, 320) kernels) -> ReLU -> max-pool over time
    -> concatenate -> dropout -> FC hidden -> ReLU -> FC num_classes``. The
    thesis' pooling size ``(l - k, 1)`` covers the whole sequence, i.e. a
    max-pool over time. The convolution is wide: ``max(windows) - 1`` zero
    vectors (equal to the padding embedding) pad both ends, so every token,
    the first and last included, lies in ``k`` windows of each size ``k``
    (with a valid convolution the first token lies in one window per size and
    can lose every max-pool, hiding it from the embedding leakage of
    Ch. 7.1.2).

    Parameters
    ----------
    vocab_size : int
        Number of embedding rows (tokens, including padding and unknown).
    num_classes : int
        Number of output logits.
    embedding_dim : int, default=320
        Embedding dimension (the thesis' 320).
    windows : sequence of int, default=(3, 4, 5)
        Convolution window sizes.
    filters : int, default=100
        Filters per window.
    hidden : int or None, default=128
        Width of the hidden FC layer (128 for FourSquare); ``None`` gives a
        single FC layer (the CSI model).
    dropout : float, default=0.0
        Dropout probability after the pooling layer (Ch. 7.3.3).
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        embedding_dim: int = 320,
        windows: Sequence[int] = (3, 4, 5),
        filters: int = 100,
        hidden: int | None = 128,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_int("vocab_size", vocab_size, low=2)  # padding plus one token
        check_int("num_classes", num_classes, low=2)
        check_probability("dropout", dropout, closed="left")
        if not windows:
            raise ConfigError("windows must be one or more sizes; got ().")
        for size in windows:
            check_int("windows", size, low=1)
        self.embedding = _embedding(vocab_size, embedding_dim)
        self.convs = nn.ModuleList(
            nn.Conv1d(embedding_dim, filters, kernel_size=k) for k in windows
        )
        self.max_window = max(windows)
        self.dropout = nn.Dropout(dropout)
        pooled = filters * len(windows)
        head: list[nn.Module] = (
            [nn.Linear(pooled, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)]
            if hidden is not None
            else [nn.Linear(pooled, num_classes)]
        )
        self.classifier = nn.Sequential(*head)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Return the logits for int64 token ids of shape ``(n, length)``."""
        emb = self.embedding(ids).transpose(1, 2)  # (n, embedding_dim, length)
        # Wide convolution: zero (padding) vectors on both ends put every token,
        # the first and last included, in ``k`` windows of each size ``k``, so
        # a token's embedding row is far less likely to lose every max-pool
        # and stay unchanged (which would hide it from Ch. 7.1.2's leakage).
        margin = self.max_window - 1
        emb = nn.functional.pad(emb, (margin, margin))
        pooled = [torch.relu(conv(emb)).amax(dim=2) for conv in self.convs]
        out: torch.Tensor = self.classifier(self.dropout(torch.cat(pooled, dim=1)))
        return out


class TextGRU(nn.Module):
    """Embedding + GRU classifier of seed 000 Ch. 7.2.1 (the Yelp model).

    ``embedding (padding row 0) -> GRU -> hidden vector at the last
    non-padding position -> dropout -> FC num_classes``. Records are
    right-padded, so the GRU state at the last real token is the "last hidden
    vector of the sequence" and padding never influences the output. For
    record-level DP-SGD, Opacus swaps ``nn.GRU`` for its ``DPGRU``
    (:func:`fedleak.defenses.make_dp_compatible`).

    Parameters
    ----------
    vocab_size : int
        Number of embedding rows.
    num_classes : int
        Number of output logits.
    embedding_dim : int, default=100
        Embedding dimension (the thesis' 100).
    hidden : int, default=100
        GRU hidden size (not given in the thesis).
    dropout : float, default=0.0
        Dropout probability on the final hidden vector (the pooling step).
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        embedding_dim: int = 100,
        hidden: int = 100,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_int("vocab_size", vocab_size, low=2)  # padding plus one token
        check_int("num_classes", num_classes, low=2)
        check_probability("dropout", dropout, closed="left")
        self.embedding = _embedding(vocab_size, embedding_dim)
        self.gru = nn.GRU(embedding_dim, hidden, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Return the logits for int64 token ids of shape ``(n, length)``."""
        states, _ = self.gru(self.embedding(ids))  # (n, length, hidden)
        last = (ids != PADDING_IDX).sum(dim=1).clamp(min=1) - 1
        final = states[torch.arange(ids.shape[0], device=ids.device), last]
        out: torch.Tensor = self.classifier(self.dropout(final))
        return out


def build_text_model(
    name: str,
    vocab_size: int,
    num_classes: int,
    *,
    seed: int | None = None,
    dropout: float = 0.0,
    embedding_dim: int | None = None,
    cnn_hidden: int | None = 128,
) -> nn.Module:
    """Build an embedding model by name, optionally with seeded initial weights.

    Parameters
    ----------
    name : {"text-cnn", "text-gru"}
        :class:`TextCNN` or :class:`TextGRU`.
    vocab_size : int
        Number of embedding rows.
    num_classes : int
        Number of output logits.
    seed : int, optional
        Seed of the weight initialisation (under a forked torch RNG state).
    dropout : float, default=0.0
        Dropout after the pooling layer (Ch. 7.3.3).
    embedding_dim : int, optional
        Overrides the thesis' embedding dimension (320 / 100), e.g. for
        CI-sized runs.
    cnn_hidden : int or None, default=128
        Width of :class:`TextCNN`'s hidden FC layer (128: the thesis'
        FourSquare model); ``None`` gives its single FC layer (the CSI
        model), which leaves the initial plateau of plain SGD several times
        sooner. Ignored by ``text-gru``.
    """
    check_option("name", name, TEXT_MODEL_NAMES)
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        if name == "text-cnn":
            return TextCNN(
                vocab_size,
                num_classes,
                embedding_dim=embedding_dim or 320,
                hidden=cnn_hidden,
                dropout=dropout,
            )
        return TextGRU(
            vocab_size, num_classes, embedding_dim=embedding_dim or 100, dropout=dropout
        )


def build_model(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    *,
    seed: int | None = None,
    vocab_size: int | None = None,
    dropout: float = 0.0,
    embedding_dim: int | None = None,
) -> nn.Module:
    """Build a model by name, optionally with seeded initial weights.

    Parameters
    ----------
    name : {"cnn", "mlp", "text-cnn", "text-gru"}
        ``"cnn"`` is :class:`ImageCNN`, ``"mlp"`` is :class:`MLP`; the text
        models are built by :func:`build_text_model`.
    input_shape : sequence of int
        ``(channels, height, width)`` of one input; ``(length,)`` for the
        text models.
    num_classes : int
        Number of output logits.
    seed : int, optional
        Seed of the weight initialisation. The global torch RNG is left
        untouched: initialisation runs under a forked RNG state.
    vocab_size : int, optional
        Number of embedding rows; required by the text models.
    dropout : float, default=0.0
        Dropout after the pooling layer (text models only).
    embedding_dim : int, optional
        Embedding width of the text models (default: the thesis').

    Returns
    -------
    torch.nn.Module
        The model, in training mode, on the CPU.
    """
    check_option("name", name, MODEL_NAMES)
    if name in TEXT_MODEL_NAMES:
        if vocab_size is None or len(tuple(input_shape)) != 1:
            raise ConfigError(
                f"model {name!r} embeds token ids: give vocab_size and an "
                f"input_shape of (length,), got vocab_size={vocab_size}, "
                f"input_shape={tuple(input_shape)}"
            )
        return build_text_model(
            name,
            vocab_size,
            num_classes,
            seed=seed,
            dropout=dropout,
            embedding_dim=embedding_dim,
        )
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        if name == "cnn":
            return ImageCNN(input_shape, num_classes)
        return MLP(input_shape, num_classes)


def count_parameters(model: nn.Module) -> int:
    """Return the number of trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
