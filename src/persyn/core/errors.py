"""One error tree for Persyn. Each class says who is at fault; messages name the
offending value with !r so the user can find it."""

from __future__ import annotations

__all__ = [
    "ChannelError",
    "ConfigError",
    "InputError",
    "ModelError",
    "ModelUnavailableError",
    "PersynError",
    "StoreError",
    "ToolError",
]


class PersynError(Exception):
    """Base of every error Persyn raises on purpose."""


class ConfigError(PersynError):
    """The configuration file or environment is invalid: the operator must fix it."""


class InputError(PersynError):
    """Bad input from outside (a user, a channel, a file): nothing was stored."""


class ModelError(PersynError):
    """A model call failed after retries, or a model string is unusable."""


class ModelUnavailableError(ModelError):
    """The model (or its server) could not be reached at all."""


class StoreError(PersynError):
    """The storage layer failed or found an inconsistency."""


class ChannelError(PersynError):
    """A channel adapter could not deliver or receive."""


class ToolError(PersynError):
    """A tool failed; the response pipeline turns this into a result the model sees."""
