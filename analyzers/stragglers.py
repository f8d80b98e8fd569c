"""Stragglers (issue 31, point 4): in a run of several ranks, the time the early ranks wait in
each collective for the last one to arrive, and which rank they wait for.

A collective cannot finish on any rank before every rank of its group has started it, so the
rank that starts it last sets its end: the others sit in the kernel meanwhile. For each
collective *instance* matched across ranks:

- ``skew_us[r] = latest start − start[r]``: how long rank ``r`` waited for the last arrival;
- per rank: ``wait_us`` (its skews summed), its worst instances, how often it was the latest
  (``latest_count``), ``caused_wait_us`` (the other ranks' skews of the instances where it was
  the latest, shared equally among ranks tied for latest) and ``mean_delay_us`` (its start minus
  the median start of the other ranks, averaged over its instances);
- the **straggler**: the rank with the most ``caused_wait_us`` (the one everyone waits for).

**Matching.** Where a collective's args (its kernel's ``comm_args``, else its
``record_param_comms`` op's) record both its process group (``Process Group Name``) and its
sequence number in that group (``Seq``), an instance is the launches with the same (process
group, seq) on every rank: c10d numbers each group's collectives alike on all its ranks, so this
is exact even when groups run the same kernel with the same size interleaved. Otherwise an
instance is keyed by what every rank's trace shows alike: the kernel name, the collective and
its message size (:func:`gpuscope.analyzers.comm.describe`), and its order among that key's
launches on the rank (the k-th such launch on each rank is one instance). Ranks with more
launches of a key than the others leave the extra ones unmatched (counted).

**Clocks.** Ranks of one host share its clock. When the traces name different hosts
(``hostname`` in the trace header or its ``distributedInfo``), each rank's clock is aligned to
the first rank's by the collectives themselves: a collective ends together on all ranks (each
waits for the data of all), so the median of ``end[first] − end[r]`` over their shared instances
is rank ``r``'s clock offset. That offset is reported for every rank, applied only across hosts.

Pure: functions over plain data and the store queries that load it; no printing.
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .overlap import CommKernel, DeviceKernels, exposed_communication

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

#: Worst instances kept per rank and in the run's ``worst`` list.
WORST = 3
TOP = 10


@dataclass(frozen=True)
class RankUnit:
    """One rank of the run: a device with collectives, its rank and host when the trace says."""

    device_id: int
    key: str
    rank: int | None
    host: str | None


def _host(meta: Any) -> str | None:
    if not isinstance(meta, dict):
        return None
    raw = meta.get("distributedInfo")
    info: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for v in (meta.get("hostname"), meta.get("host_name"), info.get("hostname"), info.get("host_name")):
        if isinstance(v, str) and v:
            return v
    return None


def rank_units(con: duckdb.DuckDBPyConnection, run_id: int) -> tuple[dict[int, RankUnit], str]:
    """Each trace device of ``run_id`` as a rank, and where the ranks came from.

    The rank is ``traces.rank`` (ingest reads ``distributedInfo.rank``), else the header's
    ``distributedInfo.rank`` kept in ``traces.metadata``; where neither says, or several devices
    of one trace share it, the device index stands for it (``rank`` None, the key tells)."""
    rows = con.execute(
        "SELECT d.device_id, d.key, d.device_index, t.rank, t.metadata FROM devices d "
        "LEFT JOIN traces t ON t.run_id = d.run_id AND t.trace_id = d.trace_id "
        "WHERE d.run_id = ? AND d.source <> 'telemetry' ORDER BY d.device_id",
        [run_id],
    ).fetchall()
    out: dict[int, RankUnit] = {}
    sources: set[str] = set()
    for dev, key, _index, rank, meta_text in rows:
        try:
            meta = json.loads(meta_text) if meta_text else None
        except (TypeError, ValueError):
            meta = None
        src = "distributedInfo.rank"
        if rank is None and isinstance(meta, dict) and isinstance(meta.get("distributedInfo"), dict):
            r = meta["distributedInfo"].get("rank")
            rank = r if isinstance(r, int) and not isinstance(r, bool) and r >= 0 else None
        if rank is None:
            src = "device (no rank in the trace)"
        out[int(dev)] = RankUnit(int(dev), str(key), None if rank is None else int(rank), _host(meta))
        sources.add(src)
    counts: dict[int | None, int] = defaultdict(int)
    for u in out.values():
        counts[u.rank] += 1
    for dev, u in list(out.items()):
        if u.rank is not None and counts[u.rank] > 1:  # one process driving several GPUs: the device is the unit
            out[dev] = RankUnit(u.device_id, u.key, None, u.host)
            sources.add("device (several devices share a rank)")
    return out, "; ".join(sorted(sources))


#: A launch's identity in :func:`comm_tags`: (device id, start ns, kernel name).
TagKey = tuple[int, int, str]


def _match_key(k: CommKernel, tags: dict[TagKey, tuple[str, int]] | None = None) -> tuple[Any, ...]:
    tag = tags.get((k.device_id, k.start_ns, k.name)) if tags else None
    if tag is not None:
        return ("process group", tag[0], tag[1])
    return (k.name, k.collective, k.message_bytes)


def comm_tags(con: duckdb.DuckDBPyConnection, run_id: int, kept: str = "") -> dict[TagKey, tuple[str, int]]:
    """(process group name, sequence number) of each communication kernel of ``run_id`` whose
    args (the kernel's ``comm_args``, else its op's or the op's parent's) record both, keyed by
    (device id, start ns, kernel name)."""
    from ..kernel_names import category_sql

    rows = con.execute(
        f"""
        SELECT k.device_id, k.ts_ns, k.name, coalesce(k.comm_args, o.comm_args, p.comm_args)
        FROM (SELECT * FROM kernels WHERE run_id = $1{kept} AND {category_sql()} = 'communication') k
        LEFT JOIN ops o ON o.run_id = $1 AND o.op_id = k.op_id
        LEFT JOIN ops p ON p.run_id = $1 AND p.op_id = o.parent_op_id
        WHERE coalesce(k.comm_args, o.comm_args, p.comm_args) IS NOT NULL
        """,
        [run_id],
    ).fetchall()
    out: dict[TagKey, tuple[str, int]] = {}
    for dev, ts, name, text in rows:
        try:
            args = json.loads(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(args, dict):
            continue
        pg, seq = args.get("pg_name"), args.get("seq")
        if pg is not None and isinstance(seq, int) and not isinstance(seq, bool):
            out[(int(dev), int(ts), name or "")] = (str(pg), seq)
    return out


def stragglers(devices: Sequence[DeviceKernels], units: dict[int, RankUnit], rank_source: str = "",
               top: int = TOP, tags: dict[TagKey, tuple[str, int]] | None = None) -> dict[str, Any] | None:
    """The ``communication.stragglers`` block (docs/analysis.md), None with fewer than two ranks
    holding collectives. ``tags`` (:func:`comm_tags`): launches whose (process group, seq) is
    known are matched by it; the others by kernel, collective, size and order."""
    devs = [d for d in devices if d.comm]
    if len(devs) < 2:
        return None
    unit = {d.device_id: units.get(d.device_id, RankUnit(d.device_id, d.key, None, None)) for d in devs}
    order = sorted(devs, key=lambda d: (unit[d.device_id].rank if unit[d.device_id].rank is not None else 1 << 40,
                                        d.device_id))
    seqs: dict[int, dict[tuple[Any, ...], list[CommKernel]]] = {}
    for d in order:
        by: dict[tuple[Any, ...], list[CommKernel]] = defaultdict(list)
        for k in sorted(d.comm, key=lambda k: (k.start_ns, k.end_ns)):
            by[_match_key(k, tags)].append(k)
        seqs[d.device_id] = by
    # instances: (key, index) -> {device: kernel}
    instances: list[tuple[tuple[Any, ...], int, dict[int, CommKernel]]] = []
    unmatched = 0
    keys = sorted({key for by in seqs.values() for key in by}, key=str)
    for key in keys:
        having = [d.device_id for d in order if key in seqs[d.device_id]]
        if len(having) < 2:
            unmatched += sum(len(seqs[dv][key]) for dv in having)
            continue
        n = min(len(seqs[dv][key]) for dv in having)
        unmatched += sum(len(seqs[dv][key]) - n for dv in having)
        for i in range(n):
            instances.append((key, i, {dv: seqs[dv][key][i] for dv in having}))
    if not instances:
        return None

    # clock offsets: the median end difference against the first rank, over shared instances
    ref = order[0].device_id
    diffs: dict[int, list[int]] = defaultdict(list)
    for _, _, ks in instances:
        if ref in ks:
            for dv, k in ks.items():
                diffs[dv].append(ks[ref].end_ns - k.end_ns)
    offset_ns = {d.device_id: int(statistics.median(diffs[d.device_id])) if diffs[d.device_id] else 0 for d in order}
    hosts = sorted({h for d in order if (h := unit[d.device_id].host)})
    align = len(hosts) > 1
    if align:
        clock = {"aligned": True, "hosts": hosts,
                 "method": "ranks span hosts: each rank's clock shifted by clock_offset_us, the median over shared "
                           "collectives of (end on the first rank - end on this rank): a collective ends together on "
                           "all ranks"}
    else:
        clock = {"aligned": False, "hosts": hosts,
                 "method": ("one host: its clock is shared, no alignment" if hosts else
                            "no hostname in the traces: taken as one host (one clock), no alignment; "
                            "clock_offset_us shows what aligning by collective ends would shift")}

    def start(dv: int, k: CommKernel) -> int:
        return k.start_ns + (offset_ns[dv] if align else 0)

    wait: dict[int, float] = defaultdict(float)
    caused: dict[int, float] = defaultdict(float)
    latest_count: dict[int, float] = defaultdict(float)
    delays: dict[int, list[float]] = defaultdict(list)
    count: dict[int, int] = defaultdict(int)
    worst_of: dict[int, list[dict[str, Any]]] = defaultdict(list)
    worst: list[dict[str, Any]] = []

    def label(dv: int) -> str:
        u = unit[dv]
        return f"rank {u.rank}" if u.rank is not None else u.key

    for key, i, ks in instances:
        starts = {dv: start(dv, k) for dv, k in ks.items()}
        last = max(starts.values())
        tied = [dv for dv, s in starts.items() if s == last]
        skews = {dv: (last - s) / 1e3 for dv, s in starts.items()}
        total = sum(skews.values())
        first = next(iter(ks.values()))
        desc: dict[str, Any] = {"kernel": first.name, "collective": first.collective, "bytes": first.message_bytes,
                                "index": i}
        if key[0] == "process group":
            desc.update(process_group=key[1], seq=key[2])
        for dv, s in starts.items():
            count[dv] += 1
            wait[dv] += skews[dv]
            others = [x for o, x in starts.items() if o != dv]
            delays[dv].append((s - statistics.median(others)) / 1e3)
            if skews[dv] > 0:
                worst_of[dv].append({**desc, "wait_us": skews[dv], "waited_for": ", ".join(label(t) for t in tied)})
        for dv in tied:
            latest_count[dv] += 1 / len(tied)
            caused[dv] += total / len(tied)
        if total > 0:
            worst.append({**desc, "skew_us": (last - min(starts.values())) / 1e3, "wait_us": total,
                          "latest": ", ".join(label(t) for t in tied)})
    by_pg = sum(1 for key, _, _ in instances if key[0] == "process group")
    ranks: list[dict[str, Any]] = []
    for d in order:
        dv = d.device_id
        u = unit[dv]
        w = sorted(worst_of[dv], key=lambda x: (-x["wait_us"], str(x["kernel"]), x["index"]))[:WORST]
        ranks.append({"key": u.key, "device_id": dv, "rank": u.rank, "host": u.host, "instances": count[dv],
                      "wait_us": wait[dv], "latest_count": latest_count[dv],
                      "latest_pct": 100.0 * latest_count[dv] / count[dv] if count[dv] else None,
                      "caused_wait_us": caused[dv],
                      "mean_delay_us": statistics.fmean(delays[dv]) if delays[dv] else None,
                      "clock_offset_us": offset_ns[dv] / 1e3, "worst": w})
    best = max(ranks, key=lambda r: (float(r["caused_wait_us"]), float(r["latest_count"])))
    straggler = None
    if float(best["caused_wait_us"]) > 0:
        straggler = {k: best[k] for k in ("key", "device_id", "rank", "host", "latest_count", "latest_pct",
                                          "caused_wait_us", "mean_delay_us")}
    return {
        "ranks": ranks,
        "rank_source": rank_source,
        "instances": len(instances),
        "unmatched": unmatched,
        "match": ("kernel name, collective and message size, then order on each rank (no process group and "
                  "sequence number in the collectives' args)" if not by_pg else
                  f"process group and sequence number (the collectives' args) for {by_pg} of {len(instances)} "
                  "instances; the others by kernel name, collective and message size, then order on each rank"),
        "matched_by_process_group": by_pg,
        "total_wait_us": sum(wait.values()),
        "straggler": straggler,
        "worst": sorted(worst, key=lambda x: (-x["wait_us"], str(x["kernel"]), x["index"]))[:top],
        "clock": clock,
    }


def add_communication_timing(con: duckdb.DuckDBPyConnection, run_id: int, doc: dict[str, Any],
                             tensor_parallel: int | None = None) -> None:
    """Add ``exposed`` and ``stragglers`` to the ``communication`` block of an analysis document
    (``analyze``; nothing when the document has no such block: the run has no collectives):
    :func:`~gpuscope.analyzers.overlap.exposed_communication`, then :func:`stragglers` over the
    same kernels.
    ``stragglers`` is None unless two or more ranks ran collectives."""
    block = doc.get("communication")
    if not isinstance(block, dict):
        return
    from .scope import counted_kernels

    kept = counted_kernels([e["trace_id"] for e in doc.get("excluded_traces") or ()])
    exposed, devs = exposed_communication(con, run_id, kept, tensor_parallel)
    block["exposed"] = exposed
    units, source = rank_units(con, run_id)
    block["stragglers"] = stragglers(devs, units, source, tags=comm_tags(con, run_id, kept))
