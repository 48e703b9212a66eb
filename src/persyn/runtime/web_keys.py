"""The web channel's API keys as every web request checks them (`web/`): a key's hash, the
identity and name of its client, authentication and revocation. Creating, listing and revoking
keys (`persyn web keys`) is `ops/web_keys.py`. Only a key's SHA-256 is stored; the key is printed once.

A key is a client: its id is the speaker id its messages carry on the web channel (service
`web`), so the directory resolves it like any other identity. `--contact` ties the key to
an existing contact of an agent: the identity is attached to that person at creation, so
the contact's history and the key's conversations are one person's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

from persyn.store.base import Identity
from persyn.store.ports.web_keys import WebKey, WebKeysPort

__all__ = [
    "KEY_PREFIX",
    "WEB_SERVICE",
    "authenticate",
    "hash_key",
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


async def authenticate(store: WebKeysPort | None, secret: str) -> WebKey | None:
    """The live key `secret` is, or None (unknown, revoked or malformed; every key, with a
    store that offers no web keys: `store/capabilities.py`)."""
    if store is None or not secret.startswith(KEY_PREFIX) or len(secret) > _MAX_KEY_CHARS:
        return None
    key = await store.web_key_by_hash(hash_key(secret))
    if key is None or key.revoked_at is not None:
        return None
    return key


async def revoked_keys(store: WebKeysPort | None, key_ids: Collection[str]) -> set[str]:
    """Which of `key_ids` no longer work (revoked, or gone): asked while a key's streams are
    open, since `persyn web keys revoke` may run in another process. A deployment has a
    handful of keys, so one read of them all answers for any number of streams."""
    if not key_ids:
        return set()
    if store is None:
        return set(key_ids)
    live = {key.id for key in await store.web_keys() if key.revoked_at is None}
    return {key_id for key_id in key_ids if key_id not in live}
