"""The email adapter (SPEC §3): one agent's mailbox, IMAP in and SMTP submission out.

- Inbound: one IMAP connection selects `[channels.email] mailbox`, reads every mail not yet
  flagged `\\Seen` (`UID SEARCH UNSEEN`), then waits with IDLE (when the server offers it
  and `idle` is on; at most `poll_seconds`, then it reads again) or polls every
  `poll_seconds`. Each mail is one event whose id derives from the mailbox, its UIDVALIDITY
  and its UID (kept in the event's `meta`): the store records it once, and only after
  `submit` returned is the mail flagged `\\Seen`. A restart between the two finds the mail
  unseen, sees its event stored, and only flags it: processed exactly once. A new
  UIDVALIDITY (the mailbox was recreated) gives new ids to mail nobody read yet.
- The connection is retried with `Backoff` (1 s doubling to 60 s, jittered) and its state is
  told to `LinkTracker` (`persyn channels show`, doctor, the web page): after an outage the
  mail that arrived meanwhile is unseen, so it is read on reconnecting.
- Who is answered: the sender must be an `email` identity in the agent's directory or match
  `allow` (an address, or "@domain"). Other senders are logged and flagged seen, never
  answered and never entered in the directory; so is mail a machine sent (`automated_reason`)
  and mail without a usable From or Message-ID. Mail loops are the email form of
  agent-to-agent runaways: replies carry `Auto-Submitted: auto-replied`.
- A thread is a conversation: the event's channel is "ADDRESS ROOT" (the correspondent and
  the thread's first Message-ID). A reply goes to the sender with `Re:` subject,
  `In-Reply-To` and `References`; a message the agent starts (`message_contact`) to a bare
  address (channel "ADDRESS": a contact's preferred channel "email:ADDRESS", or the address of
  their only identity, `direct_channel`) starts a thread.
- Files are kept through `RuntimeAPI.keep_attachments` (the `[senses]` limits); a refused one
  is named in the text the agent reads. A mail larger than `_MAX_FETCH` is not downloaded:
  the agent reads that it was too large.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import aioimaplib
import aiosmtplib

from persyn.channels.mail.config import EmailConfig
from persyn.channels.mail.message import ReadMail, read_mail, thread_root, write_mail
from persyn.core.config import AgentConfig
from persyn.core.errors import ChannelError, InputError
from persyn.core.events import Attachment, Event, Outbound, Speaker, Upload
from persyn.core.ids import derived_id
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Backoff, Channel, end_task

__all__ = ["EMAIL_SERVICE", "EmailChannel", "allowed_by_list"]

log = logging.getLogger(__name__)

EMAIL_SERVICE = "email"
_EPOCH = datetime(1970, 1, 2, tzinfo=UTC)
_MAX_FETCH = 60_000_000  # a mail larger than this is not downloaded ([senses] refuses its files anyway)
_COMMAND_SECONDS = 30.0
_SIZE = re.compile(rb"RFC822\.SIZE (\d+)")
_UIDVALIDITY = re.compile(rb"UIDVALIDITY (\d+)")
_INTERNALDATE = re.compile(rb'INTERNALDATE "([^"]+)"')
MESSAGE_ID_META = "email_message_id"
REFERENCES_META = "email_references"
SUBJECT_META = "email_subject"
UID_META = "email_uid"  # "MAILBOX UIDVALIDITY UID"


def allowed_by_list(address: str, allow: list[str]) -> bool:
    address = address.lower()
    return any(address == entry or (entry.startswith("@") and address.endswith(entry)) for entry in allow)


class EmailChannel(Channel):
    """The `email` service: one agent reading `config.mailbox` and writing from `config.address`."""

    service = EMAIL_SERVICE

    def __init__(
        self,
        config: EmailConfig,
        agent: AgentConfig,
        api: RuntimeAPI,
        *,
        imap_password: str,
        smtp_password: str | None = None,
    ) -> None:
        if not config.address:
            raise ChannelError("[channels.email] is enabled but has no address (the agent's From)")
        if not config.imap_host or not config.smtp_host:
            raise ChannelError("[channels.email] needs imap_host and smtp_host")
        self.config = config
        self.agent = agent
        self._api = api
        self._imap_password = imap_password
        self._smtp_password = smtp_password if smtp_password is not None else imap_password
        self._task: asyncio.Task[None] | None = None
        self._imap: aioimaplib.IMAP4 | None = None
        self.uidvalidity: str | None = None
        self.ready = asyncio.Event()
        self.link = self.track(agent.name, api.clock.now)

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self._api.attach_channel(self)
        self._task = asyncio.ensure_future(self._read_forever())

    async def stop(self) -> None:
        self._api.detach_channel(self)
        await end_task(self._task)
        await self._close()

    async def _close(self) -> None:
        imap, self._imap = self._imap, None
        if imap is not None:
            with contextlib.suppress(Exception):
                if imap.has_pending_idle():
                    imap.idle_done()
                await asyncio.wait_for(imap.logout(), 2)
            drop(imap)

    async def _read_forever(self) -> None:
        backoff = Backoff(1.0, 60.0)
        while True:
            try:
                await self._session(backoff)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                log.warning("email: IMAP %s:%s: %s", self.config.imap_host, self.config.imap_port, reason)
                self.link.lost(reason)
            await self._close()
            await asyncio.sleep(backoff.next())

    async def _session(self, backoff: Backoff) -> None:
        lost = asyncio.Event()  # the server closed the connection (or it broke)
        imap = await connect_imap(self.config, self._imap_password, on_lost=lambda _exc: lost.set())
        self._imap = imap
        response = await imap.select(self.config.mailbox)
        if response.result != "OK":
            raise ChannelError(f"mailbox {self.config.mailbox!r}: {_said(response)}")
        found = _UIDVALIDITY.search(b" ".join(_bytes(line) for line in response.lines))
        self.uidvalidity = found.group(1).decode() if found else "0"
        self.link.up()
        backoff.reset()
        self.ready.set()
        await self._api.deliver_pending(EMAIL_SERVICE)
        protocol = imap.protocol
        if protocol is None:
            raise ChannelError("the IMAP connection closed")
        idle = self.config.idle and "IDLE" in protocol.capabilities
        while True:
            await self._read_unseen(imap)
            if idle:
                await imap.idle_start(timeout=self.config.poll_seconds)
                await _first(imap.wait_server_push(timeout=self.config.poll_seconds + 5), lost.wait())
                if not lost.is_set():
                    imap.idle_done()
                    await _first(protocol.wait("SELECTED"), lost.wait(), timeout=_COMMAND_SECONDS)
            else:
                await _first(asyncio.sleep(self.config.poll_seconds), lost.wait())
            if lost.is_set():
                raise ChannelError("the server closed the connection")
            response = await imap.noop()  # a dead connection fails here, not silently
            if response.result != "OK":
                raise ChannelError(f"NOOP: {_said(response)}")

    async def _read_unseen(self, imap: aioimaplib.IMAP4) -> None:
        response = await imap.uid_search("UNSEEN", charset=None)
        if response.result != "OK":
            raise ChannelError(f"UID SEARCH UNSEEN: {_said(response)}")
        uids = sorted(
            {int(word) for line in response.lines for word in _bytes(line).split() if word.isdigit()}
        )
        for uid in uids:
            await self._read_one(imap, uid)

    async def _read_one(self, imap: aioimaplib.IMAP4, uid: int) -> None:
        sized = await imap.uid("fetch", str(uid), "(RFC822.SIZE INTERNALDATE)")
        said = b" ".join(_bytes(line) for line in sized.lines)
        size = _SIZE.search(said)
        if sized.result != "OK" or size is None:
            return  # expunged meanwhile
        key = (self.config.mailbox, self.uidvalidity or "0", str(uid))
        if int(size.group(1)) > _MAX_FETCH:
            fetched = await imap.uid("fetch", str(uid), "(BODY.PEEK[HEADER])")
            too_large = int(size.group(1))
        else:
            fetched = await imap.uid("fetch", str(uid), "(BODY.PEEK[])")
            too_large = 0
        raw = next((bytes(line) for line in fetched.lines if isinstance(line, bytearray)), None)
        if fetched.result != "OK" or raw is None:
            raise ChannelError(f"UID FETCH {uid}: {_said(fetched)}")
        mail = read_mail(raw)
        if mail.date is None or mail.date <= _EPOCH:  # no usable Date: when the server got it
            mail = replace(mail, date=_internal_date(said))
        if await self._received(mail, key, too_large):
            await self._flag_seen(imap, uid)

    async def _flag_seen(self, imap: aioimaplib.IMAP4, uid: int) -> None:
        response = await imap.uid("store", str(uid), "+FLAGS.SILENT", r"(\Seen)")
        if response.result != "OK":
            raise ChannelError(f"UID STORE {uid} +FLAGS \\Seen: {_said(response)}")

    # inbound -----------------------------------------------------------------------------
    async def _answerable(self, mail: ReadMail, speaker: Speaker) -> str:
        """Why `mail` is not to be answered ("" = it is)."""
        if not mail.sender:
            return "it has no usable From address"
        if mail.sender == self.config.address.lower():
            return "it is the agent's own"
        if mail.automated_reason:
            return f"a machine sent it ({mail.automated_reason})"
        if not mail.message_id:
            return "it has no Message-ID"
        if allowed_by_list(mail.sender, self.config.allow):
            return ""
        if await self._api.knows_speaker(self.agent.id, speaker):
            return ""
        return "the sender is neither a contact nor on [channels.email] allow"

    async def _received(self, mail: ReadMail, key: tuple[str, str, str], too_large: int) -> bool:
        """The mail's event submitted (or refused): True once nothing more is to be done."""
        event_id = derived_id(
            mail.date if mail.date is not None and mail.date > _EPOCH else _EPOCH, EMAIL_SERVICE, *key
        )
        if await self._api.get_event(self.agent.id, event_id) is not None:
            return True  # stored before a restart came between it and its \Seen flag
        speaker = Speaker(
            service=EMAIL_SERVICE,
            channel=EMAIL_SERVICE,
            speaker_id=mail.sender,
            display_name=mail.name,
            kind="human",
        )
        refusal = await self._answerable(mail, speaker)
        if refusal:
            log.warning(
                "email: not answered: mail %s from %r (%r): %s",
                " ".join(key),
                mail.sender,
                mail.subject,
                refusal,
            )
            return True
        if mail.defects:
            log.info("email: mail %s from %s has %d MIME defects", " ".join(key), mail.sender, mail.defects)
        text = mail.text
        channel = f"{mail.sender} {thread_root(mail)}"
        attachments: tuple[Attachment, ...] = ()
        if too_large:
            text = f"[a mail too large to read: {too_large} bytes] {text}".strip()
        if mail.files:
            try:
                self._api.validate_text(text)
            except InputError as exc:
                log.warning("email: dropped mail %s from %s: %s", " ".join(key), mail.sender, exc)
                return True
            uploads = [
                Upload(data=f.data, declared_type=f.media_type, filename=f.filename) for f in mail.files
            ]
            try:
                attachments = await self._api.keep_attachments(
                    self.agent.id, EMAIL_SERVICE, channel, mail.sender, uploads
                )
            except InputError as exc:
                names = ", ".join(f.filename or f.media_type for f in mail.files)
                log.warning("email: files of mail %s were not kept: %s", " ".join(key), exc)
                text = f"[files I refused: {names}: {exc}] {text}".strip()
        if not text.strip() and not attachments:
            log.info("email: mail %s from %s says nothing; not answered", " ".join(key), mail.sender)
            return True
        now = self._api.clock.now()
        event = Event(
            id=event_id,
            agent_id=self.agent.id,
            service=EMAIL_SERVICE,
            channel=channel,
            speaker=speaker,
            text=text,
            received_at=min(mail.date, now) if mail.date is not None and mail.date > _EPOCH else now,
            addressed=True,
            attachments=attachments,
            meta={
                MESSAGE_ID_META: mail.message_id,
                REFERENCES_META: " ".join((*mail.references, mail.message_id)[-20:]),
                SUBJECT_META: mail.subject,
                UID_META: " ".join(key),
            },
        )
        try:
            if text.strip() or not attachments:
                self._api.validate_text(text)
            await self._api.submit(event)
        except InputError as exc:
            log.warning("email: dropped mail %s from %s: %s", " ".join(key), mail.sender, exc)
        return True

    # the channel port ----------------------------------------------------------------------
    def serves(self, agent_id: str) -> bool:
        return agent_id == self.agent.id

    async def direct_channel(self, agent_id: str, speaker_id: str) -> str:
        """An email identity's speaker id is the address: a message to it starts a new thread."""
        if agent_id != self.agent.id:
            raise ChannelError(f"agent {agent_id!r} does not own the mailbox here")
        if "@" not in speaker_id or any(c.isspace() or c in '<>,"\r\n' for c in speaker_id):
            raise ChannelError(f"email: {speaker_id!r} is not an address to write to")
        return speaker_id

    async def deliver(self, outbound: Outbound) -> None:
        if outbound.agent_id != self.agent.id:
            raise ChannelError(f"agent {outbound.agent_id!r} does not own the mailbox here")
        to, _, root = outbound.channel.partition(" ")
        if "@" not in to or any(c.isspace() or c in '<>,"\r\n' for c in to):
            raise ChannelError(f"email: {outbound.channel!r} is not an address to write to")
        event = await self._api.get_event(outbound.agent_id, outbound.event_id)
        to_name, subject, in_reply_to, references = "", "", "", (root,) if root else ()
        if (
            event is not None
            and event.speaker is not None
            and event.service == EMAIL_SERVICE
            and event.channel == outbound.channel
        ):
            to_name = event.speaker.display_name
            subject = event.meta.get(SUBJECT_META, "")
            in_reply_to = event.meta.get(MESSAGE_ID_META, "")
            references = tuple(event.meta.get(REFERENCES_META, "").split())
        elif root:
            in_reply_to = root
        if subject and not subject.lower().startswith("re:"):
            subject = f"Re: {subject}"
        mail = write_mail(
            sender=self.config.address,
            sender_name=self.agent.name,
            to=to,
            to_name=to_name if to_name != to else "",
            subject=subject or (f"Re: {self.agent.name}" if root else f"A message from {self.agent.name}"),
            text=outbound.text,
            in_reply_to=in_reply_to,
            references=references,
            at=self._api.clock.now(),
        )
        await send_mail(self.config, self._smtp_password, mail, [to])


async def _first(*waits: Coroutine[Any, Any, object], timeout: float | None = None) -> None:
    """Until the first of `waits` ends (or `timeout`); the others are cancelled."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


async def connect_imap(
    config: EmailConfig, password: str, on_lost: Callable[[Exception | None], None] = lambda _exc: None
) -> aioimaplib.IMAP4:
    """A logged-in IMAP connection; ChannelError naming what failed."""
    where = {"host": config.imap_host, "port": config.imap_port, "timeout": _COMMAND_SECONDS}
    if config.imap_security == "tls":
        imap = aioimaplib.IMAP4(**where, conn_lost_cb=on_lost, ssl_context=ssl.create_default_context())
    else:
        imap = aioimaplib.IMAP4(**where, conn_lost_cb=on_lost)
    try:
        await imap.wait_hello_from_server()
        response = await imap.login(config.imap_user or config.address, password)
    except (OSError, TimeoutError) as exc:
        drop(imap)
        raise ChannelError(
            f"cannot reach {config.imap_host}:{config.imap_port} ({exc or type(exc).__name__})"
        ) from exc
    except BaseException:
        drop(imap)
        raise
    if response.result != "OK":
        drop(imap)
        raise ChannelError(f"IMAP login as {config.imap_user or config.address!r} refused: {_said(response)}")
    return imap


def drop(imap: aioimaplib.IMAP4) -> None:
    """The connection closed without a goodbye."""
    transport = imap.protocol.transport if imap.protocol is not None else None
    if transport is not None:
        transport.close()


async def send_mail(config: EmailConfig, password: str | None, mail: Any, recipients: list[str]) -> None:
    user = config.smtp_user or None
    try:
        await aiosmtplib.send(
            mail,
            sender=config.address,
            recipients=recipients,
            hostname=config.smtp_host,
            port=config.smtp_port,
            username=user,
            password=password if user else None,
            use_tls=config.smtp_security == "tls",
            start_tls=config.smtp_security == "starttls",
            timeout=_COMMAND_SECONDS,
        )
    except aiosmtplib.SMTPException as exc:
        raise ChannelError(f"email: SMTP {config.smtp_host}:{config.smtp_port}: {exc}") from exc


def _internal_date(said: bytes) -> datetime | None:
    found = _INTERNALDATE.search(said)
    try:
        return datetime.strptime(found.group(1).decode().strip(), "%d-%b-%Y %H:%M:%S %z") if found else None
    except ValueError:
        return None


def _bytes(line: object) -> bytes:
    return bytes(line) if isinstance(line, (bytes, bytearray)) else str(line).encode()


def _said(response: Any) -> str:
    return " ".join(_bytes(line).decode("utf-8", "replace") for line in response.lines)[-200:] or "no answer"
