"""Cost of `gpuscope run` on the example workload: bare, under `gpuscope run --no-profile`
(telemetry only), and with profiler windows, in alternating order.

    python bench/bench_run.py                      # 5 rounds, CPU or GPU as available
    python bench/bench_run.py --rounds 9 --json
    python bench/bench_run.py -- --preset gpu --seconds 20   # flags after -- go to tiny_llm.py

Each round runs the three forms once, in a rotating order, and reads the workload's own
decode throughput (``decode_tokens_per_s`` from ``tiny_llm.py --json``) and the wall time of
the whole process. The medians per form and the ratios against bare are printed; the spread
(min..max) shows what "within noise" means on this machine. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "tiny_llm.py"


def _one(form: str, workload: list[str], db: Path) -> tuple[float, float]:
    cmd = [sys.executable, str(EXAMPLE), "--json", *workload]
    if form == "no-profile":
        cmd = [sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--no-profile", "--no-analyze", "-q", "--", *cmd]
    elif form == "windows":
        cmd = [sys.executable, "-m", "gpuscope", "run", "--db", str(db), "--profile-delay", "1",
               "--profile-duration", "2", "--no-analyze", "-q", "--", *cmd]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"bench_run: {form} failed ({p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("{"))
    return float(json.loads(line)["decode_tokens_per_s"]), wall


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    workload = ["--seconds", "6", "--warmup", "1"]
    if "--" in argv:
        i = argv.index("--")
        argv, workload = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    forms = ["bare", "no-profile", "windows"]
    results: dict[str, list[tuple[float, float]]] = {f: [] for f in forms}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        for r in range(args.rounds):
            order = forms[r % 3:] + forms[:r % 3]
            for form in order:
                results[form].append(_one(form, workload, db))
                print(f"round {r + 1}/{args.rounds} {form:10s} decode {results[form][-1][0]:10.1f} tok/s "
                      f"wall {results[form][-1][1]:6.2f} s", file=sys.stderr, flush=True)
    summary = {}
    base_tps = statistics.median(t for t, _ in results["bare"])
    base_wall = statistics.median(w for _, w in results["bare"])
    for form in forms:
        tps = [t for t, _ in results[form]]
        wall = [w for _, w in results[form]]
        summary[form] = {
            "decode_tokens_per_s_median": statistics.median(tps), "min": min(tps), "max": max(tps),
            "wall_s_median": statistics.median(wall),
            "throughput_vs_bare": statistics.median(tps) / base_tps,
            "wall_vs_bare": statistics.median(wall) / base_wall,
        }
    if args.json:
        print(json.dumps({"workload": workload, "rounds": args.rounds, "forms": summary, "runs": results}, indent=1))
        return 0
    print(f"workload: tiny_llm.py {' '.join(workload)}   rounds: {args.rounds} (alternating order)")
    print(f"{'form':12s} {'decode tok/s (median)':>22s} {'spread':>20s} {'vs bare':>8s} {'wall s':>8s} {'vs bare':>8s}")
    for form in forms:
        s = summary[form]
        print(f"{form:12s} {s['decode_tokens_per_s_median']:22.1f} {s['min']:9.1f}..{s['max']:<9.1f} "
              f"{s['throughput_vs_bare']:8.3f} {s['wall_s_median']:8.2f} {s['wall_vs_bare']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
