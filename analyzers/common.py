"""Small helpers shared by the analyzers. A leaf: it imports no other analyzer, so any analyzer
may import it without making a circle.
"""
from __future__ import annotations

import json
from typing import Any

from ..errors import InputError


def json_or_none(text: str | None) -> Any:
    """A JSON column of the store as Python data: None stays None, text that is not JSON is
    returned as it is (older stores kept some columns as plain text)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


class ParameterError(InputError):
    """An analyzer's input quantity is missing, malformed or inconsistent with another.

    Analyzers speak of quantities, not of how a user typed them: ``parameter`` is the keyword
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

    def render(self, spelling: dict[str, str] | None = None) -> tuple[str, str]:
        """(source, message) with each quantity spelled as ``spelling`` says (default: its own name)."""
        spelling = spelling or {}

        class _Names(dict):  # a quantity without a spelling keeps its name
            def __missing__(self, key: str) -> str:
                return spelling.get(key, key)

        names = _Names(self.values)
        return spelling.get(self.parameter, self.parameter), self.problem.format_map(names)
