"""`gpuscope devices`: the GPUs on this machine, and which metrics each one gives."""
from __future__ import annotations

import argparse
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


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from ..render.devices import render
    from ..render.json import ascii_document

    doc = _doc()
    if args.json:
        sys.stdout.write(ascii_document(doc) + "\n")
    else:
        print(render(doc, all_reasons=args.all_reasons))
    return 0
