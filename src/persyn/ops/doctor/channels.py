"""`persyn doctor` on the chat networks of `[channels]`: for each one configured, its registered
probe (`channels/<network>/plugin.py`): whether its credentials are in the environment and
whether its server answers. Every probe is bounded by
a short timeout and changes nothing on the server (no log-in that would leave a device
behind); a network that is down only means `persyn run` keeps retrying it while the agents
answer elsewhere. A last line says which process connects each network (the holder of its
lease, `runtime/delivery/channel_leases.py`), or that none does."""

from __future__ import annotations

from datetime import datetime

from persyn.channels.registry import channel_plugins
from persyn.core.config import Settings
from persyn.core.errors import PersynError
from persyn.ops.doctor.postgres import Check

__all__ = ["channel_checks", "channel_owner_check"]


async def channel_checks(settings: Settings) -> list[Check]:
    """One line per configured chat network, or one saying none is configured."""
    probed = [plugin for plugin in channel_plugins() if plugin.probe is not None]
    checks: list[Check] = []
    for plugin in probed:
        if plugin.probe is not None and plugin.configured(settings):
            probe = await plugin.probe(settings)
            checks.append(Check(probe.name, probe.ok, probe.detail, probe.fix, warning=probe.warning))
    if not checks:
        sections = [plugin.section or plugin.service for plugin in probed]
        # "[channels.irc], .telegram, .matrix, [voice]": the first `[channels.…]` whole, the others
        # by their last part; a section of its own (`[voice]`) whole.
        nested = [s for s in sections if s.startswith("[channels.")]
        named = [
            *nested[:1],
            *(f".{s.strip('[]').rpartition('.')[2]}" for s in nested[1:]),
            *(s for s in sections if not s.startswith("[channels.")),
        ]
        return [Check("chat channels", True, f"none configured ({', '.join(named)})")]
    return checks


async def channel_owner_check(settings: Settings, now: datetime) -> Check | None:
    """Which process connects each configured network (`runtime/delivery/channel_leases.py`): the
    holder of its lease, or that none does. None when no network is configured."""
    from persyn.ops.history import opened_capability
    from persyn.runtime.delivery.channel_leases import channel_lease
    from persyn.store.ports.leases import LeasesPort

    services = [
        plugin.service
        for plugin in channel_plugins()
        if plugin.connect is not None and plugin.configured(settings)
    ]
    if not services:
        return None
    try:
        async with opened_capability(settings, LeasesPort) as store:
            held = {lease.name: lease for lease in await store.leases()}
    except PersynError as exc:
        return Check("channel owners", True, f"unreadable: {exc}", "check the database", warning=True)
    lines: list[str] = []
    idle = False
    for service in services:
        lease = held.get(channel_lease(service))
        idle = idle or lease is None or lease.expires_at <= now
        if lease is None:
            lines.append(f"{service}: no process connects it (start `persyn run`)")
        elif lease.expires_at <= now:
            lines.append(
                f"{service}: no process connects it ({lease.holder} stopped renewing at "
                f"{lease.expires_at:%H:%M:%S} UTC; the next `persyn run` takes it over)"
            )
        else:
            lines.append(f"{service}: {lease.holder} (lease runs to {lease.expires_at:%H:%M:%S} UTC)")
    return Check("channel owners", True, "; ".join(lines), warning=idle)
