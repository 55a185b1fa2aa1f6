"""The generator Flower's DP wrappers draw their noise from, for one run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import numpy as np

from .checkpoint import numpy_state_from_json

__all__ = ["NoiseStream"]


class NoiseStream:
    """The generator Flower's DP wrappers draw their noise from, for one run.

    Flower's ``DifferentialPrivacyServerSide*`` wrappers add Gaussian noise
    with NumPy's global generator (seeded from OS entropy when NumPy is
    imported). By default fedleak leaves it alone: the noise cannot be
    recomputed from the experiment's seed. With ``[privacy] noise_seed`` (not
    private: anyone who knows the seed can subtract the noise) the strategy's
    calls run with the global generator swapped for a stream seeded from
    ``noise_seed`` and swapped back after, so figures can be reproduced and
    nothing else in the process sees a seeded global generator.

    Parameters
    ----------
    seed : int or None
        ``[privacy] noise_seed``; None draws from the OS-seeded generator.
    """

    def __init__(self, seed: int | None) -> None:
        self.seed = seed
        self.state: tuple[Any, ...] | None = None
        if seed is not None:
            stream = np.random.RandomState(
                np.random.MT19937(np.random.SeedSequence([seed, 0xD1F]))
            )
            self.state = cast(tuple[Any, ...], stream.get_state(legacy=True))

    @property
    def reproducible(self) -> bool:
        """Whether the noise is a function of :attr:`seed`."""
        return self.seed is not None

    @contextmanager
    def active(self) -> Iterator[None]:
        """Run the block with the seeded stream as NumPy's global generator."""
        if self.state is None:
            yield
            return
        saved = np.random.get_state()  # noqa: NPY002 - Flower's DP draws from it
        np.random.set_state(self.state)  # noqa: NPY002
        try:
            yield
        finally:
            self.state = cast(
                tuple[Any, ...],
                np.random.get_state(legacy=True),  # noqa: NPY002
            )
            np.random.set_state(saved)  # noqa: NPY002

    def to_json(self) -> dict[str, Any] | None:
        """Return the stream's state for a checkpoint (None without a noise seed)."""
        if self.state is None:
            return None
        kind, keys, pos, has_gauss, gauss = self.state
        return {
            "kind": kind,
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        }

    def load(self, state: dict[str, Any] | None) -> None:
        """Restore a state :meth:`to_json` wrote."""
        if state is not None and self.state is not None:
            self.state = numpy_state_from_json(state)
