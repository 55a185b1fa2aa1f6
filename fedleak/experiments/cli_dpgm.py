"""``fedleak bench dpgm``: the command (the work is in :mod:`.bench_dpgm`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import FedleakError

__all__ = ["register"]


def register(bench_app: typer.Typer, fail: Callable[[FedleakError], None]) -> None:
    """Add ``fedleak bench dpgm`` to ``bench_app``."""

    @bench_app.command("dpgm")
    def bench_dpgm(
        out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
            "bench-dpgm.json"
        ),
        quick: Annotated[
            bool, typer.Option("--quick", help="CI-sized settings (a few minutes).")
        ] = False,
        seed: Annotated[int, typer.Option(help="Seed of every section.")] = 0,
    ) -> None:
        """DPGM figure analogues: epsilon, clustering, counting queries, samples.

        Tip: run with MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 in
        the environment; DP-SGD's per-sample work is faster with it.
        """
        from .bench_dpgm import run_dpgm_bench

        err = Console(stderr=True)
        console = Console()
        try:
            report = run_dpgm_bench(
                out,
                quick=quick,
                seed=seed,
                progress=lambda text: err.print(f"[dim]{escape(text)}[/]"),
            )
        except FedleakError as error:
            fail(error)
            return
        f53 = report["fig_5_3"]
        table = Table(
            f"ACC ({f53['dataset']})", *(f"eps={e:g}" for e in f53["epsilons"])
        )
        for d, acc in f53["accuracy"]["kernel_rff"].items():
            table.add_row(f"kernel k-means d={d}", *(f"{a:.3f}" for a in acc))
        table.add_row(
            "standard DP k-means",
            *(f"{a:.3f}" for a in f53["accuracy"]["standard_dp_kmeans"]),
        )
        console.print(table)
        for key in ("fig_5_5", "fig_5_6"):
            section = report[key]
            queries = Table(
                f"{section['label']} rel. error", "mode", "DPGM", "MWEM", "DPGM/MWEM"
            )
            for run_key, run in section["dpgm"]["runs"].items():
                eps = run_key.split("eps=")[1]
                peer = section["mwem"]["runs"][eps]
                for mode in ("all", "any"):
                    if mode not in run:
                        queries.add_row(run_key, mode, "refused", "", "")
                        continue
                    queries.add_row(
                        run_key,
                        mode,
                        f"{run[mode]['mean']:.4f}",
                        f"{peer[mode]['mean']:.4f}",
                        f"{run[mode]['ratio_to_mwem']:.2f}",
                    )
            console.print(queries)
        console.print(f"acceptance: {report['acceptance']}", highlight=False)
        console.print(f"written: {out}", highlight=False)
