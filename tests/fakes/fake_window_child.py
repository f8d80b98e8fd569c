"""A stand-in for an armed Python process of a `gpuscope run` (the bootstrap's side of the window
requests, gpuscope/run/contract.py): it says it is armed, polls the requests file, answers each
request meant for it with a ``window_open`` (or, with ``--skip REASON``, a ``window_skipped``)
event, and writes a ``windows.jsonl`` line once its "window" (a wait of the request's duration)
is over. No torch, no profiler: what the wrapper, ``gpuscope profile`` and the TUI read is all
that is imitated.

    python fake_window_child.py N [--skip REASON] [--release PATH] [--deadline S]

It exits once it has answered N requests, when PATH exists, or after S seconds (default 60).
"""
from __future__ import annotations

import argparse
import json
import os
import time

POLL_S = 0.25  # contract.REQUEST_POLL_S (this file runs without gpuscope on its path)


def emit(path: str, obj: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("answers", type=int)
    ap.add_argument("--skip", default=None)
    ap.add_argument("--release", default=None)
    ap.add_argument("--deadline", type=float, default=60.0)
    args = ap.parse_args()
    run_dir = os.environ["GPUSCOPE_RUN_DIR"]
    events, requests, windows = (os.path.join(run_dir, n) for n in
                                 ("profiler.jsonl", "window-requests.jsonl", "windows.jsonl"))
    pid = os.getpid()
    emit(events, {"event": "armed", "pid": pid, "ts_ns": time.time_ns()})
    end = time.monotonic() + args.deadline
    pos = answered = 0
    while answered < args.answers and time.monotonic() < end:
        if args.release and os.path.exists(args.release):
            break
        try:
            with open(requests, "rb") as f:
                f.seek(pos)
                data = f.read()
        except FileNotFoundError:
            data = b""
        lines = data.split(b"\n")[:-1]
        pos += sum(len(x) + 1 for x in lines)
        for raw in lines:
            req = json.loads(raw)
            if req["pids"] is not None and pid not in req["pids"]:
                continue
            if args.skip:
                emit(events, {"event": "window_skipped", "pid": pid, "ts_ns": time.time_ns(), "reason": args.skip,
                              "request": req["id"]})
            else:
                start = time.time_ns()
                path = os.path.join(run_dir, "traces", f"fake-{pid}-{req['id']}")
                emit(events, {"event": "window_open", "pid": pid, "ts_ns": start, "path": path,
                              "label": "requested", "request": req["id"]})
                time.sleep(req["duration_s"])  # the window
                emit(windows, {"pid": pid, "start_ns": start, "end_ns": time.time_ns(), "path": path,
                               "label": "requested", "request": req["id"]})
            answered += 1
        time.sleep(POLL_S)
    emit(events, {"event": "exit", "pid": pid, "ts_ns": time.time_ns()})


if __name__ == "__main__":
    main()
