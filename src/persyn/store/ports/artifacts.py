"""The artifacts sub-port: shared, versioned documents of the deployment (SPEC §4.5, §4.6).

An artifact is a name within a *scope* — the channel key (`service:channel`) of the
conversation that created it — and a list of versions, each with its whole content and the
agent that wrote it. Versions are numbered 1, 2, ... per artifact and never change; a write
that names the version it is based on is refused when another version came first (two
agents editing at once never overwrite each other unseen). Who may see a scope is the tools'
business (`tools/builtin/artifacts.py`): the store answers only for the scopes it is given.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ArtifactSummary", "ArtifactVersion", "ArtifactsPort"]


class ArtifactVersion(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str  # ULID
    scope: str = Field(min_length=1, max_length=700)  # the channel key it belongs to
    name: str = Field(min_length=1, max_length=200)
    version: int = Field(ge=1)
    agent_id: str  # who wrote this version
    content: str
    note: str = Field(default="", max_length=500)  # what changed, in the author's words
    created_at: datetime


class ArtifactSummary(BaseModel):
    """One artifact as a listing shows it: its latest version and who wrote what."""

    model_config = ConfigDict(frozen=True)

    scope: str
    name: str
    latest: int
    updated_at: datetime
    last_agent_id: str
    versions_by_agent: dict[str, int]  # agent id → how many versions it wrote


class ArtifactsPort(ABC):
    @abstractmethod
    async def add_artifact_version(
        self, version: ArtifactVersion, *, base: int | None
    ) -> ArtifactVersion | None:
        """Store `version` as the next one of its artifact (its `version` field is set here:
        the latest + 1). With `base`, only if the latest is still `base` (0: the artifact must
        not exist yet); otherwise nothing is stored and None is returned."""

    @abstractmethod
    async def artifact_versions(self, scope: str, name: str) -> list[ArtifactVersion]:
        """Every version of one artifact, oldest first (empty: no such artifact)."""

    @abstractmethod
    async def artifacts(self, scopes: Sequence[str]) -> list[ArtifactSummary]:
        """The artifacts of `scopes`, most recently changed first."""
