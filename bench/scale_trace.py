"""Make a larger trace from a real one, for benchmarking ingest at scale.

    python bench/scale_trace.py IN.json.gz OUT.json.gz --copies 2
    python bench/scale_trace.py IN.json.gz OUT_DIR --ranks 8


The output holds ``--copies`` back-to-back copies of the input's events: copy ``k`` is shifted
in time by ``k`` times the input's span (plus 1 ms), and its ``correlation``, ``External id``
and flow ``id`` values are offset so that copies never link to each other. Everything else
(the header, ``deviceProperties``) is kept. A 2-copy A100 trace has the ~216k events of the
largest traces the issue's speed goal names.

With ``--ranks N`` the output is a directory of N rank traces (``rank{r}.pt.trace.json.gz``),
each the ``--copies`` events with its own ``distributedInfo`` (``rank`` r, ``world_size`` N),
as a distributed job's profiler writes them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=0, help="write OUTPUT as a directory of this many rank traces")
    a = ap.parse_args()
    opener = gzip.open if a.input.endswith(".gz") else open
    with opener(a.input, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    ts = [e["ts"] for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    span = (max(ts) - min(ts)) + 1000 if ts else 0
    id_step = 10 ** 9

    def copy(k: int) -> str:
        """Copy k of the events as JSON text, one event per line group (as Kineto writes them)."""
        out = []
        for e in events:
            if not isinstance(e, dict):
                out.append(json.dumps(e))
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
            out.append(json.dumps(e2, indent=1))
        return ",\n".join(out)

    del doc["traceEvents"]
    n = len(events) * a.copies

    def write(path: Path, header: dict) -> None:
        # streamed, a copy at a time: 45 copies (5M events) never sit in memory at once
        head = json.dumps(header, indent=1)
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
            f.write(head[:-1].rstrip() + (",\n" if header else "") + ' "traceEvents": [\n')
            for k in range(a.copies):
                f.write((",\n" if k else "") + body[k] if body else (",\n" if k else "") + copy(k))
            f.write("\n]\n}")

    if a.ranks:
        body = [copy(k) for k in range(a.copies)]  # the same events in every rank: made once
        outdir = Path(a.output)
        outdir.mkdir(parents=True, exist_ok=True)
        for r in range(a.ranks):
            write(outdir / f"rank{r}.pt.trace.json.gz",
                  dict(doc, distributedInfo={**(doc.get("distributedInfo") or {}), "rank": r, "world_size": a.ranks}))
        print(f"{outdir}: {a.ranks} ranks of {n} events ({a.copies} copies of {len(events)})", file=sys.stderr)
        return 0
    body = []
    write(Path(a.output), doc)
    print(f"{a.output}: {n} events ({a.copies} copies of {len(events)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
