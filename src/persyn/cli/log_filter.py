"""What a Persyn process writes to its log: one line per condition, until the condition changes.

On a full disk a daemon logged 130 multi-line DBOS tracebacks (one every 5 s) and a queue
warning every second: the operator's terminal filled with the same SQL statement while the one
line that mattered scrolled away. `install_log_filters` puts two filters on every handler of the
root logger and on DBOS's logger (which writes through a handler of its own and does not
propagate):

- `OneLineErrors` (below `log_level = "debug"`, which keeps tracebacks for whoever
  investigates): a logged exception is its message, not a traceback, and a database error's
  statement, parameters and documentation link are dropped, from the exception and from a
  message that formatted one in (`f"...: {e}"`), so a record is one line.
- `RepeatFilter`: a warning or error that repeats one already logged (same logger, level and
  text, with durations and attempt counts set aside) is dropped while it keeps repeating. It is
  logged again, saying how often it was dropped, once it has been quiet for `quiet` seconds (it
  ended, and this is a new occurrence; 2 minutes, longer than the 90 s DBOS waits at most between
  retries of a lost database) or every `remind` seconds while it lasts (so a long outage still
  shows in the recent log). Information and debug records are never dropped.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from persyn.present.render import error_text

__all__ = ["OneLineErrors", "RepeatFilter", "install_log_filters", "one_line_message"]

# What a wrapped database error appends to its message (as `render.error_text` drops them).
_DATABASE_NOISE = ("(Background on this error at:", "[SQL:", "[parameters:")
# What changes between two records of one condition: a backoff's seconds, a retry's count.
_TRACEBACK = "Traceback (most recent call last):"
_VARYING = re.compile(r"\d+\.\d+|(?<=attempt )\d+")
_CONDITIONS_KEPT = 512  # conditions remembered at most (the oldest is forgotten first)


def one_line_message(text: str) -> str:
    """`text` without the lines a database error appends to it, and a traceback formatted into
    it (DBOS's scheduler logs `f"...: {traceback.format_exc()}"`) reduced to its last word: the
    error it ended with."""
    if "\n" not in text:
        return text
    head, _, trace = text.partition(_TRACEBACK)
    lines = [line for line in head.splitlines() if not line.lstrip().startswith(_DATABASE_NOISE)]
    if trace:
        ending = [
            line
            for line in trace.splitlines()
            if line.strip() and not line.startswith((" ", "\t")) and not line.startswith(_DATABASE_NOISE)
        ]
        last = ending[-1] if ending else "a traceback"
        lines = [f"{' '.join(lines).rstrip()} {last}".strip()]
    return "\n".join(lines)


class OneLineErrors(logging.Filter):
    """A logged exception as one line (module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = original = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            message = f"{message.rstrip(':')}: {error_text(error) or type(error).__name__}"
            record.exc_info = None
            record.exc_text = None
        message = one_line_message(message)
        if message != original:
            record.msg, record.args = message, None
        return True


@dataclass
class _Seen:
    last: float  # when it last occurred
    logged: float  # when it was last written
    dropped: int = 0  # occurrences dropped since


class RepeatFilter(logging.Filter):
    """Drops a warning or error that repeats while its condition lasts (module docstring)."""

    def __init__(
        self, *, quiet: float = 120.0, remind: float = 3600.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self._quiet = quiet
        self._remind = remind
        self._clock = clock
        self._seen: OrderedDict[tuple[str, int, str], _Seen] = OrderedDict()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.levelno, _condition(record))
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.last < self._quiet and now - seen.logged < self._remind:
                seen.last = now
                seen.dropped += 1
                self._seen.move_to_end(key)
                return False
            dropped = seen.dropped if seen is not None else 0
            self._seen[key] = _Seen(last=now, logged=now)
            self._seen.move_to_end(key)
            while len(self._seen) > _CONDITIONS_KEPT:
                self._seen.popitem(last=False)
        if dropped:
            record.msg = f"{record.getMessage()} (repeated {dropped} more times since it was last logged)"
            record.args = None
        return True


def _condition(record: logging.LogRecord) -> str:
    """What makes two records the same condition: their text, durations and counts aside, and
    the type of the exception they carry."""
    text = _VARYING.sub("#", one_line_message(record.getMessage()))
    if record.exc_info and record.exc_info[1] is not None:
        error = record.exc_info[1]
        text += f" | {type(error).__name__}: {_VARYING.sub('#', one_line_message(str(error)))}"
    return text


def install_log_filters(*, tracebacks: bool) -> None:
    """Put the filters on the root logger's handlers and on DBOS's logger (module docstring);
    `tracebacks` keeps logged exceptions whole (`log_level = "debug"`). Idempotent."""
    targets: list[logging.Filterer] = [*logging.getLogger().handlers, logging.getLogger("dbos")]
    for target in targets:
        present = {type(existing) for existing in target.filters}
        if not tracebacks and OneLineErrors not in present:
            target.addFilter(OneLineErrors())
        if RepeatFilter not in present:
            target.addFilter(RepeatFilter())
