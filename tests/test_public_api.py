"""The public surfaces tell the truth: what the README and the docstrings name exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import fedleak

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: ``from fedleak.x import a, b`` or ``from fedleak.x import (a, b)`` anywhere
#: in a fenced code block of the README (python and shell alike).
IMPORT = re.compile(r"from (fedleak(?:\.\w+)*) import (\([^)]*\)|[^\n;\\]+)")


def readme_imports() -> list[tuple[str, str]]:
    pairs = []
    for block in re.findall(r"```[\w-]*\n(.*?)```", README, re.S):
        for module, names in IMPORT.findall(block):
            for name in names.strip("()").replace("\n", " ").split(","):
                name = name.split(" as ")[0].strip()
                if name and not name.startswith("#"):
                    pairs.append((module, name))
    return pairs


def test_the_readme_shows_imports():
    # guards the extraction itself: the README has a dozen import lines
    modules = {module for module, _ in readme_imports()}
    assert len(readme_imports()) >= 20
    assert {"fedleak.strategies", "fedleak.clients", "fedleak.dpgm"} <= modules


@pytest.mark.parametrize(("module", "name"), readme_imports())
def test_every_name_the_readme_imports_exists_where_it_says(module, name):
    assert hasattr(importlib.import_module(module), name), f"{module}.{name}"


PACKAGES = [
    "fedleak",
    "fedleak.attacks",
    "fedleak.attacks.audit",
    "fedleak.attacks.membership",
    "fedleak.attacks.property",
    "fedleak.bench",
    "fedleak.clients",
    "fedleak.data",
    "fedleak.dpgm",
    "fedleak.experiments",
    "fedleak.privacy",
    "fedleak.secagg",
    "fedleak.sketches",
    "fedleak.strategies",
    "fedleak.synth",
]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package):
    module = importlib.import_module(package)
    exported = module.__all__
    assert exported, f"{package} exports nothing"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names what it lacks: {missing}"


def test_the_package_docstring_lists_every_subpackage():
    subpackages = {
        f"fedleak.{path.parent.name}"
        for path in (ROOT / "fedleak").glob("*/__init__.py")
    } | {"fedleak.strategies", "fedleak.clients", "fedleak.attacks"}
    doc = fedleak.__doc__ or ""
    assert subpackages <= set(re.findall(r":mod:`(fedleak\.\w+)`", doc)), (
        subpackages - set(re.findall(r":mod:`(fedleak\.\w+)`", doc))
    )


def test_clients_export_the_adversaries_and_the_defended_client():
    import fedleak.clients as clients
    from fedleak.clients.defenses import DefendedClient
    from fedleak.clients.membership import EmbeddingMembershipAdversary
    from fedleak.clients.property import (
        ActivePropertyAdversary,
        PassivePropertyAdversary,
        PropertyTarget,
    )

    for cls in (
        ActivePropertyAdversary,
        PassivePropertyAdversary,
        PropertyTarget,
        EmbeddingMembershipAdversary,
        DefendedClient,
    ):
        assert cls.__name__ in clients.__all__
        assert getattr(clients, cls.__name__) is cls
        assert issubclass(cls, clients.HonestClient)


def test_strategies_docstring_names_every_strategy_it_exports():
    import fedleak.strategies as strategies
    from flwr.serverapp.strategy import Strategy

    doc = strategies.__doc__ or ""
    exported = [getattr(strategies, name) for name in strategies.__all__]
    for obj in exported:
        if isinstance(obj, type) and (
            issubclass(obj, Strategy) or obj.__name__ == "SketchAnalytics"
        ):
            assert f":class:`{obj.__name__}`" in doc, obj.__name__
    assert "Both strategies" not in doc


def test_attack_families_are_exported_from_fedleak_attacks():
    import fedleak.attacks as attacks

    assert set(attacks.__all__) == {"audit", "membership", "property"}
    for family in attacks.__all__:
        assert importlib.import_module(f"fedleak.attacks.{family}").__all__
