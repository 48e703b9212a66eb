"""Which runs share a `run_code` workspace (`tools/sandbox/workspace.py`): only runs that may
each be told everything the others wrote there, by the rule `may_surface` applies to a
memory. Checked over every small combination of channels, groups, people and sensitivity."""

from __future__ import annotations

from itertools import product

from hypothesis import given, settings
from hypothesis import strategies as st

from persyn.core.records import Sensitivity
from persyn.memory.access import may_surface
from persyn.store.base import GLOBAL, Provenance
from persyn.tools.sandbox.workspace import workspace_compartment

CHANNELS = ("test:a", "test:b", "test:c", None)
PEOPLE = ("ann", "bo", "cy")
GROUPS = st.lists(st.lists(st.sampled_from(CHANNELS[:3]), min_size=2, max_size=3, unique=True), max_size=3)
PROVENANCES = st.builds(
    Provenance,
    channel=st.sampled_from(CHANNELS),
    participant_ids=st.lists(st.sampled_from(PEOPLE), max_size=3, unique=True).map(tuple),
    sensitivity=st.sampled_from(list(Sensitivity)),
)


@settings(max_examples=2000, deadline=None)
@given(PROVENANCES, PROVENANCES, GROUPS, st.booleans(), st.booleans())
def test_runs_that_share_a_workspace_may_hear_what_each_other_wrote(
    first: Provenance, second: Provenance, groups: list[list[str]], own_first: bool, own_second: bool
) -> None:
    one = workspace_compartment(first, groups, own=own_first, run_id="run-1")
    two = workspace_compartment(second, groups, own=own_second, run_id="run-2")
    if one.key != two.key:
        return
    assert own_first == own_second  # a beat never opens a conversation's workspace
    # What the first run wrote carries its provenance; the second run may read it only where
    # that surfaces: on its channel, in front of its people.
    if second.channel is not None:
        assert may_surface(first, second.channel, second.participant_ids, groups)
    if first.channel is not None:
        assert may_surface(second, first.channel, first.participant_ids, groups)


def test_each_level_keys_its_workspace_as_documented() -> None:
    groups = [["test:a", "test:b"]]
    dm = Provenance(channel="test:a", participant_ids=("ann",), sensitivity=Sensitivity.PRIVATE)
    grouped = dm.model_copy(update={"channel": "test:b"})
    assert workspace_compartment(dm, groups, own=False, run_id="r").key == (
        workspace_compartment(grouped, groups, own=False, run_id="r").key
    )  # private: the compartment, with exactly the same people
    with_bo = dm.model_copy(update={"participant_ids": ("ann", "bo")})
    assert workspace_compartment(dm, groups, own=False, run_id="r").key != (
        workspace_compartment(with_bo, groups, own=False, run_id="r").key
    )
    confidential = [
        dm.model_copy(update={"channel": channel, "sensitivity": Sensitivity.CONFIDENTIAL})
        for channel in ("test:a", "test:b")
    ]
    keys = {workspace_compartment(p, groups, own=False, run_id="r").key for p in confidential}
    assert len(keys) == 2  # a group never widens a confidence
    public = [Provenance(channel="test:a", participant_ids=people) for people in (("ann",), ("bo",))]
    assert len({workspace_compartment(p, groups, own=False, run_id="r").key for p in public}) == 1
    # The agent on its own: shared by its own runs, never with a conversation's.
    assert workspace_compartment(GLOBAL, groups, own=True, run_id="r").key != (
        workspace_compartment(GLOBAL, groups, own=False, run_id="r").key
    )
    nowhere = Provenance(channel=None, sensitivity=Sensitivity.RESTRICTED)
    assert workspace_compartment(nowhere, groups, own=True, run_id="r1").key != (
        workspace_compartment(nowhere, groups, own=True, run_id="r2").key
    )


def test_the_agent_itself_is_not_counted_among_the_people() -> None:
    for sensitivity, channel in product(list(Sensitivity), ("test:a", None)):
        alone = Provenance(channel=channel, participant_ids=("ann",), sensitivity=sensitivity)
        with_agent = alone.model_copy(update={"participant_ids": ("ann", "agent")})
        assert (
            workspace_compartment(alone, [], own=False, run_id="r", agent_id="agent").key
            == workspace_compartment(with_agent, [], own=False, run_id="r", agent_id="agent").key
        )
