"""Real mail servers on loopback, started once per test session: Debian's Dovecot (IMAP, a
passwd-file of test users, maildirs in a temp folder) and PyPI's aiosmtpd (SMTP) keeping what
it receives to be read back. People are written as raw RFC 5322 bytes APPENDed into Dovecot
with the standard library's `imaplib`, never the adapter's code."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from imaplib import IMAP4
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

import needs

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
WAIT_SECONDS = 60.0  # bounds a broken test only
PASSWORD = "secret"
_users = itertools.count(1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Received:
    sender: str
    recipients: list[str]
    data: bytes

    @property
    def message(self) -> EmailMessage:
        parsed = message_from_bytes(self.data, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


class _Keep:
    def __init__(self, box: list[Received]) -> None:
        self.box = box

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.box.append(Received(envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.content)))
        return "250 OK"


@dataclass
class MailServers:
    """Dovecot on 127.0.0.1:`imap_port` (`restart`: killed and started again) and aiosmtpd on
    `smtp_port`, whose received mail is `sent` (what the agent sent)."""

    directory: Path
    imap_port: int = field(default_factory=_free_port)
    smtp_port: int = field(default_factory=_free_port)
    process: subprocess.Popen[bytes] | None = None
    sent: list[Received] = field(default_factory=list[Received])
    _smtp: Controller | None = None

    def start(self) -> None:
        d = self.directory
        for sub in ("mail", "run", "state"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "users").touch()
        root = os.geteuid() == 0
        if root:
            shutil.chown(d / "mail", "dovecot", "dovecot")
        me = "" if root else os.environ.get("USER", "nobody")
        (d / "dovecot.conf").write_text(
            "protocols = imap\nlisten = 127.0.0.1\n"
            f"base_dir = {d}/run\nstate_dir = {d}/state\nlog_path = {d}/dovecot.log\n"
            "ssl = no\ndisable_plaintext_auth = no\nauth_mechanisms = plain login\n"
            f"default_internal_user = {me or 'dovecot'}\ndefault_login_user = {me or 'dovenull'}\n"
            + ("default_internal_group = dovecot\n" if root else "")
            + f"mail_location = maildir:{d}/mail/%u\n"
            f"passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN username_format=%u {d}/users\n}}\n"
            "userdb {\n  driver = static\n"
            + (
                f"  args = uid=dovecot gid=dovecot home={d}/mail/%u\n"
                if root
                else f"  args = home={d}/mail/%u\n"
            )
            + "}\n"
            f"service imap-login {{\n  chroot =\n  inet_listener imap {{\n    address = 127.0.0.1\n"
            f"    port = {self.imap_port}\n  }}\n  inet_listener imaps {{\n    port = 0\n  }}\n}}\n"
            "service anvil {\n  chroot =\n}\nfirst_valid_uid = 1\n"
        )
        self.start_imap()
        self._smtp = Controller(_Keep(self.sent), hostname="127.0.0.1", port=self.smtp_port)
        self._smtp.start()

    def start_imap(self) -> None:
        self.process = subprocess.Popen(
            [DOVECOT, "-F", "-c", str(self.directory / "dovecot.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: `stop_imap` ends every process of it
        )
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.imap_port), timeout=1) as probe:
                    if probe.recv(100).startswith(b"* OK"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"dovecot did not start; see {self.directory}/dovecot.log")
            time.sleep(0.05)

    def stop_imap(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)  # a crash, every process of it at once
            self.process.wait()
            self.process = None
            deadline = time.monotonic() + WAIT_SECONDS
            while time.monotonic() < deadline:  # every connection is closed: nobody answers
                try:
                    socket.create_connection(("127.0.0.1", self.imap_port), timeout=1).close()
                except OSError:
                    return
                time.sleep(0.05)

    def stop(self) -> None:
        self.stop_imap()
        if self._smtp is not None:
            self._smtp.stop()

    def new_user(self) -> str:
        """A fresh mailbox of its own for a test: its login name (the password is PASSWORD)."""
        name = f"agent{next(_users)}"
        with (self.directory / "users").open("a") as users:
            users.write(f"{name}:{{PLAIN}}{PASSWORD}\n")
        deadline = time.monotonic() + WAIT_SECONDS
        while True:  # Dovecot re-reads the file when it sees it changed: until it logs the user in
            with IMAP4("127.0.0.1", self.imap_port) as imap:
                try:
                    imap.login(name, PASSWORD)
                    return name
                except IMAP4.error:
                    if time.monotonic() > deadline:
                        raise
            time.sleep(0.2)

    def deliver(self, user: str, raw: bytes, flags: str = "") -> None:
        """A mail arriving in `user`'s INBOX (IMAP APPEND, as a delivery agent would put it)."""
        with IMAP4("127.0.0.1", self.imap_port) as imap:
            imap.login(user, PASSWORD)
            typ, said = imap.append("INBOX", flags or None, None, raw)
            assert typ == "OK", said

    def flags(self, user: str) -> list[str]:
        """Each message's FLAGS in `user`'s INBOX, in UID order."""
        with IMAP4("127.0.0.1", self.imap_port) as imap:
            imap.login(user, PASSWORD)
            imap.select("INBOX", readonly=True)
            typ, data = imap.uid("FETCH", "1:*", "(FLAGS)")
            assert typ == "OK", data
            return [line.decode() for line in data if isinstance(line, bytes)]

    def unflag_seen(self, user: str) -> None:
        """Every mail in `user`'s INBOX unseen again: what a crash between storing a mail's
        event and flagging it leaves behind."""
        with IMAP4("127.0.0.1", self.imap_port) as imap:
            imap.login(user, PASSWORD)
            imap.select("INBOX")
            typ, data = imap.uid("STORE", "1:*", "-FLAGS.SILENT", "(\\Seen)")
            assert typ == "OK", data

    def sent_to(self, address: str) -> list[Received]:
        return [mail for mail in self.sent if address in mail.recipients]


def running_mail_servers(directory: Path) -> Iterator[MailServers]:
    """Dovecot and aiosmtpd for a fixture to yield (skipped through `needs` without Dovecot)."""
    if not Path(DOVECOT).exists():
        needs.missing("dovecot (Debian dovecot-imapd, a real IMAP server)")
    own = None
    if os.geteuid() == 0:  # Dovecot's own users must reach the folder: pytest's tmp root is 0700
        own = directory = Path(tempfile.mkdtemp(prefix="persyn-dovecot-"))
        directory.chmod(0o755)
    directory.mkdir(parents=True, exist_ok=True)
    servers = MailServers(directory)
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
