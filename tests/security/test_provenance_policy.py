"""The provenance rule for everything the agent can repeat (memory/access.py), checked over
random situations: items with no channel, and the meet (`derived_provenance`) that what a
run writes gets from what it read."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from persyn.core.records import Sensitivity
from persyn.memory.access import derived_provenance, may_surface
from persyn.store.base import GLOBAL, Provenance

AGENT_ID = "01J0000000000000000000AGNT"
PEOPLE = ["01J00000000000000000000ANN", "01J000000000000000000000BO", "01J000000000000000000000CY"]
CHANNELS = ["discord:dm-ann", "discord:general", "web:chat", "terminal:terminal"]
HOME = "self:heartbeat"  # the run's own channel, grouped with nothing
LEVELS = list(Sensitivity)

people = st.lists(st.sampled_from(PEOPLE), max_size=3, unique=True)
groups = st.lists(st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=3, unique=True), max_size=2)
provenances = st.builds(
    Provenance,
    channel=st.one_of(st.none(), st.sampled_from(CHANNELS)),
    participant_ids=people.map(tuple),
    sensitivity=st.sampled_from(LEVELS),
)


def _surfaces(item: Provenance, channel: str, present: Sequence[str], grouped: list[list[str]]) -> bool:
    return may_surface(item, channel, present, grouped, agent_id=AGENT_ID)


@given(st.lists(provenances, max_size=4), st.sampled_from(CHANNELS), people, groups)
def test_what_a_run_writes_surfaces_only_where_everything_it_read_may(
    read: list[Provenance], channel: str, present: list[str], grouped: list[list[str]]
) -> None:
    derived = derived_provenance(read, HOME)
    if _surfaces(derived, channel, present, grouped):
        for source in read:
            assert _surfaces(source, channel, present, grouped), (source, derived)


@given(provenances)
def test_the_meet_is_exact_for_one_source_that_can_surface(source: Provenance) -> None:
    derived = derived_provenance([source], HOME)
    if source.channel is None and source.sensitivity.rank >= Sensitivity.CONFIDENTIAL.rank:
        return  # surfaces nowhere: so does what is derived from it (the property above)
    if source == GLOBAL or (source.channel is None and source.sensitivity is Sensitivity.PUBLIC):
        assert derived == GLOBAL
    else:
        assert derived.channel == source.channel and derived.sensitivity is source.sensitivity


def test_nothing_read_is_global_and_global_surfaces_everywhere() -> None:
    assert derived_provenance([], HOME) == GLOBAL
    assert derived_provenance([GLOBAL, GLOBAL], HOME) == GLOBAL
    for channel in CHANNELS:
        assert _surfaces(GLOBAL, channel, PEOPLE, [])


@given(st.sampled_from(CHANNELS), people, groups, people, st.sampled_from(LEVELS))
def test_an_item_with_no_channel_follows_the_people_alone(
    channel: str, present: list[str], grouped: list[list[str]], formed_with: list[str], level: Sensitivity
) -> None:
    item = Provenance(channel=None, participant_ids=tuple(formed_with), sensitivity=level)
    expected = {
        Sensitivity.PUBLIC: True,
        Sensitivity.PRIVATE: set(present) <= set(formed_with),
        Sensitivity.CONFIDENTIAL: False,  # no exact channel to keep it on
        Sensitivity.RESTRICTED: False,
    }[level]
    assert _surfaces(item, channel, present, grouped) is expected


def test_reading_two_compartments_leaves_only_the_runs_own_channel() -> None:
    ann, bo = PEOPLE[0], PEOPLE[1]
    derived = derived_provenance(
        [
            Provenance(channel="discord:dm-ann", participant_ids=(ann,), sensitivity=Sensitivity.PRIVATE),
            Provenance(channel="web:chat", participant_ids=(ann, bo), sensitivity=Sensitivity.CONFIDENTIAL),
        ],
        HOME,
    )
    assert derived == Provenance(channel=HOME, participant_ids=(ann,), sensitivity=Sensitivity.CONFIDENTIAL)
    for channel in CHANNELS:
        assert not _surfaces(derived, channel, [ann], [])
