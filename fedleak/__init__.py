"""fedleak: measure and limit privacy leakage in federated learning.

fedleak is a Flower plugin and research toolkit. Its subpackages are

- :mod:`fedleak.data` -- datasets, partitioners and label-independent properties;
- :mod:`fedleak.models` -- the models of the seed thesis (Ch. 7.2.1);
- :mod:`fedleak.strategies` -- Flower Message-API server strategies;
- :mod:`fedleak.clients` -- Flower ClientApps;
- :mod:`fedleak.attacks` -- attack algorithms, Flower-free;
- :mod:`fedleak.experiments` -- TOML experiments run as Flower simulations.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .errors import ConfigError, DataError, FedleakError, ProtocolError

try:
    __version__ = version("fedleak")
except PackageNotFoundError:  # pragma: no cover - running from an uninstalled tree
    __version__ = "0.0.0+unknown"

__all__ = ["ConfigError", "DataError", "FedleakError", "ProtocolError", "__version__"]
