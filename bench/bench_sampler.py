#!/usr/bin/env python3
"""The telemetry sampler's own cost, and its effect on decode throughput.

    python bench/bench_sampler.py                 # collector + sampler cost (any machine)
    python bench/bench_sampler.py --decode        # + decode throughput with sampling off/10/100 Hz (GPU)
    python bench/bench_sampler.py --json

Part 1, cost per tick per device: each collector's ``sample()`` called back to back
(``--calls`` times), CPU time of the calling thread per call divided by its devices: the
replay collector (the synthetic 3-device recording), the NVML collector over the fake pynvml
(tests/fakes, 2 GPUs: H100 with GPM + A100), the host collector (psutil, this process's tree),
and the real NVML collector when a GPU is here.

Part 2, the whole sampler for ``--seconds`` at 10 Hz and at 100 Hz with the store sink
(DuckDB, flush every 1 s): the sampling thread's CPU per tick, the sink's CPU, the whole
process's CPU as a share of one core, lateness and missed ticks.

Part 3 (``--decode``, needs a GPU; runs on the CPU with ``--allow-cpu`` only to check the
plumbing): ``examples/tiny_llm.py --json`` as a child process, as ``gpuscope run`` would run
it, with no sampling, 10 Hz and 100 Hz (real collectors, store sink, the child's process tree
watched), in alternating order over ``--repeat`` rounds; the median decode tokens/s of each
and the change against no sampling. Goal: under 0.3 % at 10 Hz.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
T0 = time.monotonic()
sys.path.insert(0, str(REPO / "tests"))  # the fake pynvml lives with the tests


def _per_call(collector: Any, calls: int, step: Any = None) -> dict[str, Any]:
    devices = collector.open()
    n = max(1, sum(1 for d in devices if not d.lost))
    collector.sample()  # first call: counters, lazy imports
    cpu: list[int] = []
    wall: list[int] = []
    for _ in range(calls):
        if step:
            step()
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        collector.sample()
        cpu.append(time.thread_time_ns() - c0)
        wall.append(time.perf_counter_ns() - w0)
    collector.close()
    cpu_us = statistics.median(cpu) / 1e3
    return {"devices": n, "cpu_us_per_tick": round(cpu_us, 1), "cpu_us_per_tick_per_device": round(cpu_us / n, 1),
            "wall_us_per_tick": round(statistics.median(wall) / 1e3, 1)}


def part1(calls: int) -> dict[str, Any]:
    from fakes.fake_pynvml import FakeNvml

    from gpuscope.collectors import CollectorUnavailable, HostCollector, NvmlCollector, ProcessTree, ReplayCollector

    out: dict[str, Any] = {}
    rec = REPO / "fixtures" / "recordings" / "synthetic_h100_a100.jsonl"
    out["replay (3 devices)"] = _per_call(ReplayCollector(rec, realtime=False, loop=True), calls)
    fake = FakeNvml("nvml_h100_a100.json")
    fake.table["devices"][1]["ticks"] = fake.table["devices"][1]["ticks"][:2]  # keep the A100 alive
    out["nvml over fake pynvml (H100+A100)"] = _per_call(NvmlCollector(nvml=fake, gpm_min_interval_s=0.0), calls)
    out["host (psutil, own tree)"] = _per_call(HostCollector(ProcessTree([os.getpid()])), calls)
    try:
        out["nvml (real)"] = _per_call(NvmlCollector(), calls)
    except CollectorUnavailable as exc:
        out["nvml (real)"] = {"skipped": exc.reason}
    return out


def part2(seconds: float) -> dict[str, Any]:
    from gpuscope.collectors import default_collectors, ProcessTree, ReplayCollector
    from gpuscope.sampling import Sampler
    from gpuscope.sinks import StoreSink

    out: dict[str, Any] = {}
    rec = REPO / "fixtures" / "recordings" / "synthetic_h100_a100.jsonl"
    for hz in (0, 10, 100):  # 0: a 1 s warm-up at 10 Hz (first imports, DuckDB's first scans), discarded
        with tempfile.TemporaryDirectory() as tmp:
            tree = ProcessTree([os.getpid()])
            cols = [c for c in default_collectors(tree) if c.source == "host"]
            cols.append(ReplayCollector(rec, realtime=False, loop=True))
            sink = StoreSink(Path(tmp) / "s.duckdb", name=f"bench-{hz}hz")
            s = Sampler(cols + [c for c in default_collectors(tree, host=False)], [sink], interval_s=1 / (hz or 10),
                        tree=tree)
            s.start()  # opening collectors and the store is not part of the steady-state cost
            p0, w0 = time.process_time(), time.monotonic()
            time.sleep(seconds if hz else 1.0)
            cpu_share = (time.process_time() - p0) / (time.monotonic() - w0)
            st = s.stop()
            if not hz:
                continue
            out[f"{hz} Hz"] = {
                "devices": st.devices, "ticks": st.ticks, "missed_ticks": st.missed_ticks,
                "tick_cpu_us_mean": round((st.tick_cpu_ns_mean or 0) / 1e3, 1),
                "cpu_us_per_tick_per_device": round((st.cpu_ns_per_tick_per_device or 0) / 1e3, 1),
                "sink_cpu_ms_per_s": round(st.sink_cpu_ns / 1e6 / seconds, 1),
                "process_cpu_share_of_one_core": round(cpu_share, 4),
                "lateness_ms_p99": round((st.lateness_ns_p99 or 0) / 1e6, 2),
                "flush_ms_max": round(max(sink.flush_wall_ns) / 1e6, 1) if sink.flush_wall_ns else None,
                "flushes": sink.flushes,
            }
    return out


def _decode_once(hz: float | None, args: argparse.Namespace, db: Path) -> float:
    from gpuscope.collectors import ProcessTree, default_collectors
    from gpuscope.sampling import Sampler
    from gpuscope.sinks import StoreSink

    cmd = [sys.executable, str(REPO / "examples" / "tiny_llm.py"), "--json", *args.workload_args]
    sampler = None
    tree = ProcessTree([])
    if hz:
        sampler = Sampler(default_collectors(tree), [StoreSink(db, name=f"decode-{hz:g}hz")],
                          interval_s=1 / hz, tree=tree)
        sampler.start()
    try:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        tree.roots = (child.pid,)
        out, _ = child.communicate()
    finally:
        if sampler is not None:
            sampler.stop()
    if child.returncode != 0:
        raise SystemExit(f"bench_sampler: the workload failed (exit {child.returncode})")
    return float(json.loads(out.strip().splitlines()[-1])["decode_tokens_per_s"])


def part3(args: argparse.Namespace) -> dict[str, Any]:
    from gpuscope.collectors import CollectorUnavailable, NvmlCollector

    try:
        c = NvmlCollector()
        gpus = [d.name for d in c.open() if d.kind == "gpu"]
        c.close()
    except CollectorUnavailable as exc:
        gpus = []
        if not args.allow_cpu:
            return {"skipped": f"no NVIDIA GPU ({exc.reason})"}
    modes: list[float | None] = [None, 10.0, 100.0]
    results: dict[str, list[float]] = {"off": [], "10 Hz": [], "100 Hz": []}
    names = {None: "off", 10.0: "10 Hz", 100.0: "100 Hz"}
    stopped = None
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "s.duckdb"
        longest_round_s = 0.0
        for r in range(args.repeat):
            # under --budget-s, a round that would not end in time is not begun: the rounds
            # already run stay whole (a step cut at its limit would bring back none)
            left = args.budget_s - (time.monotonic() - T0) if args.budget_s else None
            if left is not None and r and left < longest_round_s * 1.2:
                stopped = f"{r} of {args.repeat} rounds: a round takes about {longest_round_s:.0f} s, {left:.0f} s of --budget-s were left"
                break
            t_round = time.monotonic()
            order = modes[r % 3:] + modes[:r % 3]  # rotate, so no mode always runs first
            for hz in order:
                tps = _decode_once(hz, args, db)
                results[names[hz]].append(tps)
                print(f"  round {r + 1}: {names[hz]:>6}  {tps:,.1f} decode tokens/s", file=sys.stderr)
            longest_round_s = max(longest_round_s, time.monotonic() - t_round)
    med = {k: statistics.median(v) for k, v in results.items()}
    return {"gpus": gpus, "repeat": len(results["off"]), "stopped": stopped, "decode_tokens_per_s_median": med, "runs": results,
            "change_vs_off_pct": {k: round(100 * (med[k] - med["off"]) / med["off"], 3) for k in ("10 Hz", "100 Hz")},
            "goal_10hz_pct": 0.3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=500, help="sample() calls per collector in part 1")
    ap.add_argument("--seconds", type=float, default=5.0, help="sampler run per rate in part 2")
    ap.add_argument("--decode", action="store_true", help="part 3: decode throughput with sampling (needs a GPU)")
    ap.add_argument("--allow-cpu", action="store_true", help="run part 3 on the CPU too (plumbing check, not a result)")
    ap.add_argument("--repeat", type=int, default=6, help="rounds of part 3 (each runs all three modes)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop part 3 before a round that would end past this many seconds from the start")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("workload_args", nargs="*", help="extra arguments for examples/tiny_llm.py (after --)")
    args = ap.parse_args()
    doc: dict[str, Any] = {"collectors": part1(args.calls), "sampler": part2(args.seconds)}
    if args.decode:
        doc["decode"] = part3(args)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print("collector cost, median per sample() call (CPU of the calling thread):")
    for k, v in doc["collectors"].items():
        if "skipped" in v:
            print(f"  {k:38} skipped: {v['skipped']}")
        else:
            print(f"  {k:38} {v['cpu_us_per_tick']:8.1f} µs/tick  {v['cpu_us_per_tick_per_device']:8.1f} µs/tick/device"
                  f"  (wall {v['wall_us_per_tick']:.1f} µs, {v['devices']} devices)")
    print(f"sampler with the store sink, {args.seconds:g} s per rate:")
    for k, v in doc["sampler"].items():
        print(f"  {k:>6}: {v['ticks']} ticks ({v['missed_ticks']} missed), {v['devices']} devices, "
              f"{v['tick_cpu_us_mean']:.1f} µs CPU/tick = {v['cpu_us_per_tick_per_device']:.1f} µs/tick/device; "
              f"sink {v['sink_cpu_ms_per_s']:.1f} ms CPU/s (flush max {v['flush_ms_max']} ms); "
              f"process {100 * v['process_cpu_share_of_one_core']:.2f} % of one core; p99 lateness {v['lateness_ms_p99']} ms")
    if "decode" in doc:
        d = doc["decode"]
        if "skipped" in d:
            print(f"decode throughput: skipped: {d['skipped']}")
        else:
            m = d["decode_tokens_per_s_median"]
            print(f"decode throughput, median of {d['repeat']} alternating rounds ({', '.join(d['gpus']) or 'CPU'}):")
            for k in ("off", "10 Hz", "100 Hz"):
                extra = "" if k == "off" else f"  {d['change_vs_off_pct'][k]:+.3f} % vs off ({m[k] / m['off']:.4f}x)"
                print(f"  {k:>6}: {m[k]:12,.1f} tokens/s{extra}")
            ok = abs(d["change_vs_off_pct"]["10 Hz"]) < d["goal_10hz_pct"]
            print(f"  goal: |change at 10 Hz| < {d['goal_10hz_pct']} %: {'MET' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
