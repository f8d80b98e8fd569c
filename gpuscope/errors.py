"""Typed errors. The CLI maps :class:`InputError` to exit code 2 and one line on stderr."""
from __future__ import annotations


class GpuscopeError(Exception):
    """Base class of every error gpuscope raises on purpose."""


class InputError(GpuscopeError):
    """Unusable input or arguments: a bad trace file, an unknown run, an unknown GPU.

    ``source`` names the input (a path, a run reference, a GPU name) and the message says
    what is wrong with it, so that ``f"{source}: {message}"`` is a complete line for a user.
    """

    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message


class StoreError(GpuscopeError):
    """The store cannot be opened or used (locked by another writer, newer schema, ...)."""
