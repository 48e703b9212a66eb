"""`persyn web keys`: API keys of the web channel `persyn run` serves ([web] enabled = true).

Also the two hooks `persyn run` calls: `web_surface` (None unless the channel is enabled;
a non-loopback bind with no key is refused here, before anything starts) and `serve_web`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, run
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line

if TYPE_CHECKING:
    from persyn.core.config import Settings
    from persyn.runtime.app import Runtime
    from persyn.web.server import WebSurface

__all__ = ["register", "serve_web", "web_surface"]

web_app = command_group("The web channel: its API keys (the channel itself runs in `persyn run`).")
keys_app = command_group("API keys: each is one client; every web endpoint but /healthz needs one.")
web_app.add_typer(keys_app, name="keys")


@keys_app.command("create")
def keys_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("--name", help="What the key is for (shown in `keys list`).")],
    contact: Annotated[
        str | None,
        typer.Option("--contact", help="A contact (id or unique name) of --agent the key speaks as."),
    ] = None,
    operator: Annotated[
        bool, typer.Option("--operator", help="May read every conversation and curate the directory.")
    ] = False,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a key and print it ONCE (only its hash is stored)."""
    from persyn.ops.web_keys import create_key

    cli = CliContext.of(ctx)
    settings = cli.settings
    chosen = settings.agent(agent) if contact is not None else None
    key, secret = run(create_key(settings, name, cli.now(), operator=operator, agent=chosen, contact=contact))
    if as_json:
        echo(dump_json({"id": key.id, "name": key.name, "operator": key.operator, "key": secret}))
        return
    echo(secret)
    scope = "operator" if key.operator else "client"
    echo(f"· {scope} key {one_line(key.name)} ({key.id}); shown once: store it now", err=True, dim=True)


@keys_app.command("list")
def keys_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every key (never the key itself), revoked ones with when. Deployment-wide: the web
    channel's keys serve every agent."""
    from persyn.ops.web_keys import list_keys

    found = run(list_keys(CliContext.of(ctx).settings))
    if as_json:
        echo(dump_json([k.model_dump(mode="json", exclude={"key_hash"}) for k in found]))
        return
    if not found:
        echo("No web keys. Create one with `persyn web keys create --name NAME`.")
    for key in found:
        state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
        scope = "operator" if key.operator else "client"
        contact = f", contact {key.contact_id}" if key.contact_id else ""
        echo(f"{key.id}  {one_line(key.name)}  {scope}, {state}{contact}")


@keys_app.command("revoke")
def keys_revoke(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(metavar="KEY", help="The key's id (or its unique name).")],
) -> None:
    """Revoke a key: its next request is refused (401), and its open streams end (a running
    `persyn run` notices within `[dispatch] outbox_poll_seconds`). Deployment-wide: KEY names any key."""
    from persyn.ops.web_keys import revoke_key

    cli = CliContext.of(ctx)
    revoked = run(revoke_key(cli.settings, key, cli.now()))
    echo(f"revoked {revoked.id} ({one_line(revoked.name)})")


async def web_surface(settings: Settings) -> WebSurface | None:
    """The web channel to serve, or None when `[web] enabled` is false. Refuses (ConfigError)
    a non-loopback address while no key exists."""
    if not settings.web.enabled:
        return None
    from persyn.ops.web_keys import has_keys
    from persyn.web.server import WebSurface, check_bind

    check_bind(settings, has_keys=await has_keys(settings))
    return WebSurface(settings)


async def serve_web(web: WebSurface, runtime: Runtime) -> None:
    from functools import partial

    from persyn.runtime.web_keys import authenticate, revoked_keys
    from persyn.store.capabilities import capability
    from persyn.store.ports.web_keys import WebKeysPort

    keys = capability(runtime.store, WebKeysPort)  # none: every request is refused
    url = await web.start(
        runtime,
        partial(authenticate, keys),
        partial(revoked_keys, keys),
        runtime.meter.flush,
    )
    echo(f"web channel on {url}")


def register(app: typer.Typer) -> None:
    app.add_typer(web_app, name="web")
