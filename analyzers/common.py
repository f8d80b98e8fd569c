"""Small helpers shared by the analyzers. A leaf: it imports no other analyzer, so any analyzer
may import it without making a circle.
"""
from __future__ import annotations

import json
from typing import Any



def json_or_none(text: str | None) -> Any:
    """A JSON column of the store as Python data: None stays None, text that is not JSON is
    returned as it is (older stores kept some columns as plain text)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
