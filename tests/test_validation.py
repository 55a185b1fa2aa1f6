"""fedleak.validation: the one vocabulary of argument checks."""

from __future__ import annotations

import doctest
import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fedleak.validation as validation
from fedleak.errors import ConfigError
from fedleak.validation import (
    Interval,
    check_delta,
    check_epsilon,
    check_int,
    check_option,
    check_positive,
    check_probability,
    check_real,
)

#: The one message form: "<name> must be <what>; got <value>."
MESSAGE = re.compile(r"^[\w.]+ must be .+; got .+\.$")


def message_of(call, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        call(*args, **kwargs)
    text = str(info.value)
    assert MESSAGE.match(text), text
    return text


def test_docstring_examples_hold():
    result = doctest.testmod(validation, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 20
    assert result.failed == 0


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        check_int("k", -1, low=0)


# ------------------------------------------------------------------ Interval
@pytest.mark.parametrize(
    ("interval", "text"),
    [
        (Interval(), ""),
        (Interval(0, None), ">= 0"),
        (Interval(0, None, closed="neither"), "> 0"),
        (Interval(None, 1), "<= 1"),
        (Interval(None, 1, closed="left"), "< 1"),
        (Interval(0, 1), "in [0, 1]"),
        (Interval(0, 1, closed="left"), "in [0, 1)"),
        (Interval(0, 1, closed="right"), "in (0, 1]"),
        (Interval(0, 1, closed="neither"), "in (0, 1)"),
        (Interval(0, math.inf, closed="right"), "in (0, inf]"),
        (Interval(-math.inf, 0), "in [-inf, 0]"),
        (Interval(0.5, 2.5), "in [0.5, 2.5]"),
    ],
)
def test_interval_text(interval, text):
    assert str(interval) == text


@pytest.mark.parametrize(
    ("value", "inside"),
    [
        (0.0, False),
        (1e-300, True),
        (1.0, True),
        (1.0 + 1e-12, False),
        (math.inf, False),
        (-1.0, False),
        (math.nan, False),
        ("0.5", False),
    ],
)
def test_interval_membership_half_open(value, inside):
    assert (value in Interval(0, 1, closed="right")) is inside


def test_interval_infinity_only_when_admitted():
    assert math.inf not in Interval(0, None)
    assert math.inf not in Interval(0, math.inf, closed="left")
    assert math.inf in Interval(0, math.inf, closed="right")
    assert -math.inf in Interval(-math.inf, 0, closed="left")
    assert -math.inf not in Interval(-math.inf, 0, closed="right")
    assert -math.inf not in Interval()
    assert Interval(0, math.inf, closed="both").admits_infinity
    assert not Interval(0, None).admits_infinity


@pytest.mark.parametrize(
    "kwargs",
    [{"closed": "open"}, {"low": math.nan}, {"high": True}],
    ids=["closed", "nan-end", "bool-end"],
)
def test_interval_refuses_bad_definitions(kwargs):
    with pytest.raises(ConfigError):
        Interval(**kwargs)


@given(
    low=st.floats(-1e6, 1e6),
    width=st.floats(0, 1e6),
    value=st.floats(allow_nan=True, allow_infinity=True),
    closed=st.sampled_from(["both", "left", "right", "neither"]),
)
def test_interval_membership_matches_definition(low, width, value, closed):
    high = low + width
    interval = Interval(low, high, closed=closed)
    expected = (
        not math.isnan(value)
        and (low < value or (value == low and closed in ("both", "left")))
        and (value < high or (value == high and closed in ("both", "right")))
    )
    assert (value in interval) is expected


# ------------------------------------------------------------------ check_int
@pytest.mark.parametrize("value", [3, np.int64(3), np.uint8(3), np.int32(3)])
def test_check_int_accepts_python_and_numpy_integers(value):
    result = check_int("k", value, low=1, high=3)
    assert result == 3 and type(result) is int


@pytest.mark.parametrize(
    "value", [True, np.bool_(False), 3.0, np.float64(3), "3", None, [3]]
)
def test_check_int_refuses_non_integers(value):
    text = message_of(check_int, "k", value)
    assert text.startswith("k must be an integer;")


def test_check_int_bounds_are_inclusive_and_named():
    assert check_int("k", 1, low=1) == 1
    assert check_int("k", 5, high=5) == 5
    assert message_of(check_int, "k", 0, low=1) == "k must be an integer >= 1; got 0."
    assert message_of(check_int, "k", 6, high=5) == "k must be an integer <= 5; got 6."
    assert (
        message_of(check_int, "k", 11, low=1, high=10)
        == "k must be an integer in [1, 10]; got 11."
    )
    assert message_of(check_int, "k", np.int64(-2), low=0).endswith("got -2.")


def test_check_int_with_an_empty_range_refuses_everything():
    text = message_of(check_int, "k", 1, low=1, high=0)
    assert text == "k must be an integer in [1, 0]; got 1."


@given(st.integers(), st.integers(-50, 50), st.integers(-50, 50))
def test_check_int_matches_its_bounds(value, low, high):
    if low <= value <= high:
        assert check_int("n", value, low=low, high=high) == value
    else:
        with pytest.raises(ConfigError):
            check_int("n", value, low=low, high=high)


# ----------------------------------------------------------------- check_real
@pytest.mark.parametrize(
    "value", [2, 2.0, np.float32(2), np.float64(2), np.int64(2), np.uint16(2)]
)
def test_check_real_accepts_python_and_numpy_numbers(value):
    result = check_real("x", value)
    assert result == 2.0 and type(result) is float


@pytest.mark.parametrize("value", [True, np.bool_(True), "2", None, 1j, [2.0]])
def test_check_real_refuses_non_numbers(value):
    assert message_of(check_real, "x", value).startswith("x must be a finite number;")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, np.float64("nan")])
def test_check_real_is_finite_by_default(value):
    message_of(check_real, "x", value)


def test_check_real_admits_infinity_only_when_the_interval_does():
    assert check_real("x", math.inf, Interval(0, math.inf, closed="both")) == math.inf
    assert check_real("x", -math.inf, Interval(-math.inf, 0)) == -math.inf
    text = message_of(check_real, "x", math.inf, Interval(0, None))
    assert text == "x must be a finite number >= 0; got inf."
    text = message_of(check_real, "x", math.nan, Interval(0, math.inf))
    assert text == "x must be in [0, inf]; got nan."


def test_check_real_half_line_with_an_admitted_infinity():
    up_to_inf = Interval(None, math.inf, closed="right")
    assert check_real("x", math.inf, up_to_inf) == math.inf
    assert check_real("x", -1e300, up_to_inf) == -1e300
    assert message_of(check_real, "x", -math.inf, up_to_inf) == (
        "x must be a number <= inf; got -inf."
    )


def test_check_real_message_shows_numpy_scalars_as_numbers():
    text = message_of(check_real, "x", np.float32(-1.5), Interval(0, 1))
    assert text == "x must be in [0, 1]; got -1.5."


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_check_real_open_positive_half_line(value):
    interval = Interval(0, None, closed="neither")
    if math.isfinite(value) and value > 0:
        assert check_real("x", value, interval) == value
    else:
        with pytest.raises(ConfigError):
            check_real("x", value, interval)


# ------------------------------------------------- positive, probability, ...
def test_check_positive():
    assert check_positive("s", 1e-9) == 1e-9
    assert check_positive("s", 0, allow_zero=True) == 0.0
    assert check_positive("s", math.inf, allow_inf=True) == math.inf
    assert message_of(check_positive, "s", 0) == "s must be a finite number > 0; got 0."
    assert (
        message_of(check_positive, "s", -1, allow_zero=True)
        == "s must be a finite number >= 0; got -1."
    )
    assert (
        message_of(check_positive, "s", 0, allow_inf=True)
        == "s must be in (0, inf]; got 0."
    )
    message_of(check_positive, "s", math.inf)


@pytest.mark.parametrize(
    ("closed", "zero_ok", "one_ok"),
    [
        ("both", True, True),
        ("left", True, False),
        ("right", False, True),
        ("neither", False, False),
    ],
)
def test_check_probability_ends(closed, zero_ok, one_ok):
    assert check_probability("p", 0.5, closed=closed) == 0.5
    for end, ok in ((0.0, zero_ok), (1.0, one_ok)):
        if ok:
            assert check_probability("p", end, closed=closed) == end
        else:
            message_of(check_probability, "p", end, closed=closed)
    for outside in (-0.1, 1.1, math.nan, math.inf):
        message_of(check_probability, "p", outside, closed=closed)


def test_check_epsilon_rules_are_explicit_in_the_call():
    assert check_epsilon("epsilon", 1.0) == 1.0
    message_of(check_epsilon, "epsilon", 0.0)
    message_of(check_epsilon, "epsilon", math.inf)
    message_of(check_epsilon, "epsilon", -1.0, allow_zero=True)
    assert check_epsilon("epsilon", 0.0, allow_zero=True) == 0.0
    assert check_epsilon("epsilon", math.inf, allow_inf=True) == math.inf
    message_of(check_epsilon, "epsilon", 0.0, allow_inf=True)
    assert check_epsilon("epsilon", 0, allow_zero=True, allow_inf=True) == 0.0
    message_of(check_epsilon, "epsilon", math.nan, allow_zero=True, allow_inf=True)
    message_of(check_epsilon, "epsilon", True)


@pytest.mark.parametrize(
    ("allow_zero", "allow_one", "text"),
    [
        (False, False, "(0, 1)"),
        (True, False, "[0, 1)"),
        (False, True, "(0, 1]"),
        (True, True, "[0, 1]"),
    ],
)
def test_check_delta(allow_zero, allow_one, text):
    assert (
        check_delta("delta", 1e-5, allow_zero=allow_zero, allow_one=allow_one) == 1e-5
    )
    for end, ok in ((0.0, allow_zero), (1.0, allow_one)):
        if ok:
            assert (
                check_delta("delta", end, allow_zero=allow_zero, allow_one=allow_one)
                == end
            )
        else:
            message = message_of(
                check_delta, "delta", end, allow_zero=allow_zero, allow_one=allow_one
            )
            assert message == f"delta must be in {text}; got {end}."


# --------------------------------------------------------------- check_option
def test_check_option():
    assert check_option("kind", "rbm", ("vae", "rbm")) == "rbm"
    assert check_option("kind", 2, {1, 2}) == 2
    assert (
        message_of(check_option, "kind", "gan", ("vae", "rbm"))
        == "kind must be one of 'vae', 'rbm'; got 'gan'."
    )
    # an unhashable value is refused with the same message, not a TypeError
    message_of(check_option, "kind", ["vae"], frozenset({"vae"}))
