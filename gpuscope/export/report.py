"""``gpuscope report RUN [--compare RUN_B] --out FILE.html``: gathers what the page shows
through the read layer and the analyzers, renders it (:mod:`gpuscope.render.report_html`) and
writes the file whole (a fresh temporary renamed into place, :mod:`gpuscope.fileio`), owner-only,
or to standard output for ``--out -``."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from . import is_stdout, output_file, prepare_output


def build_report(db: Path, run: str | None, out: Path, compare: str | None = None, force: bool = False) -> dict[str, Any]:
    """Write the report; returns what it holds (run ids, sizes, the ops on the roofline)."""
    from .. import store
    from ..analyzers.breakdown import analyze_run
    from ..analyzers.comm_compare import communication_timing, compare_communication
    from ..analyzers.compare import compare_docs
    from ..analyzers.energy import run_telemetry
    from ..render.report_html import comm_points, render_report, roofline_points
    from ..render.links import LINK_METRICS, link_series
    from ..store import read

    out = Path(out)
    prepare_output(db, out, force, directory=False, what="the report")
    con = store.connect(db, read_only=True)
    try:
        ref = read.resolve_run(con, run, db)
        other = read.resolve_run(con, compare, db) if compare is not None else None
        doc = analyze_run(con, ref.id)
        communication_timing(con, ref.id, doc)  # exposed communication and stragglers, as `analyze` adds them
        tele = run_telemetry(con, ref.id)
        keys = {d.device_id: d.key for d in read.devices(con, ref.id)}
        series = [{"key": keys.get(s.device_id, f"device {s.device_id}"), "ts_ns": s.ts_ns,
                   "power_w": s.values["power_w"], "gpu_util": s.values["gpu_util"]}
                  for s in read.samples(con, ref.id, ["power_w", "gpu_util"]) if keys.get(s.device_id) != "host"]
        # NVLink / XGMI utilization on the same time axis (issue 31), where the samples hold link rates
        links = link_series(doc.get("devices") or [], read.samples(con, ref.id, LINK_METRICS))
        windows = [(a.ts_ns, a.ts_ns + (a.dur_ns or 0)) for a in read.annotation_rows(con, ref.id, ["profiler_window"])]
        command = next((r.get("command") for r in read.list_runs(con) if r.get("id") == ref.id), None)
        # A is RUN, B the --compare run: the order of `gpuscope compare RUN RUN_B` (ratios B / A)
        cmp = None
        if other is not None:
            other_doc = analyze_run(con, other.id)
            communication_timing(con, other.id, other_doc)
            cmp = compare_docs(doc, other_doc)
            comm = compare_communication(doc, other_doc)
            if comm is not None:  # only where a run has collectives
                cmp["communication"] = comm
    finally:
        con.close()
    page = render_report({"analysis": doc, "telemetry": tele, "series": series, "links": links, "windows": windows,
                          "command": command, "compare": cmp,
                          "generated": time.strftime("%Y-%m-%d %H:%M %Z")})
    with output_file(out) as f:
        f.write(page.encode("utf-8"))
    return {"run": {"id": ref.id, "name": ref.name}, "compare": {"id": other.id, "name": other.name} if other else None,
            "out": "-" if is_stdout(out) else str(out), "bytes": len(page.encode()), "roofline_points": len(roofline_points(doc)),
            "communication_points": len(comm_points(doc))}
