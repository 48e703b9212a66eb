"""The web channel's API keys: `persyn web keys create/list/revoke` and the check every web
request passes (`web/`). Only a key's SHA-256 is stored; the key is printed once.

A key is a client: its id is the speaker id its messages carry on the web channel (service
`web`), so the directory resolves it like any other identity. `--contact` ties the key to
an existing contact of an agent: the identity is attached to that person at creation, so
the contact's history and the key's conversations are one person's.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Collection
from datetime import datetime

from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import is_id, new_id
from persyn.ops.history import opened_store
from persyn.store import Store
from persyn.store.base import Identity
from persyn.store.ports.web_keys import WebKey
from persyn.tools.builtin._contacts import named_contact

__all__ = [
    "KEY_PREFIX",
    "WEB_SERVICE",
    "authenticate",
    "create_key",
    "has_keys",
    "hash_key",
    "list_keys",
    "revoke_key",
    "revoked_keys",
    "web_identity",
    "web_speaker_name",
]

WEB_SERVICE = "web"
KEY_PREFIX = "psk-"
_MAX_KEY_CHARS = 200  # anything longer is not one of ours: refused before hashing


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def web_identity(key_id: str, user: str | None = None) -> Identity:
    """The directory identity of a key's client (with `user`: one of several people behind
    one key, as an OpenAI client's `user` field names them). The channel is the key, so one
    key and one agent are one conversation."""
    speaker = key_id if not user else f"{key_id}:{user}"
    return Identity(service=WEB_SERVICE, channel=key_id, speaker_id=speaker)


def web_speaker_name(key: WebKey, user: str | None = None) -> str:
    """The name a key's client goes by: the key's name, or with `user` that person's name
    within the key, "user (key name)". A `user` is whoever the client says is behind *this*
    key, never a claim on someone else's contact: "alice" from mallory's key is "alice
    (mallory)", a contact of its own that a name lookup (`contacts show alice`, `get_facts`,
    `message_contact`) never confuses with the alice the agent already knew."""
    return key.name if not user else f"{user} ({key.name})"


async def create_key(
    settings: Settings,
    name: str,
    now: datetime,
    *,
    operator: bool = False,
    agent: AgentConfig | None = None,
    contact: str | None = None,
) -> tuple[WebKey, str]:
    """A new key and its secret (shown once). `contact` (a contact of `agent`) is who the
    key speaks as."""
    name = name.strip()
    if not name or len(name) > 200:
        raise InputError(f"invalid key name {name!r}: use 1 to 200 characters")
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key_id = new_id(now)
    async with opened_store(settings) as store:
        contact_id: str | None = None
        if contact is not None:
            if agent is None:
                raise InputError("--contact needs the agent whose contact it is (--agent)")
            person = await named_contact(store, agent.id, agent.name, contact)
            await store.attach_identity(agent.id, person.id, web_identity(key_id))
            contact_id = person.id
        key = WebKey(
            id=key_id,
            name=name,
            key_hash=hash_key(secret),
            contact_id=contact_id,
            operator=operator,
            created_at=now,
        )
        await store.add_web_key(key)
    return key, secret


async def list_keys(settings: Settings) -> list[WebKey]:
    async with opened_store(settings) as store:
        return await store.web_keys()


async def has_keys(settings: Settings) -> bool:
    """Whether any key that still works exists (a non-loopback bind needs one)."""
    return any(k.revoked_at is None for k in await list_keys(settings))


async def revoke_key(settings: Settings, key_id: str, now: datetime) -> WebKey:
    async with opened_store(settings) as store:
        wanted = key_id.strip().upper()
        if not is_id(wanted):
            named = [k for k in await store.web_keys() if k.name == key_id.strip()]
            if len(named) != 1:
                raise InputError(
                    f"no single web key is named {key_id!r} (see `persyn web keys list`; give its id)"
                )
            wanted = named[0].id
        revoked = await store.revoke_web_key(wanted, now)
    if revoked is None:
        raise InputError(f"no web key {key_id!r} (see `persyn web keys list`)")
    return revoked


async def authenticate(store: Store, secret: str) -> WebKey | None:
    """The live key `secret` is, or None (unknown, revoked or malformed)."""
    if not secret.startswith(KEY_PREFIX) or len(secret) > _MAX_KEY_CHARS:
        return None
    key = await store.web_key_by_hash(hash_key(secret))
    if key is None or key.revoked_at is not None:
        return None
    return key


async def revoked_keys(store: Store, key_ids: Collection[str]) -> set[str]:
    """Which of `key_ids` no longer work (revoked, or gone): asked while a key's streams are
    open, since `persyn web keys revoke` may run in another process. A deployment has a
    handful of keys, so one read of them all answers for any number of streams."""
    if not key_ids:
        return set()
    live = {key.id for key in await store.web_keys() if key.revoked_at is None}
    return {key_id for key_id in key_ids if key_id not in live}
