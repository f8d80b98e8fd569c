"""The ``gpuscope runs`` table, from the read layer's run rows."""
from __future__ import annotations

from typing import Any

from ..redact import redact_command
from .names import fit_commands
from .table import DEFAULT_WIDTH, fmt_ns_time, fmt_us, shorten, table


def render_runs(runs: list[dict[str, Any]], width: int = DEFAULT_WIDTH) -> str:
    """The ``gpuscope runs`` table, fitted to ``width`` columns."""
    if not runs:
        return "no runs yet (gpuscope ingest TRACE... or gpuscope run -- CMD)"
    rows = []
    for r in runs:
        dur = (r["ended_ns"] - r["started_ns"]) / 1e3 if r["ended_ns"] and r["started_ns"] else None
        rows.append((r["id"], shorten(r["name"], 28 if width >= 100 else 20), r["status"], r["source"],
                     fmt_ns_time(r["started_ns"]), fmt_us(dur), r["samples"], r["kernels"], r["ops"],
                     "-" if r["exit_code"] is None else r["exit_code"], redact_command(r["command"])))
    # what identifies a run stays; counts go first when the terminal is narrow; the command
    # keeps the program, the script and its arguments (directories go first, then the middle)
    return table(["id", "name", "status", "source", "started", "duration", "samples", "kernels", "ops", "exit",
                  "command"], rows, "rllllrrrrrl", width=width, drop=("samples", "ops", "kernels", "source", "exit", "duration"),
                 flex="command", flex_fit=fit_commands)
