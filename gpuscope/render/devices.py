"""The ``gpuscope devices`` text, from its JSON document (the devices found, their metrics and
the reasons for what is missing)."""
from __future__ import annotations

from typing import Any

from ..textsafe import visible


def _gib(n: int | None) -> str:
    return f"{n / 2**30:.1f} GiB" if n else "?"


def render(doc: dict[str, Any], all_reasons: bool = False) -> str:
    """The text form of the ``devices --json`` document."""
    lines: list[str] = []
    for v in doc["vendors"]:
        if v["available"]:
            extra = ", ".join(f"{k} {val}" for k, val in (v.get("details") or {}).items() if val is not None)
            lines.append(f"{v['vendor']}: found via {v['backend']}" + (f" ({extra})" if extra else ""))
        else:
            lines.append(f"{v['vendor']}: {v['reason']}")
    if doc["gpus"] == 0:
        lines.append("no GPU found on this machine (see the reasons above); telemetry would record the host only")
    for d in doc["devices"]:
        lines.append("")
        # the host row is "host  AMD EPYC ...", not "host  host host  AMD EPYC ..."
        head = f"{d['key']}  {d['name'] or '(unnamed)'}" if d["kind"] == "host" else \
            f"{d['key']}  {d['vendor']} {d['kind']}  {d['name'] or '(unnamed)'}"
        if d["kind"] != "host":
            spec = d["spec"] or "unknown GPU (no spec entry)"
            head += f"  spec: {spec}" + ("" if d["spec_exact"] in (None, True) else " (closest match)")
        lines.append(head)
        facts = []
        if d["memory_total_bytes"]:
            facts.append(("memory " if d["kind"] != "host" else "host memory ") + _gib(d["memory_total_bytes"]))
        for k in ("pci_bus_id", "uuid", "compute_capability", "parent"):
            if d.get(k):
                facts.append(f"{k} {d[k]}")
        props = d.get("properties") or {}
        for k in ("architecture", "driver_version", "mig_mode", "compute_partition", "memory_partition", "backend",
                  "memory_query"):
            if props.get(k):
                facts.append(f"{k} {props[k]}")
        if d["lost"]:
            facts.append("LOST")
        if facts:
            lines.append("  " + ", ".join(facts))
        for note in props.get("notes") or ():
            lines.append(f"  note: {note}")
        lines.append(f"  supported ({len(d['supported'])}): " + (", ".join(d["supported"]) or "none"))
        if d["unsupported"]:
            if all_reasons:
                for m, why in d["unsupported"].items():
                    lines.append(f"  missing {m}: {why}")
            else:
                by_reason: dict[str, list[str]] = {}
                for m, why in d["unsupported"].items():
                    by_reason.setdefault(why, []).append(m)
                for why, ms in by_reason.items():
                    lines.append(f"  missing {', '.join(ms)}: {why}")
    # device names and notes come from drivers and a recording's file: control characters shown
    return "\n".join(visible(line, layout=True) for line in lines)
