"""`gpuscope devices`: the GPUs on this machine, and which metrics each one gives."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "GPUs found on this machine and which metrics each supports"
DESCRIPTION = (
    "List the devices the telemetry collectors find here (NVIDIA through NVML, AMD through amdsmi "
    "or the amd-smi CLI, and the host), with vendor, name, spec key and the metrics each supports. "
    "For every vendor not found, and every metric missing, it says why (no driver, no ROCm, "
    "no permission, not supported by this GPU). Exits 0 also when no GPU is found."
)
NEEDS_DB = False
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("--all-reasons", action="store_true",
                        help="list every unsupported metric with its reason (default: grouped by reason)")


def _doc() -> dict[str, Any]:
    from ..collectors import discover
    from ..metrics import METRICS

    devices, vendors = discover()
    return {
        "schema": "gpuscope.devices/1",
        "vendors": [v.to_dict() for v in vendors],
        "devices": [
            {
                "key": d.key, "vendor": d.vendor, "kind": d.kind, "name": d.name, "spec": d.spec_key,
                "spec_exact": d.spec_exact, "index": d.index, "uuid": d.uuid, "pci_bus_id": d.pci_bus_id,
                "pci_device_id": d.pci_device_id, "memory_total_bytes": d.memory_total_bytes,
                "compute_capability": d.compute_capability, "num_sms": d.num_sms, "parent": d.parent,
                "lost": d.lost, "supported": list(d.supported), "unsupported": d.unsupported,
                "properties": d.properties,
            }
            for d in devices
        ],
        "gpus": sum(1 for d in devices if d.kind != "host"),
        "metrics": {m.name: {"unit": m.otel_unit, "scope": m.scope, "description": m.description} for m in METRICS},
    }


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
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    doc = _doc()
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=1, default=str) + "\n")
    else:
        print(render(doc, all_reasons=args.all_reasons))
    return 0
