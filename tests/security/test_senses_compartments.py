"""A kept original is reachable by reference only from the conversation it was sent in (issue
35): an event on another channel that names it (a forged or replayed reference) reads "[a file that is no longer kept]",
and the model is never shown the image; the library answers a stranger's channel exactly as it
answers a reference that does not exist; a channel grouped with it (`[memory] channel_groups`)
shares it, as it shares memory and the agent's images."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from persyn.core.events import Upload
from persyn.core.ids import new_id
from persyn.core.records import channel_key
from persyn.memory.access import eligible_channels
from persyn.testing import run_runtime

NO_DELIBERATION = "[deliberation]\nenabled = false\n"


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), (220, 30, 30)).save(out, "PNG")
    return out.getvalue()


async def test_a_reference_from_another_channel_is_not_seen(tmp_path: Path) -> None:
    config = NO_DELIBERATION + '[memory]\nchannel_groups = [["test:ann-dm", "test:shared"]]\n'
    async with run_runtime(tmp_path / "home", model="test:vision", config=config) as pilot:
        runtime, agent = pilot.runtime, pilot.agent.id
        (kept,) = await runtime.keep_attachments(agent, "test", "ann-dm", "ann", [Upload(data=_png())])
        library = runtime.senses.library
        assert library.get(agent, kept.reference, [channel_key("test", "ann-dm")]) is not None
        groups = pilot.settings.memory.channel_groups
        stranger = eligible_channels(channel_key("test", "stranger-dm"), groups)
        assert library.get(agent, kept.reference, stranger) is None
        grouped = eligible_channels(channel_key("test", "shared"), groups)
        assert library.get(agent, kept.reference, grouped) is not None
        assert library.get(new_id(), kept.reference, [channel_key("test", "ann-dm")]) is None  # another agent
        assert library.get("../" + agent, kept.reference, [channel_key("test", "ann-dm")]) is None
        assert library.get(agent, "att-../../etc/passwd", [channel_key("test", "ann-dm")]) is None

        await pilot.idle()
        forged = pilot.event("what is in it?", channel="stranger-dm", speaker="eve").model_copy(
            update={"attachments": (kept,)}
        )
        marker = await pilot.submit(forged)
        assert marker.text == "You said: [a file that is no longer kept] what is in it?"
        assert "caption" not in [record.stage for record in pilot.usage()]  # never shown to a model
        # From its own channel, the same reference is seen.
        await pilot.idle()
        own = pilot.event("and now?", channel="ann-dm", speaker="ann").model_copy(
            update={"attachments": (kept,)}
        )
        marker = await pilot.submit(own)
        assert marker.text == "You said: [photo: a 32×32 picture, all red] and now?"
