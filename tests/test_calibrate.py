"""`gpuscope calibrate`: measured ceilings on the CPU (real, quick), the store rows, the reader
the analysis uses, bad arguments, failures that leave the store alone. GPU tests skip here."""
from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path

import pytest

from conftest import file_digest, run_cli
from fakes.fake_pynvml import FakeNvml

torch = pytest.importorskip("torch")

from gpuscope import calibrate, store  # noqa: E402
from gpuscope.store import read  # noqa: E402
from gpuscope.render.calibrate import render_calibration  # noqa: E402
from gpuscope.calibrate import Calibration, CalibrationDevice, Measurement, kernels, sweep  # noqa: E402

GPU = bool(torch.cuda.is_available())


def _rows(db: Path) -> list[dict]:
    con = store.connect(db, read_only=True)
    try:
        cur = con.execute("SELECT * FROM ceilings ORDER BY id, metric, dtype")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        con.close()


def _fake(name: str, spec_key: str | None, measured_ns: int, bf16: float, bw: float, backend: str = "cuda",
          spec: object = None) -> Calibration:
    dev = CalibrationDevice(backend=backend, name=name, index=0, uuid=f"GPU-{name}", arch="9.0")
    ms = [Measurement(calibrate.METRIC_MATMUL, "bf16", bf16, "FLOP/s", "fake", {}),
          Measurement(calibrate.METRIC_MATMUL, "fp32", bf16 / 16, "FLOP/s", "fake", {}),
          Measurement(calibrate.METRIC_MEM_BW, None, bw, "B/s", "fake", {}),
          Measurement(calibrate.METRIC_MEM_READ, None, bw * 1.1, "B/s", "fake", {})]
    return Calibration(dev, ms, [("fp8", "not here")], measured_ns, spec_key, spec, {"torch_version": "x"})


# --------------------------------------------------------------------------------------------
# real measurements on this machine's CPU
# --------------------------------------------------------------------------------------------


def test_quick_cpu_calibration_is_stored_and_read_back(db: Path) -> None:
    t0 = time.monotonic()
    r = run_cli("calibrate", "--quick", "--json", "--cpu", "--db", db)
    elapsed = time.monotonic() - t0
    assert r.code == 0, r.err
    doc = r.json()  # stdout is exactly one JSON document
    assert elapsed < 20, f"--quick took {elapsed:.1f} s"
    assert doc["backend"] == "cpu" and doc["host"] == store.hostname()
    assert doc["device"]["name"] and doc["device"]["spec_key"] is None
    assert doc["calibration_id"] == 1
    by = {(x["metric"], x["dtype"]): x for x in doc["results"]}
    assert {("matmul_flops_per_s", "fp32"), ("mem_bw_bytes_per_s", None)} <= set(by)
    for x in doc["results"]:
        lo, hi = (1e8, 1e14) if x["unit"] == "FLOP/s" else (1e8, 1e12)
        assert lo < x["value"] < hi, x
        assert x["method"] and "spec_value" not in x
    assert "calibrate:" in r.err  # progress lines on stderr

    rows = _rows(db)
    assert len(rows) == len(doc["results"]) and {r["id"] for r in rows} == {1}
    for row in rows:
        assert row["backend"] == "cpu" and row["spec_key"] is None and row["device_uuid"] is None
        assert row["unit"] == ("FLOP/s" if row["metric"] == "matmul_flops_per_s" else "B/s")
        assert (row["dtype"] is None) == (row["metric"] != "matmul_flops_per_s")
        info = json.loads(row["info"])
        assert info["torch_version"] == torch.__version__ and info["device"]["backend"] == "cpu"
    mm = next(r for r in rows if r["dtype"] == "fp32")
    assert json.loads(mm["info"])["shapes"], "per-shape results are kept"

    # a second calibration is a new id and the newest one
    r2 = run_cli("calibrate", "--quick", "--cpu", "--dtypes", "fp32", "--seconds", "1", "--db", db, "-q")
    assert r2.code == 0, r2.err
    assert "calibration 2 stored" in r2.out and "fp32" in r2.out and "GB/s" in r2.out
    assert r2.err == ""  # -q: no progress
    con = store.connect(db, read_only=True)
    try:
        m = read.latest_ceilings(con)
        assert m is not None and m.calibration_id == 2 and m.backend == "cpu"
        assert set(m.flops_per_s) == {"fp32"} and m.mem_bw_bytes_per_s and m.mem_bw_bytes_per_s > 1e8
        assert read.latest_ceilings(con, device_name=doc["device"]["name"]).calibration_id == 2
        assert read.latest_ceilings(con, spec_key="h100-sxm") is None  # CPUs have no spec key
        cals = read.list_calibrations(con)
        assert [c["id"] for c in cals] == [2, 1]
    finally:
        con.close()
    lst = run_cli("calibrate", "--list", "--json", "--db", db)
    assert lst.code == 0 and [c["id"] for c in lst.json()] == [2, 1]


def test_unsupported_dtypes_on_the_cpu_are_skipped_with_a_reason(db: Path) -> None:
    r = run_cli("calibrate", "--cpu", "--quick", "--dtypes", "fp32,tf32,fp8", "--seconds", "0.6", "--json",
                "--db", db, "-q")
    assert r.code == 0, r.err
    doc = r.json()
    assert [x["dtype"] for x in doc["results"] if x["metric"] == "matmul_flops_per_s"] == ["fp32"]
    skipped = {s["dtype"]: s["reason"] for s in doc["skipped"]}
    assert set(skipped) == {"tf32", "fp8"} and "GPU" in skipped["fp8"]


def test_measure_api_without_the_cli() -> None:
    lines: list[str] = []
    cal = calibrate.measure(cpu=True, dtypes=["float32"], quick=True, seconds=0.5, progress=lines.append)
    assert cal.device.backend == "cpu" and cal.spec_key is None
    assert [m.dtype for m in cal.measurements if m.metric == calibrate.METRIC_MATMUL] == ["fp32"]
    assert len(lines) >= 3  # a header and one line per measurement


# --------------------------------------------------------------------------------------------
# the reader the analysis uses
# --------------------------------------------------------------------------------------------


def test_latest_ceilings_matches_spec_key_then_device_name(db: Path) -> None:
    con = store.connect(db)
    try:
        a = calibrate.write_calibration(con, _fake("NVIDIA H100 80GB HBM3", "h100-sxm", 1_000, 700e12, 3.0e12), host="a")
        b = calibrate.write_calibration(con, _fake("NVIDIA H100 80GB HBM3", "h100-sxm", 3_000, 720e12, 3.1e12), host="b")
        c = calibrate.write_calibration(con, _fake("Mystery GPU", None, 5_000, 100e12, 1e12), host="a")
        d = calibrate.write_calibration(con, _fake("AMD Instinct MI300X", "mi300x", 2_000, 900e12, 4.5e12,
                                                   backend="rocm"), host="a")
        assert (a, b, c, d) == (1, 2, 3, 4)

        m = read.latest_ceilings(con, spec_key="h100-sxm")
        assert m is not None and m.calibration_id == 2 and m.host == "b" and m.backend == "cuda"
        assert m.flops_per_s == {"bf16": 720e12, "fp32": 45e12}
        assert m.mem_bw_bytes_per_s == 3.1e12 and m.mem_read_bytes_per_s == pytest.approx(3.41e12)
        assert m.device_uuid == "GPU-NVIDIA H100 80GB HBM3" and m.measured_ns == 3_000
        assert read.latest_ceilings(con, spec_key="H100-SXM").calibration_id == 2  # case-insensitive
        assert read.latest_ceilings(con, spec_key="h100-sxm", host="a").calibration_id == 1
        assert read.latest_ceilings(con, spec_key="mi300x").backend == "rocm"
        # spec key first; the device name only when no calibration has that key
        assert read.latest_ceilings(con, spec_key="h100-sxm", device_name="Mystery GPU").calibration_id == 2
        assert read.latest_ceilings(con, spec_key="b200", device_name="mystery gpu ").calibration_id == 3
        assert read.latest_ceilings(con, spec_key="b200") is None
        assert read.latest_ceilings(con, device_name="nope") is None
        # neither: the newest calibration of any device
        assert read.latest_ceilings(con).calibration_id == 3
        assert read.latest_ceilings(con, host="b").calibration_id == 2
        assert read.latest_ceilings(con, host="zzz") is None

        cals = read.list_calibrations(con)
        assert [x["id"] for x in cals] == [3, 2, 4, 1]
        assert list(cals[1]["flops_per_s"]) == ["fp32", "bf16"] and cals[1]["spec_key"] == "h100-sxm"
    finally:
        con.close()


def test_latest_ceilings_on_an_empty_store(db: Path) -> None:
    con = store.connect(db)
    try:
        assert read.latest_ceilings(con) is None
        assert read.latest_ceilings(con, spec_key="h100-sxm", device_name="x") is None
        assert read.list_calibrations(con) == []
    finally:
        con.close()
    r = run_cli("calibrate", "--list", "--db", db)
    assert r.code == 0 and "no calibrations" in r.out


def test_json_and_text_report_against_a_spec_entry() -> None:
    spec = types.SimpleNamespace(key="h100-sxm", peak_flops_per_s={"bf16": 989.4e12, "fp32": 66.9e12, "fp8": None},
                                 mem_bw_bytes_per_s=3.35e12)
    cal = _fake("NVIDIA H100 80GB HBM3", "h100-sxm", 1, 742e12, 2.9e12, spec=spec)
    doc = calibrate.calibration_json(cal, 7, "node1")
    assert doc["calibration_id"] == 7 and doc["spec_key"] == "h100-sxm" and doc["device"]["uuid"]
    by = {(x["metric"], x["dtype"]): x for x in doc["results"]}
    bf16 = by[("matmul_flops_per_s", "bf16")]
    assert bf16["spec_value"] == 989.4e12 and bf16["pct_of_spec"] == pytest.approx(75.0, abs=0.02)
    assert by[("mem_bw_bytes_per_s", None)]["pct_of_spec"] == pytest.approx(86.57, abs=0.01)
    assert doc["skipped"] == [{"dtype": "fp8", "reason": "not here"}]
    text = render_calibration(doc, "/x.duckdb")
    assert "calibration 7 stored in /x.duckdb" in text and "742.0 TFLOP/s" in text and "75.0%" in text
    assert "skipped fp8: not here" in text and "spec h100-sxm" in text


def test_spec_identification_uses_gpuscope_specs_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = CalibrationDevice(backend="cuda", name="NVIDIA H100 80GB HBM3", index=0, memory_total_bytes=80 << 30,
                     compute_units=132)
    fake = types.ModuleType("gpuscope.specs")
    calls: list[dict] = []

    class _Db:
        def identify(self, **kw: object) -> object:
            calls.append(kw)
            return types.SimpleNamespace(spec=types.SimpleNamespace(key="h100-sxm"), via="name", note=None)

    fake.load_specs = lambda *a, **k: _Db()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gpuscope.specs", fake)
    spec, note = calibrate.identify_spec(dev)
    assert spec.key == "h100-sxm" and calls[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert calibrate.identify_spec(CalibrationDevice(backend="cpu", name="AMD EPYC"))[0] is None
    # no spec database at all: unidentified, not an error
    monkeypatch.setitem(sys.modules, "gpuscope.specs", None)
    assert calibrate.identify_spec(dev)[0] is None


def test_tf32_switch_is_restored() -> None:
    m = torch.backends.cuda.matmul
    attr = "fp32_precision" if hasattr(m, "fp32_precision") else "allow_tf32"
    before = getattr(m, attr)
    with kernels._Tf32(torch, True):
        assert getattr(m, attr) in ("tf32", True)
    assert getattr(m, attr) == before
    with kernels._Tf32(torch, False):
        assert getattr(m, attr) in ("ieee", False)
    assert getattr(m, attr) == before


# --------------------------------------------------------------------------------------------
# L2 bandwidth: sizes, the fit, storage, and the measured roof's L2
# --------------------------------------------------------------------------------------------

_MIB = 1 << 20


def test_l2_size_comes_from_the_spec_then_torch() -> None:
    h100 = types.SimpleNamespace(key="h100-sxm", l2_cache_mb=50)
    mi300x = types.SimpleNamespace(key="mi300x", l2_cache_mb=32)
    # the spec's binary MB first (the size the cache roof judges with)
    assert calibrate.l2_size_bytes("cuda", 52_428_800, h100) == (50 * _MIB, "spec h100-sxm: l2_cache_mb 50")
    # a MIG slice: torch's smaller L2 wins on NVIDIA
    size, why = calibrate.l2_size_bytes("cuda", 10 * _MIB, h100)
    assert size == 10 * _MIB and "below the spec's 50 MB" in why
    # ROCm reports one XCD's L2 (4 MB of MI300X's 32 MB): the spec's total stays
    assert calibrate.l2_size_bytes("rocm", 4 * _MIB, mi300x)[0] == 32 * _MIB
    assert calibrate.l2_size_bytes("cuda", 4 * _MIB, None) == (4 * _MIB, "torch L2_cache_size")
    assert calibrate.l2_size_bytes("cuda", 6 * _MIB, types.SimpleNamespace(key="x", l2_cache_mb=None))[0] == 6 * _MIB
    size, why = calibrate.l2_size_bytes("cuda", None, types.SimpleNamespace(key="x"))
    assert size is None and "unknown" in why
    assert calibrate.l2_size_bytes("cuda", float("nan"), None)[0] is None


def test_l2_buffer_sizes_and_kernels_per_graph() -> None:
    from gpuscope.calibrate import l2

    # H100, 50 MiB: half of it read from one buffer, or copied between two quarters
    assert calibrate.stream_buffer_bytes(50 * _MIB, 0.5, 1) == 25 * _MIB
    assert calibrate.stream_buffer_bytes(50 * _MIB, 0.5, 2) == 12.5 * _MIB
    assert calibrate.stream_buffer_bytes(50 * _MIB, 0.125, 2) == 3_276_800  # 3.125 MiB = 50 x 64 KiB
    # rounded down to 64 KiB: 6 MiB / 8 / 2 = 393,216 B = 6 x 64 KiB; 1 MB / 8 / 2 = 65,536 B = 1 unit
    assert calibrate.stream_buffer_bytes(6 * _MIB, 0.125, 2) == 393_216
    assert calibrate.stream_buffer_bytes(1_000_000, 0.125, 1) == 65_536
    assert calibrate.stream_buffer_bytes(1_000_000, 0.125, 2) == 0  # 62,500 B: less than one unit
    assert l2.L2_REPLAY_BYTES == 2 << 30
    assert calibrate.graph_repeats(25 * _MIB) == 82  # ceil(2048 MiB / 25 MiB)
    assert calibrate.graph_repeats(64 << 10) == 2048  # capped
    assert calibrate.graph_repeats(4 << 30) == 8  # at least 8
    assert calibrate.graph_repeats(0) == 8


def test_l2_fit_removes_the_fixed_cost_per_kernel_and_rejects_what_is_not_one_stream() -> None:
    sizes = (6.25 * _MIB, 12.5 * _MIB, 25 * _MIB)
    # 2 us per kernel + bytes at 8 TB/s: 2.819, 3.638, 5.277 us
    fit = calibrate.fit_stream([(b, 2e-6 + b / 8e12) for b in sizes])
    assert fit.ok and fit.bytes_per_s == pytest.approx(8e12, rel=1e-9) and fit.fixed_s == pytest.approx(2e-6)
    # the largest working set spilled to HBM (half the speed): off the line, not stored
    spilled = [(b, 2e-6 + b / 8e12) for b in sizes[:2]] + [(sizes[2], 2e-6 + sizes[2] / 4e12)]
    bad = calibrate.fit_stream(spilled)
    assert not bad.ok and "not linear" in bad.rejected
    # launch-bound: 5 us per kernel whatever the bytes
    flat = calibrate.fit_stream([(b, 5e-6) for b in sizes])
    assert not flat.ok and flat.bytes_per_s is None and "does not grow" in flat.rejected
    # the fixed cost swamps the data: 40 us + bytes at 8 TB/s grows by 2.5 us of 45 us (5.5% < 10%)
    swamped = calibrate.fit_stream([(b, 40e-6 + b / 8e12) for b in sizes])
    assert not swamped.ok and "swamps" in swamped.rejected
    # a negative fixed cost (-1 us): not one stream
    neg = calibrate.fit_stream([(b, -1e-6 + b / 8e12) for b in (16 * _MIB, 32 * _MIB, 64 * _MIB)])
    assert not neg.ok and "negative" in neg.rejected
    assert not calibrate.fit_stream([(sizes[0], 3e-6), (sizes[0], 3.1e-6)]).ok  # one size only
    assert not calibrate.fit_stream([]).ok


def test_l2_stream_result_is_a_ceilings_row_only_when_the_fit_holds() -> None:
    from gpuscope.calibrate.l2 import StreamPoint, stream_result

    # 100 kernels per graph at 2 us + bytes / 9 TB/s each
    pts = [StreamPoint(b, b, 100, 20, 100 * (2e-6 + b / 9e12), 100 * (1.9e-6 + b / 9e12))
           for b in (6 * _MIB, 12 * _MIB, 24 * _MIB)]
    m, seen = stream_result(calibrate.METRIC_L2_BW, "dst.copy_(src)", pts, 48 * _MIB, "torch L2_cache_size",
                            "CUDA events around each iteration")
    assert m is not None and m.metric == "l2_bw_bytes_per_s" and m.unit == "B/s" and m.dtype is None
    assert m.value == pytest.approx(9e12, rel=1e-9)
    # per kernel, its fixed cost included: 24 MiB / (2 us + 24 MiB / 9 TB/s)
    per_kernel = 24 * _MIB / (2e-6 + 24 * _MIB / 9e12)
    assert m.info["per_kernel_bytes_per_s"] == pytest.approx(per_kernel) and per_kernel < m.value
    assert "graph of 100..100 kernels" in m.method and "2.00 µs per kernel removed" in m.method
    assert [p["working_set_bytes"] for p in seen["points"]] == [6 * _MIB, 12 * _MIB, 24 * _MIB]
    assert "not_stored" not in seen
    flat = [StreamPoint(b, b, 100, 20, 500e-6, 500e-6) for b in (6 * _MIB, 12 * _MIB, 24 * _MIB)]
    m, seen = stream_result(calibrate.METRIC_L2_READ, "sum", flat, 48 * _MIB, "x", "events")
    assert m is None and "does not grow" in seen["not_stored"]


def _with_l2(cal: Calibration, l2_copy: float | None, l2_read: float | None) -> Calibration:
    extra = [Measurement(metric, None, v, "B/s", "fake", {}) for metric, v in
             ((calibrate.METRIC_L2_BW, l2_copy), (calibrate.METRIC_L2_READ, l2_read)) if v]
    return Calibration(cal.device, cal.measurements + extra, cal.skipped, cal.measured_ns, cal.spec_key,
                       cal.spec, cal.info)


def test_l2_rows_are_stored_read_back_and_reported_against_the_spec_l2(db: Path) -> None:
    spec = types.SimpleNamespace(key="h100-sxm", peak_flops_per_s={"bf16": 989.4e12}, mem_bw_bytes_per_s=3.35e12,
                                 l2_bw_bytes_per_s=12e12)
    cal = _with_l2(_fake("NVIDIA H100 80GB HBM3", "h100-sxm", 1, 742e12, 2.9e12, spec=spec), 7.5e12, 9e12)
    con = store.connect(db)
    try:
        cid = calibrate.write_calibration(con, cal)
        m = read.latest_ceilings(con, spec_key="h100-sxm")
        assert m.calibration_id == cid and m.l2_bw_bytes_per_s == 7.5e12 and m.l2_read_bytes_per_s == 9e12
        assert m.mem_bw_bytes_per_s == 2.9e12  # the HBM rows are unchanged
        listed = read.list_calibrations(con)[0]
        assert listed["l2_bw_bytes_per_s"] == 7.5e12 and listed["l2_read_bytes_per_s"] == 9e12
    finally:
        con.close()
    rows = [r for r in _rows(db) if r["metric"].startswith("l2_")]
    assert {(r["metric"], r["dtype"], r["unit"]) for r in rows} == {("l2_bw_bytes_per_s", None, "B/s"),
                                                                    ("l2_read_bytes_per_s", None, "B/s")}
    # the L2 rows are judged against the spec's L2 (12 TB/s), not its HBM (3.35 TB/s)
    doc = calibrate.calibration_json(cal, cid, "node1")
    by = {x["metric"]: x for x in doc["results"] if x["dtype"] is None}
    assert by["l2_bw_bytes_per_s"]["spec_value"] == 12e12 and by["l2_bw_bytes_per_s"]["pct_of_spec"] == 62.5
    assert by["l2_read_bytes_per_s"]["pct_of_spec"] == 75.0
    assert by["mem_bw_bytes_per_s"]["spec_value"] == 3.35e12
    text = render_calibration(doc, None)
    assert "L2 copy (r+w)" in text and "L2 read" in text and "7,500.0 GB/s" in text
    # an older calibration without L2 rows reads back with None
    con = store.connect(db)
    try:
        calibrate.write_calibration(con, _fake("NVIDIA H100 80GB HBM3", "h100-sxm", 2, 742e12, 2.9e12))
        m = read.latest_ceilings(con, spec_key="h100-sxm")
        assert m.l2_bw_bytes_per_s is None and m.l2_read_bytes_per_s is None
    finally:
        con.close()


def test_the_measured_roof_judges_l2_work_against_the_calibrated_l2(db: Path) -> None:
    from gpuscope.analyzers.attribution import _measured
    from gpuscope.analyzers.roofline import Roof, settle_over_roof

    spec = types.SimpleNamespace(key="h100-sxm", host_link="PCIe Gen5 x16")
    spec_roof = Roof("h100-sxm", "spec", {"bf16": 989.4e12}, 3.35e12, None, 55e9, "PCIe Gen5 x16",
                     (("L2", 50 * _MIB, None), ("Infinity Cache (MALL)", 256 * _MIB, 17.2e12)))
    con = store.connect(db)
    try:
        # no L2 rows: the spec's caches stay
        calibrate.write_calibration(con, _fake("NVIDIA H100 80GB HBM3", "h100-sxm", 1, 742e12, 3.0e12))
        roof, note = _measured(con, spec, spec_roof)
        assert roof.source == "measured" and roof.caches == spec_roof.caches and "L2" not in note
        # L2 streams measured: the faster one (read, 8 TB/s) is the L2 roof; the other cache stays
        calibrate.write_calibration(con, _with_l2(_fake("NVIDIA H100 80GB HBM3", "h100-sxm", 2, 742e12, 3.0e12),
                                                  7e12, 8e12))
        roof, note = _measured(con, spec, spec_roof)
        assert roof.mem_bw_bytes_per_s == 3.0e12 and "L2 bandwidth measured" in note
        assert roof.caches == (("L2", 50 * _MIB, 8e12), ("Infinity Cache (MALL)", 256 * _MIB, 17.2e12))
        # an op that moved 60 MB (working set 10 MB) in 10 us: 6 TB/s, above the 3 TB/s HBM roof
        # (20 us at the roof); at the measured 8 TB/s L2 it takes 7.5 us: cache_bound at 75 %
        got = settle_over_roof(10.0, 20.0, None, 60e6, 10e6, "bf16", roof)
        assert got["bound"] == "cache_bound" and got["cache"] == "L2"
        assert got["roof_us"] == pytest.approx(7.5) and got["pct_of_roof"] == pytest.approx(0.75)
        # with the spec's caches (no L2 bandwidth) the same op has no percent
        assert settle_over_roof(10.0, 20.0, None, 60e6, 10e6, "bf16", spec_roof)["pct_of_roof"] is None
        # an L2 figure at or below the HBM roof is not a cache roof (a failed sizing): the spec's stays
        calibrate.write_calibration(con, _with_l2(_fake("NVIDIA H100 80GB HBM3", "h100-sxm", 3, 742e12, 3.0e12),
                                                  2.5e12, None))
        roof, note = _measured(con, spec, spec_roof)
        assert roof.caches == spec_roof.caches and "L2" not in note
    finally:
        con.close()


# --------------------------------------------------------------------------------------------
# bad arguments and failures leave the store alone
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, fragment", [
    (["--dtypes", "fp13"], "unknown dtype 'fp13'"),
    (["--dtypes", ","], "no dtype given"),
    (["--seconds", "-1"], "--seconds"),
    (["--seconds", "nan"], "--seconds"),
    (["--device", "99"], "--device"),
    (["--device", "-1"], "--device"),
    (["--device", "0", "--cpu"], "--cpu"),
    (["--cpu", "--dtypes", "tf32"], "nothing measurable"),
])
def test_bad_arguments_exit_2_with_one_line_and_store_unchanged(db: Path, argv: list[str], fragment: str) -> None:
    con = store.connect(db)
    con.close()
    before = file_digest(db)
    r = run_cli("calibrate", "--quick", "--db", db, *argv)
    assert r.code == 2, (r.out, r.err)
    assert len(r.err.strip().splitlines()) == 1 and fragment in r.err and "Traceback" not in r.err
    assert r.out == ""
    assert file_digest(db) == before


def test_bad_dtype_does_not_create_a_store(tmp_path: Path) -> None:
    db = tmp_path / "none.duckdb"
    r = run_cli("calibrate", "--dtypes", "fp4", "--db", db)
    assert r.code == 2 and "gpuscope calibrate: --dtypes: unknown dtype 'fp4'" in r.err
    assert not db.exists()


def test_missing_torch_is_exit_2_with_the_install_hint(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    r = run_cli("calibrate", "--quick", "--db", db)
    assert r.code == 2 and "pip install 'gpuscope[torch]'" in r.err
    assert len(r.err.strip().splitlines()) == 1 and not db.exists()


def _boom(*a: object, **k: object) -> None:
    raise RuntimeError("simulated device failure")


def test_a_failed_measurement_is_exit_1_and_store_unchanged(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    con = store.connect(db)
    calibrate.write_calibration(con, _fake("Mystery GPU", None, 1, 1e12, 1e11))
    con.close()
    before = file_digest(db)
    monkeypatch.setattr(sweep, "_measure_memory", _boom)
    r = run_cli("calibrate", "--quick", "--cpu", "--db", db)
    assert r.code == 1 and "simulated device failure" in r.err.strip().splitlines()[-1] and "Traceback" not in r.err
    assert file_digest(db) == before
    monkeypatch.undo()

    monkeypatch.setattr(kernels, "_make_matmul", _boom)
    r = run_cli("calibrate", "--quick", "--cpu", "--seconds", "0.5", "--db", db, "-q", "--json")
    assert r.code == 1 and "no matmul could be measured" in r.err and r.out == ""
    assert file_digest(db) == before


def test_an_interrupted_calibration_writes_nothing(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(kernels, "_make_matmul", interrupt)
    r = run_cli("calibrate", "--quick", "--cpu", "--seconds", "0.5", "--db", db, "-q")
    assert r.code == 130 and not db.exists()


def test_help() -> None:
    r = run_cli("calibrate", "--help")
    assert r.code == 0
    for opt in ("--device", "--dtypes", "--quick", "--seconds", "--cpu", "--json", "--db"):
        assert opt in r.out
    top = run_cli("--help")
    assert top.code == 0 and "calibrate" in top.out


# --------------------------------------------------------------------------------------------
# real GPUs only
# --------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a GPU visible to torch")
def test_quick_gpu_calibration(db: Path) -> None:
    r = run_cli("calibrate", "--quick", "--json", "--db", db)
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["backend"] in ("cuda", "rocm") and doc["device"]["name"]
    by = {(x["metric"], x["dtype"]): x["value"] for x in doc["results"]}
    assert by[("matmul_flops_per_s", "fp32")] > 1e11
    assert any(by.get(("matmul_flops_per_s", d), 0) > 1e12 for d in ("bf16", "fp16"))
    assert 5e10 < by[("mem_bw_bytes_per_s", None)] < 2e13
    assert {x["dtype"] for x in doc["results"] if x["metric"] == "matmul_flops_per_s"} | \
        {s["dtype"] for s in doc["skipped"]} == {"bf16", "fp16", "fp32", "tf32", "fp8"}
    # the L2 streams ran (graph capture and all) wherever the L2 size is known; a stored figure
    # is above device memory's (else it did not stay in the L2)
    seen = doc["info"].get("l2", {})
    if doc["spec_key"] or doc["device"].get("l2_cache_size"):
        for metric in ("l2_bw_bytes_per_s", "l2_read_bytes_per_s"):
            assert metric in seen and len(seen[metric]["points"]) == 3, seen
            if (metric, None) in by:
                assert by[(metric, None)] > by[("mem_bw_bytes_per_s", None)], seen[metric]
    con = store.connect(db, read_only=True)
    try:
        m = read.latest_ceilings(con, device_name=doc["device"]["name"])
        assert m is not None and m.calibration_id == doc["calibration_id"]
        if doc["spec_key"]:
            assert read.latest_ceilings(con, spec_key=doc["spec_key"]).calibration_id == doc["calibration_id"]
    finally:
        con.close()


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="needs a GPU visible to torch")
def test_gpu_device_out_of_range(db: Path) -> None:
    r = run_cli("calibrate", "--device", str(torch.cuda.device_count()), "--db", db)
    assert r.code == 2 and "--device" in r.err and not db.exists()


def test_fp8_and_tf32_support_decisions() -> None:
    def dev(backend: str, cc: str = "9.0", gfx: str | None = None) -> CalibrationDevice:
        extra = {"compute_capability": cc}
        if gfx:
            extra["gcn_arch_name"] = gfx
        return CalibrationDevice(backend=backend, name="x", index=0, arch=gfx or cc, extra=extra)

    assert kernels._fp8_support(torch, dev("cuda", "9.0")) == (torch.float8_e4m3fn, None)
    assert kernels._fp8_support(torch, dev("cuda", "8.9"))[1] is None
    assert "8.9" in kernels._fp8_support(torch, dev("cuda", "8.0"))[1]
    assert kernels._fp8_support(torch, dev("rocm", "9.4", "gfx942:sramecc+:xnack-")) == (torch.float8_e4m3fnuz, None)
    assert kernels._fp8_support(torch, dev("rocm", "9.5", "gfx950")) == (torch.float8_e4m3fn, None)
    assert "gfx90a" in kernels._fp8_support(torch, dev("rocm", "9.0", "gfx90a:sramecc+:xnack-"))[1]
    assert kernels._fp8_support(torch, CalibrationDevice(backend="cpu", name="cpu"))[0] is None
    assert "8.0" in kernels._static_skip(torch, dev("cuda", "7.0"), "tf32")
    assert kernels._static_skip(torch, dev("cuda", "8.0"), "tf32") is None


def test_matmul_operands_for_every_dtype_run_on_the_cpu() -> None:
    # the calls the GPU path makes (torch.mm, torch._scaled_mm, torch._int_mm), on tiny shapes
    cpu = torch.device("cpu")
    for d in ("fp64", "fp32", "fp16", "bf16", "fp8", "int8"):
        out = kernels._make_matmul(torch, d, (32, 48, 64), cpu, torch.float8_e4m3fn)()
        assert tuple(out.shape) == (32, 48), d


class _FakeEvent:
    """A torch.cuda.Event stand-in on the CPU: a wall-clock stamp per record()."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self, stream: object = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: "_FakeEvent") -> float:
        return (end.t - self.t) * 1e3


def test_gpu_code_path_on_a_fake_gpu(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole GPU flow (device properties, dtype defaults, fp8 via torch._scaled_mm, TF32
    switching, events, spec lookup, telemetry) with torch.cuda faked and tensors on the CPU."""
    cuda = torch.cuda
    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=80 << 30,
                                  multi_processor_count=132, uuid="b42dd28e-ffdd-8720-1df0-98bd8cdc05b1",
                                  L2_cache_size=4 << 20)
    for name, value in {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "get_device_properties": lambda i: props, "set_device": lambda d: None, "synchronize": lambda d=None: None,
        "mem_get_info": lambda d=None: (70 << 30, 80 << 30), "empty_cache": lambda: None,
        "is_bf16_supported": lambda *a: True, "Event": _FakeEvent,
    }.items():
        monkeypatch.setattr(cuda, name, value, raising=False)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    # clocks and limits come through collectors/ from NVML: GPU 0 of a recorded nvidia-smi dump
    nvml = FakeNvml("nvml_h100x8_nvsmi_dump.json")
    monkeypatch.setattr("gpuscope.collectors.nvml.import_pynvml", lambda: nvml)
    monkeypatch.setattr(sweep, "_gpu_torch_device", lambda t, i: t.device("cpu"))
    monkeypatch.setattr(sweep, "GPU_SHAPES_QUICK", ((64, 64, 64), (128, 128, 128)))
    monkeypatch.setattr(kernels, "_WARM_SIZE", 64)
    monkeypatch.setattr(kernels, "FLUSH_BYTES", 128 << 20)
    monkeypatch.setattr(kernels, "GPU_COPY_BUFFER_BYTES", {False: 32 << 20, True: 32 << 20})
    # the L2 streams: an eager loop stands in for the CUDA graph; graphs of 8..16 kernels
    from gpuscope.calibrate import l2
    monkeypatch.setattr(l2, "_graph_replay", lambda t, fn, repeats: (lambda: [fn() for _ in range(repeats)]))
    monkeypatch.setattr(l2, "L2_REPLAY_BYTES", 8 << 20)
    fake_specs = types.ModuleType("gpuscope.specs")
    spec = types.SimpleNamespace(key="h100-sxm", peak_flops_per_s={"bf16": 989.4e12, "fp32": 66.9e12},
                                 mem_bw_bytes_per_s=3.35e12)
    fake_specs.load_specs = lambda *a, **k: types.SimpleNamespace(  # type: ignore[attr-defined]
        identify=lambda **kw: types.SimpleNamespace(spec=spec, via="name", note=None))
    monkeypatch.setitem(sys.modules, "gpuscope.specs", fake_specs)
    precision = getattr(torch.backends.cuda.matmul, "fp32_precision", None)

    r = run_cli("calibrate", "--quick", "--json", "--seconds", "1.5", "--db", db)
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["backend"] == "cuda" and doc["spec_key"] == "h100-sxm"
    assert doc["device"]["uuid"] == "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"
    assert doc["info"]["limits"] == {"power_limit_w": 700.0}  # the dump has no max clocks
    assert doc["info"]["telemetry_end"] == {"sm_clock_mhz": 345.0, "power_w": pytest.approx(100.89),
                                            "temperature_c": 30.0}
    assert nvml.initialised == 0 and "nvmlDeviceGetHandleByUUID" in nvml.calls
    assert doc["device"]["compute_capability"] == "9.0" and doc["device"]["compute_units"] == 132
    measured = [x["dtype"] for x in doc["results"] if x["metric"] == "matmul_flops_per_s"]
    assert measured == ["bf16", "fp16", "fp32", "tf32", "fp8"] and doc["skipped"] == []
    by = {(x["metric"], x["dtype"]): x for x in doc["results"]}
    assert "CUDA events" in by[("matmul_flops_per_s", "bf16")]["method"]
    assert "L2 flushed (128 MiB" in by[("matmul_flops_per_s", "bf16")]["method"]
    assert "flushed" not in by[("mem_bw_bytes_per_s", None)]["method"]
    assert "TF32 on" in by[("matmul_flops_per_s", "tf32")]["method"]
    assert "TF32 off" in by[("matmul_flops_per_s", "fp32")]["method"]
    assert "pct_of_spec" in by[("matmul_flops_per_s", "bf16")] and "pct_of_spec" not in by[("matmul_flops_per_s", "fp8")]
    assert by[("mem_bw_bytes_per_s", None)]["spec_value"] == 3.35e12
    assert getattr(torch.backends.cuda.matmul, "fp32_precision", None) == precision  # restored
    # L2: sized from torch's 4 MiB (the fake spec has no L2), working sets of 1/8, 1/4, 1/2 of it;
    # a stream is stored exactly when its fit holds (CPU timings may or may not fit a line)
    seen = doc["info"]["l2"]
    for metric, per_kernel in (("l2_bw_bytes_per_s", [16, 8, 8]), ("l2_read_bytes_per_s", [16, 8, 8])):
        assert seen[metric]["l2_bytes"] == 4 << 20 and seen[metric]["l2_size_source"] == "torch L2_cache_size"
        assert [pt["working_set_bytes"] for pt in seen[metric]["points"]] == [512 << 10, 1 << 20, 2 << 20]
        assert [pt["kernels_per_graph"] for pt in seen[metric]["points"]] == per_kernel
        assert ((metric, None) in by) == ("not_stored" not in seen[metric]), seen[metric]
        if (metric, None) in by:
            assert "CUDA/HIP graph" in by[(metric, None)]["method"]
            assert by[(metric, None)]["value"] == pytest.approx(seen[metric]["fit_bytes_per_s"])
    assert "L2 copy" in r.err and "L2 read" in r.err
    rows = _rows(db)
    assert {r["spec_key"] for r in rows} == {"h100-sxm"} and {r["backend"] for r in rows} == {"cuda"}
    info = json.loads(next(r["info"] for r in rows if r["dtype"] == "bf16"))
    assert info["telemetry_after"] == {"sm_clock_mhz": 345.0, "power_w": pytest.approx(100.89), "temperature_c": 30.0}
    con = store.connect(db, read_only=True)
    try:
        m = read.latest_ceilings(con, spec_key="h100-sxm")
        assert m is not None and set(m.flops_per_s) == {"bf16", "fp16", "fp32", "tf32", "fp8"}
    finally:
        con.close()

    # fp8 on an A100 is skipped with a reason; the rest is measured
    monkeypatch.setattr(props, "major", 8)
    r = run_cli("calibrate", "--quick", "--json", "--seconds", "0.6", "--dtypes", "bf16,fp8", "--db", db, "-q")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["skipped"][0]["dtype"] == "fp8" and "8.9" in doc["skipped"][0]["reason"]
    assert run_cli("calibrate", "--device", "1", "--db", db).code == 2


def test_identification_with_the_real_spec_database() -> None:
    specs = pytest.importorskip("gpuscope.specs")
    if not hasattr(specs, "load_specs"):
        pytest.skip("gpuscope.specs has no load_specs yet")
    dev = CalibrationDevice(backend="cuda", name="NVIDIA H100 80GB HBM3", index=0, arch="9.0",
                     memory_total_bytes=85_520_809_984, compute_units=132, extra={"compute_capability": "9.0"})
    spec, _ = calibrate.identify_spec(dev)
    assert spec is not None and spec.key
    assert calibrate.spec_peak(spec, calibrate.METRIC_MATMUL, "bf16") > 1e14
    assert calibrate.spec_peak(spec, calibrate.METRIC_MEM_BW, None) > 1e12
    unknown, note = calibrate.identify_spec(CalibrationDevice(backend="cuda", name="Mystery", index=0, arch="8.0",
                                                       memory_total_bytes=8 << 30, compute_units=10,
                                                       extra={"compute_capability": "8.0"}))
    assert unknown is None and note
