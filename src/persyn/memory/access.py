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
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from persyn.core.records import MemoryRecord, Sensitivity

__all__ = ["eligible_channels", "in_compartment", "may_surface"]


def eligible_channels(current_key: str, groups: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """The compartment of `current_key`: itself first, then every channel grouped with it
    (sorted, no duplicates). Passed to the store so ineligible records are never fetched."""
    shared = {channel for group in groups if current_key in group for channel in group}
    shared.discard(current_key)
    return (current_key, *sorted(shared))


def in_compartment(record_channel: str, now_channel: str, groups: Iterable[Sequence[str]]) -> bool:
    return record_channel in eligible_channels(now_channel, groups)


def may_surface(
    record: MemoryRecord,
    now_channel: str,
    present_participant_ids: Collection[str],
    groups: Iterable[Sequence[str]],
    *,
    agent_id: str | None = None,
) -> bool:
    """True when `record` may be brought up on `now_channel` in front of
    `present_participant_ids` (see the module docstring for each level)."""
    if not in_compartment(record.channel, now_channel, groups):
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
