"""Shared fixtures: Flower's task identity for building instruction messages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flwr.supercore.task_identity import TaskIdentity


@pytest.fixture
def task_identity() -> Iterator[None]:
    """Set the identity Flower stamps on instruction messages (as a ServerApp has)."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved
