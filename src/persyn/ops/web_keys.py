"""`persyn web keys create | list | revoke`: the operator's side of the web channel's API keys
(`runtime/web_keys.py` is what every web request checks). A key is printed once, at creation."""

from __future__ import annotations

import secrets
from datetime import datetime

from persyn.core.config import AgentConfig, Settings
from persyn.core.errors import InputError
from persyn.core.ids import is_id, new_id
from persyn.ops.history import opened_capability, opened_store
from persyn.runtime.web_keys import KEY_PREFIX, hash_key, web_identity
from persyn.store.capabilities import ContactsStore, command_capability
from persyn.store.ports.web_keys import WebKey, WebKeysPort
from persyn.tools.builtin._contacts import named_contact

__all__ = ["create_key", "has_keys", "list_keys", "revoke_key"]


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
        keys = command_capability(store, WebKeysPort)
        contact_id: str | None = None
        if contact is not None:
            if agent is None:
                raise InputError("--contact needs the agent whose contact it is (--agent)")
            directory = command_capability(store, ContactsStore)
            person = await named_contact(directory, agent.id, agent.name, contact)
            await directory.attach_identity(agent.id, person.id, web_identity(key_id))
            contact_id = person.id
        key = WebKey(
            id=key_id,
            name=name,
            key_hash=hash_key(secret),
            contact_id=contact_id,
            operator=operator,
            created_at=now,
        )
        await keys.add_web_key(key)
    return key, secret


async def list_keys(settings: Settings) -> list[WebKey]:
    async with opened_capability(settings, WebKeysPort) as store:
        return await store.web_keys()


async def has_keys(settings: Settings) -> bool:
    """Whether any key that still works exists (a non-loopback bind needs one)."""
    return any(k.revoked_at is None for k in await list_keys(settings))


async def revoke_key(settings: Settings, key_id: str, now: datetime) -> WebKey:
    async with opened_capability(settings, WebKeysPort) as store:
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
