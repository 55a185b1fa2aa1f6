"""The one error hierarchy of fedleak.

Every error fedleak raises on purpose derives from :class:`FedleakError`, so a
caller can catch all of them at once, and the CLI can turn them into a one-line
message and exit code 2 instead of a traceback.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DataError",
    "FedleakError",
    "ProtocolError",
]


class FedleakError(Exception):
    """Base class of every error fedleak raises on purpose."""


class ConfigError(FedleakError, ValueError):
    """An experiment configuration or argument is invalid.

    The message names the offending key and says what is expected.
    """


class DataError(FedleakError):
    """A dataset is missing, malformed, or cannot be split as asked.

    The message says where fedleak looked and how to get the data.
    """


class ProtocolError(FedleakError):
    """A protocol message (a client reply, a server instruction) is malformed."""
