"""What benchmark commands print: progress on stderr, tables and paths on stdout."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console
from rich.markup import escape

__all__ = ["err", "fmt", "out", "say", "written"]

#: Tables and results.
out = Console()
#: Progress lines and warnings.
err = Console(stderr=True)


def say(text: str) -> None:
    """Print one dim progress line on stderr (the ``progress`` of a benchmark)."""
    err.print(f"[dim]{escape(text)}[/]")


def written(path: str | Path, plots: Iterable[str] = ()) -> None:
    """Say that ``path`` was written, after the ``plots`` named next to it."""
    for plot in plots:
        out.print(f"written: {Path(path).with_name(plot)}", highlight=False)
    out.print(f"written: {path}", highlight=False)


def fmt(value: object, digits: int = 3) -> str:
    """Format a figure for a table: ``-`` for a missing one, fixed or general."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, int | float):
        return f"{value:.{digits}g}" if abs(value) >= 1000 else f"{value:.{digits}f}"
    return str(value)
