"""The command-line options that ``fedleak`` commands share.

Each is an ``Annotated`` type for a typer parameter; the command gives the
default, e.g. ``out: OutOption = Path("bench-audit.json")``. A ``--quick``
option says what it shrinks, so every benchmark writes its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["OutOption", "SeedOption", "VerboseOption"]

#: ``--out``: the benchmark's JSON record (plots go next to it).
OutOption = Annotated[Path, typer.Option("--out", help="JSON file to write.")]

#: ``--seed``: the root of every random draw of the run.
SeedOption = Annotated[
    int, typer.Option(help="Run seed: every random draw derives from it.")
]

#: ``-v`` / ``--verbose``: let Flower's and Ray's logs through.
VerboseOption = Annotated[
    bool, typer.Option("-v", "--verbose", help="Show Flower and Ray logs.")
]
