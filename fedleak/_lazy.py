"""Lazy re-exports for package ``__init__`` modules (PEP 562).

A package's ``__init__`` names what it offers without importing the modules
that define it, so that importing one light module of a family (or reading an
experiment file) does not load torch, scikit-image or Flower through its
siblings. Each public name loads its module on first access.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return a module ``__getattr__`` and ``__dir__`` serving ``where``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    where : mapping of str to str
        Public name -> submodule (relative to ``package``) that defines it.

    Examples
    --------
    >>> getattr_, dir_ = lazy_exports("fedleak", {"ConfigError": "errors"})
    >>> getattr_("ConfigError").__name__
    'ConfigError'
    >>> dir_()
    ['ConfigError']
    """
    table = dict(where)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted(table)

    return __getattr__, __dir__
