"""The operator's view of guardrails (SPEC §4.10): `persyn guardrails list | events | lift`
and the active blocks `persyn doctor` reports."""

from __future__ import annotations

from datetime import datetime

from persyn.core.config import GuardrailConfig, Settings
from persyn.core.config.safety import effective_guardrails
from persyn.core.errors import InputError
from persyn.core.ids import is_id
from persyn.ops.history import opened_capability
from persyn.store.ports.guardrails import GuardrailEvent, GuardrailsPort

__all__ = ["active_blocks", "guardrail_events", "guardrail_patterns", "lift_block"]


def guardrail_patterns(settings: Settings) -> tuple[GuardrailConfig, ...]:
    """The patterns in force: the built-ins unless turned off, as configured."""
    return effective_guardrails(settings.safety, settings.guardrails) if settings.safety.enabled else ()


async def guardrail_events(
    settings: Settings, agent_id: str | None, since: datetime | None, limit: int
) -> list[GuardrailEvent]:
    async with opened_capability(settings, GuardrailsPort) as store:
        return await store.guardrail_events(agent_id, since=since, limit=limit)


async def active_blocks(settings: Settings, now: datetime) -> list[GuardrailEvent]:
    async with opened_capability(settings, GuardrailsPort) as store:
        return await store.guardrail_blocks(None, now)


async def lift_block(settings: Settings, event_id: str, now: datetime) -> GuardrailEvent:
    """End a block now; InputError for an id that is no stored guardrail event."""
    if not is_id(event_id.upper()):
        raise InputError(f"{event_id!r} is not a guardrail event id (see `persyn guardrails events`)")
    async with opened_capability(settings, GuardrailsPort) as store:
        lifted = await store.lift_guardrail_block(event_id.upper(), now)
    if lifted is None:
        raise InputError(f"no guardrail event {event_id!r} (see `persyn guardrails events`)")
    if lifted.blocked_until is None:
        raise InputError(f"guardrail event {event_id!r} blocked nothing: it only {', '.join(lifted.actions)}")
    return lifted
