"""Location check-ins: the public FourSquare format and a synthetic generator.

Seed 000 Ch. 7.2.1 trains a gender classifier on FourSquare check-ins (Yang
et al.'s NYC/TKY collection): each user is a record, the sequence of venues
they checked in at, embedded like the words of a text; Ch. 7.2.2 (Table 7.2)
infers membership of such records from the embedding updates.

:func:`read_foursquare_tsv` reads the public ``dataset_TSMC2014_NYC.txt`` /
``dataset_TSMC2014_TKY.txt`` files: one check-in per line, eight
tab-separated fields

=====  =======================  =========================================
field  name                     example
=====  =======================  =========================================
1      user id                  ``470``
2      venue id                 ``49bbd6c0f964a520f4531fe3``
3      venue category id        ``4bf58dd8d48988d127951735``
4      venue category name      ``Arts & Crafts Store``
5      latitude                 ``40.719810375488535``
6      longitude                ``-74.00258103213994``
7      timezone offset (min)    ``-240``
8      UTC time                 ``Tue Apr 03 18:00:09 +0000 2012``
=====  =======================  =========================================

The real data cannot be fetched on machines without network access, so
:func:`synthetic_checkins` generates check-ins with the structure that matters
for the attacks (documented there), and :func:`write_foursquare_tsv` writes
any table in the public format (tests round-trip through it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..validation import (
    Interval,
    check_int,
    check_positive,
    check_probability,
    check_real,
)
from .text import TextDataset, split_text_dataset

__all__ = [
    "CheckinTable",
    "SyntheticCheckins",
    "checkin_dataset",
    "checkin_users",
    "read_foursquare_tsv",
    "synthetic_checkin_task",
    "synthetic_checkins",
    "user_venue_sequences",
    "write_foursquare_tsv",
]

_NUM_FIELDS = 8
_TIME_FORMAT = "%a %b %d %H:%M:%S %z %Y"
_MONTHS = {
    m: i
    for i, m in enumerate(
        [
            "Jan",
            "Feb",
            "Mar",
            "Apr",
            "May",
            "Jun",
            "Jul",
            "Aug",
            "Sep",
            "Oct",
            "Nov",
            "Dec",
        ],
        1,
    )
}
# Bounding box of the synthetic city (roughly New York City).
_LAT_RANGE = (40.55, 40.90)
_LON_RANGE = (-74.05, -73.70)
_SYNTHETIC_START = datetime(2012, 4, 3, tzinfo=UTC)
_SYNTHETIC_DAYS = 300


@dataclass(frozen=True)
class CheckinTable:
    """Check-ins as parallel columns (one entry per check-in).

    Parameters
    ----------
    user : numpy.ndarray
        int64 user ids.
    venue : numpy.ndarray
        Venue ids (str).
    category_id, category_name : numpy.ndarray
        Venue category id and name (str).
    latitude, longitude : numpy.ndarray
        float64 coordinates in degrees.
    tz_offset : numpy.ndarray
        int64 timezone offset in minutes.
    utc_time : numpy.ndarray
        ``datetime64[s]`` UTC timestamps.
    source : str
        Where the check-ins came from.
    """

    user: np.ndarray
    venue: np.ndarray
    category_id: np.ndarray
    category_name: np.ndarray
    latitude: np.ndarray
    longitude: np.ndarray
    tz_offset: np.ndarray
    utc_time: np.ndarray
    source: str = ""

    def __len__(self) -> int:
        return int(self.user.shape[0])

    @property
    def users(self) -> np.ndarray:
        """The distinct user ids, sorted."""
        return np.unique(self.user)


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        # The public files mix in ISO-8859-1 category names ("Caf\xe9").
        return raw.decode("latin-1")


def _parse_time(when: str, where: str) -> int:
    """Parse ``'Tue Apr 03 18:00:09 +0000 2012'`` to POSIX seconds.

    Hand-parsed (``datetime.strptime`` is locale-dependent and about ten
    times slower on the half-million lines of the NYC file).
    """
    parts = when.split()
    try:
        if len(parts) != 6:
            raise ValueError(when)
        _, month, day, clock, zone, year = parts
        hour, minute, second = (int(x) for x in clock.split(":"))
        sign = -1 if zone[0] == "-" else 1
        if zone[0] not in "+-" or len(zone) != 5:
            raise ValueError(zone)
        offset = sign * (int(zone[1:3]) * 60 + int(zone[3:5]))
        stamp = datetime(
            int(year), _MONTHS[month], int(day), hour, minute, second, tzinfo=UTC
        )
    except (ValueError, KeyError):
        raise DataError(
            f"{where}: UTC time {when!r} is not like 'Tue Apr 03 18:00:09 +0000 2012'"
        ) from None
    return int(stamp.timestamp()) - offset * 60


def _parse_line(text: str, where: str) -> tuple[object, ...]:
    fields = text.split("\t")
    if len(fields) != _NUM_FIELDS:
        raise DataError(
            f"{where}: expected {_NUM_FIELDS} tab-separated fields (user, venue, "
            f"category id, category name, latitude, longitude, timezone offset, "
            f"UTC time), got {len(fields)}"
        )
    user, venue, cat_id, cat_name, lat, lon, offset, when = fields
    try:
        user_id = int(user)
        latitude, longitude = float(lat), float(lon)
        tz_offset = int(offset)
    except ValueError as err:
        raise DataError(f"{where}: bad number ({err})") from None
    if not (-90.0 <= latitude <= 90.0 and -180.0 <= longitude <= 180.0):
        raise DataError(f"{where}: coordinates ({latitude}, {longitude}) out of range")
    if not venue:
        raise DataError(f"{where}: empty venue id")
    seconds = _parse_time(when.strip(), where)
    return user_id, venue, cat_id, cat_name, latitude, longitude, tz_offset, seconds


def read_foursquare_tsv(path: str | os.PathLike[str]) -> CheckinTable:
    """Read a FourSquare TSMC2014 check-in file (NYC or TKY).

    Blank lines are skipped. Lines that are UTF-8 are decoded as such, others
    as ISO-8859-1 (the public files contain both).

    Raises
    ------
    DataError
        If the file cannot be read, or a line is malformed; the message names
        the file and the 1-based line number.
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise DataError(f"cannot read check-in file {path}: {err}") from err
    rows: list[tuple[object, ...]] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        text = _decode(line).rstrip("\r")
        if not text.strip():
            continue
        rows.append(_parse_line(text, f"{path}, line {number}"))
    if not rows:
        raise DataError(f"{path} holds no check-ins")
    columns = list(zip(*rows, strict=True))
    return CheckinTable(
        user=np.asarray(columns[0], dtype=np.int64),
        venue=np.asarray(columns[1], dtype=str),
        category_id=np.asarray(columns[2], dtype=str),
        category_name=np.asarray(columns[3], dtype=str),
        latitude=np.asarray(columns[4], dtype=np.float64),
        longitude=np.asarray(columns[5], dtype=np.float64),
        tz_offset=np.asarray(columns[6], dtype=np.int64),
        utc_time=np.asarray(columns[7], dtype=np.int64).astype("datetime64[s]"),
        source=os.fspath(path),
    )


def write_foursquare_tsv(table: CheckinTable, path: str | os.PathLike[str]) -> None:
    """Write ``table`` in the public TSMC2014 format (UTF-8), atomically."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("w", encoding="utf-8", newline="\n") as out:
        for i in range(len(table)):
            seconds = int(table.utc_time[i].astype("datetime64[s]").astype(np.int64))
            when = datetime.fromtimestamp(seconds, tz=UTC).strftime(_TIME_FORMAT)
            fields = (
                str(int(table.user[i])),
                str(table.venue[i]),
                str(table.category_id[i]),
                str(table.category_name[i]),
                repr(float(table.latitude[i])),
                repr(float(table.longitude[i])),
                str(int(table.tz_offset[i])),
                when,
            )
            out.write("\t".join(fields) + "\n")
    os.replace(tmp, target)


def user_venue_sequences(
    table: CheckinTable, *, min_distinct: int = 1
) -> dict[int, list[str]]:
    """Return each user's venues in time order (the records of Ch. 7.2.1).

    Parameters
    ----------
    table : CheckinTable
        The check-ins.
    min_distinct : int, default=1
        Keep only users with at least this many distinct venues (the thesis
        keeps users "who checked in at least 10 different locations").

    Returns
    -------
    dict of int to list of str
        User id (ascending) -> venue ids ordered by time (ties by file order).
    """
    min_distinct = check_int("min_distinct", min_distinct, low=1)
    order = np.lexsort((np.arange(len(table)), table.utc_time, table.user))
    out: dict[int, list[str]] = {}
    for i in order:
        out.setdefault(int(table.user[i]), []).append(str(table.venue[i]))
    return {u: v for u, v in out.items() if len(set(v)) >= min_distinct}


def checkin_users(
    table: CheckinTable, attribute: Mapping[int, int], *, min_distinct: int = 10
) -> list[int]:
    """Return the users :func:`checkin_dataset` keeps, in record order."""
    sequences = user_venue_sequences(table, min_distinct=min_distinct)
    return [u for u in sequences if u in attribute]


def checkin_dataset(
    table: CheckinTable,
    attribute: Mapping[int, int],
    *,
    vocab_size: int | None = 30000,
    length: int = 100,
    min_distinct: int = 10,
    test_fraction: float = 0.2,
    seed: int | np.random.Generator = 0,
) -> TextDataset:
    """Turn check-ins into a user-attribute classification task over venue ids.

    The records are the users of :func:`checkin_users` (ascending ids):
    ``train_index`` / ``test_index`` of the result index that list.

    Parameters
    ----------
    table : CheckinTable
        The check-ins.
    attribute : mapping of int to int
        The label (e.g. gender, 0/1) of each user; users without one are
        dropped.
    vocab_size : int or None, default=30000
        Keep the top-``N`` venues (Ch. 7.2.2: "30,000 most popular
        locations"); others become unknown.
    length : int, default=100
        Fixed record length ``l`` (100 on FourSquare).
    min_distinct : int, default=10
        Minimum number of distinct venues of a kept user.
    test_fraction : float, default=0.2
        Held-out fraction of users.
    seed : int or numpy.random.Generator, default=0
        Drives the split.
    """
    sequences = user_venue_sequences(table, min_distinct=min_distinct)
    users = checkin_users(table, attribute, min_distinct=min_distinct)
    if not users:
        raise DataError(
            "no user has both an attribute and enough distinct venues "
            f"(min_distinct={min_distinct})"
        )
    labels = np.asarray([attribute[u] for u in users], dtype=np.int64)
    num_classes = int(labels.max()) + 1
    return split_text_dataset(
        [sequences[u] for u in users],
        labels,
        [str(c) for c in range(max(num_classes, 2))],
        vocab_size=vocab_size,
        length=length,
        test_fraction=test_fraction,
        seed=seed,
        source=table.source,
    )


@dataclass(frozen=True)
class SyntheticCheckins:
    """Synthetic check-ins with each user's hidden attribute and home area.

    Parameters
    ----------
    table : CheckinTable
        The check-ins (users ``0 .. num_users - 1``).
    attribute : numpy.ndarray
        int64 binary attribute of each user (the stand-in for gender).
    home_area : numpy.ndarray
        int64 home area of each user.
    """

    table: CheckinTable
    attribute: np.ndarray
    home_area: np.ndarray

    def attribute_map(self) -> dict[int, int]:
        """Return user id -> attribute, for :func:`checkin_dataset`."""
        return {u: int(a) for u, a in enumerate(self.attribute)}


@dataclass(frozen=True)
class _Venues:
    """The synthetic city's venues (step 1 of :func:`synthetic_checkins`)."""

    area: np.ndarray
    category: np.ndarray
    popularity: np.ndarray
    latitude: np.ndarray
    longitude: np.ndarray


def _draw_venues(
    rng: np.random.Generator,
    num_venues: int,
    num_areas: int,
    num_categories: int,
    zipf_exponent: float,
) -> _Venues:
    """Draw each venue's area, category, Zipf popularity and coordinates."""
    side = math.isqrt(num_areas - 1) + 1
    area = rng.integers(0, num_areas, num_venues)
    category = rng.integers(0, num_categories, num_venues)
    popularity = (rng.permutation(num_venues) + 1.0) ** -zipf_exponent
    cell_lat = (_LAT_RANGE[1] - _LAT_RANGE[0]) / side
    cell_lon = (_LON_RANGE[1] - _LON_RANGE[0]) / side
    lat = _LAT_RANGE[0] + (area // side + rng.random(num_venues)) * cell_lat
    lon = _LON_RANGE[0] + (area % side + rng.random(num_venues)) * cell_lon
    return _Venues(area, category, popularity, lat, lon)


def _preference_weights(
    venues: _Venues, num_categories: int, attribute_shift: float, neutral_head: int = 0
) -> dict[int, np.ndarray]:
    """Return attribute -> venue weights (step 3 of :func:`synthetic_checkins`).

    Categories below ``num_categories // 2`` are favoured by attribute 1, the
    others by attribute 0; a favoured venue's popularity is multiplied by
    ``attribute_shift``, except for the ``neutral_head`` most popular venues,
    which both attribute values weigh alike.
    """
    favoured_by_one = venues.category < num_categories // 2
    head = np.zeros(venues.popularity.shape[0], dtype=bool)
    head[np.argsort(-venues.popularity, kind="stable")[:neutral_head]] = True
    return {
        b: venues.popularity
        * np.where((favoured_by_one == bool(b)) & ~head, attribute_shift, 1.0)
        for b in (0, 1)
    }


def _draw_user_venues(
    rng: np.random.Generator,
    count: int,
    weights: np.ndarray,
    local: np.ndarray,
    home_fraction: float,
) -> np.ndarray:
    """Draw one user's ``count`` venue indices (step 4 of :func:`synthetic_checkins`).

    Each check-in is at home with probability ``home_fraction`` (never when
    the home area has no venue) and drawn among ``local``, otherwise among
    every venue, with probability proportional to ``weights``.
    """
    at_home = rng.random(count) < home_fraction
    if local.size == 0:
        at_home[:] = False
    picks = np.empty(count, dtype=np.int64)
    n_home = int(at_home.sum())
    if n_home:
        p = weights[local] / weights[local].sum()
        picks[at_home] = rng.choice(local, size=n_home, p=p)
    if n_home < count:
        p = weights / weights.sum()
        picks[~at_home] = rng.choice(weights.size, size=count - n_home, p=p)
    return picks


def _synthetic_table(
    user: np.ndarray, venue_idx: np.ndarray, venues: _Venues, seconds: np.ndarray
) -> CheckinTable:
    """Lay out synthetic check-ins in the public format's columns."""
    category = venues.category[venue_idx]
    return CheckinTable(
        user=user,
        venue=np.asarray([f"{v:024x}" for v in venue_idx], dtype=str),
        category_id=np.asarray([f"{c:024x}" for c in category], dtype=str),
        category_name=np.asarray([f"Category {c}" for c in category], dtype=str),
        latitude=venues.latitude[venue_idx],
        longitude=venues.longitude[venue_idx],
        tz_offset=np.full(user.shape[0], -240, dtype=np.int64),
        utc_time=seconds.astype("datetime64[s]"),
        source="synthetic check-ins (fedleak.data.checkins.synthetic_checkins)",
    )


def synthetic_checkins(
    num_users: int = 2000,
    num_venues: int = 5000,
    *,
    num_areas: int = 25,
    num_categories: int = 20,
    zipf_exponent: float = 1.0,
    min_checkins: int = 10,
    mean_checkins: float = 25.0,
    home_fraction: float = 0.7,
    attribute_fraction: float = 0.5,
    attribute_shift: float = 3.0,
    neutral_head: int = 0,
    seed: int | np.random.Generator = 0,
) -> SyntheticCheckins:
    """Generate FourSquare-like check-ins with a venue-preference attribute.

    The generative model (every draw from one seeded generator):

    1. **Venues.** Each venue ``v`` gets a uniform area ``a_v`` (areas are
       the cells of a square grid over a city-sized box), a uniform category
       ``c_v`` and a Zipf popularity ``w_v = rank_v ** -zipf_exponent`` with
       ranks a random permutation of ``1 .. num_venues`` (a few venues are
       very popular, most are rare, as in real check-in data); coordinates
       are uniform inside the venue's cell.
    2. **Users.** Each user ``u`` gets a uniform home area ``h_u``, a binary
       attribute ``b_u ~ Bernoulli(attribute_fraction)``, and
       ``n_u = min_checkins + Poisson(mean_checkins - min_checkins)``
       check-ins.
    3. **Preferences.** Categories ``c < num_categories / 2`` are favoured by
       users with ``b_u = 1``, the others by users with ``b_u = 0``: a
       favoured venue's weight is multiplied by ``attribute_shift``. This is
       the signal the collaborative (gender-like) classifier learns; the
       ``neutral_head`` most popular venues are favoured by nobody (the
       signal then in the long tail only, as in seed 000 Table 7.6's data).
    4. **Check-ins.** Each check-in is, with probability ``home_fraction``,
       drawn among the venues of ``h_u``, otherwise among all venues, with
       probability proportional to ``w_v`` times the preference factor.
       Times are uniform over 300 days from 2012-04-03 (UTC offset -240).

    Parameters
    ----------
    num_users, num_venues : int
        Sizes.
    num_areas : int, default=25
        Number of home areas (rounded up to a square grid).
    num_categories : int, default=20
        Number of venue categories (>= 2).
    zipf_exponent : float, default=1.0
        Popularity skew ``s`` (> 0).
    min_checkins : int, default=10
        Minimum check-ins per user.
    mean_checkins : float, default=25.0
        Mean check-ins per user (>= ``min_checkins``).
    home_fraction : float, default=0.7
        Probability that a check-in is in the home area.
    attribute_fraction : float, default=0.5
        Fraction of users with attribute 1.
    attribute_shift : float, default=3.0
        Preference factor for favoured categories (1 = no signal).
    neutral_head : int, default=0
        Most popular venues that carry no preference (at most ``num_venues``).
    seed : int or numpy.random.Generator, default=0
        Seed; the same seed gives the same check-ins.
    """
    num_users = check_int("num_users", num_users, low=1)
    num_venues = check_int("num_venues", num_venues, low=1)
    num_areas = check_int("num_areas", num_areas, low=1)
    num_categories = check_int("num_categories", num_categories, low=2)
    min_checkins = check_int("min_checkins", min_checkins, low=1)
    check_probability("home_fraction", home_fraction)
    check_probability("attribute_fraction", attribute_fraction)
    check_positive("zipf_exponent", zipf_exponent)
    check_real("mean_checkins", mean_checkins, Interval(min_checkins, None))
    check_real("attribute_shift", attribute_shift, Interval(1, None))
    neutral_head = check_int("neutral_head", neutral_head, low=0, high=num_venues)
    rng = np.random.default_rng(seed)
    venues = _draw_venues(rng, num_venues, num_areas, num_categories, zipf_exponent)
    weight_of = _preference_weights(
        venues, num_categories, attribute_shift, neutral_head
    )
    venues_in = [np.flatnonzero(venues.area == a) for a in range(num_areas)]
    home = rng.integers(0, num_areas, num_users)
    attribute = (rng.random(num_users) < attribute_fraction).astype(np.int64)
    counts = min_checkins + rng.poisson(mean_checkins - min_checkins, num_users)
    chosen = [
        _draw_user_venues(
            rng,
            counts[u],
            weight_of[int(attribute[u])],
            venues_in[int(home[u])],
            home_fraction,
        )
        for u in range(num_users)
    ]
    user = np.concatenate([np.full(n, u, dtype=np.int64) for u, n in enumerate(counts)])
    start = int(_SYNTHETIC_START.timestamp())
    seconds = start + rng.integers(0, _SYNTHETIC_DAYS * 86400, user.shape[0])
    table = _synthetic_table(user, np.concatenate(chosen), venues, np.asarray(seconds))
    return SyntheticCheckins(table=table, attribute=attribute, home_area=home)


def synthetic_checkin_task(
    size: int,
    *,
    num_areas: int,
    test_fraction: float,
    seed: int,
    home_fraction: float = 0.7,
    mean_checkins: float = 20.0,
    attribute_shift: float = 3.0,
    neutral_head: int = 0,
    num_venues: int | None = None,
) -> tuple[TextDataset, SyntheticCheckins]:
    """Return the benchmarks' check-in task and the check-ins it encodes.

    :func:`synthetic_checkins` with ``size`` users and ``num_venues`` venues
    (default ``size``) in ``num_areas`` home areas (Zipf exponent 1,
    ``mean_checkins`` check-ins per user on average, at least 10, a share
    ``home_fraction`` of them in the home area, the attribute favouring
    venues by ``attribute_shift`` outside the ``neutral_head`` most popular
    ones), encoded by :func:`checkin_dataset` as records of 60 venues among
    the top 30,000, labelled with the user attribute, a share
    ``test_fraction`` of the users held out. ``seed`` drives both.
    """
    synthetic = synthetic_checkins(
        num_users=size,
        num_venues=size if num_venues is None else num_venues,
        num_areas=num_areas,
        zipf_exponent=1.0,
        mean_checkins=mean_checkins,
        home_fraction=home_fraction,
        attribute_shift=attribute_shift,
        neutral_head=neutral_head,
        seed=seed,
    )
    data = checkin_dataset(
        synthetic.table,
        synthetic.attribute_map(),
        vocab_size=30000,
        length=60,
        test_fraction=test_fraction,
        seed=seed,
    )
    return data, synthetic
