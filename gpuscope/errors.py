"""Every error gpuscope raises on purpose, in one module (docs/architecture.md, "Errors").

The CLI maps :class:`InputError` and :class:`StoreError` to exit code 2 and one line on stderr,
any other :class:`GpuscopeError` to exit code 1 and one line; a :class:`ParameterError` first
has its quantities spelled as the command's flags. The TUI and the exporters catch the same
classes and show them in their own words.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


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


class RunNotFoundError(InputError):
    """No run of the store has this id or name: unusable input (exit 2), like any unknown run
    reference. ``run`` is what was asked for (an id, or the text a user typed)."""

    def __init__(self, run: int | str, source: str | None = None,
                 message: str = "no such run id or name (see `gpuscope runs`)") -> None:
        super().__init__(source if source is not None else f"run {run!r}", message)
        self.run = run


class StoreError(GpuscopeError):
    """The store cannot be opened or used (locked by another writer, newer schema, ...)."""


class StoreBusyError(StoreError):
    """Another process holds the store's write lock (retried for a while first): a reader that
    can wait (the TUI) tries again later."""


class StoreWriteError(GpuscopeError):
    """The store's file system refused a write while working (no space left, quota, I/O error):
    a failure, not bad input (exit 1). The write was all or nothing, so the store is as it was."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: cannot write to the store ({reason}); the store is as it was")
        self.path = str(path)
        self.reason = reason


class StoreReadOnlyError(StoreError):
    """The store cannot be written at all (a read-only file system, file or folder): unusable
    input for a command that writes (exit 2); commands that only read still work."""

    def __init__(self, path: Path | str, reason: str, *, new: bool = False) -> None:
        super().__init__(f"{path}: cannot create the store ({reason})" if new
                         else f"{path}: cannot write to the store ({reason}); the store is as it was")
        self.path = str(path)
        self.reason = reason


class ParameterError(InputError):
    """An input quantity is missing, malformed or inconsistent with another.

    Analyzers (and calibrate, the run wrapper) speak of quantities, not of how a user typed them: ``parameter`` is the keyword
    the analyzer takes ("params", "kv_heads", ...), and ``problem`` may name other quantities as
    ``{name}`` placeholders ("needs {dtype} to know the bytes per parameter"); what the user gave
    goes in ``values`` (``{value}`` in ``problem``), never into ``problem`` itself, so that its
    braces are never read as placeholders. A front end gives each quantity its own spelling with
    :meth:`render` (the CLI: its flags); ``str()`` and ``source`` / ``message`` use the plain
    quantity names.
    """

    def __init__(self, parameter: str, problem: str, values: dict[str, Any] | None = None) -> None:
        self.parameter = parameter
        self.problem = problem
        #: the placeholders of ``problem`` that are not quantities (the user's text, numbers)
        self.values = dict(values or {})
        super().__init__(*self.render())

    def render(self, spelling: dict[str, str] | None = None,
               default: Callable[[str], str] | None = None) -> tuple[str, str]:
        """(source, message) with each quantity spelled as ``spelling`` says; a quantity it does
        not name is spelled by ``default`` (else keeps its own name)."""
        spelling = spelling or {}

        def spell(key: str) -> str:
            return spelling[key] if key in spelling else default(key) if default else key

        class _Names(dict):  # placeholders that are not values are quantities
            def __missing__(self, key: str) -> str:
                return spell(key)

        return spell(self.parameter), self.problem.format_map(_Names(self.values))
