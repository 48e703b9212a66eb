"""The operator console (`persyn console`, SPEC App. B): a full-screen Textual surface that
is an ordinary channel adapter with presentation privileges only.

- `channel.py` — `ConsoleChannel`: the runtime's entry points become `Update`s queued on
  the console's loop (arrival order; the pipeline never waits).
- `transcript.py` — the transcript and the five live-cognition rules.
- `panels.py` — Directory, Channels, Mind, Usage: bounded views and curation.
- `operator_views.py` — what the panels call: the CLI's operator functions, bound to an agent.
- `app.py` — `ConsoleApp`: the layout, the composer, the status line.
"""

from persyn.channels.console.channel import ConsoleChannel, Update
from persyn.console.app import ConsoleApp, Spend
from persyn.console.operator_views import Operator

__all__ = ["ConsoleApp", "ConsoleChannel", "Operator", "Spend", "Update"]
