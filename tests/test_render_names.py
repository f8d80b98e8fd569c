"""Kernel names shortened for tables stay distinct: namespaces, template arguments and
parameters go first; names that still collide show where they differ."""
from __future__ import annotations

import pytest

from gpuscope.render.names import distinct_names, fit, simplify

ELEMENTWISE = [
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda"
    "(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::"
    "{lambda(float)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)::"
    "{lambda(int)#1}>(int, at::native::gpu_kernel_impl<...>)",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor"
    "<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >"
    "(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16> const&)::{lambda(int)#1}>(int, ...)",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add"
    "<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::"
    "{lambda(int)#1}>(int, ...)",
]
TENSILE = [
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
    "CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA128_LBSPPB128_LBSPPM0_"
    "LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV1_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NEPBS0_NLCA1_NLCB1_ONLL1_PGR2_"
    "PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_SK3_SKXCCM8_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA1_VWB1_"
    "WSGRA0_WSGRB0_WS64_WG32_8_1",
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
    "CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA128_LBSPPB128_LBSPPM0_"
    "LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV1_MIWT1_1_MO40_NTn1_NTA4_NTB0_NTC0_NTD0_NEPBS0_NLCA1_NLCB1_ONLL1_PGR2_"
    "PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_SK3_SKXCCM8_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA1_VWB1_"
    "WSGRA0_WSGRB0_WS64_WG32_8_1",
]


@pytest.mark.parametrize("width", [24, 36, 60])
@pytest.mark.parametrize("names", [ELEMENTWISE, TENSILE, ELEMENTWISE + TENSILE], ids=["at::native", "tensile", "both"])
def test_shortened_names_stay_distinct_and_fit(names: list[str], width: int) -> None:
    shown = distinct_names(names, width)
    assert len(set(shown)) == len(names), shown
    assert all(len(s) <= width for s in shown)


def test_simplify_keeps_the_function_or_the_real_kernel() -> None:
    assert simplify(ELEMENTWISE[0]) == "elementwise_kernel"
    assert simplify("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)") \
        == "multimem_all_reduce_kernel"
    assert simplify("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
                    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)") == "fused_add_rms_norm_kernel"
    assert simplify("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>"
                    "(cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1::Params)") == \
        "cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1"
    assert simplify("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)") == \
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"
    assert simplify("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD (Device -> Device)"
    assert simplify(TENSILE[0]) == TENSILE[0]


def test_a_unique_name_is_only_simplified_and_fitted() -> None:
    assert distinct_names(["void at::native::vectorized_elementwise_kernel<4, X>(int, X)"], 40) == [
        "vectorized_elementwise_kernel"]
    assert fit("abcdefghijklmnopqrstuvwxyz", 10) == "abcdef…xyz"


def test_analyze_shows_distinct_names_and_wide_shows_them_whole(db) -> None:
    from conftest import kernel, run_cli, write_trace
    import tempfile
    from pathlib import Path

    tmp = Path(tempfile.mkdtemp())
    events = [kernel(n, float(i * 100), 50.0 - i) for i, n in enumerate(ELEMENTWISE + TENSILE)]
    assert run_cli("ingest", write_trace(tmp / "t.json", events), "-q").code == 0
    text = run_cli("analyze").out
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("kernel ")) + 2
    rows = lines[start:start + 5]
    names = [ln.split("  ")[0] for ln in rows]
    assert len(names) == 5 and len(set(names)) == 5, rows
    wide = run_cli("analyze", "--wide").out
    assert all(n in wide for n in TENSILE) and ELEMENTWISE[1].split("(")[0] in wide
    doc = run_cli("analyze", "--json").json()
    assert {k["name"] for k in doc["kernels"]} == set(ELEMENTWISE + TENSILE)  # JSON: whole names


CUTLASS = ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_{tile}_16x4_tn_align4>"
           "(cutlass_80_tensorop_s1688gemm_{tile}_16x4_tn_align4::Params)")


def test_colliding_kernels_keep_their_core_names_not_the_parameter_list() -> None:
    names = [CUTLASS.format(tile="256x64"), CUTLASS.format(tile="128x128")]
    # 43 columns: the simplified names (51 and 52 characters) cut head-and-tail look the same;
    # the head of the core name and its stretch from where the two differ stay
    assert distinct_names(names, 43) == ["cutlass_80_tensorop…m_256x64_16x4_tn_align4",
                                         "cutlass_80_tensoro…m_128x128_16x4_tn_align4"]
    for width in (20, 30, 43):
        shown = distinct_names(names, width)
        assert len(set(shown)) == 2 and all(len(s) <= width and "Params" not in s for s in shown), shown


def test_commands_keep_the_script_and_its_arguments() -> None:
    from gpuscope.render.names import fit_commands

    long_dir = "/tmp/pytest-of-root/pytest-513/test_many_runs_are_listed0/traces"
    assert fit_commands([f"gpuscope ingest {long_dir}/h100_llama.json.gz"], 40) == ["gpuscope ingest …/h100_llama.json.gz"]
    assert fit_commands([f"python {long_dir}/serve.py --out={long_dir}/o.json --tp 2"], 50) == \
        ["python …/serve.py --out=…/o.json --tp 2"]
    assert fit_commands(["python serve.py"], 10) == [fit("python serve.py", 10)]  # no directory to drop


def test_runs_table_tells_two_long_commands_apart_at_120_columns() -> None:
    from gpuscope.render.runs import render_runs

    base = {"status": "complete", "source": "run", "started_ns": None, "ended_ns": None, "samples": 0,
            "kernels": 0, "ops": 0, "exit_code": 0}
    cmd = "python /home/someone/projects/very/deep/checkout/of/the/serving/stack/benchmarks/serve_bench.py --model {m} --tp 8"
    runs = [dict(base, id=1, name="a", command=cmd.format(m="llama-3.1-70b")),
            dict(base, id=2, name="b", command=cmd.format(m="qwen2.5-72b"))]
    text = render_runs(runs, width=120)
    assert max(len(line) for line in text.splitlines()) <= 120
    rows = [line.split("  ")[-1] for line in text.splitlines()[2:]]
    assert rows[0] != rows[1] and all(r.startswith("python …/serve_bench.py --model ") for r in rows), rows
    assert "llama" in rows[0] and "qwen" in rows[1] and all(r.endswith("--tp 8") for r in rows), rows
