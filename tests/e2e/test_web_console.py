"""The web console (issue 40) against `persyn run` with a scripted model, over real HTTP on
loopback and in Debian's Chromium: every console endpoint is an operator key's alone (403 for
any other key, walked over the one route list the app serves), documented in /openapi.json;
the usage figures are the ledger's (equal to `persyn usage --json` for the same range), the
memory search and the recall tester return what `persyn memory recall` does, a turn's trace is
`persyn traces show`'s spans; and in the browser an operator chats, finds an imported memory,
runs the recall tester, sees the usage chart and opens a turn's waterfall, while a client key
sees no console at all. Screenshots of each view are kept under the test's tmp directory."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser import WAIT_MS, log_in, logged_in
from sse_reader import SseReader
from web_daemon import GARDEN, HELLO, LISBON, REMINDED, SILENCE, WebDaemon, rules, start

import needs
from persyn.core.ids import new_id
from persyn.web.console import ROUTES

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXPLAINED = ["similarity", "keyword", "date", "recency", "importance", "participants", "cosine"]
LIGHTHOUSE = "Sam told me about the lighthouse keeper in Brittany who painted the stairs blue."


def _memory(ref: str, summary: str, **more: Any) -> str:
    base = {"time": "2026-11-20T10:00:00Z", "channel": "terminal:terminal", "summary": summary, "ref": ref}
    return json.dumps({**base, **more})


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDaemon]:
    root = tmp_path_factory.mktemp("console")
    daemon = start(root, keys={"ops": True, "alice": False}, PERSYN_TRACING__ENABLED="true")
    # The emotion classifier's answer, so each exchange leaves a state (SPEC §4.9).
    script = json.loads(daemon.rules.read_text())
    script.append(
        {
            "task": "classify",
            "match": "^The exchange:",
            "output": {"curious": 0.6, "engaged": 0.3, "calm": 0.1},
        }
    )
    daemon.rules.write_text(json.dumps(script))
    history = root / "history.jsonl"
    history.write_text(
        "\n".join(
            [
                _memory("light", LIGHTHOUSE, participants=["Sam"], importance=8),
                _memory("bread", "We baked sourdough bread together on Sunday.", participants=["Sam"]),
                _memory(
                    "news",
                    "The town council voted for a new bicycle lane.",
                    channel="slack:general",
                    sensitivity="public",
                    time="2026-11-25T09:00:00Z",
                ),
            ]
        )
        + "\n"
    )
    imported = daemon.persyn.run("memory", "import", str(history))
    assert imported.returncode == 0, imported.stderr
    asyncio.run(_learn(daemon))
    asyncio.run(_guard(daemon))
    # A turn of alice's: a model call in the ledger, a trace in the span store.
    with _http(daemon, "alice") as alice:
        said = alice.post("/v1/agents/Ada/events", json={"text": "hello, I am Alice"})
        assert said.status_code == 202, said.text
        event_id = said.json()["event_id"]
        for _ in range(600):
            if alice.get(f"/v1/events/{event_id}").json()["status"] != "pending":
                break
            time.sleep(0.1)
        # The exchange's emotion is classified after it (its own workflow): wait for its call,
        # so the ledger holds the turn's calls whole before the tests compare views of it.
        with _http(daemon, "ops") as ops:
            for _ in range(600):
                rows = ops.get("/v1/console/usage", params={"from": "1d"}).json()["total"]["rows"]
                if "emotion" in {r["key"] for r in rows}:
                    break
                time.sleep(0.1)
    daemon.key_ids["turn"] = event_id
    yield daemon
    daemon.stop()


async def _learn(web: WebDaemon) -> None:
    """What graph extraction would learn (its scripted model extracts nothing): a public fact
    on the terminal, which the lighthouse memory names, and a confidence in a DM, which it
    may not show."""
    from persyn.core.config import load_settings
    from persyn.ops.history import opened_capability
    from persyn.store.ports.graph import GraphPort
    from persyn.store.ports.graph_rows import FactSource, RelationFact

    settings = load_settings(web.persyn.home, environ=web.persyn.environ())
    agent = settings.agents[0]
    now = datetime.now(UTC)
    async with opened_capability(settings, GraphPort) as store:
        for channel, sensitivity, fact in (
            (
                "terminal:terminal",
                "public",
                RelationFact(source="Brittany", relation="is in", target="France"),
            ),
            (
                "slack:dm-sam",
                "confidential",
                RelationFact(source="Brittany", relation="hides", target="Sam's boat"),
            ),
        ):
            source = FactSource(channel=channel, sensitivity=sensitivity, learned_at=now)  # type: ignore[arg-type]
            await store.upsert_graph(agent.id, source, [], [fact])


STRANGER = new_id()  # a person a guardrail blocked (nobody the tests speak as)


async def _guard(web: WebDaemon) -> None:
    """Two guardrail findings as the evaluation records them: a spend spike one stranger caused
    (blocks that person for an hour) and an agent-wide one (autonomy; a notice, no block)."""
    from persyn.core.config import load_settings
    from persyn.ops.history import opened_capability
    from persyn.store.ports.guardrails import GuardrailEvent, GuardrailsPort

    settings = load_settings(web.persyn.home, environ=web.persyn.environ())
    agent = settings.agents[0]
    now = datetime.now(UTC)
    async with opened_capability(settings, GuardrailsPort) as store:
        await store.add_guardrail_event(
            GuardrailEvent(
                id=new_id(now),
                agent_id=agent.id,
                guardrail="spend-spike",
                subject_kind="person",
                subject=STRANGER,
                person_id=STRANGER,
                reason="342k tokens in 60 minutes from one key",
                score=1.0,
                actions=("block",),
                detected_at=now,
                blocked_until=now + timedelta(hours=1),
            )
        )
        await store.add_guardrail_event(
            GuardrailEvent(
                id=new_id(now),
                agent_id=agent.id,
                guardrail="autonomy-spend",
                subject_kind="agent",
                subject="",
                reason="the heartbeat spent its day's budget by noon",
                score=0.8,
                actions=("notify",),
                detected_at=now,
            )
        )


def _http(web: WebDaemon, who: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {web.keys[who]}"} if who else {}
    return httpx.Client(base_url=web.url, headers=headers, timeout=60)


def _concrete(path: str) -> str:
    return re.sub(r"{\w+}", new_id(), path)


def test_every_console_endpoint_is_an_operator_keys_alone_and_documented(web: WebDaemon) -> None:
    assert len(ROUTES) >= 7
    documented = httpx.get(web.url + "openapi.json", timeout=60).json()["paths"]
    with _http(web, "alice") as alice, _http(web, None) as nobody, _http(web, "ops") as ops:
        for route in ROUTES:
            path = _concrete(route.path)
            body = {"query": "lighthouse"} if route.method == "POST" else None
            denied = alice.request(route.method, path, json=body)
            assert denied.status_code == 403, (route.path, denied.text)
            assert "not an operator key" in denied.json()["error"]["message"]
            assert nobody.request(route.method, path, json=body).status_code == 401, route.path
            allowed = ops.request(route.method, path, json=body)
            assert allowed.status_code in (200, 400, 404), (route.path, allowed.text)  # unknown ids
            operation = documented[route.path][route.method.lower()]
            assert "403" in operation["responses"] and "operator keys only" in operation["summary"]
        # What a client key is refused, it is refused before its body is even read.
        huge = alice.post("/v1/console/recall", content=b"x" * 10_000_000)
        assert huge.status_code == 403


def test_usage_is_the_ledger_equal_to_persyn_usage_for_the_same_range(web: WebDaemon) -> None:
    since = (datetime.now(UTC) - timedelta(days=2)).replace(microsecond=0).isoformat()
    with _http(web, "ops") as ops:
        for by in ("stage", "model", "trigger"):
            got = ops.get("/v1/console/usage", params={"from": since, "by": by, "bucket": "day"})
            assert got.status_code == 200, got.text
            data = got.json()
            printed = web.persyn.run("usage", "--since", since, "--by", by, "--json")
            assert printed.returncode == 0, printed.stderr
            assert data["total"] == json.loads(printed.stdout)
            assert data["total"]["records"] >= 1
            # The buckets cut the same records: their sums are the total's.
            buckets = data["buckets"]
            assert sum(b["report"]["total"]["calls"] for b in buckets) == data["total"]["total"]["calls"]
            today = datetime.now(UTC).strftime("%Y-%m-%dT00:00:00Z")
            assert buckets[-1]["start"] == today
        # Every call so far came of a person's message (the turns and what followed them).
        triggers = {r["key"] for r in data["total"]["rows"]}
        assert "message" in triggers and triggers <= {"message", "emotion", "extraction"}, triggers
        data = ops.get("/v1/console/usage", params={"from": since, "by": "model"}).json()
        respond = {r["key"]: r for r in data["total"]["rows"]}
        hourly = ops.get("/v1/console/usage", params={"from": since, "bucket": "hour"}).json()
        assert [b["start"][14:] for b in hourly["buckets"]] == ["00:00Z"] * len(hourly["buckets"])
        assert sum(b["report"]["total"]["input_tokens"] for b in hourly["buckets"]) == sum(
            r["input_tokens"] for r in respond.values()
        )
        # `to` before every record: nothing; bad parameters: a 400 naming them.
        empty = ops.get("/v1/console/usage", params={"from": since, "to": since}).json()
        assert empty["total"]["records"] == 0 and empty["buckets"] == []
        for params, name in (
            ({"by": "mood"}, "by"),
            ({"bucket": "week"}, "bucket"),
            ({"from": "soon"}, "from"),
        ):
            bad = ops.get("/v1/console/usage", params=params)
            assert bad.status_code == 400 and name in bad.json()["error"]["message"], bad.text


def test_memories_are_searched_filtered_paged_and_opened(web: WebDaemon) -> None:
    with _http(web, "ops") as ops:

        def find(**params: str) -> list[str]:
            got = ops.get("/v1/console/memories", params=params)
            assert got.status_code == 200, got.text
            return [m["ref"] for m in got.json()["memories"]]

        assert find(q="lighthouse Brittany") == ["light"]
        newest_first = find()
        assert newest_first[0] == "news" and sorted(newest_first[1:]) == ["bread", "light"]
        assert find(sensitivity="public") == ["news"]
        assert find(channel="slack:general") == ["news"]
        assert find(min_importance="8") == ["light"]
        assert sorted(find(person="Sam")) == ["bread", "light"]
        assert find(**{"from": "2026-11-24T00:00:00", "to": "2026-11-26"}) == ["news"]
        assert find(q="bread", sensitivity="public") == []
        # Paging: one at a time, each page after the last, until there is no cursor.
        seen: list[str] = []
        cursor: str | None = None
        while True:
            params = {"limit": "1", **({"cursor": cursor} if cursor else {})}
            page = ops.get("/v1/console/memories", params=params).json()
            seen += [m["ref"] for m in page["memories"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == ["bread", "light", "news"] and len(seen) == 3
        (light,) = ops.get("/v1/console/memories", params={"q": "lighthouse"}).json()["memories"]
        shown = ops.get(f"/v1/console/memories/{light['id']}").json()
        assert shown["memory"]["summary"] == LIGHTHOUSE and shown["memory"]["importance"] == 8
        assert shown["memory"]["kind"] == "imported" and shown["memory"]["ref"] == "light"
        # Its graph neighbours: what it names, read where it may surface (not the DM's secret).
        graph = shown["graph"]
        assert [e["name"] for e in graph["entities"]] == ["Brittany"]
        assert [r["line"] for r in graph["relations"]] == ["Brittany —is in→ France"]
        assert graph["memories"] == []  # no other memory names Brittany
        for params, name in (
            ({"cursor": "nope"}, "cursor"),
            ({"sensitivity": "secret"}, "sensitivity"),
            ({"min_importance": "11"}, "min_importance"),
            ({"person": "Nobody At All"}, "Nobody At All"),
        ):
            bad = ops.get("/v1/console/memories", params=params)
            assert bad.status_code == 400 and name in bad.json()["error"]["message"], bad.text
        assert ops.get(f"/v1/console/memories/{new_id()}").status_code == 400


def test_the_recall_tester_returns_what_persyn_memory_recall_does(web: WebDaemon) -> None:
    with _http(web, "ops") as ops:
        got = ops.post("/v1/console/recall", json={"query": "the lighthouse keeper", "participants": ["Sam"]})
        assert got.status_code == 200, got.text
        data = got.json()
    printed = web.persyn.run("memory", "recall", "the lighthouse keeper", "-p", "Sam", "--explain", "--json")
    assert printed.returncode == 0, printed.stderr
    cli: list[dict[str, Any]] = json.loads(printed.stdout)
    cli_records = [row for row in cli if not row.get("said")]
    # What was said comes as the CLI ranks it in: the same lines, by message id.
    assert [s["message_id"] for s in data["said"]] == [row["id"] for row in cli if row.get("said")]
    assert [r["memory"]["id"] for r in data["results"]] == [r["id"] for r in cli_records]
    assert data["results"][0]["memory"]["ref"] == "light"
    # The same scores, but for the moments the two were asked at (recency moves by seconds).
    assert [round(r["score"], 3) for r in data["results"]] == [round(r["score"], 3) for r in cli_records]
    # Each result's score parts are `--explain`'s, part for part, in its order (the moments
    # differ by seconds: recency alone may move in its last places).
    for got_row, cli_row in zip(data["results"], cli_records, strict=True):
        assert list(got_row["parts"]) == list(cli_row["explain"])
        for name, value in cli_row["explain"].items():
            assert got_row["parts"][name] == pytest.approx(value, abs=1e-3), name
    light = data["results"][0]["parts"]
    assert light["participants"] == 1.0 and light["importance"] > 0 and light["date"] is None
    assert light["keyword"] > 0 and light["cosine"] is not None
    assert data["considered"] >= len(data["results"]) and data["budget_tokens"] > 0
    with _http(web, "ops") as ops:
        for body, field in (({"query": ""}, "query"), ({"query": "x", "extra": 1}, "extra")):
            bad = ops.post("/v1/console/recall", json=body)
            assert bad.status_code == 400 and field in bad.json()["error"]["message"], bad.text


def test_a_turns_trace_is_the_span_store_persyn_traces_shows(web: WebDaemon) -> None:
    event_id = web.key_ids["turn"]
    with _http(web, "ops") as ops:
        listed = ops.get("/v1/console/traces").json()
        assert listed["enabled"] is True
        assert event_id in [t["event_id"] for t in listed["traces"]]
        got = ops.get(f"/v1/console/traces/{event_id}")
        assert got.status_code == 200, got.text
        rows = got.json()["spans"]
        assert ops.get("/v1/console/traces/not-an-id").status_code == 400
    printed = web.persyn.run("traces", "show", event_id, "--json")
    assert printed.returncode == 0, printed.stderr
    assert [r["span_id"] for r in rows] == [s["span_id"] for s in json.loads(printed.stdout)]
    assert rows[0]["depth"] == 0 and rows[0]["offset_ms"] == 0
    assert all(r["offset_ms"] >= 0 and r["duration_ms"] >= 0 for r in rows)
    respond = [r for r in rows if r["kind"] == "model" and r["input_tokens"] == 40]
    assert respond and respond[0]["output_tokens"] == 9 and respond[0]["depth"] >= 1


def test_a_turns_critiques_and_decision_are_one_request_away(web: WebDaemon) -> None:
    # Two conversations: a decision sees its dialog, and Lisbon's rule would answer the garden.
    ids: dict[str, str] = {}
    for who, text, done in (
        ("alice", "Remember our trip to Lisbon?", "deliberation_done"),
        ("ops", GARDEN, "notice"),
    ):
        stream = SseReader(web.url + "v1/agents/Ada/stream", web.keys[who])
        try:
            with _http(web, who) as http:
                ids[who] = http.post("/v1/agents/Ada/events", json={"text": text}).json()["event_id"]
            assert stream.wait(
                lambda events, done=done, wanted=ids[who]: any(
                    k == done and d["event_id"] == wanted for k, d in events
                ),
                timeout=120,
            ), stream.events
        finally:
            stream.close()
    lisbon_id, garden_id = ids["alice"], ids["ops"]
    with _http(web, "ops") as ops, _http(web, "alice") as alice:
        assert alice.get(f"/v1/console/turns/{lisbon_id}").status_code == 403
        revised = ops.get(f"/v1/console/turns/{lisbon_id}").json()
        silent = ops.get(f"/v1/console/turns/{garden_id}").json()
        assert ops.get(f"/v1/console/turns/{new_id()}").status_code == 404
        assert ops.get("/v1/console/turns/nope").status_code == 400
    objections = [o for c in revised["deliberation"]["critiques"] for o in c.get("objections") or []]
    assert {o["kind"] for o in objections} == {"confabulation"}
    assert (
        revised["ended"] == {"transmitted": True, "text": LISBON, "reason": None}
        or revised["ended"]["text"] == LISBON
    )
    assert silent["ended"]["transmitted"] is False and SILENCE in silent["ended"]["reason"]
    assert silent["deliberation"]["decision"]["action"] == "silent"


def test_the_life_view_shows_the_heartbeat_reminders_and_goals(web: WebDaemon) -> None:
    with _http(web, "ops") as ops:
        data = ops.get("/v1/console/life").json()
    assert data["agent"]["name"] == "Ada"
    assert data["heartbeat"]["daily_token_budget"] > 0
    assert data["heartbeat"]["asleep"] is False and data["heartbeat"]["next_fire_at"]
    assert isinstance(data["reminders"], list) and isinstance(data["goals"], list)
    # Every exchange leaves an emotional state (the scripted emotion stage ran for each turn).
    assert data["emotions"], data
    assert all(r["top"] in r["distribution"] for r in data["emotions"])
    assert [r["at"] for r in data["emotions"]] == sorted(r["at"] for r in data["emotions"])
    # Guardrail findings and the blocks in force, each with its scope: one stranger, or everyone.
    scopes = {g["guardrail"]: g["scope"] for g in data["guardrail_findings"]}
    assert scopes == {"spend-spike": f"person {STRANGER}", "autonomy-spend": "agent"}
    assert [(b["guardrail"], b["scope"]) for b in data["guardrail_blocks"]] == [
        ("spend-spike", f"person {STRANGER}")
    ]
    with _http(web, "ops") as ops:
        links = ops.get("/v1/console/channels").json()["channels"]
    # The surfaces `persyn run` attached here, each connected (a network's states: test_irc).
    assert {(c["service"], c["state"]) for c in links} >= {("web", "connected")}


async def _observe(web: WebDaemon, person_id: str, kind: str, value: str) -> None:
    """An observation as the extraction job stores one (its scripted model extracts none)."""
    from persyn.core.config import load_settings
    from persyn.ops.history import opened_capability
    from persyn.store.ports.memory import MemoryPort, Observation

    settings = load_settings(web.persyn.home, environ=web.persyn.environ())
    agent = settings.agents[0]
    now = datetime.now(UTC)
    observation = Observation(
        id=new_id(now), agent_id=agent.id, subject_id=person_id, kind=kind, value=value, observed_at=now
    )
    async with opened_capability(settings, MemoryPort) as store:
        await store.add_observation(observation, "added", "said so on the terminal")


def test_a_persons_page_shows_what_the_agent_observed_as_persyn_people_does(web: WebDaemon) -> None:
    with _http(web, "ops") as ops:
        contacts = ops.get("/v1/agents/Ada/contacts").json()["contacts"]
        (sam,) = [c for c in contacts if c["person"]["display_name"] == "Sam"]
        person_id = sam["person"]["id"]
        asyncio.run(_observe(web, person_id, "occupation", "keeps bees on the roof"))
        got = ops.get(f"/v1/console/people/{person_id}")
        assert got.status_code == 200, got.text
        page = got.json()
        assert ops.get(f"/v1/console/people/{new_id()}").status_code in (400, 404)
    printed = web.persyn.run("people", "observations", person_id, "--history", "--json")
    assert printed.returncode == 0, printed.stderr
    cli = json.loads(printed.stdout)
    assert page["person"]["display_name"] == "Sam"
    assert [(o["kind"], o["value"]) for o in page["observations"]] == [
        ("occupation", "keeps bees on the roof")
    ]
    assert [o["id"] for o in page["observations"]] == [o["id"] for o in cli["observations"]]
    assert (
        [(c["action"], c["reason"]) for c in page["changes"]]
        == [(c["action"], c["reason"]) for c in cli["history"]]
        == [("added", "said so on the terminal")]
    )
    assert page["dossier"] is None


def test_operator_actions_need_confirming_are_logged_and_are_an_operators_alone(
    web: WebDaemon, tmp_path: Path
) -> None:
    extra = tmp_path / "extra.jsonl"
    extra.write_text(_memory("spare", "The spare key is under the blue flowerpot.") + "\n")
    assert web.persyn.run("memory", "import", str(extra)).returncode == 0
    with _http(web, "ops") as ops, _http(web, "alice") as alice:
        (spare,) = ops.get("/v1/console/memories", params={"q": "flowerpot"}).json()["memories"]
        forget = {"action": "forget_memory", "target": spare["id"], "confirm": True}
        assert alice.post("/v1/console/actions", json=forget).status_code == 403
        for body, name in (
            ({**forget, "confirm": False}, "confirm"),
            ({"action": "forget_memory", "target": spare["id"]}, "confirm"),
            ({**forget, "action": "reset_everything"}, "action"),
            ({"action": "forget_memory", "confirm": True}, "target"),
            ({**forget, "action": "pause_heartbeat"}, "target"),
            ({**forget, "target": new_id()}, "memory"),
        ):
            bad = ops.post("/v1/console/actions", json=body)
            assert bad.status_code == 400 and name in bad.json()["error"]["message"], (body, bad.text)
        assert ops.get("/v1/console/memories", params={"q": "flowerpot"}).json()["memories"]  # still there
        done = ops.post("/v1/console/actions", json=forget)
        assert done.status_code == 200, done.text
        assert done.json()["outcome"].endswith("(by the operator, key 'ops')")
        assert ops.get("/v1/console/memories", params={"q": "flowerpot"}).json()["memories"] == []
        paused = ops.post("/v1/console/actions", json={"action": "pause_heartbeat", "confirm": True})
        assert paused.status_code == 200, paused.text
        assert ops.get("/v1/console/life").json()["heartbeat"]["asleep"] is True
        resumed = ops.post("/v1/console/actions", json={"action": "resume_heartbeat", "confirm": True})
        assert resumed.status_code == 200, resumed.text
        life = ops.get("/v1/console/life").json()
    assert life["heartbeat"]["asleep"] is False
    # In the activity log `persyn activity` prints, and in the Life view's list of runs.
    printed = web.persyn.run("activity", "--json")
    assert printed.returncode == 0, printed.stderr
    logged = [e for e in json.loads(printed.stdout) if e["kind"] == "operator"]
    assert [e["objective"] for e in logged[:3]] == [
        "resume heartbeat",
        "pause heartbeat",
        f"forget memory {spare['id']}",
    ]
    assert "operator" in [r["kind"] for r in life["heartbeat"]["runs"]]


@pytest.mark.skipif(shutil.which("chromium") is None, reason=needs.reason("Debian's chromium"))
def test_the_console_in_chromium(web: WebDaemon, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    shots = tmp_path / "screenshots"
    shots.mkdir()
    print(f"\nscreenshots: {shots}")
    with logged_in(web.url, web.keys["ops"], viewport={"width": 1100, "height": 800}) as page:
        # Chat: the answer arrives, with a link to its trace.
        page.get_by_label("Message").fill("hello from the console")
        page.get_by_label("Message").press("Enter")
        answer = page.locator(".msg.agent:not(.history)").last
        expect(answer.locator(".body")).to_have_text(HELLO)
        expect(answer.get_by_role("link", name="trace of this answer")).to_be_visible()
        page.screenshot(path=str(shots / "chat.png"), full_page=True)

        # Memory: search finds the imported memory; it opens; the recall tester finds it.
        page.get_by_role("button", name="Memory").click()
        page.get_by_label("Search").fill("lighthouse")
        page.get_by_role("button", name="Find").click()
        found = page.locator("#memories li a")
        expect(found).to_have_count(1)
        expect(found.first).to_have_text(LIGHTHOUSE)
        found.first.click()
        expect(page.locator("#memory .summary")).to_have_text(LIGHTHOUSE)
        expect(page.locator("#memory table")).to_contain_text("imported")
        expect(page.get_by_role("region", name="Graph neighbours")).to_contain_text("Brittany —is in→ France")
        expect(page.locator("#memory-graph")).not_to_contain_text("boat")
        page.get_by_label("Question").fill("the lighthouse keeper")
        page.get_by_label("Participants").fill("Sam")
        page.get_by_role("button", name="Recall").click()
        expect(page.locator("#recall-results table tr").nth(1)).to_contain_text(LIGHTHOUSE)
        # Each result's score parts, as `--explain` names them; "-" where one is not counted.
        headers = page.locator("#recall-results table tr").first.locator("th")
        expect(headers).to_have_text(["memory", "score", "band", *EXPLAINED, "tokens"])
        first_row = page.locator("#recall-results table tr").nth(1).locator("td")
        expect(first_row.nth(5)).to_have_text("-")  # no date in the question
        expect(first_row.nth(8)).to_have_text("1.000")  # Sam was there
        expect(page.locator(".recall-summary")).to_contain_text("considered")
        # What was said on a channel comes back beside the memories, verbatim, with its parts.
        with _http(web, "ops") as ops:
            here = "web:" + ops.get("/v1/me").json()["id"]
        page.get_by_label("Question").fill("hello from the console")
        page.get_by_label("Recall channel").fill(here)
        page.get_by_label("Participants").fill("")
        page.get_by_role("button", name="Recall").click()
        said = page.get_by_role("table", name="What was said, merged in from the dialog")
        expect(said.locator("th")).to_have_text(
            ["said", "channel", "when", "score", "band", *EXPLAINED, "tokens"]
        )
        expect(said.locator("tr").nth(1)).to_contain_text("ops: hello from the console")
        expect(said.locator("tr").nth(1)).to_contain_text(here)
        page.screenshot(path=str(shots / "memory.png"), full_page=True)

        # Usage: an svg bar for today, the budget line, the table beside it.
        page.get_by_role("button", name="Usage").click()
        chart = page.locator("#usage-chart svg[role=img]")
        expect(chart).to_be_visible()
        today = datetime.now(UTC).strftime("%Y-%m-%dT00:00:00Z")
        bar = chart.locator(f"g.bar[data-start='{today}']")
        expect(bar.locator("rect[data-key=respond]")).to_have_count(1)
        assert float(bar.locator("rect[data-key=respond]").get_attribute("height") or 0) > 0
        expect(chart.locator("line.budget")).to_have_count(1)
        expect(page.locator("#usage-table table")).to_contain_text("respond")
        page.screenshot(path=str(shots / "usage.png"), full_page=True)
        # Stacked by what triggered each call: today's bar holds the messages' calls.
        page.get_by_label("Group by").select_option("trigger")
        page.get_by_role("button", name="Show").click()
        expect(chart.locator(f"g.bar[data-start='{today}'] rect[data-key=message]")).to_have_count(1)
        expect(page.locator("#usage-table table")).to_contain_text("message")
        page.screenshot(path=str(shots / "usage-trigger.png"), full_page=True)
        page.get_by_label("Group by").select_option("stage")
        page.get_by_role("button", name="Show").click()
        expect(bar.locator("rect[data-key=respond]")).to_have_count(1)

        # From the day's bar to its turns, and one turn's waterfall.
        bar.click()
        expect(page.locator("#view-traces")).to_be_visible()
        first_turn = page.locator("#trace-list table tr td a").first
        expect(first_turn).to_be_visible()
        first_turn.click()
        spans = page.locator("ol.waterfall li")
        expect(spans.first).to_be_visible()
        expect(page.locator("ol.waterfall li.model").first).to_contain_text("tokens")
        page.screenshot(path=str(shots / "traces.png"), full_page=True)

        # From a chat answer to its trace.
        page.get_by_role("button", name="Chat").click()
        answer.get_by_role("link", name="trace of this answer").click()
        expect(page.locator("#waterfall h2")).to_contain_text("Trace ")
        expect(page.locator("ol.waterfall li.model").first).to_contain_text("40/9 tokens")

        # A withdrawn draft's decision, and a deferred revision's critique, one click away
        # (in this order: a decision sees the dialog, and Lisbon's rule comes first).
        page.get_by_role("button", name="Chat").click()
        page.get_by_label("Message").fill(GARDEN)
        page.get_by_label("Message").press("Enter")
        expect(page.locator(".notice").last).to_contain_text(f"Ada chose silence: {SILENCE}")
        withdrawn = page.locator(".msg.withdrawn").last
        withdrawn.get_by_role("link", name="critique of this answer").click()
        expect(withdrawn.locator(".critique .decision").first).to_contain_text(
            f"decided to silent: {SILENCE}"
        )
        page.get_by_label("Message").fill("Remember our trip to Lisbon?")
        page.get_by_label("Message").press("Enter")
        lisbon = page.locator(".msg.agent:not(.history)", has_text=LISBON).last
        expect(lisbon).to_be_visible()
        lisbon.get_by_role("link", name="critique of this answer").click()
        # Open at once, the critique fills in when deliberation ends.
        expect(lisbon.locator(".critique .objection").first).to_contain_text(
            "[confabulation]", timeout=WAIT_MS
        )
        page.screenshot(path=str(shots / "critique.png"), full_page=True)

        page.get_by_role("button", name="Life").click()
        expect(page.locator("#life")).to_contain_text("Next beat")
        expect(page.locator("#life svg.emotions rect").first).to_be_attached()
        expect(page.locator("#life-channels tr", has_text="web")).to_contain_text("connected")
        expect(page.locator("#life-blocks tr", has_text="spend-spike")).to_contain_text(f"person {STRANGER}")
        expect(page.locator("#life-findings tr", has_text="autonomy-spend")).to_contain_text(
            "the whole agent"
        )
        page.screenshot(path=str(shots / "life.png"), full_page=True)

        # An operator action: asked in a dialog first; "Keep as is" does nothing.
        page.get_by_role("button", name="Pause the heartbeat").click()
        dialog = page.get_by_role("dialog")
        expect(dialog).to_contain_text("Pause the heartbeat?")
        dialog.get_by_role("button", name="Keep as is").click()
        expect(dialog).to_be_hidden()
        expect(page.locator("#life")).to_contain_text("Next beat")
        page.get_by_role("button", name="Pause the heartbeat").click()
        dialog.get_by_role("button", name="Confirm").click()
        expect(page.locator("#action-done")).to_contain_text("paused the heartbeat")
        expect(page.locator("#life")).to_contain_text("Asleep (no heartbeat).")
        expect(page.locator("#life-runs tr", has_text="pause heartbeat")).not_to_have_count(0)
        page.get_by_role("button", name="Resume the heartbeat").click()
        dialog.get_by_role("button", name="Confirm").click()
        expect(page.locator("#action-done")).to_contain_text("resumed the heartbeat")
        expect(page.locator("#life")).to_contain_text("Next beat")

        # A person's page: the directory's digest, then what the agent observed and its dossier.
        page.get_by_role("button", name="Directory").click()
        page.locator("#contacts li a", has_text="Sam").first.click()
        person_page = page.locator("#person-page")
        expect(person_page.get_by_role("heading", name="Observations")).to_be_visible()
        expect(person_page.get_by_role("heading", name="Dossier")).to_be_visible()
        expect(person_page.locator(".dossier")).to_have_text("No dossier yet.")
        page.screenshot(path=str(shots / "person.png"), full_page=True)

        # A phone's width: the views reflow, nothing runs off the side.
        page.set_viewport_size({"width": 390, "height": 844})
        page.get_by_role("button", name="Usage").click()
        expect(chart).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.screenshot(path=str(shots / "phone-usage.png"), full_page=True)

        # A client key: the chat as before, no console navigation.
        browser = page.context.browser
        assert browser is not None
        client = browser.new_page()
        log_in(client, web.url, web.keys["alice"])
        for name in ("Memory", "Usage", "Traces", "Life", "Directory"):
            expect(client.get_by_role("button", name=name)).to_have_count(0)
        client.screenshot(path=str(shots / "client.png"), full_page=True)
    for name in ("chat", "memory", "usage", "traces", "critique", "life", "phone-usage", "client"):
        assert (shots / f"{name}.png").stat().st_size > 0
    # `CONSOLE_SCREENSHOTS=docs/screenshots` refreshes the README's pictures from this run.
    keep = os.environ.get("CONSOLE_SCREENSHOTS")
    if keep:
        from PIL import Image

        for name, shot in (
            ("chat", "critique"),
            ("memory", "memory"),
            ("usage", "usage"),
            ("traces", "traces"),
            ("life", "life"),
        ):
            image = Image.open(shots / f"{shot}.png").convert("RGB").quantize(colors=64)
            image.save(Path(keep) / f"console-{name}.png", optimize=True)


@pytest.mark.skipif(shutil.which("chromium") is None, reason=needs.reason("Debian's chromium"))
def test_a_reminder_shows_in_the_life_view_and_fires_live_in_the_chat(web: WebDaemon, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    script = web.rules.read_text()
    due = datetime.now(UTC) + timedelta(seconds=40)  # time to be seen waiting, even under load
    rules(web.rules, reminder_at=due.isoformat())
    try:
        with logged_in(web.url, web.keys["ops"]) as page:
            page.get_by_label("Message").fill("remind me to water the plants")
            page.get_by_label("Message").press("Enter")
            # The tool call as it happens: its name and (an operator's view) its arguments, then "ok".
            call = page.locator(".tool-call[data-tool=set_reminder]")
            expect(call).to_have_attribute("data-status", "ok")
            expect(call).to_contain_text("water the plants")
            expect(call).to_contain_text("→ ok")
            page.get_by_role("button", name="Life").click()
            # The Life view reads itself again while shown: the reminder appears, then goes.
            reminder = page.locator("#life-reminders tr", has_text="water the plants")
            expect(reminder).to_have_count(1, timeout=WAIT_MS)
            page.screenshot(path=str(tmp_path / "life-reminder.png"), full_page=True)
            # Fired: no longer waiting, and its run is listed with what it did.
            expect(reminder).to_have_count(0, timeout=90_000)
            expect(page.locator("#life-runs tr", has_text="water the plants")).to_have_count(
                1, timeout=WAIT_MS
            )
            page.get_by_role("button", name="Chat").click()
            expect(page.locator(".msg.agent", has_text=REMINDED)).to_have_count(1, timeout=WAIT_MS)
    finally:
        web.rules.write_text(script)


@pytest.mark.skipif(shutil.which("chromium") is None, reason=needs.reason("Debian's chromium"))
def test_a_cull_is_a_memory_event_in_the_api_and_the_page(web: WebDaemon, tmp_path: Path) -> None:
    """Last in the module: it culls a memory the other tests do not count."""
    from playwright.sync_api import expect

    trivial = tmp_path / "trivial.jsonl"
    trivial.write_text(
        _memory("trivia", "Small talk about the weather.", time="2026-11-01T10:00:00Z", importance=1)
    )
    assert web.persyn.run("memory", "import", str(trivial)).returncode == 0
    culled = web.persyn.run("memory", "cull")
    assert culled.returncode == 0 and "deleted 1 memories" in culled.stdout, culled.stdout + culled.stderr
    with _http(web, "ops") as ops, _http(web, "alice") as alice:
        events = ops.get("/v1/console/memory-events").json()["events"]
        assert alice.get("/v1/console/memory-events").status_code == 403
        assert ops.get("/v1/console/memory-events", params={"kind": "remember_harder"}).json() == {
            "events": []
        }
        bad = ops.get("/v1/console/memory-events", params={"kind": "nap"})
        assert bad.status_code == 400 and "kind" in bad.json()["error"]["message"]
    (event,) = events
    assert event["kind"] == "cull" and event["objective"].startswith("cull 1 memory (importance below 3")
    assert "Small talk about the weather." in event["outcome"] and event["tokens"] == 0
    with logged_in(web.url, web.keys["ops"]) as page:
        page.get_by_role("button", name="Memory").click()
        shown = page.get_by_role("list", name="Memory events").locator("li")
        expect(shown).to_have_count(1)
        expect(shown.first).to_contain_text("cull 1 memory")
        expect(shown.first).to_contain_text("Small talk about the weather.")
        page.screenshot(path=str(tmp_path / "memory-events.png"), full_page=True)
