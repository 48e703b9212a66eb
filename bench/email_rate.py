"""Mail per second one email adapter carries through the pipeline with a 0 ms model.

Starts a real Dovecot (IMAP, IDLE) and aiosmtpd on loopback (the test suite's
`tests/unit/channels/mail_server.py`), puts `--mails` mails from a contact into the agent's
INBOX, then starts the runtime (the `test:echo` model answers at once; pacing off) with the
adapter and times until every reply has reached the SMTP server: each mail is fetched over
IMAP, parsed, stored as an event, run through the pipeline, flagged \\Seen, and its reply
written to the outbox and submitted by SMTP. A second figure is a burst that arrives while the
adapter waits in IDLE. Needs Debian's dovecot-imapd.

    uv run python bench/email_rate.py [--mails 100]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / p) for p in ("", "unit/channels")]

from mail_server import PASSWORD, MailServers  # noqa: E402 (the test helpers, on the path above)

from persyn.channels.mail.channel import EmailChannel  # noqa: E402
from persyn.channels.mail.config import EmailConfig  # noqa: E402
from persyn.core.clock import ManualClock  # noqa: E402
from persyn.testing.harness import START, harness_settings, run_runtime  # noqa: E402

AGENT = "ada@agents.test"


def _mail(n: int) -> bytes:
    return (
        f"From: Bo <bo@people.test>\r\nTo: {AGENT}\r\nSubject: note {n}\r\n"
        f"Date: Mon, 07 Dec 2026 10:00:00 +0000\r\nMessage-ID: <bench{n}@people.test>\r\n"
        f"Content-Type: text/plain; charset=utf-8\r\n\r\nNote number {n}.\r\n"
    ).encode()


async def _until(count: int, servers: MailServers) -> None:
    deadline = time.monotonic() + 600
    while len(servers.sent) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(servers.sent)} of {count} replies after 600 s")
        await asyncio.sleep(0.01)


async def _run(mails: int, root: Path) -> None:
    servers = MailServers(root / "mail")
    servers.start()
    try:
        user = servers.new_user()
        for n in range(mails):
            servers.deliver(user, _mail(n))
        config = (
            f'[channels.email]\nenabled = true\naddress = "{AGENT}"\nimap_host = "127.0.0.1"\n'
            f'imap_port = {servers.imap_port}\nimap_security = "none"\nimap_user = "{user}"\n'
            f'smtp_host = "127.0.0.1"\nsmtp_port = {servers.smtp_port}\nsmtp_security = "none"\n'
            'allow = ["bo@people.test"]\npoll_seconds = 30\n'
            "[pacing.channels.email]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\n"
            "agent_min_interval_seconds = 0.0\njitter_seconds = 0.0\n"
        )
        settings = harness_settings(root / "home", model="test:echo", config=config)
        async with run_runtime(settings, clock=ManualClock(START)) as pilot:
            channel = EmailChannel(
                settings.channels.section(EmailConfig), pilot.agent, pilot.runtime, imap_password=PASSWORD
            )
            began = time.perf_counter()
            await channel.start()
            await _until(mails, servers)
            backlog = time.perf_counter() - began
            began = time.perf_counter()
            await asyncio.to_thread(lambda: [servers.deliver(user, _mail(mails + n)) for n in range(mails)])
            await _until(2 * mails, servers)
            burst = time.perf_counter() - began
            await channel.stop()
        print("| case | mails | seconds | mails/s |")
        print("|---|---|---|---|")
        print(f"| backlog read on start (UNSEEN) | {mails} | {backlog:.2f} | {mails / backlog:.1f} |")
        print(f"| burst while in IDLE (append included) | {mails} | {burst:.2f} | {mails / burst:.1f} |")
    finally:
        servers.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mails", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="persyn-email-bench-") as root:
        Path(root).chmod(0o755)  # Dovecot's own users read its configuration and users there
        asyncio.run(_run(args.mails, Path(root)))


if __name__ == "__main__":
    main()
