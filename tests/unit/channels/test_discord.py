"""The Discord adapter against `persyn.testing.discord.FakeDiscord`: Discord's Gateway v10 over a
real WebSocket and its REST API over real HTTP, on loopback, with the shapes of Discord's public
developer documentation. Discord itself cannot run here; the adapter is configured with the fake's
REST base and gateway URL and nothing else changes."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo
from relay import relay

from persyn.channels.discord.channel import DiscordChannel
from persyn.channels.discord.config import DiscordConfig
from persyn.channels.discord.gateway import INTENTS
from persyn.channels.discord.plugin import PLUGIN
from persyn.channels.slack.channel import SlackChannel
from persyn.channels.slack.config import SlackConfig
from persyn.core.clock import ManualClock
from persyn.runtime.channel import Backoff, Link
from persyn.store import Identity
from persyn.testing import consolidation_reply, tool_returns
from persyn.testing.discord import BOT_USER, TOKEN, FakeDiscord
from persyn.testing.harness import START, Pilot, harness_settings, run_runtime, until
from persyn.testing.media import small_png
from persyn.testing.models import DoubleReply, last_user_text, registered_double
from persyn.testing.slack import APP_TOKEN as SLACK_APP_TOKEN
from persyn.testing.slack import BOT_TOKEN as SLACK_BOT_TOKEN
from persyn.testing.slack import FakeSlack, SlackUser

WAIT_SECONDS = 60.0
ANN = {"id": "111", "username": "ann", "global_name": "Ann"}
BOB = {"id": "222", "username": "bob"}
OTHER_BOT = {"id": "333", "username": "helper", "bot": True}
GUILD, GENERAL, THREAD = "5000", "5001", "5002"
MENTION = f"<@{BOT_USER['id']}>"
SLACK_ANN = SlackUser("U0ANN", "ann", "Ann")


def _config(fake: FakeDiscord) -> str:
    return (
        f'[channels.discord]\nenabled = true\napi_url = "{fake.url}/api/v10"\n'
        f'gateway_url = "{fake.gateway_url}"\n'
        "[pacing.channels.discord]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
        "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
    )


@contextlib.asynccontextmanager
async def bot(
    home: Path, fake: FakeDiscord, model: str = "test:echo"
) -> AsyncIterator[tuple[Pilot, DiscordChannel]]:
    async with fake:
        settings = harness_settings(home, model=model, config=_config(fake))
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = DiscordChannel(
                settings.channels.section(DiscordConfig),
                pilot.agent,
                pilot.runtime,
                token=TOKEN,
                backoff=Backoff(0.05, 0.5),
            )
            await channel.start()
            try:
                await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
                yield pilot, channel
            finally:
                await channel.stop()


async def test_a_dm_and_a_mention_are_answered_and_the_rest_of_the_guild_is_only_heard(
    tmp_path: Path,
) -> None:
    fake = FakeDiscord()
    async with bot(tmp_path / "home", fake) as (pilot, channel):
        assert fake.identifies[0]["intents"] == INTENTS
        assert INTENTS & (1 << 9) and INTENTS & (1 << 12) and INTENTS & (1 << 15)
        assert channel.connection_states()[0].link is Link.CONNECTED
        fake.message("hello bot", author=ANN, channel_id="7001")  # a DM: no guild_id
        await until(lambda: fake.sent, "the DM's reply")
        assert (fake.sent[0].channel_id, fake.sent[0].content, fake.sent[0].reference) == (
            "7001",
            "You said: hello bot",
            None,
        )
        fake.message("just chatting", author=BOB, channel_id=GENERAL, guild_id=GUILD)
        asked = fake.message(f"{MENTION} what is up?", author=BOB, channel_id=THREAD, guild_id=GUILD)
        await until(lambda: any(s.channel_id == THREAD for s in fake.sent), "the reply in the thread")
        await pilot.settle()
        in_thread = [s for s in fake.sent if s.channel_id == THREAD]
        assert [(s.content, s.reference) for s in in_thread] == [(f"You said: {MENTION} what is up?", asked)]
        # Whether an overheard line is answered is the room rules' business; it is heard in its own channel.
        heard = await pilot.store.channel_messages(pilot.agent.id, "discord", GENERAL, 10)
        assert [m.text for m in heard if m.role.value == "user"] == ["just chatting"]
        sent = len(fake.sent)
        fake.message(f"{MENTION} hi from a bot", author=OTHER_BOT, channel_id=GENERAL, guild_id=GUILD)
        await until(lambda: len(fake.sent) > sent, "the reply to the other bot")
        await pilot.settle()
        people = {p.display_name: p for p in await pilot.full_store.list_persons(pilot.agent.id)}
        assert people["Ann"].kind == "human" and people["helper"].kind == "agent"


async def test_what_is_said_in_a_guild_channel_stays_out_of_a_dm_with_someone_else(tmp_path: Path) -> None:
    """Each Discord channel (guild channel, thread, DM) is its own compartment."""
    prompts: list[str] = []

    def model(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> str:
        text = last_user_text(messages)
        if "in the DM" in text:
            prompts.append(repr(messages))
        return f"You said: {text}"

    fake = FakeDiscord()
    with registered_double("discord-compartments", model):
        async with bot(tmp_path / "home", fake, model="test:discord-compartments") as (pilot, _channel):
            fake.message(f"{MENTION} the vault code is 8812", author=BOB, channel_id=GENERAL, guild_id=GUILD)
            await until(lambda: fake.sent, "the guild reply")
            await pilot.settle()
            fake.message("what do you know? (in the DM)", author=ANN, channel_id="7001")
            await until(lambda: len(fake.sent) == 2, "the DM reply")
            await pilot.settle()
    assert prompts, "the DM turn reached the model"
    assert not any("8812" in p for p in prompts)


async def test_an_outage_mid_run_is_resumed_and_a_message_after_it_is_answered(tmp_path: Path) -> None:
    fake = FakeDiscord()
    async with bot(tmp_path / "home", fake) as (pilot, channel):
        fake.message("before", author=ANN, channel_id="7001")
        await until(lambda: len(fake.sent) == 1, "the first reply")
        await fake.stop()
        await until(lambda: channel.connection_states()[0].link is not Link.CONNECTED, "the link lost")
        state = channel.connection_states()[0]
        assert state.link in (Link.RECONNECTING, Link.FAILING) and state.detail
        fake.message("during the outage", author=ANN, channel_id="7001")  # replayed on RESUME
        await fake.start()
        await until(lambda: channel.connection_states()[0].link is Link.CONNECTED, "the link back")
        fake.message("after the restart", author=ANN, channel_id="7001")
        await until(lambda: len(fake.sent) == 3, "the replies after the restart")
        await pilot.settle()
        assert sorted(s.content for s in fake.sent[1:]) == [
            "You said: after the restart",
            "You said: during the outage",
        ]
        assert fake.resumes and fake.resumes[-1]["session_id"] == "session-1"
        assert len(fake.identifies) == 1  # resumed, not identified anew


async def test_a_zombie_connection_is_replaced_and_a_refused_resume_identifies_anew(tmp_path: Path) -> None:
    fake = FakeDiscord()
    async with bot(tmp_path / "home", fake) as (_pilot, channel):
        fake.zombie = True  # heartbeats no longer acked
        await until(lambda: channel.gateway.zombies >= 1, "the missed ACK noticed")
        fake.zombie = False
        await until(lambda: fake.resumes, "the resume after the zombie")
        await until(lambda: channel.connection_states()[0].link is Link.CONNECTED, "the link back")
        fake.invalid_session_next = True
        await fake.reconnect()  # op 7: reconnect; the RESUME is refused with op 9
        await until(lambda: len(fake.identifies) == 2, "a fresh IDENTIFY")
        await until(lambda: channel.gateway.session_id == "session-2", "the new session")
        fake.message("still there?", author=ANN, channel_id="7001")
        await until(lambda: fake.sent, "the reply on the new session")
        assert fake.sent[0].content == "You said: still there?"


async def test_long_replies_are_split_and_rate_limits_waited_out(tmp_path: Path) -> None:
    fake = FakeDiscord(bucket_limit=2)
    fake.global_429 = 1
    async with bot(tmp_path / "home", fake) as (_pilot, _channel):
        words = " ".join(f"word{i}" for i in range(900))  # ~7,000 characters
        asked = fake.message(f"{MENTION} {words}", author=ANN, channel_id=GENERAL, guild_id=GUILD)
        await until(lambda: sum(len(s.content) for s in fake.sent) >= len(words), "the whole reply")
        assert len(fake.sent) >= 4
        assert all(len(s.content) <= 2000 for s in fake.sent)
        assert [s.reference for s in fake.sent] == [asked] + [None] * (len(fake.sent) - 1)
        assert " ".join(s.content for s in fake.sent).split()[-1] == "word899"
        assert fake.rate_limited >= 1  # the global 429 at least; bucket waits may avoid the rest


async def test_bad_payloads_are_logged_and_skipped_and_never_stop_the_next(
    tmp_path: Path, caplog: Any
) -> None:
    fake = FakeDiscord()
    async with bot(tmp_path / "home", fake) as (pilot, _channel):
        fake.raw({"op": 99, "d": {}})
        fake.raw(
            {"op": 0, "t": "MESSAGE_CREATE", "s": 50, "d": {"id": "1", "channel_id": "7001", "content": "x"}}
        )
        fake.raw({"op": 0, "t": "MESSAGE_CREATE", "s": 51, "d": {"id": "2", "author": ANN, "content": "y"}})
        fake.raw({"no": "op"})
        fake.message("fine", author=ANN, channel_id="7001")
        await until(lambda: fake.sent, "the good message's reply")
        await pilot.settle()
        assert [s.content for s in fake.sent] == ["You said: fine"]
        logged = caplog.text
        assert "unknown opcode 99" in logged
        assert "has no author id" in logged
        assert "channel_id is None" in logged
        assert "without an integer op" in logged


async def test_an_attachment_is_seen_and_a_30_mb_one_is_refused_unfetched(
    tmp_path: Path, caplog: Any
) -> None:
    fake = FakeDiscord()
    async with bot(tmp_path / "home", fake, model="test:vision") as (pilot, _channel):
        big = fake.attachment(
            "huge.bin", b"not really thirty megabytes", "application/octet-stream", size=30_000_000
        )
        fake.message("look at this", author=ANN, channel_id="7001", attachments=[big])
        await until(lambda: fake.sent, "the reply naming the refused file")
        assert "a file I refused" in fake.sent[0].content and "30000000" in fake.sent[0].content
        assert "huge.bin" in caplog.text and "not kept" in caplog.text
        # A size that lies: the download itself stops at the limit.
        liar = fake.attachment("liar.bin", b"\0" * 30_000_000, "application/octet-stream", size=100)
        fake.message("and that", author=ANN, channel_id="7001", attachments=[liar])
        await until(lambda: len(fake.sent) == 2, "the reply naming the second refused file")
        assert "a file I refused" in fake.sent[1].content and "download limit" in fake.sent[1].content
        photo = fake.attachment("dot.png", small_png(), "image/png")
        fake.message("and this", author=ANN, channel_id="7001", attachments=[photo])
        await until(lambda: len(fake.sent) == 3, "the reply to the photo")
        await pilot.settle()
        assert fake.sent[2].content.startswith("You said: [photo: "), fake.sent[2].content
        kept = pilot.settings.data_dir / "attachments"
        assert len(list(kept.rglob("att-*.json"))) == 1  # the photo; neither 30 MB file kept


async def test_doctor_names_a_bad_token_and_an_unreachable_server(tmp_path: Path) -> None:
    fake = FakeDiscord()
    probe_of = PLUGIN.probe
    assert probe_of is not None
    async with fake:
        settings = harness_settings(tmp_path / "home", config=_config(fake))
        good = settings.model_copy(deep=True)
        good.secrets.channels["discord_bot_token"] = SecretStr(TOKEN)
        probe = await probe_of(good)
        assert probe.ok and "ada" in probe.detail
        bad = settings.model_copy(deep=True)
        bad.secrets.channels["discord_bot_token"] = SecretStr("wrong")
        probe = await probe_of(bad)
        assert not probe.ok and "refused the bot token (HTTP 401)" in probe.detail
    probe = await probe_of(good)  # the fake stopped: nothing listens
    assert not probe.ok and "does not answer" in probe.detail


async def test_the_gateway_url_comes_from_get_gateway_bot_when_unset(tmp_path: Path) -> None:
    fake = FakeDiscord()
    async with fake:
        config = _config(fake).replace(f'gateway_url = "{fake.gateway_url}"\n', "")
        settings = harness_settings(tmp_path / "home", config=config)
        section = settings.channels.section(DiscordConfig)
        assert section.gateway_url is None
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = DiscordChannel(
                section, pilot.agent, pilot.runtime, token=TOKEN, backoff=Backoff(0.05, 0.5)
            )
            await channel.start()
            try:
                await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
                fake.message("found you", author=ANN, channel_id="7001")
                await until(lambda: fake.sent, "the reply")
                assert fake.sent[0].content == "You said: found you"
            finally:
                await channel.stop()


async def test_a_refused_token_shows_as_a_failing_link_naming_it(tmp_path: Path) -> None:
    fake = FakeDiscord()
    async with fake:
        settings = harness_settings(tmp_path / "home", config=_config(fake))
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = DiscordChannel(
                settings.channels.section(DiscordConfig),
                pilot.agent,
                pilot.runtime,
                token="not-the-token",
                backoff=Backoff(0.05, 0.2),
            )
            await channel.start()
            try:
                await until(lambda: channel.connection_states()[0].link is Link.FAILING, "the link failing")
                state = channel.connection_states()[0]
                assert "4004" in state.detail and "DISCORD_BOT_TOKEN" in state.detail
                assert not channel.ready.is_set() and fake.identifies == []
                states = {(s.service, s.link) for s in pilot.runtime.channel_states()}
                assert ("discord", Link.FAILING) in states  # what `persyn channels show` and the page read
            finally:
                await channel.stop()


async def test_the_agent_reaches_a_contact_on_discord_where_they_last_talked(tmp_path: Path) -> None:
    """Outreach: asked in a guild channel, the agent writes to Ann in her DM (`message_contact`)."""

    def model(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleReply:
        text = last_user_text(messages)
        if task == "respond" and "tell Ann" in text:
            if not tool_returns(messages):
                args = {"to": "Ann", "text": "The meeting moved to noon."}
                return DoubleReply(tool_calls=[{"name": "message_contact", "args": args}])
            return DoubleReply(text="I told Ann.")
        return DoubleReply(text=f"You said: {text}")

    fake = FakeDiscord()
    with registered_double("discord-outreach", model):
        async with bot(tmp_path / "home", fake, model="test:discord-outreach") as (pilot, _channel):
            fake.message("hi, I'm Ann", author=ANN, channel_id="7001")
            await until(lambda: fake.sent, "Ann's reply")
            await pilot.settle()
            fake.message(
                f"{MENTION} please tell Ann the news", author=BOB, channel_id=GENERAL, guild_id=GUILD
            )
            await until(
                lambda: any(s.channel_id == "7001" and "noon" in s.content for s in fake.sent), "the DM"
            )
            await until(lambda: any(s.channel_id == GENERAL for s in fake.sent), "the answer in the guild")
            await pilot.settle()
    assert [s.content for s in fake.sent if s.channel_id == GENERAL] == ["I told Ann."]


async def test_a_stop_mid_burst_stores_every_message_already_received(tmp_path: Path) -> None:
    fake = FakeDiscord()
    async with bot(tmp_path / "home", fake, model="test:instant") as (pilot, channel):
        for n in range(20):
            fake.message(
                f"burst {n}", author={"id": str(500 + n), "username": f"p{n}"}, channel_id=str(8000 + n)
            )
        await until(
            lambda: fake.ops.count(1) >= 1 and channel.gateway.seq is not None and channel.gateway.seq >= 21,
            "the burst received",
        )
        await channel.stop()
        await pilot.settle()  # the turns of the stored events run (their replies wait in the outbox)
        for n in range(20):
            rows = await pilot.store.channel_messages(pilot.agent.id, "discord", str(8000 + n), 5)
            assert [m.text for m in rows if m.role.value == "user"] == [f"burst {n}"]


async def test_outreach_to_a_contact_known_only_by_identity_opens_a_dm_with_them(tmp_path: Path) -> None:
    """Cara was never met here: the operator attached her Discord identity. Asked in the guild,
    the agent writes to her: `POST /users/@me/channels` gives her DM channel, the message goes
    and is stored there, and her answer is in the same conversation. A user Discord does not
    know (50033) is a refusal the agent reads, with nothing sent."""
    fake = FakeDiscord()
    cara = {"id": "444", "username": "cara", "global_name": "Cara"}
    fake.users[cara["id"]] = cara
    with registered_double("discord-relay", relay):
        async with bot(tmp_path / "home", fake, model="test:discord-relay") as (pilot, _channel):
            store, agent_id = pilot.full_store, pilot.agent.id
            person = await store.resolve_person(
                agent_id,
                Identity(service="discord", channel="discord", speaker_id="444"),
                "Cara",
                "human",
                START,
            )
            fake.message(
                f"{MENTION} tell Cara: the raid is at nine", author=BOB, channel_id=GENERAL, guild_id=GUILD
            )
            await until(lambda: len(fake.sent) == 2, "the DM and the answer in the guild")
            await pilot.settle()
            dm = fake.dm_channels["444"]
            assert (fake.sent[0].channel_id, fake.sent[0].content) == (dm, "the raid is at nine")
            assert fake.sent[1].channel_id == GENERAL and f"delivered on discord:{dm}" in fake.sent[1].content
            fake.message("see you there", author=cara, channel_id=dm)
            await until(lambda: len(fake.sent) == 3, "the answer to Cara")
            await pilot.settle()
            said = await pilot.store.channel_messages(agent_id, "discord", dm, 5)
            assert sorted((m.role.value, m.text) for m in said) == [
                ("agent", "You said: see you there"),
                ("agent", "the raid is at nine"),
                ("user", "see you there"),
            ]
            assert len({m.conversation_id for m in said}) == 1
            assert [m.person_id for m in said if m.role.value == "user"] == [person.id]

            await store.resolve_person(
                agent_id,
                Identity(service="discord", channel="discord", speaker_id="999"),
                "Dov",
                "human",
                START,
            )
            fake.message(f"{MENTION} tell Dov: hello", author=BOB, channel_id=GENERAL, guild_id=GUILD)
            await until(lambda: len(fake.sent) == 4, "the answer in the guild")
            await pilot.settle()
            assert fake.sent[3].channel_id == GENERAL and "Invalid Recipient" in fake.sent[3].content
            assert "999" not in fake.dm_channels and all(s.content != "hello" for s in fake.sent)


async def test_a_reminder_asked_for_on_discord_arrives_there_when_it_comes_due(tmp_path: Path) -> None:
    """Ann asks in her DM to be reminded; the clock moves on; the reminder's run speaks to her in
    that DM, once."""
    fake = FakeDiscord()
    with registered_double("discord-relay", relay):
        async with bot(tmp_path / "home", fake, model="test:discord-relay") as (pilot, _channel):
            fake.message("in 10 minutes, feed the cat", author=ANN, channel_id="7001")
            await until(lambda: fake.sent, "the answer")
            assert fake.sent[0].content == "I will."
            assert await pilot.fire(timedelta(minutes=5)) == 0
            assert await pilot.fire(timedelta(minutes=6)) == 1
            await until(lambda: len(fake.sent) == 2, "the reminder")
            await pilot.settle()
            assert [(s.channel_id, s.content) for s in fake.sent][1:] == [("7001", "feed the cat")]


_NOTE = re.compile(r"note (\w+)'s (\w+): (.+)")
_ASK = re.compile(r"what is (\w+)'s (\w+)\?")


def _facts(task: str | None, messages: list[ModelMessage], info: AgentInfo) -> DoubleReply:
    """ "note Ann's tea: oolong" keeps a quick fact; "what is Ann's tea?" reads them back."""
    text, returned = last_user_text(messages), tool_returns(messages)
    note, ask = _NOTE.search(text), _ASK.search(text)
    if task == "respond" and (note or ask) and returned:
        return DoubleReply(text=f"Facts: {returned[-1].content}")
    if task == "respond" and note:
        args = {"about": note[1], "key": note[2], "value": note[3]}
        return DoubleReply(tool_calls=[{"name": "set_fact", "args": args}])
    if task == "respond" and ask:
        return DoubleReply(tool_calls=[{"name": "get_facts", "args": {"about": ask[1]}}])
    return consolidation_reply(task) or DoubleReply(text=f"You said: {text}")


async def test_one_contact_on_slack_and_discord_is_known_on_both_and_a_stranger_learns_nothing(
    tmp_path: Path,
) -> None:
    """Ann tells the agent something in her Slack DM; the operator attaches her Discord identity
    to her contact, and her Slack DM and Discord DM are one compartment (`channel_groups`).
    On Discord she is the same contact, and what she said on Slack is there; Bob, a stranger
    in his own Discord DM, asking about her, gets none of it."""
    slack, discord = FakeSlack(), FakeDiscord()
    slack.users[SLACK_ANN.id] = SLACK_ANN
    await slack.start()
    config = (
        _config(discord)
        + f'[channels.slack]\nenabled = true\napi_url = "{slack.api_url}"\n'
        + "[pacing.channels.slack]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
        + "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
        + '[memory]\nchannel_groups = [["slack:D0ANN", "discord:7001"]]\n'
    )
    try:
        async with discord, contextlib.AsyncExitStack() as stack:
            stack.enter_context(registered_double("facts", _facts))
            settings = harness_settings(tmp_path / "home", model="test:facts", config=config)
            pilot = await stack.enter_async_context(run_runtime(settings, clock=ManualClock(START)))
            on_slack = SlackChannel(
                settings.channels.section(SlackConfig),
                pilot.agent,
                pilot.runtime,
                bot_token=SLACK_BOT_TOKEN,
                app_token=SLACK_APP_TOKEN,
                backoff=Backoff(0.05, 0.2),
            )
            on_discord = DiscordChannel(
                settings.channels.section(DiscordConfig), pilot.agent, pilot.runtime, token=TOKEN
            )
            for channel in (on_slack, on_discord):
                await channel.start()
                stack.push_async_callback(channel.stop)
            await asyncio.wait_for(on_slack.ready.wait(), WAIT_SECONDS)
            await asyncio.wait_for(on_discord.ready.wait(), WAIT_SECONDS)

            note = "note Ann's tea: oolong, no sugar"
            await slack.push(slack.message_event(note, user=SLACK_ANN.id, channel="D0ANN", channel_type="im"))
            await until(lambda: slack.posted, "the fact noted on Slack")
            await pilot.settle()
            (ann,) = await pilot.full_store.list_persons(pilot.agent.id)
            await pilot.full_store.attach_identity(
                pilot.agent.id, ann.id, Identity(service="discord", channel="discord", speaker_id=ANN["id"])
            )

            discord.message("what is Ann's tea?", author=ANN, channel_id="7001")
            await until(lambda: len(discord.sent) == 1, "the answer to Ann on Discord")
            await pilot.settle()
            discord.message("what is Ann's tea?", author=BOB, channel_id="7002")
            await until(lambda: len(discord.sent) == 2, "the answer to Bob")
            await pilot.settle()
            to_ann, to_bob = discord.sent
            assert to_ann.channel_id == "7001" and "oolong, no sugar" in to_ann.content
            assert to_bob.channel_id == "7002" and "oolong" not in to_bob.content
            people = {p.display_name: p for p in await pilot.full_store.list_persons(pilot.agent.id)}
            assert people["Ann"].id == ann.id and len(people) == 2  # Ann once, and Bob
    finally:
        await slack.stop()
