"""The public Yelp dataset's reviews file (JSON lines), seed 000 Ch. 7.2.1.

Yelp-health and Yelp-author of the thesis are subsets of Yelp's
``yelp_academic_dataset_review.json``: one JSON object per line, e.g. ::

    {"review_id": "KU_O5udG6zpxOg-VcAEodg", "user_id": "mh_-eMZ6K5RLWhZyISBhwA",
     "business_id": "XQfwVwDr-v0ZS3_CbbE5Xw", "stars": 3.0, "useful": 0,
     "funny": 0, "cool": 0, "text": "If you decide to eat here, ...",
     "date": "2018-07-07 22:09:11"}

and ``yelp_academic_dataset_business.json`` (``business_id``, ``categories``
as one comma-separated string, e.g. ``"Doctors, Health & Medical"``), used to
select the health-care reviews and their specialty. The data cannot be
fetched here; the loaders are tested on files the tests write in this format.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from .text import TextDataset, split_text_dataset, tokenize

__all__ = [
    "YelpReviews",
    "read_yelp_businesses",
    "read_yelp_reviews",
    "yelp_dataset",
]

_REQUIRED_REVIEW_KEYS = ("user_id", "business_id", "stars", "text")


@dataclass(frozen=True)
class YelpReviews:
    """Yelp reviews as parallel columns.

    Parameters
    ----------
    texts : tuple of str
        Review texts.
    stars : numpy.ndarray
        int64 rating in ``1 .. 5``.
    user_id, business_id : tuple of str
        Author and reviewed business.
    date : tuple of str
        The ``date`` field as given ("" when absent).
    source : str
        The file read.
    """

    texts: tuple[str, ...]
    stars: np.ndarray
    user_id: tuple[str, ...]
    business_id: tuple[str, ...]
    date: tuple[str, ...]
    source: str

    def __len__(self) -> int:
        return len(self.texts)


class _NonStandardConstant(ValueError):
    """``NaN``/``Infinity`` in a file: Python's json accepts them, JSON does not."""


def _no_constant(name: str) -> Any:
    raise _NonStandardConstant(f"{name} is not a JSON value")


def _json_lines(path: str | os.PathLike[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise DataError(f"cannot read Yelp file {path}: {err}") from err
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            obj = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
        except UnicodeDecodeError:
            raise DataError(f"{where}: not UTF-8 (Yelp files are UTF-8)") from None
        except json.JSONDecodeError as err:
            raise DataError(f"{where}: not valid JSON ({err.msg})") from None
        except _NonStandardConstant as err:
            raise DataError(f"{where}: not valid JSON ({err})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{where}: expected a JSON object")
        yield where, obj


def read_yelp_reviews(
    path: str | os.PathLike[str], *, max_records: int | None = None
) -> YelpReviews:
    """Read a Yelp reviews JSON-lines file.

    Parameters
    ----------
    path : path
        ``yelp_academic_dataset_review.json`` or a file in its format.
    max_records : int, optional
        Stop after this many reviews (the full file has millions); >= 1.

    Raises
    ------
    ConfigError
        If ``max_records`` is not a positive integer.
    DataError
        If a line is not a JSON object, lacks ``user_id``, ``business_id``,
        ``stars`` or ``text``, or has stars outside 1..5 or a non-string
        text; the message names the file and the 1-based line number.
    """
    if max_records is not None and (
        isinstance(max_records, bool)
        or not isinstance(max_records, int)
        or max_records < 1
    ):
        raise ConfigError(f"max_records must be an integer >= 1, got {max_records!r}")
    texts: list[str] = []
    stars: list[int] = []
    users: list[str] = []
    businesses: list[str] = []
    dates: list[str] = []
    for where, obj in _json_lines(path):
        missing = [k for k in _REQUIRED_REVIEW_KEYS if k not in obj]
        if missing:
            raise DataError(f"{where}: missing keys {missing}")
        rating = obj["stars"]
        if (
            isinstance(rating, bool)
            or not isinstance(rating, int | float)
            or not math.isfinite(rating)
            or rating != int(rating)
            or not 1 <= rating <= 5
        ):
            raise DataError(f"{where}: stars must be 1..5, got {rating!r}")
        if not isinstance(obj["text"], str):
            raise DataError(f"{where}: text must be a string")
        texts.append(obj["text"])
        stars.append(int(rating))
        users.append(str(obj["user_id"]))
        businesses.append(str(obj["business_id"]))
        dates.append(str(obj.get("date", "")))
        if max_records is not None and len(texts) >= max_records:
            break
    if not texts:
        raise DataError(f"{path} holds no reviews")
    return YelpReviews(
        texts=tuple(texts),
        stars=np.asarray(stars, dtype=np.int64),
        user_id=tuple(users),
        business_id=tuple(businesses),
        date=tuple(dates),
        source=os.fspath(path),
    )


def read_yelp_businesses(path: str | os.PathLike[str]) -> dict[str, tuple[str, ...]]:
    """Read a Yelp business JSON-lines file: business id -> its categories.

    ``categories`` is a comma-separated string or ``null`` (no categories).

    Raises
    ------
    DataError
        If a line is not a JSON object, lacks ``business_id``, or has
        categories that are neither a string nor null (with the line number).
    """
    out: dict[str, tuple[str, ...]] = {}
    for where, obj in _json_lines(path):
        if "business_id" not in obj:
            raise DataError(f"{where}: missing key 'business_id'")
        categories = obj.get("categories")
        if categories is None:
            out[str(obj["business_id"])] = ()
        elif isinstance(categories, str):
            out[str(obj["business_id"])] = tuple(
                c.strip() for c in categories.split(",") if c.strip()
            )
        else:
            raise DataError(f"{where}: categories must be a string or null")
    return out


def yelp_dataset(
    reviews: YelpReviews,
    *,
    label: str = "stars",
    businesses: Mapping[str, tuple[str, ...]] | None = None,
    specialties: tuple[str, ...] = (),
    vocab_size: int | None = 5000,
    length: int = 100,
    test_fraction: float = 0.2,
    seed: int | np.random.Generator = 0,
) -> TextDataset:
    """Build the thesis' Yelp tasks as token-id records.

    Parameters
    ----------
    reviews : YelpReviews
        The reviews.
    label : {"stars", "author", "specialty"}, default="stars"
        ``"stars"``: the review score ``1..5`` (labels ``0..4``), the main
        task of Yelp-health/Yelp-author; ``"author"``: the user id (Yelp-
        author's inference target); ``"specialty"``: the first of
        ``specialties`` among the business' categories (Yelp-health's doctor
        specialty); reviews of other businesses are dropped.
    businesses : mapping, optional
        Business categories (:func:`read_yelp_businesses`), for
        ``"specialty"``.
    specialties : tuple of str
        The specialty categories, in label order.
    vocab_size : int or None, default=5000
        Top-``N`` words (Ch. 7.2.2 uses 5,000).
    length : int, default=100
        Fixed record length.
    test_fraction : float, default=0.2
        Held-out fraction.
    seed : int or numpy.random.Generator, default=0
        Drives the split.
    """
    keep: list[int] = []
    labels: list[int] = []
    if label == "stars":
        names = [str(s) for s in range(1, 6)]
        keep = list(range(len(reviews)))
        labels = [int(s) - 1 for s in reviews.stars]
    elif label == "author":
        names = sorted(set(reviews.user_id))
        index = {u: i for i, u in enumerate(names)}
        keep = list(range(len(reviews)))
        labels = [index[u] for u in reviews.user_id]
    elif label == "specialty":
        if businesses is None or not specialties:
            raise DataError(
                "label='specialty' needs businesses (read_yelp_businesses) and a "
                "tuple of specialty categories"
            )
        names = list(specialties)
        for i, business in enumerate(reviews.business_id):
            cats = businesses.get(business, ())
            hit = next((k for k, s in enumerate(specialties) if s in cats), None)
            if hit is not None:
                keep.append(i)
                labels.append(hit)
    else:
        raise ConfigError(
            f"unknown label {label!r}; choose 'stars', 'author' or 'specialty'"
        )
    if not keep:
        raise DataError(f"no review matches label={label!r}")
    return split_text_dataset(
        [tokenize(reviews.texts[i]) for i in keep],
        np.asarray(labels, dtype=np.int64),
        names,
        vocab_size=vocab_size,
        length=length,
        test_fraction=test_fraction,
        seed=seed,
        source=reviews.source,
    )
