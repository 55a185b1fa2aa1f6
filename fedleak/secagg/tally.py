"""Server side of the protocol: the running sum of one group, and grouping.

A :class:`GroupTally` accepts the masked uploads of one group in one round,
adding each into a running modular sum. :meth:`GroupTally.close` fixes the
online set ``U_on``; from then on uploads are refused. If members dropped,
every online member sends its recovery ``k'_i`` and
:meth:`GroupTally.result` returns ``sum_{i in U_on} b_i - sum_{i in U_on}
k'_i mod 2**b``, the sum of the online members' encoded inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError, ProtocolError
from .prg import _check_dtype, _check_uint64

__all__ = [
    "GroupTally",
    "InsufficientParticipants",
    "assign_groups",
]


class InsufficientParticipants(ProtocolError):
    """Too few members of a group are online to release their sum."""


class GroupTally:
    """The server's state for one group in one round.

    Parameters
    ----------
    round : int
        The round; uploads for another round are refused.
    group : int
        The group number (for messages).
    members : Sequence of int
        Ids of the group's members (distinct, in ``[0, 2**64)``).
    length : int
        Number of words of every vector, >= 1.
    dtype : numpy.dtype or type, optional
        ``numpy.uint32`` (default) or ``numpy.uint64``.
    min_online : int, optional
        Fewest online members for which the sum is released (default 3, as
        in the seed thesis; >= 1). With two, each of them could subtract its
        own input from the sum and learn the other's. A group with fewer
        members always fails at :meth:`close`.

    Raises
    ------
    ConfigError
        If an argument is invalid.
    """

    def __init__(
        self,
        *,
        round: int,
        group: int,
        members: Sequence[int],
        length: int,
        dtype: np.dtype | type = np.uint32,
        min_online: int = 3,
    ) -> None:
        self._round = _check_uint64(round, "round")
        self._group = _check_uint64(group, "group")
        ids = [_check_uint64(m, "member id") for m in members]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"group {self._group}: member ids are not distinct.")
        self._length = _check_uint64(length, "length")
        if self._length < 1:
            raise ConfigError("length must be >= 1.")
        self._dtype = _check_dtype(dtype)
        if isinstance(min_online, bool) or not isinstance(min_online, int):
            raise ConfigError(f"min_online must be an integer, got {min_online!r}.")
        if min_online < 1:
            raise ConfigError(f"min_online must be >= 1, got {min_online}.")
        self._min_online = min_online
        self._members = frozenset(ids)
        self._sorted_members = sorted(ids)
        self._sum: np.ndarray | None = np.zeros(self._length, dtype=self._dtype)
        self._uploaded: set[int] = set()
        self._recovered: set[int] = set()
        self._online: list[int] | None = None
        self._dropped: list[int] = []
        self._failed = False

    # ----------------------------------------------------------- properties

    @property
    def round(self) -> int:
        """The round of this tally."""
        return self._round

    @property
    def group(self) -> int:
        """The group number of this tally."""
        return self._group

    @property
    def members(self) -> list[int]:
        """The member ids, sorted."""
        return list(self._sorted_members)

    @property
    def length(self) -> int:
        """The number of words of every vector."""
        return self._length

    @property
    def dtype(self) -> np.dtype:
        """The word type."""
        return self._dtype

    @property
    def min_online(self) -> int:
        """The fewest online members for which the sum is released."""
        return self._min_online

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` fixed the online set (or failed)."""
        return self._online is not None or self._failed

    @property
    def failed(self) -> bool:
        """Whether the group failed (too few online members)."""
        return self._failed

    @property
    def uploaded(self) -> list[int]:
        """Members whose upload was accepted, sorted."""
        return sorted(self._uploaded)

    @property
    def recovered(self) -> list[int]:
        """Online members whose recovery was accepted, sorted."""
        return sorted(self._recovered)

    @property
    def missing_recoveries(self) -> list[int]:
        """Online members whose recovery is still expected, sorted.

        Empty before :meth:`close`, and when nobody dropped.
        """
        if self._online is None or not self._dropped:
            return []
        return [i for i in self._online if i not in self._recovered]

    # ------------------------------------------------------------- messages

    def _where(self) -> str:
        return f"round {self._round}, group {self._group}"

    def _check_vector(self, kind: str, sender: int, vector: object) -> np.ndarray:
        if not isinstance(vector, np.ndarray):
            raise ProtocolError(
                f"{kind} from {sender} rejected ({self._where()}): not a numpy "
                f"array but {type(vector).__name__}."
            )
        if vector.dtype != self._dtype:
            raise ProtocolError(
                f"{kind} from {sender} rejected ({self._where()}): dtype "
                f"{vector.dtype}, expected {self._dtype}."
            )
        if vector.shape != (self._length,):
            raise ProtocolError(
                f"{kind} from {sender} rejected ({self._where()}): shape "
                f"{vector.shape}, expected ({self._length},)."
            )
        return vector

    def _check_sender(self, kind: str, sender: object, round: object) -> int:
        if isinstance(sender, bool) or not isinstance(sender, int | np.integer):
            raise ProtocolError(
                f"{kind} from {sender!r} rejected ({self._where()}): the sender "
                "is not an integer id."
            )
        who = int(sender)
        if self._failed:
            raise ProtocolError(
                f"{kind} from {who} rejected ({self._where()}): the group "
                "failed with too few online members."
            )
        if who not in self._members:
            raise ProtocolError(
                f"{kind} from {who} rejected ({self._where()}): unknown sender, "
                "not a member of this group."
            )
        if (
            isinstance(round, bool)
            or not isinstance(round, int | np.integer)
            or int(round) != self._round
        ):
            raise ProtocolError(
                f"{kind} from {who} rejected ({self._where()}): stale or wrong "
                f"round {round!r}, expected {self._round}."
            )
        return who

    def add_upload(self, sender: int, round: int, masked: np.ndarray) -> None:
        """Add one member's masked upload to the running sum.

        Parameters
        ----------
        sender : int
            The member's id.
        round : int
            The round the upload was made for.
        masked : numpy.ndarray
            The masked vector, shape ``(length,)`` and the tally's dtype.

        Raises
        ------
        ProtocolError
            Naming the sender and the reason, for an unknown sender, a
            duplicate, a wrong round, dtype or shape, or an upload after
            :meth:`close` (a late upload must be refused: the recoveries
            requested for its sender would unmask it). Nothing changes on
            error.
        """
        who = self._check_sender("upload", sender, round)
        if self._online is not None:
            raise ProtocolError(
                f"upload from {who} rejected ({self._where()}): late, the online "
                "set is already fixed and the recovery masks would unmask it."
            )
        if who in self._uploaded:
            raise ProtocolError(
                f"upload from {who} rejected ({self._where()}): duplicate upload."
            )
        vector = self._check_vector("upload", who, masked)
        assert self._sum is not None
        np.add(self._sum, vector, out=self._sum)
        self._uploaded.add(who)

    def close(self) -> tuple[list[int], list[int]]:
        """Fix the online set ``U_on``.

        Calling it again returns the same sets.

        Returns
        -------
        online : list of int
            The members that uploaded, sorted.
        dropped : list of int
            The members that did not, sorted; each online member must send a
            recovery for them (none is needed if this is empty).

        Raises
        ------
        InsufficientParticipants
            If fewer than ``min_online`` members uploaded. The tally is then
            unusable: :meth:`result` raises.
        """
        if self._online is None and not self._failed:
            online = sorted(self._uploaded)
            if len(online) < self._min_online:
                self._failed = True
                self._sum = None
                self._dropped = [m for m in self._sorted_members if m not in online]
                raise InsufficientParticipants(
                    f"{self._where()}: only {len(online)} of "
                    f"{len(self._members)} members uploaded, at least "
                    f"{self._min_online} needed; the group's sum is not released."
                )
            self._online = online
            self._dropped = [m for m in self._sorted_members if m not in online]
        if self._failed:
            raise InsufficientParticipants(
                f"{self._where()}: the group failed with too few online members."
            )
        assert self._online is not None
        return list(self._online), list(self._dropped)

    def add_recovery(self, sender: int, round: int, k_prime: np.ndarray) -> None:
        """Subtract one online member's recovery ``k'_i`` from the sum.

        Parameters
        ----------
        sender : int
            The member's id; must be online.
        round : int
            The round the recovery was made for.
        k_prime : numpy.ndarray
            The recovery, shape ``(length,)`` and the tally's dtype.

        Raises
        ------
        ProtocolError
            Naming the sender and the reason, before :meth:`close`, when
            nobody dropped, for an unknown or dropped sender, a duplicate, or
            a wrong round, dtype or shape. Nothing changes on error.
        """
        who = self._check_sender("recovery", sender, round)
        if self._online is None:
            raise ProtocolError(
                f"recovery from {who} rejected ({self._where()}): the online set "
                "is not fixed yet (call close() first)."
            )
        if not self._dropped:
            raise ProtocolError(
                f"recovery from {who} rejected ({self._where()}): nobody dropped, "
                "no recovery is expected."
            )
        if who not in self._uploaded:
            raise ProtocolError(
                f"recovery from {who} rejected ({self._where()}): the sender "
                "dropped and is not in the online set."
            )
        if who in self._recovered:
            raise ProtocolError(
                f"recovery from {who} rejected ({self._where()}): duplicate recovery."
            )
        vector = self._check_vector("recovery", who, k_prime)
        assert self._sum is not None
        np.subtract(self._sum, vector, out=self._sum)
        self._recovered.add(who)

    def result(self) -> np.ndarray:
        """Return the sum of the online members' encoded inputs.

        Returns
        -------
        numpy.ndarray
            ``sum b_i - sum k'_i mod 2**b`` over ``U_on``, a new array.

        Raises
        ------
        ProtocolError
            If :meth:`close` was not called, the group failed, or recoveries
            are missing (the message names the ids). A missing recovery makes
            the group fail: there is no second recovery round, as two
            recoveries would reveal a user's pairwise masks.
        """
        if self._failed:
            raise ProtocolError(
                f"{self._where()}: the group failed with too few online members; "
                "there is no result."
            )
        if self._online is None:
            raise ProtocolError(
                f"{self._where()}: close() must fix the online set before result()."
            )
        missing = self.missing_recoveries
        if missing:
            raise ProtocolError(
                f"{self._where()}: recoveries missing from {missing}; the group's "
                "sum cannot be unmasked."
            )
        assert self._sum is not None
        return self._sum.copy()


def assign_groups(
    ids: Sequence[int],
    group_size: int | None,
    rng: np.random.Generator | int | None = None,
    *,
    min_size: int = 1,
) -> list[list[int]]:
    """Split users at random into groups of near-equal size.

    Parameters
    ----------
    ids : Sequence of int
        Distinct user ids, in ``[0, 2**64)``; their order does not matter.
    group_size : int or None
        Largest group size, >= 1; ``None`` puts everybody in one group.
    rng : numpy.random.Generator or int, optional
        Source of randomness for the shuffle; the same seed gives the same
        groups.
    min_size : int, optional
        Smallest group size (default 1). When ``ceil(n / group_size)``
        groups would be smaller, fewer (and larger) groups are made:
        ``max(1, min(ceil(n / group_size), floor(n / min_size)))`` groups.
        A group below the decryption floor could never be decrypted, so the
        protocol passes its floor here.

    Returns
    -------
    list of list of int
        Groups whose sizes differ by at most one, each sorted; together they
        hold every id once. Empty if ``ids`` is.

    Raises
    ------
    ConfigError
        If ``group_size < 1``, ``min_size < 1``, or the ids are invalid or
        repeated.
    """
    members = sorted(_check_uint64(i, "user id") for i in ids)
    if len(set(members)) != len(members):
        raise ConfigError("user ids must be distinct.")
    if group_size is not None and (
        isinstance(group_size, bool)
        or not isinstance(group_size, int | np.integer)
        or group_size < 1
    ):
        raise ConfigError(f"group_size must be an integer >= 1, got {group_size!r}.")
    if isinstance(min_size, bool) or not isinstance(min_size, int) or min_size < 1:
        raise ConfigError(f"min_size must be an integer >= 1, got {min_size!r}.")
    if not members:
        return []
    if group_size is None:
        return [members]
    n = len(members)
    k = max(1, min(math.ceil(n / int(group_size)), n // min_size))
    order = np.random.default_rng(rng).permutation(n)
    return [sorted(members[p] for p in part) for part in np.array_split(order, k)]
