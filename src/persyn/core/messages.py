"""What a message must be to enter the pipeline (SPEC §4.1), checked the same way wherever it
arrives: by the intake in a runtime, and by `persyn send` before it reaches one. Standard
library only, so the fast path of `persyn send` (`runtime.durable.control_client`) can use it
without importing the runtime.
"""

from __future__ import annotations

import re

from persyn.core.errors import InputError

__all__ = ["lone_surrogate", "validate_message_text", "without_lone_surrogates"]

# A str holding a code point in this range cannot be written as UTF-8 (the store, a socket, a
# terminal refuse it). It comes from JSON escapes such as "\ud800" (a pair is joined by the
# parser, so any that remains is lone) and from undecodable bytes in `sys.argv`.
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """What makes `text` not valid Unicode ("a lone surrogate U+D800 at position 3"), or None."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    return f"a lone surrogate U+{ord(found.group()):04X} at position {found.start()}"


def without_lone_surrogates(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, as bytes that are not UTF-8 are
    decoded from a chat network: what a person sent is kept, never refused whole."""
    return _SURROGATE.sub("\ufffd", text)


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
    invalid = lone_surrogate(text)
    if invalid is not None:
        raise InputError(f"message is not valid Unicode: {invalid}")
    if "\x00" in text:
        raise InputError("message contains a NUL character")
    if not text.strip():
        raise InputError("message is empty")
    return text
