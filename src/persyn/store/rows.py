"""Value types shared by the store's sub-ports: the frozen row base, `Provenance`, and the
field validators row types declare (ids, bounded text).

Validation lives in the row types (ARCHITECTURE §4, turn 2): a row with a bad value cannot
be built, whatever backend would store it, and the error is an `InputError` naming the field
(pydantic lets exceptions other than ValueError through unwrapped, so callers and the
contract tests see the same error a backend raised before). A backend reading rows back
that it validated on the way in may build them with `model_construct` on its hot paths.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from persyn.core.errors import InputError
from persyn.core.ids import parse_id
from persyn.core.records import Sensitivity

__all__ = ["GLOBAL", "AgentId", "Provenance", "Row", "bounded_text", "checked_id", "checked_text", "ulid"]


def checked_id(value: str, what: str) -> str:
    """Reject what is not a canonical ULID before it is stored (ARCHITECTURE §4): reads
    compare ids exactly, so a lower-case copy would silently never be found again."""
    canonical = parse_id(value, what=what)
    if canonical != value:
        raise InputError(f"{what} {value!r} is not canonical; pass parse_id(...) of it: {canonical!r}")
    return canonical


def ulid(what: str) -> AfterValidator:
    """A field validator: the value is a canonical ULID (`checked_id`), named `what` in errors."""
    return AfterValidator(lambda value: checked_id(value, what))


def checked_text(value: str, what: str, limit: int) -> str:
    """Text as it is stored: stripped, not empty, at most `limit` characters."""
    text = value.strip()
    if not text:
        raise InputError(f"the {what} is empty")
    if len(text) > limit:
        raise InputError(f"the {what} is {len(text)} characters long; the limit is {limit}")
    return text


def bounded_text(what: str, limit: int) -> AfterValidator:
    """A field validator: `checked_text` of the value."""

    def check(value: str) -> str:
        return checked_text(value, what, limit)

    return AfterValidator(check)


AgentId = Annotated[str, ulid("agent id")]


class Row(BaseModel):
    """Base of the store's row types: frozen, so a row read back is never changed in place."""

    model_config = ConfigDict(frozen=True)


class Provenance(Row):
    """Where something the agent can repeat formed (ARCHITECTURE §4, turn 2): the channel
    (`channel_key`; None: on no channel, the agent on its own), the people present (the agent
    itself excluded) and the sensitivity. `memory.access.may_surface` decides from it where the
    thing may be brought up again, exactly as for a memory record. `GLOBAL` — no channel,
    nobody present, public — is what the agent concluded alone from nothing it could not say
    to anyone: it surfaces everywhere."""

    channel: str | None = Field(default=None, max_length=700)
    participant_ids: tuple[str, ...] = ()
    sensitivity: Sensitivity = Sensitivity.PUBLIC

    @property
    def scope(self) -> str:
        """One string per distinct provenance (a key column: quick facts are kept per scope)."""
        people = ",".join(sorted(set(self.participant_ids)))
        return f"{self.sensitivity.value}|{self.channel or '*'}|{people}"


GLOBAL = Provenance()
