"""Reading the world (`tools/providers.py`): `web_search` and `read_url` when `[browse]` turns them
on, `lookup_reference` when `[reference]` names archives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from persyn.core.config import Settings, browse_search_key
from persyn.tools.providers import ToolProvider, ToolScope
from persyn.tools.registry import Tool
from persyn.tools.world.reference import ReferenceLibrary, reference_tools
from persyn.tools.world.web import search_provider, web_tools

__all__ = ["REFERENCE", "WEB"]


def _web(scope: ToolScope) -> list[Tool[Any, Any]]:
    settings = scope.settings
    return web_tools(settings.browse, search_provider(settings.browse, browse_search_key(settings)))


def _library(settings: Settings) -> ReferenceLibrary | None:
    archives = [settings.home / Path(path).expanduser() for path in settings.reference.archives]
    if not archives:
        return None
    return ReferenceLibrary(
        archives, max_results=settings.reference.max_results, max_chars=settings.reference.max_chars
    )


WEB = ToolProvider("web", _web)
REFERENCE = ToolProvider("reference", lambda scope: reference_tools(_library(scope.settings)))
