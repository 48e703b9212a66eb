"""`generate_image` / `edit_image` through the real runtime (ARCHITECTURE §21), against a fake
of the OpenAI images API on loopback (`persyn.testing.images`, real HTTP, the documented wire
format). The tool answers before the image exists (the fake holds its answer until the test
opens it: ordering by events, not by time); the image arrives later through the outbox,
attached where the channel shows images; the render is one usage record of the conversation
that asked, priced per image; a failed render is news for the agent and no record; an image
is visible only from the channel (compartment) it was made on; with no `[images]` the tools
are absent."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from persyn.core.events import Upload
from persyn.schedule import at_trigger, set_reminder
from persyn.testing import Pilot, RecordingChannel, run_runtime, tool_returns
from persyn.testing.images import FakeImagesApi, serve_fake_images
from persyn.testing.models import DoubleReply, last_user_text, registered_double
from persyn.testing.requests import request_text
from persyn.tools.images.generate import sniff_mime

PRICED = '[prices.images]\n"gpt-image-1" = 0.04\n"gpt-image-1@1024x1536" = 0.06\n'


class Painter:
    """The respond model: "draw X" calls generate_image, "edit REF: X" calls edit_image;
    anything else is answered plainly. Keeps what it was offered, told and sent."""

    def __init__(self) -> None:
        self.offered: list[list[str]] = []
        self.results: list[dict[str, Any]] = []
        self.requests: list[str] = []

    def __call__(self, task: str | None, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if task != "respond":
            return DoubleReply(text="ok")
        self.offered.append(sorted(t.name for t in info.function_tools))
        self.requests.append(request_text(messages, info))
        results = tool_returns(messages)
        if results:
            content = str(results[0].content)
            self.results.append(json.loads(content) if content.startswith("{") else {"error": content})
            reference = self.results[-1].get("reference")
            return DoubleReply(text=f"On it: {reference}." if reference else f"Failed: {content}")
        said = last_user_text(messages)
        if "draw a sunrise" in said:  # a reminder's run
            said = "draw a sunrise"
        if said.startswith("draw "):
            args: dict[str, Any] = {"prompt": said.removeprefix("draw ")}
            if said.endswith("tall"):
                args["size"] = "1024x1536"
            return DoubleReply(tool_calls=[{"name": "generate_image", "args": args}])
        if said.startswith("edit "):
            named, _, prompt = said.removeprefix("edit ").partition(": ")
            reference, *more = named.split(" + ")  # "edit img-A + att-B: …" composes several
            args = {"reference": reference, "prompt": prompt, **({"more_references": more} if more else {})}
            return DoubleReply(tool_calls=[{"name": "edit_image", "args": args}])
        return DoubleReply(text="Noted.")


@pytest.fixture
def painter() -> Iterator[Painter]:
    instance = Painter()
    with registered_double("painter", instance):
        yield instance


def _runtime(
    tmp_path: Path, api: FakeImagesApi | None, extra: str = "", *, shows_images: bool = True
) -> AbstractAsyncContextManager[Pilot]:
    images = f'[images]\nbase_url = "{api.url}"\ntimeout_seconds = 2.0\n' if api is not None else ""
    return run_runtime(
        tmp_path / "home",
        model="test:painter",
        config="[deliberation]\nenabled = false\n" + images + extra,
        channels={"test": RecordingChannel(shows_images=shows_images)},
    )


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


async def _news(pilot: Pilot, count: int) -> None:
    async def arrived() -> bool:
        return len(pilot.channel.delivered) >= count

    await pilot.wait_for(arrived, f"{count} delivered messages")


async def test_the_tool_answers_at_once_and_the_image_arrives_later_through_the_outbox(
    tmp_path: Path, painter: Painter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-images")
    with serve_fake_images() as api:
        async with _runtime(tmp_path, api, PRICED) as pilot:
            api.hold()  # the provider answers nothing until released
            event, marker = await pilot.say("draw a fox in the snow")
            (ack,) = painter.results
            reference = ack["reference"]
            assert ack["status"] == "rendering" and reference.startswith("img-")
            # The reply is out, while the render has not been answered.
            assert marker.text == f"On it: {reference}."
            assert [o.text for o in pilot.channel.delivered] == [marker.text]
            assert not api.gate.is_set()
            assert [r for r in pilot.usage() if r.stage == "image"] == []
            api.release()
            await _news(pilot, 2)
            await pilot.settle()

            news = pilot.channel.delivered[1]
            assert news.text == f'(The image you asked for is ready: {reference} — "a fox in the snow".)'
            (image,) = news.images
            assert image.reference == reference and image.mime == "image/png"
            assert sniff_mime(_read(image.path)) == "image/png"
            assert Path(image.path).parent == pilot.settings.data_dir / "images"
            (request,) = api.requests
            assert request.endpoint == "generations"
            assert request.fields == {
                "model": "gpt-image-1",
                "prompt": "a fox in the snow",
                "n": "1",
                "size": "1024x1024",
            }
            assert request.authorization == "Bearer sk-test-images"

            records = pilot.usage()
            (rendered,) = [r for r in records if r.stage == "image"]
            respond = [r for r in records if r.stage == "respond"]
            assert (rendered.model, rendered.units, rendered.cost_usd) == ("gpt-image-1", 1, 0.04)
            assert (rendered.input_tokens, rendered.output_tokens) == (0, 0)
            assert rendered.trigger == respond[0].trigger == "message"  # the turn that asked for it
            assert (rendered.agent_id, rendered.conversation_id, rendered.thread_id, rendered.channel) == (
                pilot.agent.id,
                respond[0].conversation_id,
                event.id,
                "room",
            )
            # The agent's next turn reads the news in its dialog.
            await pilot.say("is it done?")
            assert f"The image you asked for is ready: {reference}" in painter.requests[-1]
            # The tool was offered from the start; nothing was rendered twice.
            assert {"edit_image", "generate_image"} <= set(painter.offered[0])
            assert len(api.requests) == 1
            assert [r for r in pilot.usage() if r.stage == "image"] == [rendered]


async def test_an_unpriced_render_is_counted_not_costed_and_the_size_picks_the_price(
    tmp_path: Path, painter: Painter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with serve_fake_images() as api:
        async with _runtime(tmp_path, api, '[prices.images]\n"gpt-image-1@1024x1536" = 0.06\n') as pilot:
            await pilot.say("draw a lighthouse")
            await pilot.say("draw a lighthouse, tall")
            await _news(pilot, 4)
            await pilot.settle()
            images = sorted(
                (r.units, r.cost_usd is None, r.cost_usd) for r in pilot.usage() if r.stage == "image"
            )
            assert images == [(1, False, 0.06), (1, True, None)]
            assert [r.fields["size"] for r in api.requests] == ["1024x1024", "1024x1536"]
            assert api.requests[0].authorization is None  # no key in the environment: none sent


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("refuse", "the images API refused (HTTP 400): Your request was rejected by the safety system."),
        ("malformed", "the images API answered HTTP 200 with malformed JSON"),
        ("huge", "the images API's answer is 11000042 bytes; at most 10000000"),
        ("huge_unsized", "the images API's answer is over 10000000 bytes"),
        ("not_an_image", "the images API's b64_json is not a PNG, JPEG, WebP or GIF image"),
        ("hang", "no image within 2 s"),
    ],
)
async def test_a_failed_render_is_news_for_the_agent_and_no_usage_record(
    tmp_path: Path, painter: Painter, mode: Any, why: str
) -> None:
    with serve_fake_images(mode) as api:
        async with _runtime(tmp_path, api, PRICED) as pilot:
            await pilot.say("draw a storm")
            reference = painter.results[0]["reference"]
            await _news(pilot, 2)
            await pilot.settle()
            news = pilot.channel.delivered[1]
            assert news.text == f"(The image you asked for, {reference}, could not be made: {why})"
            assert news.images == ()
            assert [r for r in pilot.usage() if r.stage == "image"] == []
            assert not list((pilot.settings.data_dir / "images").glob("img-*"))
            await pilot.say("so?")
            assert "could not be made" in painter.requests[-1]


async def test_an_image_is_seen_and_edited_only_from_its_channel(tmp_path: Path, painter: Painter) -> None:
    with serve_fake_images() as api:
        async with _runtime(tmp_path, api, PRICED) as pilot:
            await pilot.say("draw a red door", channel="room-a")
            reference = painter.results[0]["reference"]
            await _news(pilot, 2)
            await pilot.settle()
            original = _read(pilot.channel.delivered[1].images[0].path)

            # A stranger elsewhere: the reference is answered like one that does not exist.
            await pilot.say(f"edit {reference}: paint it blue", channel="room-b", speaker="mallory")
            assert painter.results[-1] == {
                "error": f"Tool 'edit_image' failed: there is no image {reference!r} that you can see here"
            }
            assert len(api.requests) == 1
            # Naming it in a message on that channel attaches nothing either.
            assert all(not o.images for o in pilot.channel.delivered[2:])

            # On its own channel the agent edits it: the edit sends the image and makes a new one.
            await pilot.say(f"edit {reference}: paint it blue", channel="room-a")
            edited = painter.results[-1]["reference"]
            assert edited != reference
            await _news(pilot, 5)
            await pilot.settle()
            request = api.requests[-1]
            assert (request.endpoint, request.image, request.fields["prompt"]) == (
                "edits",
                original,
                "paint it blue",
            )
            news = pilot.channel.delivered[-1]
            assert news.channel == "room-a" and news.images[0].reference == edited
            assert len([r for r in pilot.usage() if r.stage == "image"]) == 2


async def test_an_edit_composes_a_made_image_with_one_received_only_on_their_channel(
    tmp_path: Path, painter: Painter
) -> None:
    """SPEC §4.6 compositing from reference images: `edit_image` takes an image someone sent
    (`att-…`) beside one it made, access-checked by the run's channel like `img-…`; the images
    API receives every one, in order."""
    face = io.BytesIO()
    Image.new("RGB", (40, 40), (250, 200, 160)).save(face, "PNG")
    with serve_fake_images() as api:
        async with _runtime(tmp_path, api, PRICED) as pilot:
            await pilot.say("draw a red door", channel="room-a")
            made = painter.results[0]["reference"]
            await _news(pilot, 2)
            await pilot.settle()
            original = _read(pilot.channel.delivered[1].images[0].path)
            (sent,) = await pilot.runtime.keep_attachments(
                pilot.agent.id, "test", "room-a", "sam", [Upload(data=face.getvalue())]
            )
            document = await pilot.runtime.keep_attachments(
                pilot.agent.id, "test", "room-a", "sam", [Upload(data=b"a note", filename="n.txt")]
            )

            # A stranger elsewhere cannot use what Sam sent, alone or beside an image of theirs.
            await pilot.say(f"edit {sent.reference}: on a mug", channel="room-b", speaker="mallory")
            assert painter.results[-1] == {
                "error": f"Tool 'edit_image' failed: there is no image {sent.reference!r} that you can see here"
            }
            # A received file that is not an image is no image either.
            await pilot.say(f"edit {made} + {document[0].reference}: together", channel="room-a")
            assert painter.results[-1] == {
                "error": f"Tool 'edit_image' failed: there is no image {document[0].reference!r} "
                "that you can see here"
            }
            assert len(api.requests) == 1

            await pilot.say(f"edit {made} + {sent.reference}: put the face on the door", channel="room-a")
            edited = painter.results[-1]["reference"]
            assert edited.startswith("img-")
            await _news(pilot, 6)
            await pilot.settle()
            request = api.requests[-1]
            assert (request.endpoint, request.images, request.fields["prompt"]) == (
                "edits",
                (original, face.getvalue()),
                "put the face on the door",
            )
            assert pilot.channel.delivered[-1].images[0].reference == edited


async def test_a_channel_that_shows_no_images_gets_a_line_with_the_reference_not_the_host_file(
    tmp_path: Path, painter: Painter
) -> None:
    with serve_fake_images() as api:
        async with _runtime(tmp_path, api, shows_images=False) as pilot:
            await pilot.say("draw a kite")
            reference = painter.results[0]["reference"]
            await _news(pilot, 2)
            news = pilot.channel.delivered[1]
            assert (pilot.settings.data_dir / "images" / f"{reference}.png").is_file()
            assert news.text.endswith(f"\n[image {reference}]") and news.images == ()
            assert str(pilot.settings.data_dir) not in news.text


async def test_without_images_configured_the_tools_are_absent(tmp_path: Path, painter: Painter) -> None:
    async with _runtime(tmp_path, None) as pilot:
        await pilot.say("hello")
        assert not {"generate_image", "edit_image"} & set(painter.offered[0])


async def test_a_self_initiated_run_past_its_autonomy_budget_gets_no_render(
    tmp_path: Path, painter: Painter
) -> None:
    """The render is admitted like a model call: a reminder's run whose day's budget its own
    respond call used up asks for an image, and nothing is sent to the provider."""
    with serve_fake_images() as api:
        async with _runtime(tmp_path, api, PRICED + "[autonomy]\ndaily_token_budget = 1\n") as pilot:
            now = pilot.clock.now()
            await set_reminder(
                pilot.full_store,
                pilot.agent.id,
                "draw a sunrise",
                at_trigger(now + timedelta(minutes=1), now),
                now,
            )
            assert await pilot.fire(timedelta(minutes=2)) == 1
            await pilot.settle()
            assert api.requests == []
            assert [r for r in pilot.usage() if r.stage == "image"] == []
            said = [
                message
                for conversation in await pilot.full_store.list_conversations(pilot.agent.id)
                for message in await pilot.store.recent_messages(pilot.agent.id, conversation.id, 20)
            ]
            (news,) = [m.text for m in said if "could not be made" in m.text]
            assert re.fullmatch(
                r"\(The image you asked for, img-\w{26}, could not be made: stopped: the autonomy budget "
                r"of 1 tokens per 24 hours is used \(\d+\); this run makes no more model calls\)",
                news,
            ), news


async def test_a_looping_model_meets_the_daily_image_limit(tmp_path: Path, painter: Painter) -> None:
    with serve_fake_images() as api:
        async with _runtime(tmp_path, api, "max_per_day = 2\n") as pilot:
            for subject in ("a cat", "a dog", "a cow"):
                await pilot.say(f"draw {subject}")
            await _news(pilot, 5)
            await pilot.settle()
            assert painter.results[2] == {
                "error": "Tool 'generate_image' failed: no image: 2 asked for in the last 24 hours, the limit is 2"
            }
            assert [r.fields["prompt"] for r in api.requests] == ["a cat", "a dog"]
            # A day later the limit is free again.
            pilot.advance(timedelta(hours=24))
            await pilot.say("draw a cow")
            assert painter.results[3]["status"] == "rendering"
