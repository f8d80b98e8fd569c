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
                                  multi_processor_count=132, uuid="b42dd28e-ffdd-8720-1df0-98bd8cdc05b1")
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
