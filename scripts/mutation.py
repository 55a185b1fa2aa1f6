"""Mutation testing of one fedleak module set at a time (mutmut 3).

mutmut reads one ``[tool.mutmut]`` table; fedleak tests each module set against
its own tests, so this wrapper takes the common settings from that table and
the set's files and tests from ``[tool.fedleak.mutation.<set>]`` in
``pyproject.toml``, then runs mutmut. Usage (from the repository root)::

    python scripts/mutation.py run privacy          # mutate, test, cache in mutants/
    python scripts/mutation.py survivors privacy    # list the survivors
    python scripts/mutation.py show NAME            # the diff of one mutant
    python scripts/mutation.py record privacy       # score -> benchmarks/mutation.json

Each set works in its own ``mutants/<set>/`` (a copy of the import tree, links
to the tests, mutmut's ``mutants/`` copy and cached results); delete it to
start afresh.
Equivalent mutants are listed, with the reason, in
``benchmarks/mutation-equivalents.md`` (a table whose first column is the
mutant's name); ``record`` subtracts them from the total:
``score = killed / (total - equivalent)``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import sys
import tomllib
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "mutants"
FOLDED = ("attacks", "clients", "strategies")
LINKED = ("tests", "sim_configs")
RECORD = ROOT / "benchmarks" / "mutation.json"
EQUIVALENTS = ROOT / "benchmarks" / "mutation-equivalents.md"


def _sets() -> dict[str, dict[str, Any]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    sets: dict[str, dict[str, Any]] = data["tool"]["fedleak"]["mutation"]
    return sets


def _set(name: str) -> dict[str, Any]:
    sets = _sets()
    if name not in sets:
        raise SystemExit(f"unknown module set {name!r}; known: {', '.join(sets)}")
    return sets[name]


def _configure(name: str) -> None:
    """Load mutmut's config and narrow it to one module set."""
    from mutmut.configuration import config

    chosen = _set(name)
    cfg = config()
    cfg.only_mutate = list(chosen["files"])
    cfg.pytest_add_cli_args_test_selection = list(chosen["tests"])


def _sync_tree(source: Path, target: Path) -> None:
    """Copy ``source`` into ``target`` (keeping times), skipping caches."""
    for path in source.rglob("*"):
        if "__pycache__" in path.parts or path.is_dir():
            continue
        copy = target / path.relative_to(source)
        if copy.exists() and copy.read_bytes() == path.read_bytes():
            continue
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, copy)


def _enter(name: str) -> None:
    """Work in ``mutants/<set>/``: one import tree ``fedleak`` plus links.

    mutmut names a mutant after its file's path, so ``attacks/x.py`` must sit
    at ``fedleak/attacks/x.py`` to match the module the tests import
    (``fedleak.attacks.x``): the folder holds a copy of ``fedleak/`` with
    ``attacks/``, ``clients/`` and ``strategies/`` inside, refreshed at every
    call, and links to ``tests/``, ``sim_configs/`` and ``pyproject.toml``.
    mutmut then copies that tree into ``./mutants`` and caches its results
    there, one folder per set.
    """
    _set(name)
    work = WORK / name
    work.mkdir(parents=True, exist_ok=True)
    for entry in ("fedleak", *FOLDED):
        stale = work / entry
        if stale.is_symlink():
            stale.unlink()
    _sync_tree(ROOT / "fedleak", work / "fedleak")
    for folder in FOLDED:
        _sync_tree(ROOT / folder, work / "fedleak" / folder)
    for entry in (*LINKED, "pyproject.toml"):
        link = work / entry
        if not link.is_symlink():
            link.symlink_to(ROOT / entry)
    os.chdir(work)


#: mutmut forks one worker per mutant after running the tests in its own
#: process; an OpenMP/MKL thread pool started there (torch's) is not usable in
#: a forked child and its first parallel operation hangs until the timeout.
#: One thread per process avoids the pool (workers run one at a time anyway).
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _mutmut(args: list[str]) -> None:
    for name, value in SINGLE_THREAD.items():
        os.environ.setdefault(name, value)
    from mutmut.__main__ import cli

    try:
        cli.main(args, prog_name="mutmut", standalone_mode=False)
    except SystemExit as stop:  # mutmut exits on a failing clean run
        if stop.code not in (0, None):
            raise


def _results() -> dict[str, str]:
    """Mutant name -> mutmut status, from the cached ``*.meta`` files."""
    from mutmut.stats import status_by_exit_code

    out: dict[str, str] = {}
    for meta in sorted(Path("mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text("utf-8"))
        for key, code in data.get("exit_code_by_key", {}).items():
            out[key] = status_by_exit_code[code]
    return out


def _equivalents() -> dict[str, str]:
    """Mutant name -> reason, from the equivalents table."""
    table: dict[str, str] = {}
    if EQUIVALENTS.exists():
        row = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*(.+?)\s*\|\s*$")
        for line in EQUIVALENTS.read_text("utf-8").splitlines():
            match = row.match(line)
            if match:
                table[match.group(1)] = match.group(2)
    return table


def _print_diff(mutant: str) -> None:
    """Print the changed lines of one mutant."""
    from mutmut.__main__ import find_mutant, get_diff_for_mutant

    diff = get_diff_for_mutant(mutant, path=find_mutant(mutant).path)
    for line in diff.splitlines():
        if line[:1] in "+-" and line[:3] not in ("+++", "---"):
            print("    " + line)


def _summary(name: str) -> dict[str, Any]:
    results = _results()
    counts = Counter(results.values())
    equivalents = _equivalents()
    survivors = [k for k, s in results.items() if s != "killed"]
    justified = [k for k in survivors if k in equivalents]
    stale = sorted(k for k in equivalents if k in results and results[k] == "killed")
    total = len(results)
    killed = counts.get("killed", 0)
    denominator = total - len(justified)
    chosen = _set(name)
    return {
        "files": chosen["files"],
        "tests": chosen["tests"],
        "total": total,
        "killed": killed,
        "survived": counts.get("survived", 0),
        "no_tests": counts.get("no tests", 0),
        "timeout": counts.get("timeout", 0),
        "suspicious": counts.get("suspicious", 0),
        "not_checked": counts.get("not checked", 0),
        "equivalent": len(justified),
        "score": round(killed / denominator, 4) if denominator else None,
        "unjustified_survivors": len(set(survivors) - set(justified)),
        "equivalents_now_killed": stale,
        "command": f"python scripts/mutation.py run {name} && "
        f"python scripts/mutation.py record {name}",
        "tool": f"mutmut {version('mutmut')}",
        "date": dt.date.today().isoformat(),
    }


def main(argv: list[str] | None = None) -> None:
    """Command line: ``run``, ``survivors``, ``show`` and ``record``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="mutate one module set and run its tests")
    run.add_argument("module_set")
    run.add_argument("--max-children", type=int, default=1)
    run.add_argument(
        "mutants", nargs="*", help="mutant names or globs (default: all of the set)"
    )
    run.add_argument(
        "--survivors",
        action="store_true",
        help="re-test the cached survivors (not the listed equivalents), e.g. after "
        "adding tests",
    )
    survivors = sub.add_parser("survivors", help="list the mutants not killed")
    survivors.add_argument("module_set")
    survivors.add_argument("--diff", action="store_true", help="show each diff")
    show = sub.add_parser("show", help="print one mutant's diff")
    show.add_argument("module_set")
    show.add_argument("mutant")
    record = sub.add_parser("record", help="write the set's score to the record")
    record.add_argument("module_set")
    record.add_argument("--out", type=Path, default=RECORD, help="JSON record")
    args = parser.parse_args(argv)

    _enter(args.module_set)
    if args.command == "run":
        _configure(args.module_set)
        names = list(args.mutants)
        if args.survivors:
            equivalents = _equivalents()
            names += [
                key
                for key, status in sorted(_results().items())
                if status != "killed" and key not in equivalents
            ]
            if not names:
                print("no survivor to re-test")
                return
        _mutmut(["run", "--max-children", str(args.max_children), *names])
        return
    _configure(args.module_set)
    if args.command == "show":
        _mutmut(["show", args.mutant])
        return
    if args.command == "survivors":
        equivalents = _equivalents()
        for key, status in sorted(_results().items()):
            if status != "killed":
                note = " (equivalent)" if key in equivalents else ""
                print(f"{status:12s} {key}{note}")
                if args.diff and not note:
                    _print_diff(key)
        return
    summary = _summary(args.module_set)
    out: Path = args.out
    record: dict[str, Any] = json.loads(out.read_text("utf-8")) if out.exists() else {}
    record.setdefault("modules", {})[args.module_set] = summary
    record["score"] = "killed / (total - equivalent)"
    out.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", "utf-8")
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
