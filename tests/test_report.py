"""`gpuscope report`: one self-contained HTML page (no script, nothing fetched), a roofline point
per op it places, the telemetry with windows shaded, the comparison, no secret; loaded in a real
headless Chromium (skips where Chromium is missing: CI installs it)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import cpu_op, kernel, run_cli, runtime, write_trace

BASE_NS = 1_767_225_600_000_000_000
PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9,
          "computeMinor": 0, "numSms": 132}]
SECRET = "sk-live-0123456789abcdefSECRET"


def _trace(tmp_path: Path, name: str, gemm_us: float) -> Path:
    bf16 = "c10::BFloat16"
    ev = [cpu_op("aten::mm", 0, 20, ext=1, dims=[[8192, 8192], [8192, 8192]], types=[bf16, bf16]),
          runtime("cudaLaunchKernel", 5, 5, corr=1, ext=1), kernel("sm90_xmma_gemm_bf16", 100, gemm_us, corr=1),
          cpu_op("aten::add", 30, 10, ext=2, dims=[[8192, 8192], [8192, 8192]], types=[bf16, bf16]),
          runtime("cudaLaunchKernel", 32, 5, corr=2, ext=2),
          kernel("vectorized_elementwise_kernel", 100 + gemm_us + 50, 400, corr=2)]
    return write_trace(tmp_path / f"{name}.json", ev, deviceProperties=PROPS, baseTimeNanoseconds=BASE_NS)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    from gpuscope import store

    db = tmp_path / "s.duckdb"
    for name, us in (("base", 2000.0), ("faster", 1500.0)):
        assert run_cli("ingest", "--db", str(db), "--name", name, "-q", str(_trace(tmp_path, name, us))).code == 0
    con = store.connect(db)
    with store.transaction(con):
        rid = con.execute("SELECT max(id) FROM runs").fetchone()[0]
        # what `gpuscope run` would have stored: a command with a key in it (redacted on the way
        # in), telemetry of one GPU and a profiler window
        con.execute("UPDATE runs SET command = ? WHERE id = ?",
                    [__import__("gpuscope.redact", fromlist=["x"]).redact_command(f"python serve.py --api-key {SECRET}"), rid])
        con.execute("INSERT INTO devices (run_id, device_id, key, source, vendor, kind, name) "
                    "VALUES (?, 9, 'gpu0', 'telemetry', 'nvidia', 'gpu', 'NVIDIA H100 80GB HBM3')", [rid])
        for i in range(30):
            con.execute("INSERT INTO samples (run_id, device_id, ts_ns, power_w, gpu_util) VALUES (?, 9, ?, ?, ?)",
                        [rid, BASE_NS + i * 100_000, 200.0 + 10 * i, (i % 10) / 10])
        con.execute("INSERT INTO annotations (run_id, kind, name, ts_ns, dur_ns) VALUES (?, 'profiler_window', 'w', ?, ?)",
                    [rid, BASE_NS + 500_000, 1_000_000])
    con.close()
    return db


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _report(db: Path, out: Path, *extra: str) -> dict:
    r = run_cli("report", "--db", str(db), "--out", str(out), "--json", *extra)
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_the_page_is_self_contained_and_shows_the_analysis(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    doc = _report(db, out)
    assert out.stat().st_mode & 0o777 == 0o600
    page = out.read_text()
    p = _Tags()
    p.feed(page)
    tags = [t for t, _ in p.tags]
    assert "script" not in tags and "link" not in tags and "img" not in tags and "iframe" not in tags
    assert not [a for _, a in p.tags if any(k in a for k in ("src", "href"))]  # nothing to fetch
    analysis = json.loads(run_cli("analyze", "--db", str(db), "--json").out)
    from gpuscope.render.report_html import roofline_points

    placed = roofline_points(analysis)
    circles = [a for t, a in p.tags if t == "circle" and a.get("class") == "pt"]
    assert len(circles) == len(placed) == doc["roofline_points"] > 0
    assert "aten::mm" in page and "Where the GPU time went" in page and "prefers-color-scheme: dark" in page
    assert page.count("class='telemetry'") == 2  # power and utilization of gpu0
    assert "profiler window" in page
    assert SECRET not in page and "--api-key" in page  # the stored, redacted command
    for section in ("Top ops", "Top kernels", "Telemetry", "Advice"):
        assert f"<h2>{section}</h2>" in page


def test_compare_shows_both_runs_op_by_op(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.html"
    doc = _report(db, out, "faster", "--compare", "base")
    page = out.read_text()
    assert doc["compare"]["name"] == "base"
    # the order of `gpuscope compare faster base`: A is RUN, B the --compare run, ratio B / A
    assert "Compared with another run" in page and "1.33x" in page  # the GEMM: 2000 / 1500 µs
    head = page[page.index("Compared with another run"):]
    assert head.index("A: run 2 'faster'") < head.index("B: run 1 'base'")
    text = run_cli("compare", "--db", str(db), "faster", "base").out
    assert text.index("A: run 2 'faster'") < text.index("B: run 1 'base'")


def test_an_existing_file_is_kept_without_force(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    out.write_text("mine")
    r = run_cli("report", "--db", str(db), "--out", str(out))
    assert r.code == 2 and "already exists" in r.err and out.read_text() == "mine"
    assert run_cli("report", "--db", str(db), "--out", str(out), "--force").code == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    r = run_cli("report", "nope", "--db", str(db), "--out", str(tmp_path / "x.html"))
    assert r.code == 2 and "nope" in r.err and not (tmp_path / "x.html").exists()


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.slow
def test_a_real_headless_chromium_renders_it_without_console_errors(db: Path, tmp_path: Path) -> None:
    chrome = _chromium()
    if chrome is None:
        pytest.skip("Chromium not installed (apt-get install chromium; .ci/run installs it in CI)")
    out = tmp_path / "r.html"
    _report(db, out)
    shot = tmp_path / "r.png"
    base = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    p = subprocess.run([*base, f"--screenshot={shot}", "--window-size=1200,2400", out.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000, p.stderr[-2000:]
    console = [ln for ln in p.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    dom = subprocess.run([*base, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert len(re.findall(r'<circle class="pt"', dom)) == len(re.findall(r"<circle class='pt'", out.read_text()))


CUTLASS = ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_{tile}_16x4_tn_align4>"
           "(cutlass_80_tensorop_s1688gemm_{tile}_16x4_tn_align4::Params)")


def test_kernels_show_analyzes_short_names_with_the_full_name_folded(tmp_path: Path) -> None:
    from gpuscope.render.names import distinct_names

    names = [CUTLASS.format(tile="256x64"), CUTLASS.format(tile="128x128")]
    ev = [kernel(names[0], 100, 900, corr=1), kernel(names[1], 1100, 500, corr=2)]
    db = tmp_path / "k.duckdb"
    assert run_cli("ingest", "--db", str(db), "-q", str(write_trace(tmp_path / "k.json", ev, deviceProperties=PROPS))).code == 0
    out = tmp_path / "k.html"
    _report(db, out)
    page = out.read_text()
    from gpuscope.render.report_html import KERNEL_NAME_CHARS, esc

    shorts = distinct_names(names, KERNEL_NAME_CHARS)
    assert shorts[0] != shorts[1] and all(len(x) < 60 and "Params" not in x for x in shorts)
    for full, short in zip(names, shorts):
        assert f"<td title='{esc(full)}'><details><summary><code>{esc(short)}</code></summary><code>{esc(full)}</code>" in page
    # the names `analyze` prints at its 120 columns: the same core names, cut to its narrower column
    rows = [ln for ln in run_cli("analyze", "--db", str(db)).out.splitlines() if ln.startswith("cutlass_80_")]
    assert len(rows) == 2 and all(r.split()[0].endswith(s[-22:]) for r, s in zip(rows, shorts)), rows


def test_equal_roofs_share_one_label() -> None:
    from gpuscope.render.report_html import _roofline

    peak = 19.5e12  # an A100: fp64 (tensor cores) and fp32 both 19.5 TFLOP/s
    doc = {"ops": [{"name": "aten::mm", "dtype": "fp32", "intensity_flop_per_byte": 50.0, "achieved_flops_per_s": 5e12,
                    "kernel_us": 10.0, "bound": "compute_bound"},
                   {"name": "aten::addmm", "dtype": "fp64", "intensity_flop_per_byte": 8.0, "achieved_flops_per_s": 2e12,
                    "kernel_us": 5.0, "bound": "memory_bound"}],
           "roofline": {"devices": [{"key": "gpu0", "spec": "a100-sxm4-80gb", "mem_bw_bytes_per_s": 2.039e12,
                                     "peak_flops_per_s": {"fp32": peak, "fp64": peak, "bf16": 312e12}}]}}
    svg = _roofline(doc)
    labels = re.findall(r"<text x='\d+' y='[\d.]+' text-anchor='end'>([^<]*FLOP/s)</text>", svg)
    assert labels == ["fp32 = fp64 19.5 TFLOP/s"]  # bf16 is not among the points' dtypes
    assert svg.count("<polyline") == 1


def test_a_cpu_only_run_says_cpu_time_and_no_gpu_activity(tmp_path: Path) -> None:
    ev = [cpu_op("aten::mm", 0, 300, ext=1, dims=[[64, 64], [64, 64]], types=["float", "float"]),
          cpu_op("aten::add", 400, 100, ext=2, dims=[[64, 64], [64, 64]], types=["float", "float"])]
    db = tmp_path / "c.duckdb"
    assert run_cli("ingest", "--db", str(db), "-q", str(write_trace(tmp_path / "c.json", ev))).code == 0
    out = tmp_path / "c.html"
    _report(db, out)
    page = out.read_text()
    assert "<th class='n'>CPU time</th>" in page and "<th class='n'>GPU time</th>" not in page
    assert "Top kernels" not in page
    assert "GPU busy" not in page and "no GPU activity" in page
    assert "300.0 µs" in page  # aten::mm's CPU time, in the column that says so


def test_telemetry_lines_have_value_and_time_axes(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    _report(db, out)
    page = out.read_text()
    # the fixture's samples: power 200 + 10 i W and utilization (i mod 10) / 10, i = 0..29, 100 µs apart
    assert re.findall(r"<text class='ymin'[^>]*>([^<]*)</text>", page) == ["200.0 W", "0%"]
    assert re.findall(r"<text class='ymax'[^>]*>([^<]*)</text>", page) == ["490.0 W", "90%"]
    assert re.findall(r"<text class='tick'[^>]*>([^<]*)</text>", page) == ["0.0000 s", f"{2.9e-3 / 2:.4f} s", "0.0029 s"] * 2
    assert page.count("<line class='axis'") == 4


def test_compare_sets_the_bound_table_apart_and_names_bound_classes(db: Path) -> None:
    lines = run_cli("compare", "--db", str(db), "base", "faster").out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("compute by bound"))
    assert lines[at - 1] == "" and lines[at - 2].startswith("matched ops")  # the totals' last row, then a blank line
    rows = [ln.split()[0] for ln in lines[at + 2:at + 6]]
    assert rows == ["compute-bound", "memory-bound", "latency-bound", "unknown"]
    # the GEMM (2000 µs in base, 1500 µs in faster) is compute-bound on an H100 at 8192³
    assert lines[at + 2].split()[1:] == ["2.000", "ms", "1.500", "ms"]
