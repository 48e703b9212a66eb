"""Optional store capabilities (store/capabilities.py): detected, and the runtime degrades
without them (SPEC §2). A store offering only `Store` (here every method of the port handed
to a real SQLite store, the graph withheld) still runs turns: no graph section in the prompt,
no extraction, no graph hook."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.store.base import Store
from persyn.store.capabilities import GraphStore, capability, missing_capabilities
from persyn.store.ports.graph import GraphPort
from persyn.store.sqlite.store import SQLiteStore
from persyn.testing import ADA, run_runtime
from persyn.testing.models import DoubleReply, registered_double


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: CoreOnlyStore, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    method.__name__ = name
    return method


class _CoreOnlyBase(Store):
    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner


# Every abstract method of `Store`, and nothing of the graph.
CoreOnlyStore = type(
    "CoreOnlyStore",
    (_CoreOnlyBase,),
    {name: _delegate(name) for name in sorted(Store.__abstractmethods__)},
)


class Mind:
    def __init__(self) -> None:
        self.tasks: list[str | None] = []
        self.respond_prompts: list[str] = []

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        self.tasks.append(task)
        if task == "respond":
            self.respond_prompts.append(info.instructions or "")
        if task == "decide":
            return DoubleReply(output={"action": "speak", "reason": "asked"})
        return DoubleReply(text="Noted.")


def test_capabilities_are_detected(tmp_path: Path) -> None:
    full = SQLiteStore(tmp_path / "full.db")
    core = CoreOnlyStore(SQLiteStore(tmp_path / "core.db"))
    assert capability(full, GraphPort) is full and capability(full, GraphStore) is full
    assert missing_capabilities(full) == []
    assert capability(core, GraphPort) is None and capability(core, GraphStore) is None
    assert missing_capabilities(core) == ["knowledge graph"]


async def test_a_store_without_the_graph_runs_turns_without_it(tmp_path: Path) -> None:
    mind = Mind()
    store = CoreOnlyStore(SQLiteStore(tmp_path / "core.db"))
    with registered_double("coremind", mind):
        async with run_runtime(
            tmp_path / "home",
            model="test:coremind",
            config="[deliberation]\nenabled = false\n[graph]\nenabled = true\n",
            agent=ADA,
            scheduler=False,
            store=store,
        ) as pilot:
            assert "graph" not in pilot.runtime.jobs.conversation_hook_names()
            await pilot.say("My sister Ann works at Acme.", transmitted=True)
            await pilot.say("Where does Ann work?", transmitted=True)
            for conversation in await pilot.end_conversations(after=timedelta(hours=2)):
                await pilot.runtime.jobs.graph_conversation(ADA.id, conversation.id)  # nothing to do
            # The graph tables exist underneath (SQLite has them); nothing reached them.
            assert await store.inner.graph_stats(ADA.id) == {"entities": 0, "mentions": 0, "relations": 0}
    assert len(mind.respond_prompts) == 2
    assert all("How things relate" not in prompt for prompt in mind.respond_prompts)
