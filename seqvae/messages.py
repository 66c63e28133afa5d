"""Lines for the user (what a step did, what it left out, its progress), sent through Python's
logging: the ``seqvae`` logger, INFO for notes and WARNING for warnings.

The command line shows them on stderr as they are (``show_on_stderr``). A library user sees the
warnings as Python shows any warning, and the notes once they configure logging (or call
``show_on_stderr``); ``logging.getLogger("seqvae").setLevel(logging.ERROR)`` silences both.
"""

from __future__ import annotations

import logging
import sys

LOGGER = logging.getLogger("seqvae")


def note(line: str) -> None:
    """A line about what is happening or was done (INFO)."""
    LOGGER.info(line)


def warn(line: str) -> None:
    """A line about something the user should look at (WARNING)."""
    LOGGER.warning(line)


class _CurrentStderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line comes (a redirect, a test's capture)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def show_on_stderr(level: int = logging.INFO) -> None:
    """Shows seqvae's lines on stderr, each as it is, from ``level`` on (idempotent)."""
    if not any(isinstance(handler, _CurrentStderr) for handler in LOGGER.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        LOGGER.addHandler(handler)
    LOGGER.setLevel(level)
    LOGGER.propagate = False
