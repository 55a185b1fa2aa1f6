"""The records behind ``REPRODUCTION.md``: which rows read each, how it was made.

:func:`fedleak.bench.report.render_report` judges every row through a
:class:`ReadLog`, so the report knows exactly which records each rule read
(required or optional), and ends with one table, a line per record: the rows
that read it, the command that wrote it, when, and the compute behind it. A
reader can then rerun any row and knows how long it takes.

Nothing here is timed: every figure comes from the records, so the report
stays a pure function of them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from typing import Any, Final

from .seed_claims import Records

__all__ = [
    "ReadLog",
    "bench_command",
    "compute_seconds",
    "created_date",
    "later_sessions",
    "records_section",
]

_WALL_KEYS: Final = ("wall_s", "wall_s_total", "total_s")
_PROGRAMS: Final = ("cli.py", "fedleak")


class ReadLog(Mapping[str, Mapping[str, Any]]):
    """A read-only view of the records that notes each one a rule reads.

    Looking a record up (``records[name]``, ``records.get(name)``,
    ``name in records``) marks it read; listing the names does not, so a rule
    that scans the names for a prefix is credited only with those it opens.
    """

    def __init__(self, records: Records) -> None:
        self._records = records
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        record = self._records[name]
        self.read.add(name)
        return record

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


def compute_seconds(record: Mapping[str, Any]) -> float | None:
    """Seconds of compute behind ``record``, or ``None`` if it gives none.

    The bench's own wall time (``wall_s``, or ``wall_s_total`` / ``total_s``
    in older records; a ``wall_s`` of parts counts their ``total``), or the
    sum of its runs' ``wall_s`` where that is larger: a property record
    extended or resumed from an earlier invocation times only the last one
    at the top, while each run keeps its own.
    """
    tops = (_seconds(record.get(key)) for key in _WALL_KEYS)
    top = next((t for t in tops if t is not None), None)
    runs = record.get("runs")
    walls = (
        [float(r["wall_s"]) for r in runs if isinstance(r, Mapping) and "wall_s" in r]
        if isinstance(runs, list)
        else []
    )
    if not walls:
        return top
    return max(sum(walls), top if top is not None else 0.0)


def later_sessions(record: Mapping[str, Any]) -> list[int]:
    """Return the round each run went on from, for runs timed from there only.

    A run extended or resumed by a later invocation keeps the last session's
    ``wall_s`` and names the round that session started from
    (``extended_from``); the rounds before it are not timed in the record.
    """
    runs = record.get("runs")
    if not isinstance(runs, list):
        return []
    return [
        int(r["extended_from"])
        for r in runs
        if isinstance(r, Mapping) and r.get("extended_from")
    ]


def _seconds(wall: Any) -> float | None:
    """Read a recorded wall time: seconds, or parts with their ``total``."""
    if isinstance(wall, Mapping):
        wall = wall.get("total")
    if isinstance(wall, bool) or not isinstance(wall, int | float):
        return None
    return float(wall)


def bench_command(record: Mapping[str, Any], stem: str) -> str | None:
    """Return the command that wrote ``record``, rerunning into ``benchmarks/``.

    From the record's provenance, with two spellings made current: the
    program as ``fedleak`` (some records were written through the module's
    file, ``cli.py``) and ``--out`` naming ``benchmarks/STEM.json`` when the
    record was written elsewhere under the same file name and copied in.
    ``None`` when the record predates provenance.
    """
    provenance = record.get("provenance")
    command = provenance.get("command") if isinstance(provenance, Mapping) else None
    if not isinstance(command, str) or not command.strip():
        return None
    words = command.split()
    if posixpath.basename(words[0]) in _PROGRAMS:
        words[0] = "fedleak"
    for i, word in enumerate(words[:-1]):
        target = words[i + 1]
        if word == "--out" and posixpath.basename(target) == f"{stem}.json":
            words[i + 1] = f"benchmarks/{stem}.json"
    return " ".join(words)


def created_date(record: Mapping[str, Any]) -> str | None:
    """Return the day the record was written (``YYYY-MM-DD``), if it says."""
    provenance = record.get("provenance")
    created = provenance.get("created") if isinstance(provenance, Mapping) else None
    created = created or record.get("created")
    return created[:10] if isinstance(created, str) and created else None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds:,.0f} s ({seconds / 60:,.0f} min)"


def _compute_cell(record: Mapping[str, Any]) -> str:
    duration = _duration(compute_seconds(record))
    starts = later_sessions(record)
    if not starts:
        return duration
    first, last = min(starts), max(starts)
    rounds = f"round {first}" if first == last else f"rounds {first}-{last}"
    return (
        f"at least {duration}: {len(starts)} of {len(record['runs'])} runs "
        f"timed from {rounds} on"
    )


def _kind(record: Mapping[str, Any]) -> str | None:
    kind = record.get("benchmark", record.get("bench"))
    return kind if isinstance(kind, str) else None


def _command_cell(record: Mapping[str, Any], stem: str) -> str:
    command = bench_command(record, stem)
    if command is not None:
        return f"`{command}`"
    kind = _kind(record)
    if kind is None:
        return "not recorded"
    return f"`fedleak bench {kind} ...` (options not recorded)"


def records_section(records: Records, reads: Mapping[str, set[str]]) -> str:
    """Markdown: a line per record that a row read, then those no row read.

    Parameters
    ----------
    records
        Every record of the folder, by file stem.
    reads
        For each report row, the stems its rule read (:class:`ReadLog`).
    """
    rows_of: dict[str, list[str]] = {stem: [] for stem in records}
    for row, stems in reads.items():
        for stem in sorted(stems):
            rows_of[stem].append(row)
    lines = [
        "\n## Records\n\n"
        "The records each row was judged on (read by its rule), the command "
        "that wrote each (program and `--out` as they rerun into "
        "`benchmarks/`), the day, and the compute behind it: the bench's wall "
        "time, or its runs' summed wall times where a run was extended or "
        "resumed by a later invocation (such a run times only its last "
        "session: *at least*).\n\n"
        "| record | read by | command | written | compute |\n"
        "|---|---|---|---|---|\n"
    ]
    for stem in sorted(s for s, rows in rows_of.items() if rows):
        record = records[stem]
        cells = (
            f"`{stem}.json`",
            "; ".join(rows_of[stem]),
            _command_cell(record, stem),
            created_date(record) or "not recorded",
            _compute_cell(record),
        )
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n")
    unread = sorted(s for s, rows in rows_of.items() if not rows)
    if unread:
        lines.append(
            "\nRead by no row: " + ", ".join(f"`{s}.json`" for s in unread) + ".\n"
        )
    return "".join(lines)
