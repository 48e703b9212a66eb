"""The Slack adapter against `persyn.testing.slack.FakeSlack`, a wire-faithful fake of Slack's
Web API, Socket Mode and Events API deliveries, served over real HTTP and WebSocket on loopback.
The adapter talks to it through the official slack-sdk clients with only the base URL changed.
Slack itself cannot run here."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Collection
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from pydantic_ai.messages import ModelMessage
from relay import relay

from persyn.channels.slack.channel import MESSAGE_LIMIT, SlackChannel
from persyn.channels.slack.config import SlackConfig
from persyn.channels.slack.events import EVENTS_PATH
from persyn.channels.slack.inbound import SLACK_SERVICE
from persyn.channels.slack.plugin import PLUGIN
from persyn.core.clock import ManualClock
from persyn.core.config import Settings, load_settings
from persyn.core.errors import ConfigError
from persyn.core.ids import derived_id
from persyn.runtime.channel import Backoff, Link
from persyn.store import Identity
from persyn.testing.harness import ADA, START, Pilot, harness_settings, run_runtime, until
from persyn.testing.media import small_png
from persyn.testing.models import DoubleReply, echo_text, registered_double
from persyn.testing.slack import (
    APP_TOKEN,
    BOT_TOKEN,
    BOT_USER,
    SIGNING_SECRET,
    TEAM,
    FakeSlack,
    SlackUser,
    dm_channel,
)
from persyn.web.server import WebSurface

WAIT_SECONDS = 60.0
ANN = SlackUser("U0ANN", "ann", "Ann")
BEN = SlackUser("U0BEN", "ben", "Ben")
PACING = (
    "[pacing.channels.slack]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
    "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
)


@contextlib.asynccontextmanager
async def on_slack(
    home: Path, fake: FakeSlack, *, model: str = "test:echo", mode: str = "socket"
) -> AsyncIterator[tuple[Pilot, SlackChannel]]:
    fake.users |= {ANN.id: ANN, BEN.id: BEN}
    await fake.start()
    config = f'[channels.slack]\nenabled = true\nmode = "{mode}"\napi_url = "{fake.api_url}"\n{PACING}'
    settings = harness_settings(home, model=model, config=config)
    try:
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = SlackChannel(
                settings.channels.section(SlackConfig),
                pilot.agent,
                pilot.runtime,
                bot_token=BOT_TOKEN,
                app_token=APP_TOKEN,
                backoff=Backoff(0.05, 0.2),
            )
            await channel.start()
            try:
                await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
                yield pilot, channel
            finally:
                await channel.stop()
    finally:
        await fake.stop()


async def test_a_dm_is_answered_through_a_rate_limit_and_named_once(tmp_path: Path) -> None:
    fake = FakeSlack(throttle=1)
    async with on_slack(tmp_path / "home", fake) as (pilot, channel):
        assert channel.link.state().link is Link.CONNECTED
        await fake.push(fake.message_event("hello bot", user=ANN.id, channel="D0ANN", channel_type="im"))
        await until(lambda: fake.posted, "the reply")
        assert fake.posted == [{"channel": "D0ANN", "text": "You said: hello bot", "token": BOT_TOKEN}]
        assert fake.calls.count("chat.postMessage") == 2  # the 429, then the retry after Retry-After
        await pilot.settle()
        await fake.push(fake.message_event("again", user=ANN.id, channel="D0ANN", channel_type="im"))
        await until(lambda: len(fake.posted) == 2, "the second reply")
        assert fake.calls.count("users.info") == 1  # the name is cached
        await pilot.settle()
        assert len(fake.acked) == 2  # every envelope acknowledged
        people = {p.display_name: p for p in await pilot.full_store.list_persons(pilot.agent.id)}
        assert people["Ann"].kind == "human"
        assert [(i.service, i.speaker_id) for i in people["Ann"].identities] == [
            (SLACK_SERVICE, f"{TEAM}/{ANN.id}")
        ]


async def test_channels_answer_mentions_in_the_thread_and_skip_own_and_repeated_messages(
    tmp_path: Path,
) -> None:
    fake = FakeSlack()
    async with on_slack(tmp_path / "home", fake) as (pilot, _channel):
        chatter = fake.message_event("just chatting", user=ANN.id, channel="C0LAB")
        await fake.push(chatter)
        await until(lambda: fake.acked, "the chatter acknowledged")
        await pilot.settle()
        # Whether it engages with overheard chatter is the pipeline's decision: the replies
        # below are found by their text, not their place.
        asked = fake.message_event(f"<@{BOT_USER}> what is up?", user=ANN.id, channel="C0LAB")
        await fake.push(asked)
        ts = asked["event"]["ts"]

        def replies(text: str) -> list[dict[str, Any]]:
            return [p for p in fake.posted if p["text"] == text]

        await until(lambda: replies("You said: @Ada what is up?"), "the reply in the thread")
        assert replies("You said: @Ada what is up?")[0]["thread_ts"] == ts
        for payload, addressed in ((chatter, False), (asked, True)):
            stored = await pilot.runtime.get_event(pilot.agent.id, _event_id(payload))
            assert stored is not None and stored.addressed is addressed
        await pilot.settle()
        # The same message again (an app_mention beside the message event; a redelivery) and
        # the agent's own message are not answered.
        await fake.push(fake.callback({**asked["event"], "type": "app_mention"}))
        await fake.push(fake.message_event("my own words", user=BOT_USER, channel="C0LAB"))
        # Another bot is heard as an agent; a reply inside a thread stays in that thread.
        bot = fake.message_event(
            f"<@{BOT_USER}> beep", user="U0BOT2", channel="C0LAB", bot_id="B0OTHER", thread_ts=ts
        )
        fake.users["U0BOT2"] = SlackUser("U0BOT2", "robo", "Robo", is_bot=True)
        await fake.push(bot)
        await until(lambda: replies("You said: @Ada beep"), "the reply to the other bot")
        await pilot.settle()
        assert [p["thread_ts"] for p in replies("You said: @Ada beep")] == [ts]
        assert len(replies("You said: @Ada what is up?")) == 1  # answered once
        assert not any("my own words" in p["text"] for p in fake.posted)
        people = {p.display_name: p for p in await pilot.full_store.list_persons(pilot.agent.id)}
        assert people["Robo"].kind == "agent"
        heard = await pilot.store.channel_messages(pilot.agent.id, SLACK_SERVICE, "C0LAB", 20)
        assert [m.text for m in heard if m.role.value == "user"] == [
            "just chatting",
            "@Ada what is up?",
            "@Ada beep",
        ]


def _event_id(payload: dict[str, Any]) -> str:
    event = payload["event"]
    return derived_id(
        datetime.fromtimestamp(float(event["ts"]), UTC), SLACK_SERVICE, event["channel"], event["ts"]
    )


async def test_a_long_reply_is_split_at_slacks_limit(tmp_path: Path) -> None:
    fake = FakeSlack()
    async with on_slack(tmp_path / "home", fake) as (pilot, _channel):
        words = ("word " * 1700).strip()  # 8,499 characters, echoed with "You said: "
        await fake.push(fake.message_event(words, user=ANN.id, channel="D0ANN", channel_type="im"))
        await until(lambda: len(fake.posted) >= 3, "the reply in pieces")
        await pilot.settle()
        assert all(len(p["text"]) <= MESSAGE_LIMIT for p in fake.posted)
        assert " ".join(p["text"] for p in fake.posted) == f"You said: {words}"


async def test_a_burst_in_one_conversation_is_stored_in_the_order_it_was_said(tmp_path: Path) -> None:
    fake = FakeSlack()
    async with on_slack(tmp_path / "home", fake) as (pilot, _channel):
        said = [f"part {n}" for n in range(12)]
        fake.slow_lookups = [1.0]  # the first message's name lookup is slow
        for text in said:  # the first needs users.info; the rest must not overtake it
            await fake.push(fake.message_event(text, user=ANN.id, channel="D0ANN", channel_type="im"))

        async def heard() -> list[str]:
            kept = await pilot.store.channel_messages(pilot.agent.id, SLACK_SERVICE, "D0ANN", 50)
            return [m.text for m in kept if m.role.value == "user"]

        async def all_heard() -> bool:
            return len(await heard()) == len(said)

        await pilot.wait_for(all_heard, "the whole burst in the dialog")
        await pilot.settle()
        assert await heard() == said


async def test_what_was_said_in_one_channel_does_not_surface_in_a_dm_with_someone_else(
    tmp_path: Path,
) -> None:
    prompts: list[str] = []

    def spy(task: str | None, messages: list[ModelMessage], info: Any) -> DoubleReply:
        prompts.append(repr(messages))
        return DoubleReply(text=echo_text(messages))

    fake = FakeSlack()
    with registered_double("slackspy", spy):
        async with on_slack(tmp_path / "home", fake, model="test:slackspy") as (pilot, _channel):
            await fake.push(
                fake.message_event(f"<@{BOT_USER}> the budget is PELICAN-42", user=ANN.id, channel="C0FIN")
            )
            await until(lambda: fake.posted, "the answer in #finance")
            await pilot.settle()
            seen = len(prompts)
            await fake.push(
                fake.message_event("what is the budget?", user=BEN.id, channel="D0BEN", channel_type="im")
            )
            await until(lambda: len(fake.posted) == 2, "the answer in Ben's DM")
            await pilot.settle()
    assert any("PELICAN-42" in p for p in prompts[:seen])
    assert prompts[seen:] and not any("PELICAN-42" in p for p in prompts[seen:])
    assert "PELICAN-42" not in fake.posted[1]["text"]


async def test_files_are_attachments_and_an_oversized_one_is_refused_by_name(tmp_path: Path) -> None:
    fake = FakeSlack()
    async with on_slack(tmp_path / "home", fake) as (pilot, _channel):
        png = fake.file("F0PNG", "dot.png", small_png(), "image/png")
        shared = fake.message_event("look", user=ANN.id, channel="D0ANN", channel_type="im", files=[png])
        await fake.push(shared)
        await until(lambda: fake.posted, "the reply to the picture")
        await pilot.settle()
        huge = {**fake.file("F0BIG", "huge.bin", b"x", "application/pdf"), "size": 30 * 1024 * 1024}
        await fake.push(
            fake.message_event("and this", user=ANN.id, channel="D0ANN", channel_type="im", files=[huge])
        )
        await until(lambda: len(fake.posted) == 2, "the reply to the refused file")
        await pilot.settle()
        heard = await pilot.store.channel_messages(pilot.agent.id, SLACK_SERVICE, "D0ANN", 20)
        said = [m for m in heard if m.role.value == "user"]
        stored = await pilot.runtime.get_event(pilot.agent.id, _event_id(shared))
        assert stored is not None and [a.media_type for a in stored.attachments] == ["image/png"]
        assert "huge.bin" in said[1].text and "[senses] limit" in said[1].text and "and this" in said[1].text


async def test_edits_are_heard_and_deletions_answer_nothing(tmp_path: Path) -> None:
    fake = FakeSlack()
    async with on_slack(tmp_path / "home", fake) as (pilot, _channel):
        first = fake.message_event("helo", user=ANN.id, channel="D0ANN", channel_type="im")
        await fake.push(first)
        await until(lambda: fake.posted, "the first reply")
        await pilot.settle()
        edited = {**first["event"], "text": "hello", "ts": first["event"]["ts"]}
        change = {
            "type": "message",
            "subtype": "message_changed",
            "channel": "D0ANN",
            "channel_type": "im",
            "ts": fake.next_ts(),
            "message": edited,
        }
        await fake.push(fake.callback(change))
        gone = {"type": "message", "subtype": "message_deleted", "channel": "D0ANN", "ts": fake.next_ts()}
        await fake.push(fake.callback({**gone, "deleted_ts": first["event"]["ts"]}))
        await until(lambda: len(fake.posted) == 2, "the reply to the edit")
        await pilot.settle()
        assert fake.posted[1]["text"] == "You said: (edited) hello"
        assert len(fake.acked) == 3 and len(fake.posted) == 2


async def test_an_outage_mid_run_is_shown_and_a_message_after_it_is_answered(tmp_path: Path) -> None:
    fake = FakeSlack()
    async with on_slack(tmp_path / "home", fake) as (pilot, channel):
        before = fake.message_event("before", user=ANN.id, channel="D0ANN", channel_type="im")
        await fake.push(before)
        await until(lambda: fake.posted, "the reply before the outage")
        await pilot.settle()
        await fake.stop()
        await until(lambda: channel.link.state().link is not Link.CONNECTED, "the outage noticed")
        await until(lambda: channel.link.state().failures >= 2, "reconnection attempts failing")
        assert channel.link.state().detail  # the reason shown
        # The agent reaches out meanwhile: held in the outbox, delivered once Slack is back.
        (ann,) = [p for p in await pilot.full_store.list_persons(pilot.agent.id) if p.display_name == "Ann"]
        await pilot.runtime.outreach.send_to_contact(
            pilot.agent.id, _event_id(before), ann.id, SLACK_SERVICE, "D0ANN", "while you were away"
        )
        await fake.start()
        await until(lambda: channel.link.state().link is Link.CONNECTED, "connected again")
        assert fake.connections >= 2
        await until(lambda: len(fake.posted) == 2, "the held message")
        await fake.push(fake.message_event("after", user=ANN.id, channel="D0ANN", channel_type="im"))
        await until(lambda: len(fake.posted) == 3, "the reply after the restart")
        await pilot.settle()
        assert [p["text"] for p in fake.posted] == [
            "You said: before",
            "while you were away",
            "You said: after",
        ]
        assert await pilot.store.pending_outbox(pilot.agent.id, SLACK_SERVICE) == []


async def test_a_refresh_requested_by_slack_reconnects_and_loses_nothing(tmp_path: Path) -> None:
    fake = FakeSlack()
    async with on_slack(tmp_path / "home", fake) as (pilot, _channel):
        await fake.refresh()
        await until(lambda: fake.connections >= 2, "the new connection")
        await fake.push(
            fake.message_event("after the refresh", user=ANN.id, channel="D0ANN", channel_type="im")
        )
        await until(lambda: fake.posted, "the reply after the refresh")
        await pilot.settle()
        assert [p["text"] for p in fake.posted] == ["You said: after the refresh"]


def _with_secrets(settings: Settings, **secrets: str) -> Settings:
    found = settings.secrets.model_copy(update={"channels": {k: SecretStr(v) for k, v in secrets.items()}})
    return settings.model_copy(update={"secrets": found})


async def _no_key(secret: str) -> None:
    return None


async def _none_revoked(ids: Collection[str]) -> set[str]:
    return set()


async def test_events_over_http_on_the_web_server_are_verified_acknowledged_and_answered_once(
    tmp_path: Path,
) -> None:
    """`mode = "events"`: Slack posts to `POST /slack/events` on the real web server (mounted
    through the plugin's `web_routes`); replies go out through the Slack channel's `deliver`."""
    fake = FakeSlack()
    fake.users |= {ANN.id: ANN}
    await fake.start()
    config = (
        f'[channels.slack]\nenabled = true\nmode = "events"\napi_url = "{fake.api_url}"\n'
        f"[web]\nenabled = true\nport = 0\n{PACING}"
    )
    settings = _with_secrets(
        harness_settings(tmp_path / "home", model="test:echo", config=config),
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SIGNING_SECRET,
    )
    try:
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = SlackChannel(
                settings.channels.section(SlackConfig), pilot.agent, pilot.runtime, bot_token=BOT_TOKEN
            )
            await channel.start()
            web = WebSurface(settings)
            base = await web.start(pilot.runtime, _no_key, _none_revoked)
            try:
                await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
                assert channel.link.state().link is Link.CONNECTED
                await _events_delivered(fake, pilot, f"{base.rstrip('/')}{EVENTS_PATH}")
            finally:
                await web.stop()
                await channel.stop()
    finally:
        await fake.stop()


async def _events_delivered(fake: FakeSlack, pilot: Pilot, url: str) -> None:
    payload = fake.message_event("over http", user=ANN.id, channel="D0ANN", channel_type="im")
    # Refused: unsigned, signed with another secret, and a replay older than 5 minutes.
    assert (await fake.deliver_http(url, payload, signed=False)).status_code == 401
    assert (await fake.deliver_http(url, payload, secret="not-the-secret")).status_code == 401
    stale = int(time.time()) - 301
    assert (await fake.deliver_http(url, payload, timestamp=stale)).status_code == 401
    challenge = {"type": "url_verification", "challenge": "c-123", "token": "unused"}
    answer = await fake.deliver_http(url, challenge)
    assert answer.status_code == 200 and answer.json() == {"challenge": "c-123"}
    # A stranger's 10 MB body is refused before it is read or checked, declared or not.
    async with httpx.AsyncClient(timeout=WAIT_SECONDS) as http:
        huge = await http.post(url, content=b"x" * 10_000_000, headers={"Content-Type": "application/json"})
        chunked = await http.post(url, content=_chunks(160), headers={"Content-Type": "application/json"})
    for refused in (huge, chunked):
        assert refused.status_code == 413 and "[web] max_body_bytes" in refused.text
    await pilot.settle()
    assert not fake.posted
    assert not await pilot.store.channel_messages(pilot.agent.id, SLACK_SERVICE, "D0ANN", 5)
    assert (await fake.deliver_http(url, payload)).status_code == 200
    assert (await fake.deliver_http(url, payload, retry=1)).status_code == 200
    await until(lambda: fake.posted, "the reply")
    await pilot.settle()
    assert (await fake.deliver_http(url, payload, retry=2)).status_code == 200
    await pilot.settle()
    assert [p["text"] for p in fake.posted] == ["You said: over http"]  # once, not three times


async def _chunks(count: int) -> AsyncIterator[bytes]:
    """A body with no Content-Length: `count` pieces of 64 KiB (160: 10 MB)."""
    for _ in range(count):
        yield b"z" * 65536


async def test_doctor_names_a_bad_token_and_an_unreachable_server(tmp_path: Path) -> None:
    fake = FakeSlack()
    await fake.start()
    try:
        config = f'[channels.slack]\nenabled = true\napi_url = "{fake.api_url}"\n'
        settings = harness_settings(tmp_path / "home", model="test:echo", config=config)
        secrets = settings.secrets
        good = secrets.model_copy(
            update={
                "channels": {"slack_bot_token": SecretStr(BOT_TOKEN), "slack_app_token": SecretStr(APP_TOKEN)}
            }
        )
        assert PLUGIN.probe is not None
        ok = await PLUGIN.probe(settings.model_copy(update={"secrets": good}))
        assert ok.ok, ok.detail
        bad = secrets.model_copy(
            update={
                "channels": {
                    "slack_bot_token": SecretStr("xoxb-wrong"),
                    "slack_app_token": SecretStr(APP_TOKEN),
                }
            }
        )
        refused = await PLUGIN.probe(settings.model_copy(update={"secrets": bad}))
        assert not refused.ok and "invalid_auth" in refused.detail
    finally:
        await fake.stop()
    gone = await PLUGIN.probe(settings.model_copy(update={"secrets": good}))
    assert not gone.ok and "does not answer" in gone.detail


async def test_malformed_events_are_skipped_and_never_hold_up_the_ones_after_them(tmp_path: Path) -> None:
    fake = FakeSlack()
    async with on_slack(tmp_path / "home", fake) as (pilot, _channel):
        good = fake.message_event("fine", user=ANN.id, channel="D0ANN", channel_type="im")["event"]
        poison: list[dict[str, Any]] = [
            {**good, "ts": "yesterday"},
            {**good, "ts": fake.next_ts(), "text": ["not", "text"]},
            {**good, "ts": fake.next_ts(), "channel": None},
            {**good, "ts": fake.next_ts(), "user": None},
            {"type": "message", "subtype": "message_changed", "channel": "D0ANN", "ts": fake.next_ts()},
        ]
        for event in poison:
            await fake.push(fake.callback(event))
        await fake.push({"type": "event_callback", "event": "not an object"})
        await fake.push(
            fake.message_event("after the poison", user=ANN.id, channel="D0ANN", channel_type="im")
        )
        await until(lambda: fake.posted, "the reply after the poison")
        await pilot.settle()
        assert [p["text"] for p in fake.posted] == ["You said: after the poison"]
        assert len(fake.acked) == len(poison) + 2  # every envelope acknowledged, none resent


def test_the_events_route_is_mounted_only_in_events_mode_with_its_secret(tmp_path: Path) -> None:
    base = '[channels.slack]\nenabled = true\napi_url = "http://127.0.0.1:9/api/"\n'
    assert PLUGIN.web_routes is not None
    socket_mode = harness_settings(tmp_path / "a", model="test:echo", config=base)
    assert list(PLUGIN.web_routes(socket_mode, Any)) == []  # type: ignore[arg-type]
    events = harness_settings(tmp_path / "b", model="test:echo", config=base + 'mode = "events"\n')
    with_secrets = events.model_copy(
        update={
            "secrets": events.secrets.model_copy(
                update={
                    "channels": {
                        "slack_bot_token": SecretStr(BOT_TOKEN),
                        "slack_signing_secret": SecretStr(SIGNING_SECRET),
                    }
                }
            )
        }
    )
    routes = PLUGIN.web_routes(with_secrets, Any)  # type: ignore[arg-type]
    assert [getattr(route, "path", None) for route in routes] == [EVENTS_PATH]
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        PLUGIN.web_routes(events, Any)  # type: ignore[arg-type]


def test_the_tokens_come_from_the_environment_and_a_missing_one_is_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    harness_settings(home, model="test:echo", config="[channels.slack]\nenabled = true\n")
    assert PLUGIN.connect is not None
    environ = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN}
    settings = load_settings(home, environ=environ).model_copy(update={"agents": [ADA]})
    assert PLUGIN.configured(settings)
    assert PLUGIN.connect(settings, Any).service == SLACK_SERVICE  # type: ignore[arg-type]
    without_app = load_settings(home, environ={"SLACK_BOT_TOKEN": BOT_TOKEN}).model_copy(
        update={"agents": [ADA]}
    )
    with pytest.raises(ConfigError, match="SLACK_APP_TOKEN"):
        PLUGIN.connect(without_app, Any)  # type: ignore[arg-type]
    without_bot = load_settings(home, environ={"SLACK_APP_TOKEN": APP_TOKEN}).model_copy(
        update={"agents": [ADA]}
    )
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN"):
        PLUGIN.connect(without_bot, Any)  # type: ignore[arg-type]


async def test_outreach_to_a_contact_known_only_by_identity_opens_a_dm_with_them(tmp_path: Path) -> None:
    """Ann was never met on Slack: the operator attached her Slack identity. Asked in a channel,
    the agent writes to her: `conversations.open` gives her DM, the message goes there, and it
    is stored in that DM, where her answer is heard in the same conversation. A user Slack does
    not know is a refusal the agent reads, with nothing posted."""
    fake = FakeSlack()
    with registered_double("slack-relay", relay):
        async with on_slack(tmp_path / "home", fake, model="test:slack-relay") as (pilot, _channel):
            store, agent_id = pilot.full_store, pilot.agent.id
            ann = await store.resolve_person(
                agent_id,
                Identity(service="slack", channel="slack", speaker_id=f"{TEAM}/{ANN.id}"),
                "Ann",
                "human",
                START,
            )
            ask = f"<@{BOT_USER}> tell Ann: the build is green"
            await fake.push(fake.message_event(ask, user=BEN.id, channel="C0LAB"))
            await until(lambda: len(fake.posted) == 2, "the DM and the answer in the channel")
            await pilot.settle()
            dm = dm_channel(ANN.id)
            assert fake.opened == [ANN.id]
            assert (fake.posted[0]["channel"], fake.posted[0]["text"]) == (dm, "the build is green")
            assert (
                fake.posted[1]["channel"] == "C0LAB" and f"delivered on slack:{dm}" in fake.posted[1]["text"]
            )
            stored = await pilot.store.channel_messages(agent_id, SLACK_SERVICE, dm, 5)
            assert [m.text for m in stored] == ["the build is green"]
            await fake.push(fake.message_event("thanks!", user=ANN.id, channel=dm, channel_type="im"))
            await until(lambda: len(fake.posted) == 3, "the answer to Ann")
            await pilot.settle()
            said = await pilot.store.channel_messages(agent_id, SLACK_SERVICE, dm, 5)
            # (The fake's message times are before the test clock's: order by text, not time.)
            assert sorted((m.role.value, m.text) for m in said) == [
                ("agent", "You said: thanks!"),
                ("agent", "the build is green"),
                ("user", "thanks!"),
            ]
            assert len({m.conversation_id for m in said}) == 1  # her answer is in the same conversation
            (heard,) = [m for m in said if m.role.value == "user"]
            assert heard.person_id == ann.id  # she is the contact the identity was attached to

            # A user Slack does not know (a stale identity): refused, nothing posted or stored.
            await store.resolve_person(
                agent_id,
                Identity(service="slack", channel="slack", speaker_id=f"{TEAM}/U0GONE"),
                "Cy",
                "human",
                START,
            )
            await fake.push(fake.message_event(f"<@{BOT_USER}> tell Cy: hello", user=BEN.id, channel="C0LAB"))
            await until(lambda: len(fake.posted) == 4, "the answer in the channel")
            await pilot.settle()
            assert fake.posted[3]["channel"] == "C0LAB" and "user_not_found" in fake.posted[3]["text"]
            assert fake.opened == [ANN.id]  # asked for Cy's DM, refused
            assert all(p["text"] != "hello" for p in fake.posted)


async def test_an_envelope_not_acknowledged_before_a_stop_is_sent_again_and_answered_once(
    tmp_path: Path,
) -> None:
    """The envelope is acknowledged only once its event is stored: the process stops while the
    sender's name is still being looked up (nothing stored yet), so the envelope is not
    acknowledged; Slack sends it again to the next connection, and it is answered once, however
    often it comes again."""
    fake = FakeSlack()
    async with on_slack(tmp_path / "home", fake) as (pilot, channel):
        fake.slow_lookups = [20.0]  # users.info answers long after the stop
        payload = fake.message_event("are you there?", user=ANN.id, channel="D0ANN", channel_type="im")
        envelope = await fake.push(payload)
        await until(lambda: "users.info" in fake.calls, "the name lookup under way")
        await channel.stop()  # the process stopped between receiving and storing
        assert envelope not in fake.acked and fake.posted == []
        assert await pilot.runtime.get_event(pilot.agent.id, _event_id(payload)) is None
        again = SlackChannel(
            pilot.settings.channels.section(SlackConfig),
            pilot.agent,
            pilot.runtime,
            bot_token=BOT_TOKEN,
            app_token=APP_TOKEN,
            backoff=Backoff(0.05, 0.2),
        )
        await again.start()
        try:
            await until(lambda: envelope in fake.acked, "the envelope sent again, then acknowledged")
            await until(lambda: fake.posted, "the answer")
            await pilot.settle()
            repeat = await fake.push(payload)  # as if that acknowledgement had been lost
            await until(lambda: repeat in fake.acked, "the repeat acknowledged")
            await pilot.settle()
            assert [p["text"] for p in fake.posted] == ["You said: are you there?"]
        finally:
            await again.stop()


async def test_a_reminder_asked_for_on_slack_arrives_there_when_it_comes_due(tmp_path: Path) -> None:
    """Ann asks in her DM to be reminded; the clock moves on; the reminder fires (a run of the
    agent's own, for her) and what it says reaches her in her Slack DM, once."""
    fake = FakeSlack()
    with registered_double("slack-relay", relay):
        async with on_slack(tmp_path / "home", fake, model="test:slack-relay") as (pilot, _channel):
            ask = "in 10 minutes, time to stretch"
            await fake.push(fake.message_event(ask, user=ANN.id, channel="D0ANN", channel_type="im"))
            await until(lambda: fake.posted, "the answer")
            assert fake.posted[0]["text"] == "I will."
            assert await pilot.fire(timedelta(minutes=5)) == 0  # not due yet
            assert len(fake.posted) == 1
            assert await pilot.fire(timedelta(minutes=6)) == 1
            await until(lambda: len(fake.posted) == 2, "the reminder")
            await pilot.settle()
            assert (fake.posted[1]["channel"], fake.posted[1]["text"]) == ("D0ANN", "time to stretch")
            assert "thread_ts" not in fake.posted[1] and len(fake.posted) == 2
