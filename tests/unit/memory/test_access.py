"""Compartments and sensitivity (memory/access.py): the policy as pure functions, checked
against an independent restatement of the documented rules over random situations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from persyn.core.records import MemoryRecord, Sensitivity
from persyn.memory.access import eligible_channels, in_compartment, may_surface

AGENT_ID = "01J0000000000000000000AGNT"
PEOPLE = ["01J00000000000000000000ANN", "01J000000000000000000000BO", "01J000000000000000000000CY", AGENT_ID]
CHANNELS = ["terminal:terminal", "discord:dm-ann", "discord:general", "web:chat", "cli:cli"]
LEVELS = list(Sensitivity)


def _record(channel: str, participants: Sequence[str], sensitivity: Sensitivity) -> MemoryRecord:
    return MemoryRecord(
        id="01J00000000000000000000REC",
        agent_id=AGENT_ID,
        created_at=datetime(2026, 3, 1, tzinfo=UTC),
        channel=channel,
        participant_ids=tuple(participants),
        summary="I talked with them.",
        sensitivity=sensitivity,
    )


def oracle(
    record: MemoryRecord, now_channel: str, present: Sequence[str], groups: Sequence[Sequence[str]]
) -> bool:
    """The module docstring, restated without looking at the implementation."""
    compartment = {now_channel} | {c for g in groups if now_channel in g for c in g}
    if record.channel not in compartment:
        return False
    now = set(present) - {AGENT_ID}
    then = set(record.participant_ids) - {AGENT_ID}
    level = record.sensitivity
    if level == Sensitivity.PUBLIC:
        return True
    if level == Sensitivity.PRIVATE:
        return now <= then
    if level == Sensitivity.CONFIDENTIAL:
        return now <= then and record.channel == now_channel
    return now == then and record.channel == now_channel


channels = st.sampled_from(CHANNELS)
people = st.lists(st.sampled_from(PEOPLE), max_size=4, unique=True)
groups = st.lists(st.lists(channels, min_size=1, max_size=4, unique=True), max_size=3)
situations = st.tuples(channels, people, st.sampled_from(LEVELS), channels, people, groups)


@given(situations)
def test_may_surface_is_exactly_the_documented_policy(
    situation: tuple[str, list[str], Sensitivity, str, list[str], list[list[str]]],
) -> None:
    formed_on, formed_with, level, now_channel, present, channel_groups = situation
    record = _record(formed_on, formed_with, level)
    assert may_surface(record, now_channel, present, channel_groups, agent_id=AGENT_ID) == oracle(
        record, now_channel, present, channel_groups
    )


@given(situations)
def test_never_outside_the_compartment(
    situation: tuple[str, list[str], Sensitivity, str, list[str], list[list[str]]],
) -> None:
    formed_on, formed_with, level, now_channel, present, channel_groups = situation
    record = _record(formed_on, formed_with, level)
    if may_surface(record, now_channel, present, channel_groups, agent_id=AGENT_ID):
        assert formed_on in eligible_channels(now_channel, channel_groups)


@given(situations)
def test_raising_sensitivity_only_ever_hides(
    situation: tuple[str, list[str], Sensitivity, str, list[str], list[list[str]]],
) -> None:
    formed_on, formed_with, level, now_channel, present, channel_groups = situation
    if may_surface(_record(formed_on, formed_with, level), now_channel, present, channel_groups):
        for lower in LEVELS[: level.rank]:
            assert may_surface(_record(formed_on, formed_with, lower), now_channel, present, channel_groups)


@given(channels, people, groups)
def test_a_stranger_present_withholds_everything_but_public(
    formed_on: str, formed_with: list[str], channel_groups: list[list[str]]
) -> None:
    stranger = "01J0000000000000000STRANGR"
    for level in LEVELS[1:]:
        record = _record(formed_on, formed_with, level)
        assert not may_surface(record, formed_on, [*formed_with, stranger], channel_groups)


def test_groups_share_public_and_private_but_not_confidential_or_restricted() -> None:
    ann = PEOPLE[0]
    grouped = [["discord:dm-ann", "terminal:terminal"]]
    for level, expected in zip(LEVELS, (True, True, False, False), strict=True):
        record = _record("discord:dm-ann", [ann], level)
        assert may_surface(record, "terminal:terminal", [ann], grouped) is expected
        assert may_surface(record, "discord:dm-ann", [ann], grouped) is True
        assert may_surface(record, "web:chat", [ann], grouped) is False  # not in the group


def test_restricted_needs_the_same_company() -> None:
    ann, bo = PEOPLE[0], PEOPLE[1]
    record = _record("discord:general", [ann, bo], Sensitivity.RESTRICTED)
    assert may_surface(record, "discord:general", [bo, ann], [])
    assert not may_surface(record, "discord:general", [ann], [])  # a subset is not enough
    assert not may_surface(record, "discord:general", [], [])  # nor is the agent alone
    assert may_surface(record, "discord:general", [ann, bo, AGENT_ID], [], agent_id=AGENT_ID)


def test_private_follows_the_people_not_the_room() -> None:
    ann, bo = PEOPLE[0], PEOPLE[1]
    record = _record("terminal:terminal", [ann, bo], Sensitivity.PRIVATE)
    assert may_surface(record, "terminal:terminal", [ann], [])  # an absent participant is fine
    assert may_surface(record, "terminal:terminal", [], [])  # the agent reflecting alone
    assert not may_surface(record, "terminal:terminal", [ann, PEOPLE[2]], [])


def test_eligible_channels_lists_the_current_first_and_is_not_transitive() -> None:
    groups = [["a:a", "b:b"], ["b:b", "c:c"]]
    assert eligible_channels("a:a", groups) == ("a:a", "b:b")
    assert eligible_channels("b:b", groups) == ("b:b", "a:a", "c:c")
    assert eligible_channels("z:z", groups) == ("z:z",)
    assert in_compartment("c:c", "b:b", groups)
    assert not in_compartment("c:c", "a:a", groups)
