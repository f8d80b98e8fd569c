#!/usr/bin/env python3
"""Which telemetry read slows a host-bound decode loop, and by how much.

    python bench/nvml_interference.py [--rounds 5] [--window-s 3] [--json]
    python bench/nvml_interference.py --dry-run      # the fake pynvml and a CPU model: plumbing only

``bench_sampler.py --decode`` on an H100 found decode tokens/s of ``examples/tiny_llm.py``
8 % lower with the sampler at 10 Hz and 22 % lower at 100 Hz, although the sampler runs in
another process and uses a few % of one core of sixteen. This script splits that figure up.
One process builds the tiny model on the GPU once and decodes for ``--window-s`` seconds per
mode; a second process (no torch: as ``gpuscope run``'s sampler is another process) does one
kind of telemetry read at a fixed rate while it does, switched by a pipe between windows. The
modes, in an order that rotates each round, with ``off`` twice per round (their difference is
the noise):

- ``collector@10``, ``collector@100``: the NVML collector's whole ``sample()`` (its own pacing
  of the slow counters, GPM, processes and XID events), the decoding process watched;
- ``fields@100``: ``nvmlDeviceGetFieldValues`` of the fields read every tick;
- ``slow_fields@10``: the counter fields the collector reads once a second (energy), 10x as often;
- ``getters@100``: the per-tick getters (temperatures, clocks, utilization, memory, fan...);
- ``gpm@100``: a GPM sample and the metrics between it and the previous one;
- ``processes@10``: the running processes and per-process utilization, 10x the collector's pace;
- ``xid@100``: the non-blocking wait for XID events;
- ``host@10``: the host collector (psutil over the decoding process);
- ``spin``: a busy Python loop (CPU contention alone, as a control).

Each window's decode tokens/s is set against the mean of the two ``off`` windows of its round;
the median change over the rounds and its range are printed, with the read's own wall time per
call. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODES = ["off", "collector@10", "collector@100", "fields@100", "slow_fields@10", "getters@100",
         "gpm@100", "processes@10", "xid@100", "host@10", "spin", "off"]


def _reader(conn: Any, main_pid: int, dry: bool) -> None:
    """The side process: open the collectors, then do the current mode's read at its rate."""
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tests"))
    from gpuscope.collectors import HostCollector, NvmlCollector, ProcessTree

    nvml: Any = None
    if dry:
        from fakes.fake_pynvml import FakeNvml
        nvml = FakeNvml("nvml_h100_a100.json")
        nvml.table["devices"][1]["ticks"] = nvml.table["devices"][1]["ticks"][:2]
    col = NvmlCollector(nvml=nvml)
    col.open()
    col.set_pids({main_pid})
    host = HostCollector(ProcessTree([main_pid]))
    host.open()
    gpus = [g for g in col._gpus if not g.lost]
    mod = col.nvml

    def fields(slow: bool) -> None:
        for g in gpus:
            ids = g.slow_fields if slow else g.fields
            if ids:
                mod.nvmlDeviceGetFieldValues(g.handle, ids)

    def getters() -> None:
        for g in gpus:
            for rd in g.reads:
                try:
                    rd.fn(g.handle)
                except Exception:
                    pass

    def gpm() -> None:
        for g in gpus:
            if g.gpm_ids:
                col._gpm_metrics(g, time.monotonic())

    def processes() -> None:
        for g in gpus:
            if g.proc_reads:
                col._processes(g)

    def xid() -> None:
        if col._xid_set is not None:
            col._drain_xid()

    def spin() -> None:
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass

    fns = {"collector": col.sample, "fields": lambda: fields(False), "slow_fields": lambda: fields(True),
           "getters": getters, "gpm": gpm, "processes": processes, "xid": xid, "host": host.sample,
           "spin": spin}
    info = {"gpus": len(gpus), "fields": [len(g.fields) for g in gpus],
            "slow_fields": [len(g.slow_fields) for g in gpus],
            "getters": [[",".join(rd.metrics) for rd in g.reads] for g in gpus],
            "gpm_metrics": [len(g.gpm_ids) for g in gpus], "xid": col._xid_set is not None}
    conn.send(info)
    mode, fn, period, calls, spent = "off", None, 0.0, 0, 0.0
    nxt = time.monotonic()
    while True:
        wait = max(0.0, nxt - time.monotonic()) if fn else None
        if conn.poll(wait):
            msg = conn.recv()
            conn.send({"mode": mode, "calls": calls, "ms_per_call": round(spent / max(calls, 1) * 1e3, 3)})
            if msg == "quit":
                break
            mode, calls, spent = msg, 0, 0.0
            name, _, rate = msg.partition("@")
            fn = fns.get(name)
            period = 1.0 / float(rate) if rate else 0.0
            nxt = time.monotonic()
            continue
        if fn is None:
            continue
        t0 = time.perf_counter()
        try:
            fn()
        except Exception:
            pass
        spent += time.perf_counter() - t0
        calls += 1
        nxt += period
        if nxt < time.monotonic():
            nxt = time.monotonic()
    col.close()
    host.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window-s", type=float, default=3.0)
    ap.add_argument("--new-tokens", type=int, default=16, help="tokens per generation (short: a window ends near its time)")
    ap.add_argument("--budget-s", type=float, default=0.0, help="stop before a round that would not end in time")
    ap.add_argument("--dry-run", action="store_true", help="fake pynvml, CPU model: checks the plumbing only")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    sys.path.insert(0, str(REPO / "examples"))
    import torch
    import tiny_llm

    targs = tiny_llm.build_parser().parse_args(["--device", "cpu"] if args.dry_run else [])
    model, prompt, sizes = tiny_llm.setup(targs)
    batch = prompt.shape[0]
    new_tokens = max(2, min(sizes["new_tokens"], args.new_tokens))
    tiny_llm.generate(model, prompt, 8, warmup=True)

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    reader = ctx.Process(target=_reader, args=(there, os.getpid(), args.dry_run), daemon=True)
    reader.start()
    info = here.recv()

    def switch(mode: str) -> dict[str, Any]:
        here.send(mode)
        return here.recv()

    def window() -> float:
        steps, spent = 0, 0.0
        end = time.perf_counter() + args.window_s
        while time.perf_counter() < end:
            r = tiny_llm.generate(model, prompt, new_tokens)
            steps += new_tokens - 1
            spent += r.decode_s
        return batch * steps / spent

    rows: dict[str, list[float]] = {m: [] for m in MODES}
    changes: dict[str, list[float]] = {m: [] for m in MODES if m != "off"}
    ms_per_call: dict[str, list[float]] = {m: [] for m in MODES if m != "off"}
    round_s = None
    done = 0
    for rnd in range(args.rounds):
        if args.budget_s and round_s and time.monotonic() - t_start + round_s > args.budget_s:
            break
        r0 = time.monotonic()
        k = rnd % len(MODES)
        order = MODES[k:] + MODES[:k]
        got: dict[str, list[float]] = {}
        for m in [*order, "off"]:
            stat = switch(m)  # the reader answers with the statistics of the mode it leaves
            if stat["mode"] in ms_per_call and stat["calls"]:
                ms_per_call[stat["mode"]].append(stat["ms_per_call"])
            if len(got) == len(set(order)) and sum(map(len, got.values())) == len(order):
                break
            time.sleep(0.2)
            got.setdefault(m, []).append(window())
        off = statistics.mean(got["off"])
        for m, vals in got.items():
            rows[m].extend(vals)
            if m != "off":
                changes[m].append((vals[0] / off - 1) * 100)
        changes.setdefault("off vs off", []).append((got["off"][0] / got["off"][1] - 1) * 100)
        round_s = time.monotonic() - r0
        done += 1
    switch("quit")
    reader.join(10)
    result = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() and not args.dry_run else "cpu",
        "torch": torch.__version__, "rounds": done, "window_s": args.window_s, "reader": info,
        "decode_tokens_per_s_off_median": round(statistics.median(rows["off"]), 2) if rows["off"] else None,
        "modes": {m: {"change_pct_median": round(statistics.median(v), 2), "change_pct_min": round(min(v), 2),
                      "change_pct_max": round(max(v), 2),
                      "read_ms_per_call": round(statistics.median(ms_per_call[m]), 3) if ms_per_call.get(m) else None}
                  for m, v in changes.items() if v},
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{result['device']}, torch {result['torch']}, {done} rounds of {len(MODES)} windows of {args.window_s} s; "
          f"decode off: {result['decode_tokens_per_s_off_median']} tokens/s (median)")
    print(f"reader: {json.dumps(info)}")
    print(f"{'mode':<16}{'change % (median)':>19}{'range':>20}{'ms/call':>10}")
    for m, d in result["modes"].items():
        rng = f"{d['change_pct_min']:+.1f}..{d['change_pct_max']:+.1f}"
        ms = "" if d["read_ms_per_call"] is None else f"{d['read_ms_per_call']:.3f}"
        print(f"{m:<16}{d['change_pct_median']:>+19.2f}{rng:>20}{ms:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
