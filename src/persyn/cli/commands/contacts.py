"""`persyn contacts`: the agent's contact directory."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from persyn.cli.context import AgentOption, CliContext, JsonOption, fail, run
from persyn.cli.help import command_group
from persyn.present.render import dump_json, echo, one_line

__all__ = ["ContactArgument", "register"]

# Every command that takes a contact resolves it with `named_contact` (tools/builtin/_contacts.py).
ContactArgument = Annotated[
    str,
    typer.Argument(
        metavar="WHO",
        help="The contact: their id, or a name only they go by, case aside (see `contacts list`).",
    ),
]


contacts_app = command_group(
    "The agent's contact directory: the people and agents it has met (made on first contact; "
    "you browse, rename, merge, attach identities and record addresses)."
)


@contacts_app.command("list")
def contacts_list(
    ctx: typer.Context,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """Everyone the agent has met, most recently seen first."""
    from persyn.ops.history import contacts

    cli = CliContext.of(ctx)
    settings = cli.settings
    found = run(contacts(settings, settings.agent(agent)))
    if as_json:
        payload = [
            {**c.person.model_dump(mode="json"), "addresses": [_address_json(a) for a in c.addresses]}
            for c in found
        ]
        echo(dump_json(payload))
        return
    if not found:
        echo("No contacts yet: people are added on first contact.")
    for entry in found:
        person = entry.person
        seen = f"{person.last_interaction_at:%Y-%m-%d %H:%M}" if person.last_interaction_at else "never"
        where = ", ".join(f"{i.service}/{i.channel}" for i in person.identities) or "-"
        echo(
            f"{person.id}  {one_line(person.display_name):<20} {person.kind:<6} last seen {seen}  "
            f"on {one_line(where)}"
        )


def _address_json(address: Any) -> dict[str, Any]:
    return address.model_dump(mode="json", include={"label", "value", "created_at"})


@contacts_app.command("show")
def contacts_show(
    ctx: typer.Context,
    person_id: ContactArgument,
    agent: AgentOption = None,
    as_json: JsonOption = False,
) -> None:
    """A contact's identities, addresses, last interaction and a digest of their latest
    conversations (summaries, bounded; read one in full with `persyn conversations show ID`)."""
    from persyn.ops.history import contact

    cli = CliContext.of(ctx)
    settings = cli.settings
    digest = run(contact(settings, settings.agent(agent), person_id))
    if as_json:
        payload = {
            "person": digest.person.model_dump(mode="json"),
            "addresses": [_address_json(a) for a in digest.addresses],
            "display_name_preference": digest.display_name_preference,
            "preferred_channel": digest.preferred_channel,
            "facts": digest.facts,
            "conversations": [
                {"conversation": c.model_dump(mode="json"), "summary": summary}
                for c, summary in digest.conversations
            ],
        }
        echo(dump_json(payload))
        return
    person = digest.person
    echo(f"{one_line(person.display_name)} ({person.kind}) {person.id}")
    if digest.display_name_preference:
        echo(f"  prefers to be called: {one_line(digest.display_name_preference)}")
    if digest.preferred_channel:
        echo(f"  preferred channel: {one_line(digest.preferred_channel)}")
    for key, value in digest.facts.items():
        echo(f"  fact: {one_line(key)} = {one_line(value)}")
    seen = f"{person.last_interaction_at:%Y-%m-%d %H:%M}" if person.last_interaction_at else "never"
    echo(f"  last interaction: {seen}")
    for identity in person.identities:
        echo(
            f"  identity: {one_line(identity.service)} / {one_line(identity.channel)} / "
            f"{one_line(identity.speaker_id)}"
        )
    for address in digest.addresses:
        echo(f"  address: {one_line(address.label)} {one_line(address.value)}")
    echo("  recent conversations:" if digest.conversations else "  no conversations yet")
    for conversation, summary in digest.conversations:
        echo(
            f"    {conversation.id}  {conversation.started_at:%Y-%m-%d %H:%M}  "
            f"{one_line(conversation.service)}/{one_line(conversation.channel)}: "
            f"{one_line(summary or '(not consolidated yet)')}"
        )


@contacts_app.command("rename")
def contacts_rename(
    ctx: typer.Context,
    person_id: ContactArgument,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The new display name (1-64 characters).")],
    agent: AgentOption = None,
) -> None:
    """Change how a contact is named; identities and history stay as they are."""
    from persyn.ops.history import rename_contact

    cli = CliContext.of(ctx)
    settings = cli.settings
    person = run(rename_contact(settings, settings.agent(agent), person_id, name))
    echo(f"{person.id} is now {one_line(person.display_name)}")


@contacts_app.command("merge")
def contacts_merge(
    ctx: typer.Context,
    survivor: Annotated[
        str, typer.Argument(metavar="SURVIVOR", help="The contact that remains: id or unique name.")
    ],
    other: Annotated[
        str,
        typer.Argument(metavar="OTHER", help="The duplicate folded into it (then gone): id or unique name."),
    ],
    agent: AgentOption = None,
    name: Annotated[str | None, typer.Option("--name", help="The survivor's name afterwards.")] = None,
) -> None:
    """Fold a duplicate into one contact, retroactively: identities, addresses, preferences,
    facts, observations, dialog, conversations and memories all name the survivor, so the
    agent recognises the person on every channel either record knew."""
    from persyn.ops.history import merge_contacts

    cli = CliContext.of(ctx)
    settings = cli.settings
    person = run(merge_contacts(settings, settings.agent(agent), survivor, other, name))
    where = ", ".join(f"{i.service}/{i.channel}" for i in person.identities) or "-"
    echo(f"{person.id} ({one_line(person.display_name)}) now covers {one_line(where)}")


def _identity_command(
    cli: CliContext, person_id: str, service: str, channel: str, speaker: str, agent: str | None, attach: bool
) -> None:
    from persyn.ops.history import change_identity
    from persyn.store.base import Identity

    if not all(part.strip() for part in (service, channel, speaker)):
        raise fail("SERVICE, CHANNEL and SPEAKER must not be empty")
    settings = cli.settings
    identity = Identity(service=service, channel=channel, speaker_id=speaker)
    person = run(change_identity(settings, settings.agent(agent), person_id, identity, attach=attach))
    where = ", ".join(f"{i.service}/{i.channel}/{i.speaker_id}" for i in person.identities) or "-"
    echo(f"{person.id} ({one_line(person.display_name)}) identities: {one_line(where)}")


@contacts_app.command("attach")
def contacts_attach(
    ctx: typer.Context,
    person_id: ContactArgument,
    service: Annotated[str, typer.Argument(metavar="SERVICE", help="e.g. terminal, slack.")],
    channel: Annotated[str, typer.Argument(metavar="CHANNEL", help="The channel on that service.")],
    speaker: Annotated[str, typer.Argument(metavar="SPEAKER", help="The sender id the channel reports.")],
    agent: AgentOption = None,
) -> None:
    """Add an identity to a contact: the next message from it is recognised as them."""
    _identity_command(CliContext.of(ctx), person_id, service, channel, speaker, agent, attach=True)


@contacts_app.command("detach")
def contacts_detach(
    ctx: typer.Context,
    person_id: ContactArgument,
    service: Annotated[str, typer.Argument(metavar="SERVICE")],
    channel: Annotated[str, typer.Argument(metavar="CHANNEL")],
    speaker: Annotated[str, typer.Argument(metavar="SPEAKER")],
    agent: AgentOption = None,
) -> None:
    """Remove an identity from a contact, looking forward: history stays with them, and new
    traffic on that identity makes a new contact."""
    _identity_command(CliContext.of(ctx), person_id, service, channel, speaker, agent, attach=False)


_ADDRESS_LABEL_HELP = "The kind of address: a short word such as email, phone, matrix, home or work."


def _address_command(
    cli: CliContext, person_id: str, label: str, value: str, agent: str | None, add: bool
) -> None:
    from persyn.ops.history import change_address

    settings = cli.settings
    person, changed = run(
        change_address(settings, settings.agent(agent), person_id, label, value, add=add, now=cli.now())
    )
    label, value = one_line(label.strip().lower()), one_line(value.strip())
    name = one_line(person.display_name)
    if not add:
        echo(f"{name} ({person.id}) no longer has {label} {value}")
    elif changed:
        echo(f"{name} ({person.id}) can be reached at {label} {value}")
    else:
        echo(f"{name} ({person.id}) already has {label} {value}")


@contacts_app.command("add-address")
def contacts_add_address(
    ctx: typer.Context,
    person_id: ContactArgument,
    label: Annotated[str, typer.Argument(metavar="LABEL", help=_ADDRESS_LABEL_HELP)],
    value: Annotated[str, typer.Argument(metavar="VALUE", help="The address, e.g. sam@example.com.")],
    agent: AgentOption = None,
) -> None:
    """Record a way to reach a contact (an email address, a phone number, ...) under a type
    label. A contact may have several per label; adding one they have changes nothing."""
    _address_command(CliContext.of(ctx), person_id, label, value, agent, add=True)


@contacts_app.command("remove-address")
def contacts_remove_address(
    ctx: typer.Context,
    person_id: ContactArgument,
    label: Annotated[str, typer.Argument(metavar="LABEL", help=_ADDRESS_LABEL_HELP)],
    value: Annotated[str, typer.Argument(metavar="VALUE", help="The address, as `contacts show` prints it.")],
    agent: AgentOption = None,
) -> None:
    """Forget one of a contact's addresses."""
    _address_command(CliContext.of(ctx), person_id, label, value, agent, add=False)


@contacts_app.command("prefer")
def contacts_prefer(
    ctx: typer.Context,
    person_id: ContactArgument,
    channel: Annotated[
        str, typer.Argument(metavar="CHANNEL", help="SERVICE:CHANNEL, e.g. terminal:terminal.")
    ],
    agent: AgentOption = None,
) -> None:
    """Set the channel on which to reach a contact first."""
    from persyn.ops.history import prefer_channel

    cli = CliContext.of(ctx)
    settings = cli.settings
    person = run(prefer_channel(settings, settings.agent(agent), person_id, channel))
    echo(f"{one_line(person.display_name)} is reached first on {one_line(channel)}")


def register(app: typer.Typer) -> None:
    app.add_typer(contacts_app, name="contacts")
