"""TensorList ops (cat, stack, _foreach_*): the profiler records their tensors' shapes but not
their dtypes ("TensorList"); the element size comes from the launched kernel's name."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuscope.analyzers.costmodel import op_cost
from gpuscope.kernel_names import kernel_element_bytes

from conftest import cpu_op, kernel, run_cli, runtime, shared_trace, write_trace

CAT2 = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::"
        "OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<2u>*, "
        "at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::"
        "OpaqueType<2u>, unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, "
        "4u>, int, unsigned int)")
COPY_BF16 = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
             "TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<c10::BFloat16, 2, 1, 1>, "
             "at::native::Copy<c10::BFloat16, c10::BFloat16> >(at::native::(anonymous namespace)::"
             "TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<c10::BFloat16, 2, 1, 1>, "
             "at::native::Copy<c10::BFloat16, c10::BFloat16>)")


@pytest.mark.parametrize("name,size", [
    (CAT2, 2),
    (CAT2.replace("OpaqueType<2u>", "OpaqueType<4u>"), 4),
    # Nsight's demangling writes template integers with their type
    ("void at::native::<unnamed>::CatArrayBatchedCopy<at::native::<unnamed>::OpaqueType<(unsigned int)8>, "
     "unsigned int, (int)3, (int)128, (int)1>(T1 *, T2)", 8),
    (COPY_BF16, 2),
    (COPY_BF16.replace("c10::BFloat16", "float"), 4),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, "
     "at::native::<unnamed>::BinaryOpListAlphaFunctor<c10::Half, (int)2, (int)2, (int)0>, std::plus<float>, "
     "float>(T1, T2, T3...)", 2),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", None),
    ("multi_tensor_apply_kernel<TensorListMetadata<2>, UnaryOpFunctor<MyType, 2, 1, 1>>", None),
    ("", None), (None, None),
])
def test_element_size_from_kernel_names(name: str | None, size: int | None) -> None:
    assert kernel_element_bytes(name) == size


def test_cat_and_foreach_copy_costs_by_hand() -> None:
    dims = [[[16, 16, 559, 32], [16, 16, 559, 32]], []]
    n = 2 * 16 * 16 * 559 * 32
    c = op_cost("aten::cat", dims, ["TensorList", "Scalar"], ["", "-1"], element_bytes=2)
    assert (c.flops, c.bytes, c.kind) == (0, 2 * n * 2, "copy")  # read once, written once
    assert "element size from the kernel" in c.model
    # without the kernel's word the bytes stay unknown
    assert op_cost("aten::cat", dims, ["TensorList", "Scalar"], ["", "-1"]).bytes is None
    # _foreach_copy_(self, src, non_blocking): src read, self written
    fc = op_cost("aten::_foreach_copy_", [[[4, 8], [16]], [[4, 8], [16]], []], ["TensorList", "TensorList", "Scalar"],
                 ["", "", "False"], element_bytes=2)
    assert (fc.flops, fc.bytes) == (0, (48 + 48) * 2)
    # _foreach_add_(self, other): both read, self written; one FLOP per element
    fa = op_cost("aten::_foreach_add_", [[[4, 8], [16]], [[4, 8], [16]]], ["TensorList", "TensorList"], ["", ""],
                 element_bytes=4)
    assert (fa.flops, fa.bytes) == (48, 3 * 48 * 4)
    assert op_cost("aten::_foreach_copy_", [[[4, 8]], [[4, 8], [16]], []], ["TensorList", "TensorList", "Scalar"],
                   ["", "", "False"], element_bytes=2) is None  # lists of different lengths
    assert op_cost("aten::_foreach_copy_", [[[4, 8]], [[4, 8]], []], ["TensorList", "TensorList", "Scalar"],
                   ["", "", "False"]) is None  # no element size: not costed


H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592, "computeMajor": 9,
         "computeMinor": 0, "numSms": 132, "warpSize": 32}]


def test_analysis_reads_the_element_size_from_the_launched_kernel(tmp_path: Path, db: Path) -> None:
    shapes = [[[64, 1024], [64, 1024]], []]
    op = cpu_op("aten::cat", 100, 20, 1, shapes, ["TensorList", "Scalar"])
    op["args"]["Concrete Inputs"] = ["", "0"]
    ev: list[dict[str, Any]] = [
        op,
        runtime("cudaLaunchKernel", 101, 5, 1, 1),
        kernel(CAT2, 110, 4.0, 1),
    ]
    doc = run_cli("analyze", str(write_trace(tmp_path / "t.json", ev, deviceProperties=H100)), "--json").json()
    (op,) = [o for o in doc["ops"] if o["name"] == "aten::cat"]
    assert op["bytes"] == 2 * (2 * 64 * 1024) * 2
    assert doc["coverage"]["share"] == pytest.approx(1.0)


def test_shared_qwen_cat_is_judged(db: Path) -> None:
    path = shared_trace("tracelens/qwen1.5-0.5b-chat/h100.json.gz")
    doc = run_cli("analyze", str(path), "--json").json()
    cats = [o for o in doc["ops"] if o["name"] == "aten::cat"]
    assert cats and all(o["bytes"] and o["bound"] != "unknown" for o in cats)
