"""Telemetry of a run on the traces' time base: what utilisation, power and clocks did over
the run and during each profiler window, energy, and tokens with energy per token.

Samples and trace events share one clock (integer ns since the Unix epoch: the sampler uses
the host's wall clock, Kineto's ``baseTimeNanoseconds`` too), so a window or a kernel's
interval selects the samples taken during it. Pure functions over a store connection.

Energy comes from two sources per GPU. The vendor's energy counter (``energy_j``) is summed
step by step, not taken as last minus first: a counter goes back when the driver reloads, when
a 32-bit register wraps, or when a recording is replayed in a loop (:func:`counter_steps`
says how each step is read). Power integrated over time (trapezoids of ``power_w``) is the
cross-check, and fills in the stretches where the counter cannot tell. The two differ when
``power_w`` is an average over a window longer than the sampling period (NVML on Ampere and
newer reports a 1 s average) or when the counter is coarse; a disagreement of more than 20 %
is reported with the source chosen and why.

Tokens come from ``gpuscope.mark`` (:func:`generation_summary`): generated tokens, prompt tokens
and warm-up are kept apart, and each mark's step lasts until the next mark of its process.
"""
from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

_STATS = ("gpu_util", "mem_util", "power_w", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "sm_active", "tensor_active",
          "dram_bw_util")


def _available(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'samples' AND schema_name = 'main' "
        "AND database_name = current_database()").fetchall()}


def _window_stats(con: duckdb.DuckDBPyConnection, run_id: int, device_id: int, start_ns: int | None,
                  end_ns: int | None, cols: list[str]) -> dict[str, Any]:
    where = "run_id = ? AND device_id = ?"
    params: list[Any] = [run_id, device_id]
    if start_ns is not None:
        where += " AND ts_ns >= ? AND ts_ns <= ?"
        params += [start_ns, end_ns]
    sel = ", ".join(f"avg({c}), max({c})" for c in cols)
    row = con.execute(f"SELECT count(*), {sel} FROM samples WHERE {where}", params).fetchone()
    assert row is not None  # an aggregate without GROUP BY gives one row
    out: dict[str, Any] = {"samples": int(row[0])}
    for i, c in enumerate(cols):
        mean, peak = row[1 + 2 * i], row[2 + 2 * i]
        if mean is not None:
            out[f"{c}_mean"] = float(mean)
            out[f"{c}_max"] = float(peak)
    return out


#: Where energy counters with a 32-bit register wrap, in J: 2**32 of the unit each source counts
#: in. µJ (Linux hwmon ``energy*_input``); AMD's ``energy_accumulator`` ticks of 2**-16 J, both as
#: the exact power of two and as the rounded 15.259 µJ that amdsmi reports and the collector
#: multiplies by; mJ (NVML's counter is 64-bit, but a 32-bit reader of it is not unheard of).
COUNTER_WRAPS_J = (2**32 * 1e-6, 2**32 * 2**-16, 2**32 * 15.259e-6, 2**32 * 1e-3)
#: The most a GPU is taken to draw when no power reading or limit says more (B200 and MI355X
#: boards are rated at 1.0-1.4 kW).
DEFAULT_MAX_POWER_W = 2000.0
#: A counter step may exceed ``2 x max power x time`` by this much time at max power: counter
#: values and row timestamps are not read at the same instant.
TIMESTAMP_SLACK_S = 0.05
#: A counter that goes back by less than this is jitter, not a reset.
COUNTER_JITTER_J = 0.5
#: Counter and integrated power disagreeing by more than this share is reported.
DISAGREEMENT_SHARE = 0.2
_NEVER_NS = 2**62


@dataclass
class CounterSteps:
    """What an energy counter says about each interval between two consecutive readings.

    ``joules[i]`` is the energy between reading ``i`` and ``i + 1``, or None where the counter
    cannot tell (it went back to an arbitrary value, or jumped forward further than the GPU can
    draw). ``resets`` counts the times it went back (other than wraps), ``wraps`` the 32-bit
    wraps, ``rejected`` the implausible forward jumps."""

    joules: list[float | None] = field(default_factory=list)
    resets: int = 0
    wraps: int = 0
    rejected: int = 0


def counter_steps(ts_ns: Sequence[int], energy_j: Sequence[float], max_power_w: float) -> CounterSteps:
    """Read an energy counter step by step (readings in time order).

    A step is plausible when it is at most twice what ``max_power_w`` gives over the time since
    the counter last moved (a coarse counter moves in lumps), plus :data:`TIMESTAMP_SLACK_S` at
    max power. Then:

    - a plausible step forward counts as it is (a step back by less than
      :data:`COUNTER_JITTER_J` counts as 0);
    - a step back that is plausible once a 32-bit register's wrap (:data:`COUNTER_WRAPS_J`) is
      added, from a value below that wrap point, is a wrap;
    - any other step back is a reset: when the new value is itself a plausible step, the counter
      restarted from 0 (a driver reload) and the new value is the energy since; otherwise it
      jumped back to an unrelated value (a replay starting over) and the step is unknown;
    - a step forward beyond plausible is unknown (``rejected``).
    """
    out = CounterSteps()
    flat_start = 0  # first reading of the run of equal values that ends at the previous reading
    for i in range(1, min(len(ts_ns), len(energy_j))):
        prev, cur = float(energy_j[i - 1]), float(energy_j[i])
        since_ns = ts_ns[i] - ts_ns[flat_start - 1 if flat_start else 0]
        bound_j = max_power_w * (2.0 * max(since_ns, 0) / 1e9 + TIMESTAMP_SLACK_S) + 1.0
        step = cur - prev
        joules: float | None
        if -COUNTER_JITTER_J <= step <= bound_j:
            joules = max(step, 0.0)
        elif step > bound_j:
            joules = None
            out.rejected += 1
        else:
            wrapped = [step + m for m in COUNTER_WRAPS_J if prev <= m and 0.0 <= step + m <= bound_j]
            if wrapped:
                # AMD's two spellings of one wrap point both fit: the larger is the resolution
                # the collector converts with
                joules = max(wrapped)
                out.wraps += 1
            else:
                joules = cur if 0.0 <= cur <= bound_j else None
                out.resets += 1
        out.joules.append(joules)
        if step != 0.0:
            flat_start = i
    return out


@dataclass
class StepSeries:
    """Energy per interval of one device: ``joules[i]`` between ``start_ns[i]`` and ``end_ns[i]``
    (None: unknown). Intervals are in time order and do not overlap."""

    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    joules: list[float | None] = field(default_factory=list)

    def between(self, t0_ns: int, t1_ns: int, fill: StepSeries | None = None) -> tuple[float, float, float]:
        """``(joules, known_s, unknown_s)`` within ``[t0_ns, t1_ns]``: an interval cut by the
        bounds counts in proportion (linear in time); unknown intervals, and the stretches of
        the bounds no interval covers (before the first reading, after the last), take what
        ``fill`` holds for them, and what it does not cover is ``unknown_s``. (The edges
        matter: a counter read once a second leaves up to a second after its last reading,
        which an H100 recording showed as 2.4 % of a 30 s run's energy missing.)"""
        total = known_s = unknown_s = 0.0

        def gap(a: int, b: int) -> None:
            nonlocal total, known_s, unknown_s
            if fill is not None:
                fj, fk, _ = fill.between(a, b)
                total += fj
                known_s += fk
                unknown_s += max((b - a) / 1e9 - fk, 0.0)
            else:
                unknown_s += (b - a) / 1e9

        i = bisect.bisect_right(self.end_ns, t0_ns)
        n = len(self.start_ns)
        cursor = t0_ns
        while i < n and self.start_ns[i] < t1_ns:
            a, b = max(self.start_ns[i], t0_ns), min(self.end_ns[i], t1_ns)
            if a > cursor:
                gap(cursor, a)
            if b > a:
                j = self.joules[i]
                if j is not None:
                    total += j * (b - a) / (self.end_ns[i] - self.start_ns[i])
                    known_s += (b - a) / 1e9
                else:
                    gap(a, b)
            cursor = max(cursor, b)
            i += 1
        if t1_ns > cursor:
            gap(cursor, t1_ns)
        return total, known_s, unknown_s


def power_steps(ts_ns: Sequence[int], power_w: Sequence[float]) -> StepSeries:
    """Power readings as energy per interval (trapezoids)."""
    s = StepSeries()
    for i in range(1, min(len(ts_ns), len(power_w))):
        if ts_ns[i] > ts_ns[i - 1]:
            s.start_ns.append(ts_ns[i - 1])
            s.end_ns.append(ts_ns[i])
            s.joules.append((ts_ns[i] - ts_ns[i - 1]) / 1e9 * (power_w[i] + power_w[i - 1]) / 2.0)
    return s


@dataclass
class DeviceEnergy:
    """The energy of one device over a run: its counter's steps, its integrated power, and the
    source reported (``source``: ``counter`` or ``integrated power``, None without either)."""

    counter: StepSeries | None
    counter_info: CounterSteps | None
    power: StepSeries | None
    source: str | None
    summary: dict[str, Any]

    def energy_in(self, t0_ns: int, t1_ns: int) -> float | None:
        """Joules of the reported source within ``[t0_ns, t1_ns]`` (None without a source)."""
        if self.source == "counter" and self.counter is not None:
            return self.counter.between(t0_ns, t1_ns, fill=self.power)[0]
        if self.source == "integrated power" and self.power is not None:
            return self.power.between(t0_ns, t1_ns)[0]
        return None


def device_energy(rows: Sequence[tuple[int, float | None, float | None]], max_power_w: float | None = None,
                  key: str = "gpu") -> DeviceEnergy:
    """Energy of one device from its ``(ts_ns, energy_j, power_w)`` readings in time order.

    The counter is read step by step (:func:`counter_steps`); where it cannot tell, integrated
    power fills in (``bridged_s``). The counter is reported unless it never advanced while the
    power readings show the GPU drawing power; when the two disagree by more than
    :data:`DISAGREEMENT_SHARE` a ``note`` says so and which one is reported."""
    e_rows = [(t, float(e)) for t, e, _ in rows if e is not None]
    p_rows = [(t, float(p)) for t, _, p in rows if p is not None]
    if max_power_w is None or max_power_w <= 0:
        max_power_w = max((p for _, p in p_rows), default=0.0) or DEFAULT_MAX_POWER_W
    power = power_steps([t for t, _ in p_rows], [p for _, p in p_rows]) if len(p_rows) >= 2 else None
    integrated = sum(j for j in power.joules if j is not None) if power is not None else None
    counter = info = None
    summary: dict[str, Any] = {"energy_j": None, "energy_source": None, "energy_counter_j": None,
                               "energy_integrated_j": integrated,
                               "seconds": (p_rows[-1][0] - p_rows[0][0]) / 1e9 if power is not None else None,
                               "note": None}
    if len(e_rows) >= 2:
        ts = [t for t, _ in e_rows]
        info = counter_steps(ts, [e for _, e in e_rows], max_power_w)
        counter = StepSeries(ts[:-1], ts[1:], info.joules)
        # over the span of every reading: the stretches the counter's readings do not cover
        # (steps it could not tell, and the edges) are filled from power where it has readings
        span = (min(ts[0], p_rows[0][0]) if p_rows else ts[0], max(ts[-1], p_rows[-1][0]) if p_rows else ts[-1])
        total_j, _, unknown_s = counter.between(span[0], span[1], fill=power)
        counted_j = sum(j for j in info.joules if j is not None)
        counted_s = sum((b - a) / 1e9 for a, b, j in zip(counter.start_ns, counter.end_ns, info.joules) if j is not None)
        uncounted_s = (span[1] - span[0]) / 1e9 - counted_s
        summary["energy_counter_j"] = total_j
        summary["counter"] = {"resets": info.resets, "wraps": info.wraps, "rejected_steps": info.rejected,
                              "bridged_s": max(uncounted_s - unknown_s, 0.0), "unknown_s": unknown_s}
        if summary["seconds"] is None:
            summary["seconds"] = (ts[-1] - ts[0]) / 1e9
    else:
        counted_j = 0.0
    notes = []
    source: str | None = None
    c = summary["energy_counter_j"]
    if c is not None and integrated is not None and counted_j <= 0.0 and integrated > 1.0:
        source = "integrated power"
        notes.append(f"the energy counter did not advance while power readings add up to {integrated:.1f} J: "
                     "reporting integrated power")
    elif c is not None:
        source = "counter"
        if integrated is not None and c > 0 and abs(integrated - c) / c > DISAGREEMENT_SHARE:
            notes.append(f"energy counter ({c:.1f} J) and integrated power ({integrated:.1f} J) disagree by "
                         f"{100 * abs(integrated - c) / c:.0f} %: reporting the counter, which counts every joule "
                         "(power readings are averages, sampled)")
    elif integrated is not None:
        source = "integrated power"
    if info is not None and (info.resets or info.rejected):
        what = []
        if info.resets:
            what.append(f"went back {info.resets} time(s) (driver reload or a replay starting over)")
        if info.rejected:
            what.append(f"jumped forward implausibly {info.rejected} time(s)")
        cnt = summary["counter"]
        tail = f"; {cnt['bridged_s']:.1f} s across them filled in from power readings" if cnt["bridged_s"] > 0 else ""
        if cnt["unknown_s"] > 0:
            tail += f"; {cnt['unknown_s']:.1f} s not counted (no power reading)"
        notes.insert(0, "the energy counter " + " and ".join(what) + ": summed step by step" + tail)
    if info is not None and info.wraps:
        notes.insert(0, f"the energy counter wrapped {info.wraps} time(s) (32-bit register): counted across")
    summary["energy_source"] = source
    summary["energy_j"] = c if source == "counter" else (integrated if source == "integrated power" else None)
    summary["note"] = "; ".join(notes) or None
    return DeviceEnergy(counter, info, power, source, summary)


def _max_power_w(con: duckdb.DuckDBPyConnection, run_id: int, device_id: int, have: set[str]) -> float | None:
    cols = [c for c in ("power_limit_w", "power_w", "power_instant_w") if c in have]
    if not cols:
        return None
    row = con.execute(f"SELECT {', '.join(f'max({c})' for c in cols)} FROM samples WHERE run_id = ? AND device_id = ?",
                      [run_id, device_id]).fetchone()
    assert row is not None  # an aggregate without GROUP BY gives one row
    values = [float(v) for v in row if v is not None and v > 0]
    return max(values) if values else None


def _device_energy(con: duckdb.DuckDBPyConnection, run_id: int, device_id: int, have: set[str]) -> DeviceEnergy:
    e = "energy_j" if "energy_j" in have else "NULL"
    p = "power_w" if "power_w" in have else "NULL"
    rows = con.execute(
        f"SELECT ts_ns, {e}, {p} FROM samples WHERE run_id = ? AND device_id = ? AND ({e} IS NOT NULL OR {p} IS NOT NULL) "
        "ORDER BY ts_ns", [run_id, device_id]).fetchall()
    return device_energy(rows, _max_power_w(con, run_id, device_id, have))


# --------------------------------------------------------------------------------------------
# Tokens

#: What a mark's ``phase`` may say; a mark without one is ``decode`` when it carries tokens,
#: ``prefill`` when it carries only prompt tokens, else ``other``.
PHASES = ("prefill", "decode", "warmup")


def mark_phase(value: dict[str, Any]) -> str:
    """The phase of a mark's stored value: ``prefill``, ``decode``, ``warmup`` or ``other``.
    Another phase name counts as ``decode`` when the mark carries tokens (they are generated
    tokens), else as ``other``."""
    p = value.get("phase")
    if isinstance(p, str) and p.strip():
        name = p.strip().lower().replace("_", "").replace("-", "")
        if name in ("warmup", "prefill", "decode"):
            return name
    if _count(value.get("tokens")):
        return "decode"
    if _count(value.get("prompt_tokens")):
        return "prefill"
    return "other"


def _count(v: Any) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError):
        return 0
    return n if n > 0 else 0


def _union_s(intervals: Iterable[tuple[int, int]]) -> tuple[float, list[tuple[int, int]]]:
    merged: list[list[int]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return sum(b - a for a, b in merged) / 1e9, [(a, b) for a, b in merged]


def generation_summary(marks: Iterable[tuple[int, Any, dict[str, Any]]], tokens: int | None = None,
                       run_span_ns: tuple[int | None, int | None] = (None, None),
                       energy_in: Callable[[int, int], float | None] | None = None,
                       profiled: Iterable[tuple[Any, int, int]] = ()) -> dict[str, Any]:
    """Tokens of a run from its marks ``(ts_ns, pid, value)``; ``tokens`` (``--tokens``)
    replaces the generated count, over the whole run (``run_span_ns``).

    ``profiled``: ``(pid, from_ns, to_ns)`` where a profiler held that process, from the call
    that opened a window until its trace was written. Steps of that process overlapping such a
    stretch measure the profiler (its start-up alone stood a decode loop still for 5.6 s on an
    H100 machine), so they are left out of the rates and counted under ``profiled``, unless no
    other step is left (then the rates are over them, and ``profiled['kept']`` says so).

    A mark's step lasts from the mark to the next mark of the same process, and carries the
    mark's ``tokens`` (generated) and ``prompt_tokens``. Rates use the closed steps (the last
    mark of each process has no end): generated tokens/s over the prefill and decode steps
    (their union across processes, so parallel processes add up), decode tokens/s over decode
    steps, prompt tokens/s over prefill steps. Warm-up marks are counted apart and left out.
    ``energy_in(t0_ns, t1_ns)`` gives the energy of the GPUs within a stretch, for J per token.
    """
    by_pid: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
    for ts, pid, value in marks:
        by_pid.setdefault(pid, []).append((int(ts), value if isinstance(value, dict) else {}))
    totals = {"generated": 0, "prompt": 0}
    warm = {"marks": 0, "generated_tokens": 0, "prompt_tokens": 0}
    held: dict[str, list[tuple[int, int]]] = {}
    for pid, a, b in profiled:
        held.setdefault(str(pid), []).append((int(a), int(b)))
    # (phase, start, end, generated, prompt, under the profiler) of every closed prefill/decode step
    candidates: list[tuple[str, int, int, int, int, bool]] = []
    unclosed = 0
    for pid, rows in by_pid.items():
        rows.sort(key=lambda r: r[0])
        spans = held.get(str(pid), ())
        for i, (ts, value) in enumerate(rows):
            phase = mark_phase(value)
            gen, prompt = _count(value.get("tokens")), _count(value.get("prompt_tokens"))
            if phase == "warmup":
                warm["marks"] += 1
                warm["generated_tokens"] += gen
                warm["prompt_tokens"] += prompt
                continue
            totals["generated"] += gen
            totals["prompt"] += prompt
            if phase not in ("prefill", "decode"):
                continue
            if i + 1 == len(rows):
                unclosed += gen
                continue
            end = rows[i + 1][0]
            candidates.append((phase, ts, end, gen, prompt, any(a < end and ts < b for a, b in spans)))
    free = [c for c in candidates if not c[5]]
    prof = [c for c in candidates if c[5]]
    profiled_doc = None
    if prof:
        profiled_doc = {"steps": len(prof), "generated_tokens": sum(c[3] for c in prof),
                        "prompt_tokens": sum(c[4] for c in prof), "kept": not free}
    steps: dict[str, list[tuple[int, int]]] = {"prefill": [], "decode": []}
    closed = {"prefill_prompt": 0, "prefill_generated": 0, "decode": 0}
    for phase, ts, end, gen, prompt, _ in (free or prof):
        steps[phase].append((ts, end))
        if phase == "prefill":
            closed["prefill_prompt"] += prompt
            closed["prefill_generated"] += gen
        else:
            closed["decode"] += gen

    def energy(intervals: list[tuple[int, int]]) -> float | None:
        if energy_in is None or not intervals:
            return None
        parts = [energy_in(a, b) for a, b in intervals]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p is not None))

    def phase_doc(name: str, count: int, label: str) -> dict[str, Any] | None:
        if not steps[name]:
            return None
        seconds, merged = _union_s(steps[name])
        e = energy(merged)
        return {label: count, "steps": len(steps[name]), "seconds": seconds,
                "tokens_per_s": count / seconds if seconds > 0 else None,
                "energy_j": e, "energy_per_token_j": e / count if e is not None and count else None}

    gen_seconds, gen_merged = _union_s(steps["prefill"] + steps["decode"])
    gen_closed = closed["prefill_generated"] + closed["decode"]
    out: dict[str, Any] = {
        "generated_tokens": totals["generated"], "prompt_tokens": totals["prompt"], "source": None,
        "basis": None, "seconds": None, "tokens_per_s": None, "energy_j": None, "energy_per_token_j": None,
        "prefill": phase_doc("prefill", closed["prefill_prompt"], "prompt_tokens"),
        "decode": phase_doc("decode", closed["decode"], "tokens"),
        "warmup": warm if warm["marks"] else None,
        "profiled": profiled_doc,
        "unclosed_tokens": unclosed,
    }
    start_ns, end_ns = run_span_ns
    if tokens is not None:
        out.update(generated_tokens=tokens, source="--tokens", basis="run")
    elif totals["generated"]:
        out["source"] = "marks"
        out["basis"] = "steps" if gen_closed and gen_seconds > 0 else "run"
    if out["basis"] == "steps":
        e = energy(gen_merged)
        out.update(seconds=gen_seconds, tokens_per_s=gen_closed / gen_seconds, energy_j=e,
                   energy_per_token_j=e / gen_closed if e is not None else None)
    elif out["basis"] == "run" and start_ns is not None and end_ns is not None and end_ns > start_ns:
        n = out["generated_tokens"]
        e = energy_in(-_NEVER_NS, _NEVER_NS) if energy_in is not None else None  # all of the run's energy
        seconds = (end_ns - start_ns) / 1e9
        out.update(seconds=seconds, tokens_per_s=n / seconds, energy_j=e,
                   energy_per_token_j=e / n if e is not None and n else None)
    return out


def run_telemetry(con: duckdb.DuckDBPyConnection, run_id: int, tokens: int | None = None) -> dict[str, Any]:
    """Telemetry summary of ``run_id``: per GPU over the run and per profiler window, energy
    (:func:`device_energy`), and tokens (:func:`generation_summary`: from ``gpuscope.mark``
    marks, or ``tokens`` generated over the whole run when given)."""

    have = _available(con)
    cols = [c for c in _STATS if c in have]
    devices = con.execute(
        "SELECT device_id, key, name, kind FROM devices WHERE run_id = ? AND source <> 'trace' ORDER BY device_id",
        [run_id]).fetchall()
    windows_held = con.execute(
        "SELECT name, ts_ns, ts_ns + dur_ns, pid, value FROM annotations WHERE run_id = ? AND kind = 'profiler_window' "
        "ORDER BY ts_ns", [run_id]).fetchall()
    windows = [w[:4] for w in windows_held]
    gpus = []
    energies: list[DeviceEnergy] = []
    for device_id, key, name, kind in devices:
        if kind not in (None, "gpu"):
            continue
        overall = _window_stats(con, run_id, device_id, None, None, cols)
        if not overall["samples"]:
            continue
        dev = _device_energy(con, run_id, device_id, have)
        energies.append(dev)
        gpus.append({
            "key": key, "name": name, "run": overall, "energy": dev.summary,
            "windows": [dict(_window_stats(con, run_id, device_id, s, e, cols), window=n, pid=p, start_ns=s,
                             end_ns=e) for n, s, e, p in windows],
        })
    reported = [d for d in energies if d.source is not None]
    sources = {d.source for d in reported}
    counters = [d.summary["energy_counter_j"] for d in energies if d.summary["energy_counter_j"] is not None]
    integrated = [d.summary["energy_integrated_j"] for d in energies if d.summary["energy_integrated_j"] is not None]
    both = [d for d in energies
            if d.summary["energy_counter_j"] is not None and d.summary["energy_integrated_j"] is not None]
    energy_j = sum(d.summary["energy_j"] for d in reported) if reported else None

    def energy_in(t0_ns: int, t1_ns: int) -> float | None:
        parts = [d.energy_in(t0_ns, t1_ns) for d in reported]
        return sum(p for p in parts if p is not None) if reported else None

    mark_rows = con.execute(
        "SELECT ts_ns, pid, value FROM annotations WHERE run_id = ? AND kind = 'mark' ORDER BY ts_ns",
        [run_id]).fetchall()
    marks = []
    for ts, pid, value in mark_rows:
        try:
            v = json.loads(value or "{}")
        except ValueError:
            v = {}
        marks.append((ts, pid, v if isinstance(v, dict) else {}))
    span = con.execute("SELECT started_ns, ended_ns FROM runs WHERE id = ?", [run_id]).fetchone() or (None, None)
    held = []
    for _n, s, e, pid, value in windows_held:
        try:
            v = json.loads(value or "{}")
        except ValueError:
            v = {}
        v = v if isinstance(v, dict) else {}
        a, b = v.get("open_ns"), v.get("written_ns")
        held.append((pid, a if isinstance(a, int) else s, b if isinstance(b, int) else e))
    gen = generation_summary(marks, tokens, (span[0], span[1]), energy_in, profiled=held)
    out: dict[str, Any] = {
        "gpus": gpus,
        "windows": [{"name": n, "start_ns": s, "end_ns": e, "pid": p} for n, s, e, p in windows],
        # generated tokens (not prompt, not warm-up), and what they cost
        "tokens": gen["generated_tokens"] or None,
        "token_source": gen["source"],
        "tokens_per_s": gen["tokens_per_s"],
        "energy_per_token_j": gen["energy_per_token_j"],
        "generation": gen,
        "marks": len(mark_rows),
        "energy_j": energy_j,
        "energy_source": (sources.pop() if len(sources) == 1 else "mixed") if sources else None,
        "energy_counter_j": sum(counters) if counters else None,
        "energy_integrated_j": sum(integrated) if integrated else None,
        "energy_notes": [f"{g['key']}: {g['energy']['note']}" for g in gpus if g["energy"].get("note")],
    }
    counter_both = sum(d.summary["energy_counter_j"] for d in both)
    if both and counter_both > 0:
        out["energy_crosscheck_ratio"] = sum(d.summary["energy_integrated_j"] for d in both) / counter_both
    if len(mark_rows) >= 2:
        out["marks_span_s"] = (mark_rows[-1][0] - mark_rows[0][0]) / 1e9
    return out


def telemetry_by_bound(con: duckdb.DuckDBPyConnection, run_id: int, kernel_bounds: dict[str, str]) -> dict[str, Any]:
    """What power, utilisation and clocks did while each class of kernel ran.

    Each GPU telemetry sample taken while a trace covered its GPU (the trace device with the
    same device index) is given the class of the kernel running at that instant: the bound
    class of a compute kernel (``kernel_bounds``: kernel name -> bound, from the analysis),
    ``communication``, ``memory`` (memcpy/memset), or ``idle`` when no activity covered it.
    Only samples inside the span of the trace's GPU activity count. Returns, per class, the
    number of samples and the mean of each metric. A coarse picture: one sample every
    1/hz s, and vendors average some readings (NVML power over 1 s on Ampere and newer).
    """
    from ..kernel_names import category_sql

    have = _available(con)
    cols = [c for c in ("power_w", "gpu_util", "sm_clock_mhz", "mem_clock_mhz", "sm_active", "tensor_active",
                        "dram_bw_util") if c in have]
    if not cols:
        return {}
    sel = ", ".join(f"s.{c}" for c in cols)
    rows = con.execute(
        f"""
        WITH tdev AS (
            SELECT device_id, device_index FROM devices
            WHERE run_id = $1 AND source <> 'trace' AND coalesce(kind, 'gpu') = 'gpu' AND device_index IS NOT NULL
        ), k AS (
            SELECT d.device_index, k.ts_ns, k.ts_ns + k.dur_ns AS end_ns, k.name,
                   {category_sql("k.kind", "k.name")} AS category
            FROM kernels k JOIN devices d ON d.run_id = k.run_id AND d.device_id = k.device_id
            WHERE k.run_id = $1 AND d.device_index IS NOT NULL
        ), span AS (
            SELECT device_index, min(ts_ns) AS s, max(end_ns) AS e FROM k GROUP BY device_index
        ), s AS (
            SELECT s.*, t.device_index FROM samples s JOIN tdev t ON t.device_id = s.device_id
            JOIN span p ON p.device_index = t.device_index AND s.ts_ns BETWEEN p.s AND p.e
            WHERE s.run_id = $1
        )
        SELECT {sel}, k.name, k.category, s.ts_ns < k.end_ns AS covered
        FROM s ASOF LEFT JOIN k ON k.device_index = s.device_index AND s.ts_ns >= k.ts_ns
        """,
        [run_id],
    ).fetchall()
    acc: dict[str, dict[str, Any]] = {}
    for row in rows:
        values, name, category, covered = row[:len(cols)], row[len(cols)], row[len(cols) + 1], row[len(cols) + 2]
        if not covered or name is None:
            cls = "idle"
        elif category == "compute":
            cls = kernel_bounds.get(name, "unknown")
        else:
            cls = category
        a = acc.setdefault(cls, {"samples": 0, **{c: [0.0, 0] for c in cols}})
        a["samples"] += 1
        for c, v in zip(cols, values):
            if v is not None:
                a[c][0] += float(v)
                a[c][1] += 1
    out: dict[str, Any] = {}
    for cls, a in acc.items():
        out[cls] = {"samples": a["samples"],
                    **{f"{c}_mean": a[c][0] / a[c][1] for c in cols if a[c][1]}}
    return out
