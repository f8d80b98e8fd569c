"""Issue 28, points 4 and 5 and "the roof follows the math that ran": no op or kernel is ever
shown above 100 % of the roof it is judged against.

- the roof of an fp32 GEMM follows its kernel's name (TF32 tensor-core kernels: tf32 roof);
- bytes come from the recorded strides (an expanded input counts its storage, not its view);
- work measured faster than the HBM roof whose working set fits L2 is ``cache_bound``;
- where the model still overshoots, the entry is ``model_error``, with no percent;
- over every shared real trace, no entry above 100 %.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SHARED_TRACES, cpu_op, kernel, run_cli, runtime, write_trace
from gpuscope.analyzers.costmodel import op_cost, storage_elements
from gpuscope.analyzers.roofline import Roof, kernel_math, roof_dtype_for_math, settle_over_roof

A100_PROPS = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42505273344, "computeMajor": 8,
               "computeMinor": 0, "numSms": 108, "warpSize": 32}]
H100_PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
               "computeMinor": 0, "numSms": 132, "warpSize": 32}]
BF16 = "c10::BFloat16"

# --------------------------------------------------------------------------------------------
# the math that ran, from the kernel name
# --------------------------------------------------------------------------------------------

#: Real kernel names: the first eight from the shared A100 traces (hta/a100_alexnet,
#: hta/a100_sxm4_80gb_training_large), then from the shared H100 / B200 / MI300X traces.
KERNEL_MATH = [
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align1>"
     "(cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align1::Params)", "tf32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1>"
     "(cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1::Params)", "tf32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1>"
     "(cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1::Params)", "tf32"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_"
     "warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn", "tf32"),
    ("ampere_sgemm_32x32_sliced1x4_tn", "fp32"),
    ("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "fp32"),
    ("ampere_gcgemm_64x64_nt", "fp32"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", None),
    ("nvjet_tst_192x8_64x8_4x1_v_bz_TNT", None),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
     "segment_k_off_kernel__5x_cublas", None),
    # cuBLAS / cuBLASLt / hipBLASLt naming patterns of the same modes
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel", "tf32"),
    ("cublasLt_gemm_tf32_tensorop_128x128", "tf32"),
    ("Cijk_Ailk_Bljk_S_XF32_MX_B_Bias_HA_S_SAV_UserArgs_MT128x128x32", "tf32"),
    ("volta_sgemm_128x64_nn", "fp32"),
    (None, None),
    ("", None),
]


@pytest.mark.parametrize("name,math", KERNEL_MATH)
def test_kernel_name_says_which_math_ran(name: str | None, math: str | None) -> None:
    assert kernel_math(name) == math


@pytest.mark.parametrize("dtype,kind,math,expected", [
    ("fp32", "gemm", "tf32", "tf32"),   # fp32 mm on a TF32 kernel: the tf32 roof
    ("fp32", "gemm", "fp32", "fp32"),   # ampere_sgemm: SIMT fp32
    ("fp32", "gemm", None, "fp32"),     # the name says nothing: the dtype's roof
    ("tf32", "conv", "fp32", "fp32"),   # fp32 conv on scudnn: SIMT, not cuDNN's default TF32
    ("tf32", "conv", "tf32", "tf32"),
    ("bf16", "gemm", "tf32", "bf16"),   # only fp32 matrix work follows the kernel
    ("fp32", "elementwise", "tf32", "fp32"),  # vector work never runs on tensor cores
    ("fp64", "gemm", "fp32", "fp64"),
])
def test_roof_dtype_follows_the_math(dtype: str, kind: str, math: str | None, expected: str) -> None:
    assert roof_dtype_for_math(dtype, kind, math) == expected


# --------------------------------------------------------------------------------------------
# physical bytes from strides
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,strides,expected", [
    ((4096, 2048), (0, 1), 2048),        # a [2048] row expanded over 4096 rows
    ((4096, 2048), (1, 0), 4096),        # a [4096, 1] column expanded over 2048 columns
    ((8, 512, 2048), (1048576, 2048, 1), 8 * 512 * 2048),  # contiguous: its size
    ((16, 559, 1024), (559, 1, 0), 16 * 559),  # [16, 559, 1] expanded on the last dim
    ((4, 2), (10, 1), 8),                # a gappy slice: its elements, not its span (32)
    ((10, 4), (1, 1), 13),               # overlapping windows (unfold): its span
    ((3, 0, 5), (0, 5, 1), 0),           # empty
    ((), (), 1),                         # a 0-dim tensor
    ((7, 3), None, 21),                  # no strides recorded: its size
    ((7, 3), (3,), 21),                  # strides that do not fit the shape: its size
])
def test_storage_elements_hand_computed(shape: tuple[int, ...], strides: Any, expected: int) -> None:
    assert storage_elements(shape, strides) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.data())
def test_an_expanded_view_costs_its_source(shape: list[int], data: st.DataObject) -> None:
    """Expanding a contiguous tensor (its size-1 dims to any size, stride 0) never changes the
    bytes its storage costs; and storage never exceeds the view's size."""
    src = [d if data.draw(st.booleans()) else 1 for d in shape]
    contiguous = [math.prod(src[i + 1:]) for i in range(len(src))]
    strides = [0 if s == 1 and d != 1 else c for s, d, c in zip(src, shape, contiguous)]
    assert storage_elements(shape, strides) == math.prod(src)
    assert storage_elements(shape, strides) <= math.prod(shape)


def test_gather_with_an_expanded_index_reads_its_storage() -> None:
    """The issue's gather: an int64 [4096, 2048] index expanded from [4096, 1] is 32 KB, not
    67 MB; the gathered bf16 elements are read and written (2 x 16.8 MB)."""
    dims = [[32000, 2048], [], [4096, 2048], [], [4096, 2048]]
    types = [BF16, "Scalar", "long int", "Scalar", BF16]
    view = op_cost("aten::gather", dims, types)
    phys = op_cost("aten::gather", dims, types, input_strides=[[2048, 1], [], [1, 0], [], [2048, 1]])
    n = 4096 * 2048
    assert view.bytes == n * 8 + 2 * n * 2
    assert phys.bytes == 4096 * 8 + 2 * n * 2
    assert phys.flops == view.flops == 0


@pytest.mark.parametrize("name,dims,types,strides,expected", [
    # a bf16 [16,559,1] scale expanded to [16,559,1024]: read once, output written whole
    ("aten::mul", [[16, 559, 1024], [16, 559, 1024]], [BF16, BF16], [[572416, 1024, 1], [559, 1, 0]],
     2 * (16 * 559 * 1024) + 2 * 16 * 559 + 2 * (16 * 559 * 1024)),
    # copy_ of an expanded source into a contiguous destination: source storage + what is written
    ("aten::copy_", [[64, 128], [64, 128], []], ["float", "float", "Scalar"], [[128, 1], [0, 1], []],
     4 * 128 + 4 * 64 * 128),
    # clone of an expanded tensor: storage read, full size written
    ("aten::clone", [[32, 1000], []], ["float", "Scalar"], [[0, 1], []], 4 * 1000 + 4 * 32 * 1000),
    # a reduction over an expanded input reads its storage
    ("aten::sum", [[128, 256], [], [], []], ["float", "", "", ""], [[1, 0], [], [], []], 4 * 128 + 4),
    # contiguous inputs: the same bytes as without strides
    ("aten::add", [[8, 512, 2048], [8, 512, 2048], []], [BF16, BF16, "Scalar"],
     [[1048576, 2048, 1], [1048576, 2048, 1], []], 3 * 2 * 8 * 512 * 2048),
])
def test_bytes_from_strides_hand_computed(name: str, dims: list[Any], types: list[str], strides: list[Any],
                                          expected: int) -> None:
    with_strides = op_cost(name, dims, types, input_strides=json.dumps(strides))
    without = op_cost(name, dims, types)
    assert with_strides is not None and with_strides.bytes == expected
    assert with_strides.flops == without.flops  # FLOPs never depend on strides


def test_gemm_flops_unchanged_by_strides() -> None:
    """A transposed (strided) weight is still read whole; FLOPs are FlopCounterMode's."""
    dims, types = [[64, 128], [128, 256]], ["float", "float"]
    a = op_cost("aten::mm", dims, types)
    b = op_cost("aten::mm", dims, types, input_strides=[[128, 1], [1, 128]])
    assert a == b and a.flops == 2 * 64 * 128 * 256


# --------------------------------------------------------------------------------------------
# settling work measured above its roof
# --------------------------------------------------------------------------------------------

ROOF = Roof("test", "spec", {"fp32": 60e12, "bf16": 1e15}, 3e12, None,
            caches=(("L2", 50 * 2**20, 10e12),))
ROOF_NO_L2_BW = Roof("test", "spec", {"fp32": 60e12}, 3e12, None, caches=(("L2", 50 * 2**20, None),))


def test_under_the_roof_is_left_alone() -> None:
    assert settle_over_roof(10.0, 9.0, 0.0, 27e6, 27e6, "fp32", ROOF) is None
    assert settle_over_roof(10.0, None, 0.0, 27e6, 27e6, "fp32", ROOF) is None


def test_above_hbm_fits_l2_is_cache_bound_against_l2() -> None:
    s = settle_over_roof(14.2, 16.8, 0.0, 50.3e6, 50.3e6, "fp32", ROOF)
    assert s["bound"] == "cache_bound" and not s["model_error"] and s["cache"] == "L2"
    assert s["roof_us"] == pytest.approx(50.3e6 / 10e12 * 1e6)
    assert s["pct_of_roof"] == pytest.approx(s["roof_us"] / 14.2) and s["pct_of_roof"] <= 1


def test_cache_bound_without_a_published_bandwidth_has_no_percent() -> None:
    s = settle_over_roof(14.2, 16.8, 0.0, 50.3e6, 50.3e6, "fp32", ROOF_NO_L2_BW)
    assert s["bound"] == "cache_bound" and s["pct_of_roof"] is None and s["roof_us"] is None
    assert "not in the spec database" in s["reason"]


@pytest.mark.parametrize("time_us,roof_us,flops,nbytes,ws,link", [
    (10.0, 30.0, 0.0, 90e6, 90e6, None),            # working set larger than L2
    (1.0, 30.0, 0.0, 40e6, 40e6, None),             # faster than the L2 roof too
    (100.0, 300.0, 1.8e10, 1e6, 1e6, None),         # compute faster than the peak
    (10.0, 20.0, 0.0, 1e6, 1e6, "host_link"),       # copies faster than the host link
])
def test_otherwise_a_model_error_with_no_percent(time_us: float, roof_us: float, flops: float, nbytes: float,
                                                 ws: float, link: str | None) -> None:
    s = settle_over_roof(time_us, roof_us, flops, nbytes, ws, "fp32", ROOF, link=link)
    assert s["model_error"] and s["bound"] is None
    assert s["pct_of_roof"] is None and s["roof_us"] is None and s["saved_us"] is None
    assert s["reason"].startswith("model_error")


@settings(max_examples=80, deadline=None)
@given(st.floats(0.01, 1e5), st.floats(0.01, 1e6), st.floats(0, 1e15), st.floats(0, 1e10),
       st.sampled_from([None, "host_link", "device_memory"]), st.sampled_from([ROOF, ROOF_NO_L2_BW]))
def test_settled_work_is_never_above_its_roof(time_us: float, roof_us: float, flops: float, nbytes: float,
                                              link: str | None, roof: Roof) -> None:
    s = settle_over_roof(time_us, roof_us, flops, nbytes, nbytes, "fp32", roof, link=link)
    if s is None:
        assert roof_us <= time_us * (1 + 1e-9)
    else:
        assert s["pct_of_roof"] is None or s["pct_of_roof"] <= 1 + 1e-9
        assert s["model_error"] == (s["bound"] is None)


# --------------------------------------------------------------------------------------------
# end to end: the three cases, and a model error
# --------------------------------------------------------------------------------------------

def _one_op_trace(path: Path, props: list[dict[str, Any]], name: str, dims: list[Any], types: list[str],
                  strides: list[Any] | None, kname: str, dur_us: float) -> Path:
    op = cpu_op(name, 100, 5, ext=1, dims=dims, types=types)
    if strides is not None:
        op["args"]["Input Strides"] = strides
    events = [op, runtime("cudaLaunchKernel", 101, 2, corr=1, ext=1), kernel(kname, 200, dur_us, corr=1)]
    return write_trace(path, events, deviceProperties=props)


def _entries(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["ops"]) + list(doc["kernels"])


def _never_above(doc: dict[str, Any]) -> None:
    for e in _entries(doc):
        assert e.get("pct_of_roof") is None or e["pct_of_roof"] <= 1 + 1e-9, (e["name"], e["pct_of_roof"])


def test_fp32_mm_on_a_tf32_kernel_is_judged_against_tf32(tmp_path: Path, db: Path) -> None:
    """The A100 case: 2 x 4096^3 FLOPs in 1239 µs was 569 % of the fp32 SIMT roof."""
    n = 4096
    path = _one_op_trace(tmp_path / "mm.json", A100_PROPS, "aten::mm", [[n, n], [n, n]], ["float", "float"], None,
                         "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1>"
                         "(cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1::Params)", 1239.0)
    doc = run_cli("analyze", str(path), "--json").json()
    mm = next(o for o in doc["ops"] if o["name"] == "aten::mm")
    assert mm["dtype"] == "tf32" and mm["bound"] == "compute_bound" and not mm["model_error"]
    assert mm["flops"] == 2 * n**3  # FLOPs are FlopCounterMode's, whatever the math
    assert mm["pct_of_roof"] == pytest.approx(2 * n**3 / 156e12 * 1e6 / 1239.0)
    _never_above(doc)


def test_fp32_mm_on_a_simt_kernel_keeps_the_fp32_roof(tmp_path: Path, db: Path) -> None:
    path = _one_op_trace(tmp_path / "mm.json", A100_PROPS, "aten::mm", [[1024, 1024], [1024, 1024]],
                         ["float", "float"], None, "ampere_sgemm_128x64_nn", 200.0)
    doc = run_cli("analyze", str(path), "--json").json()
    mm = next(o for o in doc["ops"] if o["name"] == "aten::mm")
    assert mm["dtype"] == "fp32"
    assert mm["pct_of_roof"] == pytest.approx(2 * 1024**3 / 19.5e12 * 1e6 / 200.0)


def test_add_whose_operands_sat_in_l2_is_cache_bound(tmp_path: Path, db: Path) -> None:
    """The H100 case: 3 x 16.8 MB in 14.2 µs is 106 % of HBM; 50.3 MB fits the 50 MiB L2."""
    s = [1048576, 2048, 1]
    path = _one_op_trace(tmp_path / "add.json", H100_PROPS, "aten::add", [[8, 512, 2048], [8, 512, 2048], []],
                         [BF16, BF16, "Scalar"], [s, s, []], "vectorized_elementwise_kernel_add", 14.2)
    doc = run_cli("analyze", str(path), "--json").json()
    add = next(o for o in doc["ops"] if o["name"] == "aten::add")
    k = next(x for x in doc["kernels"] if x["name"] == "vectorized_elementwise_kernel_add")
    for e in (add, k):
        assert e["bound"] == "cache_bound" and not e["model_error"] and e["cache"] == "L2"
    assert doc["roofline_us"]["cache_bound"] == pytest.approx(14.2)
    assert sum(doc["roofline_us"].values()) == pytest.approx(doc["time_us"]["compute"])
    _never_above(doc)
    text = run_cli("analyze").out
    assert "cache-bound" in text


def test_gather_with_expanded_index_is_under_its_roof(tmp_path: Path, db: Path) -> None:
    """The H100 case: 224 % of HBM when the index's view (67 MB) was counted."""
    path = _one_op_trace(tmp_path / "g.json", H100_PROPS, "aten::gather",
                         [[32000, 2048], [], [4096, 2048], [], [4096, 2048]],
                         [BF16, "Scalar", "long int", "Scalar", BF16], [[2048, 1], [], [1, 0], [], [2048, 1]],
                         "void at::native::vectorized_gather_kernel<16, long>", 13.4)
    doc = run_cli("analyze", str(path), "--json").json()
    g = next(o for o in doc["ops"] if o["name"] == "aten::gather")
    assert g["bytes"] == 4096 * 8 + 2 * 4096 * 2048 * 2
    assert g["bound"] == "memory_bound" and 0.5 < g["pct_of_roof"] < 1
    _never_above(doc)


def test_a_model_that_overshoots_every_roof_is_a_model_error(tmp_path: Path, db: Path) -> None:
    """A bf16 GEMM measured 4x faster than the H100's bf16 peak allows: no cache can explain
    it; flagged, counted in a note, no percent shown in JSON or text."""
    n = 8192
    path = _one_op_trace(tmp_path / "bad.json", H100_PROPS, "aten::mm", [[n, n], [n, n]], [BF16, BF16], None,
                         "sm90_xmma_gemm_bf16bf16_bf16f32", 300.0)
    doc = run_cli("analyze", str(path), "--json").json()
    mm = next(o for o in doc["ops"] if o["name"] == "aten::mm")
    k = next(x for x in doc["kernels"] if x["name"] == "sm90_xmma_gemm_bf16bf16_bf16f32")
    for e in (mm, k):
        assert e["model_error"] and e["pct_of_roof"] is None and e["roof_us"] is None
    note = [n for n in doc["notes"] if n.startswith("model_error")]
    assert len(note) == 1 and "aten::mm" in note[0] and "1 op signature" in note[0]
    text = run_cli("analyze").out
    assert "model err" in text and "%" not in [w for w in text.split() if w.endswith("%") and w[:-1].isdigit()
                                                and int(w[:-1]) > 100]


# --------------------------------------------------------------------------------------------
# every shared real trace
# --------------------------------------------------------------------------------------------

def _shared_units() -> list[tuple[str, list[Path]]]:
    if not SHARED_TRACES.is_dir():
        return []
    units: list[tuple[str, list[Path]]] = []
    grouped: set[Path] = set()
    for d in sorted(p for p in SHARED_TRACES.rglob("*") if p.is_dir()):
        files = sorted(d.glob("*.json.gz"))
        if len(files) > 1 and any("capture" in f.name for f in files):
            units.append((str(d.relative_to(SHARED_TRACES)), files))
            grouped.update(files)
    units += [(str(f.relative_to(SHARED_TRACES)), [f]) for f in sorted(SHARED_TRACES.rglob("*.json.gz"))
              if f not in grouped]
    return units


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/data/traces is absent")
@pytest.mark.parametrize("unit", _shared_units() or [("none", [])], ids=lambda u: u[0])
def test_no_entry_above_its_roof_on_a_shared_trace(unit: tuple[str, list[Path]], tmp_path: Path) -> None:
    from gpuscope.analyzers.breakdown import analyze_run
    from gpuscope.ingest import ingest
    from gpuscope.store import connect

    name, files = unit
    store = tmp_path / "s.duckdb"
    res = ingest(store, [str(f) for f in files], name=name)
    con = connect(store)
    try:
        doc = analyze_run(con, res.run_id)
    finally:
        con.close()
    _never_above(doc)
    for e in _entries(doc):
        assert not (e.get("model_error") and e.get("pct_of_roof") is not None)


def test_copy_activities_are_never_above_their_roof(tmp_path: Path, db: Path) -> None:
    """A 16 MB device-to-device copy in 7 µs (32 MB through memory: 4.6 TB/s, above the H100's
    3.35 TB/s HBM) fits L2: cache_bound; a 64 MB host-to-device copy in 100 µs (640 GB/s) beats
    any PCIe link: a model error (a cache cannot speed up the host link)."""
    mb16, mb64 = 16 * 2**20, 64 * 2**20
    events = [kernel("Memcpy DtoD (Device -> Device)", 100, 7.0, corr=1, cat="gpu_memcpy", bytes=mb16),
              kernel("Memcpy HtoD (Pinned -> Device)", 200, 100.0, corr=2, cat="gpu_memcpy", bytes=mb64)]
    doc = run_cli("analyze", str(write_trace(tmp_path / "c.json", events, deviceProperties=H100_PROPS)),
                  "--json").json()
    k = {x["name"]: x for x in doc["kernels"]}
    dtod, htod = k["Memcpy DtoD (Device -> Device)"], k["Memcpy HtoD (Pinned -> Device)"]
    assert dtod["bound"] == "cache_bound" and not dtod["model_error"]
    assert dtod["pct_of_roof"] is None or dtod["pct_of_roof"] <= 1
    assert htod["model_error"] and htod["pct_of_roof"] is None
    assert any("Memcpy HtoD" in n for n in doc["notes"] if n.startswith("model_error"))
    _never_above(doc)
