"""Experiments: TOML files run as Flower simulations, with recorded results.

It drives Flower through :mod:`fedleak.runtime`. Its modules:

:mod:`~fedleak.experiments.config`
    The experiment file: TOML validated with pydantic (no Flower import).
:mod:`~fedleak.experiments.runner`
    ``fedleak run``: the file becomes a Flower simulation on Ray.
:mod:`~fedleak.experiments.server`
    The ServerApp's body, shared by ``fedleak run`` and ``flwr run``.
:mod:`~fedleak.experiments.flower_app`
    The ServerApp and ClientApp that ``flwr run .`` loads.
:mod:`~fedleak.experiments.results`
    The run directory's ``results.json`` and plots.

The names below load their module on first use, so that reading an
experiment file does not import Flower, Ray or torch.
"""

from fedleak._lazy import lazy_exports

_WHERE = {
    "ExperimentConfig": "config",
    "apply_overrides": "config",
    "load_config": "config",
    "parse_override": "config",
    "RunOutcome": "runner",
    "preflight": "runner",
    "run_experiment": "runner",
    "simulate": "runner",
    "RunRecorder": "server",
    "build_strategy": "server",
    "finish_run": "server",
    "run_federation": "server",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
__all__ = sorted(_WHERE)
