"""Make a larger trace from a real one, for benchmarking ingest at scale, or a set of rank traces
for the multi-rank analyses (exposed communication, stragglers).

    python bench/scale_trace.py IN.json.gz OUT.json.gz --copies 2
    python bench/scale_trace.py IN.json.gz OUT_DIR --ranks 8 [--straggler 3:200] [--hosts 2 --host-skew-us 5000]

The output holds ``--copies`` back-to-back copies of the input's events: copy ``k`` is shifted
in time by ``k`` times the input's span (plus 1 ms), and its ``correlation``, ``External id``
and flow ``id`` values are offset so that copies never link to each other. Everything else
(the header, ``deviceProperties``) is kept. A 2-copy A100 trace has the ~216k events of the
largest traces the issue's speed goal names.

With ``--ranks N`` the output is a directory of N rank traces (``rank{r}.pt.trace.json.gz``),
as a distributed job's profiler writes them: each the ``--copies`` events with its own
``distributedInfo`` (``rank`` r, ``world_size`` N), its own GPU (the input's device ``d``
becomes ``r x D + d``, D the input's device count: GPU events' ``pid`` and ``args.device``,
their process metadata and ``deviceProperties`` ids) and its own host process (CPU ``pid`` +
r), as one process per GPU has.

``--straggler RANK:DELAY_US`` makes RANK arrive DELAY_US late at every collective (a GPU kernel
whose name is a communication kernel's, ``gpuscope.kernel_names``), the others waiting for it:
with the collectives' ends ``e_0 < e_1 < ...`` and ``j`` the number of them ended by an event's
start, every event of the other ranks moves by ``j x DELAY`` and their collectives last DELAY
longer (they wait); every event of RANK moves by ``(j + 1) x DELAY`` (after the last collective
by ``m x DELAY`` like the others), its collectives keep their length. So collective ``j`` ends
at the same time on every rank and starts exactly DELAY later on RANK than on the others.
Collectives are taken one at a time on a device (their intervals do not overlap).

``--hosts H`` names H hosts in ``distributedInfo.hostname`` (``node0``..., consecutive ranks on
one host) and ``--host-skew-us S`` shifts host ``h``'s clock by ``h x S`` µs, as unsynchronised
hosts' traces differ.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from bisect import bisect_right
from pathlib import Path
from typing import Any

#: Kineto categories of events on a GPU's timeline (pid = the device).
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "memcpy", "memset"}


def _straggler(text: str) -> tuple[int, float]:
    try:
        rank, delay = text.split(":")
        r, d = int(rank), float(delay)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--straggler {text!r}: want RANK:DELAY_US, e.g. 3:200") from None
    if r < 0 or d <= 0:
        raise argparse.ArgumentTypeError(f"--straggler {text!r}: RANK is 0 or more, DELAY_US above 0")
    return r, d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=0, help="write OUTPUT as a directory of this many rank traces")
    ap.add_argument("--straggler", type=_straggler, metavar="RANK:DELAY_US",
                    help="with --ranks: RANK starts every collective DELAY_US after the others")
    ap.add_argument("--hosts", type=int, default=0, help="with --ranks: spread the ranks over this many hosts")
    ap.add_argument("--host-skew-us", type=float, default=0.0, help="with --hosts: host h's clock runs h x this late")
    a = ap.parse_args()
    if (a.straggler or a.hosts) and not a.ranks:
        ap.error("--straggler and --hosts need --ranks")
    if a.straggler and a.straggler[0] >= a.ranks:
        ap.error(f"--straggler rank {a.straggler[0]} is not one of the {a.ranks} ranks")
    opener = gzip.open if a.input.endswith(".gz") else open
    with opener(a.input, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    ts = [e["ts"] for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    id_step = 10 ** 9

    from gpuscope.kernel_names import is_communication_kernel

    def gpu_event(e: dict[str, Any]) -> bool:
        return str(e.get("cat", "")).lower() in _GPU_CATS

    def collective(e: dict[str, Any]) -> bool:
        return (str(e.get("cat", "")).lower() == "kernel" and e.get("ph") == "X"
                and is_communication_kernel(e.get("name")) and isinstance(e.get("ts"), (int, float)))

    ends = sorted(e["ts"] + float(e.get("dur") or 0) for e in events if isinstance(e, dict) and collective(e))
    delay = a.straggler[1] if a.straggler else 0.0
    span = (max(ts) - min(ts)) + 1000 + len(ends) * delay if ts else 0
    gpu_pids = sorted({e["pid"] for e in events if isinstance(e, dict) and gpu_event(e) and isinstance(e.get("pid"), int)})
    dev_of = {p: i for i, p in enumerate(gpu_pids)}  # the input's GPUs, numbered 0..D-1
    n_dev = max(len(gpu_pids), 1)

    def shift_of(t: float, rank: int) -> float:
        """How far the straggler model moves an event starting at ``t`` on ``rank``."""
        if not delay:
            return 0.0
        j = bisect_right(ends, t)
        if rank == a.straggler[0] and j < len(ends):
            return (j + 1) * delay
        return j * delay

    def copy(k: int, rank: int | None) -> str:
        """Copy k of the events as JSON text (of ``rank`` when making rank traces)."""
        host = 0 if rank is None or not a.hosts else rank * a.hosts // a.ranks
        clock = host * a.host_skew_us
        out = []
        for e in events:
            if not isinstance(e, dict):
                out.append(json.dumps(e))
                continue
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                t = e2["ts"]
                e2["ts"] = t + k * span + (shift_of(t, rank) if rank is not None else 0.0) + clock
                if delay and rank is not None and rank != a.straggler[0] and collective(e):
                    e2["dur"] = float(e2.get("dur") or 0) + delay  # waits for the straggler
            if isinstance(e2.get("id"), int):
                e2["id"] = e2["id"] + k * id_step
            args = e2.get("args")
            if isinstance(args, dict):
                args = dict(args)
                for key in ("correlation", "External id", "external id"):
                    if isinstance(args.get(key), int) and args[key] > 0:
                        args[key] = args[key] + k * id_step
                e2["args"] = args
            if rank is not None and isinstance(e2.get("pid"), int):
                if e2["pid"] in dev_of:  # a GPU's timeline (and its process metadata): this rank's GPU
                    e2["pid"] = rank * n_dev + dev_of[e2["pid"]]
                    if isinstance(args, dict) and isinstance(args.get("device"), int):
                        args["device"] = e2["pid"]
                else:  # the host process: one per rank
                    e2["pid"] = e2["pid"] + rank
            out.append(json.dumps(e2, indent=1))
        return ",\n".join(out)

    del doc["traceEvents"]
    n = len(events) * a.copies

    def write(path: Path, header: dict[str, Any], rank: int | None) -> None:
        # streamed, a copy at a time: 45 copies (5M events) never sit in memory at once
        head = json.dumps(header, indent=1)
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
            f.write(head[:-1].rstrip() + (",\n" if header else "") + ' "traceEvents": [\n')
            for k in range(a.copies):
                f.write((",\n" if k else "") + copy(k, rank))
            f.write("\n]\n}")

    if a.ranks:
        outdir = Path(a.output)
        outdir.mkdir(parents=True, exist_ok=True)
        props = doc.get("deviceProperties")
        for r in range(a.ranks):
            info = {**(doc.get("distributedInfo") or {}), "rank": r, "world_size": a.ranks}
            if a.hosts:
                info["hostname"] = f"node{r * a.hosts // a.ranks}"
            header = dict(doc, distributedInfo=info)
            if isinstance(props, list):
                # the input's device d is this rank's r x D + d (unlisted devices keep their entry)
                header["deviceProperties"] = [
                    dict(p, id=r * n_dev + dev_of[p["id"]]) if isinstance(p, dict) and p.get("id") in dev_of else p
                    for p in props]
            write(outdir / f"rank{r}.pt.trace.json.gz", header, r)
        extra = f", rank {a.straggler[0]} {delay:g} µs late at {len(ends)} collectives" if delay else ""
        print(f"{outdir}: {a.ranks} ranks of {n} events ({a.copies} copies of {len(events)}){extra}", file=sys.stderr)
        return 0
    write(Path(a.output), doc, None)
    print(f"{a.output}: {n} events ({a.copies} copies of {len(events)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
