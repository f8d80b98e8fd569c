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
    assert "Compared with another run" in page and "0.75x" in page  # the GEMM: 1500 / 2000 µs


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
