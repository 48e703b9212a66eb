"""The image provider port's OpenAI adapter against the loopback fake (real HTTP, the
documented wire format), the image library's visibility, the tools' checks, the `[images]`
and `[prices.images]` configuration, and `persyn doctor`'s line (ARCHITECTURE §21)."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from persyn.core.config import ImagesConfig, Settings, parse_settings
from persyn.core.errors import ConfigError, ToolError
from persyn.core.ids import new_id
from persyn.gateway.base import ToolCall
from persyn.ops.doctor.reach import reach_checks
from persyn.runtime.turn.images import image_price
from persyn.testing.images import png_pixel, serve_fake_images
from persyn.tools.images.generate import (
    ImageLibrary,
    ImageRenderError,
    ImagesContext,
    image_tools,
)
from persyn.tools.images.openai_images import OpenAIImages
from persyn.tools.registry import ToolRegistry

AT = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
RED = png_pixel((255, 0, 0))


def _provider(url: str, **config: Any) -> OpenAIImages:
    return OpenAIImages(ImagesConfig(base_url=url, **config), "sk-secret")


async def test_generate_and_edit_speak_the_documented_wire_format() -> None:
    with serve_fake_images() as api:
        provider = _provider(api.url, model="gpt-image-1")
        made = await provider.generate("a red square", "1024x1024")
        assert made.mime == "image/png" and made.data.startswith(b"\x89PNG")
        assert made.revised_prompt == "a red square"
        edited = await provider.edit([(RED, "image/png")], "make it blue", "512x512")
        assert edited.mime == "image/png" and edited.data != made.data
        generation, edit = api.requests
        assert generation.fields == {
            "model": "gpt-image-1",
            "prompt": "a red square",
            "n": "1",
            "size": "1024x1024",
        }
        assert edit.endpoint == "edits" and edit.image == RED
        assert edit.fields == {"model": "gpt-image-1", "prompt": "make it blue", "n": "1", "size": "512x512"}
        # Compositing (SPEC §4.6): one `image[]` part per image, the edited one first.
        await provider.edit([(RED, "image/png"), (made.data, "image/png")], "side by side", "512x512")
        assert api.requests[-1].images == (RED, made.data)
        assert {r.authorization for r in api.requests} == {"Bearer sk-secret"}
        # DALL·E and most compatible servers answer a URL unless asked for b64_json.
        await _provider(api.url, model="dall-e-3").generate("x", "1024x1024")
        assert api.requests[-1].fields["response_format"] == "b64_json"


@pytest.mark.parametrize(
    ("canned", "message"),
    [
        ((200, b'{"created": 1, "data": []}'), "the images API's answer has no data[0]"),
        (
            (200, b'{"created": 1, "data": [{"url": "https://x/y.png"}]}'),
            "the provider's answer has no b64_json image",
        ),
        (
            (200, b'{"created": 1, "data": [{"b64_json": "!!not base64!!"}]}'),
            "the provider's b64_json is not base64",
        ),
        ((200, b"[1, 2]"), "the images API refused (HTTP 200): no message"),
        ((500, b"<html>oops</html>"), "the images API answered HTTP 500 with malformed JSON"),
        (
            (429, b'{"error": {"message": "Rate limit reached", "type": "requests"}}'),
            "the images API refused (HTTP 429): Rate limit reached",
        ),
    ],
)
async def test_every_bad_answer_is_a_render_error_naming_what_was_wrong(
    canned: tuple[int, bytes], message: str
) -> None:
    with serve_fake_images() as api:
        api.canned = canned
        with pytest.raises(ImageRenderError) as failed:
            await _provider(api.url).generate("x", "1024x1024")
        assert str(failed.value).startswith(message)


async def test_an_unreachable_server_and_a_wrong_path_are_render_errors() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ImageRenderError, match="could not be reached"):
        await _provider(f"http://127.0.0.1:{port}/v1").generate("x", "1024x1024")
    with (
        serve_fake_images() as api,
        pytest.raises(ImageRenderError, match=r"refused \(HTTP 404\): no route /v2/images/generations"),
    ):
        await _provider(api.url.replace("/v1", "/v2")).generate("x", "1024x1024")


def _store(library: ImageLibrary, scope: str) -> str:
    reference = f"img-{new_id(AT)}"
    library.store(reference, RED, scope=scope, agent_id=new_id(AT), source="generated", created_at=AT)
    return reference


def test_the_library_shows_an_image_only_to_its_scope_and_keeps_only_images(tmp_path: Path) -> None:
    library = ImageLibrary(tmp_path / "images")
    reference = _store(library, "test:room-a")
    stored = library.get(reference, ("test:room-a",))
    assert stored is not None and stored.mime == "image/png" and stored.bytes == len(RED)
    assert library.read(stored) == RED
    assert library.get(reference, ("test:room-b",)) is None  # elsewhere: as if it did not exist
    assert library.get(reference, ("test:room-b", "test:room-a")) == stored  # its compartment
    assert library.get(f"img-{new_id(AT)}", ("test:room-a",)) is None
    with pytest.raises(ToolError, match=r"'\.\./etc/passwd' is not an image reference"):
        library.get("../etc/passwd", ("test:room-a",))
    with pytest.raises(ImageRenderError, match="not a PNG, JPEG, WebP or GIF"):
        library.store(
            f"img-{new_id(AT)}", b"<svg/>", scope="s", agent_id=new_id(AT), source="generated", created_at=AT
        )
    assert sorted(p.name for p in library.directory.iterdir()) == [f"{reference}.json", f"{reference}.png"]


async def test_the_tools_check_prompt_size_and_reference_before_asking(tmp_path: Path) -> None:
    library = ImageLibrary(tmp_path / "images")
    elsewhere = _store(library, "test:room-b")
    here = _store(library, "test:room-a")
    asked: list[tuple[str, str, str, tuple[str, ...]]] = []

    async def request(kind: Any, prompt: str, size: str, references: tuple[str, ...]) -> str:
        asked.append((kind, prompt, size, references))
        return f"img-{new_id(AT)}"

    registry = ToolRegistry(
        image_tools(
            ImagesContext(
                library=library,
                eligible=("test:room-a",),
                default_size="1024x1024",
                max_prompt_chars=20,
                request=request,
            )
        )
    )

    async def call(name: str, **args: Any) -> str:
        return (await registry.call(ToolCall(id="c1", name=name, args=args))).content

    assert "at most 20" in await call("generate_image", prompt="x" * 21)
    assert "size '1024' is not WIDTHxHEIGHT" in await call("generate_image", prompt="a cat", size="1024")
    assert f"there is no image {elsewhere!r} that you can see here" in await call(
        "edit_image", reference=elsewhere, prompt="blue"
    )
    assert asked == []
    ack = json.loads(await call("edit_image", reference=here, prompt="blue"))
    assert ack["status"] == "rendering" and ack["reference"].startswith("img-")
    assert json.loads(await call("generate_image", prompt="a cat", size="512x512"))["status"] == "rendering"
    assert asked == [("edit", "blue", "1024x1024", (here,)), ("generate", "a cat", "512x512", ())]


def _settings(tmp_path: Path, data: dict[str, Any], environ: dict[str, str] | None = None) -> Settings:
    return parse_settings(data, tmp_path, environ=environ or {})


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"images": {"base_url": "ftp://example.com/v1"}}, "'ftp://example.com/v1'"),
        ({"images": {"size": "huge"}}, "size"),
        ({"prices": {"images": {"gpt-image-1": -0.04}}}, "'gpt-image-1' = -0.04"),
        ({"prices": {"images": {"gpt-image-1": "cheap"}}}, "image_prices"),
        ({"prices": {"images": 0.04}}, "image_prices"),
    ],
)
def test_a_bad_images_configuration_is_an_error_naming_the_value(
    tmp_path: Path, data: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError) as failed:
        _settings(tmp_path, data)
    assert named in str(failed.value)


def test_prices_images_sit_beside_the_token_prices(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        {
            "prices": {
                "images": {"gpt-image-1": 0.04, "gpt-image-1@1024x1536": 0.06},
                "openai:gpt-4.1": {"input": 2.0, "output": 8.0},
            }
        },
    )
    assert list(settings.prices) == ["openai:gpt-4.1"]
    assert image_price(settings.image_prices, "gpt-image-1", "1024x1536") == 0.06
    assert image_price(settings.image_prices, "gpt-image-1", "1024x1024") == 0.04
    assert image_price(settings.image_prices, "dall-e-3", "1024x1024") is None


async def test_doctor_says_whether_images_are_offered_and_how_they_are_priced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the key is read from the environment

    async def line(data: dict[str, Any]) -> tuple[bool, bool, str]:
        checks = await reach_checks(_settings(tmp_path, {"skills": {"enabled": False}, **data}))
        (check,) = [c for c in checks if c.name == "images"]
        return check.ok, check.warning, check.detail

    assert await line({}) == (True, False, "off: no generate_image / edit_image ([images] base_url is unset)")
    hosted = {"images": {"base_url": "https://api.openai.com/v1"}}
    assert await line(hosted) == (
        False,
        False,
        "https://api.openai.com/v1 (gpt-image-1): $OPENAI_API_KEY is not set",
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk")
    assert await line(hosted) == (
        True,
        True,
        "https://api.openai.com/v1 (gpt-image-1); unpriced: renders are counted, not costed",
    )
    local = {"images": {"base_url": "http://127.0.0.1:8080/v1"}, "prices": {"images": {"gpt-image-1": 0.0}}}
    assert await line(local) == (True, False, "http://127.0.0.1:8080/v1 (gpt-image-1); priced per image")
