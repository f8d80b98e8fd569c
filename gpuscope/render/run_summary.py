"""The summary ``gpuscope run`` prints at the end, from the run's summary document."""
from __future__ import annotations

from typing import Any

from ..textsafe import visible
from .analysis import render_analysis
from .table import DEFAULT_WIDTH


def _telemetry_stats(st: dict[str, Any]) -> str:
    """Sample count, utilisation, power, SM clock and temperature from ``{metric}_mean`` /
    ``{metric}_max`` keys (each shown only when present)."""
    bits = [f"{st['samples']} samples"]
    for metric, label, scale, unit in (("gpu_util", "util", 100, "%"), ("power_w", "power", 1, " W"),
                                       ("sm_clock_mhz", "SM clock", 1, " MHz")):
        mean, peak = st.get(f"{metric}_mean"), st.get(f"{metric}_max")
        if mean is not None:
            text = f"{label} {scale * mean:.0f}{unit}"
            if peak is not None:
                text += f" (max {scale * peak:.0f}{unit})"
            bits.append(text)
    if st.get("temp_c_max") is not None:
        bits.append(f"{st['temp_c_max']:.0f} °C max")
    return ", ".join(bits)


def _token_lines(tele: dict[str, Any]) -> list[str]:
    """Generated tokens, their rate and energy; decode and prefill apart; warm-up left out."""
    gen = tele.get("generation") or {}
    out = []
    n = gen.get("generated_tokens")
    if n:
        line = f"  tokens: {n:,} generated ({gen.get('source')})"
        if gen.get("prompt_tokens"):
            line += f", {gen['prompt_tokens']:,} prompt"
        rate, jpt = gen.get("tokens_per_s"), gen.get("energy_per_token_j")
        if rate is not None:
            line += f": {rate:,.1f} generated tokens/s"
            if jpt is not None:
                line += f", {jpt:.4g} J per generated token"
            where = ("prefill and decode steps" if gen.get("basis") == "steps" else "the whole run")
            line += f" (over {gen['seconds']:.2f} s of {where})"
        elif tele.get("energy_j") is None:
            line += "; no energy counter or power on this machine"
        out.append(line)
    parts = []
    for name, label, key in (("decode", "decode", "tokens"), ("prefill", "prefill", "prompt_tokens")):
        ph = gen.get(name)
        if not ph or ph.get("tokens_per_s") is None:
            continue
        unit = "tokens" if key == "tokens" else "prompt tokens"
        text = f"{label} {ph[key]:,} {unit} in {ph['seconds']:.3f} s, {ph['tokens_per_s']:,.1f} {unit}/s"
        if ph.get("energy_per_token_j") is not None:
            text += f", {ph['energy_per_token_j']:.4g} J per {unit[:-1]}"
        parts.append(text)
    if parts:
        out.append("    " + "; ".join(parts))
    warm = gen.get("warmup")
    if warm:
        out.append(f"    warm-up left out: {warm['marks']} marks, {warm['generated_tokens']:,} generated and "
                   f"{warm['prompt_tokens']:,} prompt tokens")
    held = gen.get("profiled")
    if held:
        what = (f"{held['steps']:,} step(s) held by the profiler (from opening a window to writing its trace)")
        if held.get("kept"):
            out.append(f"    every step ran under the profiler: the rates above include its overhead ({what})")
        else:
            out.append(f"    left out: {what}, {held['generated_tokens']:,} generated tokens")
    return out


def render_run_summary(summary: dict[str, Any], top: int = 10, width: int = DEFAULT_WIDTH) -> str:
    """The summary ``gpuscope run`` prints at the end; its analysis fitted to ``width`` columns."""
    out = [f"gpuscope run {summary['run_id']}: exit code {summary['exit_code']}  (run dir {visible(str(summary['run_dir']))})"]
    windows = summary.get("windows") or []
    traces = summary.get("traces") or []
    line = f"  profiler windows: {len(windows)}, traces: {len(traces)}, marks: {summary.get('marks', 0)}"
    stalls = [(w["start_ns"] - w["open_ns"], w["written_ns"] - w["end_ns"]) for w in windows
              if all(isinstance(w.get(k), int) for k in ("open_ns", "start_ns", "end_ns", "written_ns"))]
    if stalls:
        # the profiled thread does nothing else meanwhile; seconds on a GPU machine
        line += (f"; the profiler took {max(a for a, _ in stalls) / 1e9:.1f} s to start and "
                 f"{max(b for _, b in stalls) / 1e9:.1f} s to write its trace{' (longest)' if len(stalls) > 1 else ''}")
    out.append(line)
    if summary.get("ingest_error"):
        out.append(f"  traces not ingested: {visible(str(summary['ingest_error']))}")
    for note in (summary.get("profiler") or {}).get("notes") or ():
        out.append(f"  profiler: {visible(str(note))}")
    otlp = summary.get("otlp")
    if otlp:
        failed = f" ({otlp['metric_export_failures']} failed)" if otlp.get("metric_export_failures") else ""
        out.append(f"  OTLP ({otlp['protocol']}): {otlp['metric_exports']} metric export(s){failed}; "
                   f"{otlp['spans']} span(s) and {otlp['mark_events']} mark event(s) "
                   f"{'exported' if otlp.get('spans_exported') else 'NOT exported'}"
                   + (", inside the caller's trace (TRACEPARENT)" if otlp.get("parent_traceparent") else ""))
    tele = summary.get("telemetry") or {}
    for g in tele.get("gpus", []):
        # device names and keys come from the GPU's driver, or from a replayed recording's file
        out.append(f"  {visible(str(g['key']))} ({visible(str(g.get('name') or '?'))}): {_telemetry_stats(g['run'])}")
        for w in g.get("windows", []):
            if w["samples"]:
                out.append(f"    during window (pid {w['pid']}): {_telemetry_stats(w)}")
    by_class = tele.get("by_kernel_class") or {}
    if by_class:
        parts = [f"{cls.replace('bound_label', '-bound')}: {_telemetry_stats(by_class[cls])}"
                 for cls in ("compute_bound", "memory_bound", "latency_bound", "unknown", "communication", "memory",
                             "idle") if by_class.get(cls)]
        out.append("  telemetry by what the GPU was running (samples inside the traced windows): " + "; ".join(parts))
    if tele.get("energy_j") is not None:
        line = f"  energy over the run: {tele['energy_j']:.1f} J ({tele['energy_source']})"
        if tele.get("energy_integrated_j") is not None and tele.get("energy_source") != "integrated power":
            line += f"; integrated power {tele['energy_integrated_j']:.1f} J"
        out.append(line)
    for note in tele.get("energy_notes") or ():
        out.append(f"    {visible(str(note))}")
    out.extend(_token_lines(tele))
    if not tele.get("gpus"):
        if summary.get("replay"):
            out.append(f"  no GPU telemetry (the recording {visible(str(summary['replay']))} has no GPU)")
        else:
            out.append("  no GPU telemetry (no NVIDIA or AMD GPU found: see `gpuscope devices`)")
    doc = summary.get("analysis")
    if doc and summary.get("traces"):  # without a trace there is nothing to break down (the profiler line says why)
        out.append("")
        out.append(render_analysis(doc, top=top, width=width))
    return "\n".join(visible(line, layout=True) for line in out)  # what a field above did not show
