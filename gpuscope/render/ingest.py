"""The ``gpuscope ingest`` summary, from the ingest result's document."""
from __future__ import annotations

import re
from typing import Any

from ..textsafe import visible


#: The ingest note on malformed events, which both reports already show as a line of their own.
MALFORMED_NOTE = re.compile(r"skipped \d+ malformed events")


def render_ingest(doc: dict[str, Any]) -> str:
    """The ``gpuscope ingest`` summary."""
    ld = doc["loaded"]
    lines = [
        f"ingested {len(doc['files'])} file(s), {doc['events']} events, as run {doc['run_id']} "
        f"'{visible(str(doc['name']))}'",
        f"  loaded: {ld['kernels']} kernels, {ld['memcpy']} memcpy, {ld['memset']} memset, {ld['ops']} ops, "
        f"{ld['annotations']} annotations, {ld['devices']} devices",
    ]
    lk = doc["linked"]
    total = lk["kernels_with_op"] + lk["kernels_without_op"]
    if total:
        lines.append(f"  linked: {lk['kernels_with_op']} of {total} GPU activities to a CPU op")
    sk = doc["skipped"]
    if sk["malformed"]:
        lines.append("  skipped: " + ", ".join(f"{n} {visible(str(r))}" for r, n in sk["reasons"].items()))
    for n in doc.get("notes", []):
        if not MALFORMED_NOTE.match(n):  # said on the "skipped:" line
            lines.append(f"  note: {visible(str(n))}")  # notes quote names from the trace
    lines.append(f"next: gpuscope analyze {doc['run_id']}")
    return "\n".join(lines)
