"""Time breakdown of a run: compute, communication, memory and idle GPU time, per kernel and
per op. Pure functions over a store connection; they return plain data and never print.

Definitions (the same as Holistic Trace Analysis's categories, see ``docs/analysis.md``):

- GPU activity is every trace event of category ``kernel``, ``gpu_memcpy`` or ``gpu_memset``
  (any capitalisation; older Kineto's ``Memcpy`` / ``Memset`` count as the latter two), stored in ``kernels`` with ``kind`` kernel / memcpy / memset.
- ``memory`` is memcpy plus memset time (by category, or a kernel named ``Memcpy...`` /
  ``Memset...``); ``communication`` is kernels whose name mentions nccl, rccl, msccl or hccl or
  a collective (``gpuscope.kernel_names``); ``compute`` is every other kernel. The category is
  derived from that definition when the analysis runs, not read from ``kernels.category``, so a
  store ingested under an older definition is analyzed by today's.
- ``idle`` is, per device, the span from its first GPU activity to its last minus the union of
  its busy intervals, summed over devices.

Unlike HTA, every kernel counts (also those outside complete profiler steps), times keep their
sub-microsecond precision, and CPU ops are never counted as GPU time.
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import RunNotFoundError
from ..kernel_names import category_sql
from .advice import advise
from .attribution import attribute, device_roofs
from .common import json_or_none
from .coverage import empty_coverage
from .roofline import BOUNDS, ROOFLINE_RULES
from .scope import counted_kernels, graph_capture_exclusions

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

SCHEMA = "gpuscope.analysis/1"
CATEGORIES = ("compute", "communication", "memory")


@dataclass(frozen=True)
class DeviceBreakdown:
    """GPU time of one device, in microseconds."""

    device_id: int
    key: str
    compute_us: float
    communication_us: float
    memory_us: float
    idle_us: float
    span_us: float
    busy_us: float
    activities: int


def device_breakdowns(con: duckdb.DuckDBPyConnection, run_id: int, excluded: Sequence[int] = ()) -> list[DeviceBreakdown]:
    """Per-device compute / communication / memory / idle time of ``run_id``.

    Idle is the sum of the gaps between merged busy intervals: an activity that starts after
    every earlier one (in start order) has ended opens a gap of that length.
    """
    # The gaps come from a window over the activities in start order; the categories from the
    # distinct (name, kind) pairs, so the name patterns run once per name, not once per row and
    # not as payload of the window's sort (0.115 s -> 0.034 s on a 1.2M-event run, 85k activities)
    rows = con.execute(
        """
        WITH iv AS (
            SELECT device_id, ts_ns, ts_ns + dur_ns AS end_ns,
                   max(ts_ns + dur_ns) OVER (PARTITION BY device_id ORDER BY ts_ns, ts_ns + dur_ns
                                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
            FROM kernels WHERE run_id = ?{counted}
        ), gaps AS (
            SELECT device_id,
                   sum(CASE WHEN prev_end IS NOT NULL AND ts_ns > prev_end THEN ts_ns - prev_end ELSE 0 END) AS idle,
                   max(end_ns) - min(ts_ns) AS span, count(*) AS n
            FROM iv GROUP BY device_id
        ), by_name AS (
            SELECT device_id, name, kind, sum(dur_ns) AS dur FROM kernels WHERE run_id = ?{counted} GROUP BY ALL
        ), cats AS (
            SELECT device_id,
                   sum(dur) FILTER (WHERE category = 'compute') AS comp,
                   sum(dur) FILTER (WHERE category = 'communication') AS comm,
                   sum(dur) FILTER (WHERE category = 'memory') AS mem
            FROM (SELECT device_id, dur, {category} AS category FROM by_name) GROUP BY device_id
        )
        SELECT g.device_id, coalesce(d.key, 'device' || g.device_id), c.comp, c.comm, c.mem, g.idle, g.span, g.n
        FROM gaps g JOIN cats c ON c.device_id = g.device_id
        LEFT JOIN devices d ON d.run_id = ? AND d.device_id = g.device_id
        ORDER BY g.device_id
        """.format(counted=counted_kernels(excluded), category=category_sql()),
        [run_id, run_id, run_id],
    ).fetchall()
    out = []
    for dev, key, comp, comm, mem, idle, span, n in rows:
        idle = idle or 0
        span = span or 0
        out.append(
            DeviceBreakdown(int(dev), str(key), (comp or 0) / 1e3, (comm or 0) / 1e3, (mem or 0) / 1e3,
                            idle / 1e3, span / 1e3, (span - idle) / 1e3, int(n))
        )
    return out


def time_breakdown(per_device: list[DeviceBreakdown]) -> dict[str, float]:
    """``time_us`` of the analysis document: totals over all devices, in microseconds."""
    return {
        "compute": sum(d.compute_us for d in per_device),
        "communication": sum(d.communication_us for d in per_device),
        "memory": sum(d.memory_us for d in per_device),
        "idle": sum(d.idle_us for d in per_device),
    }


def kernel_table(con: duckdb.DuckDBPyConnection, run_id: int, limit: int | None = None,
                 excluded: Sequence[int] = ()) -> list[dict[str, Any]]:
    """One entry per distinct GPU activity name, most total time first."""
    sql = f"""
        SELECT name, kind, {category_sql()} AS category, count(*) AS count, sum(dur_ns) / 1e3 AS total_us,
               avg(dur_ns) / 1e3 AS mean_us, min(dur_ns) / 1e3 AS min_us, max(dur_ns) / 1e3 AS max_us,
               count(DISTINCT device_id) AS devices, count(op_id) AS with_op
        FROM kernels WHERE run_id = ?{counted_kernels(excluded)}
        GROUP BY name, kind
        ORDER BY total_us DESC, name
    """
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    cols = ["name", "kind", "category", "count", "total_us", "mean_us", "min_us", "max_us", "devices", "with_op"]
    out = []
    for r in con.execute(sql, [run_id]).fetchall():
        d = dict(zip(cols, r))
        d.update(bound="unknown", flops=None, bytes=None)
        out.append(d)
    return out


def op_table(con: duckdb.DuckDBPyConnection, run_id: int, gpu: bool, limit: int | None = None) -> list[dict[str, Any]]:
    """One entry per distinct (op name, input shapes, input dtypes); see :func:`_op_rows`."""
    return [row for _, row in _op_rows(con, run_id, gpu, limit)]


def _op_rows(con: duckdb.DuckDBPyConnection, run_id: int, gpu: bool, limit: int | None = None,
             excluded: Sequence[int] = ()) -> list[tuple[tuple[str, str | None, str | None], dict[str, Any]]]:
    """One entry per distinct (op name, input shapes, input dtypes), each with its key as stored
    (name, input_dims text, input_types text), which the roofline attribution uses too.

    With GPU activity, an op's ``kernel_us`` is the GPU time of the activities it launched (its
    kernels, memcpys and memsets), summed over calls, and only ops that launched something are
    listed. On a CPU-only run every op is listed with its self CPU time (its duration minus that
    of the ops it called) as ``kernel_us``, and its inclusive time as ``cpu_us``.
    """
    if gpu:
        sql = f"""
            WITH per_op AS (
                -- a call replayed from a graph is one per replay (graph launch): see attribution._CALL
                SELECT op_id, sum(dur_ns) AS gpu_ns, count(*) AS n,
                       count(DISTINCT CASE WHEN attribution = 'graph_capture' THEN correlation ELSE -1 END) AS calls
                FROM kernels WHERE run_id = ? AND op_id IS NOT NULL{counted_kernels(excluded)} GROUP BY op_id
            )
            SELECT o.name, o.input_dims, o.input_types, sum(p.calls) AS count, sum(p.gpu_ns) / 1e3 AS kernel_us,
                   sum(o.dur_ns) / 1e3 AS cpu_us, sum(p.n) AS kernels, NULL AS concrete
            FROM ops o JOIN per_op p ON p.op_id = o.op_id
            WHERE o.run_id = ?
            GROUP BY o.name, o.input_dims, o.input_types
            ORDER BY kernel_us DESC, o.name, o.input_dims, o.input_types
        """
        params = [run_id, run_id]
    else:
        sql = """
            WITH child AS (
                SELECT parent_op_id AS op_id, sum(dur_ns) AS child_ns
                FROM ops WHERE run_id = ? AND parent_op_id IS NOT NULL GROUP BY parent_op_id
            )
            SELECT o.name, o.input_dims, o.input_types, count(*) AS count,
                   sum(greatest(o.dur_ns - coalesce(c.child_ns, 0), 0)) / 1e3 AS kernel_us,
                   sum(o.dur_ns) / 1e3 AS cpu_us, 0 AS kernels,
                   min(o.concrete_inputs) AS concrete
            FROM ops o LEFT JOIN child c ON c.op_id = o.op_id
            WHERE o.run_id = ?
            GROUP BY o.name, o.input_dims, o.input_types
            HAVING kernel_us > 0
            ORDER BY kernel_us DESC, o.name, o.input_dims, o.input_types
        """
        params = [run_id, run_id]
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    out = []
    for name, dims, types, count, kernel_us, cpu_us, kernels, concrete in con.execute(sql, params).fetchall():
        out.append(((name, dims, types), {
            "_concrete": concrete,  # scalar arguments, for the cost model only (popped by _merge_ops)
            "name": name,
            "input_dims": json_or_none(dims),
            "input_types": json_or_none(types),
            "count": int(count),
            "flops": None,
            "bytes": None,
            "kernel_us": float(kernel_us or 0.0),
            "cpu_us": float(cpu_us or 0.0),
            "kernels": int(kernels or 0),
            "bound": "unknown",
        }))
    return out


def device_list(con: duckdb.DuckDBPyConnection, run_id: int) -> list[dict[str, Any]]:
    """The devices of a run: ``{key, vendor, name, spec, kind, ...}``."""
    rows = con.execute(
        "SELECT device_id, key, vendor, name, spec_key, kind, source, memory_total_bytes, compute_capability, "
        "num_sms, warp_size FROM devices WHERE run_id = ? ORDER BY device_id",
        [run_id],
    ).fetchall()
    cols = ["device_id", "key", "vendor", "name", "spec", "kind", "source", "memory_total_bytes",
            "compute_capability", "num_sms", "warp_size"]
    return [dict(zip(cols, r)) for r in rows]


#: The keys of every ``kernels`` entry of the analysis, in this order (docs/analysis.md): each
#: entry carries all of them, null where the analysis does not know the value for that kernel
#: (a collective has no roof time, a compute kernel no copy direction), so that a consumer never
#: needs to tell a missing key from an unknown value.
KERNEL_KEYS = ("name", "kind", "category", "count", "total_us", "mean_us", "min_us", "max_us", "devices", "with_op",
               "bound", "confidence", "reason", "family", "flops", "bytes", "achieved_flops_per_s",
               "achieved_bytes_per_s", "bound_us", "roof_us", "pct_of_roof", "saved_us", "model_error", "cache",
               "attribution", "twin", "direction", "link")

#: The keys of every ``ops`` entry of the analysis, in this order (docs/analysis.md); null where
#: unknown (an op without a cost model, every op of a CPU-only trace has no roof).
OP_KEYS = ("name", "input_dims", "input_types", "count", "flops", "flops_executed", "bytes", "kernel_us", "cpu_us",
           "kernels", "bound", "confidence", "reason", "link", "dtype", "model", "kind", "intensity_flop_per_byte",
           "ridge_flop_per_byte", "achieved_flops_per_s", "achieved_bytes_per_s", "pct_of_roof", "roof_us",
           "saved_us", "host_copy_us", "host_copy_bytes", "model_error", "cache")


def _shaped(entry: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """``entry`` with every one of ``keys``, in their order, a key it lacks null; any other key
    it has follows them (tests/test_docs_claims.py fails on such a key until it is documented)."""
    shaped = {key: entry.get(key) for key in keys}
    shaped.update((k, v) for k, v in entry.items() if k not in shaped)
    return shaped


def _merge_kernels(kernels: list[dict[str, Any]], att: dict[str, Any] | None) -> None:
    for k in kernels:
        a = att["kernels"].get(k["name"]) if att and k["category"] == "compute" else None
        if a is not None:
            k.update(a)
        elif k["category"] == "communication":
            k.update(bound="unknown", confidence="none", family="communication",
                     reason="communication kernel: not part of compute time")
        elif k["category"] == "memory":
            # judged against the link it crosses (host link or device memory); not compute time
            copy = att["copies"].get(k["name"]) if att else None
            if copy is not None:
                k.update(copy)
            else:
                k.update(bound="memory_bound", confidence="none", family="memory",
                         reason="memcpy / memset activity: not part of compute time")
    kernels[:] = [_shaped(k, KERNEL_KEYS) for k in kernels]


def _merge_ops(ops: list[tuple[tuple[str, str | None, str | None], dict[str, Any]]], att: dict[str, Any] | None,
               gpu: bool, *, model: Any = None, context_tokens: int | None = None) -> None:
    from .costmodel import op_cost

    for key, o in ops:
        concrete = o.pop("_concrete", None)
        a = att["ops"].get(key) if att else None
        if a is not None:
            o.update(a)
        elif not gpu:
            try:
                cost = op_cost(o["name"], o["input_dims"], o["input_types"], concrete, model=model,
                               context_tokens=context_tokens)
            except Exception:
                cost = None
            if cost is not None:
                o.update(flops=cost.flops, bytes=cost.bytes, dtype=cost.dtype, model=cost.model, kind=cost.kind)
            o.update(bound="unknown", confidence="none", reason="no GPU activity: nothing to judge against a GPU roof")
    ops[:] = [(key, _shaped(o, OP_KEYS)) for key, o in ops]


def analyze_run(con: duckdb.DuckDBPyConnection, run_id: int, top: int | None = None, roof: str = "spec",
                gpu: str | None = None, specs_path: str | None = None, *, model: Any = None,
                context_tokens: int | None = None, model_source: str | None = None,
                use_stored_model: bool = True) -> dict[str, Any]:
    """The ``gpuscope.analysis/1`` document of ``run_id`` (design.md §4.2).

    ``top`` limits the ``ops`` and ``kernels`` lists (None: all of them). ``roof`` is "spec"
    (the spec-database peaks) or "measured" (the newest ``gpuscope calibrate`` of the same GPU
    model, else the spec); ``gpu`` overrides GPU identification with a spec key or name;
    ``specs_path`` is a user spec file (default ``$GPUSCOPE_SPECS``).
    ``model`` (a :class:`~gpuscope.analyzers.modelspec.ModelSpec`, the user's ``--model``) and
    ``context_tokens`` (``--context``) fill in what fused ops do not record; with a model the
    document gains a ``model`` block (its ``source``, as ``model_source`` says, and the ops it
    filled in). Without ``model``, the model stored with the run (``ingest/run --model``) is used
    unless ``use_stored_model`` is false: every face (analyze, compare, report, export, the TUI)
    judges a run the same way. A ``run_id`` the store does not hold is a
    :class:`~gpuscope.errors.RunNotFoundError`.
    """
    run = con.execute(
        "SELECT id, name, status, source, started_ns, ended_ns, info FROM runs WHERE id = ?", [run_id]
    ).fetchone()
    if run is None:
        raise RunNotFoundError(run_id)
    from ..store.run_info import RunInfo

    info = RunInfo.from_json(run[6])  # the typed runs.info: an old store's odd document reads as empty parts
    roofs = device_roofs(con, run_id, roof=roof, gpu=gpu, specs_path=specs_path)
    excluded = graph_capture_exclusions(con, run_id)
    skip = [e["trace_id"] for e in excluded]
    per_device = device_breakdowns(con, run_id, skip)
    time_us = time_breakdown(per_device)
    gpu_active = bool(per_device)
    if model is None and use_stored_model:
        model, model_source = _stored_model(con, run_id)
    if model is not None and getattr(model, "tensor_parallel", 0) is None:
        model = _with_tensor_parallel(con, run_id, model)
    att = attribute(con, run_id, roofs, skip, model=model, context_tokens=context_tokens) if gpu_active else None
    kernels = kernel_table(con, run_id, top, skip)
    _merge_kernels(kernels, att)
    op_rows = _op_rows(con, run_id, gpu_active, top, skip)
    _merge_ops(op_rows, att, gpu_active, model=model, context_tokens=context_tokens)
    ops = [row for _, row in op_rows]
    roofline_us = att["roofline_us"] if att else {b: 0.0 for b in BOUNDS}
    kept = counted_kernels(skip)
    counts = con.execute(
        f"SELECT (SELECT count(*) FROM kernels WHERE run_id = $1{kept}), "
        f"(SELECT count(*) FROM kernels WHERE run_id = $1 AND op_id IS NULL{kept}), "
        f"(SELECT coalesce(sum(dur_ns), 0) FROM kernels WHERE run_id = $1 AND op_id IS NULL{kept}), "
        "(SELECT count(*) FROM ops WHERE run_id = $1), "
        "(SELECT count(*) FROM annotations WHERE run_id = $1 AND kind = 'profiler_step'), "
        f"(SELECT count(*) FROM kernels WHERE run_id = $1 AND attribution = 'graph_capture'{kept}), "
        f"(SELECT count(*) FROM kernels WHERE run_id = $1 AND attribution IN ('graph_capture', 'graph_replay'){kept})",
        [run_id],
    ).fetchone()
    assert counts is not None  # a SELECT without FROM gives one row
    ingest = info.ingest or {}
    devices = device_list(con, run_id)
    for d in devices:
        r = roofs.get(d["device_id"])
        if r is not None:
            d["spec"] = r.roof.spec_key
    doc = {
        "schema": SCHEMA,
        "run": {"id": int(run[0]), "name": run[1], "status": run[2], "source": run[3],
                "started_ns": run[4], "ended_ns": run[5]},
        "devices": devices,
        "gpu_activity": gpu_active,
        "time_us": time_us,
        "roofline_us": roofline_us,
        # GPU time judged against a roof (design.md §4.2): compute, communication and copies
        "coverage": (att["coverage"].document(time_us["compute"] + time_us["communication"] + time_us["memory"])
                     if att else empty_coverage()),
        "roofline": {
            "roof": roof,
            "devices": [r.to_json() for r in roofs.values()],
            "rules": ROOFLINE_RULES,
        },
        "per_device": [
            {"key": d.key, "compute_us": d.compute_us, "communication_us": d.communication_us,
             "memory_us": d.memory_us, "idle_us": d.idle_us, "span_us": d.span_us, "busy_us": d.busy_us,
             "activities": d.activities}
            for d in per_device
        ],
        "counts": {"gpu_activities": counts[0], "gpu_activities_without_op": counts[1],
                   "gpu_us_without_op": counts[2] / 1e3, "ops": counts[3], "profiler_steps": counts[4],
                   "graph_replayed_kernels": counts[6], "graph_kernels_mapped_to_ops": counts[5]},
        "ops": ops,
        "kernels": kernels,
        "skipped": ingest.get("skipped", {}),
        "excluded_traces": excluded,
        "notes": list(info.notes or []),
    }
    doc["notes"] = doc["notes"] + _missing_concrete_inputs_notes(con, run_id)
    if att and att.get("model_errors"):
        doc["notes"].append(att["model_errors"])
    if att and att.get("communication", {}).get("entries"):  # the run's collectives against their link
        from .comm import communication_block
        doc["communication"] = communication_block(att["communication"])
        doc["notes"].extend(doc["communication"]["notes"])
    if model is not None or context_tokens is not None:
        doc["model"] = model_block(ops, model, model_source, context_tokens)
    doc["advice"] = advise(doc)
    return doc


def _stored_model(con: duckdb.DuckDBPyConnection, run_id: int) -> tuple[Any, str | None]:
    """The model spec stored with the run and its source, or (None, None) (none stored, or one
    this gpuscope cannot read: the analysis goes on without it)."""
    from ..store.read import run_model
    from .modelspec import ModelSpec

    stored = run_model(con, run_id)
    if stored is None:
        return None, None
    try:
        spec = ModelSpec.from_json(stored[0])
    except ValueError:
        return None, None
    return spec, f"stored with the run, from {stored[1]}" if stored[1] else "stored with the run"


def _with_tensor_parallel(con: duckdb.DuckDBPyConnection, run_id: int, model: Any) -> Any:
    """``model`` with the run's tensor-parallel degree when its attention ops show it (the query
    heads each rank holds, :func:`~gpuscope.analyzers.modelspec.infer_tensor_parallel`)."""
    import dataclasses

    from .modelspec import infer_tensor_parallel

    rows = con.execute(
        "SELECT DISTINCT input_dims FROM ops WHERE run_id = ? AND (name LIKE 'vllm::unified_attention%' "
        "OR name LIKE 'vllm::%attention%') AND input_dims IS NOT NULL LIMIT 50", [run_id]).fetchall()
    dims = [json_or_none(r[0]) for r in rows]
    tp = infer_tensor_parallel(model, dims)
    return dataclasses.replace(model, tensor_parallel=tp) if tp and tp > 1 else model


def model_block(ops: list[dict[str, Any]], model: Any, source: str | None,
                context_tokens: int | None) -> dict[str, Any]:
    """The ``model`` block of the analysis: the spec used, where it came from (``--model FILE``
    or stored with the run), ``--context``, and ``filled_ops``: the ops whose cost exists only
    because of the model or the context (costed with them, not without), with their calls and
    GPU time."""
    from .costmodel import op_cost

    filled: dict[str, dict[str, Any]] = {}
    for o in ops:
        if o.get("flops") is None and o.get("bytes") is None:
            continue
        try:
            without = op_cost(o["name"], o["input_dims"], o["input_types"])
            with_it = op_cost(o["name"], o["input_dims"], o["input_types"], model=model,
                              context_tokens=context_tokens)
        except Exception:  # a cost model must never break the analysis
            continue
        if without is None and with_it is not None:
            f = filled.setdefault(o["name"], {"name": o["name"], "count": 0, "kernel_us": 0.0,
                                              "model": with_it.model})
            f["count"] += int(o.get("count") or 0)
            f["kernel_us"] += float(o.get("kernel_us") or 0.0)
    return {
        "source": source,
        "spec": model.to_json() if model is not None and hasattr(model, "to_json") else None,
        "context_tokens": context_tokens,
        "filled_ops": sorted(filled.values(), key=lambda f: (-f["kernel_us"], f["name"])),
    }


def _missing_concrete_inputs_notes(con: duckdb.DuckDBPyConnection, run_id: int) -> list[str]:
    """One note when convolutions went without a cost because the trace lacks their scalar
    arguments (older torch records no ``Concrete Inputs``): the cost model does not guess.

    Calls are counted once, at the outermost convolution op (``conv2d`` calls ``convolution``,
    ``_convolution`` and a backend op, all of them the same call)."""
    from .costmodel import NEEDS_CONCRETE_INPUTS

    names = sorted(NEEDS_CONCRETE_INPUTS)
    in_names = ", ".join("?" * len(names))
    blank = "IS NULL OR trim({c}) IN ('', '[]') OR regexp_matches({c}, '^\\[(\\s*(\"\"|\\[\\])\\s*,?)*\\]$')"
    row = con.execute(
        f"SELECT count(*), count(*) FILTER (WHERE NOT (o.input_dims {blank.format(c='o.input_dims')})) "
        f"FROM ops o LEFT JOIN ops p ON p.run_id = o.run_id AND p.op_id = o.parent_op_id "
        f"WHERE o.run_id = ? AND o.name IN ({in_names}) AND (o.concrete_inputs {blank.format(c='o.concrete_inputs')}) "
        f"AND (p.name IS NULL OR p.name NOT IN ({in_names}))",
        [run_id, *names, *names],
    ).fetchone()
    if not row or not row[0]:
        return []
    if not row[1]:
        why = "the trace records no input shapes (profile with record_shapes=True to cost them)"
    else:
        why = ("the trace records no 'Concrete Inputs' (stride, padding, dilation, groups), which torch "
               "before 2.1 leaves out; gpuscope does not guess them (record with a newer torch and "
               "record_shapes=True to cost them)")
    return [f"{row[0]} convolution call(s) have no FLOPs or bytes: {why}"]
