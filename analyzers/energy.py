"""Telemetry of a run on the traces' time base: what utilisation, power and clocks did over
the run and during each profiler window, and energy per token.

Samples and trace events share one clock (integer ns since the Unix epoch: the sampler uses
the host's wall clock, Kineto's ``baseTimeNanoseconds`` too), so a window or a kernel's
interval selects the samples taken during it. Pure functions over a store connection.

Energy: the vendor's energy counter (``energy_j``, monotonic) from the first to the last
sample, cross-checked against power integrated over time (trapezoids of ``power_w``). The two
differ when ``power_w`` is an average over a window longer than the sampling period (NVML on
Ampere and newer reports a 1 s average) or when the counter is coarse; both are reported.
"""
from __future__ import annotations

import json
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
    out: dict[str, Any] = {"samples": int(row[0])}
    for i, c in enumerate(cols):
        mean, peak = row[1 + 2 * i], row[2 + 2 * i]
        if mean is not None:
            out[f"{c}_mean"] = float(mean)
            out[f"{c}_max"] = float(peak)
    return out


def _energy(con: duckdb.DuckDBPyConnection, run_id: int, device_id: int, have: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"energy_counter_j": None, "energy_integrated_j": None, "seconds": None}
    if "energy_j" in have:
        row = con.execute(
            "SELECT arg_max(energy_j, ts_ns) - arg_min(energy_j, ts_ns), count(energy_j) FROM samples "
            "WHERE run_id = ? AND device_id = ? AND energy_j IS NOT NULL", [run_id, device_id]).fetchone()
        if row[1] and row[1] >= 2 and row[0] is not None and row[0] >= 0:
            out["energy_counter_j"] = float(row[0])
    if "power_w" in have:
        row = con.execute(
            """SELECT sum((ts_ns - prev_ts) / 1e9 * (power_w + prev_p) / 2), (max(ts_ns) - min(ts_ns)) / 1e9
               FROM (SELECT ts_ns, power_w, lag(ts_ns) OVER w AS prev_ts, lag(power_w) OVER w AS prev_p
                     FROM samples WHERE run_id = ? AND device_id = ? AND power_w IS NOT NULL
                     WINDOW w AS (ORDER BY ts_ns))""", [run_id, device_id]).fetchone()
        if row[0] is not None:
            out["energy_integrated_j"] = float(row[0])
            out["seconds"] = float(row[1])
    return out


def run_telemetry(con: duckdb.DuckDBPyConnection, run_id: int, tokens: int | None = None) -> dict[str, Any]:
    """Telemetry summary of ``run_id``: per GPU over the run and per profiler window, energy,
    and tokens (from ``gpuscope.mark(tokens=...)`` marks, or ``tokens`` when given)."""
    have = _available(con)
    cols = [c for c in _STATS if c in have]
    devices = con.execute(
        "SELECT device_id, key, name, kind FROM devices WHERE run_id = ? AND source <> 'trace' ORDER BY device_id",
        [run_id]).fetchall()
    windows = con.execute(
        "SELECT name, ts_ns, ts_ns + dur_ns, pid FROM annotations WHERE run_id = ? AND kind = 'profiler_window' "
        "ORDER BY ts_ns", [run_id]).fetchall()
    gpus = []
    total_counter = total_integrated = 0.0
    have_counter = have_integrated = False
    for device_id, key, name, kind in devices:
        if kind not in (None, "gpu"):
            continue
        overall = _window_stats(con, run_id, device_id, None, None, cols)
        if not overall["samples"]:
            continue
        energy = _energy(con, run_id, device_id, have)
        if energy["energy_counter_j"] is not None:
            total_counter += energy["energy_counter_j"]
            have_counter = True
        if energy["energy_integrated_j"] is not None:
            total_integrated += energy["energy_integrated_j"]
            have_integrated = True
        gpus.append({
            "key": key, "name": name, "run": overall, "energy": energy,
            "windows": [dict(_window_stats(con, run_id, device_id, s, e, cols), window=n, pid=p, start_ns=s,
                             end_ns=e) for n, s, e, p in windows],
        })
    mark_rows = con.execute(
        "SELECT ts_ns, value FROM annotations WHERE run_id = ? AND kind = 'mark' ORDER BY ts_ns", [run_id]).fetchall()
    mark_tokens = 0
    for _, value in mark_rows:
        try:
            mark_tokens += int(json.loads(value or "{}").get("tokens") or 0)
        except (ValueError, TypeError, AttributeError):
            continue
    token_source = "--tokens" if tokens is not None else ("marks" if mark_tokens else None)
    n_tokens = tokens if tokens is not None else (mark_tokens or None)
    energy_j = total_counter if have_counter else (total_integrated if have_integrated else None)
    out: dict[str, Any] = {
        "gpus": gpus,
        "windows": [{"name": n, "start_ns": s, "end_ns": e, "pid": p} for n, s, e, p in windows],
        "tokens": n_tokens,
        "token_source": token_source,
        "marks": len(mark_rows),
        "energy_j": energy_j,
        "energy_source": "counter" if have_counter else ("integrated power" if have_integrated else None),
        "energy_integrated_j": total_integrated if have_integrated else None,
        "energy_per_token_j": (energy_j / n_tokens) if energy_j is not None and n_tokens else None,
    }
    if have_counter and have_integrated and total_counter > 0:
        out["energy_crosscheck_ratio"] = total_integrated / total_counter
    if len(mark_rows) >= 2 and mark_tokens:
        span_s = (mark_rows[-1][0] - mark_rows[0][0]) / 1e9
        out["marks_span_s"] = span_s
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
            SELECT d.device_index, k.ts_ns, k.ts_ns + k.dur_ns AS end_ns, k.name, k.category
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
