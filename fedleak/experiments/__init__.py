"""Experiments: TOML files run as Flower simulations, with recorded results.

This is the one part of fedleak's core that drives Flower.
"""

from .config import ExperimentConfig, apply_overrides, load_config, parse_override
from .runner import RunOutcome, preflight, run_experiment, simulate
from .server import RunRecorder, build_strategy, finish_run, run_federation

__all__ = [
    "ExperimentConfig",
    "RunOutcome",
    "RunRecorder",
    "apply_overrides",
    "build_strategy",
    "finish_run",
    "load_config",
    "parse_override",
    "preflight",
    "run_experiment",
    "run_federation",
    "simulate",
]
