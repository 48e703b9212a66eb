"""The OpenAI images API as an `ImageProvider` (and any server that speaks it).

`POST {base}/images/generations` with a JSON body, `POST {base}/images/edits` as multipart form
data (`image` file, `prompt`, `model`, `n`, `size`); both answer `{"created": …, "data":
[{"b64_json": …, "revised_prompt": …}]}` and errors as `{"error": {"message": …}}`. The GPT
image models always answer in `b64_json`; DALL·E and most compatible servers answer a URL
unless asked, so `response_format = "b64_json"` is sent to every model but the GPT image
ones (which refuse the parameter). The answer is read streamed and given up past
`max_bytes`, and the whole exchange past `timeout_seconds`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any, cast

import httpx

from persyn.core.config import ImagesConfig
from persyn.tools.images.generate import ImageRenderError, RenderedImage, decode_b64_image, sniff_mime

__all__ = ["OpenAIImages"]


class OpenAIImages:
    def __init__(self, config: ImagesConfig, api_key: str | None) -> None:
        if not config.base_url:
            raise ValueError("[images] base_url is not set")
        self._config = config
        self._base = config.base_url
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _fields(self, prompt: str, size: str) -> dict[str, Any]:
        fields: dict[str, Any] = {"model": self._config.model, "prompt": prompt, "n": 1, "size": size}
        if not self._config.model.startswith("gpt-image"):
            fields["response_format"] = "b64_json"
        return fields

    async def generate(self, prompt: str, size: str) -> RenderedImage:
        return await self._post("generations", json=self._fields(prompt, size))

    async def edit(self, images: Sequence[tuple[bytes, str]], prompt: str, size: str) -> RenderedImage:
        """One image as the `image` part; several (SPEC §4.6 compositing from reference images)
        as one `image[]` part each, the edited one first, as the edits endpoint takes them."""
        fields = {k: str(v) for k, v in self._fields(prompt, size).items()}
        name = "image" if len(images) == 1 else "image[]"
        files = [
            (name, (f"image{index}.{mime.rpartition('/')[2]}", data, mime))
            for index, (data, mime) in enumerate(images)
        ]
        return await self._post("edits", data=fields, files=files)

    async def _post(self, endpoint: str, **body: Any) -> RenderedImage:
        url = f"{self._base}/images/{endpoint}"
        try:
            async with asyncio.timeout(self._config.timeout_seconds):
                status, raw = await self._exchange(url, body)
        except TimeoutError as exc:
            raise ImageRenderError(f"no image within {self._config.timeout_seconds:g} s") from exc
        except httpx.HTTPError as exc:
            raise ImageRenderError(f"the images API could not be reached: {exc!r}") from exc
        try:
            answer = json.loads(raw)
        except ValueError as exc:
            raise ImageRenderError(f"the images API answered HTTP {status} with malformed JSON") from exc
        if status >= 400 or not isinstance(answer, dict):
            raise ImageRenderError(f"the images API refused (HTTP {status}): {_error_message(answer)}")
        return _image_from(cast(dict[str, Any], answer))

    async def _exchange(self, url: str, body: dict[str, Any]) -> tuple[int, bytes]:
        limit = self._config.max_bytes
        async with (
            httpx.AsyncClient(headers=self._headers, timeout=self._config.timeout_seconds) as client,
            client.stream("POST", url, **body) as response,
        ):
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise ImageRenderError(f"the images API's answer is {int(declared)} bytes; at most {limit}")
            chunks: list[bytes] = []
            received = 0
            async for chunk in response.aiter_bytes():
                received += len(chunk)
                if received > limit:
                    raise ImageRenderError(f"the images API's answer is over {limit} bytes")
                chunks.append(chunk)
            return response.status_code, b"".join(chunks)


def _error_message(answer: object) -> str:
    if isinstance(answer, dict):
        error = cast(dict[str, Any], answer).get("error")
        if isinstance(error, dict):
            return str(cast(dict[str, Any], error).get("message", ""))[:500] or "no message"
        if isinstance(error, str):
            return error[:500]
    return "no message"


def _image_from(answer: dict[str, Any]) -> RenderedImage:
    data = answer.get("data")
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise ImageRenderError("the images API's answer has no data[0]")
    first = cast(dict[str, Any], data[0])
    image = decode_b64_image(first.get("b64_json"))
    mime = sniff_mime(image)
    if mime is None:
        raise ImageRenderError("the images API's b64_json is not a PNG, JPEG, WebP or GIF image")
    revised = first.get("revised_prompt")
    return RenderedImage(data=image, mime=mime, revised_prompt=revised if isinstance(revised, str) else None)
