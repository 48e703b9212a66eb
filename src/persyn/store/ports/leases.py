"""The leases sub-port: who in a deployment holds a thing only one process may hold at a
time (ARCHITECTURE §14: the connection to a chat network), deployment-wide.

A lease is a name, its holder (one process, `holder_id`), the time it lapses and the holder's
account of what it holds (`state`, written with each renewal). Acquiring
is one atomic statement (INSERT … ON CONFLICT … DO UPDATE … WHERE the row is the caller's or
has lapsed), so two processes racing for a free or lapsed lease get one winner on every
backend and every host sharing the store. The holder renews by acquiring again before it
lapses; a holder that dies (kill -9, a lost host) stops renewing and another process takes
the lease over once it lapses. Times come from the caller's clock: hosts sharing a store
must keep their clocks within a small part of the lease's length of each other (NTP).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MAX_HOLDER", "MAX_LEASE_NAME", "MAX_LEASE_STATE", "Lease", "LeasesPort"]

MAX_LEASE_NAME = 100
MAX_HOLDER = 200
MAX_LEASE_STATE = 2000


class Lease(BaseModel):
    """A lease as it stands: `holder` has held `name` since `acquired_at` (the last time it
    changed hands) and keeps it until `expires_at` unless it renews."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1, max_length=MAX_LEASE_NAME)
    holder: str = Field(min_length=1, max_length=MAX_HOLDER)
    acquired_at: datetime
    expires_at: datetime
    # The holder's own account of what it holds, as of its last renewal (a chat network: its
    # connections' states, which `persyn doctor` and `persyn channels show` read in other processes).
    state: str = Field(default="", max_length=MAX_LEASE_STATE)

    def held_by(self, holder: str, now: datetime) -> bool:
        """Whether `holder` holds it at `now`."""
        return self.holder == holder and now < self.expires_at


class LeasesPort(ABC):
    @abstractmethod
    async def acquire_lease(
        self, name: str, holder: str, now: datetime, ttl: timedelta, state: str = ""
    ) -> Lease:
        """Take `name` for `holder` until `now + ttl` if it is free, lapsed (`expires_at <=
        now`) or already `holder`'s (a renewal: `acquired_at` stays), recording `state`, in one
        atomic step; otherwise change nothing. Returns the lease as it stands after: `holder` is the
        caller's when it got it, another process's when it did not. Bad values (an empty or
        overlong name or holder, a ttl that is not positive) raise at once."""

    @abstractmethod
    async def release_lease(self, name: str, holder: str) -> bool:
        """Give `name` up if `holder` holds it (lapsed or not); whether it did."""

    @abstractmethod
    async def leases(self) -> list[Lease]:
        """Every lease stored, lapsed ones included, by name."""
