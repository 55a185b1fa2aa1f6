"""Private median with Count Sketches and EC-ElGamal (seed 000 Ch. 4.3).

Every contributor (an HSDir in the seed) inserts its values, from a public
range ``[low, high]``, into a :class:`~fedleak.sketches.CountSketch`,
encrypts the table under the authorities' group key
(:mod:`fedleak.sketches.elgamal`) and sends it; the authorities add the
encrypted tables. The estimate of how many values fall in a range is a fixed
integer combination of the counters
(:meth:`~fedleak.sketches.CountSketch.coefficients`), so it is
computed on the ciphertexts and jointly decrypted.

Values are inserted under pseudo-random keys (:func:`value_keys`): the
linear hash ``((a x + b) mod p) mod w`` maps a run of consecutive integers
to an arithmetic progression of buckets, which can avoid every partner
bucket of the paired estimator and bias a range count by far more than its
size (measured: 14,770 for a true 5,440 at ``d = 5, w = 272``); a fixed
64-bit mixing function (SplitMix64's finaliser) removes that structure; the
point estimates keep their guarantees (the keys are distinct integers).

The bisection (:func:`bisect_median`) starts from the whole range and the
known number of values, decrypts the count of the lower half, keeps the half
that holds the median, and stops at a single value: ``ceil(log2 n)``
decryptions for ``n`` possible values (10 for ``[0, 1000]``). With a
differential-privacy budget ``epsilon``, Laplace noise of scale ``xi * d /
epsilon`` is added to every decrypted value (``xi`` decryptions, sensitivity
``d`` of a range count of the summed estimator). Interpretation: the seed
writes "Laplace distribution with mean zero and *variance* xi * d / epsilon";
fedleak reads ``xi * d / epsilon`` as the Laplace *scale* ``b`` (variance
``2 b^2``), the parameter of the Laplace mechanism that makes ``xi``
releases of sensitivity ``d`` jointly ``epsilon``-DP (a variance of
``xi * d / epsilon`` would not). That sensitivity is the
seed's: it counts a value's own ``d`` counters, but through bucket
collisions one value can move a range count by more;
:func:`range_sensitivity` computes the exact bound from the public hashes
(``strict_sensitivity=True`` in :func:`private_median`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, DataError
from ..privacy.randomness import RngLike, check_rng, noise_laplace
from ..validation import check_epsilon, check_int
from .base import MERSENNE_PRIME
from .count_sketch import CountSketch
from .elgamal import (
    Authority,
    Ciphertext,
    DiscreteLogTable,
    GroupKey,
    add_ciphertexts,
    encrypt,
    joint_decrypt,
    linear_combination,
)

__all__ = [
    "EncryptedRangeCounter",
    "MedianResult",
    "PlainRangeCounter",
    "RangeCounter",
    "bisect_median",
    "private_median",
    "range_sensitivity",
    "reference_problem",
    "value_keys",
    "value_sketch",
]

#: ``count(low, high)``: the summed Count Sketch estimate of ``[low, high)``.
RangeCounter = Callable[[int, int], int]


@dataclass
class MedianResult:
    """The outcome of :func:`bisect_median` / :func:`private_median`.

    Attributes
    ----------
    median : int
        The estimated (lower) median.
    decryptions : int
        Range counts decrypted (``xi``).
    released : list of float
        The values released to the authorities (noisy if DP is on).
    seconds : dict of str to float
        Timings by stage (:func:`private_median` only).
    reproducible : bool
        Whether the run's secrets and noise came from a user-given seed
        (reproducible, hence predictable: not private) rather than from the
        operating system's entropy.
    """

    median: int
    decryptions: int
    released: list[float]
    seconds: dict[str, float] = field(default_factory=dict)
    reproducible: bool = False


def value_keys(values: npt.ArrayLike) -> np.ndarray:
    """Map values to sketch keys: SplitMix64's finaliser, mod ``2**31 - 1``.

    A fixed, public mixing of the integers; distinct values of a range of a
    few thousand collide with probability about ``n**2 / 2**32``.
    """
    with np.errstate(over="ignore"):  # arithmetic mod 2**64, as SplitMix64's
        z = np.asarray(values).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z % np.uint64(MERSENNE_PRIME)).astype(np.int64)


def _check_range(low: int, high: int) -> None:
    """Check the value range: integers with ``0 <= low <= high``."""
    check_int("high", high, low=check_int("low", low, low=0))


def decryptions_needed(low: int, high: int) -> int:
    """Return ``xi = ceil(log2(high - low + 1))``, the most counts decrypted."""
    _check_range(low, high)
    return math.ceil(math.log2(high - low + 1)) if high > low else 0


def bisect_median(
    count: RangeCounter,
    n_values: int,
    depth: int,
    *,
    low: int,
    high: int,
    epsilon: float | None = None,
    rng: RngLike = None,
    sensitivity: RangeCounter | None = None,
    secure_mode: bool = False,
) -> MedianResult:
    """Run the interactive divide-and-conquer median of seed 000 Ch. 4.3.1.

    Finds the smallest ``v`` in ``[low, high]`` whose estimated number of
    values ``<= v`` reaches half of ``n_values``, i.e. the lower median
    ``sorted(x)[ceil(n / 2) - 1]`` when the counts are exact.

    Parameters
    ----------
    count : callable
        ``count(a, b)``: the summed Count Sketch estimate (about ``depth``
        times the number of values) of ``[a, b)``, decrypted.
    n_values : int
        How many values were inserted (known to the authorities).
    depth : int
        The sketch depth ``d`` (the scale of ``count``).
    low, high : int
        The public value range, inclusive.
    epsilon : float, optional
        Differential privacy: Laplace noise of scale ``xi * d / epsilon`` on
        every decrypted count. ``None`` (default) releases exact counts.
    rng : numpy.random.Generator, int or None, default=None
        Source of the noise: ``None`` draws it from fresh OS entropy (the
        private default); a seed or generator makes it reproducible and
        therefore predictable -- for experiments only. Refused with
        ``secure_mode``.
    sensitivity : callable, optional
        ``sensitivity(a, b)``: the sensitivity of ``count(a, b)`` used for
        the noise instead of the seed's ``d`` (e.g.
        :func:`range_sensitivity`, which accounts for bucket collisions).
    secure_mode : bool, default=False
        Draw the noise from the OS CSPRNG (:func:`fedleak.privacy.noise_laplace`).

    Returns
    -------
    MedianResult
    """
    _check_range(low, high)
    if n_values < 1:
        raise DataError("the median of no values is undefined.")
    xi = decryptions_needed(low, high)
    scale = None
    if epsilon is not None:
        scale = xi / check_epsilon("epsilon", epsilon)
    noise_rng = None if secure_mode else check_rng(rng)
    if secure_mode and rng is not None:
        raise ConfigError(
            "Passing seed is prohibited in secure mode: the noise comes from the "
            "OS CSPRNG; pass rng=None."
        )
    target = depth * n_values / 2.0
    below = 0.0  # released estimate of the values < a
    a, b = low, high + 1
    released: list[float] = []
    while b - a > 1:
        mid = (a + b) // 2
        value = float(count(a, mid))
        if scale is not None:
            delta = depth if sensitivity is None else sensitivity(a, mid)
            value += float(
                noise_laplace(scale * delta, 1, noise_rng, secure_mode=secure_mode)[0]
            )
        released.append(value)
        if below + value >= target:
            b = mid
        else:
            below += value
            a = mid
    return MedianResult(median=a, decryptions=len(released), released=released)


def range_sensitivity(
    template: CountSketch, low: int, high: int, *, domain: tuple[int, int]
) -> int:
    """Return how much one value of the domain can move a range count.

    Adding value ``v`` adds 1 to ``X[j, h_j(v)]`` in every row, which moves
    the summed estimate of ``[low, high)`` by ``sum_j a[j, h_j(v)]`` (the
    range's coefficients, :meth:`CountSketch.coefficients`). The largest
    size of that over the public domain is the sensitivity; it is ``d``
    when no bucket collides (the seed's value) and can be larger.

    Parameters
    ----------
    template : CountSketch
        Gives the hash functions.
    low, high : int
        The range ``[low, high)``.
    domain : tuple of int
        The public value range ``(first, last)``, inclusive.

    Returns
    -------
    int
    """
    first, last = domain
    _check_range(first, last)
    coef = template.coefficients(value_keys(np.arange(low, high))).reshape(-1)
    buckets = template.buckets(value_keys(np.arange(first, last + 1)))
    buckets += np.arange(template.depth)[:, None] * template.width
    return int(np.max(np.abs(coef[buckets].sum(axis=0))))


class PlainRangeCounter:
    """Range counts on a plaintext (already aggregated) Count Sketch of value keys.

    The same numbers the authorities decrypt, for accuracy studies at many
    repetitions (encryption is exact, so the bisection is unchanged).
    """

    def __init__(self, sketch: CountSketch) -> None:
        self.sketch = sketch

    def __call__(self, low: int, high: int) -> int:
        """Return the summed estimate of the values in ``[low, high)``."""
        coef = self.sketch.coefficients(value_keys(np.arange(low, high)))
        return int(np.sum(coef * self.sketch.table))


class EncryptedRangeCounter:
    """Range counts computed on the encrypted aggregate and jointly decrypted.

    Parameters
    ----------
    template : CountSketch
        Gives the hash functions (its table is not used).
    encrypted : sequence of Ciphertext
        The aggregated encrypted table, flattened row by row.
    authorities : sequence of Authority
        Every authority of ``key``; each returns a share per decryption.
    key : GroupKey
        The group key.
    table : DiscreteLogTable
        Decodes the counts.
    rng : numpy.random.Generator, optional
        Randomness of the authorities' proofs (experiments only).
    """

    def __init__(
        self,
        template: CountSketch,
        encrypted: Sequence[Ciphertext],
        authorities: Sequence[Authority],
        key: GroupKey,
        table: DiscreteLogTable,
        rng: np.random.Generator | None = None,
    ) -> None:
        if len(encrypted) != template.size:
            raise ConfigError(
                f"{len(encrypted)} ciphertexts for a sketch of {template.size} cells."
            )
        self.template = template
        self.encrypted = list(encrypted)
        self.authorities = list(authorities)
        self.key = key
        self.table = table
        self.rng = rng

    def __call__(self, low: int, high: int) -> int:
        """Combine the ciphertexts for ``[low, high)`` and decrypt them jointly."""
        coef = self.template.coefficients(value_keys(np.arange(low, high)))
        combined = linear_combination(self.encrypted, coef)
        shares = [a.decryption_share(combined, self.rng) for a in self.authorities]
        return joint_decrypt(combined, shares, self.key, self.table)


def value_sketch(
    values: npt.ArrayLike, template: CountSketch, *, low: int, high: int
) -> CountSketch:
    """One contributor's Count Sketch of its values (inserted by :func:`value_keys`).

    Raises
    ------
    DataError
        If a value is not an integer in ``[low, high]``.
    """
    arr = np.asarray(values)
    if arr.size == 0:
        return template.with_table(np.zeros(template.size, dtype=np.int64))
    if not np.issubdtype(arr.dtype, np.integer):
        raise DataError("median values must be integers (round them first).")
    if int(arr.min()) < low or int(arr.max()) > high:
        raise DataError(
            f"median values must lie in the public range [{low}, {high}], got "
            f"[{int(arr.min())}, {int(arr.max())}]."
        )
    sketch = template.with_table(np.zeros(template.size, dtype=np.int64))
    sketch.update(value_keys(arr))
    return sketch


def private_median(
    contributions: Sequence[npt.ArrayLike],
    *,
    low: int,
    high: int,
    epsilon_sketch: float = 0.05,
    delta_sketch: float = 0.05,
    n_authorities: int = 3,
    epsilon: float | None = None,
    strict_sensitivity: bool = False,
    seed: int | None = None,
    secure_mode: bool = False,
) -> MedianResult:
    """Run the whole protocol of Ch. 4.3 in one process, with real encryption.

    Each contributor sketches and encrypts its values; the authorities add
    the encrypted sketches and run :func:`bisect_median` with joint
    decryptions.

    Parameters
    ----------
    contributions : sequence of array_like of int
        Each contributor's values, in ``[low, high]``.
    low, high : int
        The public value range.
    epsilon_sketch, delta_sketch : float, default=0.05
        Count Sketch sizing (the seed's ``d = 3``, ``w = 55 -> 56``).
    n_authorities : int, default=3
        Decryption authorities.
    epsilon : float, optional
        Differential privacy budget of the released counts.
    strict_sensitivity : bool, default=False
        Scale the noise by :func:`range_sensitivity` (collisions included)
        instead of the seed's ``d``.
    seed : int, optional
        Makes the run reproducible: the hashes, the authorities' keys, the
        encryption randomness and the noise all derive from it. **Not
        private**: whoever knows the seed knows the keys and the noise; use it
        to reproduce figures only. ``None`` (default): the hashes come from
        fresh entropy, keys and encryption randomness from the OS CSPRNG
        (``secrets``), the noise from fresh OS entropy (or the CSPRNG with
        ``secure_mode``).
    secure_mode : bool, default=False
        Draw the DP noise from the OS CSPRNG; refuses ``seed``.

    Returns
    -------
    MedianResult
        With ``seconds``: ``encrypt_per_sketch``, ``aggregate_per_sketch``,
        ``bisection`` and ``table``.
    """
    _check_protocol(contributions, (low, high), n_authorities, seed, secure_mode)
    hash_seed, key_seed, enc_seed, noise_seed = np.random.SeedSequence(seed).spawn(4)
    template = CountSketch.from_error(
        epsilon_sketch,
        delta_sketch,
        seed=int(hash_seed.generate_state(1, np.uint64)[0] >> np.uint64(1)),
    )
    # without a seed the secrets come from the CSPRNG (rng=None in elgamal)
    authorities, key = _authorities(n_authorities, None if seed is None else key_seed)
    enc_rng = None if seed is None else np.random.default_rng(enc_seed)
    encrypted, n_values, enc_times = _encrypt_contributions(
        contributions, template, (low, high), key, enc_rng
    )
    start = time.perf_counter()
    aggregate = add_ciphertexts(encrypted)
    aggregate_s = time.perf_counter() - start
    start = time.perf_counter()
    table = _decoding_table(template, (low, high), n_values)
    table_s = time.perf_counter() - start
    counter = EncryptedRangeCounter(template, aggregate, authorities, key, table)
    start = time.perf_counter()
    result = bisect_median(
        counter,
        n_values,
        template.depth,
        low=low,
        high=high,
        epsilon=epsilon,
        rng=None if seed is None else np.random.default_rng(noise_seed),
        secure_mode=secure_mode,
        sensitivity=(
            (lambda a, b: range_sensitivity(template, a, b, domain=(low, high)))
            if strict_sensitivity
            else None
        ),
    )
    result.reproducible = seed is not None
    result.seconds = {
        "encrypt_per_sketch": statistics.median(enc_times),
        "aggregate_per_sketch": aggregate_s / len(contributions),
        "table": table_s,
        "bisection": time.perf_counter() - start,
    }
    return result


def _check_protocol(
    contributions: Sequence[npt.ArrayLike],
    value_range: tuple[int, int],
    n_authorities: int,
    seed: int | None,
    secure_mode: bool,
) -> None:
    """Refuse :func:`private_median`'s arguments that cannot run privately."""
    _check_range(*value_range)
    if not contributions:
        raise DataError("private_median needs at least one contribution.")
    if n_authorities < 1:
        raise ConfigError(f"n_authorities must be >= 1, got {n_authorities}.")
    if secure_mode and seed is not None:
        raise ConfigError(
            "Passing seed is prohibited in secure mode: keys, encryption "
            "randomness and noise come from the OS CSPRNG; pass seed=None."
        )


def _authorities(
    n_authorities: int, key_seed: np.random.SeedSequence | None
) -> tuple[list[Authority], GroupKey]:
    """Create the decryption authorities and their joint ElGamal key (Ch. 4.3).

    ``key_seed=None`` draws every secret from the OS CSPRNG.
    """
    key_rng = None if key_seed is None else np.random.default_rng(key_seed)
    authorities = [Authority(k, key_rng) for k in range(n_authorities)]
    return authorities, GroupKey.combine(authorities)


def _encrypt_contributions(
    contributions: Sequence[npt.ArrayLike],
    template: CountSketch,
    value_range: tuple[int, int],
    key: GroupKey,
    enc_rng: np.random.Generator | None,
) -> tuple[list[list[Ciphertext]], int, list[float]]:
    """Sketch and encrypt every user's values (Ch. 4.3, the users' step).

    Returns the ciphertexts, the number of values they hold and the seconds
    each encryption took.
    """
    low, high = value_range
    n_values = 0
    encrypted = []
    enc_times = []
    for values in contributions:
        sketch = value_sketch(values, template, low=low, high=high)
        n_values += sketch.total
        start = time.perf_counter()
        encrypted.append(encrypt(sketch.table, key, enc_rng))
        enc_times.append(time.perf_counter() - start)
    return encrypted, n_values, enc_times


def _decoding_table(
    template: CountSketch, value_range: tuple[int, int], n_values: int
) -> DiscreteLogTable:
    """Build the discrete-log table that decodes every count a range query reaches.

    ``|count| <= (largest bucket load of the range) * d * n``: a table of
    ``d * n`` with one giant step per unit of load decodes every possible count.
    """
    low, high = value_range
    load = np.bincount(
        template.buckets(value_keys(np.arange(low, high + 1))).reshape(-1)
        + np.repeat(np.arange(template.depth) * template.width, high - low + 1),
        minlength=template.size,
    )
    return DiscreteLogTable(template.depth * max(1, n_values), int(load.max()))


def reference_problem(seed: int = 0, *, spread: str = "variance") -> np.ndarray:
    """Draw the seed's reference median problem (Ch. 4.3.2), integers in [0, 1000].

    1,000 values from a normal with mean 300 plus 200 from mean 500, rounded
    and clipped to the range. The seed calls 25 and 200 the *variances*
    (``spread="variance"``, standard deviations 5 and 14.1); read as
    standard deviations (``spread="std"``, as a ``gauss(300, 25)`` call
    would) the values are less concentrated, which the Count Sketch's range
    counts handle far better.

    Parameters
    ----------
    seed : int, default=0
        Random seed.
    spread : {"variance", "std"}, default="variance"
        How to read 25 and 200.
    """
    if spread == "variance":
        scales = (5.0, math.sqrt(200.0))
    elif spread == "std":
        scales = (25.0, 200.0)
    else:
        raise ConfigError(f"spread must be 'variance' or 'std', got {spread!r}.")
    rng = np.random.default_rng(seed)
    values = np.concatenate(
        [rng.normal(300.0, scales[0], 1000), rng.normal(500.0, scales[1], 200)]
    )
    out: np.ndarray = np.clip(np.rint(values), 0, 1000).astype(np.int64)
    return out
