"""What a message must be to enter the pipeline (SPEC §4.1), checked the same way wherever it
arrives: by the intake in a runtime, and by `persyn send` before it reaches one. Standard
library only, so the fast path of `persyn send` (`runtime.control_client`) can use it
without importing the runtime.
"""

from __future__ import annotations

from persyn.core.errors import InputError

__all__ = ["validate_message_text"]


def validate_message_text(text: str | bytes, limit: int) -> str:
    """The message as text, or an `InputError` naming what is wrong with it; nothing is
    stored for rejected input. `limit` is `[conversation] max_message_chars`."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"message is not valid UTF-8 (bad byte at position {exc.start})") from exc
    if len(text) > limit:
        raise InputError(
            f"message is {len(text)} characters long; the limit is {limit} ([conversation] max_message_chars)"
        )
    if "\x00" in text:
        raise InputError("message contains a NUL character")
    if not text.strip():
        raise InputError("message is empty")
    return text
