"""Protocol settings: floors, thresholds, and refusing what can never decrypt."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.errors import ConfigError
from fedleak.secagg import MODES, ProtocolSettings


def test_defaults() -> None:
    s = ProtocolSettings()
    assert s.mode == "double-masking" and s.min_online == 3 and s.threshold == 0.5
    # t > n/2, and an online floor of t + 1
    assert [s.shamir_threshold(n) for n in (3, 4, 5, 6, 10, 30)] == [2, 3, 3, 4, 6, 16]
    assert [s.online_floor(n) for n in (3, 4, 5, 30)] == [3, 4, 4, 17]
    assert s.smallest_group() == 3
    thesis = ProtocolSettings(mode="thesis")
    assert thesis.shamir_threshold(10) == 0 and thesis.online_floor(10) == 3


@settings(deadline=None, max_examples=80)
@given(
    mode=st.sampled_from(MODES),
    threshold=st.floats(0.5, 0.95),
    min_online=st.integers(3, 9),
    n=st.integers(1, 200),
)
def test_decryptable_is_what_the_clients_accept(
    mode: str, threshold: float, min_online: int, n: int
) -> None:
    s = ProtocolSettings(mode=mode, threshold=threshold, min_online=min_online)  # type: ignore[arg-type]
    t = s.shamir_threshold(n)
    clients_accept = n >= 3 and n >= min_online
    if mode == "double-masking":
        # what every client checks: 2t > n, t <= n - 1, t + 1 members online
        assert 2 * t > n
        clients_accept = clients_accept and t <= n - 1 and t + 1 <= n
    assert s.decryptable(n) == clients_accept
    # monotone: the smallest decryptable group bounds every larger one
    floor = s.smallest_group()
    assert s.decryptable(n) == (n >= floor)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "plain"}, "mode"),
        ({"min_online": 2}, "min_online"),
        ({"min_online": True}, "min_online"),
        ({"threshold": 0.4}, "threshold"),
        ({"threshold": 1.0}, "threshold"),
        ({"group_size": 2}, "group_size=2 can never be decrypted"),
        ({"group_size": 3, "threshold": 0.7}, "group_size=3 can never"),
        ({"group_size": 4, "min_online": 5}, "group_size=4"),
        ({"group_size": 3.5}, "group_size"),
    ],
)
def test_settings_that_can_never_decrypt_are_refused(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        ProtocolSettings(**kwargs)  # type: ignore[arg-type]


def test_check_count_names_the_setting() -> None:
    s = ProtocolSettings()
    s.check_count(3, "x")
    with pytest.raises(
        ConfigError,
        match=r"^secure aggregation needs at least 3 clients per round \(mode 'double-masking' with min_online=3 and threshold=0\.5\), but fraction_train 0\.5 of 4 gives 2; no group could ever be decrypted\.$",
    ):
        s.check_count(2, "fraction_train 0.5 of 4")
    with pytest.raises(
        ConfigError,
        match=r"^secure aggregation needs at least 4 clients per round \(mode 'thesis' with min_online=4\), but x gives 3; no group could ever be decrypted\.$",
    ):
        ProtocolSettings(mode="thesis", min_online=4).check_count(3, "x")


@settings(deadline=None, max_examples=60)
@given(
    n=st.integers(1, 80),
    group_size=st.none() | st.integers(3, 30),
    mode=st.sampled_from(MODES),
)
def test_groups_are_never_below_the_floor_and_largest_group_is_exact(
    n: int, group_size: int | None, mode: str
) -> None:
    s = ProtocolSettings(mode=mode, group_size=group_size)  # type: ignore[arg-type]
    groups = s.groups(list(range(n)), np.random.default_rng(0))
    assert max(len(g) for g in groups) == s.largest_group(n)
    if n >= s.smallest_group():
        assert all(s.decryptable(len(g)) for g in groups)
