"""What `test:vision` sees: a caption computed from an image's pixels (no model, no guess).

The double answers the `caption` task with the image's size, its dominant colours by name and,
when one colour fills a compact region on a background, that it is a shape ("a red square on
a white background"). A test that draws a red square with Pillow and finds "red" in what the
agent said knows the words came from the real bytes through the real decoder, not from the
message text. Only colours covering a tenth of the image are named, largest first.
"""

from __future__ import annotations

import io
from collections import Counter

from PIL import Image

__all__ = ["COLOUR_NAMES", "colour_name", "describe_image"]

# Reference colours; a pixel is named after the nearest (squared RGB distance).
COLOUR_NAMES: dict[str, tuple[int, int, int]] = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "grey": (128, 128, 128),
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (30, 60, 220),
    "yellow": (240, 220, 40),
    "orange": (245, 140, 20),
    "purple": (130, 40, 160),
    "pink": (245, 150, 190),
    "brown": (120, 70, 30),
}
_SAMPLE = 64  # the image is reduced to at most 64×64 before counting: enough to name colours
_NAMED_SHARE = 0.1


def colour_name(rgb: tuple[int, int, int]) -> str:
    return min(
        COLOUR_NAMES, key=lambda name: sum((a - b) ** 2 for a, b in zip(rgb, COLOUR_NAMES[name], strict=True))
    )


def describe_image(data: bytes) -> str:
    """A one-sentence caption of `data` from its pixels; raises `ValueError` for bytes that are
    not an image Pillow decodes."""
    try:
        with Image.open(io.BytesIO(data)) as opened:
            width, height = opened.size
            image = opened.convert("RGB")
    except Exception as exc:
        raise ValueError(f"not an image I can decode: {exc}") from exc
    image.thumbnail((_SAMPLE, _SAMPLE))
    raw = image.tobytes()
    pixels = [(raw[i], raw[i + 1], raw[i + 2]) for i in range(0, len(raw), 3)]
    names = Counter(colour_name(pixel) for pixel in pixels)
    total = len(pixels)
    named = [name for name, count in names.most_common() if count / total >= _NAMED_SHARE]
    size = f"a {width}×{height} picture"
    if len(named) >= 2 and _is_compact(image, named[1]):
        return f"{size} of a {named[1]} square on a {named[0]} background"
    if len(named) == 1:
        return f"{size}, all {named[0]}"
    return f"{size} in {', '.join(named[:-1])} and {named[-1]}" if named else f"{size} of many colours"


def _is_compact(image: Image.Image, name: str) -> bool:
    """Whether the pixels of colour `name` fill most of their bounding box (a drawn block)."""
    width, height = image.size
    raw = image.tobytes()
    where = [
        (x, y)
        for y in range(height)
        for x in range(width)
        if colour_name((raw[3 * (y * width + x)], raw[3 * (y * width + x) + 1], raw[3 * (y * width + x) + 2]))
        == name
    ]
    xs, ys = [x for x, _ in where], [y for _, y in where]
    box = (max(xs) - min(xs) + 1) * (max(ys) - min(ys) + 1)
    return len(where) / box >= 0.9
