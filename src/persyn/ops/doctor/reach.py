"""`persyn doctor`'s checks of the tools that read the world: the web search provider, the
reference archives, the skill folders and the images API. Each is optional: a failure here means the agent
answers without that tool, and the check says how to bring it back. Nothing is changed (a
protected skill that was edited is reported, and put back by `persyn skills refresh` or the
agent's next use)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from persyn.core.config import Settings, browse_search_key, images_api_key
from persyn.ops.doctor.postgres import Check

__all__ = ["reach_checks"]


async def reach_checks(settings: Settings) -> list[Check]:
    checks: list[Check] = []
    if settings.browse.search_provider != "none":
        checks.append(await _check_search(settings))
    for archive in settings.reference.archives:
        checks.append(await asyncio.to_thread(_check_archive, settings.home, archive))
    if settings.skills.enabled:
        checks.extend(await asyncio.to_thread(_check_skills, settings))
    checks.append(_check_images(settings))
    return checks


def _check_images(settings: Settings) -> Check:
    """Configuration only: a probe would be a render, and renders are billed."""
    images = settings.images
    if not images.base_url:
        return Check(
            "images",
            True,
            "off: no generate_image / edit_image ([images] base_url is unset)",
            "set [images] base_url (e.g. https://api.openai.com/v1) to offer them",
        )
    where = f"{images.base_url} ({images.model})"
    host = urlsplit(images.base_url).hostname or ""
    local = host in ("localhost", "::1") or host.startswith("127.")
    if not images_api_key(settings) and not local:
        return Check(
            "images", False, f"{where}: ${images.key_env} is not set", f"export {images.key_env}=KEY"
        )
    priced = any(key == images.model or key.startswith(f"{images.model}@") for key in settings.image_prices)
    detail = f"{where}; {'priced per image' if priced else 'unpriced: renders are counted, not costed'}"
    return Check("images", True, detail, warning=not priced)


async def _check_search(settings: Settings) -> Check:
    browse = settings.browse
    name = f"web search ({browse.search_provider})"
    if browse.search_provider == "brave":
        if not browse_search_key(settings):
            return Check(
                name, False, f"${browse.search_key_env} is not set", f"export {browse.search_key_env}=KEY"
            )
        return Check(name, True, f"key in ${browse.search_key_env}")
    url = (browse.search_url or "").rstrip("/") + "/search"
    try:
        async with httpx.AsyncClient(timeout=browse.timeout_seconds) as client:
            response = await client.get(url, params={"q": "persyn", "format": "json"})
        response.raise_for_status()
        response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return Check(
            name,
            False,
            f"{url}: {type(exc).__name__}: {exc}",
            "check [browse] search_url; SearXNG must allow the json format (search.formats in its settings.yml)",
        )
    return Check(name, True, url)


def _check_archive(home: Path, archive: str) -> Check:
    path = home / Path(archive).expanduser()
    name = f"reference archive {path.name}"
    try:
        from libzim.reader import Archive

        zim = Archive(path)
    except (RuntimeError, OSError) as exc:
        return Check(name, False, f"{path}: {exc}", "check [reference] archives (a Kiwix .zim file)")
    indexes = [n for n, has in (("title", zim.has_title_index), ("full text", zim.has_fulltext_index)) if has]
    if not indexes:
        return Check(name, True, f"{zim.article_count} articles, no search index", "", warning=True)
    return Check(name, True, f"{zim.article_count} articles, {' and '.join(indexes)} index")


def _check_skills(settings: Settings) -> list[Check]:
    from persyn.tools.skills.library import SkillLibrary

    checks: list[Check] = []
    for agent in settings.agents:
        library = SkillLibrary.for_agent(settings.skills, settings.home, agent.id, agent.name)
        skills = library.peek()
        name = f"skills for {agent.name}"
        if library.problems:
            shown = "; ".join(f"{p.folder.name}: {p.problem}" for p in library.problems[:3])
            checks.append(
                Check(
                    name,
                    True,
                    f"{len(skills)} offered; not skills: {shown}",
                    "fix each SKILL.md",
                    warning=True,
                )
            )
        else:
            checks.append(Check(name, True, f"{len(skills)} offered"))
    return checks
