"""Reading a mail and writing one, with the standard library's `email` package only.

- `read_mail`: the sender, the threading headers, the text a person wrote (`text/plain`, else
  `text/html` converted), with quoted history ("> ", "On ... wrote:", a forwarded or original
  message) and the signature (after "-- ") cut off, since the thread's earlier messages are
  already dialog; the files it carries; and whether it was sent by a machine
  (`automated_reason`: `Auto-Submitted`, `Precedence: bulk|list|junk`, list headers, a bounce).
  Malformed MIME never raises: what can be read is read, the defects are counted.
- `write_reply`: a message with the agent's From, the correspondent's To and the threading
  headers (`In-Reply-To`, `References`); every header value is cleaned of line breaks and
  control characters first, so a name or subject carrying "\\r\\nBcc: ..." adds no header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import message_from_bytes, policy
from email.headerregistry import Address
from email.message import EmailMessage, Message
from email.utils import format_datetime, getaddresses, make_msgid, parsedate_to_datetime
from html.parser import HTMLParser

__all__ = ["MailFile", "ReadMail", "clean_header", "read_mail", "thread_root", "write_mail"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_MSGID = re.compile(r"<[^<>\s]{1,900}>")
_QUOTE_INTRO = re.compile(
    r"^(On .{0,300} wrote:|-{2,} ?(Original|Forwarded) [Mm]essage ?-{2,}|_{10,}|From: .+)\s*$"
)
_BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "table"}


@dataclass(frozen=True)
class MailFile:
    filename: str | None
    media_type: str
    data: bytes


@dataclass(frozen=True)
class ReadMail:
    sender: str  # the From address, lower-cased ("" when there is none usable)
    name: str  # the From display name, cleaned (the address when there is none)
    subject: str
    message_id: str  # "<...>", or "" when missing or malformed
    in_reply_to: str
    references: tuple[str, ...]
    date: datetime | None
    text: str
    files: tuple[MailFile, ...] = ()
    automated_reason: str = ""  # why no one should answer it ("" = a person wrote it)
    defects: int = 0
    extra: dict[str, str] = field(default_factory=dict[str, str])


def clean_header(value: str, limit: int = 200) -> str:
    """`value` as one header-safe line: line breaks and control characters become spaces."""
    return " ".join(_CONTROL.sub(" ", value).split())[:limit]


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style", "head"):
            self._skip += 1
        elif tag in _BLOCKS:
            self.parts.append("\n")
        if tag == "blockquote":
            self.parts.append("\x00quote\x00")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "head"):
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_text(markup: str) -> str:
    """The words of an HTML body, paragraphs kept; everything from a `<blockquote>` on (the
    quoted history mail clients put there) is left out."""
    parser = _Text()
    parser.feed(markup)
    parser.close()
    text = "".join(parser.parts).split("\x00quote\x00")[0]
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def without_history(text: str) -> str:
    """What the writer wrote: up to the quoted history or the signature."""
    kept: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.rstrip() == "--":  # the signature separator, "-- "
            break
        if line.lstrip().startswith(">") or _QUOTE_INTRO.match(line.strip()):
            break
        kept.append(line.rstrip())
    return "\n".join(kept).strip()


def _automated(message: Message) -> str:
    auto = str(message.get("Auto-Submitted", "") or "").strip().lower()
    if auto and auto != "no":
        return f"Auto-Submitted: {clean_header(auto, 40)}"
    precedence = str(message.get("Precedence", "") or "").strip().lower()
    if precedence in ("bulk", "list", "junk", "auto_reply"):
        return f"Precedence: {precedence}"
    for header in ("List-Id", "List-Unsubscribe", "List-Post", "X-Autoreply", "X-Autorespond"):
        if message.get(header) is not None:
            return f"{header} header"
    if message.get_content_type() == "multipart/report":
        return "a delivery report"
    if str(message.get("Return-Path", "") or "").strip() == "<>":
        return "an empty Return-Path (a bounce)"
    return ""


def _ids(value: object) -> tuple[str, ...]:
    return tuple(_MSGID.findall(str(value or "")))


def thread_root(mail: ReadMail) -> str:
    """The thread a mail belongs to: the first of its `References`, else what it replies to,
    else itself."""
    if mail.references:
        return mail.references[0]
    return mail.in_reply_to or mail.message_id


def _payload(part: Message) -> bytes:
    try:
        data = part.get_payload(decode=True)
    except Exception:
        return b""
    return data if isinstance(data, bytes) else b""


def _decoded(part: Message) -> str:
    charset = part.get_content_charset() or "utf-8"
    data = _payload(part)
    try:
        return data.decode(charset, "replace")
    except LookupError:  # an unknown charset name
        return data.decode("utf-8", "replace")


def read_mail(raw: bytes) -> ReadMail:
    message = message_from_bytes(raw, policy=policy.compat32)
    defects = len(message.defects)
    try:
        (name, address), *_ = getaddresses([str(message.get("From", "") or "")]) or [("", "")]
    except Exception:
        name, address = "", ""
    address = address.strip().lower()
    if "@" not in address or any(c.isspace() or c in '<>,"\\' for c in address) or len(address) > 254:
        address = ""
    plain: list[str] = []
    markup: list[str] = []
    files: list[MailFile] = []
    for part in message.walk():
        if part.is_multipart():
            defects += len(part.defects)
            continue
        kind = part.get_content_type()
        disposition = str(part.get("Content-Disposition", "") or "").split(";")[0].strip().lower()
        filename = part.get_filename()
        if disposition == "attachment" or (filename and kind not in ("text/plain", "text/html")):
            files.append(
                MailFile(clean_header(str(filename), 120) if filename else None, kind, _payload(part))
            )
        elif kind == "text/plain":
            plain.append(_decoded(part))
        elif kind == "text/html":
            markup.append(_decoded(part))
    text = "\n\n".join(without_history(t) for t in plain) if plain else ""
    if not text.strip() and markup:
        text = "\n\n".join(without_history(html_text(m)) for m in markup)
    date: datetime | None
    try:
        date = parsedate_to_datetime(str(message.get("Date", "") or ""))
        date = date if date.tzinfo is not None else date.replace(tzinfo=UTC)
    except (TypeError, ValueError, IndexError):
        date = None
    subject = clean_header(_header_text(message.get("Subject", "")), 300)
    message_id = next(iter(_ids(message.get("Message-ID"))), "")
    return ReadMail(
        sender=address,
        name=clean_header(_header_text(name), 120) or address,
        subject=subject,
        message_id=message_id,
        in_reply_to=next(iter(_ids(message.get("In-Reply-To"))), ""),
        references=_ids(message.get("References")),
        date=date,
        text=text.strip(),
        files=tuple(files),
        automated_reason=_automated(message),
        defects=defects,
    )


def _header_text(value: object) -> str:
    from email.header import decode_header, make_header

    try:
        return str(make_header(decode_header(str(value or ""))))
    except Exception:
        return str(value or "")


def write_mail(
    *,
    sender: str,
    sender_name: str,
    to: str,
    to_name: str,
    subject: str,
    text: str,
    in_reply_to: str = "",
    references: tuple[str, ...] = (),
    at: datetime,
) -> EmailMessage:
    """One plain-text mail; every value that came from a mail is cleaned to one line first."""
    mail = EmailMessage(policy=policy.SMTP)
    mail["From"] = Address(display_name=clean_header(sender_name, 80), addr_spec=sender)
    mail["To"] = Address(display_name=clean_header(to_name, 80), addr_spec=to)
    mail["Subject"] = clean_header(subject, 250) or "(no subject)"
    mail["Date"] = format_datetime(at)
    mail["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    # RFC 3834: an autoresponder (another agent's included) does not answer it
    mail["Auto-Submitted"] = "auto-replied" if in_reply_to else "auto-generated"
    if in_reply_to and _MSGID.fullmatch(in_reply_to):
        mail["In-Reply-To"] = in_reply_to
    refs = [r for r in references if _MSGID.fullmatch(r)][-20:]
    if refs:
        mail["References"] = " ".join(refs)
    mail.set_content(text)
    return mail
