"""Exposed communication (issue 31, point 3): per device, the collective time that no compute
kernel on another stream of the same device hides, and which collectives it comes from.

Anchor: Holistic Trace Analysis's ``get_comm_comp_overlap`` (hta/analyzers/communication_analysis.py):
per rank, the union of communication kernel intervals ``C`` and of computation kernel intervals
``P``; overlap = ``|C ∩ P| / |C|``. Here the same figure, ``overlap_pct = 100 x overlapped_us /
communication_us``, with two precisions:

- a compute kernel hides a collective only when it runs on *another stream* of the same device
  (two kernels of one stream never run together; a trace whose timestamps say they did is not
  believed). With no such same-stream overlap in the trace this is HTA's number exactly;
- memcpy / memset are not compute (HTA's ``MEMORY``), and the categories are gpuscope's
  (:func:`gpuscope.kernel_names.category_sql`), which also count vLLM's custom all-reduce and
  symmetric memory's ``multimem_*`` as communication (HTA calls them computation).

Then per collective instance ``exposed = dur − |[start, end) ∩ P_other(stream)|``, grouped by
kernel, collective and message size: the top ones say what to overlap, and ``exposed_us`` is an
upper bound on what perfect overlap would save (a collective fully hidden behind compute costs
no wall time; it can save no more than its exposed time).

Pure: functions over a store connection and plain data; no printing.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

#: Rows of the ``top`` list in the JSON block.
TOP = 10

Interval = tuple[int, int]


@dataclass(frozen=True)
class CommKernel:
    """One communication kernel launch, with what :func:`gpuscope.analyzers.comm.describe` knows."""

    device_id: int
    stream: int | None
    start_ns: int
    end_ns: int
    name: str
    collective: str | None
    message_bytes: float | None
    group_size: int | None
    op: str | None


@dataclass(frozen=True)
class DeviceKernels:
    """A device's kernels as the overlap needs them: its compute intervals with their stream,
    and its communication kernels."""

    device_id: int
    key: str
    compute: list[tuple[int | None, int, int]]
    comm: list[CommKernel]


# --------------------------------------------------------------------------------------------
# interval arithmetic (half-open [start, end) in ns)
# --------------------------------------------------------------------------------------------


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The sorted, disjoint union of ``intervals`` (empty ones dropped; touching ones merged)."""
    out: list[Interval] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def measure(merged: Sequence[Interval]) -> int:
    """Total length of disjoint intervals."""
    return sum(e - s for s, e in merged)


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """The intersection of two sorted disjoint interval lists (a sweep of both)."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def covered(start: int, end: int, merged: Sequence[Interval], starts: Sequence[int] | None = None) -> int:
    """How much of ``[start, end)`` the sorted disjoint ``merged`` covers (``starts``: their
    start times, precomputed for many calls)."""
    if end <= start or not merged:
        return 0
    starts = starts if starts is not None else [s for s, _ in merged]
    k = max(bisect_right(starts, start) - 1, 0)
    total = 0
    while k < len(merged) and merged[k][0] < end:
        s, e = max(merged[k][0], start), min(merged[k][1], end)
        if e > s:
            total += e - s
        k += 1
    return total


# --------------------------------------------------------------------------------------------
# one device
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceOverlap:
    """The overlap figures of one device (µs) and each collective instance's exposed time."""

    device_id: int
    key: str
    communication_us: float
    overlapped_us: float
    exposed_us: float
    #: (kernel, exposed ns) per communication kernel launch, in start order.
    per_kernel: list[tuple[CommKernel, int]]

    @property
    def overlap_pct(self) -> float | None:
        """HTA's figure: percent of the communication time (union) that compute hides."""
        return 100.0 * self.overlapped_us / self.communication_us if self.communication_us > 0 else None


def device_overlap(dev: DeviceKernels) -> DeviceOverlap:
    """Overlap of ``dev``'s communication with its compute on other streams.

    The communication time is the union of its collectives' intervals (HTA's denominator); a
    moment of it is overlapped when a compute kernel of a stream other than the collective's runs
    then. Per communication stream ``s``: ``C_s ∩ P_(not s)``; the overlapped set is their union."""
    comm_all = union((k.start_ns, k.end_ns) for k in dev.comm)
    by_stream: dict[int | None, list[CommKernel]] = defaultdict(list)
    for k in dev.comm:
        by_stream[k.stream].append(k)
    hidden: list[Interval] = []
    per_kernel: list[tuple[CommKernel, int]] = []
    for stream, ks in by_stream.items():
        other = union((s, e) for st, s, e in dev.compute if st != stream)
        starts = [s for s, _ in other]
        hidden.extend(intersect(union((k.start_ns, k.end_ns) for k in ks), other))
        for k in ks:
            per_kernel.append((k, (k.end_ns - k.start_ns) - covered(k.start_ns, k.end_ns, other, starts)))
    comm_ns = measure(comm_all)
    hidden_ns = measure(union(hidden))
    per_kernel.sort(key=lambda kv: (kv[0].start_ns, kv[0].end_ns))
    return DeviceOverlap(dev.device_id, dev.key, comm_ns / 1e3, hidden_ns / 1e3, (comm_ns - hidden_ns) / 1e3,
                         per_kernel)


def exposed_block(devices: Sequence[DeviceOverlap], top: int = TOP) -> dict[str, Any]:
    """The ``communication.exposed`` block of ``analyze --json`` (docs/analysis.md)."""
    comm_us = sum(d.communication_us for d in devices)
    over_us = sum(d.overlapped_us for d in devices)
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for d in devices:
        for k, exposed_ns in d.per_kernel:
            key = (k.name, k.collective, k.message_bytes, k.op)
            g = groups.setdefault(key, {"kernel": k.name, "collective": k.collective, "op": k.op,
                                        "bytes": k.message_bytes, "group_size": k.group_size, "count": 0,
                                        "kernel_us": 0.0, "exposed_us": 0.0, "devices": set()})
            g["count"] += 1
            g["kernel_us"] += (k.end_ns - k.start_ns) / 1e3
            g["exposed_us"] += exposed_ns / 1e3
            g["devices"].add(d.key)
    rows = sorted(groups.values(), key=lambda g: (-g["exposed_us"], -g["kernel_us"], str(g["kernel"])))
    top_rows = []
    for g in rows[:top]:
        if g["exposed_us"] <= 0:
            break
        top_rows.append({**{k: v for k, v in g.items() if k != "devices"}, "devices": len(g["devices"]),
                         "exposed_pct": 100.0 * g["exposed_us"] / g["kernel_us"] if g["kernel_us"] > 0 else None})
    return {
        "communication_us": comm_us,
        "overlapped_us": over_us,
        "exposed_us": comm_us - over_us,
        "overlap_pct": 100.0 * over_us / comm_us if comm_us > 0 else None,
        # perfect overlap hides at most the exposed time: an upper bound, not a forecast
        "saving_upper_bound_us": comm_us - over_us,
        "per_device": [{"key": d.key, "device_id": d.device_id, "communication_us": d.communication_us,
                        "overlapped_us": d.overlapped_us, "exposed_us": d.exposed_us, "overlap_pct": d.overlap_pct}
                       for d in devices],
        "top": top_rows,
        "definition": ("HTA's comm/comp overlap per device: communication_us = union of collective kernel intervals; "
                       "overlapped_us = the part of it during which a compute kernel (not memcpy/memset) runs on "
                       "another stream of the same device; overlap_pct = 100 x overlapped_us / communication_us; "
                       "exposed_us = communication_us - overlapped_us, an upper bound on what perfect overlap saves"),
    }


# --------------------------------------------------------------------------------------------
# the store
# --------------------------------------------------------------------------------------------


def load_device_kernels(con: duckdb.DuckDBPyConnection, run_id: int, kept: str = "",
                        tensor_parallel: int | None = None) -> list[DeviceKernels]:
    """The compute and communication kernels of each device of ``run_id`` that has collectives
    (``kept``: :func:`~gpuscope.analyzers.scope.counted_kernels`' condition). Each collective is
    described once per distinct op chain (:func:`~gpuscope.analyzers.comm.describe`)."""
    from ..kernel_names import category_sql
    from .comm import describe

    category = category_sql()
    comm_rows = con.execute(
        f"""
        SELECT k.device_id, k.stream, k.ts_ns, k.ts_ns + k.dur_ns, k.name, k.op_id,
               o.name, o.input_dims, o.input_types, o.concrete_inputs,
               p.name, p.input_dims, p.input_types, p.concrete_inputs,
               g.name, g.input_dims, g.input_types, g.concrete_inputs
        FROM (SELECT * FROM kernels WHERE run_id = $1{kept} AND {category} = 'communication') k
        LEFT JOIN ops o ON o.run_id = $1 AND o.op_id = k.op_id
        LEFT JOIN ops p ON p.run_id = $1 AND p.op_id = o.parent_op_id
        LEFT JOIN ops g ON g.run_id = $1 AND g.op_id = p.parent_op_id
        ORDER BY k.device_id, k.ts_ns, k.dur_ns
        """,
        [run_id],
    ).fetchall()
    if not comm_rows:
        return []
    cache: dict[tuple[Any, ...], tuple[str | None, float | None, int | None, str | None]] = {}
    comm: dict[int, list[CommKernel]] = defaultdict(list)
    for r in comm_rows:
        name = r[4] or ""
        chain_key = (name, *r[6:18])
        if chain_key not in cache:
            c = describe(name, [tuple(r[6:10]), tuple(r[10:14]), tuple(r[14:18])], tensor_parallel)
            # the c10d / vLLM op, else record_param_comms, else the launching op
            op = next((x for x in (r[6], r[10], r[14]) if x and x != "record_param_comms"), r[6])
            cache[chain_key] = (c.collective, c.message_bytes, c.group_size, op)
        coll, size, n, op = cache[chain_key]
        comm[int(r[0])].append(CommKernel(int(r[0]), r[1], int(r[2]), int(r[3]), name, coll, size, n, op))
    devs = sorted(comm)
    compute = con.execute(
        f"""
        SELECT device_id, stream, ts_ns, ts_ns + dur_ns FROM kernels
        WHERE run_id = $1{kept} AND device_id IN ({', '.join(str(d) for d in devs)})
          AND {category} = 'compute' AND dur_ns > 0
        """,
        [run_id],
    ).fetchall()
    comp: dict[int, list[tuple[int | None, int, int]]] = defaultdict(list)
    for dev, stream, s, e in compute:
        comp[int(dev)].append((stream, int(s), int(e)))
    keys = dict(con.execute("SELECT device_id, key FROM devices WHERE run_id = ?", [run_id]).fetchall())
    return [DeviceKernels(d, str(keys.get(d, f"device{d}")), comp.get(d, []), comm[d]) for d in devs]


def exposed_communication(con: duckdb.DuckDBPyConnection, run_id: int, kept: str = "",
                          tensor_parallel: int | None = None, top: int = TOP
                          ) -> tuple[dict[str, Any] | None, list[DeviceKernels]]:
    """``(communication.exposed block, the devices' kernels)`` of ``run_id``; the block is None
    when the run has no communication kernel. The kernels are returned for
    :mod:`~gpuscope.analyzers.stragglers`, which matches the same collectives across ranks."""
    devs = load_device_kernels(con, run_id, kept, tensor_parallel)
    if not devs:
        return None, devs
    return exposed_block([device_overlap(d) for d in devs], top), devs

