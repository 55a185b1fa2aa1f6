"""In-process costs of one secure-aggregation round, beside the primitives' floor.

:func:`measure_costs` times, in this process and for each ``(N, L)``:

- ``round`` per mode: one client's upload work (encode, X25519 with each
  peer, pairwise and self masks, Shamir split and sealing of the shares),
  one client's unmask work (opening the forwarded shares, recoveries), the
  server's work on the uploads (the running sum) and at the unmask stage
  (recoveries, rebuilding every self-mask seed, expanding and removing the
  self-masks), and the bytes one client sends and receives;
- ``floor``: what the primitives alone cost a client -- ``N - 1`` X25519
  agreements, ``N`` AES-CTR expansions of ``L`` words and as many in-place
  additions (pairwise masks and the self-mask), and one Shamir split for
  ``N - 1`` holders -- with fedleak's vectorised Shamir and, for comparison,
  pycryptodome's (what Flower's SecAgg+ uses; split and combine of a
  32-byte seed as two 16-byte chunks);
- the ratios: double masking over thesis mode (client and server), the
  client's double-masked upload over the floor, and pycryptodome's Shamir
  over fedleak's.

Every figure is the median over ``repeats`` blocks, each running both modes
(fresh keys) and the floor in a rotated order, all in one process; ratios are
medians of the per-block ratios, so the modes compare under the same load.
A client's work and the floor are timed twice: wall-clock seconds (``*_s``)
and the CPU seconds of the measuring thread (``*_cpu_s``). On a machine whose
cores other jobs share, a 10-40 ms upload is preempted where the floor's
sub-millisecond primitives mostly are not, so the wall-clock ratio measures
the load as much as the work; the CPU ratio does not (each primitive and
each client step runs in the calling thread).
It is the measurement a benchmark command reports; it asserts nothing about
speed.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from .client import ClientGuards, ClientSession
from .constants import MODES, Mode
from .fixed_point import FixedPoint
from .keys import KeyPair, agree
from .prg import expand
from .server import ServerSession
from .settings import ProtocolSettings
from .shamir import SECRET_WORDS, random_elements, split

__all__ = ["measure_costs", "measure_floor", "measure_round"]


def _clocks() -> tuple[float, float]:
    """Wall-clock and this thread's CPU time, in seconds."""
    return time.perf_counter(), time.thread_time()


def _median(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall-clock and CPU seconds of ``fn`` over ``repeats`` calls."""
    fn()  # warm-up
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = _clocks()
        fn()
        wall_end, cpu_end = _clocks()
        walls.append(wall_end - wall)
        cpus.append(cpu_end - cpu)
    return statistics.median(walls), statistics.median(cpus)


def _round_once(
    n_clients: int,
    length: int,
    mode: Mode,
    encoded: list[np.ndarray],
    truth: np.ndarray,
    fixed: FixedPoint,
    timed: set[int],
) -> dict[str, Any]:
    """Run and time one round with fresh sessions; return its figures."""
    server = ServerSession(ProtocolSettings(mode=mode), seed=0)
    guards = ClientGuards(accept_thesis=True)
    clients = [ClientSession.start(i, guards) for i in range(n_clients)]
    for i, c in enumerate(clients):
        server.add_advertisement(i, c.advertise_reply())
    aggregation = server.begin_round(range(n_clients), length=length, modulus_bits=32)
    uploads: list[tuple[float, float]] = []
    unmasks: list[tuple[float, float]] = []
    for i, request in aggregation.upload_requests().items():
        wall, cpu = _clocks()
        plan = clients[i].plan_upload(request)
        reply = clients[i].upload(plan, encoded[i])
        if i in timed:
            wall_end, cpu_end = _clocks()
            uploads.append((wall_end - wall, cpu_end - cpu))
        aggregation.add_upload(i, reply)
    for i, request in aggregation.unmask_requests().items():
        wall, cpu = _clocks()
        reply = clients[i].unmask(request)
        if i in timed:
            wall_end, cpu_end = _clocks()
            unmasks.append((wall_end - wall, cpu_end - cpu))
        aggregation.add_unmask(i, reply)
    result = aggregation.finish()
    total = result.groups[0].total
    if total is None:  # pragma: no cover - no dropouts in this measurement
        raise ConfigError(f"the measured round failed: {result.groups[0].failure}")
    upload, upload_cpu = (statistics.median(t) for t in zip(*uploads, strict=True))
    unmask, unmask_cpu = (
        (statistics.median(t) for t in zip(*unmasks, strict=True))
        if unmasks
        else (0.0, 0.0)
    )
    return {
        "client_upload_s": upload,
        "client_unmask_s": unmask,
        "client_total_s": upload + unmask,
        "client_upload_cpu_s": upload_cpu,
        "client_unmask_cpu_s": unmask_cpu,
        "client_total_cpu_s": upload_cpu + unmask_cpu,
        "server_upload_s": result.seconds["upload"],
        "server_unmask_s": result.seconds["unmask"],
        "server_total_s": result.seconds["upload"] + result.seconds["unmask"],
        "bytes_up_per_client": sum(
            v for k, v in result.bytes_up.items() if k != "advertise"
        )
        // n_clients,
        "bytes_down_per_client": sum(result.bytes_down.values()) // n_clients,
        "max_abs_error": float(np.max(np.abs(fixed.decode(total) - truth))),
    }


def _inputs(
    n_clients: int, length: int
) -> tuple[list[np.ndarray], np.ndarray, FixedPoint]:
    fixed = FixedPoint.auto(1.0, n_clients, modulus_bits=32)
    rng = np.random.default_rng([n_clients, length])
    xs = [rng.uniform(-1.0, 1.0, length) for _ in range(n_clients)]
    return [fixed.encode(x)[0] for x in xs], np.sum(xs, axis=0), fixed


def _medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in rows[0]:
        values = [r[key] for r in rows]
        out[key] = max(values) if key == "max_abs_error" else statistics.median(values)
    return out


def measure_round(
    n_clients: int,
    length: int,
    mode: Mode,
    *,
    repeats: int = 3,
    clients_timed: int = 5,
) -> dict[str, Any]:
    """Time one round of ``mode`` at ``(N, L)`` (no dropouts), per stage.

    Parameters
    ----------
    n_clients : int
        Clients in the one group (>= 3).
    length : int
        Words per vector (uint32).
    mode : {"double-masking", "thesis"}
        Protocol mode.
    repeats : int, default=3
        Rounds measured (fresh sessions each); figures are medians.
    clients_timed : int, default=5
        Clients whose upload and unmask work is timed per round (the others'
        replies are made untimed; every client does the same work).

    Returns
    -------
    dict
        ``client_upload_s``, ``client_unmask_s``, ``client_total_s`` (wall
        clock) and the same as the thread's CPU time (``client_upload_cpu_s``,
        ``client_unmask_cpu_s``, ``client_total_cpu_s``),
        ``server_upload_s``, ``server_unmask_s``, ``server_total_s``,
        ``bytes_up_per_client``, ``bytes_down_per_client``, the check
        ``max_abs_error`` of the decoded sum and ``exchanges_per_round``.
    """
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {list(MODES)}, got {mode!r}")
    encoded, truth, fixed = _inputs(n_clients, length)
    timed = set(range(min(clients_timed, n_clients)))
    rows = [
        _round_once(n_clients, length, mode, encoded, truth, fixed, timed)
        for _ in range(repeats)
    ]
    return {
        "mode": mode,
        "n_clients": n_clients,
        "length": length,
        **_medians(rows),
        "exchanges_per_round": 2 if mode == "double-masking" else 1,
    }


def _floor_once(n_clients: int, length: int) -> dict[str, Any]:
    """Time the floor's primitives once (each a median over a few calls)."""
    from Crypto.Protocol.SecretSharing import Shamir

    rng = np.random.default_rng(0)
    a, b = KeyPair.generate(rng), KeyPair.generate(rng)
    count = 100
    x25519 = _median(lambda: [agree(a.secret, b.public) for _ in range(count)], 3)
    seed = os.urandom(32)
    buffer = np.empty(length, dtype=np.uint32)
    prg = _median(lambda: expand(seed, length, np.uint32, out=buffer), 5)
    acc = np.zeros(length, dtype=np.uint32)
    add = _median(lambda: np.add(acc, buffer, out=acc), 5)
    threshold = ProtocolSettings().shamir_threshold(n_clients)
    points = list(range(1, n_clients))
    secret = random_elements(SECRET_WORDS)
    ours = _median(lambda: split(secret, threshold=threshold, points=points), 5)
    chunks = (os.urandom(16), os.urandom(16))
    holders = n_clients - 1
    theirs, _ = _median(
        lambda: [Shamir.split(threshold, holders, c, ssss=False) for c in chunks], 1
    )
    shares = [Shamir.split(threshold, holders, c, ssss=False) for c in chunks]
    combine, _ = _median(
        lambda: [Shamir.combine(s[:threshold], ssss=False) for s in shares], 1
    )
    out: dict[str, Any] = {"threshold": threshold}
    for clock, k in (("s", 0), ("cpu_s", 1)):
        per_agreement = x25519[k] / count
        out[f"x25519_{clock}"] = per_agreement
        out[f"aes_ctr_{clock}"] = prg[k]
        out[f"add_{clock}"] = add[k]
        out[f"shamir_split_{clock}"] = ours[k]
        out[f"floor_client_{clock}"] = (
            (n_clients - 1) * per_agreement + n_clients * (prg[k] + add[k]) + ours[k]
        )
    out["pycryptodome_split_s"] = theirs
    out["pycryptodome_combine_s"] = combine
    out["shamir_speedup"] = theirs / ours[0]
    return out


def measure_floor(n_clients: int, length: int, *, repeats: int = 3) -> dict[str, Any]:
    """Time the primitives a double-masked client cannot avoid at ``(N, L)``.

    Returns
    -------
    dict
        ``x25519_s`` (one agreement), ``aes_ctr_s`` (one expansion of ``L``
        uint32 words), ``add_s`` (one in-place addition), ``shamir_split_s``
        (fedleak: one seed for ``N - 1`` holders, threshold ``floor(N/2)+1``),
        ``pycryptodome_split_s`` / ``pycryptodome_combine_s`` (the same
        32-byte seed as two 16-byte chunks), ``floor_client_s`` (``(N - 1)``
        agreements + ``N`` expansions and additions + one split) and
        ``shamir_speedup`` (pycryptodome split over fedleak's); the floor and
        its primitives also in CPU seconds of the thread (``x25519_cpu_s``,
        ``aes_ctr_cpu_s``, ``add_cpu_s``, ``shamir_split_cpu_s``,
        ``floor_client_cpu_s``); medians over ``repeats`` measurements.
    """
    rows = [_floor_once(n_clients, length) for _ in range(repeats)]
    return {"n_clients": n_clients, "length": length, **_medians(rows)}


def measure_costs(
    sizes: Sequence[tuple[int, int]] = ((30, 100_000), (100, 100_000)),
    *,
    repeats: int = 5,
    clients_timed: int = 5,
) -> list[dict[str, Any]]:
    """Measure both modes and the floor at every ``(N, L)``, interleaved.

    Each of ``repeats`` blocks runs one double-masked round, one thesis
    round and one floor measurement, in an order rotated from block to
    block, so that both modes and the floor see the same machine load;
    ratios are medians of the per-block (paired) ratios.

    Returns
    -------
    list of dict
        One entry per size: ``{"n_clients", "length", "double-masking",
        "thesis", "floor", "ratios"}`` (medians over the blocks) where
        ``ratios`` holds ``client_double_vs_thesis``,
        ``server_double_vs_thesis``, ``client_upload_vs_floor`` (wall clock),
        ``client_upload_cpu_vs_floor`` (CPU time) and
        ``shamir_pycryptodome_vs_fedleak``.
    """
    out = []
    for n, length in sizes:
        if n < 3 or length < 1 or repeats < 1:
            raise ConfigError(
                f"sizes need N >= 3 and L >= 1 and repeats >= 1, got {(n, length)}, "
                f"{repeats}"
            )
        encoded, truth, fixed = _inputs(n, length)
        timed = set(range(min(clients_timed, n)))
        rows: dict[str, list[dict[str, Any]]] = {
            "double": [],
            "thesis": [],
            "floor": [],
        }
        order = ["double", "thesis", "floor"]
        for block in range(repeats):
            for what in order[block % 3 :] + order[: block % 3]:
                if what == "floor":
                    rows["floor"].append(_floor_once(n, length))
                else:
                    mode: Mode = "double-masking" if what == "double" else "thesis"
                    rows[what].append(
                        _round_once(n, length, mode, encoded, truth, fixed, timed)
                    )
        paired = {
            "client_double_vs_thesis": [
                d["client_total_s"] / t["client_total_s"]
                for d, t in zip(rows["double"], rows["thesis"], strict=True)
            ],
            "server_double_vs_thesis": [
                d["server_total_s"] / t["server_total_s"]
                for d, t in zip(rows["double"], rows["thesis"], strict=True)
            ],
            "client_upload_vs_floor": [
                d["client_upload_s"] / f["floor_client_s"]
                for d, f in zip(rows["double"], rows["floor"], strict=True)
            ],
            "client_upload_cpu_vs_floor": [
                d["client_upload_cpu_s"] / f["floor_client_cpu_s"]
                for d, f in zip(rows["double"], rows["floor"], strict=True)
            ],
            "shamir_pycryptodome_vs_fedleak": [
                f["shamir_speedup"] for f in rows["floor"]
            ],
        }
        out.append(
            {
                "n_clients": n,
                "length": length,
                "repeats": repeats,
                "double-masking": {
                    **_medians(rows["double"]),
                    "exchanges_per_round": 2,
                },
                "thesis": {**_medians(rows["thesis"]), "exchanges_per_round": 1},
                "floor": _medians(rows["floor"]),
                "ratios": {k: statistics.median(v) for k, v in paired.items()},
            }
        )
    return out
