"""Who may be reminded of what: compartments and sensitivity (SPEC §4 step 2).

Two filters, both required for a record to surface. They are pure functions of the record's
provenance (the channel and the people present when it formed) and of the situation now
(the current channel and the people present now), so they can be checked exhaustively.

**Compartment.** By default only records formed on the current channel (`service:channel`)
are eligible. `[memory] channel_groups` lists channels that share memory; the compartment of
a channel is itself plus every channel that appears in a group with it. Grouping is not
transitive: with groups [[a, b], [b, c]], channel a shares with b but not with c.

**Sensitivity.** "Present" means the people who can read the current channel, other than the
agent itself (the agent's own id is ignored on both sides). Let P be the record's
participants and N the people present now:

- `public` — anyone present, within the compartment. For things said openly that any
  audience of that compartment may hear again.
- `private` (the default) — N ⊆ P: everyone present now took part when it formed, on any
  channel of the compartment. A stranger in the room withholds it; a participant's absence
  does not (telling Ann what Ann and Bo said is fine, telling Cy is not).
- `confidential` — N ⊆ P, AND only on the exact channel where it formed: a channel group
  never widens it (a confidence made in a direct message is not repeated in a shared room,
  even one grouped with it and even to the same people).
- `restricted` — N = P exactly, on the exact channel where it formed: only in the same
  company that formed it — not with a subset of it (Ann alone does not hear what Ann and Bo
  told the agent together in confidence), not with anyone added.

With nobody present (the agent reflecting on its own, N = ∅) public, private and
confidential records of the compartment surface — there is no one to tell — and restricted
ones only if they also formed with nobody but the agent, since what the agent concludes
alone can later be said to someone else.

The levels are monotone: whenever a record surfaces at some level it also surfaces at every
lower level, so raising a record's sensitivity can only ever hide it.

**Other things the agent can repeat** (quick facts, goals, reminders, activity entries) carry
the same provenance (`Provenanced`) and pass the same rule. Their channel may be None: formed
on no channel at all (the agent on its own). Such an item has no compartment — the
participants rule alone decides — and no exact channel, so a confidential or restricted one
never surfaces. A public item with no channel (something the agent concluded alone, from
nothing it could not say to anyone) surfaces everywhere.

**Derived items.** What the agent writes after reading items (a heartbeat's goal, a reminder
run's activity entry) may surface at most where every item it read may: `derived_provenance`
is that meet — the strictest sensitivity, the people common to every guarded source, the one
channel they share, or else the run's own (`home`), where only the agent's reflections see it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Protocol

from persyn.core.records import Sensitivity
from persyn.store.base import GLOBAL, Provenance

__all__ = ["Provenanced", "derived_provenance", "eligible_channels", "in_compartment", "may_surface"]


class Provenanced(Protocol):
    """What the policy reads of a record, fact, goal, reminder or activity entry."""

    @property
    def channel(self) -> str | None: ...
    @property
    def participant_ids(self) -> Sequence[str]: ...
    @property
    def sensitivity(self) -> Sensitivity: ...


def eligible_channels(current_key: str, groups: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """The compartment of `current_key`: itself first, then every channel grouped with it
    (sorted, no duplicates). Passed to the store so ineligible records are never fetched."""
    shared = {channel for group in groups if current_key in group for channel in group}
    shared.discard(current_key)
    return (current_key, *sorted(shared))


def in_compartment(record_channel: str, now_channel: str, groups: Iterable[Sequence[str]]) -> bool:
    return record_channel in eligible_channels(now_channel, groups)


def may_surface(
    record: Provenanced,
    now_channel: str,
    present_participant_ids: Collection[str],
    groups: Iterable[Sequence[str]],
    *,
    agent_id: str | None = None,
) -> bool:
    """True when `record` may be brought up on `now_channel` in front of
    `present_participant_ids` (see the module docstring for each level)."""
    if record.channel is not None and not in_compartment(record.channel, now_channel, groups):
        return False
    sensitivity = record.sensitivity
    if sensitivity is Sensitivity.PUBLIC:
        return True
    # Ids are compared exactly (they are canonical ULIDs): two spellings of one id would
    # count as two people, which can only withhold, never leak.
    present = set(present_participant_ids)
    formed_with = set(record.participant_ids)
    if agent_id is not None:
        present.discard(agent_id)
        formed_with.discard(agent_id)
    if not present <= formed_with:
        return False
    if sensitivity is Sensitivity.PRIVATE:
        return True
    if record.channel != now_channel:
        return False
    if sensitivity is Sensitivity.CONFIDENTIAL:
        return True
    return present == formed_with  # RESTRICTED


def derived_provenance(sources: Iterable[Provenanced], home: str) -> Provenance:
    """Where something concluded from `sources` may surface: only where each of them may, on
    every channel but `home` (the channel of the run that concluded it; property-tested).

    Global sources constrain nothing; none else: global. Sources in several compartments
    share no channel but the run's own, `home`. The people are those common to every guarded
    source; a restricted source needs exactly its own company, so sources that disagree on
    it, or one that can surface nowhere, leave `home` with nobody present."""
    constraining = [s for s in sources if s.channel is not None or s.sensitivity is not Sensitivity.PUBLIC]
    if not constraining:
        return GLOBAL
    nowhere = Provenance(channel=home, sensitivity=Sensitivity.RESTRICTED)
    if any(s.channel is None and s.sensitivity.rank >= Sensitivity.CONFIDENTIAL.rank for s in constraining):
        return nowhere  # no exact channel: it never surfaces
    channels = {s.channel for s in constraining if s.channel is not None}
    channel = None if not channels else channels.pop() if len(channels) == 1 else home
    sensitivity = max((s.sensitivity for s in constraining), key=lambda level: level.rank)
    guarded = [frozenset(s.participant_ids) for s in constraining if s.sensitivity is not Sensitivity.PUBLIC]
    people = frozenset[str].intersection(*guarded) if guarded else frozenset[str]()
    if sensitivity is Sensitivity.RESTRICTED:
        companies = {frozenset(s.participant_ids) for s in constraining if s.sensitivity is sensitivity}
        if len(companies) != 1 or not all(people >= company for company in companies):
            return nowhere
    return Provenance(channel=channel, participant_ids=tuple(sorted(people)), sensitivity=sensitivity)
