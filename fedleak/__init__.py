"""fedleak: measure and limit privacy leakage in federated learning.

fedleak is a Flower plugin and research toolkit. Its subpackages are

- :mod:`fedleak.data` -- datasets, partitioners, label-independent properties,
  text and check-in data;
- :mod:`fedleak.privacy` -- DP mechanisms, accounting, DP-SGD, DPNorm,
  identifiability bounds, local DP and syntactic metrics;
- :mod:`fedleak.dpgm` -- the DP mixture of generative models and its baselines;
- :mod:`fedleak.synth` -- latent metric-privacy synthetic data;
- :mod:`fedleak.sketches` -- Count-Min / Count sketches and private statistics;
- :mod:`fedleak.secagg` -- the secure-aggregation protocol engine (Flower-free);
- :mod:`fedleak.strategies` -- Flower Message-API server strategies;
- :mod:`fedleak.clients` -- Flower ClientApps, client behaviours and mods;
- :mod:`fedleak.attacks` -- attack algorithms, Flower-free (membership,
  property, audit);
- :mod:`fedleak.runtime` -- how fedleak drives Flower's simulation engine
  (wake-ups instead of polls, signals, checkpoints);
- :mod:`fedleak.experiments` -- TOML experiments run as Flower simulations;
- :mod:`fedleak.bench` -- the ``fedleak bench`` benchmarks and their records;

and its core modules :mod:`fedleak.models` (the seed thesis' models),
:mod:`fedleak.generative` (VAE, DCGAN), :mod:`fedleak.training`,
:mod:`fedleak.task`, :mod:`fedleak.protocol` (message keys),
:mod:`fedleak.errors` (the error hierarchy), :mod:`fedleak.validation`
(argument checks), :mod:`fedleak.files` (atomic writes) and
:mod:`fedleak.cli` (the ``fedleak`` command). ``ARCHITECTURE.md`` in the
repository maps them and the direction of their imports.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .errors import ConfigError, DataError, FedleakError, ProtocolError


def _source_checkout_root() -> list[str]:
    """Return the repository root when this is a source checkout, else nothing.

    In the repository, ``strategies/``, ``clients/`` and ``attacks/`` sit next
    to ``fedleak/`` and are installed as ``fedleak.strategies`` and so on. When
    the checkout itself is on ``sys.path`` (Ray adds its driver's working
    directory to every worker's path), this ``fedleak`` shadows the installed
    one; adding the root to ``__path__`` makes those subpackages resolve here too.
    """
    here = Path(__file__).resolve().parent
    root = here.parent
    if (
        not (here / "strategies").exists()
        and (root / "pyproject.toml").is_file()
        and (root / "strategies" / "__init__.py").is_file()
    ):
        return [str(root)]
    return []


__path__ = [*__path__, *_source_checkout_root()]

try:
    __version__ = version("fedleak")
except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "0.0.0+unknown"

__all__ = ["ConfigError", "DataError", "FedleakError", "ProtocolError", "__version__"]
