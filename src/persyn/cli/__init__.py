"""The `persyn` command: one module per command group in `commands/`, each with `register(app)`.

`root.py` builds the Typer application; `context.py` holds what commands share (the
`CliContext` with the deployment directory and the clock); `times.py` parses every time given
on the command line; stored text is printed through `persyn.present.render`. Importing this
package is cheap: the application is built only when `app` or `main` is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from persyn.cli.root import app, main

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from persyn.cli import root

        return getattr(root, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
