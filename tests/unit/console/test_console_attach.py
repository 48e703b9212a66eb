"""`/attach PATH` in the operator console (issue 35), driven by Textual's `Pilot` over the real
runtime: an attached image goes with the next message (kept, and read into the turn: the
console's model cannot see, so the agent is told plainly it got an image it could not see), a
path that is not a file is a warning and nothing is sent, and a refused file (a decompression
bomb PNG) is an error naming the limit, with nothing kept and the message not sent."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Markdown

from persyn.testing.media import bomb_png, small_png

from .kit import Mind, say, until
from .test_console_live import console, lines


async def test_attach_sends_a_file_with_the_next_message_and_refusals_are_named(
    tmp_path: Path, mind: Mind
) -> None:
    photo = tmp_path / "sky.png"
    photo.write_bytes(small_png())
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(bomb_png())
    async with console(tmp_path) as (runtime, app, pilot):
        await say(pilot, f"/attach {tmp_path / 'nowhere.png'}")
        await until(pilot, lambda: any("is not a file" in t for t in lines(app)), "the warning")

        await say(pilot, f"/attach {photo}")
        await until(pilot, lambda: "· sky.png goes with your next message." in lines(app), "the staging")
        await say(pilot, "hello")
        await until(pilot, lambda: any(isinstance(c, Markdown) for c in app.transcript.children), "a reply")
        (asked,) = [said for task, said in mind.stages if task == "respond"]
        assert "[an image (sky.png) that I could not see: " in asked and asked.endswith("hello"), asked
        dialog = await runtime.store.channel_messages(runtime.agent.id, "terminal", "terminal", 10)
        (event,) = [
            await runtime.store.get_event(runtime.agent.id, m.event_id)
            for m in dialog
            if m.role.value == "user" and m.event_id
        ]
        assert event is not None
        assert [(a.kind, a.filename, a.media_type) for a in event.attachments] == [
            ("image", "sky.png", "image/png")
        ]
        kept = runtime.settings.data_dir / "attachments"
        assert len(list(kept.rglob("att-*.json"))) == 1

        await say(pilot, f"/attach {bomb}")
        await until(pilot, lambda: "· bomb.png goes with your next message." in lines(app), "the staging")
        await say(pilot, "and this?")
        await until(pilot, lambda: any(t.startswith("· not sent: ") for t in lines(app)), "the refusal")
        (refusal,) = [t for t in lines(app) if t.startswith("· not sent: ")]
        assert "pixels" in refusal, refusal
        assert len(list(kept.rglob("att-*.json"))) == 1  # nothing of it kept
        assert len([task for task, _ in mind.stages if task == "respond"]) == 1  # and not sent
