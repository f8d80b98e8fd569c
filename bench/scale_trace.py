"""Make a larger trace from a real one, for benchmarking ingest at scale.

    python bench/scale_trace.py IN.json.gz OUT.json.gz --copies 2

The output holds ``--copies`` back-to-back copies of the input's events: copy ``k`` is shifted
in time by ``k`` times the input's span (plus 1 ms), and its ``correlation``, ``External id``
and flow ``id`` values are offset so that copies never link to each other. Everything else
(the header, ``deviceProperties``) is kept. A 2-copy A100 trace has the ~216k events of the
largest traces the issue's speed goal names.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--copies", type=int, default=2)
    a = ap.parse_args()
    opener = gzip.open if a.input.endswith(".gz") else open
    with opener(a.input, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    ts = [e["ts"] for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    span = (max(ts) - min(ts)) + 1000 if ts else 0
    id_step = 10 ** 9
    out = []
    for k in range(a.copies):
        for e in events:
            if not isinstance(e, dict):
                out.append(e)
                continue
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + k * span
            if isinstance(e2.get("id"), int):
                e2["id"] = e2["id"] + k * id_step
            args = e2.get("args")
            if isinstance(args, dict):
                args = dict(args)
                for key in ("correlation", "External id", "external id"):
                    if isinstance(args.get(key), int) and args[key] > 0:
                        args[key] = args[key] + k * id_step
                e2["args"] = args
            out.append(e2)
    doc["traceEvents"] = out
    with gzip.open(a.output, "wt", encoding="utf-8", compresslevel=6) as f:
        json.dump(doc, f, indent=1)
    print(f"{a.output}: {len(out)} events ({a.copies} copies of {len(events)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
