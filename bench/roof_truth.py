"""Roof truth: over every shared real trace, how many ops and kernels are shown above 100 % of
the roof they are judged against (issue 28: "no op or kernel is ever shown above 100 %").

Each trace (the vLLM graph capture and its replay together, as one run) is ingested into a
temporary store, analyzed with the spec roof, and every op and kernel entry whose
``pct_of_roof`` exceeds 1.0 is counted and listed (worst first) with its shapes, percent, class
and the roof it was judged against. Also printed: how many entries are ``cache_bound`` and how
many are flagged ``model_error`` (percent withheld), and the run's roofline coverage (the share of
its GPU time judged against a roof, ``coverage`` of ``analyze --json``) with its largest unjudged
op or kernel.

    python bench/roof_truth.py                 # ../shared/data/traces
    python bench/roof_truth.py DIR --top 5 --json
    python bench/roof_truth.py --issue-cases   # plus the issue's three cases, rebuilt

Exit status 0 whatever the numbers (``--check``: 1 when any entry is above 100 %); 2 when the
traces folder is missing.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = ROOT.parent / "shared" / "data" / "traces"
#: A percent of roof above this is "over the roof" (float noise at exactly 100 % is not).
OVER = 1.0 + 1e-9


def trace_units(folder: Path) -> list[tuple[str, list[Path]]]:
    """The runs to ingest: one per trace file, except a folder holding a graph capture and its
    replay (the vLLM one), which is one run of both files."""
    units: list[tuple[str, list[Path]]] = []
    grouped: set[Path] = set()
    for d in sorted(p for p in folder.rglob("*") if p.is_dir()):
        files = sorted(d.glob("*.json.gz"))
        if any("capture" in f.name for f in files) and len(files) > 1:
            units.append((str(d.relative_to(folder)), files))
            grouped.update(files)
    for f in sorted(folder.rglob("*.json.gz")):
        if f not in grouped:
            units.append((str(f.relative_to(folder)), [f]))
    return sorted(units)


# The three over-roof cases of issue 28, rebuilt as small Kineto traces with the real kernel
# names and the shapes, strides and durations the issue reports (the traces themselves are held
# back): --issue-cases adds them to the measurement.
_A100 = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42505273344, "computeMajor": 8,
          "computeMinor": 0, "numSms": 108, "warpSize": 32}]
_H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816, "computeMajor": 9,
          "computeMinor": 0, "numSms": 132, "warpSize": 32}]


def _op(name: str, ts: float, dur: float, ext: int, dims: list[Any], types: list[str],
        strides: list[Any] | None = None) -> list[dict[str, Any]]:
    args: dict[str, Any] = {"External id": ext, "Input Dims": dims, "Input type": types}
    if strides is not None:
        args["Input Strides"] = strides
    return [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": 5, "args": args},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": ts + 1,
             "dur": 2, "args": {"correlation": ext, "External id": ext}}]


def _kernel(name: str, ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr}}


def issue_cases(folder: Path) -> list[tuple[str, list[Path]]]:
    """Write the issue's three cases into ``folder``: an fp32 mm on an A100 run by a CUTLASS TF32
    kernel (569 % of the fp32 roof), and on an H100 a bf16 add whose operands sat in L2
    (106 % of HBM) and a gather with an expanded int64 index (225 % when the view is counted)."""
    n = 4096
    cases = {
        "issue28/a100_fp32_mm_tf32_kernel.json": (_A100, [
            *_op("aten::mm", 100, 5, 1, [[n, n], [n, n]], ["float", "float"], [[n, 1], [n, 1]]),
            # 2 * 4096^3 FLOPs: 7048 µs at the fp32 roof, 881 µs at the tf32 one
            _kernel("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1>"
                    "(cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1::Params)", 200, 1239.0, 1)]),
        "issue28/h100_bf16_add_in_l2.json": (_H100, [
            *_op("aten::add", 100, 5, 1, [[8, 512, 2048], [8, 512, 2048], []],
                 ["c10::BFloat16", "c10::BFloat16", "Scalar"], [[1048576, 2048, 1], [1048576, 2048, 1], []]),
            # 3 x 16.8 MB at 3.35 TB/s: 15.0 µs at the HBM roof, measured 14.2 µs (106 %)
            _kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
                    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
                    "at::detail::Array<char*, 3>)", 200, 14.2, 1)]),
        "issue28/h100_gather_expanded_index.json": (_H100, [
            *_op("aten::gather", 100, 5, 1, [[32000, 2048], [], [n, 2048], [], [n, 2048]],
                 ["c10::BFloat16", "Scalar", "long int", "Scalar", "c10::BFloat16"],
                 [[2048, 1], [], [1, 0], [], [2048, 1]]),
            # the index is a [4096, 1] tensor expanded to [4096, 2048] (strides [1, 0]): 32 KB
            _kernel("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, "
                    "long, long, bool)", 200, 13.4, 1)]),
    }
    units = []
    for name, (props, events) in cases.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"deviceProperties": props, "traceEvents": events}))
        units.append((name, [path]))
    return units


def _roof_words(e: dict[str, Any]) -> str:
    """The roof an entry was judged against, in a few words."""
    bound = e.get("bound") or "?"
    if bound == "cache_bound":
        return "cache (L2)"
    if e.get("link") == "host_link":
        return "host link"
    if bound == "compute_bound":
        return f"compute {e.get('dtype') or e.get('roof_dtype') or ''}".strip()
    if bound == "memory_bound":
        return "HBM"
    return bound


def audit(doc: dict[str, Any], top: int) -> dict[str, Any]:
    """Over-roof entries of one analysis document."""
    over: list[dict[str, Any]] = []
    counts: dict[str, Any] = {"ops": 0, "kernels": 0, "cache_bound": 0, "model_error": 0, "judged": 0,
                              "max_pct": None}
    for kind in ("ops", "kernels"):
        for e in doc.get(kind) or []:
            pct = e.get("pct_of_roof")
            if e.get("bound") == "cache_bound":
                counts["cache_bound"] += 1
            if e.get("model_error"):
                counts["model_error"] += 1
            if pct is None:
                continue
            counts["judged"] += 1
            counts["max_pct"] = max(counts["max_pct"] or 0.0, 100 * pct)
            if pct > OVER:
                counts[kind] += 1
                over.append({"what": kind[:-1], "name": e.get("name"), "dims": e.get("input_dims"),
                             "types": e.get("input_types"), "pct": 100 * pct, "bound": e.get("bound"),
                             "roof": _roof_words(e), "dtype": e.get("dtype"),
                             "time_us": e.get("kernel_us") or e.get("total_us")})
    over.sort(key=lambda x: -x["pct"])
    return {"counts": counts, "worst": over[:top]}


#: The public config.json of the model each shared serving trace ran (fixtures/models/README.md
#: gives their sources): analyze's --model, so that fused MoE ops are judged.
MODELS = {
    "tracelens/vllm_decode_cudagraph": "gpt-oss-20b.config.json",   # 24 layers, 32 experts
    "tracelens/b200_eager.json.gz": "gpt-oss-120b.config.json",     # 36 layers, 128 experts
}


def _model_for(name: str, use_models: bool) -> Any:
    if not use_models or name not in MODELS:
        return None
    from gpuscope.analyzers.modelspec import model_spec

    path = Path(__file__).resolve().parent.parent / "fixtures" / "models" / MODELS[name]
    return model_spec(json.loads(path.read_text()), name=path.name.split(".config")[0])


def run(folder: Path, top: int, with_issue_cases: bool = False, use_models: bool = True) -> list[dict[str, Any]]:
    """Ingest and audit every trace unit of ``folder`` (and the issue's cases); the serving
    traces are analyzed with their model's config (:data:`MODELS`) unless ``use_models`` is off."""
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.ingest import ingest
    from gpuscope.store import connect

    results = []
    with tempfile.TemporaryDirectory(prefix="roof_truth_") as tmp:
        units = trace_units(folder) + (issue_cases(Path(tmp) / "cases") if with_issue_cases else [])
        for i, (name, files) in enumerate(units):
            db = Path(tmp) / f"s{i}.duckdb"
            try:
                res = ingest(db, [str(f) for f in files], name=name)
            except Exception as exc:  # a trace gpuscope refuses is reported, not fatal
                results.append({"trace": name, "error": str(exc).splitlines()[0]})
                continue
            con = connect(db)
            try:
                model = _model_for(name, use_models)
                doc = analyze_run(con, res.run_id, model=model, model_source=MODELS.get(name) if model else None)
            finally:
                con.close()
            r = audit(doc, top)
            r["trace"] = name
            r["coverage"] = doc.get("coverage")
            r["model"] = MODELS.get(name) if model else None
            results.append(r)
    return results


def _fmt(results: list[dict[str, Any]]) -> str:
    lines = []
    tot_ops = tot_k = tot_cb = tot_me = 0
    lines.append(f"{'trace':58} {'ops>100%':>9} {'kern>100%':>9} {'cache_b':>8} {'model_err':>9} "
                 f"{'judged':>7} {'max %':>7} {'coverage':>8}  largest unjudged")
    for r in results:
        if "error" in r:
            lines.append(f"{r['trace']:58} not ingested: {r['error']}")
            continue
        c = r["counts"]
        tot_ops += c["ops"]
        tot_k += c["kernels"]
        tot_cb += c["cache_bound"]
        tot_me += c["model_error"]
        mx = "-" if c["max_pct"] is None else f"{c['max_pct']:.1f}"
        lines.append(f"{r['trace']:58} {c['ops']:>9} {c['kernels']:>9} {c['cache_bound']:>8} {c['model_error']:>9} "
                     f"{c['judged']:>7} {mx:>7} {_coverage_words(r.get('coverage'))}")
        for w in r["worst"]:
            dims = json.dumps(w["dims"])[:60] if w["dims"] is not None else ""
            lines.append(f"    {w['pct']:7.1f}%  {w['what']:6} {str(w['name'])[:70]}  {dims}  "
                         f"[{w['bound']}, {w['roof']}]")
    lines.append(f"{'TOTAL':58} {tot_ops:>9} {tot_k:>9} {tot_cb:>8} {tot_me:>9}")
    lines.append(f"entries above 100 % of their roof: {tot_ops + tot_k}")
    return "\n".join(lines)


def _coverage_words(cov: dict[str, Any] | None) -> str:
    """The coverage column (share of GPU time judged against a roof) and the largest unjudged
    op or kernel with its share and reason."""
    if not cov or cov.get("share") is None:
        return f"{'-':>8}  (no GPU time)"
    words = f"{100 * cov['share']:7.1f}%"
    if cov.get("unjudged"):
        u = cov["unjudged"][0]
        words += f"  {str(u['name'])[:60]} {100 * (u['share'] or 0):.1f} % ({u['reason']})"
    return words


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", default=str(DEFAULT_TRACES))
    ap.add_argument("--top", type=int, default=5, help="worst entries listed per trace")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--check", action="store_true", help="exit 1 when any entry is above 100 %%")
    ap.add_argument("--no-model", action="store_true",
                    help="analyze the serving traces without their model's config.json (MoE ops unjudged)")
    ap.add_argument("--issue-cases", action="store_true",
                    help="also measure issue 28's three over-roof cases, rebuilt as small traces")
    a = ap.parse_args(argv)
    folder = Path(a.folder)
    if not folder.is_dir():
        print(f"roof_truth: {folder}: no such folder (the shared traces live in ../shared/data/traces)",
              file=sys.stderr)
        return 2
    results = run(folder, a.top, a.issue_cases, use_models=not a.no_model)
    print(json.dumps(results, indent=1, default=str) if a.json else _fmt(results))
    over = sum(r["counts"]["ops"] + r["counts"]["kernels"] for r in results if "counts" in r)
    return 1 if a.check and over else 0


if __name__ == "__main__":
    sys.exit(main())
