"""One vocabulary of argument checks for the whole library.

Every public function and constructor of fedleak checks its numeric and
categorical arguments with the functions below, so that a wrong value always
fails the same way: a :class:`~fedleak.errors.ConfigError` (a ``ValueError``)
whose message has one form,

    ``<name> must be <what is allowed>; got <the value>.``

for example ``"delta must be in (0, 1); got 1.5."``, the form of
dp-accounting's ``f'delta must be in [0, 1], got delta={delta}.'``. The ranges
are :class:`Interval` objects in the spirit of scikit-learn's
``Interval``/``_parameter_constraints`` (whose classes live in a private
module, ``sklearn.utils._param_validation``, and are no public API to build
on), reduced to what fedleak needs.

Conventions
-----------
- ``bool`` is not a number here: ``True`` is refused where an int or a float
  is expected (``type(x) is bool``; Python makes ``bool`` a subclass of
  ``int``, Flower's SecAgg+ mod makes the same exception).
- NumPy scalars (``numpy.int64``, ``numpy.float32``, ...) are accepted and
  returned as plain ``int`` / ``float``.
- Numbers are **finite** unless the interval explicitly admits an infinite
  end (``Interval(0, math.inf, closed="right")`` is ``(0, inf]``); NaN is
  always refused.
- Checks depending on the data (array shapes, record counts) are not here:
  they raise :class:`~fedleak.errors.DataError` where the data is read.

Examples
--------
>>> check_int("rounds", 3, low=1)
3
>>> check_real("lr", 0.1, Interval(0, None, closed="neither"))
0.1
>>> check_epsilon("epsilon", math.inf, allow_inf=True)
inf
>>> check_probability("q", 1.5)
Traceback (most recent call last):
...
fedleak.errors.ConfigError: q must be in [0, 1]; got 1.5.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal, TypeVar

import numpy as np

from .errors import ConfigError

__all__ = [
    "Interval",
    "check_delta",
    "check_epsilon",
    "check_int",
    "check_option",
    "check_positive",
    "check_probability",
    "check_real",
]

Closed = Literal["both", "left", "right", "neither"]
T = TypeVar("T")


def _shown(value: object) -> str:
    """Return ``repr(value)``, NumPy scalars shown as the Python number they hold."""
    if isinstance(value, np.generic):
        return repr(value.item())
    return repr(value)


def _fail(name: str, what: str, value: object) -> ConfigError:
    return ConfigError(f"{name} must be {what}; got {_shown(value)}.")


def _number_text(bound: float) -> str:
    if math.isinf(bound):
        return "inf" if bound > 0 else "-inf"
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


@dataclass(frozen=True, slots=True)
class Interval:
    """A range of real numbers, each end open or closed.

    Parameters
    ----------
    low, high : float, optional
        The ends; ``None`` leaves that side unbounded (infinity excluded).
        ``-math.inf`` / ``math.inf`` with a closed end admits that infinity.
    closed : {"both", "left", "right", "neither"}, default="both"
        Which ends belong to the interval.

    Examples
    --------
    >>> str(Interval(0, 1, closed="left"))
    'in [0, 1)'
    >>> str(Interval(0, None, closed="neither"))
    '> 0'
    >>> 0.0 in Interval(0, None, closed="neither")
    False
    >>> math.inf in Interval(0, math.inf, closed="both")
    True
    >>> math.inf in Interval(0, None)
    False
    """

    low: float | None = None
    high: float | None = None
    closed: Closed = "both"

    def __post_init__(self) -> None:
        if self.closed not in ("both", "left", "right", "neither"):
            raise ConfigError(
                "closed must be one of 'both', 'left', 'right', 'neither'; "
                f"got {self.closed!r}."
            )
        for end in (self.low, self.high):
            if end is not None and (isinstance(end, bool) or math.isnan(end)):
                raise ConfigError(f"an interval end must be a number; got {end!r}.")

    @property
    def left_closed(self) -> bool:
        """Whether ``low`` belongs to the interval."""
        return self.closed in ("both", "left")

    @property
    def right_closed(self) -> bool:
        """Whether ``high`` belongs to the interval."""
        return self.closed in ("both", "right")

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int | float) or math.isnan(value):
            return False
        if math.isinf(value) and not self._admits_infinity(value):
            return False
        if self.low is not None and (
            value < self.low or (value == self.low and not self.left_closed)
        ):
            return False
        return self.high is None or not (
            value > self.high or (value == self.high and not self.right_closed)
        )

    def _admits_infinity(self, value: float) -> bool:
        if value > 0:
            return self.high == math.inf and self.right_closed
        return self.low == -math.inf and self.left_closed

    @property
    def admits_infinity(self) -> bool:
        """Whether ``inf`` or ``-inf`` belongs to the interval."""
        return self._admits_infinity(math.inf) or self._admits_infinity(-math.inf)

    def __str__(self) -> str:
        low, high = self.low, self.high
        if low is not None and high is not None:
            left = "[" if self.left_closed else "("
            right = "]" if self.right_closed else ")"
            return f"in {left}{_number_text(low)}, {_number_text(high)}{right}"
        if low is not None:
            return f"{'>=' if self.left_closed else '>'} {_number_text(low)}"
        if high is not None:
            return f"{'<=' if self.right_closed else '<'} {_number_text(high)}"
        return ""


def check_int(
    name: str, value: object, *, low: int | None = None, high: int | None = None
) -> int:
    """Return ``value`` as an ``int`` if it is an integer in ``[low, high]``.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        The argument: a Python or NumPy integer (not a ``bool``, not a float
        holding an integer).
    low, high : int, optional
        Inclusive bounds; ``None`` leaves that side open.

    Returns
    -------
    int

    Raises
    ------
    ConfigError
        If ``value`` is not an integer or lies outside ``[low, high]``.

    Examples
    --------
    >>> check_int("k", 2, low=1, high=10)
    2
    >>> check_int("k", True)
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: k must be an integer; got True.
    >>> check_int("k", 0, low=1)
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: k must be an integer >= 1; got 0.
    """
    bounds = Interval(low, high)
    what = f"an integer {bounds}".rstrip()
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise _fail(name, what, value)
    number = int(value)
    if number not in bounds:
        raise _fail(name, what, value)
    return number


def check_real(name: str, value: object, interval: Interval = Interval()) -> float:
    """Return ``value`` as a ``float`` if it is a number in ``interval``.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        The argument: a Python or NumPy int or float (not a ``bool``).
    interval : Interval, default=Interval()
        The allowed range; the default allows every finite number. An
        infinite value passes only where the interval admits it explicitly.

    Returns
    -------
    float

    Raises
    ------
    ConfigError
        If ``value`` is not a number, is NaN, is infinite where the interval
        does not admit it, or lies outside the interval.

    Examples
    --------
    >>> check_real("sigma", 2)
    2.0
    >>> check_real("sigma", float("nan"))
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: sigma must be a finite number; got nan.
    >>> check_real("dropout", 1.0, Interval(0, 1, closed="left"))
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: dropout must be in [0, 1); got 1.0.
    """
    if interval.low is not None and interval.high is not None:
        what = str(interval)
    elif interval.admits_infinity:
        what = f"a number {interval}"
    else:
        what = f"a finite number {interval}".rstrip()
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise _fail(name, what, value)
    number = float(value)
    if number not in interval:
        raise _fail(name, what, value)
    return number


def check_positive(
    name: str, value: object, *, allow_zero: bool = False, allow_inf: bool = False
) -> float:
    """Return ``value`` as a ``float`` if it is ``> 0`` (``>= 0`` with ``allow_zero``).

    Parameters
    ----------
    name : str
        The argument's name.
    value : object
        The argument.
    allow_zero : bool, default=False
        Admit ``0``.
    allow_inf : bool, default=False
        Admit ``math.inf``.

    Returns
    -------
    float

    Raises
    ------
    ConfigError
        If ``value`` is not such a number.

    Examples
    --------
    >>> check_positive("sensitivity", 0, allow_zero=True)
    0.0
    >>> check_positive("sigma", 0)
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: sigma must be a finite number > 0; got 0.
    """
    closed: Closed = "both" if allow_zero else "right"
    if allow_inf:
        return check_real(name, value, Interval(0, math.inf, closed=closed))
    return check_real(name, value, Interval(0, None, closed=closed))


def check_probability(name: str, value: object, *, closed: Closed = "both") -> float:
    """Return ``value`` as a ``float`` if it lies in ``[0, 1]``.

    Parameters
    ----------
    name : str
        The argument's name.
    value : object
        The argument.
    closed : {"both", "left", "right", "neither"}, default="both"
        Which of 0 and 1 are allowed (``"neither"``: the open ``(0, 1)``).

    Returns
    -------
    float

    Raises
    ------
    ConfigError
        If ``value`` is not a number in the interval.

    Examples
    --------
    >>> check_probability("fraction", 0.25)
    0.25
    >>> check_probability("p", 1.0, closed="neither")
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: p must be in (0, 1); got 1.0.
    """
    return check_real(name, value, Interval(0, 1, closed=closed))


def check_epsilon(
    name: str, value: object, *, allow_zero: bool = False, allow_inf: bool = False
) -> float:
    """Return a privacy parameter epsilon as a ``float``.

    fedleak's epsilons differ in whether 0 and infinity make sense, and each
    caller says which it accepts: a noise calibration needs ``epsilon > 0``;
    a bound *on* an adversary is defined at ``epsilon = 0`` (perfect
    privacy, ``allow_zero``); a mechanism where ``inf`` means "no noise"
    (the latent d_x noise of seed 003) passes ``allow_inf``.

    Parameters
    ----------
    name : str
        The argument's name (``"epsilon"`` or, e.g., ``"epsilon_i"``).
    value : object
        The argument.
    allow_zero : bool, default=False
        Admit ``0``.
    allow_inf : bool, default=False
        Admit ``math.inf``.

    Returns
    -------
    float

    Raises
    ------
    ConfigError
        If ``value`` is not an allowed epsilon.

    Examples
    --------
    >>> check_epsilon("epsilon", 0.0, allow_zero=True)
    0.0
    >>> check_epsilon("epsilon", 0.0)
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: epsilon must be a finite number > 0; got 0.0.
    >>> check_epsilon("epsilon", math.inf)
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: epsilon must be a finite number > 0; got inf.
    """
    return check_positive(name, value, allow_zero=allow_zero, allow_inf=allow_inf)


def check_delta(
    name: str, value: object, *, allow_zero: bool = False, allow_one: bool = False
) -> float:
    """Return a privacy parameter delta as a ``float`` (``(0, 1)`` by default).

    Parameters
    ----------
    name : str
        The argument's name.
    value : object
        The argument.
    allow_zero : bool, default=False
        Admit ``0`` (pure DP).
    allow_one : bool, default=False
        Admit ``1``.

    Returns
    -------
    float

    Raises
    ------
    ConfigError
        If ``value`` is not an allowed delta.

    Examples
    --------
    >>> check_delta("delta", 1e-5)
    1e-05
    >>> check_delta("delta", 0, allow_zero=True)
    0.0
    >>> check_delta("delta", 1.5)
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: delta must be in (0, 1); got 1.5.
    """
    ends: dict[tuple[bool, bool], Closed] = {
        (False, False): "neither",
        (True, False): "left",
        (False, True): "right",
        (True, True): "both",
    }
    closed = ends[(allow_zero, allow_one)]
    return check_probability(name, value, closed=closed)


def check_option(name: str, value: T, options: Collection[T]) -> T:
    """Return ``value`` if it is one of ``options``.

    Parameters
    ----------
    name : str
        The argument's name.
    value : object
        The argument.
    options : collection
        The allowed values, listed in the message in their order.

    Returns
    -------
    object
        ``value``.

    Raises
    ------
    ConfigError
        If ``value`` is not among ``options``.

    Examples
    --------
    >>> check_option("pooling", "max", ("max", "raw"))
    'max'
    >>> check_option("pooling", "mean", ("max", "raw"))
    Traceback (most recent call last):
    ...
    fedleak.errors.ConfigError: pooling must be one of 'max', 'raw'; got 'mean'.
    """
    try:
        allowed = value in options
    except TypeError:  # an unhashable value asked of a set or a mapping
        allowed = False
    if not allowed:
        listed = ", ".join(repr(option) for option in options)
        raise _fail(name, f"one of {listed}", value)
    return value
