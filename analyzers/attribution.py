"""Roofline attribution of a run: every compute kernel and every op that launched GPU work,
classified against its device's roof (see :mod:`gpuscope.analyzers.roofline` for the rules).

Pure functions over a store connection; they return plain data and never print.

How costs reach kernels: an op's FLOPs and bytes come from its cost model
(:mod:`gpuscope.analyzers.costmodel`) and its input shapes. The kernels one op call launched
share that cost in proportion to their duration, so summing over kernels gives back the op's
cost and every kernel of a call carries the call's verdict. Kernels replayed from a CUDA/HIP
graph get the op that captured them when the run holds the capture trace
(``kernels.attribution = 'graph_capture'``). Kernels without an op (they ran before the
profiler's CPU window, or were replayed without a capture trace) borrow the per-instance cost of
identical twins (same name, grid and block) an op launched, when all costed twins agree
(:func:`twin_costs`, confidence "estimate"); otherwise they are placed by name family.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .common import json_or_none
from .coverage import CoverageTally, reason_for_op, reason_for_unroofed
from .families import kernel_family
from .roofline import (
    BOUNDS,
    NO_ROOF,
    Roof,
    Verdict,
    classify_by_name,
    classify_copy,
    classify_cost,
    kernel_math,
    roof_dtype_for_math,
    settle_over_roof,
)

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

@dataclass(frozen=True)
class DeviceRoof:
    """The roof of one device of a run and how its GPU was identified."""

    device_id: int
    key: str
    roof: Roof
    #: How the spec entry was found ("name", "pci id", "--gpu", ...), or None.
    identified_via: str | None
    #: False when the entry was inferred (not an exact name or PCI id match).
    exact: bool
    note: str | None

    def to_json(self) -> dict[str, Any]:
        r = self.roof
        return {
            "key": self.key,
            "spec": r.spec_key,
            "roof_source": r.source,
            "identified_via": self.identified_via,
            "exact": self.exact,
            "peak_flops_per_s": {k: v for k, v in r.peak_flops_per_s.items() if v},
            "mem_bw_bytes_per_s": r.mem_bw_bytes_per_s,
            # what host<->device copies are judged against (one direction of the link)
            "host_link": r.host_link,
            "host_link_bytes_per_s": r.host_bw_bytes_per_s,
            # what work served from on-chip caches is judged against (cache_bound)
            "caches": [{"name": n, "bytes": b, "bw_bytes_per_s": bw} for n, b, bw in r.caches],
            "note": self.note,
        }


def _spec_caches(spec: Any) -> tuple[tuple[str, float, float | None], ...]:
    """The GPU's on-chip caches, smallest first: L2, then the last-level cache (AMD's Infinity
    Cache / MALL). Bandwidths are read with getattr: spec databases without them give None.
    Sizes are binary megabytes: the vendors' "50 MB" H100 L2 is 50 MiB (52.4e6 bytes)."""
    caches: list[tuple[str, float, float | None]] = []
    l2_mb = getattr(spec, "l2_cache_mb", None)
    if l2_mb:
        bw = getattr(spec, "l2_bw_bytes_per_s", None)
        caches.append(("L2", float(l2_mb) * 2**20, float(bw) if bw else None))
    llc_mb = getattr(spec, "last_level_cache_mb", None)
    if llc_mb:
        bw = getattr(spec, "last_level_cache_bw_bytes_per_s", None)
        caches.append((getattr(spec, "last_level_cache_kind", None) or "last-level cache", float(llc_mb) * 2**20,
                       float(bw) if bw else None))
    return tuple(sorted(caches, key=lambda c: c[1]))


def _spec_roof(spec: Any) -> Roof:
    host_bw = spec.host_copy_bytes_per_s()
    from .comm import peer_link_of

    return Roof(spec.key, "spec", dict(spec.peak_flops_per_s), float(spec.mem_bw_bytes_per_s), None,
                float(host_bw) if host_bw else None, spec.host_link_label(), _spec_caches(spec),
                peer=peer_link_of(spec))


def device_roofs(con: duckdb.DuckDBPyConnection, run_id: int, roof: str = "spec", gpu: str | None = None,
                 specs_path: str | None = None) -> dict[int, DeviceRoof]:
    """The roof of every device of ``run_id``.

    ``gpu`` (a spec key or name) overrides identification for every GPU of the run.
    ``roof="measured"`` uses the newest calibration (``gpuscope calibrate``) of the same GPU
    model and falls back to the spec roof, saying so, when there is none.
    Raises :class:`gpuscope.errors.InputError` for an unknown ``gpu``.
    """
    from ..device import match_spec, match_trace_device
    from ..specs import load_specs

    db = load_specs(specs_path)
    forced = db.find(gpu) if gpu else None
    rows = con.execute(
        "SELECT device_id, key, kind, vendor, name, spec_key, memory_total_bytes, num_sms, properties, source "
        "FROM devices WHERE run_id = ? ORDER BY device_id",
        [run_id],
    ).fetchall()
    out: dict[int, DeviceRoof] = {}
    for dev_id, key, kind, vendor, name, spec_key, mem, sms, props, source in rows:
        if kind not in (None, "gpu"):
            out[dev_id] = DeviceRoof(dev_id, key, NO_ROOF, None, False, f"a {kind}, not a GPU gpuscope models")
            continue
        spec, via, exact, note = None, None, False, None
        if forced is not None:
            spec, via, exact = forced, "--gpu", True
        else:
            p = json_or_none(props)
            if source == "trace" and isinstance(p, dict) and p:
                ident = match_trace_device(p, db=db)
            else:
                ident = match_spec(name, db=db, memory_bytes=mem, compute_units=sms, vendor=vendor)
            spec, via, exact, note = ident.spec, ident.via, ident.exact, ident.note
            if spec is None and spec_key:
                # identified when the run was recorded (e.g. from NVML / AMD SMI)
                try:
                    spec, via, exact, note = db.get(spec_key), "recorded with the run", True, None
                except Exception:  # an entry that no longer exists
                    spec = None
        if spec is None:
            out[dev_id] = DeviceRoof(dev_id, key, Roof(None, None, {}, None, note or f"GPU {name!r} not identified"),
                                     None, False, note or f"GPU {name!r} is not in the spec database; "
                                     "pass --gpu KEY or add it (docs/specs.md)")
            continue
        r = _spec_roof(spec)
        if roof == "measured":
            r, measured_note = _measured(con, spec, r)
            note = "; ".join(x for x in (note, measured_note) if x) or None
        out[dev_id] = DeviceRoof(dev_id, key, r, via, exact, note)
    return out


def _measured(con: duckdb.DuckDBPyConnection, spec: Any, spec_roof: Roof) -> tuple[Roof, str | None]:
    from ..store.read import latest_ceilings

    m = latest_ceilings(con, spec_key=spec.key)
    if m is None:
        return spec_roof, f"no calibration of a {spec.key} in this store (run `gpuscope calibrate`): spec roof used"
    peaks = dict(spec_roof.peak_flops_per_s)
    peaks.update({k: v for k, v in m.flops_per_s.items() if v})
    bw = m.mem_bw_bytes_per_s or spec_roof.mem_bw_bytes_per_s
    # the host link is not calibrated: its spec figure stays (on an APU, the measured memory's)
    host_bw = bw if spec.host_link == "unified-memory" else spec_roof.host_bw_bytes_per_s
    # The L2 roof: the faster of the calibrated L2 streams (work that beat HBM from the L2 may read
    # more than it writes). Used only above the HBM roof: an L2 figure at or below it cannot be
    # what work faster than HBM ran at (a failed sizing), so the spec's figure stays then.
    l2_bw = max((v for v in (m.l2_bw_bytes_per_s, m.l2_read_bytes_per_s) if v), default=None)
    caches = spec_roof.caches
    if l2_bw and bw and l2_bw > bw and any(name == "L2" for name, _, _ in caches):
        caches = tuple((name, size, l2_bw if name == "L2" else cbw) for name, size, cbw in caches)
    return Roof(spec.key, "measured", peaks, bw, f"calibration {m.calibration_id}", host_bw,
                spec_roof.host_link, caches, peer=spec_roof.peer), (
        f"measured roof: calibration {m.calibration_id} on {m.host}; dtypes not measured use the spec peak"
        + ("; L2 bandwidth measured" if caches is not spec_roof.caches else "")
    )


# --------------------------------------------------------------------------------------------


#: One op call's kernels. An eagerly launched call is its op row; a call replayed from a CUDA/HIP
#: graph is one replay of the captured op: the replayed kernels share the capturing op's row,
#: and each replay is one graph launch (its correlation id). Without the correlation, N replays
#: of a graph would count as one call with N times its time.
_CALL = "CASE WHEN attribution = 'graph_capture' THEN correlation END"
#: A compute kernel's share of its call's cost: its duration over the call's compute-kernel time.
#: The memsets and copies a call also ran (cuBLAS's workspace memset, say) are judged on their
#: own, so the compute kernels of a call carry all of its cost and their shares sum to 1.
_SHARE = ("dur_ns / nullif(sum(CASE WHEN {category} = 'compute' THEN dur_ns END) "
          "OVER (PARTITION BY op_id, " + _CALL + "), 0)")


def tensorlist_element_bytes(con: duckdb.DuckDBPyConnection, run_id: int, kept: str = "") -> dict[tuple[Any, ...], int]:
    """Bytes per element of the TensorList ops of a run (cat, stack, ``_foreach_*``), per call
    signature, read from the names of the kernels their calls launched
    (:func:`gpuscope.kernel_names.kernel_element_bytes`): the profiler does not record a
    TensorList's dtypes. A signature whose kernels say two sizes, or none, is absent."""
    from ..kernel_names import kernel_element_bytes

    rows = con.execute(
        f"""
        SELECT DISTINCT o.name, o.input_dims, o.input_types, o.concrete_inputs, o.input_strides, k.name
        FROM (SELECT name, op_id FROM kernels WHERE run_id = ? AND op_id IS NOT NULL{kept}) k
        JOIN ops o ON o.run_id = ? AND o.op_id = k.op_id
        WHERE contains(o.input_types, 'TensorList')
        """,
        [run_id, run_id],
    ).fetchall()
    seen: dict[tuple[Any, ...], set[int]] = {}
    for *sig, kname in rows:
        size = kernel_element_bytes(kname)
        if size is not None:
            seen.setdefault(tuple(sig), set()).add(size)
    return {sig: next(iter(sizes)) for sig, sizes in seen.items() if len(sizes) == 1}


def _work_flops(cost: Any) -> float | None:
    """The FLOPs the hardware does: for causal attention the unmasked part
    (``flops_executed``), not the full-matrix count ``flops`` that FlopCounterMode reports."""
    executed = getattr(cost, "flops_executed", None)
    return executed if executed is not None else cost.flops


#: The coverage reason of an op-less kernel whose costed twins do not all give the same cost.
TWIN_AMBIGUOUS = "twin_ambiguous"
#: Twins agree when their per-instance FLOPs and bytes are equal within this relative tolerance.
TWIN_REL_TOL = 1e-6


@dataclass(frozen=True)
class Twin:
    """The cost an op-less kernel borrows from its identical twins: launches, in the same run,
    of the same kernel name with the same grid and block (the name alone where the trace records
    neither for the op-less kernel) by an op that has a cost model, all of which agree on the
    per-instance cost."""

    #: The per-call cost of the representative twin's op call (its roof dtype following its math).
    cost: Any
    #: That kernel's duration share of its call: per-instance cost = ``cost`` x ``share``.
    share: float
    #: How many costed twin launches there are (all agreeing).
    launches: int
    #: The ops that launched them, most launches first.
    op_names: tuple[str, ...]
    #: True when matched by name alone (the op-less kernel records no grid nor block).
    by_name_only: bool
    #: The twins disagree: ``cost`` is then the least work any of them did per instance (the
    #: smallest FLOPs and the smallest bytes), a lower bound of the orphan's, and
    #: ``candidates`` the per-instance cost of each; the orphan is judged only when every
    #: candidate gives the same class, and its percent of roof is then "at least".
    lower_bound: bool = False
    candidates: tuple[Any, ...] = ()

    def reason(self, verdict_reason: str) -> str:
        """The kernel's reason text: where its cost came from, then the verdict's own reason."""
        ops = ", ".join(self.op_names[:3]) + (f" and {len(self.op_names) - 3} more" if len(self.op_names) > 3 else "")
        same = "same name; the trace records no grid or block for it" if self.by_name_only else \
            "same name, grid and block"
        if self.lower_bound:
            return (f"launched by no recorded op: its {self.launches} identical launches ({same}) by {ops} "
                    f"differ in cost; judged on the least of them, so its percent of roof is a lower bound; "
                    f"{verdict_reason}")
        return (f"launched by no recorded op: cost taken from {self.launches} identical launches ({same}) "
                f"of {ops}; {verdict_reason}")


def _values_agree(values: list[float | None]) -> bool:
    """All None, or all numbers equal within :data:`TWIN_REL_TOL` (relative)."""
    if all(v is None for v in values):
        return True
    if any(v is None for v in values):
        return False
    nums = [float(v) for v in values if v is not None]
    lo, hi = min(nums), max(nums)
    return hi - lo <= TWIN_REL_TOL * max(abs(lo), abs(hi))


def twin_costs(con: duckdb.DuckDBPyConnection, run_id: int, orphan_keys: Sequence[tuple[str, str | None, str | None]],
               kept: str, category: str, math_sql: str, tf32_names: list[str], simt_names: list[str],
               cost_of: Callable[[tuple[Any, ...], str | None], Any]
               ) -> dict[tuple[str, str | None, str | None], Twin | str]:
    """For each op-less compute kernel group ``(name, grid, block)`` (grid and block as text,
    None where not recorded), the :class:`Twin` cost it borrows, or :data:`TWIN_AMBIGUOUS` when
    its costed twins disagree (FLOPs or bytes per instance beyond :data:`TWIN_REL_TOL`, or the
    roof dtype). Groups without a costed twin are absent.

    One aggregate query: the op-launched compute kernels of the orphans' names, per (name, grid,
    block, op signature, math), with their count and their smallest and largest share of their
    call (the share the kernel table books them with); ``cost_of(sig, math)`` costs each
    signature once. No per-kernel work in Python."""
    names = sorted({k[0] for k in orphan_keys if k[0] is not None})
    if not names:
        return {}
    rows = con.execute(
        f"""
        WITH k AS (
            SELECT name, op_id, CAST(grid AS VARCHAR) AS grid_key, CAST(block AS VARCHAR) AS block_key,
                   {category} AS category, {_SHARE.format(category=category)} AS share
            FROM kernels WHERE run_id = $1 AND op_id IS NOT NULL{kept}
        ), m AS (
            SELECT op_id, {math_sql.format(tf=2, simt=3)} AS math
            FROM kernels WHERE run_id = $1 AND op_id IS NOT NULL{kept} GROUP BY op_id
        )
        SELECT k.name, k.grid_key, k.block_key, o.name, o.input_dims, o.input_types, o.concrete_inputs,
               o.input_strides, m.math, count(*), min(k.share), max(k.share)
        FROM k JOIN ops o ON o.run_id = $1 AND o.op_id = k.op_id LEFT JOIN m ON m.op_id = k.op_id
        WHERE k.category = 'compute' AND k.share IS NOT NULL AND list_contains($4, k.name)
        GROUP BY ALL
        ORDER BY ALL
        """,
        [run_id, tf32_names, simt_names, names],
    ).fetchall()
    # (name, grid, block) -> [(cost, launches, smallest share, largest share, op name)]
    costed: dict[tuple[str, str | None, str | None], list[tuple[Any, int, float, float, str]]] = defaultdict(list)
    by_name: dict[str, list[tuple[Any, int, float, float, str]]] = defaultdict(list)
    for kname, grid, block, oname, dims, types, concrete, strides, math, n, smin, smax in rows:
        cost = cost_of((oname, dims, types, concrete, strides), math)
        if cost is None or (cost.bytes is None and not cost.flops):
            continue  # a twin without a cost to judge (no model, or no bytes and no FLOPs) lends nothing
        entry = (cost, int(n), float(smin), float(smax), oname)
        costed[(kname, grid, block)].append(entry)
        by_name[kname].append(entry)
    out: dict[tuple[str, str | None, str | None], Twin | str] = {}
    for key in orphan_keys:
        name, grid, block = key
        name_only = grid is None and block is None
        cands = by_name.get(name, []) if name_only else costed.get(key, [])
        if not cands:
            continue
        flops: list[float | None] = []
        nbytes: list[float | None] = []
        for cost, _, smin, smax, _ in cands:
            work = _work_flops(cost)
            flops += [None, None] if work is None else [work * smin, work * smax]
            nbytes += [None, None] if cost.bytes is None else [cost.bytes * smin, cost.bytes * smax]
        rep = max(cands, key=lambda c: c[1])  # the first of the most launched (rows are ordered)
        per_op: dict[str, int] = defaultdict(int)
        for c in cands:
            per_op[c[4]] += c[1]
        op_names = tuple(o for o, _ in sorted(per_op.items(), key=lambda kv: (-kv[1], kv[0])))
        launches = sum(c[1] for c in cands)
        if len({c[0].dtype for c in cands}) != 1:
            out[key] = TWIN_AMBIGUOUS
        elif _values_agree(flops) and _values_agree(nbytes):
            out[key] = Twin(rep[0], (rep[2] + rep[3]) / 2, launches, op_names, name_only)
        elif None in flops or None in nbytes:
            out[key] = TWIN_AMBIGUOUS
        else:
            # Twins that did different work (the same GEMM kernel and grid for two shapes): the
            # least of them bounds the orphan's work from below; the attribution judges it only
            # where every twin's cost gives the same class.
            known_flops = [f for f in flops if f is not None]  # none is None here: the branch above
            known_bytes = [b for b in nbytes if b is not None]
            least = replace(rep[0], flops=min(known_flops), flops_executed=min(known_flops),
                            bytes=min(known_bytes), model=f"{rep[0].model} (least of {len(cands)} differing twins)")
            # `or 0.0`: never taken, every twin's work is known in this branch (for the checker)
            each = tuple(replace(c[0], flops=f, flops_executed=f, bytes=b)
                         for c in cands for f, b in (((_work_flops(c[0]) or 0.0) * c[2], c[0].bytes * c[2]),
                                                      ((_work_flops(c[0]) or 0.0) * c[3], c[0].bytes * c[3])))
            out[key] = Twin(least, 1.0, launches, op_names, name_only, lower_bound=True, candidates=each)
    return out


def attribute(con: duckdb.DuckDBPyConnection, run_id: int, roofs: dict[int, DeviceRoof],
              excluded: Sequence[int] = (), *, model: Any = None,
              context_tokens: int | None = None) -> dict[str, Any]:
    """Classify every compute kernel and every op that launched GPU work of ``run_id``.

    Returns ``{"roofline_us", "kernels", "ops", "copies"}``: ``roofline_us`` splits the
    compute time into the four bound classes; ``kernels`` (per distinct kernel name) and
    ``ops`` (keyed by op name, input_dims text, input_types text, as stored) carry their class, cost and roof numbers;
    ``copies`` (per memcpy / memset name) their verdict against the link they cross.
    """
    from ..kernel_names import category_sql, copy_link
    from .comm import communication
    from .scope import counted_kernels
    from .costmodel import op_cost

    kept = counted_kernels(excluded)  # graph-capture traces beside their replay (design.md §4.2)
    category = category_sql()
    # The run's host<->device copy activities, by name (their direction is in the name).
    memory_names = [r[0] for r in con.execute(
        f"SELECT DISTINCT name FROM kernels WHERE run_id = ? AND {category} = 'memory'{kept}", [run_id]
    ).fetchall()]
    host_names = [n for n in memory_names if copy_link(n) == "host_link"] or [""]
    # The math the op's kernels ran (design.md §4.2, "the roof follows the math that ran"): an
    # fp32 GEMM whose kernel is a TF32 tensor-core kernel is judged against the tf32 roof.
    launched = [r[0] for r in con.execute(
        f"SELECT DISTINCT name FROM kernels WHERE run_id = ? AND op_id IS NOT NULL{kept}", [run_id]
    ).fetchall()]
    tf32_names = [n for n in launched if kernel_math(n) == "tf32"] or [""]
    simt_names = [n for n in launched if kernel_math(n) == "fp32"] or [""]
    math_sql = ("CASE WHEN bool_or(list_contains(${tf}, name)) THEN 'tf32' "
                "WHEN bool_or(list_contains(${simt}, name)) THEN 'fp32' END")
    # 1. Op calls that launched GPU activity, aggregated per (signature, device, host bytes): the
    # number of calls, their GPU time (kernels, memcpys and memsets), the bytes their host<->device
    # copies moved per call (0: none; NULL: a copy of unknown size) and those copies' time.
    call_rows = con.execute(
        f"""
        WITH calls AS (
            -- a call's activities run on one device; one that spans several is placed on the lowest
            -- (mode() broke the tie arbitrarily: the op moved between devices' roofs run to run)
            SELECT op_id, min(device_id) AS device_id, sum(dur_ns) AS gpu_ns,
                   sum(dur_ns) FILTER (WHERE list_contains($2, name)) AS host_ns,
                   count(*) FILTER (WHERE list_contains($2, name)) AS host_n,
                   count(*) FILTER (WHERE list_contains($2, name) AND bytes IS NULL) AS host_unknown,
                   sum(bytes) FILTER (WHERE list_contains($2, name)) AS host_bytes,
                   {math_sql.format(tf=3, simt=4)} AS math
            FROM kernels WHERE run_id = $1 AND op_id IS NOT NULL{kept} GROUP BY op_id, {_CALL}
        )
        SELECT o.name, o.input_dims, o.input_types, o.concrete_inputs, o.input_strides, c.math, c.device_id,
               CASE WHEN c.host_n = 0 THEN 0 WHEN c.host_unknown > 0 THEN NULL ELSE c.host_bytes END,
               count(*), sum(c.gpu_ns) / 1e3, coalesce(sum(c.host_ns), 0) / 1e3
        FROM calls c JOIN ops o ON o.run_id = $1 AND o.op_id = c.op_id
        GROUP BY ALL
        ORDER BY ALL  -- a fixed order, so that float sums come out the same every run
        """,
        [run_id, host_names, tf32_names, simt_names],
    ).fetchall()
    from .costmodel import STEP_OPS
    from .iterations import op_steps

    # What the trace holds beside an op's own arguments: the engine step an attention call ran
    # in (its query/KV sums), and the element size of TensorList arguments (from the kernels).
    steps = op_steps(con, run_id, STEP_OPS, kept)
    element_bytes = tensorlist_element_bytes(con, run_id, kept)
    cost_cache: dict[tuple[Any, ...], Any] = {}

    def cost_of(sig: tuple[Any, ...], math: str | None = None) -> Any:
        """The cost of a call signature (name, dims, types, concrete inputs, strides), its roof
        dtype following the ``math`` its kernels ran."""
        key = (*sig, math, model, context_tokens)  # a cost depends on the --model/--context given
        if key not in cost_cache:
            try:
                key5 = tuple(sig[:5])
                cost = op_cost(sig[0], sig[1], sig[2], sig[3], input_strides=sig[4], model=model,
                               context_tokens=context_tokens, iteration=steps.get(key5),
                               element_bytes=element_bytes.get(key5))
                if cost is not None:
                    dtype = roof_dtype_for_math(cost.dtype, cost.kind, math)
                    if dtype != cost.dtype:
                        cost = replace(cost, dtype=dtype)
                cost_cache[key] = cost
            except Exception:  # a cost model must never break the analysis
                cost_cache[key] = None
        return cost_cache[key]

    op_groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for name, dims, types, concrete, strides, math, dev, host_bytes, n_calls, gpu_us, host_us in call_rows:
        cost = cost_of((name, dims, types, concrete, strides), math)
        g = op_groups.setdefault((name, dims, types), {
            "name": name, "dims": dims, "types": types, "count": 0, "gpu_us": 0.0, "cost": cost,
            "devices": defaultdict(int), "parts": {}, "host_us": 0.0,
        })
        g["count"] += int(n_calls)
        g["gpu_us"] += float(gpu_us)
        g["host_us"] += float(host_us)
        g["devices"][int(dev)] += int(n_calls)
        part = g["parts"].setdefault(None if host_bytes is None else int(host_bytes), [0, 0.0])
        part[0] += int(n_calls)
        part[1] += float(gpu_us)

    # 2. The class and the time at the roof of a call depend only on its cost and its device's
    # roof, not on its duration: one classification per (cost, device).
    by_cost: dict[tuple[int, int], Verdict | None] = {}

    def call_verdict(cost: Any, dev: int) -> Verdict | None:
        if cost is None or (cost.flops is None and cost.bytes is None):
            return None
        key = (id(cost), dev)
        if key not in by_cost:
            roof = roofs.get(dev)
            by_cost[key] = classify_cost(_work_flops(cost), cost.bytes, cost.dtype, 0.0,
                                         roof.roof if roof else NO_ROOF)
        return by_cost[key]

    # 3. Compute kernels, aggregated per (kernel name, device, attribution, op signature; grid and
    # block for kernels without an op, which may borrow the cost of identical twins). A
    # kernel's share of its op call's cost is its duration over the call's GPU time; summed
    # per group, the shares say how many calls' worth of cost the group carries.
    krows = con.execute(
        f"""
        WITH k AS (
            SELECT name, op_id, device_id, dur_ns, attribution, {category} AS category,
                   CASE WHEN op_id IS NULL THEN CAST(grid AS VARCHAR) END AS grid_key,
                   CASE WHEN op_id IS NULL THEN CAST(block AS VARCHAR) END AS block_key,
                   CASE WHEN op_id IS NOT NULL THEN {_SHARE.format(category=category)} END AS share
            FROM kernels WHERE run_id = $1{kept}
        ), m AS (
            SELECT op_id, {math_sql.format(tf=2, simt=3)} AS math
            FROM kernels WHERE run_id = $1 AND op_id IS NOT NULL{kept} GROUP BY op_id
        )
        SELECT k.name, k.device_id, k.attribution, k.grid_key, k.block_key, o.name, o.input_dims, o.input_types,
               o.concrete_inputs, o.input_strides, m.math, count(*), sum(k.dur_ns) / 1e3, coalesce(sum(k.share), 0)
        FROM k LEFT JOIN ops o ON o.run_id = $1 AND o.op_id = k.op_id LEFT JOIN m ON m.op_id = k.op_id
        WHERE k.category = 'compute'
        GROUP BY ALL
        ORDER BY ALL
        """,
        [run_id, tf32_names, simt_names],
    ).fetchall()
    # Kernels no recorded op launched (they ran before the profiler's CPU window, or were
    # replayed from a graph without its capture trace) borrow the per-instance cost of identical
    # twins an op did launch, where all costed twins agree (docs/roofline.md, "Twins").
    orphan_keys = sorted({(r[0], r[3], r[4]) for r in krows if r[5] is None},
                         key=lambda k: (k[0] or "", k[1] or "", k[2] or ""))
    twins = twin_costs(con, run_id, orphan_keys, kept, category, math_sql, tf32_names, simt_names,
                       cost_of) if orphan_keys else {}
    groups = []
    # (kernel, device, attribution, µs, verdict, op name, dims, types, concrete, reason if op-less
    # and unjudged for its twins): for coverage
    cov_groups: list[tuple[Any, ...]] = []
    uncosted_mean: dict[str, list[float]] = {}
    for name, dev, attr, grid, block, oname, dims, types, concrete, strides, math, n, dur_us, shares in krows:
        cost = cost_of((oname, dims, types, concrete, strides), math) if oname is not None else None
        v = call_verdict(cost, int(dev)) if cost is not None else None
        twin = twins.get((name, grid, block)) if oname is None else None
        twin_reason = None
        if isinstance(twin, Twin) and twin.lower_bound:
            classes = {getattr(call_verdict(c, int(dev)), "bound", None) for c in twin.candidates}
            if len(classes) != 1 or None in classes or "unknown" in classes:
                twin_reason, twin = TWIN_AMBIGUOUS, None  # the twins would class it differently
        if isinstance(twin, Twin):
            v = call_verdict(twin.cost, int(dev))
            if v is not None and twin.lower_bound:
                # the class all twins agree on; the least work's roof time bounds the time at the roof
                v = replace(v, bound=str(next(iter(classes))))  # a str: None was ruled out above
            if v is not None:  # the twin's cost, judged on this kernel's own device
                cost, shares = twin.cost, twin.share * int(n)
            else:
                twin = None
        elif twin is not None:
            twin_reason, twin = str(twin), None
        groups.append((name, int(dev), attr, int(n), float(dur_us), float(shares), cost, v, twin))
        cov_groups.append((name, int(dev), attr, float(dur_us), v, oname, dims, types, concrete, twin_reason))
        if v is None:
            acc = uncosted_mean.setdefault(name, [0.0, 0])
            acc[0] += float(dur_us)
            acc[1] += int(n)
    name_verdict: dict[str, Verdict] = {}
    for name, (tot, n) in uncosted_mean.items():
        fam = kernel_family(name)
        name_verdict[name] = classify_by_name(tot / n, fam.family, fam.bound_hint, fam.reason)

    roofline_us = {b: 0.0 for b in BOUNDS}
    kern: dict[str, dict[str, Any]] = {}
    for name, dev, attr, n, dur_us, shares, cost, v, twin in groups:
        k = kern.get(name)
        if k is None:
            fam = kernel_family(name)
            k = kern[name] = {"bound_us": defaultdict(float), "confidence_us": defaultdict(float),
                              "flops": 0.0, "bytes": 0.0, "has_flops": False, "has_bytes": False,
                              # the time of the instances that have a FLOP (byte) estimate: the
                              # achieved rates divide by it, not by all of the kernel's time
                              "flops_us": 0.0, "bytes_us": 0.0,
                              "roof_us": 0.0, "roofed_us": 0.0, "family": fam.family,
                              "attribution": defaultdict(int), "reasons": defaultdict(float),
                              # the judged part, for re-judging work measured above its roof
                              "r_bytes": 0.0, "r_compute_us": 0.0, "working_set": 0.0,
                              "roofed_bound_us": defaultdict(float), "devices": defaultdict(float)}
        k["attribution"][attr or "none"] += n
        if v is not None:
            work = _work_flops(cost)
            if work is not None:
                k["flops"] += work * shares
                k["flops_us"] += dur_us
                k["has_flops"] = True
            if cost.bytes is not None:
                k["bytes"] += cost.bytes * shares
                k["bytes_us"] += dur_us
                k["has_bytes"] = True
            if v.roof_us is not None:
                k["roof_us"] += v.roof_us * shares
                k["roofed_us"] += dur_us
                k["roofed_bound_us"][v.bound] += dur_us
                k["devices"][dev] += dur_us
                k["r_bytes"] += (cost.bytes or 0.0) * shares
                k["working_set"] = max(k["working_set"], cost.bytes or 0.0)
                dev_roof = roofs.get(dev)
                peak = dev_roof.roof.peak(cost.dtype) if dev_roof else None
                if work and peak:
                    k["r_compute_us"] += work * shares / peak * 1e6
            conf = "graph_capture" if attr == "graph_capture" else v.confidence
            reason = v.reason
            if twin is not None:  # a cost borrowed from identical launches: an estimate
                conf, reason = "estimate", twin.reason(v.reason)
                # said apart: a name's confidence and reason are those of most of its time
                tw = k.setdefault("twin", {"us": 0.0, "count": 0, "reasons": defaultdict(float)})
                tw["us"] += dur_us
                tw["count"] += n
                tw["reasons"][reason] += dur_us
        else:
            v = name_verdict[name]
            conf, reason = v.confidence, v.reason
        k["bound_us"][v.bound] += dur_us
        k["confidence_us"][conf] += dur_us
        k["reasons"][reason] += dur_us
        roofline_us[v.bound] += dur_us

    # 4. Kernel and op tables.
    kernels_out: dict[str, dict[str, Any]] = {}
    for name, k in kern.items():
        roof_us = k["roof_us"] if k["roofed_us"] else None
        pct = (k["roof_us"] / k["roofed_us"]) if k["roofed_us"] else None
        saved = max(k["roofed_us"] - k["roof_us"], 0.0) if k["roofed_us"] else None
        settled = None
        if k["roofed_us"]:
            dev = max(k["devices"].items(), key=lambda kv: kv[1])[0]
            dev_roof = roofs.get(dev)
            settled = settle_over_roof(k["roofed_us"], k["roof_us"], None, k["r_bytes"], k["working_set"], None,
                                       dev_roof.roof if dev_roof else NO_ROOF, compute_us=k["r_compute_us"])
        if settled is not None:
            roof_us, pct, saved = settled["roof_us"], settled["pct_of_roof"], settled["saved_us"]
            _take_settled_class(k, settled, roofline_us)  # in the kernel and in the run's split
        bound = max(k["bound_us"].items(), key=lambda kv: kv[1])[0]
        conf = max(k["confidence_us"].items(), key=lambda kv: kv[1])[0]
        reason = max(k["reasons"].items(), key=lambda kv: kv[1])[0]
        kernels_out[name] = {
            "bound": bound,
            "confidence": conf,
            "reason": reason,
            "family": k["family"],
            "flops": k["flops"] if k["has_flops"] else None,
            "bytes": k["bytes"] if k["has_bytes"] else None,
            # over the instances whose op has a cost estimate (null: none has one)
            "achieved_flops_per_s": k["flops"] / (k["flops_us"] / 1e6) if k["has_flops"] and k["flops_us"] > 0 else None,
            "achieved_bytes_per_s": k["bytes"] / (k["bytes_us"] / 1e6) if k["has_bytes"] and k["bytes_us"] > 0 else None,
            "bound_us": {b: t for b, t in k["bound_us"].items()},
            "roof_us": roof_us,
            "pct_of_roof": pct,
            "saved_us": saved,
            "model_error": bool(settled and settled["model_error"]),
            "attribution": dict(k["attribution"]),
        }
        if settled is not None and settled["cache"]:
            kernels_out[name]["cache"] = settled["cache"]
        if "twin" in k:  # instances without an op, costed from their identical twins
            tw = k["twin"]
            kernels_out[name]["twin"] = {"us": tw["us"], "count": tw["count"],
                                         "reason": max(tw["reasons"].items(), key=lambda kv: kv[1])[0]}

    ops_out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for sig, g in op_groups.items():
        cost = g["cost"]
        dev = max(g["devices"].items(), key=lambda kv: kv[1])[0]
        roof = roofs.get(dev)
        entry: dict[str, Any] = {"flops": None, "bytes": None, "dtype": None, "model": None, "kind": None}
        if cost is not None:
            entry.update(flops=cost.flops, bytes=cost.bytes, dtype=cost.dtype, model=cost.model, kind=cost.kind,
                         flops_executed=getattr(cost, "flops_executed", None))
        v = _op_verdict(cost, g["parts"], roof.roof if roof else NO_ROOF)
        # bytes the op's host<->device copies moved (None: some copy's size is not in the trace)
        host_bytes = None if None in g["parts"] else float(sum(hb * p[0] for hb, p in g["parts"].items()))
        achieved_bytes = v.achieved_bytes_per_s
        if v.link == "host_link" and host_bytes and g["host_us"] > 0:
            # bound by the host link: the rate its copies reached over it, not device-memory traffic
            achieved_bytes = host_bytes / (g["host_us"] / 1e6)
        entry.update(bound=v.bound, confidence=v.confidence, reason=v.reason, link=v.link,
                     intensity_flop_per_byte=v.intensity_flop_per_byte, ridge_flop_per_byte=v.ridge_flop_per_byte,
                     achieved_flops_per_s=v.achieved_flops_per_s, achieved_bytes_per_s=achieved_bytes,
                     pct_of_roof=v.pct_of_roof, roof_us=v.roof_us, saved_us=v.saved_us,
                     host_copy_us=g["host_us"], host_copy_bytes=host_bytes, model_error=False)
        if v.pct_of_roof and v.roof_us is not None and cost is not None:
            # work measured faster than its roof: judged against a cache, else a model error
            roofed_time = v.roof_us / v.pct_of_roof
            work = _work_flops(cost)
            settled = settle_over_roof(roofed_time, v.roof_us, None if work is None else work * g["count"],
                                       None if cost.bytes is None else cost.bytes * g["count"], cost.bytes,
                                       cost.dtype, roof.roof if roof else NO_ROOF, link=v.link)
            if settled is not None:
                entry.update(roof_us=settled["roof_us"], pct_of_roof=settled["pct_of_roof"],
                             saved_us=settled["saved_us"], model_error=settled["model_error"],
                             reason=settled["reason"])
                if settled["bound"] is not None:
                    entry["bound"] = settled["bound"]
                if settled["cache"]:
                    entry["cache"] = settled["cache"]
        ops_out[sig] = entry
    tally = CoverageTally()
    _tally_compute(tally, cov_groups, kernels_out, ops_out, roofs)
    # collectives judged against their link (analyzers/comm.py); the rest stay unjudged
    comm = communication(con, run_id, {d: r.roof.peer for d, r in roofs.items()}, kept,
                         getattr(model, "tensor_parallel", None))
    tally.judged(comm["judged_us"])
    for (name, why), us in sorted(comm["unjudged"].items()):
        tally.unjudged_time(name, "communication", why, us)
    copies = _copy_verdicts(con, run_id, roofs, kept, category, tally)
    return {"roofline_us": roofline_us, "kernels": kernels_out, "ops": ops_out, "copies": copies,
            "model_errors": model_error_note(ops_out, kernels_out, copies), "coverage": tally,
            "communication": comm}


def _take_settled_class(entry: dict[str, Any], settled: dict[str, Any],
                        run_split_us: dict[str, float] | None = None) -> None:
    """An entry (kernel or copy) that ``settle_over_roof`` re-judged: its reason becomes the
    settled one and, when the settle gave a new class, the time it judged against a roof
    (``roofed_bound_us``) moves to that class in the entry's ``bound_us`` (and in the run's
    split)."""
    entry["reasons"] = {settled["reason"]: float("inf")}
    new = settled["bound"]
    if new is None:
        return
    bound_us = defaultdict(float, entry["bound_us"])
    for b, t in entry["roofed_bound_us"].items():
        bound_us[b] -= t
        bound_us[new] += t
        if run_split_us is not None:
            run_split_us[b] -= t
            run_split_us[new] += t
    entry["bound_us"] = defaultdict(float, {b: t for b, t in bound_us.items() if abs(t) > 1e-9})


def _tally_compute(tally: CoverageTally, cov_groups: list[tuple[Any, ...]], kernels: dict[str, dict[str, Any]],
                   ops: dict[tuple[Any, ...], dict[str, Any]], roofs: dict[int, DeviceRoof]) -> None:
    """Count each compute kernel group's time as judged (its call's cost model, or for a
    kernel without an op its agreeing twins' cost, gave a roof time, and neither its kernel nor
    its op is a ``model_error``) or unjudged with its reason (:mod:`gpuscope.analyzers.coverage`;
    ``twin_ambiguous`` for an op-less kernel whose twins disagree). Name-family and duration
    placements are unjudged."""
    for kname, dev, attr, us, v, oname, dims, types, concrete, twin_reason in cov_groups:
        dev_roof = roofs.get(dev)
        roof_source = dev_roof.roof.source if dev_roof else None
        label, kind = (oname, "op") if oname is not None else (kname, "kernel")
        if v is not None and v.roof_us is not None:
            op_entry = ops.get((oname, dims, types), {})
            if kernels.get(kname, {}).get("model_error") or op_entry.get("model_error"):
                tally.unjudged_time(label, kind, "model_error", us)
            else:
                tally.judged(us)
        elif roof_source is None:
            tally.unjudged_time(label, kind, "no_spec", us)
        elif v is not None:
            tally.unjudged_time(label, kind, reason_for_unroofed(roof_source, v.reason), us)
        elif oname is not None:
            tally.unjudged_time(label, kind, reason_for_op(oname, dims, concrete), us)
        else:
            tally.unjudged_time(label, kind, twin_reason or (
                "graph_replay_unmapped" if attr == "graph_replay" else "no_op"), us)


def model_error_note(ops: dict[tuple[Any, ...], dict[str, Any]], kernels: dict[str, dict[str, Any]],
                     copies: dict[str, dict[str, Any]]) -> str | None:
    """One line for the analysis ``notes`` naming the ops and kernels whose cost model
    overshoots every roof they could be judged against (``model_error``), and counting them."""
    op_names = sorted({sig[0] for sig, e in ops.items() if e.get("model_error")})
    n_ops = sum(1 for e in ops.values() if e.get("model_error"))
    k_names = sorted([n for n, e in kernels.items() if e.get("model_error")]
                     + [n for n, e in copies.items() if e.get("model_error")])
    if not n_ops and not k_names:
        return None
    def listed(names: list[str]) -> str:
        shown = ", ".join(names[:5])
        return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    parts = []
    if n_ops:
        parts.append(f"{n_ops} op signature(s) ({listed(op_names)})")
    if k_names:
        parts.append(f"{len(k_names)} kernel(s) ({listed(k_names)})")
    return ("model_error: the cost model puts " + " and ".join(parts) + " above every roof they could be "
            "judged against (HBM and cache): their percent of roof is withheld, not shown above 100 %")


def _op_verdict(cost: Any, parts: dict[int | None, list[Any]], roof: Roof) -> Verdict:
    """The verdict of one op signature from its calls grouped by the bytes each copied between
    host and device (``parts``: host bytes per call -> [calls, GPU µs]; 0: no such copies, None:
    copies of unknown size). Calls of one signature can differ: ``aten::copy_`` of the same
    shapes copies host-to-device in one call and device-to-device in the next.

    One group gives its own verdict. Several are summed: the time at the roof of those that have
    one, over their time; the bound and the reason of the bound class that takes the most time."""
    verdicts = []
    for host_bytes, (n, t) in sorted(parts.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        if cost is None and not host_bytes and host_bytes is not None:
            v = Verdict("unknown", "none", "no cost model for this op")
        elif cost is None:  # its only cost is what it copied (or copies of unknown size)
            v = classify_cost(None, None, None, t, roof, calls=n, host_bytes=host_bytes)
        else:
            v = classify_cost(_work_flops(cost), cost.bytes, cost.dtype, t, roof, calls=n, host_bytes=host_bytes)
        verdicts.append((n, t, v))
    if len(verdicts) == 1:
        return verdicts[0][2]
    by_bound: dict[str, float] = defaultdict(float)
    for _, t, v in verdicts:
        by_bound[v.bound] += t
    bound = max(by_bound.items(), key=lambda kv: kv[1])[0]
    n_dom, t_dom, dom = max(((n, t, v) for n, t, v in verdicts if v.bound == bound), key=lambda x: x[1])
    calls = sum(n for n, _, _ in verdicts)
    time_us = sum(t for _, t, _ in verdicts)
    roofed = [(t, v.roof_us) for _, t, v in verdicts if v.roof_us is not None]
    roof_us = sum(r for _, r in roofed) if roofed else None
    roofed_us = sum(t for t, _ in roofed)
    t_s = time_us / 1e6 if time_us > 0 else None
    flops = _work_flops(cost) if cost is not None else None
    nbytes = cost.bytes if cost is not None else None
    return Verdict(
        bound, dom.confidence, f"{dom.reason} ({n_dom} of {calls} calls, {100 * t_dom / time_us:.0f}% of the time)"
        if time_us > 0 else dom.reason,
        roof_us=roof_us, intensity_flop_per_byte=dom.intensity_flop_per_byte,
        ridge_flop_per_byte=dom.ridge_flop_per_byte,
        achieved_flops_per_s=(flops * calls / t_s) if t_s and flops is not None else None,
        achieved_bytes_per_s=(nbytes * calls / t_s) if t_s and nbytes is not None else None,
        pct_of_roof=(roof_us / roofed_us) if roof_us is not None and roofed_us > 0 else None,
        saved_us=max(roofed_us - roof_us, 0.0) if roof_us is not None else None,
        link=dom.link,
    )


def _copy_verdicts(con: duckdb.DuckDBPyConnection, run_id: int, roofs: dict[int, DeviceRoof], kept: str,
                   category: str, tally: CoverageTally | None = None) -> dict[str, dict[str, Any]]:
    """Memcpy and memset activities, per name, judged against the link they cross
    (:func:`gpuscope.analyzers.roofline.classify_copy`): host<->device copies against the host
    link, device-to-device copies and memsets against device memory."""
    import re

    from ..kernel_names import MEMSET_KERNEL_RE, copy_direction, copy_link

    rows = con.execute(
        f"""
        SELECT name, kind, device_id, bytes, count(*), sum(dur_ns) / 1e3
        FROM kernels WHERE run_id = $1 AND {category} = 'memory'{kept}
        GROUP BY ALL ORDER BY ALL
        """,
        [run_id],
    ).fetchall()
    fill = re.compile(MEMSET_KERNEL_RE, re.I)
    out: dict[str, dict[str, Any]] = {}
    direction: str | None
    link: str | None
    for name, kind, dev, nbytes, n, t in rows:
        if kind == "memset" or (kind == "kernel" and fill.search(name or "")):
            direction, link = "fill", "device_memory"
        else:
            direction, link = copy_direction(name), copy_link(name)
        roof = roofs.get(int(dev))
        v = classify_copy(link, direction, None if nbytes is None else float(nbytes), float(t),
                          roof.roof if roof else NO_ROOF, calls=int(n))
        e = out.setdefault(name, {"direction": direction, "link": link, "bound_us": defaultdict(float),
                                  "confidence_us": defaultdict(float), "reasons": defaultdict(float),
                                  "bytes": 0.0, "bytes_us": 0.0, "roof_us": 0.0, "roofed_us": 0.0,
                                  "traffic": 0.0, "working_set": 0.0, "device": int(dev),
                                  "roofed_bound_us": defaultdict(float), "unjudged": defaultdict(float)})
        if v.roof_us is None:
            e["unjudged"]["no_spec" if roof is None or roof.roof.source is None else "copy_not_judged"] += float(t)
        e["bound_us"][v.bound] += float(t)
        e["confidence_us"][v.confidence] += float(t)
        e["reasons"][v.reason] += float(t)
        if nbytes is not None:
            e["bytes"] += float(nbytes) * int(n)
            e["bytes_us"] += float(t)
        if v.roof_us is not None:
            e["roof_us"] += v.roof_us
            e["roofed_us"] += float(t)
            e["roofed_bound_us"][v.bound] += float(t)
            # bytes through device memory: a device-to-device copy reads and writes each byte
            per_call = float(nbytes or 0) * (1 if direction == "fill" or link == "host_link" else 2)
            e["traffic"] += per_call * int(n)
            e["working_set"] = max(e["working_set"], per_call)
    result = {}
    for name, e in out.items():
        roofed = e["roofed_us"]
        roof_us = e["roof_us"] if roofed else None
        pct = e["roof_us"] / roofed if roofed else None
        saved = max(roofed - e["roof_us"], 0.0) if roofed else None
        dev_roof = roofs.get(e["device"])
        settled = settle_over_roof(roofed, roof_us, None, e["traffic"], e["working_set"], None,
                                   dev_roof.roof if dev_roof else NO_ROOF, link=e["link"]) if roofed else None
        if settled is not None:
            roof_us, pct, saved = settled["roof_us"], settled["pct_of_roof"], settled["saved_us"]
            _take_settled_class(e, settled)
        if tally is not None:
            for reason, t in e["unjudged"].items():
                tally.unjudged_time(name, "copy", reason, t)
            if roofed:
                if settled is not None and settled["model_error"]:
                    tally.unjudged_time(name, "copy", "model_error", roofed)
                else:
                    tally.judged(roofed)
        result[name] = {
            "bound": max(e["bound_us"].items(), key=lambda kv: kv[1])[0],
            "confidence": max(e["confidence_us"].items(), key=lambda kv: kv[1])[0],
            "reason": max(e["reasons"].items(), key=lambda kv: kv[1])[0],
            "family": "memory",
            "direction": e["direction"],
            "link": e["link"],
            "bytes": e["bytes"] if e["bytes_us"] else None,
            "bound_us": dict(e["bound_us"]),
            "achieved_bytes_per_s": e["bytes"] / (e["bytes_us"] / 1e6) if e["bytes_us"] else None,
            "roof_us": roof_us,
            "pct_of_roof": pct,
            "saved_us": saved,
            "model_error": bool(settled and settled["model_error"]),
        }
        if settled is not None and settled["cache"]:
            result[name]["cache"] = settled["cache"]
    return result

