"""`read_attachment` reads a kept document only from its compartment (issue 35): Sam sends a
document on the web; Eve, on IRC, has the agent's model call the tool with Sam's reference (a
leaked or guessed one), and the turn's tool result is "[a file that is not here]" with nothing
of the text — exactly what a forged reference that names nothing gets, so she cannot even tell
the file exists. Another person on another web conversation gets the same. From Sam's own
conversation the same call reads page 2. The model is the scripted double (`test:script`)
calling the tool inside the real turn's tool loop."""

from __future__ import annotations

import json
from pathlib import Path

from persyn.core.events import Attachment, Upload
from persyn.core.ids import new_id
from persyn.testing import Pilot, RecordingChannel, run_runtime

NO_DELIBERATION = "[deliberation]\nenabled = false\n"
# IRC answers at once here (no listening period, interval or delay on the test clock).
UNPACED = "[pacing]\nlisten_seconds = 0.0\nmin_interval_seconds = 0.0\njitter_seconds = 0.0\n"
SECRET = "The safe combination is 31-07-22 behind the left painting."
TEXT = ("Notes from the house meeting, nothing of interest here. " * 80) + SECRET  # 2 pages
NOT_HERE = '"text":"[a file that is not here]"'


def _script(path: Path, reference: str) -> None:
    call = {"name": "read_attachment", "args": {"reference": reference, "page": 2}}
    path.write_text(json.dumps([{"task": "respond", "match": "page two", "tool_calls": [call], "times": 1}]))


async def _ask(pilot: Pilot, service: str, channel: str, speaker: str) -> str:
    await pilot.idle()
    marker = await pilot.submit(
        pilot.event("read me page two", service=service, channel=channel, speaker=speaker)
    )
    assert marker.transmitted, marker
    return marker.text or ""


def _stripped(reply: str, reference: str) -> str:
    return reply.replace(reference, "REF")


async def test_a_stranger_on_another_channel_gets_nothing_of_a_kept_document(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text("[]")
    channels = {service: RecordingChannel(service) for service in ("test", "web", "irc")}
    async with run_runtime(
        tmp_path / "home", model=f"test:script@{rules}", config=NO_DELIBERATION + UNPACED, channels=channels
    ) as pilot:
        agent = pilot.agent.id
        kept: Attachment
        (kept,) = await pilot.runtime.keep_attachments(
            agent, "web", "sam-chat", "sam", [Upload(data=TEXT.encode(), filename="house.txt")]
        )

        _script(rules, kept.reference)  # Eve on IRC names Sam's file
        eve = await _ask(pilot, "irc", "#lobby", "eve")
        assert NOT_HERE in eve and "combination" not in eve and "house meeting" not in eve
        assert "house.txt" not in eve and '"kind":"unknown"' in eve

        _script(rules, kept.reference)  # another person, on another web conversation
        bea = await _ask(pilot, "web", "bea-chat", "bea")
        assert NOT_HERE in bea and "combination" not in bea and "house.txt" not in bea

        forged = f"att-{new_id()}"  # a well-formed reference that names nothing
        _script(rules, forged)
        nothing = await _ask(pilot, "irc", "#lobby", "eve")
        assert _stripped(nothing, forged) == _stripped(eve, kept.reference)  # the same answer

        _script(rules, f"att-../{agent}/{kept.reference}")  # a path in a reference
        assert NOT_HERE in await _ask(pilot, "irc", "#lobby", "eve")

        _script(rules, kept.reference)  # Sam, where he sent it: page 2, the secret on it
        sam = await _ask(pilot, "web", "sam-chat", "sam")
        assert SECRET in sam and '"page":2' in sam and '"pages":2' in sam
