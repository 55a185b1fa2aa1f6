"""Benchmarks: ``fedleak bench <name>``, one module each, one record writer.

Each benchmark is a module of this package that defines

``run_<name>_bench(out, ...) -> dict``
    The work: it measures fedleak and, where one exists, its peer side by
    side in the same run, and writes one JSON record through
    :class:`fedleak.bench.record.BenchRecord`.
``command(...)``
    The command line (typer-annotated parameters); it calls the function
    above and prints a summary table. Errors are not caught here: the
    ``fedleak`` entry point turns every :class:`fedleak.errors.FedleakError`
    into one line and exit status 2.

:data:`BENCHMARKS` lists them without importing any: ``fedleak --help`` and
``fedleak bench --help`` read only this table, and a benchmark's module (with
its torch, Flower or Ray imports) loads when that benchmark is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Final

from fedleak.errors import ConfigError

__all__ = ["BENCHMARKS", "Benchmark", "find_benchmark"]


@dataclass(frozen=True, slots=True)
class Benchmark:
    """One ``fedleak bench`` command: its name, module and one-line summary."""

    name: str
    module: str
    summary: str

    def command(self) -> Callable[..., Any]:
        """Import the benchmark's module and return its ``command`` function."""
        loaded = import_module(f"{__name__}.{self.module}")
        command: Callable[..., Any] = loaded.command
        return command


#: Every benchmark, in the order ``fedleak bench --help`` lists them.
BENCHMARKS: Final[tuple[Benchmark, ...]] = (
    Benchmark(
        "engine",
        "engine",
        "A simulated round vs the compute it contains: fedleak's engine vs Flower's.",
    ),
    Benchmark(
        "strategies",
        "strategies",
        "Time rounds of SyncSGD and ModelAveraging vs Flower's FedAvg, same "
        "simulation.",
    ),
    Benchmark(
        "secagg",
        "secagg",
        "Secure aggregation (double masking, thesis mode) vs FedAvg and Flower's "
        "SecAgg+, the primitives' floor, Table 4.1.",
    ),
    Benchmark(
        "secagg-attacks",
        "secagg_attacks",
        "A malicious server against secure aggregation: what each attack recovers.",
    ),
    Benchmark(
        "property",
        "property",
        "Property inference against Flower clients: AUC, scores and plots.",
    ),
    Benchmark(
        "membership",
        "membership",
        "Embedding-layer membership inference: precision vs batch size (Table 7.2).",
    ),
    Benchmark(
        "defenses",
        "defenses",
        "Defenses of Ch. 7.3 vs membership and property inference (Tables 7.5-7.7).",
    ),
    Benchmark(
        "sketches",
        "sketches",
        "Count-Min vs DataSketches, private recommender, heat maps, private median.",
    ),
    Benchmark(
        "dpgm",
        "dpgm",
        "DPGM figure analogues: epsilon, clustering, counting queries, samples.",
    ),
    Benchmark(
        "mi-generative",
        "mi_generative",
        "MI on generative models: white/black-box, auxiliary, Monte Carlo.",
    ),
    Benchmark(
        "mi-classifier",
        "mi_classifier",
        "Shadow-model and loss-threshold MI on classifiers: LDP vs CDP.",
    ),
    Benchmark(
        "audit",
        "audit",
        "Audit DP-SGD with the DI adversary: advantage, beliefs, empirical epsilon.",
    ),
    Benchmark(
        "ppgf",
        "ppgf",
        "Seed 003's framework: accuracy and MI AUC vs epsilon, next to DP-SGD.",
    ),
    Benchmark(
        "report",
        "report",
        "The seeds' tables and figures vs the records: benchmarks/REPRODUCTION.md.",
    ),
)


def find_benchmark(name: str) -> Benchmark:
    """Return the benchmark called ``name``.

    Raises
    ------
    ConfigError
        If there is none, naming the benchmarks there are.
    """
    for bench in BENCHMARKS:
        if bench.name == name:
            return bench
    names = ", ".join(b.name for b in BENCHMARKS)
    raise ConfigError(f"no benchmark called {name!r}; choose one of: {names}")
