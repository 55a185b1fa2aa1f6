"""``fedleak bench sketches``: the command (the work is in :mod:`.bench_sketches`)."""

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
    """Add ``fedleak bench sketches`` to ``bench_app``."""

    @bench_app.command("sketches")
    def bench_sketches(
        out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
            "bench-sketches.json"
        ),
        quick: Annotated[
            bool, typer.Option("--quick", help="CI-sized settings (about a minute).")
        ] = False,
        seed: Annotated[int, typer.Option(help="Seed of every section.")] = 0,
    ) -> None:
        """Count-Min vs DataSketches, private recommender, heat maps, private median."""
        from .bench_sketches import run_sketch_bench

        err = Console(stderr=True)
        console = Console()
        try:
            report = run_sketch_bench(
                out,
                quick=quick,
                seed=seed,
                progress=lambda text: err.print(f"[dim]{escape(text)}[/]"),
            )
        except FedleakError as error:
            fail(error)
            return
        tp = report["throughput"]
        table = Table(
            "Count-Min (d=5, w=272, 10^6 Zipf items)",
            "fedleak",
            "DataSketches",
            "ratio (median paired)",
            "ratio (best/best)",
        )
        for op in ("update", "query"):
            table.add_row(
                f"{op} M items/s",
                f"{tp[f'fedleak_{op}_items_per_s'] / 1e6:.1f}",
                f"{tp[f'datasketches_{op}_items_per_s'] / 1e6:.1f}",
                f"{tp[f'{op}_ratio']:.2f}x",
                f"{tp[f'{op}_ratio_best']:.2f}x",
            )
        console.print(table)
        rec = report["recommender"]
        fig = Table(
            "users", *(f"avg error eps={e}" for e in rec["fig_4_5b"]["average_error"])
        )
        for i, n in enumerate(rec["fig_4_5b"]["users"]):
            fig.add_row(
                f"{n:,}",
                *(f"{v[i]:.2e}" for v in rec["fig_4_5b"]["average_error"].values()),
            )
        console.print(fig)
        knn = rec["itemknn"]["top10_overlap_with_exact"]
        console.print(
            "ItemKNN top-10 overlap with exact counts: "
            + ", ".join(f"{name} {value:.2f}" for name, value in knn.items()),
            highlight=False,
        )
        bytes_table = Table(
            "N", "L", "user->tally B", "thesis", "tally->user B", "thesis", "exact"
        )
        for row in rec["table_4_1"]:
            bytes_table.add_row(
                str(row["n_users"]),
                str(row["sketch_size"]),
                str(row["user_to_tally_bytes"]),
                str(row["thesis_user_to_tally_bytes"]),
                str(row["tally_to_user_bytes"]),
                str(row["thesis_tally_to_user_bytes"]),
                str(row["masked_equals_plain"]),
            )
        console.print(bytes_table)
        med = report["median"]
        size = Table("CS eps=delta", "d x w", "size %", "median error %")
        for row in med["fig_4_10"]:
            size.add_row(
                f"{row['epsilon_delta']:g}",
                f"{row['depth']} x {row['width']}",
                f"{100 * row['size_overhead']:.1f}",
                f"{100 * row['mean_relative_error']:.1f} "
                f"+- {100 * row['std_relative_error']:.1f}",
            )
        console.print(size)
        enc = med["encrypted_run"]
        console.print(
            f"EC-ElGamal ({enc['backend']}), {enc['sketch_cells']} cells: encrypt "
            f"{enc['encrypt_per_sketch_s'] * 1e3:.1f} ms, online "
            f"{enc['online_encrypt_per_sketch_s'] * 1e3:.2f} ms, aggregate "
            f"{enc['aggregate_per_sketch_s'] * 1e3:.2f} ms per sketch; median "
            f"{enc['median']} (true {enc['true_median']}) in {enc['decryptions']} "
            "decryptions",
            highlight=False,
        )
        console.print(f"written: {out}", highlight=False)
