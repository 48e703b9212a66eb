"""Images (`tools/providers.py`): `generate_image` and `edit_image` when `[images]` names an API
(the runtime's image service binds them to the activation: `runtime/turn/images.py`)."""

from __future__ import annotations

from persyn.tools.images.generate import image_tools
from persyn.tools.providers import ToolProvider

__all__ = ["IMAGES"]

IMAGES = ToolProvider("images", lambda scope: [] if scope.images is None else image_tools(scope.images))
