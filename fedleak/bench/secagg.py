"""``fedleak bench secagg``: fedleak's secure aggregation vs FedAvg and SecAgg+.

Part 1, federated (one Flower simulation per (N, L), all methods in it): the
same N clients, each holding a fixed float32 vector of length L, answer

``fedavg``
    Flower's Message-API ``FedAvg`` (no protection): the floor;
``secagg``
    ``SecureAggregation(FedAvg)`` with :func:`fedleak.clients.secagg_mod`;
``secaggplus``
    Flower's own legacy ``SecAggPlusWorkflow(num_shares=3,
    reconstruction_threshold=2)`` with ``secaggplus_mod`` (its defaults
    otherwise: clipping range 8, quantisation 2^22, max weight 1000).

Methods run in blocks rotated from block to block; round times come from the
server-side evaluation hook each method calls after every round (its first
round, with key setup and Ray start-up, is dropped). The aggregate of every
round is compared with the exact float64 mean of the clients' vectors: max
absolute error and max absolute error relative to the largest true value.

Part 2, in this process (no Flower): the floor the primitives set (AES-256-CTR
keystream bytes/s, X25519 agreements/s, in-place uint32 additions/s) next to
fedleak's client masking time (:func:`fedleak.secagg.mask`, N-1 peers) and
server aggregation time (:class:`fedleak.secagg.GroupTally`), for the
federated settings and for the seed thesis' setting (N = 100 and 1,000 users,
L = 4,896), which reports 2.7 s / 27 s per user and 78 ms / 780 ms at the
tally (2017, JavaScript).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from fedleak.errors import ConfigError, FedleakError
from fedleak.experiments.runner import quiet_flower
from fedleak.secagg import (
    FixedPoint,
    GroupTally,
    KeyPair,
    agree,
    derive_seed,
    expand,
    mask,
    secure_sum,
)

from .console import out as console
from .console import say as print_progress
from .console import written
from .record import BenchRecord

__all__ = [
    "bytes_table",
    "client_vector",
    "command",
    "measure_primitives",
    "run_secagg_bench",
]

#: Seed 000 Table 4.1 (700 programs): users, sketch size L, bytes tally->user,
#: bytes user->tally.
THESIS_TABLE_4_1 = ((100, 4896, 3200, 19584), (1000, 486, 32000, 1944))


def bytes_table() -> list[dict[str, Any]]:
    """Measure the bytes per user in the seed's Table 4.1 settings (``secure_sum``).

    Each row runs the whole protocol for N users and a vector of L words
    (32-bit) and reports what one user sends (its public key, its masked
    vector) and receives (its group's public keys and ids), next to the
    thesis' figures.
    """
    rows = []
    for n, length, thesis_down, thesis_up in THESIS_TABLE_4_1:
        inputs = [np.zeros(length) for _ in range(n)]
        fixed = FixedPoint.auto(1.0, n, modulus_bits=32)
        result = secure_sum(inputs, fixed_point=fixed, seed=0)
        rows.append(
            {
                "n_users": n,
                "length": length,
                "user_to_server_bytes": result.bytes_up["upload"] // n,
                "user_key_bytes": result.bytes_up["advertise"] // n,
                "server_to_user_bytes": result.bytes_down["keys"] // n,
                "thesis_user_to_tally_bytes": thesis_up,
                "thesis_tally_to_user_bytes": thesis_down,
            }
        )
    return rows


ProgressFn = Callable[[str], None]


def client_vector(partition: int, length: int) -> np.ndarray:
    """Return client ``partition``'s fixed float32 vector (values in about [-1, 1])."""
    rng = np.random.default_rng([0xBE7C, partition])
    return rng.uniform(-1.0, 1.0, size=length).astype(np.float32)


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_primitives(n_users: int, length: int, repeats: int = 5) -> dict[str, float]:
    """Time the primitives and fedleak's masking and tally at (N, L), in this process.

    Returns
    -------
    dict
        ``prg_bytes_per_s``, ``x25519_per_s``, ``uint_add_per_s`` (elements),
        ``floor_mask_s`` (what N-1 agreements, keystreams and additions cost),
        ``client_mask_s`` (fedleak's :func:`mask`), ``server_sum_s`` (fedleak's
        tally over N uploads), and their ratio.
    """
    rng = np.random.default_rng(0)
    keys = [KeyPair.generate(rng) for _ in range(n_users)]
    peers = {i: k.public for i, k in enumerate(keys)}
    seed = derive_seed(os.urandom(32), round=1, group=0, purpose=b"mask", pair=(0, 1))
    buffer = np.empty(length, dtype=np.uint32)
    prg_s = _median_time(lambda: expand(seed, length, np.uint32, out=buffer), repeats)
    count = 200
    x_s = (
        _median_time(
            lambda: [
                agree(keys[0].secret, keys[1 + i % (n_users - 1)].public)
                for i in range(count)
            ],
            repeats,
        )
        / count
    )
    acc = np.zeros(length, dtype=np.uint32)
    add_s = _median_time(lambda: np.add(acc, buffer, out=acc), repeats)
    floor = (n_users - 1) * (x_s + prg_s + add_s)
    encoded = rng.integers(0, 2**32, size=length, dtype=np.uint32)
    mask_s = _median_time(
        lambda: mask(encoded, 0, keys[0], peers, round=1, group=0), max(1, repeats // 2)
    )
    uploads = [
        rng.integers(0, 2**32, size=length, dtype=np.uint32)
        for _ in range(min(n_users, 100))
    ]

    def tally() -> None:
        t = GroupTally(
            round=1, group=0, members=list(range(n_users)), length=length, min_online=3
        )
        for i in range(n_users):
            t.add_upload(i, 1, uploads[i % len(uploads)])
        t.close()
        t.result()

    sum_s = _median_time(tally, max(1, repeats // 2))
    return {
        "n_users": n_users,
        "length": length,
        "prg_bytes_per_s": length * 4 / prg_s,
        "x25519_per_s": 1.0 / x_s,
        "uint_add_per_s": length / add_s,
        "floor_mask_s": floor,
        "client_mask_s": mask_s,
        "client_mask_vs_floor": mask_s / floor,
        "server_sum_s": sum_s,
    }


def _federated(
    n_clients: int, length: int, rounds: int, blocks: int, verbose: bool
) -> dict[str, Any]:
    from flwr.app import (
        Array,
        ArrayRecord,
        Context,
        Message,
        MetricRecord,
        RecordDict,
    )
    from flwr.client import NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.clientapp import ClientApp
    from flwr.common import ndarrays_to_parameters
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    from fedleak.clients import secagg_mod
    from fedleak.strategies import SecureAggregation

    vectors = np.stack(
        [client_vector(p, length).astype(np.float64) for p in range(n_clients)]
    )
    true_update = vectors.mean(axis=0)

    class _Client(NumPyClient):
        def __init__(self, partition: int) -> None:
            self.partition = partition

        def fit(
            self, parameters: list[np.ndarray], config: dict[str, Any]
        ) -> tuple[Any, int, dict[str, Any]]:
            return [parameters[0] + client_vector(self.partition, length)], 1, {}

    legacy = ClientApp(
        client_fn=lambda ctx: _Client(int(ctx.node_config["partition-id"])).to_client(),
        mods=[secaggplus_mod],
    )
    modern = ClientApp(mods=[secagg_mod])

    @modern.train()
    def train(msg: Message, context: Context) -> Message:
        partition = int(context.node_config["partition-id"])
        w = msg.content.array_records["arrays"]["w"].numpy()
        out = ArrayRecord({"w": Array(w + client_vector(partition, length))})
        return Message(
            RecordDict({"arrays": out, "metrics": MetricRecord({"num-examples": 1})}),
            reply_to=msg,
        )

    client = ClientApp()

    def _is_legacy(msg: Message) -> bool:
        return any(
            k.startswith(("fitins", "evaluateins", "getparametersins"))
            or k.startswith("secaggplus")
            for k in msg.content
        )

    @client.train()
    def dispatch(msg: Message, context: Context) -> Message:
        return legacy(msg, context) if _is_legacy(msg) else modern(msg, context)

    @client.evaluate()
    def dispatch_eval(msg: Message, context: Context) -> Message:
        return legacy(msg, context)

    records: dict[str, dict[str, list[float]]] = {
        name: {"round_s": [], "abs_error": [], "rel_error": []}
        for name in ("fedavg", "secagg", "secaggplus")
    }

    def timer(name: str) -> Callable[[int, np.ndarray], None]:
        state: dict[str, Any] = {"last": None, "prev": None}

        def hook(server_round: int, w: np.ndarray) -> None:
            now = time.perf_counter()
            if server_round > 1 and state["last"] is not None:
                records[name]["round_s"].append(now - state["last"])
            if server_round > 0 and state["prev"] is not None:
                expected = state["prev"] + true_update
                err = float(np.max(np.abs(w.astype(np.float64) - expected)))
                records[name]["abs_error"].append(err)
                records[name]["rel_error"].append(err / float(np.max(np.abs(expected))))
            state["prev"] = w.astype(np.float64)
            state["last"] = time.perf_counter()

        return hook

    initial = np.zeros(length, dtype=np.float32)
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        def run_modern(name: str) -> None:
            hook = timer(name)
            strategy = FedAvg(
                fraction_evaluate=0.0,
                min_train_nodes=n_clients,
                min_available_nodes=n_clients,
            )
            if name == "secagg":
                strategy = SecureAggregation(strategy, max_weight=1)
            strategy.start(
                grid=grid,
                initial_arrays=ArrayRecord({"w": Array(initial)}),
                num_rounds=rounds,
                evaluate_fn=lambda r, arrays: hook(r, arrays["w"].numpy()),
            )

        def run_secaggplus() -> None:
            hook = timer("secaggplus")

            def evaluate(r: int, parameters: Any, config: Any) -> None:
                hook(r, parameters[0])

            strategy = LegacyFedAvg(
                fraction_fit=1.0,
                fraction_evaluate=0.0,
                min_fit_clients=n_clients,
                min_available_clients=n_clients,
                initial_parameters=ndarrays_to_parameters([initial]),
                evaluate_fn=evaluate,
            )
            legacy_context = LegacyContext(
                context=context,
                config=ServerConfig(num_rounds=rounds),
                strategy=strategy,
            )
            workflow = DefaultWorkflow(
                fit_workflow=SecAggPlusWorkflow(
                    num_shares=3, reconstruction_threshold=2, timeout=600
                )
            )
            workflow(grid, legacy_context)

        methods: dict[str, Callable[[], None]] = {
            "fedavg": lambda: run_modern("fedavg"),
            "secagg": lambda: run_modern("secagg"),
            "secaggplus": run_secaggplus,
        }
        names = list(methods)
        for block in range(blocks):
            for name in names[block % 3 :] + names[: block % 3]:
                methods[name]()

    with quiet_flower(verbose):
        run_simulation(
            server_app=server,
            client_app=client,
            num_supernodes=n_clients,
            backend_config={
                "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                "init_args": {"include_dashboard": False, "log_to_driver": verbose},
            },
            verbose_logging=verbose,
        )
    out: dict[str, Any] = {}
    for name, rec in records.items():
        if not rec["round_s"]:
            raise FedleakError(f"the benchmark recorded no round of {name}")
        out[name] = {
            "median_round_s": statistics.median(rec["round_s"]),
            "round_s": rec["round_s"],
            "max_abs_error": max(rec["abs_error"]),
            "max_rel_error": max(rec["rel_error"]),
        }
    base = out["fedavg"]["median_round_s"]
    for name in out:
        out[name]["vs_fedavg"] = out[name]["median_round_s"] / base
    out["secaggplus_vs_secagg"] = (
        out["secaggplus"]["median_round_s"] / out["secagg"]["median_round_s"]
    )
    return out


def run_secagg_bench(
    out: str | Path,
    *,
    clients: Sequence[int] = (10, 30),
    lengths: Sequence[int] = (100_000, 1_000_000),
    rounds: int = 4,
    blocks: int = 2,
    seed_setting: Sequence[int] = (100, 1000),
    verbose: bool = False,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Run both parts and write the JSON report to ``out`` (atomically)."""
    if rounds < 2 or blocks < 1 or min(clients) < 3:
        raise ConfigError(
            "bench secagg needs rounds >= 2, blocks >= 1 and >= 3 clients"
        )
    say = progress or (lambda _: None)
    started = time.perf_counter()
    report = BenchRecord("secagg", Path(out))
    report.update(
        {
            "description": __doc__,
            "settings": {
                "clients": list(clients),
                "lengths": list(lengths),
                "rounds": rounds,
                "blocks": blocks,
            },
            "federated": [],
            "primitives": [],
            "seed_setting": [],
        }
    )
    for n in clients:
        for length in lengths:
            say(f"federated N={n} L={length}")
            report["federated"].append(
                {
                    "n_clients": n,
                    "length": length,
                    **_federated(n, length, rounds, blocks, verbose),
                }
            )
            say(f"primitives N={n} L={length}")
            report["primitives"].append(measure_primitives(n, length))
    say("bytes per user in the seed's Table 4.1 settings")
    report["table_4_1"] = bytes_table()
    say("client masking N=100 L=100000")
    report["masking_target"] = measure_primitives(100, 100_000)
    for n in seed_setting:
        say(f"seed setting N={n} L=4896")
        measured: dict[str, Any] = dict(measure_primitives(n, 4896, repeats=3))
        measured["thesis_client_s"] = 2.7 if n == 100 else 27.0 if n == 1000 else None
        measured["thesis_server_s"] = 0.078 if n == 100 else 0.78 if n == 1000 else None
        report["seed_setting"].append(measured)
    report["wall_s"] = time.perf_counter() - started
    return report.write()


def command(
    out: Annotated[Path, typer.Option("--out", help="JSON file to write.")] = Path(
        "bench-secagg.json"
    ),
    clients: Annotated[
        list[int] | None, typer.Option("--clients", help="N values (repeatable).")
    ] = None,
    lengths: Annotated[
        list[int] | None, typer.Option("--length", help="L values (repeatable).")
    ] = None,
    rounds: Annotated[int, typer.Option(help="Rounds per method per block.")] = 4,
    blocks: Annotated[int, typer.Option(help="Blocks, methods rotated.")] = 2,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Secure aggregation vs FedAvg and Flower's SecAgg+, plus the primitives' floor."""
    report = run_secagg_bench(
        out,
        clients=clients or (10, 30),
        lengths=lengths or (100_000, 1_000_000),
        rounds=rounds,
        blocks=blocks,
        verbose=verbose,
        progress=print_progress,
    )
    table = Table(
        "N",
        "L",
        "FedAvg s",
        "SA s",
        "SecAgg+ s",
        "SA/FedAvg",
        "SecAgg+/SA",
        "SA rel err",
        "SecAgg+ rel err",
    )
    for row in report["federated"]:
        table.add_row(
            str(row["n_clients"]),
            str(row["length"]),
            f"{row['fedavg']['median_round_s']:.3f}",
            f"{row['secagg']['median_round_s']:.3f}",
            f"{row['secaggplus']['median_round_s']:.3f}",
            f"{row['secagg']['vs_fedavg']:.2f}",
            f"{row['secaggplus_vs_secagg']:.2f}",
            f"{row['secagg']['max_rel_error']:.1e}",
            f"{row['secaggplus']['max_rel_error']:.1e}",
        )
    console.print(table)
    prim = Table("N", "L", "client mask ms", "floor ms", "x floor", "server sum ms")
    for row in [
        *report["primitives"],
        report["masking_target"],
        *report["seed_setting"],
    ]:
        prim.add_row(
            str(row["n_users"]),
            str(row["length"]),
            f"{row['client_mask_s'] * 1e3:.2f}",
            f"{row['floor_mask_s'] * 1e3:.2f}",
            f"{row['client_mask_vs_floor']:.2f}",
            f"{row['server_sum_s'] * 1e3:.2f}",
        )
    console.print(prim)
    seed_bytes = Table("N", "L", "user->server B", "thesis", "server->user B", "thesis")
    for row in report["table_4_1"]:
        seed_bytes.add_row(
            str(row["n_users"]),
            str(row["length"]),
            str(row["user_to_server_bytes"]),
            str(row["thesis_user_to_tally_bytes"]),
            str(row["server_to_user_bytes"]),
            str(row["thesis_tally_to_user_bytes"]),
        )
    console.print(seed_bytes)
    written(out)
