"""Shared fixtures: Flower's task identity for building instruction messages.

Under mutation testing (``scripts/mutation.py``, which runs the tests inside
mutmut's process) Hypothesis does not shrink a failing example: a mutant is
killed by the first failure, and shrinking a failing protocol run (many
clients, many rounds) takes longer than mutmut's time limit, so a detected
mutant would be recorded as a timeout instead of a kill.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from flwr.supercore.task_identity import TaskIdentity
from hypothesis import Phase, settings

settings.register_profile(
    "mutation", phases=(Phase.explicit, Phase.reuse, Phase.generate)
)
if "mutmut" in sys.modules:
    settings.load_profile("mutation")


@pytest.fixture
def task_identity() -> Iterator[None]:
    """Set the identity Flower stamps on instruction messages (as a ServerApp has)."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved
