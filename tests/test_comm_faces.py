"""Issue 31, point 5: the collectives in the HTML report (bus bandwidth against message size,
log-log, the link roof drawn; exposed communication) and in ``gpuscope compare`` (per collective
kind, each run's time and percent of link roof side by side)."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, cpu_op, kernel, run_cli, runtime, shared_trace, write_trace
from test_report import _Tags

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]
MI300X = [{"id": 0, "name": "AMD Instinct MI300X"}]
MB = 1 << 20
RPC_TYPES = ["float", "", "", "Scalar", "", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar"]
HOSTILE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL<img src=x onerror=alert(1)>"


def _all_reduce(ev: list[dict[str, Any]], ext: int, ts: float, elems: int, kernel_name: str, kernel_us: float) -> None:
    """c10d::allreduce_ -> record_param_comms (``elems`` fp32, group of 8 in its last argument) ->
    one collective kernel on stream 20 starting at ``ts`` + 100 µs."""
    ev.append(cpu_op("c10d::allreduce_", ts, 50, ext=ext, dims=[[]], types=["TensorList"]))
    ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100, "tid": 100, "ts": ts + 5, "dur": 40,
               "args": {"External id": ext + 1, "Input Dims": [[elems]] + [[]] * 9, "Input type": RPC_TYPES,
                        "Concrete Inputs": ["", "", "", "0", "", "[]", "[]", "0", "1", "8"]}})
    ev.append(runtime("cudaLaunchKernel", ts + 10, 5, corr=ext, ext=ext + 1))
    ev.append(kernel(kernel_name, ts + 100, kernel_us, corr=ext, stream=20))


def _run(tmp_path: Path, name: str, props: list[dict[str, Any]], ar_us: float, gemm_overlap_us: float,
         kernel_name: str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)") -> Path:
    """A 16 MiB fp32 all-reduce over 8 ranks taking ``ar_us``, a GEMM on stream 7 covering its
    first ``gemm_overlap_us``, and a 1 MiB all-reduce of 20 µs with nothing beside it."""
    ev: list[dict[str, Any]] = []
    _all_reduce(ev, 10, 1000, 4 * MB, kernel_name, ar_us)
    ev.append(cpu_op("aten::mm", 1000, 5, ext=90, dims=[[64, 64], [64, 64]], types=["float", "float"]))
    ev.append(runtime("cudaLaunchKernel", 1001, 1, corr=90, ext=90))
    ev.append(kernel("gemm_kernel", 1100, gemm_overlap_us, corr=90, stream=7))
    _all_reduce(ev, 20, 5000, MB // 4, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 20.0)
    return write_trace(tmp_path / f"{name}.json", ev, deviceProperties=props)




def _tags(page: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Tags()
    p.feed(page)
    return p.tags


def _scale(tags: list[tuple[str, dict[str, str | None]]], axis: str) -> tuple[float, float, int]:
    """(pixel of decade e0, pixels per decade, e0) read from the chart's own decade grid lines."""
    ticks = sorted((int(a["data-decade"] or 0), float(a["x1" if axis == "x" else "y1"] or 0))
                   for t, a in tags if t == "line" and f"{axis}tick" in (a.get("class") or "").split())
    assert len(ticks) >= 2
    (e0, p0), (e1, p1) = ticks[0], ticks[-1]
    return p0, (p1 - p0) / (e1 - e0), e0


def test_report_charts_every_judged_collective_of_the_shared_b200_trace(tmp_path: Path, no_user_specs: None) -> None:
    path = shared_trace("tracelens/b200_eager.json.gz")
    db = tmp_path / "s.duckdb"
    model = REPO / "fixtures" / "models" / "gpt-oss-120b.config.json"
    assert run_cli("ingest", "--db", str(db), "-q", "--model", str(model), str(path)).code == 0
    out = tmp_path / "r.html"
    r = run_cli("report", "--db", str(db), "--out", str(out), "--json")
    assert r.code == 0, r.err
    page = out.read_text()
    tags = _tags(page)
    analysis = json.loads(run_cli("analyze", "--db", str(db), "--json").out)
    judged = [e for e in analysis["communication"]["entries"] if e["roof_us"] is not None]
    circles = [a for t, a in tags if t == "circle" and a.get("class") == "cpt"]
    assert len(circles) == len(judged) == json.loads(r.out)["communication_points"] == 3
    x_at, x_per, xe = _scale(tags, "x")
    y_at, y_per, ye = _scale(tags, "y")
    for c in circles:
        e = judged[int(c["data-entry"] or 0)]
        # bus bandwidth by nccl-tests' definition, from the entry's size, calls and time
        factor = 2 * 7 / 8 if e["collective"] == "all_reduce" else 7 / 8
        busbw = factor * e["bytes"] * e["count"] / (e["kernel_us"] / 1e6)
        assert float(c["cx"] or 0) == pytest.approx(x_at + (math.log10(e["bytes"]) - xe) * x_per, abs=0.02)
        assert float(c["cy"] or 0) == pytest.approx(y_at + (math.log10(busbw) - ye) * y_per, abs=0.02)
        # every judged point sits at or under its own roof (NVLS: 2(n-1)/n over (n+1)/n of the link)
        roof_busbw = 900e9 * (2 * 7 / 8) / (9 / 8) if e["algorithm"] == "nvls" else 900e9
        assert busbw <= roof_busbw
    roofs = [a for t, a in tags if t == "line" and a.get("class") == "roof"]
    assert len(roofs) == 1 and float(roofs[0]["y1"] or 0) == pytest.approx(y_at + (math.log10(900e9) - ye) * y_per, abs=0.02)
    assert "NVLink5 x18 900 GB/s" in page
    assert "message size (bytes)" in page and "bus bandwidth (bytes/s)" in page
    assert "<h2>Communication</h2>" in page and "Exposed communication" in page


def test_report_escapes_a_hostile_collective_name_and_shows_exposed_time(tmp_path: Path, no_user_specs: None) -> None:
    db = tmp_path / "s.duckdb"
    trace = _run(tmp_path, "evil", H100, 100.0, 40.0, kernel_name=HOSTILE)
    assert run_cli("ingest", "--db", str(db), "-q", str(trace)).code == 0
    out = tmp_path / "r.html"
    assert run_cli("report", "--db", str(db), "--out", str(out)).code == 0
    page = out.read_text()
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert not [t for t, _ in _tags(page) if t in ("img", "script")]
    circles = [a for t, a in _tags(page) if t == "circle" and a.get("class") == "cpt"]
    assert len(circles) == 2  # the 16 MiB and the 1 MiB all-reduce
    # 120 µs of all-reduce, 40 µs of it beside the GEMM on another stream
    assert "80.0 µs of 120.0 µs of collective time" in page
    assert "NVLink4 x18 450 GB/s" in page


def test_compare_puts_each_collective_kind_against_its_link(tmp_path: Path, no_user_specs: None) -> None:
    db = tmp_path / "s.duckdb"
    for name, props, us, gemm in (("h100", H100, 100.0, 40.0), ("mi300x", MI300X, 150.0, 0.0)):
        assert run_cli("ingest", "--db", str(db), "-q", "--name", name, str(_run(tmp_path, name, props, us, gemm))).code == 0
    r = run_cli("compare", "--db", str(db), "h100", "mi300x", "--json")
    assert r.code == 0, r.err
    c = json.loads(r.out)["communication"]
    # ring all-reduce over 8: bus bandwidth 2 x 7/8 x bytes / time; 16 MiB in 100 / 150 µs, 1 MiB in 20 µs
    busbw = {"a": 1.75 * (16 * MB + MB) / 120e-6, "b": 1.75 * (16 * MB + MB) / 170e-6}
    roof_us = {"a": 1.75 * (16 * MB + MB) / 450e9 * 1e6, "b": 1.75 * (16 * MB + MB) / (7 * 64e9) * 1e6}
    row = c["by_collective"][0]
    assert row["collective"] == "all_reduce" and len(c["by_collective"]) == 1
    for side, total in (("a", 120.0), ("b", 170.0)):
        x = row[side]
        assert x["count"] == 2 and x["kernel_us"] == pytest.approx(total)
        assert x["busbw_bytes_per_s"] == pytest.approx(busbw[side])
        assert x["roof_us"] == pytest.approx(roof_us[side])
        assert x["pct_of_roof"] == pytest.approx(roof_us[side] / total)
        assert x["above_roof_us"] == pytest.approx(total - roof_us[side])
        assert c[side]["collective_us"] == pytest.approx(total) and c[side]["judged_share"] == pytest.approx(1.0)
    assert row["a"]["link"] == "NVLink4 x18" and row["a"]["link_bytes_per_s"] == 450e9
    assert row["b"]["link_bytes_per_s"] == 7 * 64e9  # Infinity Fabric: 7 peers x 64 GB/s
    assert row["ratio"] == pytest.approx(170 / 120)
    # exposed: the GEMM hides 40 µs of A's all-reduce, nothing hides B's
    assert c["totals"]["exposed_us"]["a"] == pytest.approx(80.0)
    assert c["totals"]["exposed_us"]["b"] == pytest.approx(170.0)
    text = run_cli("compare", "--db", str(db), "h100", "mi300x", "--wide").out
    line = next(ln for ln in text.splitlines() if ln.startswith("all_reduce"))
    assert f"{100 * roof_us['a'] / 120:.1f}%" in line and f"{100 * roof_us['b'] / 170:.1f}%" in line
    assert re.search(r"exposed\s+80\.0 µs\s+170\.0 µs", text)
    out = tmp_path / "c.html"
    assert run_cli("report", "h100", "--db", str(db), "--compare", "mi300x", "--out", str(out)).code == 0
    page = out.read_text()
    assert "class='comm-compare'" in page and f"{100 * roof_us['a'] / 120:.0f}%" in page


def test_compare_without_collectives_has_no_communication_block(tmp_path: Path, no_user_specs: None) -> None:
    db = tmp_path / "s.duckdb"
    ev = [cpu_op("aten::mm", 0, 5, ext=1, dims=[[64, 64], [64, 64]], types=["float", "float"]),
          runtime("cudaLaunchKernel", 1, 1, corr=1, ext=1), kernel("gemm_kernel", 10, 50, corr=1)]
    for name in ("x", "y"):
        assert run_cli("ingest", "--db", str(db), "-q", "--name", name,
                       str(write_trace(tmp_path / f"{name}.json", ev, deviceProperties=H100))).code == 0
    r = run_cli("compare", "--db", str(db), "x", "y", "--json")
    assert r.code == 0 and "communication" not in json.loads(r.out)
    assert "Communication" not in run_cli("compare", "--db", str(db), "x", "y").out


def test_report_names_the_planted_straggler(tmp_path: Path, no_user_specs: None) -> None:
    from test_stragglers import _one_rank_trace, _scale

    out = tmp_path / "ranks"
    _scale(_one_rank_trace(tmp_path / "one.json"), out, "--ranks", "4", "--copies", "2", "--straggler", "2:150")
    db = tmp_path / "s.duckdb"
    assert run_cli("ingest", "--db", str(db), "-q", str(out)).code == 0
    page_path = tmp_path / "r.html"
    assert run_cli("report", "--db", str(db), "--out", str(page_path)).code == 0
    page = page_path.read_text()
    # rank 2 starts each of the 8 all-reduces 150 µs after the others; each of the 3 others waits 8 x 150 µs
    assert "Straggler: <b>rank 2</b> (rank2/gpu2), 150.0 µs after" in page
    assert "the others waited 3.600 ms for it" in page
    table = page[page.index("<table class='stragglers'>"):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 5 and table.count("1.200 ms") == 3
