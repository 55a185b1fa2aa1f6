"""Softmax regression on scikit-learn's digits, in NumPy (float32 weights)."""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits

NUM_CLASSES = 10


def load_partition(
    partition_id: int, num_partitions: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every ``num_partitions``-th digit, starting at ``partition_id``."""
    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    return x[partition_id::num_partitions], y[partition_id::num_partitions]


def initial_model() -> list[np.ndarray]:
    """Zero weights and biases (float32)."""
    return [np.zeros((64, NUM_CLASSES), np.float32), np.zeros(NUM_CLASSES, np.float32)]


def _probabilities(model: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    logits = x @ model[0] + model[1]
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def train(
    model: list[np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    seed: int,
) -> tuple[list[np.ndarray], float]:
    """Mini-batch SGD on the cross-entropy; returns the model and the last loss."""
    w, b = (m.copy() for m in model)
    rng = np.random.default_rng(seed)
    onehot = np.eye(NUM_CLASSES)[y]
    loss = 0.0
    for _ in range(epochs):
        for batch in np.array_split(rng.permutation(len(x)), max(1, len(x) // 32)):
            p = _probabilities([w, b], x[batch])
            loss = float(-np.mean(np.log(p[np.arange(len(batch)), y[batch]] + 1e-12)))
            grad = (p - onehot[batch]) / len(batch)
            w -= lr * x[batch].T @ grad
            b -= lr * grad.sum(axis=0)
    return [w, b], loss


def accuracy(model: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Share of correctly classified digits."""
    return float(np.mean(_probabilities(model, x).argmax(axis=1) == y))
