"""``fedleak bench sketches``: sketches and private aggregation (seed 000 Ch. 2.2, 4).

Sections of the JSON report (``schema_version`` 1), each with its wall time:

``throughput``
    :class:`~fedleak.sketches.CountMinSketch` batch update and batch query
    against Apache DataSketches' ``count_min_sketch`` (per-item calls over a
    pre-built list, its only API) on the same 10^6 items from a bounded
    Zipf(1.1) over 10^5 ids, ``d = 5``, ``w = 272``; repetitions interleaved,
    ratios paired per repetition, then the median. Also accuracy of both.
``recommender``
    Fig. 4.5 on :func:`~fedleak.sketches.recommender.zipf_population` (M =
    700): true vs estimated counts of the 50 most frequent co-view entries
    and their average error vs number of users for sketch epsilon in {0.01,
    0.05, 0.1} (delta = 0.01, T = 245,000); agreement of ItemKNN
    recommendations from the sketch with those from exact counts, with the
    seed's minimum estimator and with count-mean-min; Table 4.1
    (bytes user -> tally and tally -> user for the thesis' (N, L) rows,
    measured by running the masked aggregation) and the masked run's times.
``heatmaps``
    Figs. 4.7-4.9 on :func:`~fedleak.sketches.heatmaps.synthetic_mobility`
    (100 x 100 grid, hourly slots, L = 3,808): top-100 cell error per slot,
    EWMA MAE per alpha, and the sketch's effect on the prediction; one slot
    aggregated with masks from per-user sketches, checked against the plain
    sketch.
``median``
    Figs. 4.10-4.11 on the seed's reference problem (40 repetitions):
    median error vs sketch size and vs DP epsilon (plaintext bisection on the
    aggregated sketch: the decrypted numbers are the same), then one
    encrypted run (:func:`~fedleak.sketches.median.private_median`) with
    encryption, online encryption and aggregation times per sketch.

PNG plots go next to the JSON: ``FILE-<plot>.png``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final

import numpy as np
import typer
from rich.table import Table

from fedleak.errors import ConfigError
from fedleak.files import write_atomic

from .console import out as console
from .console import say, written
from .options import OutOption, SeedOption
from .record import BenchRecord, record_path
from .table_4_1 import SEED_DEPTH, THESIS_TABLE_4_1

__all__ = ["command", "run_sketch_bench"]

Say = Callable[[str], None]


def _zipf_items(n: int, universe: int, exponent: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    weights = np.arange(1, universe + 1, dtype=np.float64) ** (-exponent)
    return rng.choice(universe, size=n, p=weights / weights.sum())


# ------------------------------------------------------------------ throughput


def bench_throughput(n_items: int, repeats: int, seed: int) -> dict[str, Any]:
    """Count-Min update/query: fedleak (batched) vs DataSketches (per item)."""
    from fedleak.sketches import CountMinSketch

    try:
        from datasketches import count_min_sketch
    except ImportError as err:  # pragma: no cover - the bench extra is missing
        raise ConfigError(
            "bench sketches needs Apache DataSketches: pip install 'fedleak[bench]'"
        ) from err
    depth, width = 5, 272
    items = _zipf_items(n_items, 100_000, 1.1, seed)
    as_list = items.tolist()
    distinct = np.unique(items)
    distinct_list = distinct.tolist()
    truth = np.bincount(items, minlength=100_000)[distinct]
    rows: list[dict[str, float]] = []
    ours = theirs = None
    for _ in range(repeats):
        ours = CountMinSketch(depth, width, seed=seed)
        start = time.perf_counter()
        ours.update(items)
        ours_update = time.perf_counter() - start
        theirs = count_min_sketch(depth, width)
        start = time.perf_counter()
        for x in as_list:
            theirs.update(x)
        their_update = time.perf_counter() - start
        start = time.perf_counter()
        ours_est = ours.estimate(distinct)
        ours_query = time.perf_counter() - start
        start = time.perf_counter()
        for x in distinct_list:
            theirs.get_estimate(x)
        their_query = time.perf_counter() - start
        rows.append(
            {
                "fedleak_update_s": ours_update,
                "datasketches_update_s": their_update,
                "fedleak_query_s": ours_query,
                "datasketches_query_s": their_query,
                "update_ratio": their_update / ours_update,
                "query_ratio": their_query / ours_query,
            }
        )
    assert ours is not None and theirs is not None
    ours_est = ours.estimate(distinct)
    their_est_arr = np.array([theirs.get_estimate(x) for x in distinct_list])
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    bound = math.e / width * n_items
    return {
        "parameters": {
            "n_items": n_items,
            "universe": 100_000,
            "zipf_exponent": 1.1,
            "depth": depth,
            "width": width,
            "repeats": repeats,
            "distinct_items": int(distinct.size),
        },
        "repetitions": rows,
        "median": med,
        "fedleak_update_items_per_s": n_items / med["fedleak_update_s"],
        "datasketches_update_items_per_s": n_items / med["datasketches_update_s"],
        "fedleak_query_items_per_s": distinct.size / med["fedleak_query_s"],
        "datasketches_query_items_per_s": distinct.size / med["datasketches_query_s"],
        "update_ratio": med["update_ratio"],
        "query_ratio": med["query_ratio"],
        # less sensitive to load from other processes: best time against best time
        "update_ratio_best": min(r["datasketches_update_s"] for r in rows)
        / min(r["fedleak_update_s"] for r in rows),
        "query_ratio_best": min(r["datasketches_query_s"] for r in rows)
        / min(r["fedleak_query_s"] for r in rows),
        "accuracy": {
            name: {
                "underestimates": int(np.sum(est < truth)),
                "mean_abs_error": float(np.mean(np.abs(est - truth))),
                "max_abs_error": float(np.max(np.abs(est - truth))),
                "within_eps_n": float(np.mean(np.abs(est - truth) <= bound)),
            }
            for name, est in (("fedleak", ours_est), ("datasketches", their_est_arr))
        },
    }


# ------------------------------------------------------------------ recommender


def _coview_curves(
    population: Any,
    user_counts: list[int],
    epsilons: tuple[float, ...],
    seed: int,
    say: Say,
) -> tuple[dict[str, list[float]], dict[str, Any], dict[str, Any]]:
    """Fig. 4.5: co-view errors per population size and sketch epsilon.

    Returns the error curves, Fig. 4.5(a)'s record at the largest population
    and epsilon 0.01, and (for the ItemKNN comparison) that population's
    exact and estimated similarities and the estimates' mean absolute error.
    """
    from fedleak.sketches import CountMinSketch
    from fedleak.sketches.recommender import (
        cosine_similarity,
        coview_error,
        estimate_coviews,
        population_sketch,
    )

    n_items = population.n_items
    pairs = n_items * n_items // 2  # the seed's T = M * M / 2
    curves: dict[str, list[float]] = {str(e): [] for e in epsilons}
    fig_a: dict[str, Any] = {}
    knn: dict[str, Any] = {}
    for n in user_counts:
        say(f"recommender: N = {n}")
        coviews = population.coviews(slice(0, n))
        for eps in epsilons:
            template = CountMinSketch.from_error(eps, 0.01, n_items=pairs, seed=seed)
            estimate = estimate_coviews(population_sketch(coviews, template), n_items)
            err = coview_error(coviews, estimate, top=50)
            average = err["average_error"]
            assert isinstance(average, float)
            curves[str(eps)].append(average)
            if n == max(user_counts) and eps == 0.01:
                fig_a = {"users": n, "sketch_size": template.size, **err}
                sketch = population_sketch(coviews, template)
                debiased = estimate_coviews(sketch, n_items, debias=True)
                cmm = coview_error(coviews, debiased, top=50)
                fig_a["estimated_count_mean_min"] = cmm["estimated"]
                fig_a["average_error_count_mean_min"] = cmm["average_error"]
                upper = np.triu_indices(n_items)
                knn_truth = coviews + np.triu(coviews, 1).T
                knn["similarities"] = {
                    "min": cosine_similarity(estimate),
                    "count-mean-min": cosine_similarity(debiased),
                }
                knn["mean_abs"] = {
                    "min": float(np.mean(np.abs(estimate - knn_truth)[upper])),
                    "count-mean-min": float(
                        np.mean(np.abs(debiased - knn_truth)[upper])
                    ),
                }
                knn["exact"] = cosine_similarity(coviews)
    return curves, fig_a, knn


#: Zipf exponents of the Fig. 4.5(a) sensitivity check (the seed names none).
ZIPF_EXPONENTS: Final = (1.0, 1.5, 2.0)


def _fig_4_5a_skew(n_items: int, seed: int, users: int = 100_000) -> dict[str, Any]:
    """Measure the min estimator's top-50 overestimate against the population's skew.

    Same sketch (eps = delta = 0.01 over T = M * M / 2 pairs), ``users``
    viewers; per Zipf exponent the median relative error of the 50 largest
    co-view counts and their share of all co-views. The Count-Min bound is on
    ``eps * sum(c)``, so the top counts look exact only when they carry much
    of the mass.
    """
    from fedleak.sketches import CountMinSketch
    from fedleak.sketches.recommender import (
        coview_error,
        estimate_coviews,
        population_sketch,
        zipf_population,
    )

    pairs = n_items * n_items // 2
    out: dict[str, Any] = {"users": users}
    for exponent in ZIPF_EXPONENTS:
        population = zipf_population(users, n_items, exponent=exponent, seed=seed)
        coviews = population.coviews(slice(0, users))
        template = CountMinSketch.from_error(0.01, 0.01, n_items=pairs, seed=seed)
        err = coview_error(
            coviews,
            estimate_coviews(population_sketch(coviews, template), n_items),
            top=50,
        )
        true = np.asarray(err["true"], dtype=np.float64)
        est = np.asarray(err["estimated"], dtype=np.float64)
        out[str(exponent)] = {
            "median_relative_overestimate": float(np.median((est - true) / true)),
            "top50_share_of_coviews": float(true.sum() / np.triu(coviews).sum()),
            "average_error": float(np.asarray(err["average_error"])),
        }
    return out


def _itemknn_overlaps(
    population: Any, knn: dict[str, Any], seed: int
) -> dict[str, list[float]]:
    """Top-10 recommendations from sketched vs exact similarities, 100 users."""
    from fedleak.sketches.recommender import recommend

    rng = np.random.default_rng(seed)
    overlaps: dict[str, list[float]] = {name: [] for name in knn["similarities"]}
    for user in rng.choice(population.n_users, size=100, replace=False):
        watched = population.items_of(int(user))
        truth = set(recommend(knn["exact"], watched, top=10).tolist())
        for name, sim in knn["similarities"].items():
            got = set(recommend(sim, watched, top=10).tolist())
            overlaps[name].append(len(truth & got) / 10)
    return overlaps


def _masked_aggregation_table(
    population: Any, table_rows: int, seed: int
) -> list[dict[str, Any]]:
    """Table 4.1: masked aggregation of user sketches, bytes and seconds."""
    from fedleak.sketches import CountMinSketch
    from fedleak.sketches.masked import aggregate_sketches
    from fedleak.sketches.recommender import user_sketch

    table = []
    for row in THESIS_TABLE_4_1[:table_rows]:
        n = row.n_users
        # the seed's own L (its rounding), not from_error's ceil
        template = CountMinSketch(SEED_DEPTH, row.sketch_size // SEED_DEPTH, seed=seed)
        users = [
            user_sketch(population.items_of(u), population.n_items, template)
            for u in range(n)
        ]
        start = time.perf_counter()
        # the seed's scheme: Table 4.1's wire format
        result = aggregate_sketches(users, seed=seed, modulus_bits=32, mode="thesis")
        wall = time.perf_counter() - start
        plain = template.with_table(sum(u.table.astype(np.int64) for u in users))
        proto = result.protocol
        table.append(
            {
                "n_users": n,
                "sketch_size": template.size,
                "from_error_sketch_size": row.from_error_sketch_size,
                "user_to_tally_bytes": proto.bytes_up["upload"] // n,
                "thesis_user_to_tally_bytes": row.user_to_tally_bytes,
                "tally_to_user_bytes": proto.bytes_down["keys"] // n,
                "thesis_tally_to_user_bytes": row.tally_to_user_bytes,
                "masked_equals_plain": bool(result.sketch == plain),
                "mask_per_user_s": proto.seconds["mask_per_user"],
                "tally_sum_s": proto.seconds["server_sum"],
                "wall_s": wall,
            }
        )
    return table


def bench_recommender(
    user_counts: list[int], table_rows: int, seed: int, say: Say
) -> dict[str, Any]:
    """Fig. 4.5, ItemKNN agreement, Table 4.1 and masked-aggregation times."""
    from fedleak.sketches.recommender import zipf_population

    n_items = 700
    pairs = n_items * n_items // 2  # the seed's T = M * M / 2
    say(f"recommender: population of {max(user_counts)} users")
    population = zipf_population(max(user_counts), n_items, seed=seed)
    epsilons = (0.01, 0.05, 0.1)
    curves, fig_a, knn = _coview_curves(population, user_counts, epsilons, seed, say)
    say("recommender: Fig. 4.5(a) vs the population's Zipf exponent")
    fig_a["zipf_exponent_sensitivity"] = _fig_4_5a_skew(n_items, seed)
    overlaps = _itemknn_overlaps(population, knn, seed)
    say("recommender: Table 4.1 (masked aggregation of user sketches)")
    table = _masked_aggregation_table(population, table_rows, seed)
    return {
        "parameters": {
            "n_items": n_items,
            "T": pairs,
            "delta": 0.01,
            "epsilons": list(epsilons),
            "user_counts": user_counts,
            "population": "zipf_population(mean_views=8, exponent=1.0)",
        },
        "fig_4_5a": fig_a,
        "fig_4_5b": {"users": user_counts, "average_error": curves},
        "itemknn": {
            "users": 100,
            "top": 10,
            "neighbors": 20,
            "top10_overlap_with_exact": {
                name: float(np.mean(v)) for name, v in overlaps.items()
            },
            "mean_abs_error_all_entries": knn["mean_abs"],
        },
        "table_4_1": table,
    }


# ------------------------------------------------------------------ heat maps


#: Hour-to-hour overdispersion of the bursty stand-ins of Fig. 4.8
#: (:func:`fedleak.sketches.heatmaps.synthetic_mobility`'s ``burstiness``).
BURSTINESS: Final = (0.25, 1.0)


def _fig_4_8_bursty(
    n_users: int,
    days: int,
    grid: int,
    burstiness: float,
    alphas: tuple[float, ...],
    window: int,
    seed: int,
) -> dict[str, Any]:
    """Fig. 4.8 on a stand-in whose demand fluctuates from hour to hour.

    The default stand-in is smooth (daily and weekly cycles plus Poisson
    noise); real traces are burstier. Same targets rule (the 12 busiest
    consecutive slots), exact heat maps.
    """
    from fedleak.sketches.heatmaps import (
        heat_maps,
        prediction_errors,
        synthetic_mobility,
    )

    maps = heat_maps(
        synthetic_mobility(
            n_users, 24 * days, grid=grid, seed=seed, burstiness=burstiness
        )
    )
    sums = np.convolve(maps.sum(axis=1), np.ones(12), mode="valid")
    sums[:window] = -1
    first = int(np.argmax(sums))
    targets = list(range(first, first + 12))
    mae = {a: prediction_errors(maps, targets, a, window=window) for a in alphas}
    best = [min(alphas, key=lambda a: float(mae[a][i])) for i in range(len(targets))]
    return {
        "mean_mae": {str(a): float(np.mean(v)) for a, v in mae.items()},
        "best_alpha_count": {str(a): best.count(a) for a in alphas},
    }


def bench_heatmaps(n_users: int, days: int, seed: int, say: Say) -> dict[str, Any]:
    """Figs. 4.7-4.9 and one masked slot."""
    from fedleak.sketches import CountMinSketch
    from fedleak.sketches.heatmaps import (
        heat_maps,
        prediction_errors,
        prediction_gap,
        sketch_heat_maps,
        synthetic_mobility,
        top_cell_error,
        user_slot_sketches,
    )
    from fedleak.sketches.masked import aggregate_sketches

    grid = 100
    say(f"heat maps: {n_users} users, {days} days")
    log = synthetic_mobility(n_users, 24 * days, grid=grid, seed=seed)
    maps = heat_maps(log)
    template = CountMinSketch.from_error(0.01, 0.01, n_items=grid * grid, seed=seed)
    sketched = sketch_heat_maps(maps, template)
    mean, rsd = top_cell_error(maps, sketched, top=100)
    totals = maps.sum(axis=1)
    window = 24
    sums = np.convolve(totals, np.ones(12), mode="valid")
    sums[:window] = -1  # targets need 24 past slots
    first = int(np.argmax(sums))
    targets = list(range(first, first + 12))
    alphas = (0.1, 0.3, 0.5, 0.7, 0.9)
    mae = {
        str(a): prediction_errors(maps, targets, a, window=window).tolist()
        for a in alphas
    }
    gap = prediction_gap(maps, sketched, targets, 0.1, window=window)
    say("heat maps: Fig. 4.8 on bursty stand-ins")
    bursty = {
        str(b): _fig_4_8_bursty(n_users, days, grid, b, alphas, window, seed)
        for b in BURSTINESS
    }
    busiest = int(np.argmax(totals))
    say(f"heat maps: masked aggregation of slot {busiest}")
    users = list(user_slot_sketches(log, busiest, template).values())
    start = time.perf_counter()
    result = aggregate_sketches(users, group_size=100, seed=seed)
    wall = time.perf_counter() - start
    return {
        "parameters": {
            "grid": grid,
            "users": n_users,
            "slots": int(maps.shape[0]),
            "sketch_size": template.size,
            "epsilon": 0.01,
            "delta": 0.01,
            "window": window,
            "generator": "synthetic_mobility (daily and weekly cycles)",
        },
        "peak_positions_per_slot": int(totals.max()),
        "fig_4_7": {
            "average_error": mean.tolist(),
            "relative_std": rsd.tolist(),
            "max_average_error": float(mean.max()),
        },
        "fig_4_8": {"targets": targets, "alphas": list(alphas), "mae": mae},
        "fig_4_8_burstiness": bursty,
        "fig_4_9": {"alpha": 0.1, "mae_sketch_vs_exact": gap.tolist()},
        "masked_slot": {
            "slot": busiest,
            "users": len(users),
            "equals_plain_sketch": bool(
                np.array_equal(
                    result.sketch.estimate(np.arange(grid * grid)), sketched[busiest]
                )
            ),
            "mask_per_user_s": result.protocol.seconds["mask_per_user"],
            "wall_s": wall,
        },
    }


# ------------------------------------------------------------------ median


#: The value range of the median problems.
_MEDIAN_RANGE: tuple[int, int] = (0, 1000)


def _sketched_median(
    values: np.ndarray,
    sketch_eps: float,
    seed: int,
    *,
    epsilon: float | None = None,
    rng: np.random.Generator | None = None,
) -> tuple[int, Any]:
    """Bisect the median of ``values`` on a Count Sketch of error ``sketch_eps``.

    ``epsilon`` (with ``rng``) adds the DP noise of Fig. 4.11. Returns the
    median and the sketch.
    """
    from fedleak.sketches import CountSketch
    from fedleak.sketches.median import PlainRangeCounter, bisect_median, value_sketch

    low, high = _MEDIAN_RANGE
    sketch = value_sketch(
        values,
        CountSketch.from_error(sketch_eps, sketch_eps, seed=seed),
        low=low,
        high=high,
    )
    median = bisect_median(
        PlainRangeCounter(sketch),
        values.size,
        sketch.depth,
        low=low,
        high=high,
        epsilon=epsilon,
        rng=rng,
    ).median
    return median, sketch


def _fig_4_10(
    problems: list[np.ndarray],
    truths: list[int],
    sketch_eps: list[float],
    seed: int,
) -> list[dict[str, Any]]:
    """Fig. 4.10: the median's relative error vs the Count Sketch's size."""
    low, high = _MEDIAN_RANGE
    fig10 = []
    for eps in sketch_eps:
        errors = []
        for rep, (values, truth) in enumerate(zip(problems, truths, strict=True)):
            est, sketch = _sketched_median(values, eps, seed + rep)
            errors.append(abs(est - truth) / truth)
        fig10.append(
            {
                "epsilon_delta": eps,
                "depth": sketch.depth,
                "width": sketch.width,
                "size_overhead": sketch.size / (high - low + 1),
                "mean_relative_error": float(np.mean(errors)),
                "std_relative_error": float(np.std(errors)),
            }
        )
    return fig10


def _fig_4_11(
    problems: list[np.ndarray],
    truths: list[int],
    dp_eps: list[float],
    seed: int,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    """Fig. 4.11: the median's absolute error vs the DP epsilon (None: no noise)."""
    fig11 = []
    dp_settings: list[float | None] = [*dp_eps, None]
    for dp in dp_settings:
        errors = []
        for rep, (values, truth) in enumerate(zip(problems, truths, strict=True)):
            est, _ = _sketched_median(values, 0.05, seed + rep, epsilon=dp, rng=rng)
            errors.append(abs(est - truth))
        fig11.append(
            {
                "dp_epsilon": dp,
                "mean_abs_error": float(np.mean(errors)),
                "std_abs_error": float(np.std(errors)),
            }
        )
    return fig11


def _encrypted_median(
    values: np.ndarray,
    contributors: int,
    seed: int,
    rng: np.random.Generator,
) -> tuple[Any, Any, float, float, int]:
    """Run the encrypted protocol on one problem, and its plaintext counterpart.

    Returns the encrypted result, the plaintext bisection, the protocol's
    wall time, the online encryption time of one sketch and the sketch size.
    """
    from fedleak.sketches import CountSketch
    from fedleak.sketches import elgamal as eg
    from fedleak.sketches.median import (
        PlainRangeCounter,
        bisect_median,
        private_median,
        value_sketch,
    )

    low, high = _MEDIAN_RANGE
    parts = np.array_split(values, contributors)
    start = time.perf_counter()
    # seeded: the record must be reproducible (not private; see private_median)
    encrypted = private_median(parts, low=low, high=high, seed=seed)
    wall = time.perf_counter() - start
    hash_seed = np.random.SeedSequence(seed).spawn(4)[0]
    plain_sketch = CountSketch.from_error(
        0.05,
        0.05,
        seed=int(hash_seed.generate_state(1, np.uint64)[0] >> np.uint64(1)),
    )
    plain_sketch = value_sketch(values, plain_sketch, low=low, high=high)
    plain = bisect_median(
        PlainRangeCounter(plain_sketch),
        values.size,
        plain_sketch.depth,
        low=low,
        high=high,
    )
    key = eg.GroupKey.combine([eg.Authority(k, rng) for k in range(3)])
    pool = eg.precompute_randomness(plain_sketch.size, key, rng)
    start = time.perf_counter()
    eg.encrypt(plain_sketch.table, key, randomness=pool)
    online = time.perf_counter() - start
    return encrypted, plain, wall, online, plain_sketch.size


def bench_median(
    sketch_eps: list[float],
    dp_eps: list[float],
    repetitions: int,
    contributors: int,
    seed: int,
    say: Say,
) -> dict[str, Any]:
    """Figs. 4.10-4.11 and the cost of the encrypted protocol."""
    from fedleak.sketches.median import reference_problem

    seeds = np.random.SeedSequence(seed).spawn(repetitions)
    readings: dict[str, dict[str, Any]] = {}
    rng = np.random.default_rng(seed)
    for spread in ("variance", "std"):
        problems = [
            reference_problem(int(s.generate_state(1)[0]), spread=spread) for s in seeds
        ]
        truths = [int(np.sort(v)[(v.size + 1) // 2 - 1]) for v in problems]
        say(f"median: Fig. 4.10 (sketch size), spreads read as {spread}")
        fig10 = _fig_4_10(problems, truths, sketch_eps, seed)
        say(f"median: Fig. 4.11 (DP epsilon), spreads read as {spread}")
        fig11 = _fig_4_11(problems, truths, dp_eps, seed, rng)
        readings[spread] = {"fig_4_10": fig10, "fig_4_11": fig11, "truth": truths[0]}
    say(f"median: encrypted run with {contributors} contributors")
    values = reference_problem(int(seeds[0].generate_state(1)[0]))
    encrypted, plain, wall, online, cells = _encrypted_median(
        values, contributors, seed, rng
    )
    return {
        "parameters": {
            "range": list(_MEDIAN_RANGE),
            "problem": "1000 x N(300, var 25) + 200 x N(500, var 200), rounded; "
            "spread_read_as_std: 25 and 200 read as standard deviations",
            "repetitions": repetitions,
            "sketch_epsilons": sketch_eps,
            "dp_epsilons": dp_eps,
            "dp_sketch": [0.05, 0.05],
        },
        "fig_4_10": readings["variance"]["fig_4_10"],
        "fig_4_11": readings["variance"]["fig_4_11"],
        "spread_read_as_std": {
            "fig_4_10": readings["std"]["fig_4_10"],
            "fig_4_11": readings["std"]["fig_4_11"],
        },
        "encrypted_run": {
            "backend": "coincurve secp256k1",
            "authorities": 3,
            "contributors": contributors,
            "sketch_cells": cells,
            "ciphertext_bytes_per_sketch": 66 * cells,
            "median": encrypted.median,
            "true_median": readings["variance"]["truth"],
            "same_as_plaintext": encrypted.released == plain.released,
            "decryptions": encrypted.decryptions,
            "encrypt_per_sketch_s": encrypted.seconds["encrypt_per_sketch"],
            "online_encrypt_per_sketch_s": online,
            "aggregate_per_sketch_s": encrypted.seconds["aggregate_per_sketch"],
            "bisection_s": encrypted.seconds["bisection"],
            "wall_s": wall,
        },
    }


# ------------------------------------------------------------------ plots


SaveFigure = Callable[[Any, str], None]


def _plot_throughput(plt: Any, tp: dict[str, Any], save: SaveFigure) -> None:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = ["update", "query"]
    ours = [tp["fedleak_update_items_per_s"], tp["fedleak_query_items_per_s"]]
    theirs = [
        tp["datasketches_update_items_per_s"],
        tp["datasketches_query_items_per_s"],
    ]
    x = np.arange(2)
    ax.bar(x - 0.2, np.array(ours) / 1e6, 0.4, label="fedleak (batch)")
    ax.bar(x + 0.2, np.array(theirs) / 1e6, 0.4, label="DataSketches (per item)")
    ax.set_xticks(x, names)
    ax.set_ylabel("M items / s")
    ax.set_title("Count-Min Sketch throughput")
    ax.legend()
    save(fig, "throughput")


def _plot_recommender(plt: Any, rec: dict[str, Any], save: SaveFigure) -> None:
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.plot(rec["fig_4_5a"]["true"], "o-", label="true", markersize=3)
    a.plot(
        rec["fig_4_5a"]["estimated"], "x--", label="Count-Min estimate", markersize=3
    )
    a.plot(
        rec["fig_4_5a"]["estimated_count_mean_min"],
        "+:",
        label="count-mean-min estimate",
        markersize=3,
    )
    a.set_xlabel("rank of the co-view entry")
    a.set_ylabel("count")
    a.set_title(f"(a) top 50, N = {rec['fig_4_5a']['users']:,}")
    a.legend()
    for eps, errs in rec["fig_4_5b"]["average_error"].items():
        b.plot(rec["fig_4_5b"]["users"], errs, "o-", label=f"eps = {eps}")
    b.set_xscale("log")
    b.set_xlabel("number of users")
    b.set_ylabel("average error |c_hat - c| / sum |c|")
    b.set_title("(b) average error, top 50")
    b.legend()
    save(fig, "fig4_5")


def _plot_heatmaps(plt: Any, hm: dict[str, Any], save: SaveFigure) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(hm["fig_4_7"]["average_error"])
    ax.set_xlabel("time slot (hour)")
    ax.set_ylabel("average error, top 100 cells")
    ax.set_title("Fig. 4.7: Count-Min error on heat maps")
    save(fig, "fig4_7")
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    for alpha, series in hm["fig_4_8"]["mae"].items():
        a.plot(
            hm["fig_4_8"]["targets"],
            series,
            "o-",
            label=f"alpha = {alpha}",
            markersize=3,
        )
    a.set_xlabel("predicted slot")
    a.set_ylabel("MAE, top 100 cells")
    a.set_title("Fig. 4.8: EWMA prediction")
    a.legend(fontsize=7)
    b.plot(hm["fig_4_8"]["targets"], hm["fig_4_9"]["mae_sketch_vs_exact"], "o-")
    b.set_xlabel("predicted slot")
    b.set_ylabel("MAE sketch vs exact prediction")
    b.set_title("Fig. 4.9: effect of the sketch (alpha = 0.1)")
    save(fig, "fig4_8_9")


def _plot_median_size(plt: Any, med: dict[str, Any], save: SaveFigure) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.8))
    eps = [r["epsilon_delta"] for r in med["fig_4_10"]]
    err = np.array([r["mean_relative_error"] for r in med["fig_4_10"]]) * 100
    std = np.array([r["std_relative_error"] for r in med["fig_4_10"]]) * 100
    ax.plot(eps, err, "o-", label="median error, % (spreads as variances)")
    ax.fill_between(eps, err - std, err + std, alpha=0.2)
    alt = med["spread_read_as_std"]["fig_4_10"]
    ax.plot(
        eps,
        [100 * r["mean_relative_error"] for r in alt],
        "s--",
        label="median error, % (spreads as std devs)",
    )
    ax.plot(
        eps,
        [r["size_overhead"] * 100 for r in med["fig_4_10"]],
        "g-",
        lw=1,
        label="sketch size (% of range)",
    )
    ax.set_xlabel("Count Sketch epsilon = delta")
    ax.set_ylabel("%")
    ax.set_title("Fig. 4.10: sketch size vs median error")
    ax.legend()
    save(fig, "fig4_10")


def _plot_median_dp(plt: Any, med: dict[str, Any], save: SaveFigure) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.8))
    rows = [r for r in med["fig_4_11"] if r["dp_epsilon"] is not None]
    ax.errorbar(
        [r["dp_epsilon"] for r in rows],
        [r["mean_abs_error"] for r in rows],
        yerr=[r["std_abs_error"] for r in rows],
        fmt="o-",
        label="spreads as variances",
    )
    alt_rows = [
        r for r in med["spread_read_as_std"]["fig_4_11"] if r["dp_epsilon"] is not None
    ]
    ax.plot(
        [r["dp_epsilon"] for r in alt_rows],
        [r["mean_abs_error"] for r in alt_rows],
        "s--",
        label="spreads as std devs",
    )
    no_dp = next(r for r in med["fig_4_11"] if r["dp_epsilon"] is None)
    ax.axhline(no_dp["mean_abs_error"], color="grey", ls="--", label="no noise")
    ax.set_xscale("log")
    ax.set_xlabel("differential privacy epsilon")
    ax.set_ylabel("absolute error of the median")
    ax.set_title("Fig. 4.11: quality vs DP protection")
    ax.legend()
    save(fig, "fig4_11")


def _plot(report: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(fig: Any, name: str) -> None:
        path = out.with_name(f"{out.stem}-{name}.png")
        fig.tight_layout()
        write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
        plt.close(fig)
        written.append(str(path))

    _plot_throughput(plt, report["throughput"], save)
    _plot_recommender(plt, report["recommender"], save)
    _plot_heatmaps(plt, report["heatmaps"], save)
    _plot_median_size(plt, report["median"], save)
    _plot_median_dp(plt, report["median"], save)
    return written


# ------------------------------------------------------------------ driver


def run_sketch_bench(
    out: Path,
    *,
    quick: bool = False,
    seed: int = 0,
    progress: Say | None = None,
) -> dict[str, Any]:
    """Run every section, write the JSON report and the plots (atomically).

    Parameters
    ----------
    out : Path
        The JSON file; plots go to ``<stem>-<plot>.png`` beside it.
    quick : bool, default=False
        CI-sized settings (about a minute on two cores).
    seed : int, default=0
        Seeds every section.
    progress : callable, optional
        Receives one line per step.

    Returns
    -------
    dict
        The report.
    """
    say = progress or (lambda _text: None)
    out = record_path(out)
    settings: dict[str, Any] = (
        {
            "throughput_items": 1_000_000,
            "throughput_repeats": 3,
            "user_counts": [1_000, 10_000, 100_000],
            "table_rows": 2,
            "heat_users": 150,
            "heat_days": 3,
            "sketch_eps": [0.01, 0.05, 0.15, 0.25],
            "dp_eps": [0.1, 1.0, 10.0],
            "repetitions": 10,
            "contributors": 40,
        }
        if quick
        else {
            "throughput_items": 1_000_000,
            "throughput_repeats": 7,
            "user_counts": [1_000, 10_000, 100_000, 1_000_000],
            "table_rows": 4,
            "heat_users": 536,
            "heat_days": 14,
            "sketch_eps": [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25],
            "dp_eps": [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0],
            "repetitions": 40,
            "contributors": 1200,
        }
    )
    started = time.perf_counter()
    report = BenchRecord("sketches", Path(out))
    report.update({"quick": quick, "seed": seed, "settings": settings})
    walls: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        start = time.perf_counter()
        report[name] = fn()
        walls[name] = time.perf_counter() - start

    say("throughput: Count-Min vs DataSketches")
    timed(
        "throughput",
        lambda: bench_throughput(
            settings["throughput_items"], settings["throughput_repeats"], seed
        ),
    )
    timed(
        "recommender",
        lambda: bench_recommender(
            settings["user_counts"], settings["table_rows"], seed, say
        ),
    )
    timed(
        "heatmaps",
        lambda: bench_heatmaps(
            settings["heat_users"], settings["heat_days"], seed, say
        ),
    )
    timed(
        "median",
        lambda: bench_median(
            settings["sketch_eps"],
            settings["dp_eps"],
            settings["repetitions"],
            settings["contributors"],
            seed,
            say,
        ),
    )
    report["wall_s"] = {**walls, "total": time.perf_counter() - started}
    say("plots")
    report["plots"] = _plot(report.body, out)
    return report.write()


def command(
    out: OutOption = Path("bench-sketches.json"),
    quick: Annotated[
        bool, typer.Option("--quick", help="CI-sized settings (about a minute).")
    ] = False,
    seed: SeedOption = 0,
) -> None:
    """Count-Min vs DataSketches, private recommender, heat maps, private median."""
    report = run_sketch_bench(
        out,
        quick=quick,
        seed=seed,
        progress=say,
    )
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
    written(out)
