"""The connect loops' backoff (`runtime.channel.Backoff`): doubling up to its cap, each wait
drawn from the upper half of its step, and back to the first step once a connection came up."""

from __future__ import annotations

import random

import pytest

from persyn.runtime.channel import Backoff


def test_the_steps_double_up_to_the_cap_and_each_wait_lies_in_the_upper_half() -> None:
    asked: list[tuple[float, float]] = []

    def upper(low: float, high: float) -> float:
        asked.append((low, high))
        return high

    backoff = Backoff(1.0, 10.0, uniform=upper)
    waits = [backoff.next() for _ in range(6)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert asked == [(w / 2, w) for w in waits]


def test_reset_starts_over_from_the_first_step() -> None:
    backoff = Backoff(0.5, 60.0, uniform=lambda low, high: high)
    for _ in range(5):
        backoff.next()
    backoff.reset()
    assert backoff.next() == 0.5


def test_real_jitter_spreads_the_agents_of_one_deployment() -> None:
    """Ten loops that lost the same server at once do not come back in the same instant."""
    rng = random.Random(7)
    loops = [Backoff(1.0, 300.0, uniform=rng.uniform) for _ in range(10)]
    third = [[loop.next() for _ in range(3)][-1] for loop in loops]
    assert all(2.0 <= wait <= 4.0 for wait in third)
    assert len(set(third)) == 10


@pytest.mark.parametrize(("first", "cap"), [(0.0, 1.0), (-1.0, 1.0), (5.0, 1.0)])
def test_a_backoff_that_could_not_wait_is_refused(first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(first, cap)
