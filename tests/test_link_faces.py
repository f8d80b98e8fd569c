"""Issue 31 point 6, the faces: NVLink / XGMI utilization on the run's timeline in the HTML
report's telemetry section and the TUI run screen's timeline, as percent of the spec's link
bandwidth in one direction (the figure `export --format chrome` draws as link_tx/rx_util_pct),
with the bytes/s; nothing for a GPU without link rates. A hand-made run whose samples hold
known link rates: every percent below is worked out by hand from H100 SXM 450 GB/s and MI300X
448 GB/s per direction (the spec database, checked in test_link_telemetry.py)."""
from __future__ import annotations

import asyncio
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from conftest import kernel, link_test_devices, run_cli, write_trace

T0_NS = 1_767_225_600_000_000_000
STEP_NS = 100_000_000  # 0.1 s between ticks
#: (tx, rx) bytes/s per tick; None: the GPU reported no link rate at that tick
H100 = [(9.0e10, 9.0e9), (4.5e10, None), (2.25e11, 4.5e10)]   # % of 450 GB/s: tx 20, 10, 50; rx 2, -, 10
MI300X = [(None, 2.24e11), (4.48e10, 4.48e9), (8.96e10, None)]  # % of 448 GB/s: tx -, 10, 20; rx 50, 1, -
PCT = {"gpu0": {"tx": [20.0, 10.0, 50.0], "rx": [2.0, None, 10.0]},
       "gpu1": {"tx": [None, 10.0, 20.0], "rx": [50.0, 1.0, None]}}




def _rows(k: int) -> list[Any]:
    from gpuscope.collectors.base import Sample

    ts = T0_NS + k * STEP_NS
    out = [Sample(key, ts, {"power_w": 300.0 + k, "gpu_util": 0.5, "xgmi_nvlink_tx_bytes_per_s": s[k][0],
                            "xgmi_nvlink_rx_bytes_per_s": s[k][1]})
           for key, s in (("gpu0", H100), ("gpu1", MI300X))]
    # PCIe-only: no link rates at all, so no link chart, row or line
    out.append(Sample("gpu2", ts, {"power_w": 200.0 + k, "gpu_util": 0.25}))
    return out


def _store_run(db: Path) -> None:
    from gpuscope.sinks import StoreSink
    from gpuscope.sinks.base import SampleBatch, SamplerInfo, SamplerStats

    sink = StoreSink(db, name="links", flush_s=0.0)
    sink.start(SamplerInfo(interval_s=0.1, started_ns=T0_NS, vendors=[], devices=link_test_devices()))
    for k in range(3):
        sink.write(SampleBatch([(k, _rows(k))]))
    sink.close(SamplerStats(interval_s=0.1, started_ns=T0_NS, ended_ns=T0_NS + 2 * STEP_NS, ticks=3))


class _Svgs(HTMLParser):
    """The link charts: per svg, its attributes and its polylines' (class, points)."""

    def __init__(self) -> None:
        super().__init__()
        self.svgs: list[tuple[dict[str, Any], list[tuple[str, str]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.svgs.append((a, []))
        elif tag == "polyline" and self.svgs:
            self.svgs[-1][1].append((str(a.get("class")), str(a.get("points"))))


def test_the_report_draws_link_utilization_on_the_telemetry_time_axis(tmp_path: Path) -> None:
    from gpuscope.render.report_html import TELE_B, TELE_H, TELE_L, TELE_W

    db = tmp_path / "s.duckdb"
    _store_run(db)
    out = tmp_path / "r.html"
    r = run_cli("report", "--db", str(db), "--out", str(out))
    assert r.code == 0, r.err
    page = out.read_text()
    parser = _Svgs()
    parser.feed(page)
    links = {a["data-device"]: (a, lines) for a, lines in parser.svgs if "link" in str(a.get("class")).split()}
    assert sorted(links) == ["gpu0", "gpu1"]  # the L40S has no link rates: no chart
    for key, (attrs, lines) in links.items():
        vmax = float(attrs["data-vmax-pct"])
        assert vmax == pytest.approx(1.1 * 50.0)  # the highest reading (50 %) and a tenth of room
        assert float(attrs["data-link-bytes-per-s"]) == {"gpu0": 450e9, "gpu1": 448e9}[key]
        got = dict(lines)
        for direction in ("tx", "rx"):
            want = PCT[key][direction]
            pts = [tuple(map(float, p.split(","))) for p in got[f"link-{direction}"].split()]
            # x: the sample's time on the axis every telemetry chart shares (0 .. 0.2 s)
            xs = [TELE_L + k / 2 * (TELE_W - TELE_L - 10) for k, v in enumerate(want) if v is not None]
            assert [x for x, _ in pts] == pytest.approx(xs, abs=0.05)
            # y: back to percent from the chart's scale
            pct = [(TELE_H - TELE_B - y) / (TELE_H - TELE_B - 20) * vmax for _, y in pts]
            assert pct == pytest.approx([v for v in want if v is not None], abs=0.05)
    # the table: peak and mean of each direction, bytes/s and percent
    rows = dict(re.findall(r"<tr data-device='(gpu\d)'>(.*?)</tr>", page))
    assert sorted(rows) == ["gpu0", "gpu1"]
    cells = {k: re.findall(r"<td[^>]*>([^<]*)</td>", v) for k, v in rows.items()}
    # gpu0 TX: peak 225 GB/s = 50 %, mean (90 + 45 + 225) / 3 = 120 GB/s = 26.7 %; RX: peak 45 GB/s =
    # 10 %, mean (9 + 45) / 2 = 27 GB/s = 6 %
    assert cells["gpu0"] == ["gpu0", "h100-sxm", "450.0 GB/s", "225.0 GB/s", "50.0 %", "120.0 GB/s", "26.7 %",
                             "45.0 GB/s", "10.0 %", "27.0 GB/s", "6.0 %"]
    # gpu1 TX: peak 89.6 GB/s = 20 %, mean 67.2 GB/s = 15 %; RX: peak 224 GB/s = 50 %, mean 114.24 GB/s = 25.5 %
    assert cells["gpu1"] == ["gpu1", "mi300x", "448.0 GB/s", "89.6 GB/s", "20.0 %", "67.2 GB/s", "15.0 %",
                             "224.0 GB/s", "50.0 %", "114.2 GB/s", "25.5 %"]


def test_a_run_without_link_rates_has_no_link_chart_or_table(tmp_path: Path) -> None:
    from gpuscope.sinks import StoreSink
    from gpuscope.sinks.base import SampleBatch, SamplerInfo, SamplerStats
    from gpuscope.collectors.base import Sample

    db = tmp_path / "s.duckdb"
    sink = StoreSink(db, name="pcie", flush_s=0.0)
    sink.start(SamplerInfo(interval_s=0.1, started_ns=T0_NS, vendors=[], devices=link_test_devices()[2:]))
    for k in range(3):
        sink.write(SampleBatch([(k, [Sample("gpu2", T0_NS + k * STEP_NS, {"power_w": 200.0 + k})])]))
    sink.close(SamplerStats(interval_s=0.1, started_ns=T0_NS, ended_ns=T0_NS + 2 * STEP_NS, ticks=3))
    out = tmp_path / "r.html"
    assert run_cli("report", "--db", str(db), "--out", str(out)).code == 0
    page = out.read_text()
    assert "gpu2 power" in page  # the telemetry is there
    assert "link utilization" not in page and "class='links'" not in page


CUTLASS = ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_{tile}_16x4_tn_align4>"
           "(cutlass_80_tensorop_s1688gemm_{tile}_16x4_tn_align4::Params)")


def test_largest_unjudged_work_shows_the_short_distinct_names(tmp_path: Path) -> None:
    """Issue 33: op-less kernels are unjudged; the table names them as the kernels table does
    (analyze's distinct short names, the full demangled name in the title and a <details>)."""
    from gpuscope.render.report_html import esc

    names = [CUTLASS.format(tile="256x64"), CUTLASS.format(tile="128x128")]
    ev = [kernel(names[0], 100, 900, corr=1), kernel(names[1], 1100, 500, corr=2)]
    db = tmp_path / "k.duckdb"
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9,
              "computeMinor": 0, "numSms": 132}]
    assert run_cli("ingest", "--db", str(db), "-q", str(write_trace(tmp_path / "k.json", ev, deviceProperties=props))).code == 0
    doc = run_cli("analyze", "--db", str(db), "--json").json()
    assert sorted(u["name"] for u in doc["coverage"]["unjudged"]) == sorted(names)
    out = tmp_path / "k.html"
    assert run_cli("report", "--db", str(db), "--out", str(out)).code == 0
    page = out.read_text()
    table = page[page.index("<table class='unjudged'>"):]
    table = table[:table.index("</table>")]
    # the core names, told apart by their tile: what the name's template argument says
    for full, short in zip(names, ["cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4",
                                   "cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4"]):
        assert (f"<td title='{esc(full)}'><details><summary><code>{esc(short)}</code></summary>"
                f"<code>{esc(full)}</code></details></td>") in table
    assert "Params)</code></summary>" not in table  # no whole template as the shown name


# --------------------------------------------------------------------------------------------
# the TUI run screen


def test_the_tui_run_screen_shows_link_rows_in_percent_and_the_bytes(tmp_path: Path, db: Path) -> None:
    from gpuscope.tui.app import GpuscopeApp
    from gpuscope.tui.screens.run import RunScreen
    from gpuscope.tui.widgets.timeline import Timeline

    _store_run(db)

    async def go() -> None:
        app = GpuscopeApp(db=db, interval_s=0.5)
        async with app.run_test(size=(120, 40)) as pilot:
            app.open_run(1)
            screen = None
            for _ in range(400):
                await pilot.pause(0.05)
                if isinstance(app.screen, RunScreen) and app.screen.doc is not None:
                    screen = app.screen
                    break
            assert screen is not None, getattr(app.screen, "message", None)
            await pilot.pause()
            tl = screen.query_one(Timeline).data
            assert tl is not None
            rows = {s.label: s for s in tl.series}
            assert [label for label in rows if "lnk" in label] == ["gpu0 lnk tx", "gpu0 lnk rx", "gpu1 lnk tx",
                                                                   "gpu1 lnk rx"]  # none for the L40S
            for key in ("gpu0", "gpu1"):
                for direction in ("tx", "rx"):
                    s = rows[f"{key} lnk {direction}"]
                    assert s.unit == "%" and s.ts_ns == [T0_NS + k * STEP_NS for k in range(3)]
                    assert s.values == [None if v is None else pytest.approx(v) for v in PCT[key][direction]]
            drawn = str(screen.query_one(Timeline).render())
            assert "gpu0 lnk tx" in drawn and "  50%" in drawn  # the row's peak at its end
            note = " ".join(str(screen.query_one("#timeline-note").render()).split())
            assert ("gpu0 NVLink/XGMI, all links: lnk tx/rx in % of 450.0 GB/s per direction (h100-sxm); "
                    "TX peak 225.0 GB/s (50.0 %), RX peak 45.0 GB/s (10.0 %)") in note
            assert ("gpu1 NVLink/XGMI, all links: lnk tx/rx in % of 448.0 GB/s per direction (mi300x); "
                    "TX peak 89.6 GB/s (20.0 %), RX peak 224.0 GB/s (50.0 %)") in note
            assert "gpu2" not in note

    asyncio.run(go())


def test_a_gpu_whose_spec_gives_no_link_bandwidth_gets_its_bytes_only() -> None:
    """Link rates on a GPU the spec database gives no NVLink / Infinity Fabric bandwidth for (an
    unidentified GPU): no percent can be drawn, so no chart; the table gives the bytes/s."""
    from gpuscope.render.links import link_series
    from gpuscope.render.report_html import _telemetry
    from gpuscope.store.read import SampleSeries

    ts = [T0_NS + k * STEP_NS for k in range(3)]
    series = [SampleSeries(7, ts, {"xgmi_nvlink_tx_bytes_per_s": [1.0e9, 3.0e9, None],
                                   "xgmi_nvlink_rx_bytes_per_s": [None, None, None]})]
    links = link_series([{"device_id": 7, "key": "gpu7", "spec": None}], series)
    assert len(links) == 1 and links[0].link_bytes_per_s is None and links[0].tx_pct == [None] * 3
    html = _telemetry({"series": [], "links": links})
    assert "class='telemetry link'" not in html
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", re.search(r"<tr data-device='gpu7'>(.*?)</tr>", html).group(1))
    # TX peak 3 GB/s, mean 2 GB/s; RX never reported
    assert cells == ["gpu7", "-", "unknown", "3.0 GB/s", "-", "2.0 GB/s", "-", "-", "-", "-", "-"]
    # a device with no link rate at all is no series
    assert link_series([{"device_id": 8, "key": "gpu8", "spec": "h100-sxm"}],
                       [SampleSeries(8, ts, {"xgmi_nvlink_tx_bytes_per_s": [None] * 3,
                                             "xgmi_nvlink_rx_bytes_per_s": [None] * 3})]) == []
