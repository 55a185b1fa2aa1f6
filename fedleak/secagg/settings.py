"""The server's protocol settings, and which groups they can ever decrypt.

A group of ``n`` members is decrypted only if at least ``online_floor(n)``
of them upload, and (double-masking mode) every uploader's self-mask seed can
be rebuilt from ``t(n)`` of the ``n - 1`` shares it gave its peers. A group
smaller than its own floor can never be decrypted: :class:`ProtocolSettings`
refuses such settings when it is built and :meth:`ProtocolSettings.check_count`
refuses a count of clients that cannot fill one decryptable group, so a bad
configuration fails before round 1 instead of logging "no group could be
decrypted" every round.

Thresholds
----------
In double-masking mode a client shares its self-mask seed ``b_i`` among its
``n - 1`` peers with threshold ``t(n) = floor(threshold * n) + 1`` (default
``threshold = 0.5``: more than half the group). Every client refuses
``2 t <= n`` and answers an unmask request only if at least ``t + 1``
members are online (itself included). Together these make the two kinds of
reveal exclusive, even for a server that tells each client a different
online set: to unmask client ``i`` it needs ``t`` peers that believe ``i``
is online (they reveal shares of ``b_i``) and, for each of those peers
``k``, the mask ``i`` shares with ``k``, which then only ``i`` can reveal,
by believing ``k`` dropped; so ``i`` would see at most ``n - t < t + 1``
members online, and refuses. With ``c`` of the group's clients colluding
with the server (revealing everything they hold) the same count needs
``c >= 2 t + 1 - n``; smaller coalitions learn nothing more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .constants import MODES, Mode
from .tally import assign_groups

__all__ = [
    "MIN_ONLINE_FLOOR",
    "ProtocolSettings",
]

#: Fewest online members for which any group's sum is released (seed 000
#: Ch. 4.1: with two, each learns the other's input from the sum).
MIN_ONLINE_FLOOR = 3
_LARGEST_GROUP_SEARCHED = 1 << 20


@dataclass(frozen=True)
class ProtocolSettings:
    """What the server asks of every group.

    Attributes
    ----------
    mode : {"double-masking", "thesis"}
        ``"double-masking"`` (default) adds a Shamir-shared self-mask, so a
        late upload or a false dropout reveals nothing; ``"thesis"`` is the
        seed's pairwise masks alone (seed 000 Ch. 4.1, Table 4.1's bytes),
        safe only against an honest server with no stragglers.
    min_online : int
        Fewest online members for which a group's sum is released (>= 3).
        Clients enforce their own floor as well and never go below it.
    threshold : float
        Double masking: the share threshold as a fraction of the group,
        ``t(n) = floor(threshold * n) + 1``, in ``[0.5, 1)``. Higher values
        resist larger coalitions of clients with the server but tolerate
        fewer dropouts (``n - t - 1`` per group).
    group_size : int or None
        Largest group (the seed recommends 100-1,000); ``None`` makes one
        group of all sampled clients. Groups are never made smaller than
        :meth:`smallest_group`, even when that needs larger groups.

    Raises
    ------
    ConfigError
        Naming the setting, if a group could never be decrypted.
    """

    mode: Mode = "double-masking"
    min_online: int = MIN_ONLINE_FLOOR
    threshold: float = 0.5
    group_size: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {list(MODES)}, got {self.mode!r}.")
        if (
            isinstance(self.min_online, bool)
            or not isinstance(self.min_online, int)
            or self.min_online < MIN_ONLINE_FLOOR
        ):
            raise ConfigError(
                f"min_online must be an integer >= {MIN_ONLINE_FLOOR} (with two "
                f"online members each learns the other's input), got "
                f"{self.min_online!r}."
            )
        if (
            isinstance(self.threshold, bool)
            or not isinstance(self.threshold, int | float)
            or not 0.5 <= float(self.threshold) < 1.0
        ):
            raise ConfigError(
                "threshold must be a fraction of the group in [0.5, 1) (the "
                "Shamir threshold is floor(threshold * n) + 1), got "
                f"{self.threshold!r}."
            )
        object.__setattr__(self, "threshold", float(self.threshold))
        if self.group_size is not None:
            if isinstance(self.group_size, bool) or not isinstance(
                self.group_size, int
            ):
                raise ConfigError(
                    f"group_size must be an integer or None, got {self.group_size!r}."
                )
            floor = self.smallest_group()
            if self.group_size < floor:
                raise ConfigError(
                    f"group_size={self.group_size} can never be decrypted: "
                    f"{self._describe()} needs groups of at least {floor}."
                )

    def _describe(self) -> str:
        text = f"mode {self.mode!r} with min_online={self.min_online}"
        if self.mode == "double-masking":
            # repr, not :g, which prints 0.99999999 as "1"
            text += f" and threshold={self.threshold!r}"
        return text

    def shamir_threshold(self, n: int) -> int:
        """Return ``t(n)``: shares that rebuild a self-mask seed (0 in thesis mode)."""
        if self.mode == "thesis":
            return 0
        return math.floor(self.threshold * n) + 1

    def online_floor(self, n: int) -> int:
        """Return the fewest members of a group of ``n`` that must upload."""
        if self.mode == "thesis":
            return self.min_online
        return max(self.min_online, self.shamir_threshold(n) + 1)

    def decryptable(self, n: int) -> bool:
        """Whether a group of ``n`` members can be decrypted when all upload."""
        if n < MIN_ONLINE_FLOOR or n < self.online_floor(n):
            return False
        return self.mode == "thesis" or self.shamir_threshold(n) <= n - 1

    def smallest_group(self) -> int:
        """Return the smallest decryptable group size.

        Decryptability is monotone in ``n`` (the floor grows by at most one
        when ``n`` does), so every larger group is decryptable too.
        """
        for n in range(MIN_ONLINE_FLOOR, _LARGEST_GROUP_SEARCHED):
            if self.decryptable(n):
                return n
        # a threshold within about 2e-6 of 1 needs groups of over a million
        raise ConfigError(
            f"no group size up to {_LARGEST_GROUP_SEARCHED} is decryptable with "
            f"{self._describe()}."
        )

    def check_count(self, count: int, what: str) -> None:
        """Refuse a number of clients that cannot fill one decryptable group.

        Parameters
        ----------
        count : int
            Clients that would take part (e.g. sampled per round).
        what : str
            The setting(s) that fix ``count``, named in the error.

        Raises
        ------
        ConfigError
            If ``count`` is below :meth:`smallest_group`.
        """
        floor = self.smallest_group()
        if count < floor:
            raise ConfigError(
                f"secure aggregation needs at least {floor} clients per round "
                f"({self._describe()}), but {what} gives {count}; no group "
                "could ever be decrypted."
            )

    def groups(
        self, ids: list[int], rng: np.random.Generator | int | None
    ) -> list[list[int]]:
        """Split ``ids`` into groups, none below :meth:`smallest_group`."""
        return assign_groups(
            ids, self.group_size, rng, min_size=min(len(ids), self.smallest_group())
        )

    def largest_group(self, count: int) -> int:
        """Return the largest group :meth:`groups` makes of ``count`` clients."""
        if count < 1:
            return 0
        if self.group_size is None:
            return count
        floor = min(count, self.smallest_group())
        k = max(1, min(math.ceil(count / self.group_size), count // floor))
        return math.ceil(count / k)
