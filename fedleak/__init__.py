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
