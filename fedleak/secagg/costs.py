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

Every figure is the median over ``repeats`` rounds, each run with fresh keys,
all in one process so the ratios compare like with like. It is the
measurement a benchmark command reports; it asserts nothing about speed.
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


def _median(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


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
        ``client_upload_s``, ``client_unmask_s``, ``client_total_s``,
        ``server_upload_s``, ``server_unmask_s``, ``server_total_s``,
        ``bytes_up_per_client``, ``bytes_down_per_client`` and the check
        ``max_abs_error`` of the decoded sum.
    """
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {list(MODES)}, got {mode!r}")
    fixed = FixedPoint.auto(1.0, n_clients, modulus_bits=32)
    rng = np.random.default_rng([n_clients, length])
    xs = [rng.uniform(-1.0, 1.0, length) for _ in range(n_clients)]
    encoded = [fixed.encode(x)[0] for x in xs]
    truth = np.sum(xs, axis=0)
    uploads: list[float] = []
    unmasks: list[float] = []
    server_up: list[float] = []
    server_un: list[float] = []
    errors: list[float] = []
    bytes_up = bytes_down = 0
    timed = set(range(min(clients_timed, n_clients)))
    for _ in range(repeats):
        server = ServerSession(ProtocolSettings(mode=mode), seed=0)
        guards = ClientGuards(accept_thesis=True)
        clients = [ClientSession.start(i, guards) for i in range(n_clients)]
        for i, c in enumerate(clients):
            server.add_advertisement(i, c.advertise_reply())
        aggregation = server.begin_round(
            range(n_clients), length=length, modulus_bits=32
        )
        for i, request in aggregation.upload_requests().items():
            started = time.perf_counter()
            plan = clients[i].plan_upload(request)
            reply = clients[i].upload(plan, encoded[i])
            if i in timed:
                uploads.append(time.perf_counter() - started)
            aggregation.add_upload(i, reply)
        for i, request in aggregation.unmask_requests().items():
            started = time.perf_counter()
            reply = clients[i].unmask(request)
            if i in timed:
                unmasks.append(time.perf_counter() - started)
            aggregation.add_unmask(i, reply)
        result = aggregation.finish()
        server_up.append(result.seconds["upload"])
        server_un.append(result.seconds["unmask"])
        total = result.groups[0].total
        if total is None:  # pragma: no cover - no dropouts in this measurement
            raise ConfigError(f"the measured round failed: {result.groups[0].failure}")
        errors.append(float(np.max(np.abs(fixed.decode(total) - truth))))
        bytes_up = sum(v for k, v in result.bytes_up.items() if k != "advertise")
        bytes_down = sum(result.bytes_down.values())
    client_upload = statistics.median(uploads)
    client_unmask = statistics.median(unmasks) if unmasks else 0.0
    server_upload = statistics.median(server_up)
    server_unmask = statistics.median(server_un)
    return {
        "mode": mode,
        "n_clients": n_clients,
        "length": length,
        "client_upload_s": client_upload,
        "client_unmask_s": client_unmask,
        "client_total_s": client_upload + client_unmask,
        "server_upload_s": server_upload,
        "server_unmask_s": server_unmask,
        "server_total_s": server_upload + server_unmask,
        "bytes_up_per_client": bytes_up // n_clients,
        "bytes_down_per_client": bytes_down // n_clients,
        "max_abs_error": max(errors),
        "exchanges_per_round": 2 if mode == "double-masking" else 1,
    }


def measure_floor(n_clients: int, length: int, *, repeats: int = 5) -> dict[str, Any]:
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
        ``shamir_speedup`` (pycryptodome split over fedleak's).
    """
    from Crypto.Protocol.SecretSharing import Shamir

    rng = np.random.default_rng(0)
    a, b = KeyPair.generate(rng), KeyPair.generate(rng)
    count = 100
    x25519 = _median(lambda: [agree(a.secret, b.public) for _ in range(count)], repeats)
    seed = os.urandom(32)
    buffer = np.empty(length, dtype=np.uint32)
    prg = _median(lambda: expand(seed, length, np.uint32, out=buffer), repeats)
    acc = np.zeros(length, dtype=np.uint32)
    add = _median(lambda: np.add(acc, buffer, out=acc), repeats)
    threshold = ProtocolSettings().shamir_threshold(n_clients)
    points = list(range(1, n_clients))
    secret = random_elements(SECRET_WORDS)
    ours = _median(lambda: split(secret, threshold=threshold, points=points), repeats)
    chunks = (os.urandom(16), os.urandom(16))
    holders = n_clients - 1
    theirs = _median(
        lambda: [Shamir.split(threshold, holders, c, ssss=False) for c in chunks],
        max(1, repeats // 2),
    )
    shares = [Shamir.split(threshold, holders, c, ssss=False) for c in chunks]
    combine = _median(
        lambda: [Shamir.combine(s[:threshold], ssss=False) for s in shares],
        max(1, repeats // 2),
    )
    per_agreement = x25519 / count
    floor = (n_clients - 1) * per_agreement + n_clients * (prg + add) + ours
    return {
        "n_clients": n_clients,
        "length": length,
        "threshold": threshold,
        "x25519_s": per_agreement,
        "aes_ctr_s": prg,
        "add_s": add,
        "shamir_split_s": ours,
        "pycryptodome_split_s": theirs,
        "pycryptodome_combine_s": combine,
        "floor_client_s": floor,
        "shamir_speedup": theirs / ours,
    }


def measure_costs(
    sizes: Sequence[tuple[int, int]] = ((30, 100_000), (100, 100_000)),
    *,
    repeats: int = 3,
) -> list[dict[str, Any]]:
    """Measure both modes and the floor at every ``(N, L)`` of ``sizes``.

    Returns
    -------
    list of dict
        One entry per size: ``{"n_clients", "length", "double-masking",
        "thesis", "floor", "ratios"}`` where ``ratios`` holds
        ``client_double_vs_thesis``, ``server_double_vs_thesis``,
        ``client_upload_vs_floor`` and ``shamir_pycryptodome_vs_fedleak``.
    """
    out = []
    for n, length in sizes:
        if n < 3 or length < 1:
            raise ConfigError(f"sizes need N >= 3 and L >= 1, got {(n, length)}")
        double = measure_round(n, length, "double-masking", repeats=repeats)
        thesis = measure_round(n, length, "thesis", repeats=repeats)
        floor = measure_floor(n, length, repeats=max(3, repeats))
        out.append(
            {
                "n_clients": n,
                "length": length,
                "double-masking": double,
                "thesis": thesis,
                "floor": floor,
                "ratios": {
                    "client_double_vs_thesis": double["client_total_s"]
                    / thesis["client_total_s"],
                    "server_double_vs_thesis": double["server_total_s"]
                    / thesis["server_total_s"],
                    "client_upload_vs_floor": double["client_upload_s"]
                    / floor["floor_client_s"],
                    "shamir_pycryptodome_vs_fedleak": floor["shamir_speedup"],
                },
            }
        )
    return out
