"""Opacus, imported without the logging handler its import installs.

Opacus 1.5's ``opacus.utils.module_utils`` calls ``logging.basicConfig`` when
it is imported, which gives the root logger a stderr handler. Flower's
``flwr`` logger has its own console handler and propagates to the root
logger, so from then on every Flower log line of the process (a ServerApp's,
a ClientApp's) is printed twice, the second time in Opacus' format
(``11/24/2026 15:12:39:WARNING:...``). fedleak imports Opacus only through
this module, which removes the root handlers the import added and no other:
a handler the application configured itself stays, and so does Opacus' own
``basicConfig`` when the application imported Opacus first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "GradSampleModule",
    "GradSampleModuleFastGradientClipping",
    "ModuleValidator",
    "no_new_root_handlers",
]


@contextmanager
def no_new_root_handlers() -> Iterator[None]:
    """Remove the root-logger handlers added inside the block."""
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)


with no_new_root_handlers():
    from opacus import GradSampleModule
    from opacus.grad_sample import GradSampleModuleFastGradientClipping
    from opacus.validators import ModuleValidator
