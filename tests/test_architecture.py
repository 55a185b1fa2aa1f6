"""The import arrows of ARCHITECTURE.md hold in every module; no function is long.

Every module of ``fedleak/``, ``strategies/``, ``clients/`` and ``attacks/``
is parsed with :mod:`ast`; each import (at the top of the module or inside a
function, absolute or relative, and ``importlib.import_module`` of a literal
name) is placed in a layer, and an import that points against the arrows, or
a Flower import where none is allowed, fails the test with the file, the
line and the import. A function (or method) longer than
:data:`MAX_FUNCTION_LINES` fails the test with its file, name and length.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Top-level folders that install under ``fedleak`` (pyproject's package-dir).
MAPPED = ("strategies", "clients", "attacks")

#: Layer -> the layers it may import (itself included).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "attacks": frozenset({"attacks", "core"}),
    "strategies": frozenset({"strategies", "attacks", "core"}),
    "clients": frozenset({"clients", "attacks", "core"}),
    "runtime": frozenset({"runtime", "core"}),
    "experiments": frozenset(
        {"experiments", "runtime", "strategies", "clients", "attacks", "core"}
    ),
    "bench": frozenset(
        {"bench", "experiments", "runtime", "strategies", "clients", "attacks", "core"}
    ),
    "cli": frozenset({"cli", "bench", "experiments", "runtime", "core"}),
}

#: Layers that may import Flower (the benchmarks drive Flower simulations).
FLOWER_ALLOWED = frozenset({"strategies", "clients", "runtime", "experiments", "bench"})

#: The most lines a function may span, from its ``def`` line to its last line,
#: docstring included (``end_lineno - lineno + 1``; decorators not counted).
MAX_FUNCTION_LINES = 100


@dataclass(frozen=True)
class Import:
    """One import statement of a module, resolved to an absolute name."""

    path: str
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.target}"


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    """Return the dotted name of the module at ``path`` and whether it is a package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] in MAPPED:
        parts = ["fedleak", *parts]
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def layer_of(name: str) -> str | None:
    """Return the layer of a fedleak module name, ``None`` outside fedleak."""
    parts = name.split(".")
    if parts[0] != "fedleak":
        return None
    if len(parts) > 1 and parts[1] in {
        *MAPPED,
        "runtime",
        "experiments",
        "bench",
        "cli",
    }:
        return parts[1]
    return "core"


def imports_of(path: Path, root: Path) -> list[Import]:
    """Every import of the module at ``path``, with relative ones resolved."""
    name, is_package = module_name(path, root)
    package = name if is_package else name.rpartition(".")[0]
    shown = str(path.relative_to(root))
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(shown, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # ``from fedleak import strategies`` imports fedleak.strategies
            found += [
                Import(shown, node.lineno, f"{module}.{alias.name}")
                for alias in node.names
            ]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            found.append(Import(shown, node.lineno, node.args[0].value))
    return found


def source_files(root: Path) -> list[Path]:
    files = sorted((root / "fedleak").rglob("*.py"))
    for folder in MAPPED:
        files += sorted((root / folder).rglob("*.py"))
    return files


def violations(root: Path) -> list[str]:
    """Every import of the tree at ``root`` that breaks an arrow or the Flower rule."""
    problems: list[str] = []
    for path in source_files(root):
        source = layer_of(module_name(path, root)[0])
        assert source is not None
        for imp in imports_of(path, root):
            top = imp.target.split(".")[0]
            if top == "flwr" and source not in FLOWER_ALLOWED:
                problems.append(f"{imp}: Flower in the {source} layer")
            target = layer_of(imp.target)
            if target is not None and target not in ALLOWED[source]:
                problems.append(f"{imp}: {source} -> {target} goes against the arrows")
    return problems


@dataclass(frozen=True)
class Function:
    """One function or method of a module and the lines it spans."""

    path: str
    name: str
    lines: int

    @property
    def key(self) -> str:
        return f"{self.path}:{self.name}"

    def __str__(self) -> str:
        return f"{self.key} is {self.lines} lines"


def functions_of(path: Path, root: Path) -> list[Function]:
    """Every function of the module at ``path`` (nested ones too), by qualified name."""
    shown = str(path.relative_to(root))
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                found.append(Function(shown, name, child.end_lineno - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")
    return found


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> list[Function]:
    """Every function of the tree at ``root`` longer than ``limit`` lines."""
    return [
        function
        for path in source_files(root)
        for function in functions_of(path, root)
        if function.lines > limit
    ]


# ------------------------------------------------------------------ the tree
def test_every_module_is_checked():
    names = {module_name(p, ROOT)[0] for p in source_files(ROOT)}
    assert {"fedleak.validation", "fedleak.strategies.base", "fedleak.cli"} <= names
    assert any(n.startswith("fedleak.attacks.membership.") for n in names)
    assert any(n.startswith("fedleak.clients.") for n in names)
    assert len(names) > 80


def test_imports_follow_the_arrows():
    problems = violations(ROOT)
    assert not problems, "\n".join(problems)


def test_core_and_attacks_never_import_flower():
    flower = [
        str(imp)
        for path in source_files(ROOT)
        if layer_of(module_name(path, ROOT)[0]) in ("core", "attacks")
        for imp in imports_of(path, ROOT)
        if imp.target.split(".")[0] == "flwr"
    ]
    assert not flower, "\n".join(flower)


def test_architecture_md_maps_every_package():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    mapped = set(re.findall(r"`(fedleak(?:\.\w+)?)`", text))
    packages = {
        module_name(p, ROOT)[0]
        for p in source_files(ROOT)
        if p.name == "__init__.py" and module_name(p, ROOT)[0].count(".") == 1
    }
    assert packages <= mapped, packages - mapped
    for layer in ALLOWED:
        assert re.search(rf"^{layer}\s+->", text, re.M), layer


def test_no_function_is_longer_than_the_limit():
    too_long = [str(f) for f in long_functions(ROOT)]
    assert not too_long, (
        f"split these into functions of at most {MAX_FUNCTION_LINES} lines:\n"
        + "\n".join(too_long)
    )


# ------------------------------------------------- the checker catches breaks
def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for package in ("fedleak", "fedleak/privacy", "strategies", "clients", "attacks"):
        write(tmp_path, f"{package}/__init__.py", "")
    write(tmp_path, "fedleak/experiments/__init__.py", "")
    write(tmp_path, "fedleak/bench/__init__.py", "")
    return tmp_path


def test_a_clean_tree_passes(tree: Path):
    write(tree, "attacks/ok.py", "from fedleak.privacy import x\nimport numpy\n")
    write(tree, "clients/ok.py", "import flwr\nfrom fedleak.attacks import ok\n")
    write(tree, "fedleak/bench/ok.py", "import flwr\nfrom fedleak import strategies\n")
    assert violations(tree) == []


@pytest.mark.parametrize(
    ("relative", "text", "expected"),
    [
        (
            "fedleak/privacy/bad.py",
            "def f():\n    from fedleak.strategies import SyncSGD\n",
            "fedleak/privacy/bad.py:2 imports fedleak.strategies.SyncSGD: "
            "core -> strategies",
        ),
        (
            "fedleak/privacy/bad.py",
            "from ..experiments import run\n",
            "fedleak/privacy/bad.py:1 imports fedleak.experiments.run: "
            "core -> experiments",
        ),
        (
            "attacks/bad.py",
            "import flwr.app\n",
            "attacks/bad.py:1 imports flwr.app: Flower in the attacks layer",
        ),
        (
            "fedleak/privacy/bad.py",
            "def f():\n    from flwr.common import log\n",
            "fedleak/privacy/bad.py:2 imports flwr.common.log: Flower in the core",
        ),
        (
            "attacks/bad.py",
            "from fedleak.clients import HonestClient\n",
            "attacks/bad.py:1 imports fedleak.clients.HonestClient: attacks -> clients",
        ),
        (
            "clients/bad.py",
            "from fedleak import strategies\n",
            "clients/bad.py:1 imports fedleak.strategies: clients -> strategies",
        ),
        (
            "strategies/bad.py",
            "from .. import clients\n",
            "strategies/bad.py:1 imports fedleak.clients: strategies -> clients",
        ),
        (
            "fedleak/bad.py",
            "import importlib\nimportlib.import_module('fedleak.bench')\n",
            "fedleak/bad.py:2 imports fedleak.bench: core -> bench",
        ),
        (
            "fedleak/experiments/bad.py",
            "from fedleak.bench import BENCHMARKS\n",
            "fedleak/experiments/bad.py:1 imports fedleak.bench.BENCHMARKS: "
            "experiments -> bench",
        ),
    ],
    ids=[
        "function-level",
        "relative",
        "flower-in-attacks",
        "flower-in-core",
        "attacks-to-clients",
        "clients-to-strategies",
        "strategies-to-clients-relative",
        "import-module",
        "experiments-to-bench",
    ],
)
def test_a_wrong_arrow_is_named(tree: Path, relative: str, text: str, expected: str):
    write(tree, relative, text)
    problems = violations(tree)
    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems[0]


def test_the_core_and_attacks_load_without_flower_or_ray():
    """The static arrows above, checked at run time: importing every module of
    the core and of ``attacks`` loads neither Flower nor Ray."""
    import subprocess
    import sys

    skip = ("fedleak.runtime", "fedleak.experiments", "fedleak.bench", "fedleak.cli")
    names = []
    for root, package in (
        (ROOT / "fedleak", "fedleak"),
        (ROOT / "attacks", "fedleak.attacks"),
    ):
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            if not name.startswith(skip):
                names.append(name)
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('flwr', 'ray'))\n"
        "print(loaded[:10])\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600
    )
    assert len(names) > 50
    assert done.returncode == 0, done.stdout + done.stderr


def _function(name: str, lines: int, indent: str = "") -> str:
    """Source of a function ``name`` spanning exactly ``lines`` lines."""
    body = [f"{indent}    x = {i}" for i in range(lines - 2)]
    return "\n".join([f"{indent}def {name}():", *body, f"{indent}    return x"]) + "\n"


def test_a_long_function_is_named_with_its_length(tree: Path):
    write(
        tree,
        "attacks/long.py",
        _function("fits", MAX_FUNCTION_LINES)
        + _function("too_long", MAX_FUNCTION_LINES + 1)
        + "class Holder:\n"
        + _function("method", MAX_FUNCTION_LINES + 5, indent="    "),
    )
    write(tree, "fedleak/privacy/short.py", _function("short", 3))
    found = [str(f) for f in long_functions(tree)]
    assert found == [
        f"attacks/long.py:too_long is {MAX_FUNCTION_LINES + 1} lines",
        f"attacks/long.py:Holder.method is {MAX_FUNCTION_LINES + 5} lines",
    ]


def test_a_nested_function_counts_on_its_own(tree: Path):
    inner = _function("inner", 50, indent="    ")
    write(tree, "clients/nested.py", "def outer():\n" + inner + "    return inner\n")
    assert [
        (f.name, f.lines) for f in functions_of(tree / "clients/nested.py", tree)
    ] == [
        ("outer", 52),
        ("outer.inner", 50),
    ]
    assert [f.name for f in long_functions(tree, limit=51)] == ["outer"]
