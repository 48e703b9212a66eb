"""`persyn chat`'s `/attach PATH` through the real CLI (issue 35): the file goes with the next
message and the agent reads it (the default double cannot see, so it says so); a path that is
not a file is a notice, and the chat goes on."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest
from persyn_cli import Persyn
from PIL import Image

pytestmark = pytest.mark.e2e


def test_an_attached_image_goes_with_the_next_message(persyn: Persyn, tmp_path: Path) -> None:
    picture = tmp_path / "shed.png"
    out = io.BytesIO()
    Image.new("RGB", (20, 20), (200, 30, 30)).save(out, "PNG")
    picture.write_bytes(out.getvalue())
    script = f"/attach {tmp_path / 'nothing.png'}\n/attach {picture}\nwhat is this?\n"
    done = persyn.run("chat", input=script)
    assert done.returncode == 0, done.stderr
    assert "is not a file" in done.stdout
    assert "shed.png goes with your next message." in done.stdout
    assert (
        "[an image (shed.png) that I could not see: my model cannot see images] what is this?" in done.stdout
    )
    with sqlite3.connect(persyn.home / "data" / "persyn.db") as db:
        (kept,) = db.execute("SELECT attachments FROM events WHERE attachments != '[]'").fetchone()
    assert '"filename":"shed.png"' in kept.replace(" ", "")
    assert len(list((persyn.home / "data" / "attachments").rglob("att-*.json"))) == 1
