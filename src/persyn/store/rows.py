"""Value types shared by the store's sub-ports: the frozen row base and `Provenance`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from persyn.core.records import Sensitivity

__all__ = ["GLOBAL", "Provenance", "Row"]


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
