"""Private location heat maps and their EWMA prediction (seed 000 Ch. 4.2, 2.3.2).

A territory is a ``p x p`` grid of cells; in every time slot each user
counts how often it logged a position in each cell, inserts the counts into
a Count-Min Sketch and sends it masked; the tally sums the sketches
(:func:`fedleak.sketches.masked.aggregate_sketches`) and estimates every
cell: the heat map of the slot (:func:`sketch_heat_maps`). Heat maps are
then predicted one slot ahead with an exponentially weighted moving average
(:func:`ewma_predict`, Sec. 2.3.2).

Data: :func:`load_cabspotting` reads the public San Francisco cab traces the
seed uses (the cabspotting format: one ``new_<cab>.txt`` per cab with lines
``latitude longitude occupancy unix-time``); they cannot be fetched here, so
benchmarks use :func:`synthetic_mobility`, documented there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, DataError
from ..validation import check_int, check_probability
from .count_min import CountMinSketch

__all__ = [
    "LocationLog",
    "SAN_FRANCISCO_BOX",
    "cell_ids",
    "ewma_predict",
    "heat_maps",
    "load_cabspotting",
    "prediction_errors",
    "sketch_heat_maps",
    "synthetic_mobility",
    "prediction_gap",
    "top_cell_error",
    "user_slot_sketches",
]

#: Bounding box ``(lat_min, lat_max, lon_min, lon_max)`` of San Francisco.
SAN_FRANCISCO_BOX = (37.70, 37.82, -122.52, -122.36)


@dataclass
class LocationLog:
    """Position records: one row per logged position.

    Attributes
    ----------
    user : numpy.ndarray
        int64 user (cab) index per record.
    slot : numpy.ndarray
        int64 time slot per record (0-based).
    cell : numpy.ndarray
        int64 grid cell ``row * p + column`` per record.
    grid : int
        ``p``.
    n_slots : int
        Number of slots.
    """

    user: np.ndarray
    slot: np.ndarray
    cell: np.ndarray
    grid: int
    n_slots: int

    @property
    def n_cells(self) -> int:
        """``p * p``."""
        return self.grid * self.grid


def cell_ids(
    lat: np.ndarray,
    lon: np.ndarray,
    grid: int,
    box: tuple[float, float, float, float] = SAN_FRANCISCO_BOX,
) -> np.ndarray:
    """Map coordinates to cells ``row * p + column`` of a ``p x p`` grid.

    Points outside ``box`` get ``-1``.
    """
    lat_min, lat_max, lon_min, lon_max = box
    check_int("grid", grid, low=1)
    if not (lat_max > lat_min and lon_max > lon_min):
        raise ConfigError(
            "box must be (lat_min, lat_max, lon_min, lon_max) with max > min; "
            f"got {tuple(box)!r}."
        )
    la = np.asarray(lat, dtype=np.float64)
    lo = np.asarray(lon, dtype=np.float64)
    row = np.floor((la - lat_min) / (lat_max - lat_min) * grid).astype(np.int64)
    col = np.floor((lo - lon_min) / (lon_max - lon_min) * grid).astype(np.int64)
    inside = (row >= 0) & (row < grid) & (col >= 0) & (col < grid)
    return np.where(inside, row * grid + col, -1)


def load_cabspotting(
    folder: str | Path,
    *,
    grid: int = 100,
    slot_seconds: int = 3600,
    box: tuple[float, float, float, float] = SAN_FRANCISCO_BOX,
) -> LocationLog:
    """Load the cabspotting traces (``new_<cab>.txt`` files) into a grid log.

    Each line is ``latitude longitude occupancy unix-time``. Slots start at
    the earliest time in the data; positions outside ``box`` are dropped.

    Parameters
    ----------
    folder : str or Path
        The folder holding the ``new_*.txt`` files.
    grid : int, default=100
        ``p`` (the seed uses ``100 x 100``).
    slot_seconds : int, default=3600
        Slot length (the seed uses hours).
    box : tuple of float
        ``(lat_min, lat_max, lon_min, lon_max)``.

    Raises
    ------
    DataError
        If the folder holds no trace, or a line is malformed (the message
        names the file and line).
    """
    files = sorted(Path(folder).glob("new_*.txt"))
    if not files:
        raise DataError(
            f"no cabspotting traces (new_<cab>.txt) in {folder}; the dataset is "
            "the public 'epfl/mobility' cab trace set, unpack it there."
        )
    users, lats, lons, times = [], [], [], []
    for index, path in enumerate(files):
        try:
            raw = np.loadtxt(path, dtype=np.float64, ndmin=2)
        except ValueError as err:
            raise DataError(
                f"{path.name}: malformed cabspotting line ({err})."
            ) from err
        if raw.size == 0:
            continue
        if raw.shape[1] != 4:
            raise DataError(
                f"{path.name}: expected 4 columns (lat lon occupancy time), got "
                f"{raw.shape[1]}."
            )
        users.append(np.full(raw.shape[0], index, dtype=np.int64))
        lats.append(raw[:, 0])
        lons.append(raw[:, 1])
        times.append(raw[:, 3].astype(np.int64))
    if not users:
        raise DataError(f"the cabspotting traces in {folder} are empty.")
    t = np.concatenate(times)
    slot = (t - t.min()) // slot_seconds
    cell = cell_ids(np.concatenate(lats), np.concatenate(lons), grid, box)
    keep = cell >= 0
    user = np.concatenate(users)
    return LocationLog(
        user=user[keep],
        slot=slot[keep],
        cell=cell[keep],
        grid=grid,
        n_slots=int(slot.max()) + 1,
    )


def synthetic_mobility(
    n_users: int,
    n_slots: int = 24 * 14,
    *,
    grid: int = 100,
    hotspots: int = 40,
    peak_reports: float = 40.0,
    burstiness: float = 0.0,
    seed: int = 0,
) -> LocationLog:
    """Synthetic hourly position logs with daily and weekly cycles.

    Model (documented stand-in for the cab traces): the map holds
    ``hotspots`` Gaussian blobs with Zipf weights; every user has a home
    blob. In slot ``t`` (hours, day ``t // 24``) a user reports
    ``Poisson(peak_reports * a(t))`` positions, with the activity ``a(t) =
    (0.55 - 0.45 cos(2 pi (h - 4) / 24)) * (0.7 on weekend days, else 1)``
    (quiet at 4 am, busy in the afternoon). Each position is in the home
    blob with probability ``0.6`` at night and ``0.3`` by day, else in a blob
    drawn by weight, scattered by a normal of 1.5 cells.

    Parameters
    ----------
    n_users : int
        Users (cabs), >= 1.
    n_slots : int, default=336
        Hourly slots (two weeks).
    grid : int, default=100
        ``p``.
    hotspots : int, default=40
        Blobs.
    peak_reports : float, default=40.0
        Mean positions per user in the busiest hour (536 users then peak at
        about 25,000 positions per hour, as the seed's cab traces).
    burstiness : float, default=0.0
        Hour-to-hour overdispersion of the demand away from home: with
        ``burstiness = b > 0`` each (slot, blob) weight is multiplied by an
        independent ``Gamma(1 / b, b)`` factor (mean 1, variance ``b``), so a
        blob's counts fluctuate from one hour to the next beyond the Poisson
        noise (events, traffic; real traces are bursty). ``0`` keeps the
        smooth cycles only (and the exact draws of earlier versions).
    seed : int, default=0
        Random seed.

    Returns
    -------
    LocationLog
    """
    check_int("n_users", n_users, low=1)
    check_int("n_slots", n_slots, low=1)
    check_int("grid", grid, low=2)
    check_int("hotspots", hotspots, low=1)
    if not (math.isfinite(burstiness) and burstiness >= 0.0):
        raise ConfigError(f"burstiness must be a finite number >= 0, got {burstiness}")
    rng = np.random.default_rng(seed)
    centers = rng.uniform(0.1 * grid, 0.9 * grid, size=(hotspots, 2))
    weights = 1.0 / np.arange(1, hotspots + 1)
    weights /= weights.sum()
    home = rng.choice(hotspots, size=n_users, p=weights)
    hours = np.arange(n_slots)
    activity = 0.55 - 0.45 * np.cos(2 * math.pi * ((hours % 24) - 4) / 24)
    weekend = (hours // 24) % 7 >= 5
    activity = activity * np.where(weekend, 0.7, 1.0)
    counts = rng.poisson(peak_reports * activity[None, :], size=(n_users, n_slots))
    user, slot = np.nonzero(counts)
    reps = counts[user, slot]
    user = np.repeat(user, reps).astype(np.int64)
    slot = np.repeat(slot, reps).astype(np.int64)
    night = (slot % 24 < 7) | (slot % 24 >= 22)
    at_home = rng.random(user.size) < np.where(night, 0.6, 0.3)
    if burstiness > 0.0:
        away = _bursty_blobs(rng, slot, weights, n_slots, burstiness)
    else:
        away = rng.choice(hotspots, size=user.size, p=weights)
    blob = np.where(at_home, home[user], away)
    xy = centers[blob] + rng.normal(0.0, 1.5, size=(user.size, 2))
    rc = np.clip(np.floor(xy).astype(np.int64), 0, grid - 1)
    return LocationLog(
        user=user,
        slot=slot,
        cell=rc[:, 0] * grid + rc[:, 1],
        grid=grid,
        n_slots=n_slots,
    )


def _bursty_blobs(
    rng: np.random.Generator,
    slot: np.ndarray,
    weights: np.ndarray,
    n_slots: int,
    burstiness: float,
) -> np.ndarray:
    """Draw one blob per position from its slot's Gamma-perturbed weights."""
    shape = 1.0 / burstiness
    factors = rng.gamma(shape, burstiness, size=(n_slots, weights.size))
    slot_weights = weights[None, :] * factors
    cumulative = np.cumsum(slot_weights, axis=1)
    cumulative /= cumulative[:, -1:]
    u = rng.random(slot.size)
    out = np.empty(slot.size, dtype=np.int64)
    order = np.argsort(slot, kind="stable")
    bounds = np.searchsorted(slot[order], np.arange(n_slots + 1))
    for s in range(n_slots):
        where = order[bounds[s] : bounds[s + 1]]
        out[where] = np.searchsorted(cumulative[s], u[where], side="right")
    return np.minimum(out, weights.size - 1)


def heat_maps(log: LocationLog) -> np.ndarray:
    """Exact heat maps: counts per slot and cell, shape ``(n_slots, p * p)``."""
    flat = log.slot * log.n_cells + log.cell
    counts = np.bincount(flat, minlength=log.n_slots * log.n_cells)
    return counts.reshape(log.n_slots, log.n_cells).astype(np.int64)


def user_slot_sketches(
    log: LocationLog, slot: int, template: CountMinSketch
) -> dict[int, CountMinSketch]:
    """Every user's sketch of its cell counts in one slot (Ch. 4.2, Overview)."""
    in_slot = np.nonzero(log.slot == slot)[0]
    order = np.argsort(log.user[in_slot], kind="stable")
    users = log.user[in_slot][order]
    cells = log.cell[in_slot][order]
    ids, starts = np.unique(users, return_index=True)
    out: dict[int, CountMinSketch] = {}
    for user, own in zip(ids.tolist(), np.split(cells, starts[1:]), strict=True):
        sketch = template.with_table(np.zeros(template.size, dtype=np.int64))
        sketch.update(own)
        out[int(user)] = sketch
    return out


def sketch_heat_maps(
    maps: np.ndarray, template: CountMinSketch, slots: Iterable[int] | None = None
) -> np.ndarray:
    """Heat maps as the tally estimates them from the summed users' sketches.

    By linearity the sum of the users' sketches of a slot is the sketch of
    that slot's heat map, which this builds directly.

    Parameters
    ----------
    maps : numpy.ndarray
        Exact heat maps ``(n_slots, n_cells)`` (:func:`heat_maps`).
    template : CountMinSketch
        Sketch shape and hashes.
    slots : Iterable of int, optional
        Slots to estimate (others stay zero); default all.

    Returns
    -------
    numpy.ndarray
        int64 estimates, same shape as ``maps``.
    """
    out = np.zeros_like(maps)
    cells = np.arange(maps.shape[1])
    for t in range(maps.shape[0]) if slots is None else slots:
        sketch = template.with_table(np.zeros(template.size, dtype=np.int64))
        nz = np.nonzero(maps[t])[0]
        sketch.update(nz, maps[t, nz])
        out[t] = sketch.estimate(cells)
    return out


def top_cell_error(
    true: np.ndarray, estimate: np.ndarray, *, top: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """Fig. 4.7: per slot, ``|c_hat - c| / sum_j |c_j|`` over the ``top`` cells.

    Returns
    -------
    mean : numpy.ndarray
        Average error per slot (0 for empty slots).
    relative_std : numpy.ndarray
        Its standard deviation over the cells divided by the mean.
    """
    means = np.zeros(true.shape[0])
    rsd = np.zeros(true.shape[0])
    for t in range(true.shape[0]):
        l1 = float(np.abs(true[t]).sum())
        if l1 == 0:
            continue
        idx = np.argsort(-true[t], kind="stable")[:top]
        err = np.abs(estimate[t, idx] - true[t, idx]) / l1
        means[t] = err.mean()
        rsd[t] = err.std() / err.mean() if err.mean() > 0 else 0.0
    return means, rsd


def ewma_predict(history: np.ndarray, alpha: float) -> np.ndarray:
    """EWMA prediction of the next value (seed 000 Sec. 2.3.2).

    ``r_hat(t + 1) = sum_{t'=1}^{t} alpha (1 - alpha)^(t - t') r(t')``, with
    ``t' = 1`` the oldest observation; vectorised over trailing axes.

    Parameters
    ----------
    history : numpy.ndarray
        Observations ``(t, ...)``, oldest first.
    alpha : float
        Smoothing coefficient in ``(0, 1)``.

    Returns
    -------
    numpy.ndarray
        The prediction, shape ``history.shape[1:]``.
    """
    check_probability("alpha", alpha, closed="neither")
    r = np.asarray(history, dtype=np.float64)
    if r.shape[0] < 1:
        raise DataError("EWMA needs at least one observation.")
    t = r.shape[0]
    weights = alpha * (1.0 - alpha) ** (t - np.arange(1, t + 1))
    return np.tensordot(weights, r, axes=(0, 0))


def prediction_errors(
    maps: np.ndarray,
    targets: Iterable[int],
    alpha: float,
    *,
    window: int = 24,
    top: int = 100,
    reference: np.ndarray | None = None,
) -> np.ndarray:
    """Figs. 4.8-4.9: MAE of the EWMA prediction over the top cells, per target.

    For each target slot ``s``, the slots ``s - window .. s - 1`` of
    ``maps`` predict slot ``s``; the error is the mean absolute difference
    over the ``top`` cells of the truth ``reference[s]`` (default ``maps``,
    whose top cells are used either way).
    """
    truth = maps if reference is None else reference
    out = []
    for s in targets:
        if s < window:
            raise ConfigError(f"target slot {s} has fewer than {window} past slots.")
        pred = ewma_predict(maps[s - window : s], alpha)
        idx = np.argsort(-truth[s], kind="stable")[:top]
        out.append(float(np.mean(np.abs(pred[idx] - truth[s, idx]))))
    return np.asarray(out)


def prediction_gap(
    true_maps: np.ndarray,
    sketched_maps: np.ndarray,
    targets: Iterable[int],
    alpha: float,
    *,
    window: int = 24,
    top: int = 100,
) -> np.ndarray:
    """Fig. 4.9: MAE between the EWMA predictions from sketched and exact maps.

    Over the ``top`` cells of each target slot's exact heat map.
    """
    out = []
    for s in targets:
        if s < window:
            raise ConfigError(f"target slot {s} has fewer than {window} past slots.")
        exact = ewma_predict(true_maps[s - window : s], alpha)
        approx = ewma_predict(sketched_maps[s - window : s], alpha)
        idx = np.argsort(-true_maps[s], kind="stable")[:top]
        out.append(float(np.mean(np.abs(approx[idx] - exact[idx]))))
    return np.asarray(out)
