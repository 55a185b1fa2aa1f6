"""The dependency direction: strategies, clients -> attacks -> fedleak core.

The core (``fedleak`` minus ``experiments``, ``bench`` and the CLI, which
drive Flower runs) and ``attacks`` never import Flower or Ray; the core never
imports the layers above it; strategies and clients do not import each
other. Checked on every source file's import statements (relative imports
resolved), and at run time on the modules the benchmarks use.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABOVE_CORE = ("fedleak.experiments", "fedleak.bench", "fedleak.cli")
LAYERS: dict[str, tuple[str, ...]] = {
    "core": (
        "flwr",
        "ray",
        "fedleak.attacks",
        "fedleak.clients",
        "fedleak.strategies",
        *ABOVE_CORE,
    ),
    "attacks": ("flwr", "ray", "fedleak.clients", "fedleak.strategies", *ABOVE_CORE),
    "strategies": ("fedleak.clients", *ABOVE_CORE),
    "clients": ("fedleak.strategies", *ABOVE_CORE),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "fedleak":  # strategies/, clients/, attacks/ install under fedleak
        parts.insert(0, "fedleak")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(path: Path) -> str | None:
    top = path.relative_to(ROOT).parts
    if top[0] in ("attacks", "strategies", "clients"):
        return top[0]
    if top[0] == "fedleak":
        if top[1] in ("experiments", "bench", "cli.py"):
            return None
        return "core"
    return None


def _imports(path: Path) -> list[str]:
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            found.append(name)
            found += [f"{name}.{alias.name}" for alias in node.names]
    return found


SOURCES = [
    p
    for folder in ("fedleak", "attacks", "strategies", "clients")
    for p in sorted((ROOT / folder).rglob("*.py"))
    if _layer(p) is not None
]


def test_the_layers_hold_source_files() -> None:
    layers = {_layer(p) for p in SOURCES}
    assert layers == {"core", "attacks", "strategies", "clients"}
    assert _module_name(ROOT / "attacks/membership/simulation.py") == (
        "fedleak.attacks.membership.simulation"
    )


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_against_the_direction(path: Path) -> None:
    forbidden = LAYERS[str(_layer(path))]
    wrong = sorted(
        {
            name
            for name in _imports(path)
            if any(name == f or name.startswith(f + ".") for f in forbidden)
        }
    )
    assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}"


def test_the_research_modules_load_without_flower() -> None:
    code = (
        "import sys\n"
        "import fedleak.attacks.membership.simulation\n"
        "import fedleak.attacks.membership.gradient_norm\n"
        "import fedleak.attacks.property.simulation\n"
        "import fedleak.attacks.property.scoring\n"
        "import fedleak.data, fedleak.defenses, fedleak.federated, fedleak.settings\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('flwr', 'ray'))\n"
        "print(loaded)\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
