"""Tests of the check-in and Yelp loaders and the synthetic check-in generator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedleak.data.checkins import (
    checkin_dataset,
    read_foursquare_tsv,
    synthetic_checkins,
    user_venue_sequences,
    write_foursquare_tsv,
)
from fedleak.data.text import UNK_ID
from fedleak.data.yelp import read_yelp_businesses, read_yelp_reviews, yelp_dataset
from fedleak.errors import ConfigError, DataError

NYC_LINES = [
    "470\t49bbd6c0f964a520f4531fe3\t4bf58dd8d48988d127951735\tArts & Crafts Store"
    "\t40.719810375488535\t-74.00258103213994\t-240\tTue Apr 03 18:00:09 +0000 2012",
    "979\t4a43c0aef964a520c6a61fe3\t4bf58dd8d48988d1df941735\tBridge"
    "\t40.60679958140643\t-74.04416981025437\t-240\tTue Apr 03 18:00:25 +0000 2012",
    "470\t4c5cc7b485a1e21e00d35711\t4bf58dd8d48988d103941735\tHome (private)"
    "\t40.716161684843215\t-73.88307005845945\t-240\tTue Apr 03 17:59:00 +0000 2012",
]


def _write(path: Path, lines: list[str], encoding: str = "utf-8") -> Path:
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))
    return path


def test_read_foursquare_tsv_parses_the_public_format(tmp_path: Path) -> None:
    latin = NYC_LINES[1].replace("Bridge", "Caf\u00e9")
    path = tmp_path / "nyc.txt"
    path.write_bytes(
        (NYC_LINES[0] + "\n\n").encode()
        + latin.encode("latin-1")
        + b"\n"
        + NYC_LINES[2].encode()
        + b"\r\n"
    )
    table = read_foursquare_tsv(path)
    assert len(table) == 3
    assert table.user.tolist() == [470, 979, 470]
    assert table.category_name[1] == "Caf\u00e9"
    assert table.latitude[0] == pytest.approx(40.719810375488535)
    assert str(table.utc_time[0]) == "2012-04-03T18:00:09"
    assert table.tz_offset.tolist() == [-240] * 3
    # time order within a user: the 17:59 check-in comes first
    assert user_venue_sequences(table)[470] == [
        "4c5cc7b485a1e21e00d35711",
        "49bbd6c0f964a520f4531fe3",
    ]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("470\tvenue\tcat\tname\t40.7\t-74.0\t-240", "expected 8"),
        (
            "abc\tvenue\tcat\tname\t40.7\t-74.0\t-240\tTue Apr 03 18:00:09 +0000 2012",
            "bad number",
        ),
        (
            "470\tvenue\tcat\tname\t140.7\t-74.0\t-240\tTue Apr 03 18:00:09 +0000 2012",
            "out of range",
        ),
        ("470\tvenue\tcat\tname\t40.7\t-74.0\t-240\t2012-04-03 18:00:09", "UTC time"),
        (
            "470\tvenue\tcat\tname\t40.7\t-74.0\t-240\tTue Foo 03 18:00:09 +0000 2012",
            "UTC time",
        ),
    ],
)
def test_malformed_checkin_lines_name_the_line(
    tmp_path: Path, bad: str, message: str
) -> None:
    path = _write(tmp_path / "bad.txt", [NYC_LINES[0], NYC_LINES[1], bad])
    with pytest.raises(DataError, match=rf"bad\.txt, line 3: .*{message}"):
        read_foursquare_tsv(path)


def test_time_zone_in_the_stamp_is_honoured(tmp_path: Path) -> None:
    line = NYC_LINES[0].replace("18:00:09 +0000", "20:00:09 +0200")
    table = read_foursquare_tsv(_write(tmp_path / "tz.txt", [line]))
    assert str(table.utc_time[0]) == "2012-04-03T18:00:09"


def test_synthetic_checkins_round_trip_and_are_seeded(tmp_path: Path) -> None:
    a = synthetic_checkins(num_users=60, num_venues=200, seed=5)
    b = synthetic_checkins(num_users=60, num_venues=200, seed=5)
    np.testing.assert_array_equal(a.table.venue, b.table.venue)
    path = tmp_path / "synthetic.txt"
    write_foursquare_tsv(a.table, path)
    back = read_foursquare_tsv(path)
    np.testing.assert_array_equal(back.venue, a.table.venue)
    np.testing.assert_array_equal(back.utc_time, a.table.utc_time)
    np.testing.assert_allclose(back.latitude, a.table.latitude)
    counts = np.bincount(a.table.user)
    assert counts.min() >= 10 and counts.size == 60


def test_synthetic_attribute_shifts_venue_preferences() -> None:
    data = synthetic_checkins(
        num_users=400, num_venues=300, attribute_shift=6.0, seed=1
    )
    category = np.char.replace(data.table.category_name, "Category ", "").astype(int)
    favoured = category < 10  # the first half of the 20 categories
    by_user = data.attribute[data.table.user] == 1
    assert favoured[by_user].mean() > 0.7 > 0.3 > favoured[~by_user].mean()
    popular = np.unique(data.table.venue, return_counts=True)[1]
    assert popular.max() > 20 * np.median(popular)  # Zipf: a few hot venues


def test_checkin_dataset_encodes_users_as_venue_records() -> None:
    data = synthetic_checkins(num_users=80, num_venues=300, seed=2)
    ds = checkin_dataset(
        data.table, data.attribute_map(), vocab_size=50, length=40, seed=0
    )
    assert ds.num_classes == 2 and ds.sequence_length == 40
    assert ds.vocab_size == 52
    assert (ds.x_train == UNK_ID).any()  # venues beyond the top-50
    with pytest.raises(DataError, match="no user"):
        checkin_dataset(data.table, {}, seed=0)
    with pytest.raises(ConfigError, match="zipf"):
        synthetic_checkins(zipf_exponent=0.0)


def _review(**fields: object) -> str:
    base: dict[str, object] = {
        "review_id": "r1",
        "user_id": "u1",
        "business_id": "b1",
        "stars": 4.0,
        "text": "Great doctor, short wait.",
        "date": "2018-07-07 22:09:11",
    }
    base.update(fields)
    return json.dumps(base)


def test_read_yelp_reviews_and_businesses(tmp_path: Path) -> None:
    reviews = _write(
        tmp_path / "review.json",
        [_review(), "", _review(user_id="u2", business_id="b2", stars=1, text="Bad.")],
    )
    businesses = _write(
        tmp_path / "business.json",
        [
            json.dumps(
                {"business_id": "b1", "categories": "Dentists, Health & Medical"}
            ),
            json.dumps({"business_id": "b2", "categories": None}),
        ],
    )
    parsed = read_yelp_reviews(reviews)
    assert parsed.stars.tolist() == [4, 1] and parsed.user_id == ("u1", "u2")
    cats = read_yelp_businesses(businesses)
    assert cats == {"b1": ("Dentists", "Health & Medical"), "b2": ()}
    ds = yelp_dataset(parsed, label="stars", length=5, test_fraction=0.0, seed=0)
    assert ds.num_classes == 5 and sorted(ds.y_train.tolist()) == [0, 3]
    spec = yelp_dataset(
        parsed,
        label="specialty",
        businesses=cats,
        specialties=("Dentists",),
        test_fraction=0.0,
        seed=0,
    )
    assert len(spec.y_train) == 1
    assert read_yelp_reviews(reviews, max_records=1).texts == (
        "Great doctor, short wait.",
    )
    with pytest.raises(ConfigError, match="label"):
        yelp_dataset(parsed, label="nope")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"user_id": "u", "business_id": "b", "text": "x"}), "missing keys"),
        (_review(stars=7), "stars must be 1..5"),
        (_review(stars=True), "stars must be 1..5"),
        (_review(text=3), "text must be a string"),
        (_review(stars=2.5), "stars must be 1..5"),
        (_review().replace('"stars": 4.0', '"stars": 1e400'), "stars must be 1..5"),
        (
            _review().replace('"stars": 4.0', '"stars": NaN'),
            r"not valid JSON \(NaN is not a JSON value",
        ),
        (
            _review().replace('"stars": 4.0', '"stars": Infinity'),
            r"not valid JSON \(Infinity is not a JSON value",
        ),
    ],
)
def test_malformed_yelp_lines_name_the_line(
    tmp_path: Path, bad: str, message: str
) -> None:
    path = _write(tmp_path / "review.json", [_review(), bad])
    with pytest.raises(DataError, match=rf"review\.json, line 2: {message}"):
        read_yelp_reviews(path)


@pytest.mark.parametrize("max_records", [0, -1, 1.5, True])
def test_max_records_must_be_a_positive_integer(tmp_path: Path, max_records) -> None:
    path = _write(tmp_path / "review.json", [_review(), _review()])
    with pytest.raises(ConfigError, match="max_records must be an integer >= 1"):
        read_yelp_reviews(path, max_records=max_records)


def test_malformed_business_line_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "b.json", [json.dumps({"categories": "x"})])
    with pytest.raises(DataError, match=r"b\.json, line 1: missing key"):
        read_yelp_businesses(path)


def test_the_neutral_head_carries_no_preference() -> None:
    from fedleak.data.checkins import _preference_weights, _Venues

    popularity = np.array([0.5, 1.0, 0.25, 0.2, 1 / 3])  # ranks 2, 1, 4, 5, 3
    category = np.array([0, 1, 2, 3, 0])  # of 4: 0 and 1 favoured by attribute 1
    venues = _Venues(
        category=category,
        popularity=popularity,
        area=category,
        latitude=popularity,
        longitude=popularity,
    )
    plain = _preference_weights(venues, 4, 3.0)
    np.testing.assert_allclose(plain[1] / popularity, [3, 3, 1, 1, 3])
    np.testing.assert_allclose(plain[0] / popularity, [1, 1, 3, 3, 1])
    # the two most popular (venues 1 and 0) weigh alike for both attributes
    head = _preference_weights(venues, 4, 3.0, neutral_head=2)
    np.testing.assert_allclose(head[1] / popularity, [1, 1, 1, 1, 3])
    np.testing.assert_allclose(head[0] / popularity, [1, 1, 3, 3, 1])
    every = _preference_weights(venues, 4, 3.0, neutral_head=5)
    np.testing.assert_allclose(every[0], every[1])
    # an odd number of categories: those below 5 // 2 = 2 go to attribute 1
    odd = _preference_weights(venues, 5, 3.0)
    np.testing.assert_allclose(odd[1] / popularity, [3, 3, 1, 1, 3])


def test_a_neutral_head_moves_the_signal_into_the_tail() -> None:
    plain = synthetic_checkins(
        num_users=400, num_venues=300, attribute_shift=6.0, seed=1
    )
    tail = synthetic_checkins(
        num_users=400, num_venues=300, attribute_shift=6.0, neutral_head=30, seed=1
    )
    np.testing.assert_array_equal(plain.attribute, tail.attribute)

    def favoured_share_gap(data, venues):  # favoured-category share, b=1 minus b=0
        category = np.char.replace(data.table.category_name, "Category ", "")
        favoured = category.astype(int) < 10
        at = np.isin(data.table.venue, venues)
        by_user = data.attribute[data.table.user] == 1
        return favoured[at & by_user].mean() - favoured[at & ~by_user].mean()

    names, counts = np.unique(plain.table.venue, return_counts=True)
    hot = names[np.argsort(-counts)[:10]]  # among the 30 most popular
    assert favoured_share_gap(plain, hot) > 0.35  # 0.45 measured
    assert abs(favoured_share_gap(tail, hot)) < 0.2  # 0.10 measured
    names, counts = np.unique(tail.table.venue, return_counts=True)
    rare = names[np.argsort(-counts)[60:]]
    assert favoured_share_gap(tail, rare) > 0.5


@pytest.mark.parametrize("head", [-1, 301])
def test_a_neutral_head_outside_the_venues_is_refused(head: int) -> None:
    message = rf"^neutral_head must be an integer in \[0, 300\]; got {head}\.$"
    with pytest.raises(ConfigError, match=message):
        synthetic_checkins(num_users=10, num_venues=300, neutral_head=head)


def test_no_neutral_head_by_default() -> None:
    plain = synthetic_checkins(num_users=50, num_venues=100, seed=4)
    none = synthetic_checkins(num_users=50, num_venues=100, neutral_head=0, seed=4)
    np.testing.assert_array_equal(plain.table.venue, none.table.venue)
    head = synthetic_checkins(num_users=50, num_venues=100, neutral_head=1, seed=4)
    assert not np.array_equal(plain.table.venue, head.table.venue)
