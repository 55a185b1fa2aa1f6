"""``fedleak bench secagg-attacks``: a malicious server against both modes.

:func:`fedleak.attacks.secagg.run_secagg_attacks` plays every attack
(straggler, false dropout, group of one, round replay, low threshold, split
view, downgrade) against fedleak's client sessions in double-masking and
thesis mode, and against the seed's unguarded client, in this process. The
record gives, per attack and mode, whether the server recovered the target's
vector (``recovered``), the largest error of its reconstruction against the
truth (``max_abs_error``; ``null`` when every request was refused) and which
client guard refused.

A full run also plays the issue's required attacks over a Flower simulation
(8 nodes, fedleak's engine) with
:class:`fedleak.strategies.malicious_secagg.MaliciousSecureAggregation`, so
the same outcomes are shown against the ClientApp's secure-aggregation mod.

``checks`` states the expected shape: every attack fails against the default
(double masking); the straggler and false-dropout attacks succeed against
thesis mode.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from fedleak.attacks.secagg import AttackOutcome, AttackReport, run_secagg_attacks

from .console import out as console
from .console import say as print_progress
from .console import written
from .record import BenchRecord

__all__ = ["command", "expected_shape", "run_secagg_attacks_bench"]

#: Attacks that must recover the target in thesis mode (the seed's limit).
THESIS_BREAKS = ("straggler", "false-dropout")
_FLOWER_NODES = 8


def expected_shape(results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, bool]:
    """Check ``results[attack][mode]`` against the issue's expectations."""
    double = [modes["double-masking"] for modes in results.values()]
    return {
        "every_attack_fails_against_double_masking": bool(double)
        and not any(o["recovered"] for o in double),
        "straggler_and_false_dropout_recover_in_thesis_mode": all(
            results.get(a, {}).get("thesis", {}).get("recovered") is True
            for a in THESIS_BREAKS
        ),
    }


def _update(partition: int, tag: int) -> dict[str, np.ndarray]:
    """Return a client's known update for ``(partition, tag)`` (the Flower run)."""
    rng = np.random.default_rng([0xA77AC, partition, tag])
    return {"w": rng.uniform(-1.0, 1.0, 64).astype(np.float32)}


def _flower_client_app() -> Any:
    from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    from fedleak import protocol
    from fedleak.clients import add_identify_handler
    from fedleak.clients.secagg import make_secagg_mod
    from fedleak.strategies.malicious_secagg import ATTACK_TAG

    app = ClientApp(mods=[make_secagg_mod(accept_thesis=True)])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        value = msg.content.config_records[protocol.CONFIG_KEY].get(ATTACK_TAG, 0)
        tag = value if isinstance(value, int) else 0
        arrays = ArrayRecord({k: Array(v) for k, v in _update(partition, tag).items()})
        metrics = MetricRecord({protocol.NUM_EXAMPLES: 1})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    return add_identify_handler(app)


def _flower_run(seed: int, verbose: bool) -> dict[str, Any]:
    """Play the required attacks over a Flower simulation; outcomes per attack."""
    from flwr.app import Array, ArrayRecord, Context
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    from fedleak.runtime.engine import (
        EngineGrid,
        fast_engine,
        simulation_backend_config,
    )
    from fedleak.runtime.logs import quiet_flower
    from fedleak.strategies.malicious_secagg import MaliciousSecureAggregation

    played: list[AttackOutcome] = []
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = MaliciousSecureAggregation(truth=_update, seed=seed)
        initial = ArrayRecord({"w": Array(np.zeros(64, dtype=np.float32))})
        strategy.start(
            grid=EngineGrid(grid, timing=False), initial_arrays=initial, num_rounds=1
        )
        played.extend(strategy.outcomes)

    started = time.perf_counter()
    with quiet_flower(verbose), fast_engine():
        run_simulation(
            server_app=server,
            client_app=_flower_client_app(),
            num_supernodes=_FLOWER_NODES,
            backend_config=simulation_backend_config(1.0, verbose=verbose),
            verbose_logging=verbose,
        )
    report = AttackReport(tuple(played)).to_dict()
    return {
        "nodes": _FLOWER_NODES,
        "vector_length": 64,
        "results": report["results"],
        "wall_s": time.perf_counter() - started,
    }


def run_secagg_attacks_bench(
    out: str | Path, *, quick: bool = False, seed: int = 0, verbose: bool = False
) -> dict[str, Any]:
    """Play every attack against both modes and write the record to ``out``.

    Parameters
    ----------
    out : str or pathlib.Path
        The JSON record (written atomically).
    quick : bool, default=False
        8 clients and vectors of 64 entries, in this process only; a full run
        uses 16 clients and 10,000 entries and adds the Flower simulation.
    seed : int, default=0
        Seed of the inputs, keys and groups.
    verbose : bool, default=False
        Show Flower's and Ray's logs (full run).

    Returns
    -------
    dict
        The record: ``settings``, ``results[attack][mode]``,
        ``seed_client[attack][mode]``, ``flower`` (full run) and ``checks``.
    """
    started = time.perf_counter()
    n_clients, length = (8, 64) if quick else (16, 10_000)
    report = run_secagg_attacks(n_clients=n_clients, length=length, seed=seed).to_dict()
    record = BenchRecord("secagg-attacks", Path(out))
    record.update(
        {
            "description": __doc__,
            "quick": quick,
            "settings": report["settings"],
            "results": report["results"],
            "seed_client": report["seed_client"],
            "checks": expected_shape(report["results"]),
        }
    )
    if not quick:
        flower = _flower_run(seed, verbose)
        record["flower"] = flower
        record["checks"]["flower_run_agrees"] = all(
            flower["results"][a][m]["recovered"] == report["results"][a][m]["recovered"]
            for a in flower["results"]
            for m in flower["results"][a]
        )
    record["wall_s"] = time.perf_counter() - started
    return record.write()


def command(
    out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
        "bench-secagg-attacks.json"
    ),
    quick: Annotated[
        bool, typer.Option("--quick", help="8 clients, 64 entries, no Flower run.")
    ] = False,
    seed: Annotated[int, typer.Option(help="Seed of inputs, keys, groups.")] = 0,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Play a malicious server against both modes; show what it recovers."""
    if not quick:
        print_progress("attacks in this process, then over a Flower simulation")
    record = run_secagg_attacks_bench(out, quick=quick, seed=seed, verbose=verbose)
    table = Table(
        "attack", "mode", "client", "recovered", "max abs error", "refused by"
    )
    for key, client in (("results", "fedleak"), ("seed_client", "seed")):
        for attack, modes in record[key].items():
            for mode, o in modes.items():
                error = o["max_abs_error"]
                table.add_row(
                    attack,
                    mode,
                    client,
                    str(o["recovered"]),
                    "-" if error is None else f"{error:.3g}",
                    ", ".join(o["refused_by"]) or "-",
                )
    console.print(table)
    if "flower" in record:
        flower = Table("attack (Flower run)", "mode", "recovered", "max abs error")
        for attack, modes in record["flower"]["results"].items():
            for mode, o in modes.items():
                error = o["max_abs_error"]
                flower.add_row(
                    attack,
                    mode,
                    str(o["recovered"]),
                    "-" if error is None else f"{error:.3g}",
                )
        console.print(flower)
    for name, held in record["checks"].items():
        console.print(f"{name}: {held}", highlight=False)
    written(out)
