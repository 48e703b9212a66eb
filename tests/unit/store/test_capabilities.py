"""The storage port's required core and its optional capabilities (store/capabilities.py):
detected, and the runtime degrades without them (SPEC §2). A store offering only `Store`
(`persyn.testing.core_store`: every core method handed to a real SQLite store, every
capability withheld) still runs turns: the agent answers from the conversation alone — no
memory, no graph, no goals in the prompt, no close hooks — and `persyn doctor` names what
is missing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.errors import InputError, StoreError
from persyn.ops.doctor.checks import check_capabilities
from persyn.runtime.web_keys import KEY_PREFIX, authenticate, revoked_keys
from persyn.store.base import Store
from persyn.store.capabilities import (
    CAPABILITIES,
    FullStore,
    GraphStore,
    MemoryStore,
    capability,
    command_capability,
    missing_capabilities,
    offered_capabilities,
    require_capability,
)
from persyn.store.ports.graph import GraphPort
from persyn.store.ports.guardrails import GuardrailsPort
from persyn.store.ports.web_keys import WebKeysPort
from persyn.store.sqlite.store import SQLiteStore
from persyn.testing import ADA, run_runtime
from persyn.testing.core_store import core_only_store
from persyn.testing.models import DoubleReply, registered_double

ALL = [
    "autobiographical memory",
    "dialog history",
    "contact directory",
    "knowledge graph",
    "guardrail history",
    "emotion history",
    "artifacts",
    "web keys",
    "channel leases",
    "activity log",
    "consolidation jobs",
    "model-call checkpoints",
    "reminders and goals",
]


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


def test_the_required_core_is_at_most_40_methods_and_the_rest_are_named_capabilities() -> None:
    assert len(Store.__abstractmethods__) <= 40
    assert list(CAPABILITIES) == ALL
    required = set(Store.__abstractmethods__)
    for name, port in CAPABILITIES.items():
        assert port.__abstractmethods__, name
        assert not required & set(port.__abstractmethods__), name  # no method is in both
    # Both built-in backends offer every capability.
    assert issubclass(SQLiteStore, FullStore)
    assert all(issubclass(FullStore, port) for port in CAPABILITIES.values())


def test_capabilities_are_detected(tmp_path: Path) -> None:
    full = SQLiteStore(tmp_path / "full.db")
    core = core_only_store(SQLiteStore(tmp_path / "core.db"))
    assert capability(full, GraphPort) is full and capability(full, GraphStore) is full
    assert missing_capabilities(full) == [] and offered_capabilities(full) == ALL
    assert capability(core, GraphPort) is None and capability(core, GraphStore) is None
    assert capability(core, MemoryStore) is None
    assert missing_capabilities(core) == ALL and offered_capabilities(core) == []


def test_what_needs_a_capability_says_which(tmp_path: Path) -> None:
    core = core_only_store(SQLiteStore(tmp_path / "core.db"))
    with pytest.raises(StoreError, match="this store offers no guardrail history"):
        require_capability(core, GuardrailsPort)
    # An operator's command exits 2 (InputError) naming it.
    with pytest.raises(InputError, match="'reminders and goals' capability is absent"):
        command_capability(core, capability_port("reminders and goals"))
    with pytest.raises(InputError, match="'autobiographical memory' capability is absent"):
        command_capability(core, MemoryStore)


def capability_port(name: str) -> type:
    return CAPABILITIES[name]


def test_doctor_lists_what_is_offered_and_what_is_missing(tmp_path: Path) -> None:
    full = check_capabilities(SQLiteStore(tmp_path / "full.db"))
    assert (full.name, full.ok, full.warning) == ("store capabilities", True, False)
    assert full.detail == f"all offered: {', '.join(ALL)}"
    core = check_capabilities(core_only_store(SQLiteStore(tmp_path / "core.db")))
    assert (core.name, core.ok, core.warning) == ("store capabilities", True, True)
    assert core.detail == f"missing: {', '.join(ALL)}; offered: none"
    assert "the SQLite and PostgreSQL backends offer every one" in core.fix


async def test_without_web_keys_every_key_is_refused() -> None:
    assert await authenticate(None, KEY_PREFIX + "x" * 43) is None
    assert await revoked_keys(None, ["01J0000000000000000000000A"]) == {"01J0000000000000000000000A"}
    assert capability(object(), WebKeysPort) is None


async def test_a_store_with_only_the_core_runs_turns(tmp_path: Path) -> None:
    mind = Mind()
    inner = SQLiteStore(tmp_path / "core.db")
    store = core_only_store(inner)
    with registered_double("coremind", mind):
        async with run_runtime(
            tmp_path / "home",
            model="test:coremind",
            config="[deliberation]\nenabled = false\n[graph]\nenabled = true\n",
            agent=ADA,
            scheduler=False,
            store=store,
        ) as pilot:
            assert missing_capabilities(pilot.store) == ALL
            # No close hook needs anything the store lacks: none is registered.
            assert pilot.runtime.jobs.conversation_hook_names() == []
            await pilot.say("My sister Ann works at Acme.", transmitted=True)
            await pilot.say("Where does Ann work?", transmitted=True)
            ended = await pilot.end_conversations(after=timedelta(hours=2))
            for conversation in ended:
                await pilot.runtime.jobs.graph_conversation(ADA.id, conversation.id)  # nothing to do
                await pilot.runtime.jobs.consolidate_conversation(ADA.id, conversation.id)  # nor here
            assert await pilot.runtime.autonomy.fire_due() == 0  # no reminders, no runs
            # The tables exist underneath (SQLite has them); nothing reached them.
            assert await inner.graph_stats(ADA.id) == {"entities": 0, "mentions": 0, "relations": 0}
            assert await inner.count_records(ADA.id) == 0
            assert await inner.list_reminders(ADA.id) == []
            assert await inner.recent_emotions(ADA.id, 5) == []
            # What was said is stored through the core, each reply with it.
            said = await inner.recent_messages(ADA.id, ended[0].id, 10)
            assert [m.text for m in said] == [
                "My sister Ann works at Acme.",
                "Noted.",
                "Where does Ann work?",
                "Noted.",
            ]
    assert len(mind.respond_prompts) == 2
    for prompt in mind.respond_prompts:
        assert "How things relate" not in prompt  # no graph section
        assert "What I remember" not in prompt  # no memory section
    # No consolidation, observation, dossier or emotion call: nothing to keep them in.
    assert not {"summarize", "rate", "extract", "dossier", "classify"} & set(mind.tasks)


def test_the_core_only_store_is_a_store_and_nothing_more(tmp_path: Path) -> None:
    store = core_only_store(SQLiteStore(tmp_path / "core.db"))
    assert isinstance(store, Store)
    assert not any(isinstance(store, port) for port in CAPABILITIES.values())
