"""Images (`tools/providers.py`): `generate_image` and `edit_image` when `[images]` names an API
(the runtime's image service binds them to the activation: `runtime/turn/images.py`)."""

from __future__ import annotations

from typing import Any

from persyn.tools.images.generate import ImagesContext, image_tools
from persyn.tools.providers import ToolProvider, ToolScope
from persyn.tools.registry import Tool

__all__ = ["IMAGES"]


def _images(scope: ToolScope) -> list[Tool[Any, Any]]:
    context = scope.service(ImagesContext)
    return [] if context is None else image_tools(context)


IMAGES = ToolProvider("images", _images)
