"""`persyn doctor` on the chat networks of `[channels]`: for each one configured, its registered
probe (`channels/<network>/plugin.py`): whether its credentials are in the environment and
whether its server answers. Every probe is bounded by
a short timeout and changes nothing on the server (no log-in that would leave a device
behind); a network that is down only means `persyn run` keeps retrying it while the agents
answer elsewhere. A last line says which process connects each network (the holder of its
lease, `runtime/delivery/channel_leases.py`), or that none does, with how its connections stood
at the holder's last renewal (connected, reconnecting, failing with the last error)."""

from __future__ import annotations

from datetime import datetime

from persyn.channels.registry import channel_plugins
from persyn.core.config import Settings
from persyn.core.errors import PersynError
from persyn.ops.doctor.postgres import Check
from persyn.store.ports.leases import Lease

__all__ = ["channel_checks", "channel_owner_check", "network_connection"]


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
    holder of its lease, or that none does, and how its connections stood at the holder's last
    renewal. None when no network is configured."""
    services = _networks(settings)
    if not services:
        return None
    try:
        held = await _leases(settings)
    except PersynError as exc:
        return Check("channel owners", True, f"unreadable: {exc}", "check the database", warning=True)
    lines = [_owner(service, held, now) for service in services]
    warning = any(idle or troubled for _, idle, troubled in lines)
    return Check("channel owners", True, " | ".join(line for line, _, _ in lines), warning=warning)


async def network_connection(settings: Settings, service: str, now: datetime) -> str | None:
    """How a configured network's connection stands, as `persyn channels show` prints it (the
    doctor's line for it); None for a service that is not a configured network."""
    if service not in _networks(settings):
        return None
    try:
        held = await _leases(settings)
    except PersynError as exc:
        return f"{service}: unreadable: {exc}"
    return _owner(service, held, now)[0]


def _networks(settings: Settings) -> list[str]:
    return [
        plugin.service
        for plugin in channel_plugins()
        if plugin.connect is not None and plugin.configured(settings)
    ]


async def _leases(settings: Settings) -> dict[str, Lease]:
    from persyn.ops.history import opened_capability
    from persyn.store.ports.leases import LeasesPort

    async with opened_capability(settings, LeasesPort) as store:
        return {lease.name: lease for lease in await store.leases()}


def _owner(service: str, held: dict[str, Lease], now: datetime) -> tuple[str, bool, bool]:
    """The line for `service`, whether no process connects it, whether its connections were
    reconnecting or failing at the holder's last renewal (`Lease.state`)."""
    from persyn.runtime.delivery.channel_leases import channel_lease

    lease = held.get(channel_lease(service))
    if lease is None:
        return f"{service}: no process connects it (start `persyn run`)", True, False
    if lease.expires_at <= now:
        line = (
            f"{service}: no process connects it ({lease.holder} stopped renewing at "
            f"{lease.expires_at:%H:%M:%S} UTC; the next `persyn run` takes it over)"
        )
        return line, True, False
    line = f"{service}: {lease.holder} (lease runs to {lease.expires_at:%H:%M:%S} UTC)"
    if not lease.state:
        return line, False, False
    troubled = "reconnecting" in lease.state or "failing" in lease.state
    return f"{line}, {lease.state}", False, troubled
