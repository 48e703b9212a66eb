"""The web channel over real HTTP on loopback against `persyn run` in a subprocess (issue 16):
the official `openai` SDK (sync and streamed), the native API and its live stream, a
withdrawn draft, a reminder arriving unprompted, key scopes, and bad requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from persyn_cli import Persyn
from sse_reader import SseReader
from web_daemon import GARDEN, HELLO, LISBON, LISBON_FIXED, REMINDED, SILENCE, WebDaemon, rules, start

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MAX_CHARS = 2000


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDaemon]:
    daemon = start(
        tmp_path_factory.mktemp("web"),
        keys={"alice": False, "bob": False, "ops": True, "gone": False},
        revoked=("gone",),
        PERSYN_CONVERSATION__MAX_MESSAGE_CHARS=str(MAX_CHARS),
        PERSYN_WEB__MAX_UPLOAD_BYTES=str(4 * 1_048_576),  # the routes that take files
    )
    yield daemon
    daemon.stop()


def _client(web: WebDaemon, who: str = "alice") -> openai.OpenAI:
    return openai.OpenAI(base_url=web.url + "v1", api_key=web.keys[who], max_retries=0, timeout=60)


def _http(web: WebDaemon, who: str | None = "alice") -> httpx.Client:
    headers = {"Authorization": f"Bearer {web.keys[who]}"} if who else {}
    return httpx.Client(base_url=web.url, headers=headers, timeout=60)


def test_the_official_sdk_lists_the_agents_and_gets_a_reply_with_its_usage(web: WebDaemon) -> None:
    client = _client(web)
    assert [m.id for m in client.models.list()] == ["Ada"]
    reply = client.chat.completions.create(
        model="Ada",
        messages=[
            {"role": "system", "content": "ignored: the agent has its own instructions"},
            {"role": "user", "content": "an earlier line the agent already remembers"},
            {"role": "assistant", "content": "an earlier answer"},
            {"role": "user", "content": "hello, I am Alice"},
        ],
    )
    assert reply.choices[0].message.content == HELLO
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "Ada"
    # The turn made one model call (a plain greeting needs no deliberation): its tokens.
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (40, 9, 49)
    extra: Any = reply.model_extra
    assert extra["persyn"]["transmitted"] is True


def test_the_sdk_streams_the_draft_as_it_is_generated(web: WebDaemon) -> None:
    chunks = list(
        _client(web, "bob").chat.completions.create(
            model="ada",
            messages=[{"role": "user", "content": "hello from Bob"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == HELLO
    assert len(pieces) == len(HELLO.split())  # word by word, as the model produced it
    assert chunks[0].choices[0].delta.role == "assistant"
    finished = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finished == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (40, 9)


def test_a_withdrawn_draft_ends_the_stream_with_the_reason_not_an_error(web: WebDaemon) -> None:
    chunks = list(
        _client(web).chat.completions.create(
            model="Ada", messages=[{"role": "user", "content": GARDEN}], stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.endswith(f"(Ada chose silence: {SILENCE})"), text
    marked = [dict(c.model_extra or {}).get("persyn") for c in chunks]
    withdrawn = [m for m in marked if m and m.get("withdrawn")]
    assert withdrawn and withdrawn[-1]["reason"] == f"Ada chose silence: {SILENCE}"
    # Unstreamed, the same turn is one assistant message saying so.
    reply = _client(web, "bob").chat.completions.create(
        model="Ada", messages=[{"role": "user", "content": GARDEN}]
    )
    assert reply.choices[0].message.content == f"(Ada chose silence: {SILENCE})"
    assert dict(reply.model_extra or {})["persyn"]["withdrawn"] is True


def test_the_native_api_returns_the_event_at_once_and_streams_its_phases_in_order(web: WebDaemon) -> None:
    stream = SseReader(web.url + "v1/agents/Ada/stream", web.keys["alice"])
    try:
        assert stream.status == 200
        with _http(web) as http:
            posted = http.post("/v1/agents/Ada/events", json={"text": "hello again"})
            assert posted.status_code == 202, posted.text
            event_id = posted.json()["event_id"]
            assert stream.wait(
                lambda events: any(k == "message" and d["event_id"] == event_id for k, d in events)
            )
            marker = http.get(f"/v1/events/{event_id}").json()
        assert (marker["status"], marker["text"]) == ("transmitted", HELLO)
        seen = stream.of(event_id)
        kinds = [k for k, _ in seen]
        tokens = [d for k, d in seen if k == "token"]
        assert kinds.index("message") > max(i for i, k in enumerate(kinds) if k == "token")
        assert {d["phase"] for d in tokens} == {"draft"}
        assert "".join(d["text"] for d in tokens if d["kind"] == "delta") == HELLO
        assert seen[kinds.index("message")][1]["text"] == HELLO
    finally:
        stream.close()


def test_a_deferred_revision_streams_under_the_delivered_reply_and_ends(web: WebDaemon) -> None:
    stream = SseReader(web.url + "v1/agents/Ada/stream", web.keys["alice"])
    try:
        with _http(web) as http:
            event_id = http.post(
                "/v1/agents/Ada/events", json={"text": "Remember our trip to Lisbon?"}
            ).json()["event_id"]
        done = stream.wait(
            lambda events: any(k == "deliberation_done" and d["event_id"] == event_id for k, d in events)
        )
        assert done, stream.of(event_id)
        seen = stream.of(event_id)
        labels = [(k, d.get("phase")) for k, d in seen]
        message = labels.index(("message", None))
        first_revise = labels.index(("token", "revise"))
        assert all(phase == "draft" for kind, phase in labels[:message] if kind == "token")
        assert message < first_revise < labels.index(("deliberation_done", None))
        assert seen[message][1]["text"] == LISBON  # deferred: the draft is what was said
        revised = "".join(
            d["text"] for k, d in seen if k == "token" and d["phase"] == "revise" and d["kind"] == "delta"
        )
        assert revised == LISBON_FIXED  # the working surface, folded into the next reply
        assert seen[-1][1]["objections"] >= 1  # one per critic lens that raised it
    finally:
        stream.close()


def test_a_withdrawn_draft_on_the_stream_is_withdrawn_then_explained(web: WebDaemon) -> None:
    stream = SseReader(web.url + "v1/agents/Ada/stream", web.keys["bob"])
    try:
        with _http(web, "bob") as http:
            event_id = http.post("/v1/agents/Ada/events", json={"text": GARDEN}).json()["event_id"]
            assert stream.wait(
                lambda events: any(k == "notice" and d["event_id"] == event_id for k, d in events)
            )
            marker = http.get(f"/v1/events/{event_id}").json()
        assert marker["status"] == "silent" and marker["reason"] == f"Ada chose silence: {SILENCE}"
        kinds = [k for k, _ in stream.of(event_id)]
        assert "message" not in kinds
        assert kinds.index("withdraw") < kinds.index("notice")
    finally:
        stream.close()


def test_a_reminder_firing_reaches_the_open_stream_unprompted(web: WebDaemon) -> None:
    due = (datetime.now(UTC) + timedelta(seconds=4)).isoformat()
    rules(web.rules, reminder_at=due)
    stream = SseReader(web.url + "v1/agents/Ada/stream", web.keys["ops"])
    try:
        with _http(web, "ops") as http:
            asked = http.post("/v1/agents/Ada/events", json={"text": "remind me to water the plants"})
            assert asked.status_code == 202, asked.text
        arrived = stream.wait(
            lambda events: any(k == "message" and d["text"] == REMINDED for k, d in events), timeout=90
        )
        assert arrived, (stream.events, web.persyn.log("run")[-3000:])
        (reminder,) = [d for k, d in stream.events if k == "message" and d["text"] == REMINDED]
        assert reminder["event_id"] != asked.json()["event_id"]  # its own run, not a reply
    finally:
        stream.close()
        rules(web.rules)


def test_keys_scope_what_a_client_may_read(web: WebDaemon) -> None:
    with _http(web, None) as anonymous:
        assert anonymous.get("/healthz").json() == {"ok": True}
        missing = anonymous.get("/v1/models")
        assert missing.status_code == 401 and "API key is required" in missing.json()["error"]["message"]
        wrong = anonymous.get("/v1/models", headers={"Authorization": "Bearer psk-not-a-key"})
        assert wrong.status_code == 401
        malformed = anonymous.get("/v1/models", headers={"Authorization": "Basic abc"})
        assert malformed.status_code == 401 and "Bearer" in malformed.json()["error"]["message"]
    with _http(web, "gone") as revoked:
        assert revoked.get("/v1/models").status_code == 401
    with _http(web, "alice") as alice, _http(web, "bob") as bob, _http(web, "ops") as ops:
        said = bob.post(
            "/v1/chat/completions",
            json={"model": "Ada", "messages": [{"role": "user", "content": "hello, Bob here"}]},
        )
        assert said.json()["choices"][0]["message"]["content"] == HELLO
        mine = alice.post("/v1/agents/Ada/events", json={"text": "hello, just me"}).json()["event_id"]
        assert bob.get(f"/v1/events/{mine}").status_code == 404
        assert ops.get(f"/v1/events/{mine}").status_code == 200
        denied = alice.get("/v1/agents/Ada/contacts")
        assert denied.status_code == 403 and "operator" in denied.json()["error"]["message"]
        assert alice.get("/v1/agents/Ada/channels").status_code == 403
        listed = ops.get("/v1/agents/Ada/contacts").json()["contacts"]
        names = {c["person"]["display_name"] for c in listed}
        assert {"alice", "bob"} <= names
        # Each key's conversation is its own: alice reads hers, not bob's.
        own = alice.get("/v1/agents/Ada/conversations").json()["conversations"]
        assert own and all(c["channel"] == web.key_ids["alice"] for c in own)
        bobs = bob.get("/v1/agents/Ada/conversations").json()["conversations"][0]["id"]
        assert alice.get(f"/v1/agents/Ada/conversations/{bobs}").status_code == 404
        assert ops.get(f"/v1/agents/Ada/conversations/{bobs}").status_code == 200
        assert "/v1/chat/completions" in ops.get("/openapi.json").json()["paths"]
        # A `user` field is one of several people behind one key: a contact of its own, named
        # within the key (never a claim on another key's or network's carol).
        carol = alice.post(
            "/v1/chat/completions",
            json={
                "model": "Ada",
                "user": "carol",
                "messages": [{"role": "user", "content": "hello, Carol here"}],
            },
        )
        assert carol.status_code == 200, carol.text
        listed = ops.get("/v1/agents/Ada/contacts").json()["contacts"]
        (found,) = [c for c in listed if c["person"]["display_name"] == "carol (alice)"]
        assert found["person"]["identities"][0]["speaker_id"] == f"{web.key_ids['alice']}:carol"


def test_a_key_tied_to_a_contact_speaks_as_them_and_a_revoked_key_stops_at_once(web: WebDaemon) -> None:
    with _http(web, "bob") as bob:
        assert (
            bob.post(
                "/v1/chat/completions",
                json={"model": "Ada", "messages": [{"role": "user", "content": "hello"}]},
            ).status_code
            == 200
        )
    made = web.persyn.run("web", "keys", "create", "--name", "bob-phone", "--contact", "bob", "--json")
    assert made.returncode == 0, made.stderr
    phone = json.loads(made.stdout)
    headers = {"Authorization": f"Bearer {phone['key']}"}
    with httpx.Client(base_url=web.url, headers=headers, timeout=60) as http:
        said = http.post(
            "/v1/chat/completions", json={"model": "Ada", "messages": [{"role": "user", "content": "hello"}]}
        )
        assert said.status_code == 200, said.text
        with _http(web, "ops") as ops:
            listed = ops.get("/v1/agents/Ada/contacts").json()["contacts"]
        (bob_contact,) = [c for c in listed if c["person"]["display_name"] == "bob"]
        speakers = {i["speaker_id"] for i in bob_contact["person"]["identities"]}
        assert speakers == {web.key_ids["bob"], phone["id"]}
        assert not [c for c in listed if c["person"]["display_name"] == "bob-phone"]
        revoked = web.persyn.run("web", "keys", "revoke", phone["id"])
        assert revoked.returncode == 0, revoked.stderr
        after = http.get("/v1/models")
        assert after.status_code == 401 and "revoked" in after.json()["error"]["message"]
    listed_keys = json.loads(web.persyn.run("web", "keys", "list", "--json").stdout)
    (entry,) = [k for k in listed_keys if k["id"] == phone["id"]]
    assert entry["revoked_at"] is not None and entry["contact_id"] == bob_contact["person"]["id"]
    assert all("key_hash" not in k and "key" not in k for k in listed_keys)


def test_bad_requests_get_a_json_error_naming_the_field_and_lose_nothing(web: WebDaemon) -> None:
    def error(response: httpx.Response) -> tuple[int, str | None]:
        return response.status_code, response.json()["error"]["param"]

    with _http(web, "bob") as http:
        before = http.get("/v1/agents/Ada/conversations").json()
        huge = http.post(
            "/v1/chat/completions",
            content=b'{"model": "Ada", "messages": [{"role": "user", "content": "'
            + b"x" * 10_000_000
            + b'"}]}',
            headers={"Content-Type": "application/json"},
        )
        assert huge.status_code == 413 and "max_upload_bytes" in huge.json()["error"]["message"]
        chunked = http.post(  # no Content-Length: counted as it arrives
            "/v1/chat/completions",
            content=iter([b'{"model": "Ada", "messages": "'] + [b"z" * 65536] * 80 + [b'"}']),
            headers={"Content-Type": "application/json"},
        )
        assert chunked.status_code == 413 and "max_upload_bytes" in chunked.json()["error"]["message"]
    with _http(web, "ops") as ops:  # a route that takes no files keeps [web] max_body_bytes (1 MiB)
        renamed = ops.post(
            "/v1/agents/Ada/contacts/merge",
            content=iter([b'{"into": "'] + [b"z" * 65536] * 20 + [b'"}']),
            headers={"Content-Type": "application/json"},
        )
        assert renamed.status_code == 413 and "max_body_bytes" in renamed.json()["error"]["message"]
    with _http(web, "bob") as http:
        assert error(http.post("/v1/chat/completions", content=b"{not json")) == (400, "body")
        assert error(http.post("/v1/chat/completions", json={"messages": []})) == (400, "model")
        assert error(http.post("/v1/chat/completions", json={"model": "Ada", "messages": []})) == (
            400,
            "messages",
        )
        bad_role = {"model": "Ada", "messages": [{"role": "wizard", "content": "hi"}]}
        assert error(http.post("/v1/chat/completions", json=bad_role)) == (400, "messages.0.role")
        no_user = {"model": "Ada", "messages": [{"role": "system", "content": "hi"}]}
        assert error(http.post("/v1/chat/completions", json=no_user)) == (400, "messages")
        unknown = {"model": "Zed", "messages": [{"role": "user", "content": "hi"}]}
        assert error(http.post("/v1/chat/completions", json=unknown)) == (404, "model")
        long = {"model": "Ada", "messages": [{"role": "user", "content": "y" * (MAX_CHARS + 1)}]}
        assert error(http.post("/v1/chat/completions", json=long)) == (413, "messages.0.content")
        assert error(http.post("/v1/agents/Ada/events", json={"text": "hi", "color": "red"})) == (
            400,
            "color",
        )
        assert error(http.get("/v1/events/not-an-id")) == (400, "event_id")
        assert http.get("/v1/nowhere").status_code == 404
        assert http.get("/v1/nowhere").json()["error"]["message"]
        # CORS is off: no origin is ever allowed to read a response from another site.
        preflight = http.options(
            "/v1/chat/completions",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in preflight.headers
        cross = http.get("/v1/models", headers={"Origin": "https://evil.example"})
        assert cross.status_code == 200 and "access-control-allow-origin" not in cross.headers
        after = http.get("/v1/agents/Ada/conversations").json()
        assert after == before  # nothing of the refused requests was stored
        assert http.get("/healthz").status_code == 200  # and the daemon still serves


def test_a_public_bind_without_any_key_is_refused_at_start(tmp_path: Path) -> None:
    persyn = Persyn(
        home=tmp_path / "home",
        env={
            "PERSYN_MODELS__DEFAULT": "test:echo",
            "PERSYN_WEB__ENABLED": "true",
            "PERSYN_WEB__HOST": "0.0.0.0",
        },
    )
    assert persyn.run("init", "--name", "Ada").returncode == 0
    done = persyn.run("run", timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "0.0.0.0" in done.stderr and "persyn web keys create" in done.stderr
    assert "Traceback" not in done.stderr
    listed = persyn.run("web", "keys", "list", "--json")
    assert json.loads(listed.stdout) == []
    doctor = persyn.run("doctor")
    assert "[FAIL] web channel: http://0.0.0.0:8765/ is not loopback and no key exists" in doctor.stdout
    assert persyn.run("web", "keys", "create", "--name", "first").returncode == 0
    assert "[ ok ] web channel: http://0.0.0.0:8765/, 1 key(s), 0 operator" in persyn.run("doctor").stdout


def test_a_burst_of_completions_each_get_their_own_reply_and_usage(web: WebDaemon) -> None:
    """Concurrent turns of several clients: each answer is its own, and each usage is exactly
    what the usage ledger recorded for that turn's calls (queued turns also decide, so it is
    more than the lone greeting's 40 + 9)."""
    from concurrent.futures import ThreadPoolExecutor

    def ask(index: int) -> tuple[str, str | None, int, int]:
        who = ("alice", "bob", "ops")[index % 3]
        reply = _client(web, who).chat.completions.create(
            model="Ada", messages=[{"role": "user", "content": f"hello number {index}"}]
        )
        assert reply.usage is not None
        event_id = dict(reply.model_extra or {})["persyn"]["event_id"]
        return (
            event_id,
            reply.choices[0].message.content,
            reply.usage.prompt_tokens,
            reply.usage.completion_tokens,
        )

    with ThreadPoolExecutor(9) as pool:
        answers = list(pool.map(ask, range(9)))
    assert [text for _, text, _, _ in answers] == [HELLO] * 9
    ledger: dict[str, list[int]] = {}
    records = {
        r["id"]: r for r in map(json.loads, (web.persyn.home / "usage.jsonl").read_text().splitlines())
    }
    for record in records.values():  # by id: a line written twice counts once
        spent = ledger.setdefault(record["thread_id"] or "", [0, 0])
        spent[0] += record["input_tokens"]
        spent[1] += record["output_tokens"]
    for event_id, _, prompt, completion in answers:
        assert [prompt, completion] == ledger[event_id]
        assert prompt >= 40 and completion >= 9  # the greeting's own call is in it


def test_a_port_already_taken_stops_the_start_with_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        persyn = Persyn(
            home=tmp_path / "home",
            env={
                "PERSYN_MODELS__DEFAULT": "test:echo",
                "PERSYN_WEB__ENABLED": "true",
                "PERSYN_WEB__PORT": str(port),
            },
        )
        assert persyn.run("init", "--name", "Ada").returncode == 0
        done = persyn.run("run", timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"could not listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
    assert "persyn is serving" not in done.stdout
