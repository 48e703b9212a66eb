"""Web API keys (`store/ports/web_keys.py`), as every store must keep them: found by hash only,
listed oldest first, revoked once (the first revocation time stays), a hash never twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from persyn.core.errors import StoreError
from persyn.core.ids import new_id
from persyn.store.capabilities import FullStore
from persyn.store.ports.web_keys import WebKey
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)


def _key(name: str, digest: str, at: datetime, **extra: object) -> WebKey:
    return WebKey.model_validate(
        {"id": new_id(at), "name": name, "key_hash": digest * 64, "created_at": at, **extra}
    )


class WebKeysContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_keys_are_found_by_hash_listed_in_order_and_revoked_once(self, store: FullStore) -> None:
        laptop = await store.add_web_key(_key("laptop", "a", T0))
        ops = await store.add_web_key(_key("ops", "b", T0 + timedelta(minutes=1), operator=True))
        assert await store.web_key_by_hash("a" * 64) == laptop
        assert await store.web_key_by_hash("c" * 64) is None
        assert [k.name for k in await store.web_keys()] == ["laptop", "ops"]
        assert (await store.web_keys())[1].operator is True

        later = T0 + timedelta(hours=1)
        revoked = await store.revoke_web_key(laptop.id, later)
        assert revoked is not None and revoked.revoked_at == later
        again = await store.revoke_web_key(laptop.id, later + timedelta(hours=1))
        assert again is not None and again.revoked_at == later  # the first revocation stays
        assert await store.revoke_web_key(new_id(T0), later) is None
        found = await store.web_key_by_hash("a" * 64)
        assert found is not None and found.revoked_at == later
        assert (await store.web_key_by_hash("b" * 64)) == ops

    async def test_a_hash_is_never_stored_twice(self, store: FullStore) -> None:
        await store.add_web_key(_key("one", "d", T0))
        with pytest.raises(StoreError):
            await store.add_web_key(_key("two", "d", T0))
        assert [k.name for k in await store.web_keys()] == ["one"]
