"""The email adapter against real servers on loopback: Dovecot (IMAP, IDLE) holds the
agent's mailbox, people's mail is APPENDed into it as raw bytes, and aiosmtpd receives what
the agent sends. The model is the `test:echo` double."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from mail_server import PASSWORD, MailServers
from relay import relay

from persyn.channels.mail.channel import EmailChannel
from persyn.channels.mail.config import EmailConfig
from persyn.channels.mail.message import read_mail, thread_root
from persyn.core.clock import ManualClock
from persyn.core.config import load_settings
from persyn.core.ids import id_time
from persyn.ops.doctor.channels import channel_checks
from persyn.runtime.channel import Link
from persyn.store.ports.directory import Identity
from persyn.testing.harness import START, Pilot, harness_settings, run_runtime
from persyn.testing.media import small_png
from persyn.testing.models import registered_double
from persyn.tools.builtin.outreach import PREFERRED_CHANNEL

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
    home: Path, servers: MailServers, user: str, *, model: str = "test:echo", **overrides: str
) -> Any:
    keys = {
        "enabled": "true",
        "address": f'"{AGENT}"',
        "imap_host": '"127.0.0.1"',
        "imap_port": str(servers.imap_port),
        "imap_security": '"none"',
        "imap_user": f'"{user}"',
        "smtp_host": '"127.0.0.1"',
        "smtp_port": str(servers.smtp_port),
        "smtp_security": '"none"',
        "allow": '["bo@people.test"]',
        "poll_seconds": "1",
    } | overrides
    config = (
        "[channels.email]\n"
        + "".join(f"{key} = {value}\n" for key, value in keys.items())
        + "[pacing.channels.email]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
        "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
    )
    return harness_settings(home, model=model, config=config)


@contextlib.asynccontextmanager
async def mailbox(
    home: Path, servers: MailServers, user: str, *, model: str = "test:echo", **settings: str
) -> AsyncIterator[tuple[Pilot, EmailChannel]]:
    configured = email_settings(home, servers, user, model=model, **settings)
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


async def test_strangers_and_machines_are_never_answered_but_a_contact_is(
    tmp_path: Path, mail_servers: MailServers, caplog: pytest.LogCaptureFixture
) -> None:
    user = mail_servers.new_user()
    caplog.set_level(logging.WARNING, logger="persyn.channels.mail.channel")
    before = len(mail_servers.sent)
    async with mailbox(tmp_path / "home", mail_servers, user) as (pilot, channel):
        await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
        # Cy is a contact through an `email` identity in the directory (not on `allow`).
        await pilot.full_store.resolve_person(
            pilot.agent.id,
            Identity(service="email", channel="email", speaker_id="cy@people.test"),
            "Cy",
            "human",
            START,
        )
        for raw in (
            mail("Buy now", sender="Spam <eve@strangers.test>", message_id="<s1@strangers.test>"),
            mail(
                "Out of office",
                sender="Bo <bo@people.test>",
                message_id="<a1@people.test>",
                headers="Auto-Submitted: auto-replied\r\n",
            ),
            mail(
                "Digest",
                sender="Bo <bo@people.test>",
                message_id="<a2@people.test>",
                headers="Precedence: bulk\r\n",
            ),
            mail(
                "List post",
                sender="Bo <bo@people.test>",
                message_id="<a3@people.test>",
                headers="List-Id: <lab.lists.test>\r\n",
            ),
            mail(
                "Undeliverable",
                sender="MAILER-DAEMON <bo@people.test>",
                message_id="<a4@people.test>",
                headers="Return-Path: <>\r\n",
            ),
            mail("No sender at all", sender="undisclosed", message_id="<a5@people.test>"),
            mail("Hello from Cy", sender="Cy <CY@people.test>", message_id="<c1@people.test>"),
        ):
            mail_servers.deliver(user, raw)
        await until(lambda: mail_servers.sent_to("cy@people.test"), "the answer to the contact")
        await all_seen(mail_servers, user, 7)
        await pilot.settle()
        assert [m.recipients for m in mail_servers.sent[before:]] == [["cy@people.test"]]
        assert not mail_servers.sent_to("eve@strangers.test")
        people = {p.display_name for p in await pilot.full_store.list_persons(pilot.agent.id)}
        assert "Spam" not in people and "eve@strangers.test" not in people  # never entered in the directory
        logged = caplog.text
        assert "eve@strangers.test" in logged and "neither a contact nor on [channels.email] allow" in logged
        for reason in (
            "Auto-Submitted: auto-replied",
            "Precedence: bulk",
            "List-Id header",
            "a bounce",
            "no usable From",
        ):
            assert reason in logged


async def test_a_mail_stored_before_a_crash_that_left_it_unseen_is_not_answered_again(
    tmp_path: Path, mail_servers: MailServers
) -> None:
    user = mail_servers.new_user()
    mail_servers.deliver(
        user, mail("Once only", sender="Bo <bo@people.test>", message_id="<once@people.test>")
    )
    before = len(mail_servers.sent)
    async with mailbox(tmp_path / "home", mail_servers, user) as (pilot, channel):
        await until(lambda: len(mail_servers.sent) > before, "the reply")
        await all_seen(mail_servers, user, 1)
        await pilot.settle()
        await channel.stop()
        mail_servers.unflag_seen(user)
        again = EmailChannel(channel.config, pilot.agent, pilot.runtime, imap_password=PASSWORD)
        await again.start()
        await all_seen(mail_servers, user, 1)  # flagged now, its event being stored already
        mail_servers.deliver(user, mail("And a new one", message_id="<new@people.test>"))
        await until(lambda: len(mail_servers.sent) > before + 1, "the reply to the new mail")
        await pilot.settle()
        await again.stop()
    assert [body(m.message) for m in mail_servers.sent[before:]] == [
        "You said: Once only",
        "You said: And a new one",
    ]


async def test_header_injection_in_a_name_or_subject_adds_no_header(
    tmp_path: Path, mail_servers: MailServers
) -> None:
    user = mail_servers.new_user()
    before = len(mail_servers.sent)
    mail_servers.deliver(
        user,
        mail(
            "Hello",
            sender="=?utf-8?q?Bo=0D=0ABcc=3A_evil=40x=2Etest?= <bo@people.test>",
            subject="=?utf-8?q?Hi=0D=0ABcc=3A_evil=40x=2Etest=0D=0A=0D=0Abody?=",
            message_id="<inj@people.test>",
        ),
    )
    async with mailbox(tmp_path / "home", mail_servers, user):
        await until(lambda: len(mail_servers.sent) > before, "the reply")
    reply = mail_servers.sent[before]
    assert reply.recipients == ["bo@people.test"]
    head = (
        reply.data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
        if b"\r\n\r\n" in reply.data
        else reply.data.split(b"\n\n", 1)[0].split(b"\n")
    )
    names = [line.split(b":", 1)[0].lower() for line in head if line and not line[:1].isspace()]
    assert b"bcc" not in names and names.count(b"to") == 1 and names.count(b"subject") == 1
    assert reply.message["Subject"] == "Re: Hi Bcc: evil@x.test body"
    assert body(reply.message) == "You said: Hello"


async def test_malformed_mime_is_read_as_far_as_it_goes_and_a_huge_file_is_refused_by_name(
    tmp_path: Path, mail_servers: MailServers
) -> None:
    user = mail_servers.new_user()
    before = len(mail_servers.sent)
    broken = (
        b"From: Bo <bo@people.test>\r\nTo: ada@agents.test\r\nSubject: broken\r\nMessage-ID: <b1@people.test>\r\n"
        b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="XX"\r\n\r\n'
        b"--XX\r\nContent-Type: text/plain; charset=no-such-charset\r\n\r\nstill readable\r\n"
        b"--XX\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n"
        b'Content-Disposition: attachment; filename="x.bin"\r\n\r\n!!!not base64!!!\r\n'  # and no closing boundary
    )
    mail_servers.deliver(user, broken)
    huge = EmailMessage()
    huge["From"], huge["To"], huge["Subject"] = "Bo <bo@people.test>", AGENT, "a big file"
    huge["Message-ID"] = "<big@people.test>"
    huge.set_content("see the attached report")
    huge.add_attachment(
        b"%PDF-1.4\n" + bytes(30_000_000), maintype="application", subtype="pdf", filename="report.pdf"
    )
    mail_servers.deliver(user, huge.as_bytes())
    mail_servers.deliver(user, mail("after them", message_id="<after@people.test>"))
    async with mailbox(tmp_path / "home", mail_servers, user) as (pilot, _channel):
        await until(lambda: len(mail_servers.sent) >= before + 3, "three replies")
        await all_seen(mail_servers, user, 3)
        await pilot.settle()
    texts = {m.message["In-Reply-To"]: body(m.message) for m in mail_servers.sent[before:]}  # any order
    # the unknown charset read as UTF-8; the file's bad base64 kept as Python decodes it (leniently)
    assert texts["<b1@people.test>"].startswith("You said: ") and texts["<b1@people.test>"].endswith(
        "still readable"
    )
    big = texts["<big@people.test>"]
    assert big.startswith("You said: [files I refused: report.pdf:") and big.endswith(
        "see the attached report"
    )
    assert texts["<after@people.test>"] == "You said: after them"


async def test_never_deaf_after_dovecot_goes_away_and_comes_back(
    tmp_path: Path, mail_servers: MailServers
) -> None:
    user = mail_servers.new_user()
    before = len(mail_servers.sent)
    async with mailbox(tmp_path / "home", mail_servers, user) as (pilot, channel):
        await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
        mail_servers.deliver(user, mail("before the outage", message_id="<o1@people.test>"))
        await until(lambda: len(mail_servers.sent) > before, "the first reply")
        (state,) = channel.connection_states()
        assert state.link is Link.CONNECTED and state.service == "email"
        try:
            mail_servers.stop_imap()
            await until(
                lambda: channel.connection_states()[0].link in (Link.RECONNECTING, Link.FAILING),
                "the loss noticed",
            )
            shown = {s.service: s for s in pilot.runtime.channel_states()}
            assert shown["email"].link in (Link.RECONNECTING, Link.FAILING) and shown["email"].detail
        finally:
            mail_servers.start_imap()
        mail_servers.deliver(user, mail("after the outage", message_id="<o2@people.test>"))
        await until(lambda: len(mail_servers.sent) > before + 1, "the reply after the restart")
        await until(lambda: channel.connection_states()[0].link is Link.CONNECTED, "connected again")
        await all_seen(mail_servers, user, 2)
        await pilot.settle()
    texts = [body(m.message) for m in mail_servers.sent[before:]]
    assert texts == ["You said: before the outage", "You said: after the outage"]


async def test_doctor_names_a_refused_login_an_unreachable_server_and_a_good_one(
    tmp_path: Path, mail_servers: MailServers
) -> None:
    user = mail_servers.new_user()
    email_settings(tmp_path / "home", mail_servers, user)
    good = load_settings(tmp_path / "home", environ={"EMAIL_IMAP_PASSWORD": PASSWORD})
    bad = load_settings(tmp_path / "home", environ={"EMAIL_IMAP_PASSWORD": "wrong"})
    unset = load_settings(tmp_path / "home", environ={})
    ((ok,), (refused,), (missing,)) = [await channel_checks(s) for s in (good, bad, unset)]
    assert ok.ok and ok.detail == f"IMAP 127.0.0.1:{mail_servers.imap_port}: INBOX of {user}"
    assert not refused.ok and f"IMAP login as '{user}' refused" in refused.detail
    assert "EMAIL_IMAP_PASSWORD" in refused.fix
    assert (missing.ok, missing.detail) == (False, "enabled but EMAIL_IMAP_PASSWORD is not set")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    email_settings(tmp_path / "other", mail_servers, user, imap_port=str(closed))
    (gone,) = await channel_checks(
        load_settings(tmp_path / "other", environ={"EMAIL_IMAP_PASSWORD": PASSWORD})
    )
    assert not gone.ok and f"cannot reach 127.0.0.1:{closed}" in gone.detail and "imap_host" in gone.fix


async def test_message_contact_writes_to_an_email_contact_in_a_new_thread(
    tmp_path: Path, mail_servers: MailServers
) -> None:
    user = mail_servers.new_user()
    before = len(mail_servers.sent)
    async with mailbox(tmp_path / "home", mail_servers, user) as (pilot, channel):
        await asyncio.wait_for(channel.ready.wait(), WAIT_SECONDS)
        dee = await pilot.full_store.resolve_person(
            pilot.agent.id,
            Identity(service="email", channel="email", speaker_id="dee@people.test"),
            "Dee",
            "human",
            START,
        )
        await pilot.full_store.set_preference(
            pilot.agent.id, dee.id, PREFERRED_CHANNEL, "email:dee@people.test"
        )
        turn = await pilot.say("Ada, please remind Dee about the meeting")  # the turn that writes to Dee
        status = await pilot.runtime.outreach.send_to_contact(
            pilot.agent.id, turn.event.id, dee.id, "email", "dee@people.test", "The meeting is at 3."
        )
        assert status == "delivered on email:dee@people.test"
    sent = [m for m in mail_servers.sent[before:] if m.recipients == ["dee@people.test"]]
    assert len(sent) == 1
    message = sent[0].message
    assert body(message) == "The meeting is at 3."
    assert message["In-Reply-To"] is None and message["Auto-Submitted"] == "auto-generated"
    assert message["Subject"] == "A message from Ada"


def test_html_only_mail_is_read_without_its_quoted_history_or_signature() -> None:
    raw = (
        b"From: =?utf-8?q?B=C3=B6?= <Bo@People.test>\r\nSubject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n"
        b"Message-ID: <h1@people.test>\r\nIn-Reply-To: <r1@x.test>\r\nReferences: <r0@x.test> <r1@x.test>\r\n"
        b"MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
        b"<html><head><style>p{}</style></head><body><p>Hi &amp; hello</p><div>second line</div>"
        b"<blockquote>On Mon, Ada wrote: old text</blockquote></body></html>"
    )
    mail = read_mail(raw)
    assert (mail.sender, mail.name, mail.subject) == ("bo@people.test", "Bö", "Grüße")
    assert mail.text == "Hi & hello\n\nsecond line"
    assert thread_root(mail) == "<r0@x.test>" and mail.automated_reason == ""
    plain = read_mail(b"From: bo@people.test\r\n\r\nYes.\r\n\r\nOn Tue, Ada wrote:\r\n> earlier\r\n")
    assert plain.text == "Yes." and plain.message_id == "" and plain.name == "bo@people.test"
    assert read_mail(b"From: bo@people.test\r\n\r\nNo.\r\n-- \r\nBo\r\n").text == "No."


async def test_by_polling_an_attached_picture_is_kept_and_seen(
    tmp_path: Path, mail_servers: MailServers
) -> None:
    user = mail_servers.new_user()
    before = len(mail_servers.sent)
    picture = EmailMessage()
    picture["From"], picture["To"], picture["Subject"] = "Bo <bo@people.test>", AGENT, "look"
    picture["Message-ID"] = "<pic@people.test>"
    picture.set_content("what colour is this?")
    picture.add_attachment(small_png(), maintype="image", subtype="png", filename="blue.png")
    mail_servers.deliver(user, picture.as_bytes())
    async with mailbox(tmp_path / "home", mail_servers, user, idle="false") as (pilot, _channel):
        await until(lambda: len(mail_servers.sent) > before, "the reply")
        await pilot.settle()
        (conversation,) = await pilot.full_store.list_conversations(pilot.agent.id)
        said = [
            m for m in await pilot.store.recent_messages(pilot.agent.id, conversation.id, 10) if m.event_id
        ]
        event = await pilot.store.get_event(pilot.agent.id, said[0].event_id or "")
    assert event is not None and event.text.endswith("what colour is this?")
    assert id_time(event.id).year >= 2026  # no Date header: named by when the server received it
    (attachment,) = event.attachments
    assert (attachment.kind.value, attachment.media_type, attachment.filename) == (
        "image",
        "image/png",
        "blue.png",
    )
    assert conversation.channel == "bo@people.test <pic@people.test>"


async def test_a_reminder_asked_for_by_email_arrives_by_email_when_it_comes_due(
    tmp_path: Path, mail_servers: MailServers
) -> None:
    """Bo asks by mail to be reminded; the clock moves on; the reminder's run writes to him by
    mail, once (his thread, or a new one: either reaches him)."""
    user = mail_servers.new_user()
    before = len(mail_servers.sent_to("bo@people.test"))
    mail_servers.deliver(user, mail("in 10 minutes, water the plants", message_id="<r1@people.test>"))
    with registered_double("email-relay", relay):
        async with mailbox(tmp_path / "home", mail_servers, user, model="test:email-relay") as (pilot, _):
            await until(lambda: len(mail_servers.sent_to("bo@people.test")) == before + 1, "the answer")
            assert body(mail_servers.sent_to("bo@people.test")[before].message) == "I will."
            assert await pilot.fire(timedelta(minutes=5)) == 0
            assert await pilot.fire(timedelta(minutes=6)) == 1
            await until(lambda: len(mail_servers.sent_to("bo@people.test")) == before + 2, "the reminder")
            await pilot.settle()
            reminder = mail_servers.sent_to("bo@people.test")[before + 1].message
            assert body(reminder) == "water the plants"
            assert len(mail_servers.sent_to("bo@people.test")) == before + 2
