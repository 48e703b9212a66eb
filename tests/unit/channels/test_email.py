"""The email adapter against real servers on loopback: Dovecot (IMAP, IDLE) holds the
agent's mailbox, people's mail is APPENDed into it as raw bytes, and aiosmtpd receives what
the agent sends. The model is the `test:echo` double."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from mail_server import PASSWORD, MailServers

from persyn.channels.mail.channel import EmailChannel
from persyn.channels.mail.config import EmailConfig
from persyn.core.clock import ManualClock
from persyn.testing.harness import START, Pilot, harness_settings, run_runtime

WAIT_SECONDS = 60.0
AGENT = "ada@agents.test"


def mail(
    text: str,
    *,
    sender: str = "Bo <bo@people.test>",
    subject: str = "Hello",
    message_id: str = "<m1@people.test>",
    headers: str = "",
    to: str = AGENT,
) -> bytes:
    head = (
        f"From: {sender}\r\nTo: {to}\r\nSubject: {subject}\r\nDate: Mon, 07 Dec 2026 10:00:00 +0000\r\n"
        f"Message-ID: {message_id}\r\n{headers}MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    )
    return head.encode() + text.replace("\n", "\r\n").encode()


def email_settings(
    home: Path, servers: MailServers, user: str, allow: str = '["bo@people.test"]', **extra: str
) -> Any:
    keys = "".join(f"{k} = {v}\n" for k, v in extra.items())
    config = (
        f'[channels.email]\nenabled = true\naddress = "{AGENT}"\nimap_host = "127.0.0.1"\n'
        f'imap_port = {servers.imap_port}\nimap_security = "none"\nimap_user = "{user}"\n'
        f'smtp_host = "127.0.0.1"\nsmtp_port = {servers.smtp_port}\nsmtp_security = "none"\n'
        f"allow = {allow}\npoll_seconds = 1\n{keys}"
        "[pacing.channels.email]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
        "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
    )
    return harness_settings(home, model="test:echo", config=config)


@contextlib.asynccontextmanager
async def mailbox(
    home: Path, servers: MailServers, user: str, **settings: str
) -> AsyncIterator[tuple[Pilot, EmailChannel]]:
    configured = email_settings(home, servers, user, **settings)
    async with run_runtime(configured, clock=ManualClock(START)) as pilot:
        channel = EmailChannel(
            configured.channels.section(EmailConfig), pilot.agent, pilot.runtime, imap_password=PASSWORD
        )
        await channel.start()
        try:
            yield pilot, channel
        finally:
            await channel.stop()


def body(message: Any) -> str:
    return str(message.get_content()).replace("\r\n", "\n").strip()


async def until(condition: Callable[[], object], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def all_seen(servers: MailServers, user: str, count: int) -> None:
    def seen() -> bool:
        flags = servers.flags(user)
        return len(flags) == count and all("\\Seen" in f for f in flags)

    await until(seen, f"{count} mails flagged \\Seen")


async def test_a_known_sender_is_answered_in_thread_once_across_a_restart(
    tmp_path: Path, mail_servers: MailServers
) -> None:
    user = mail_servers.new_user()
    mail_servers.deliver(user, mail("Hi Ada,\nhow are you?\n\n-- \nBo, sent from a phone"))
    async with mailbox(tmp_path / "home", mail_servers, user) as (pilot, channel):
        await until(lambda: mail_servers.sent_to("bo@people.test"), "the reply")
        reply = mail_servers.sent_to("bo@people.test")[0]
        message = reply.message
        assert reply.sender == AGENT and reply.recipients == ["bo@people.test"]
        assert message["In-Reply-To"] == "<m1@people.test>"
        assert message["References"] == "<m1@people.test>"
        assert message["Subject"] == "Re: Hello"
        assert message["Auto-Submitted"] == "auto-replied"
        assert "ada@agents.test" in str(message["From"])
        # The signature was cut before the turn: the echo model says back what it read.
        assert body(message) == "You said: Hi Ada,\nhow are you?"
        await all_seen(mail_servers, user, 1)
        # A reply in the thread is the same conversation.
        mail_servers.deliver(
            user,
            mail(
                "Fine, thanks.\n\nOn Mon, Ada wrote:\n> You said: Hi Ada",
                subject="Re: Hello",
                message_id="<m2@people.test>",
                headers="In-Reply-To: <m1@people.test>\r\nReferences: <m1@people.test>\r\n",
            ),
        )
        await until(lambda: len(mail_servers.sent_to("bo@people.test")) == 2, "the second reply")
        second = mail_servers.sent_to("bo@people.test")[1].message
        assert second["References"] == "<m1@people.test> <m2@people.test>"
        assert body(second) == "You said: Fine, thanks."
        await pilot.settle()
        conversations = {c.channel for c in await pilot.full_store.list_conversations(pilot.agent.id)}
        assert conversations == {"bo@people.test <m1@people.test>"}
        # A restarted adapter reads nothing twice: every mail is flagged seen.
        await channel.stop()
        again = EmailChannel(channel.config, pilot.agent, pilot.runtime, imap_password=PASSWORD)
        await again.start()
        mail_servers.deliver(user, mail("One more.", message_id="<m3@people.test>"))
        await until(lambda: len(mail_servers.sent_to("bo@people.test")) == 3, "the third reply")
        await pilot.settle()
        await again.stop()
        texts = [body(m.message) for m in mail_servers.sent_to("bo@people.test")]
        assert texts == ["You said: Hi Ada,\nhow are you?", "You said: Fine, thanks.", "You said: One more."]
