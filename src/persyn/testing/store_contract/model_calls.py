"""Model-call checkpoints (`store/ports/model_calls.py`), as every store must keep them: found by
key, written in the order asked (a write asked for later commits after), the first response
kept, a bad key refused at once, old ones purged by age."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from persyn.store.capabilities import FullStore
from persyn.testing.store_contract.base import Contract

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
KEY = "01KBWORKFLOW0000000000000:1/0"


class ModelCallsContract(Contract):
    """The tests of this module, run on the store the `store_factory` fixture opens (`base.Contract`)."""

    async def test_a_call_is_found_by_its_key_and_keeps_its_first_response(self, store: FullStore) -> None:
        assert await store.model_call(KEY) is None
        first = asyncio.ensure_future(
            store.save_model_call(KEY, "01KBWORKFLOW0000000000000", '[{"first": 1}]', T0)
        )
        await store.save_model_call(KEY, "01KBWORKFLOW0000000000000", '[{"second": 2}]', T0)
        assert first.done()  # queued first, so committed first
        assert await store.model_call(KEY) == '[{"first": 1}]'
        assert await store.model_call("x" * 301) is None  # longer than any key that can be stored

    async def test_old_calls_are_purged_and_new_ones_kept(self, store: FullStore) -> None:
        await store.save_model_call(KEY, "w", "[1]", T0)
        await store.save_model_call(KEY + "1", "w", "[2]", T0 + timedelta(days=8))
        assert await store.purge_model_calls(T0 + timedelta(days=1)) == 1
        assert await store.model_call(KEY) is None
        assert await store.model_call(KEY + "1") == "[2]"

    async def test_a_bad_checkpoint_is_refused_before_anything_is_written(self, store: FullStore) -> None:
        with pytest.raises(ValidationError, match="call_key"):
            store.save_model_call("", "w", "[1]", T0)
        with pytest.raises(ValidationError, match="response"):
            store.save_model_call(KEY, "w", "", T0)
