"""The one writer of benchmark records: schema version, provenance, atomic file.

Every ``fedleak bench <name>`` writes one JSON record. Its top level is::

    {
      "schema_version": 1,            # of benchmark records (BENCH_SCHEMA_VERSION);
                                      # not the run directories' results.json
      "benchmark": str,               # the command's name, e.g. "secagg"
      "provenance": {
        "created": ISO-8601 str (UTC),
        "command": str,               # how the process was invoked
        "versions": {"fedleak": str, "python": str, "numpy": str, ...},
        "machine": {"platform": str, "processor": str, "cpus": int}
      },
      ...                             # the benchmark's own figures (its module
                                      # documents them)
    }

A benchmark that writes its record several times while it runs (so an
interrupted run keeps what it measured) calls :meth:`BenchRecord.write_progress`
after each piece and :meth:`BenchRecord.finish` at the end; the provenance is
stamped once, when the record is created. :func:`record_path` checks (or
makes) the record's folder before any work.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
import time
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Final

from fedleak.errors import ConfigError
from fedleak.files import write_json_atomic

__all__ = ["BENCH_SCHEMA_VERSION", "BenchRecord", "provenance", "record_path"]

#: Version of the benchmark-record layout above (independent of the run
#: directories' ``results.json`` schema).
BENCH_SCHEMA_VERSION: Final = 1

#: Packages whose versions every record states (those installed).
_PACKAGES: Final = (
    "fedleak",
    "numpy",
    "scipy",
    "scikit-learn",
    "scikit-image",
    "torch",
    "opacus",
    "dp-accounting",
    "flwr",
    "ray",
    "cryptography",
    "pynacl",
    "datasketches",
    "coincurve",
)


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def provenance() -> dict[str, Any]:
    """Return where and with what a record is being made.

    Returns
    -------
    dict
        ``created`` (UTC, ISO-8601), ``command`` (the process's argv),
        ``versions`` (Python and the installed packages that benchmarks use)
        and ``machine`` (platform, processor, CPU count).
    """
    return {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "versions": _versions(),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count() or 0,
        },
    }


def record_path(out: str | Path, *, make_folder: bool = False) -> Path:
    """Return the record's path ``out``, its folder checked before any work.

    Parameters
    ----------
    out : str or pathlib.Path
        The JSON file of ``--out``.
    make_folder : bool, default=False
        Create the folder (and its parents) if it is missing, instead of
        refusing it.

    Raises
    ------
    fedleak.errors.ConfigError
        If the folder of ``out`` does not exist and ``make_folder`` is false.
    """
    path = Path(out)
    if make_folder:
        path.parent.mkdir(parents=True, exist_ok=True)
    elif not path.parent.exists():
        raise ConfigError(f"the folder of --out does not exist: {path.parent}")
    return path


@dataclass
class BenchRecord(MutableMapping[str, Any]):
    """A benchmark's JSON record: its figures plus the common header.

    It behaves as a dictionary of the benchmark's own entries; :meth:`write`
    puts the header (:data:`BENCH_SCHEMA_VERSION`, the benchmark's name, the
    provenance) in front and writes the whole atomically.

    Parameters
    ----------
    benchmark : str
        The command's name (``fedleak bench <benchmark>``).
    out : pathlib.Path
        The JSON file; its folder is created when the record is (before the
        benchmark's work, so hours of work never end on a missing folder).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> out = Path(tempfile.mkdtemp()) / "demo.json"
    >>> record = BenchRecord("demo", out)
    >>> record["ratio"] = 2.5
    >>> document = record.write()
    >>> document["schema_version"], document["benchmark"], document["ratio"]
    (1, 'demo', 2.5)
    """

    benchmark: str
    out: Path
    provenance: dict[str, Any] = field(default_factory=provenance)
    body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.out = record_path(self.out, make_folder=True)

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.body[key] = value

    def __delitem__(self, key: str) -> None:
        del self.body[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.body)

    def __len__(self) -> int:
        return len(self.body)

    def document(self) -> dict[str, Any]:
        """Return the whole record: header first, then the benchmark's entries."""
        return {
            "schema_version": BENCH_SCHEMA_VERSION,
            "benchmark": self.benchmark,
            "provenance": self.provenance,
            **self.body,
        }

    def write(self, entries: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Add ``entries`` (if given), write the record atomically and return it."""
        if entries:
            self.body.update(entries)
        document = self.document()
        write_json_atomic(self.out, document)
        return document

    def write_progress(self, started: float) -> dict[str, Any]:
        """Write the record as it stands, ``wall_s`` measured since ``started``.

        A benchmark calls it after every measured piece, so that a run
        interrupted later keeps what it measured.
        """
        self.body["wall_s"] = time.perf_counter() - started
        return self.write()

    def finish(
        self, started: float, entries: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Add the last ``entries``, then write with ``wall_s`` since ``started``.

        ``wall_s`` is taken last, so it covers the whole run, plots included.
        Returns the record written.
        """
        if entries:
            self.body.update(entries)
        return self.write_progress(started)

    def start_rows(self, header: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Open a record that grows row by row; return its (empty) list of rows.

        The record holds ``header``, then ``rows``, an empty ``summary``, no
        ``plots``, ``"complete": false`` and ``wall_s``: a file written before
        :meth:`finish_rows` says that it is partial.
        """
        rows: list[dict[str, Any]] = []
        self.body.update(
            {
                **header,
                "rows": rows,
                "summary": {},
                "plots": [],
                "complete": False,
                "wall_s": 0.0,
            }
        )
        return rows

    def add_row(self, row: dict[str, Any], started: float) -> None:
        """Append ``row`` and write the record (an interrupted run keeps its rows)."""
        self.body["rows"].append(row)
        self.write_progress(started)

    def finish_rows(
        self, started: float, summary: dict[str, Any], plots: list[str]
    ) -> dict[str, Any]:
        """Close a record opened by :meth:`start_rows`: summary, plots, complete."""
        return self.finish(
            started, {"summary": summary, "complete": True, "plots": plots}
        )

    def sibling(self, suffix: str) -> Path:
        """Return the path of a file that goes with the record.

        ``out.with_name(<stem>-<suffix>)``: plots and run folders sit next to
        the JSON, named after it (``secagg.json`` -> ``secagg-rounds.png``).
        """
        return self.out.with_name(f"{self.out.stem}-{suffix}")
