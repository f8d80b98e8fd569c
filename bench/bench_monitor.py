#!/usr/bin/env python3
"""`gpuscope monitor`'s own cost (issue 17): 8 replayed GPUs, CPU as a share of one core at
1 s and at 0.1 s, and resident memory over the measurement.

    python bench/bench_monitor.py                   # 60 s per interval, after a 5 s warm-up
    python bench/bench_monitor.py --seconds 600     # the issue's ten minutes (memory flat)
    python bench/bench_monitor.py --json

Each interval runs ``gpuscope monitor --replay <8 GPUs> --prometheus PORT --interval S`` as its
own process (the synthetic H100/A100 recording's GPUs copied into eight, built once by
bench/bench_tui.py into ~/.cache/gpuscope-bench/tui), scraped every 5 s over HTTP as Prometheus
would. CPU is the process's user + system time (all threads) from /proc over the measured
seconds; memory is its RSS every 5 s. Goals: under 1 % of one core at 1 s, under 5 % at 0.1 s,
memory flat (the last RSS reading within 5 % or 2 MiB of the first after warm-up).

Peers: none run here. dcgm-exporter and AMD's device-metrics-exporter need a real GPU and its
driver; neither can play a recording.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
GOALS = {1.0: 0.01, 0.1: 0.05}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(recording: Path, interval_s: float, seconds: float, warmup_s: float = 5.0) -> dict[str, Any]:
    port = _free_port()
    p = subprocess.Popen([sys.executable, "-m", "gpuscope", "monitor", "--replay", str(recording),
                          "--prometheus", str(port), "--interval", str(interval_s)],
                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(warmup_s)
        if p.poll() is not None:
            raise SystemExit(f"bench_monitor: monitor exited: {p.stderr.read()[-800:]}")
        c0, w0 = _cpu_s(p.pid), time.monotonic()
        rss = [_rss_mib(p.pid)]
        scrapes = 0
        scrape_bytes = 0
        while time.monotonic() - w0 < seconds:
            time.sleep(min(5.0, max(0.0, seconds - (time.monotonic() - w0))))
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                scrape_bytes = len(r.read())
            scrapes += 1
            rss.append(_rss_mib(p.pid))
        cpu = (_cpu_s(p.pid) - c0) / (time.monotonic() - w0)
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
    flat = abs(rss[-1] - rss[0]) <= max(2.0, 0.05 * rss[0])
    return {"interval_s": interval_s, "seconds": seconds, "cpu_share_of_one_core": round(cpu, 4),
            "goal_cpu_share": GOALS.get(interval_s), "met": cpu < GOALS.get(interval_s, 1.0),
            "rss_mib_first": round(rss[0], 1), "rss_mib_last": round(rss[-1], 1), "rss_mib_max": round(max(rss), 1),
            "memory_flat": flat, "scrapes": scrapes, "scrape_bytes": scrape_bytes, "exit_code": p.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measured seconds per interval (default 60)")
    ap.add_argument("--intervals", default="1,0.1", help="sampling intervals to measure (default 1,0.1)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "gpuscope-bench" / "tui")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from bench_tui import recording_of_8_gpus

    args.cache.mkdir(parents=True, exist_ok=True)
    rec = recording_of_8_gpus(args.cache)
    results = []
    for s in (float(x) for x in args.intervals.split(",")):
        print(f"monitor, 8 GPUs every {s:g} s, {args.seconds:g} s ...", file=sys.stderr, flush=True)
        results.append(measure(rec, s, args.seconds))
    if args.json:
        print(json.dumps({"results": results}, indent=2))
        return 0
    for r in results:
        goal = r["goal_cpu_share"]
        verdict = "" if goal is None else f"   goal < {goal:.0%}   {'met' if r['met'] else 'MISSED'}"
        print(f"monitor, 8 GPUs every {r['interval_s']:g} s: {r['cpu_share_of_one_core']:.2%} of one core{verdict}")
        print(f"    RSS {r['rss_mib_first']} -> {r['rss_mib_last']} MiB over {r['seconds']:g} s "
              f"(max {r['rss_mib_max']}; {'flat' if r['memory_flat'] else 'GROWING'}); "
              f"{r['scrapes']} scrapes of {r['scrape_bytes']:,} bytes; exit {r['exit_code']}")
    print("peers: none: dcgm-exporter and AMD's device-metrics-exporter need a real GPU and cannot play a recording")
    return 0


if __name__ == "__main__":
    sys.exit(main())
