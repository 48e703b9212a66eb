"""Text helpers the chat-network adapters share: `split_message` cuts a reply into the pieces a
network's message size allows (Telegram's 4096 characters, Matrix's body limit). IRC cuts by
UTF-8 bytes and per line, which no other network needs: its own `irc/channel.split_text`."""

from __future__ import annotations

__all__ = ["split_message"]


def split_message(text: str, limit: int) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut at a line break or space if possible."""
    pieces: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        cut = max(rest.rfind("\n", 0, limit), rest.rfind(" ", 0, limit))
        cut = cut if cut > 0 else limit
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        pieces.append(rest)
    return pieces
