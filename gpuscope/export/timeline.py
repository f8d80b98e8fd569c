"""``gpuscope export RUN --format perfetto|chrome``: one run as a Chrome trace-event file that
Perfetto UI and ``chrome://tracing`` open, in the shape Kineto writes, with what gpuscope adds.

- GPU activities on their device/stream tracks (``cat`` ``kernel``, ``gpu_memcpy``,
  ``gpu_memset``) with Kineto's args (device, stream, correlation, External id, grid, block,
  ..., a collective's Collective name / msg nelems / Group size / Process Group / Seq) and
  gpuscope's (category, and from the analysis the bound class, intensity, achieved
  FLOP/s and bytes/s, percent of roof of the kernel's name);
- CPU ops on their threads (``cpu_op``, Input Dims / Input type / Input Strides / Concrete
  Inputs as Kineto has them, plus the op's bound class and percent of roof), the launches
  (``cuda_runtime``) and launch -> kernel flows (``ac2g``), the launches captured into CUDA/HIP
  graphs inside their ``*StreamBeginCapture`` .. ``*StreamEndCapture`` window, so that
  ``gpuscope ingest`` (and Holistic Trace Analysis) read it back;
- in ``otherData.gpuscope_export`` what ingest needs besides to rebuild the same run
  (:func:`gpuscope.store.timeline.export_metadata`: the traces, whose each pid is, the
  telemetry devices, ...; docs/export.md, "The round trip");
- telemetry as counter tracks (``"ph": "C"``) per device and stored metric, on the same time base, and the
  NVLink / XGMI byte rates as link utilization tracks (``gpu0 link_tx_util_pct``, ``..._rx_...``:
  percent of the spec's scale-up bandwidth in that direction, :func:`gpuscope.specs.link_bytes_per_s`);
- profiler windows as slices and ``gpuscope.mark`` marks as instant events on a ``gpuscope``
  process.

Written streaming: DuckDB builds each event's JSON (the read layer's queries,
:mod:`gpuscope.store.timeline`) and the rows are written in batches, so memory does not grow
with the run. Times are µs relative to ``baseTimeNanoseconds`` (the run's
first event), as recent Kineto writes them.
"""
from __future__ import annotations

import gzip
import sys
from pathlib import Path
from typing import Any

from . import is_stdout, output_file, prepare_output, written_bytes

#: The largest trace the Perfetto web UI opens comfortably in a browser tab.
BROWSER_LIMIT_BYTES = 512 * 1024 * 1024
_BATCH = 20_000


def export_timeline(db: Path, run: str | None, out: Path, fmt: str, force: bool = False,
                    from_s: float | None = None, to_s: float | None = None, window: int | None = None) -> dict[str, Any]:
    """Write the run's timeline to ``out`` (``perfetto``: gzip-compressed JSON unless ``out``
    ends in ``.json``; ``chrome``: plain JSON). ``from_s``/``to_s`` (seconds after the run's
    first event) or ``window`` (the Nth profiler window, from 1) keep what starts in that span.
    ``out`` ``-`` is standard output."""
    from ..errors import ParameterError

    if window is not None and (from_s is not None or to_s is not None):
        raise ParameterError("window", "cannot be combined with {from_s} or {to_s}")
    if from_s is not None and from_s < 0:
        raise ParameterError("from_s", "must be at least 0, not {value}", {"value": f"{from_s:g}"})
    if from_s is not None and to_s is not None and to_s <= from_s:
        raise ParameterError("to_s", "must be after {from_s}")
    from .. import store
    from ..analyzers.breakdown import analyze_run
    from ..store import read
    from ..render import json as strict_json
    from ..store.timeline import EXPORT_KEY, base_ns, device_properties, distributed_info, event_queries, export_metadata

    out = Path(out)
    prepare_output(db, out, force, directory=False, what="a timeline")
    gz = fmt == "perfetto" and not out.name.endswith(".json")
    if gz and is_stdout(out) and sys.stdout.isatty():
        raise ParameterError("out", "{value}: standard output is a terminal, and perfetto writes gzip: redirect it "
                                    "(> FILE.json.gz, | gunzip) or use the chrome format", {"value": "-"})
    con = store.connect(db, read_only=True)
    counts: dict[str, int] = {}
    try:
        ref = read.resolve_run(con, run, db)
        doc = analyze_run(con, ref.id, top=None)
        cur = con.cursor()
        cur.execute("SET threads = 1")  # one scan in the store's order: the same file every time
        _register_analysis(cur, doc)
        export_doc, pid_map = export_metadata(cur, ref.id)
        _register_pid_map(cur, pid_map)
        base = base_ns(cur, ref.id)
        lo, hi = _span(cur, ref.id, base, from_s, to_s, window)
        with output_file(out) as raw:
            f: Any = gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=3, mtime=0) if gz else raw
            size = 0
            try:
                dist = distributed_info(cur, ref.id)
                other = {"exported_by": "gpuscope export", "run_id": ref.id, EXPORT_KEY: export_doc}
                head = ('{"schemaVersion": 1, "displayTimeUnit": "ns", "baseTimeNanoseconds": %d, '
                        '"otherData": %s, %s'
                        '"deviceProperties": %s, "traceEvents": [\n'
                        % (base, strict_json.dumps(other), f'"distributedInfo": {dist}, ' if dist else "",
                           device_properties(cur, ref.id)))
                f.write(head.encode("utf-8", "replace"))  # (a lone surrogate in a stored header)
                size += len(head)
                first = True
                for kind, sql, params in event_queries(ref.id, base, lo, hi, export_doc["sample_columns"]):
                    res = cur.execute(sql, params)
                    n = 0
                    while True:
                        rows = res.fetchmany(_BATCH)
                        if not rows:
                            break
                        text = ",\n".join(r[0] for r in rows)
                        chunk = (("" if first else ",\n") + text).encode()
                        first = False
                        f.write(chunk)
                        size += len(chunk)
                        n += len(rows)
                    counts[kind] = n
                f.write(b"\n]}\n")
                size += 4
            finally:
                if gz:
                    f.close()
        cur.close()
    finally:
        con.close()
    file_bytes = written_bytes(out, raw)
    note = None
    if size > BROWSER_LIMIT_BYTES:
        note = (f"{size / 2**20:,.0f} MiB of JSON is more than the Perfetto web UI opens comfortably in a browser "
                "tab; open it with Perfetto's trace_processor (trace_processor --httpd FILE, then ui.perfetto.dev) "
                "or export less of the run")
    return {"run": {"id": ref.id, "name": ref.name}, "format": fmt, "out": "-" if is_stdout(out) else str(out), "gzip": gz,
            "span_ns": [lo, hi] if lo is not None or hi is not None else None,
            "json_bytes": size, "file_bytes": file_bytes, "events": counts, "note": note}


def _span(cur: Any, run_id: int, base: int, from_s: float | None, to_s: float | None,
          window: int | None) -> tuple[int | None, int | None]:
    if window is None:
        return (None if from_s is None else base + int(from_s * 1e9),
                None if to_s is None else base + int(to_s * 1e9))
    from ..errors import ParameterError
    from ..store import read

    windows = [a for a in read.annotation_rows(cur, run_id, ["profiler_window"])]
    if not 1 <= window <= len(windows):
        raise ParameterError("window", "the run has {count} profiler window(s); there is no window {value}",
                             {"count": str(len(windows)), "value": str(window)})
    w = windows[window - 1]
    return int(w.ts_ns), int(w.ts_ns) + int(w.dur_ns or 0)


def _register_analysis(cur: Any, doc: dict[str, Any]) -> None:
    import duckdb  # noqa: F401  (the full package: its Arrow scans need duckdb._sources)
    import pyarrow as pa

    ks = doc.get("kernels") or []
    cur.register("_ka", pa.table({
        "name": pa.array([k.get("name") for k in ks], pa.string()),
        "bound": pa.array([k.get("bound") for k in ks], pa.string()),
        "pct_of_roof": pa.array([_f(k.get("pct_of_roof")) for k in ks], pa.float64()),
    }))
    ops = doc.get("ops") or []
    cur.register("_oa", pa.table({
        "name": pa.array([o.get("name") for o in ops], pa.string()),
        "input_dims": pa.array([_text(o.get("input_dims")) for o in ops], pa.string()),
        "input_types": pa.array([_text(o.get("input_types")) for o in ops], pa.string()),
        "bound": pa.array([o.get("bound") for o in ops], pa.string()),
        "intensity": pa.array([_f(o.get("intensity_flop_per_byte")) for o in ops], pa.float64()),
        "flops_per_s": pa.array([_f(o.get("achieved_flops_per_s")) for o in ops], pa.float64()),
        "bytes_per_s": pa.array([_f(o.get("achieved_bytes_per_s")) for o in ops], pa.float64()),
        "pct_of_roof": pa.array([_f(o.get("pct_of_roof")) for o in ops], pa.float64()),
    }))
    from ..specs import link_bytes_per_s

    ids, bws = [], []
    for d in doc.get("devices") or []:
        bw = link_bytes_per_s(d.get("spec"))
        if bw is not None and d.get("device_id") is not None:
            ids.append(int(d["device_id"]))
            bws.append(bw)
    cur.register("_lk", pa.table({"device_id": pa.array(ids, pa.int32()),
                                  "link_bytes_per_s": pa.array(bws, pa.float64())}))


def _register_pid_map(cur: Any, rows: list[tuple[int, str, str]]) -> None:
    """``_pm`` (trace id, stored pid, exported pid) for the event queries."""
    import duckdb  # noqa: F401  (the full package: its Arrow scans need duckdb._sources)
    import pyarrow as pa

    cur.register("_pm", pa.table({"trace_id": pa.array([r[0] for r in rows], pa.int32()),
                                  "pid": pa.array([r[1] for r in rows], pa.string()),
                                  "xpid": pa.array([r[2] for r in rows], pa.string())}))



def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _text(v: Any) -> str | None:
    import json

    return v if v is None or isinstance(v, str) else json.dumps(v, separators=(",", ":"))
