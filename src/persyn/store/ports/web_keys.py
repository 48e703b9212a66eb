"""The web keys sub-port: API keys of the web channel (`web/`), deployment-wide.

Only a key's SHA-256 is stored (keys are 256-bit random strings, so a plain hash is enough:
nothing to brute-force); the key is shown once, when created. A revoked key stays listed
with its revocation time, so `persyn web keys list` shows what was cut off and when.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["WebKey", "WebKeysPort"]


class WebKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str  # a ULID: the speaker id of the key's client on the web channel
    name: str = Field(min_length=1, max_length=200)
    key_hash: str = Field(min_length=64, max_length=64)
    contact_id: str | None = None  # the contact the key speaks as, if tied to one
    operator: bool = False  # may read every conversation and curate the directory
    created_at: datetime
    revoked_at: datetime | None = None


class WebKeysPort(ABC):
    @abstractmethod
    async def add_web_key(self, key: WebKey) -> WebKey:
        """Store a new key (its hash must be new)."""

    @abstractmethod
    async def web_keys(self) -> list[WebKey]:
        """Every key, revoked ones included, oldest first."""

    @abstractmethod
    async def web_key_by_hash(self, key_hash: str) -> WebKey | None: ...

    @abstractmethod
    async def revoke_web_key(self, key_id: str, now: datetime) -> WebKey | None:
        """Revoke a key (idempotent: the first revocation time stays); None if unknown."""
