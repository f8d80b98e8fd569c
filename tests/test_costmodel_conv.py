"""Convolutions: FLOPs equal torch.utils.flop_counter.FlopCounterMode for the same calls, read
from a real torch.profiler trace through gpuscope's ingest and analysis (GPU-only backends from
events written after torch's own op schemas); bytes count input, weight, bias and output once;
nested conv ops reach the roofline once; no Concrete Inputs means no guess, said once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cpu_op, kernel, run_cli, runtime, shared_trace, write_trace

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (id, input shape, weight shape, bias?, keyword arguments, transposed?)
CASES = [
    ("conv1d", (2, 4, 33), (6, 4, 5), True, {}, False),
    ("conv1d stride pad dilation", (3, 5, 41), (7, 5, 3), True, dict(stride=2, padding=3, dilation=2), False),
    ("conv1d depthwise causal (Mamba)", (2, 16, 37), (16, 1, 4), True, dict(padding=3, groups=16), False),
    ("conv2d 3x3 odd sizes", (3, 3, 17, 19), (8, 3, 3, 3), True, dict(padding=1), False),
    ("conv2d 7x7 stride 2", (2, 3, 29, 31), (12, 3, 7, 7), False, dict(stride=2, padding=3), False),
    ("conv2d ViT patch embed", (2, 3, 28, 42), (16, 3, 14, 14), True, dict(stride=14), False),
    ("conv2d grouped dilated", (2, 8, 15, 13), (12, 2, 3, 3), True, dict(groups=4, dilation=2, padding=2), False),
    ("conv2d depthwise", (4, 10, 11, 9), (10, 1, 5, 5), False, dict(groups=10, padding=2), False),
    ("conv2d 1x1", (5, 6, 7, 7), (9, 6, 1, 1), True, {}, False),
    ("conv3d strided", (2, 3, 7, 9, 11), (4, 3, 3, 3, 3), True, dict(stride=(1, 2, 2), padding=1), False),
    ("conv3d grouped", (1, 4, 6, 7, 8), (6, 2, 2, 3, 3), False, dict(groups=2), False),
    ("conv_transpose1d", (2, 6, 13), (6, 3, 4), True, dict(stride=2, output_padding=1), True),
    ("conv_transpose2d grouped", (2, 4, 9, 7), (4, 3, 3, 3), True, dict(stride=2, padding=1, groups=2), True),
    ("conv_transpose3d dilated", (1, 2, 5, 6, 7), (2, 3, 3, 3, 3), False, dict(stride=2, dilation=2, output_padding=1), True),
    ("conv_transpose2d anisotropic", (3, 5, 6, 8), (5, 4, 3, 2), True,
     dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2), dilation=(1, 2)), True),
    ("conv3d depthwise", (2, 6, 5, 7, 9), (6, 1, 3, 3, 3), True, dict(groups=6, padding=1, stride=2), False),
    ("conv1d depthwise multiplier", (3, 4, 19), (8, 1, 3), False, dict(groups=4, padding=2, dilation=2), False),
]
BACKWARD = {"conv2d 3x3 odd sizes", "conv1d depthwise causal (Mamba)", "conv_transpose2d grouped"}


def _call(x, w, b, kw, transposed):
    nsp = x.dim() - 2
    if transposed:
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nsp - 1]
    else:
        fn = (F.conv1d, F.conv2d, F.conv3d)[nsp - 1]
    return fn(x, w, b, **kw)


def _tensors(case, grad: bool):
    _, xs, ws, bias, kw, transposed = case
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*xs, generator=gen, requires_grad=grad)
    w = torch.randn(*ws, generator=gen, requires_grad=grad)
    c_out = ws[1] * kw.get("groups", 1) if transposed else ws[0]
    b = torch.randn(c_out, generator=gen, requires_grad=grad) if bias else None
    return x, w, b


def _flop_counter(case) -> tuple[int, int | None]:
    from torch.utils.flop_counter import FlopCounterMode

    x, w, b = _tensors(case, grad=case[0] in BACKWARD)
    with FlopCounterMode(display=False) as fc:
        y = _call(x, w, b, case[4], case[5])
        if case[0] in BACKWARD:
            y.sum().backward()
    counts = fc.get_flop_counts()["Global"]
    aten = torch.ops.aten
    return counts[aten.convolution], counts.get(aten.convolution_backward)


@pytest.fixture(scope="module")
def analysis(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("conv")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for case in CASES:
            x, w, b = _tensors(case, grad=case[0] in BACKWARD)
            y = _call(x, w, b, case[4], case[5])
            if case[0] in BACKWARD:
                y.sum().backward()
    trace = tmp / "conv.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    r = run_cli("analyze", trace, "--db", tmp / "s.duckdb", "--json")
    assert r.code == 0, r.err
    return r.json()


def _entry(doc: dict, name: str, first_dims: list[list[int]]) -> dict:
    found = [o for o in doc["ops"] if o["name"] == name and o["input_dims"][: len(first_dims)] == first_dims]
    assert len(found) == 1, (name, first_dims, [o["input_dims"][:2] for o in doc["ops"] if o["name"] == name])
    return found[0]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward_flops_equal_flop_counter(case, analysis) -> None:
    expected, _ = _flop_counter(case)
    _, xs, ws, bias, kw, transposed = case
    op = _entry(analysis, "aten::convolution", [list(xs), list(ws)])
    assert op["flops"] == expected
    # the public entry point and the backend op carry the same cost
    public = "aten::conv_transpose%dd" % (len(xs) - 2) if transposed else "aten::conv%dd" % (len(xs) - 2)
    assert _entry(analysis, public, [list(xs), list(ws)])["flops"] == expected


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in BACKWARD], ids=lambda c: c[0])
def test_backward_flops_equal_flop_counter(case, analysis) -> None:
    _, expected = _flop_counter(case)
    _, xs, ws, *_ = case
    op = next(o for o in analysis["ops"] if o["name"] == "aten::convolution_backward"
              and o["input_dims"][1:3] == [list(xs), list(ws)])
    assert expected and op["flops"] == expected


@pytest.mark.parametrize("case", [CASES[3], CASES[4], CASES[11]], ids=lambda c: c[0])
def test_bytes_are_input_weight_bias_and_output_once(case, analysis) -> None:
    x, w, b = _tensors(case, grad=False)
    y = _call(x, w, b, case[4], case[5])
    expected = 4 * (x.numel() + w.numel() + (b.numel() if b is not None else 0) + y.numel())
    op = _entry(analysis, "aten::convolution", [list(case[1]), list(case[2])])
    assert op["bytes"] == expected


def test_without_concrete_inputs_no_guess_and_one_note(tmp_path: Path, analysis) -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for case in CASES[:4]:
            _call(*_tensors(case, grad=False), case[4], case[5])
    trace = tmp_path / "t.json"
    prof.export_chrome_trace(str(trace))
    doc = json.loads(trace.read_text())
    for e in doc["traceEvents"]:
        e.get("args", {}).pop("Concrete Inputs", None)  # as older torch writes it
    trace.write_text(json.dumps(doc))
    r = run_cli("analyze", trace, "--db", tmp_path / "s.duckdb", "--json")
    assert r.code == 0, r.err
    out = r.json()
    convs = [o for o in out["ops"] if "conv" in o["name"]]
    assert convs and all(o["flops"] is None and o["bytes"] is None for o in convs)
    notes = [n for n in out["notes"] if "Concrete Inputs" in n]
    assert len(notes) == 1
    # one call per convolution, not one per nesting level (conv2d > convolution > _convolution > ...)
    assert notes[0].startswith("4 convolution call(s) have no FLOPs or bytes")
    # with them (the module fixture's trace) there is no such note
    assert not [n for n in analysis["notes"] if "Concrete Inputs" in n]


def test_without_shapes_the_note_says_so(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:  # record_shapes off
        for case in CASES[3:6]:
            _call(*_tensors(case, grad=False), case[4], case[5])
    trace = tmp_path / "noshapes.json"
    prof.export_chrome_trace(str(trace))
    out = run_cli("analyze", trace, "--db", tmp_path / "s.duckdb", "--json").json()
    notes = [n for n in out["notes"] if "convolution call(s)" in n]
    assert len(notes) == 1 and notes[0].startswith("3 convolution call(s)")
    assert "no input shapes" in notes[0] and "record_shapes=True" in notes[0]


def test_real_trace_without_shapes_one_note_per_convolution(tmp_path: Path) -> None:
    # HTA's AlexNet trace (A100): 10 conv2d calls, each conv2d > convolution > _convolution >
    # cudnn_convolution, recorded without shapes
    out = run_cli("analyze", shared_trace("hta/a100_alexnet.json.gz"), "--db", tmp_path / "s.duckdb", "--json").json()
    notes = [n for n in out["notes"] if "convolution call(s)" in n]
    assert notes == ["10 convolution call(s) have no FLOPs or bytes: the trace records no input shapes "
                     "(profile with record_shapes=True to cost them)"]
    assert all(o["flops"] is None for o in out["ops"] if "conv" in o["name"])


# --------------------------------------------------------------------------------------------
# Backend ops that only run on a GPU (cuDNN, MIOpen, CUDA's depthwise kernels) or only in some
# builds: their trace events are written from torch's own schema of the op, with each argument
# recorded the way the profiler records it (tensors: dims and dtype; int lists: "[a, b]";
# ints and bools as text; None and strings: empty), and costed through `gpuscope analyze`.

_TRANSPOSED_ONLY = ("transpose",)
_DEPTHWISE_ONLY = {"aten::_conv_depthwise2d", "aten::conv_depthwise3d"}
#: forward convolution ops of torch that gpuscope does not model, and why
_NOT_MODELLED = {
    "aten::conv_tbc": "time-batch-channel layout (fairseq), no FlopCounterMode formula",
    "aten::_mps_convolution": "Apple GPUs", "aten::_mps_convolution_transpose": "Apple GPUs",
}


def _spatial(v, nsp: int) -> list[int]:
    return list(v) if isinstance(v, (tuple, list)) else [v] * nsp


def _schema_event(name: str, case, ts: float, ext: int) -> dict | None:
    """A cpu_op event of ``name`` for the convolution ``case``, or None when the op cannot
    express that convolution (no groups argument, fixed 2-D lists, transposed or not...)."""
    _, xs, ws, bias, kw, transposed = case
    nsp = len(xs) - 2
    groups = kw.get("groups", 1)
    # the default overload (conv_transpose*d has only "input"; conv2d's "padding" takes a string)
    schema = min(torch._C._jit_get_schemas_for_operator(name), key=lambda s: s.overload_name not in ("", "input"))
    args = {a.name: a for a in schema.arguments}
    if "transposed" not in args and transposed != any(t in name for t in _TRANSPOSED_ONLY):
        return None
    if "groups" not in args and groups != (xs[1] if name in _DEPTHWISE_ONLY else 1):
        return None
    if name in _DEPTHWISE_ONLY and ws[1] != 1:
        return None
    if "dilation" not in args and _spatial(kw.get("dilation", 1), nsp) != [1] * nsp:
        return None
    if any(a.N is not None and a.N != nsp for a in schema.arguments if str(a.type) == "List[int]"):
        return None
    x, w, b = _tensors(case, grad=False)
    y = _call(x, w, b, kw, transposed)
    values = {
        "stride": _spatial(kw.get("stride", 1), nsp), "padding": _spatial(kw.get("padding", 0), nsp),
        "dilation": _spatial(kw.get("dilation", 1), nsp), "output_padding": _spatial(kw.get("output_padding", 0), nsp),
        "kernel_size": list(ws[2:]), "groups": groups, "transposed": transposed, "benchmark": False,
        "deterministic": False, "cudnn_enabled": True, "allow_tf32": True,
    }
    tensors = {"input": list(xs), "self": list(xs), "weight": list(ws), "z": list(y.shape),
               "bias": [ws[1] * groups if transposed else ws[0]] if bias else None}
    dims, types, conc = [], [], []
    for a in schema.arguments:
        t = str(a.type)
        if t in ("Tensor", "Optional[Tensor]"):
            shape = tensors[a.name]
            dims.append(shape if shape is not None else [])
            types.append("float" if shape is not None else "")
            conc.append("")
        elif t == "List[int]":
            dims.append([]), types.append("ScalarList"), conc.append(str(values[a.name]))
        elif t in ("int", "bool"):
            dims.append([]), types.append("Scalar"), conc.append(str(values[a.name]))
        else:  # str padding ("same"), Optional[number] alpha=None: the profiler records nothing
            dims.append([]), types.append(""), conc.append("")
    e = cpu_op(name, ts, 10, ext=ext, dims=dims, types=types)
    e["args"]["Concrete Inputs"] = conc
    return e


def _modelled_forward_convs() -> list[str]:
    from gpuscope.analyzers.costmodel import NEEDS_CONCRETE_INPUTS

    return sorted(n for n in NEEDS_CONCRETE_INPUTS if "backward" not in n)


def test_every_forward_convolution_op_of_torch_is_modelled() -> None:
    known = {s.name for s in torch._C._jit_get_all_schemas()}
    torch_convs = {n for n in known if n.startswith("aten::") and "conv" in n and "backward" not in n
                   and "convert" not in n and "reorder" not in n}
    assert torch_convs - set(_modelled_forward_convs()) - set(_NOT_MODELLED) == set()


@pytest.fixture(scope="module")
def backend_analysis(tmp_path_factory) -> tuple[dict, dict[tuple[str, str], int]]:
    tmp = tmp_path_factory.mktemp("backends")
    known = {s.name for s in torch._C._jit_get_all_schemas()}
    events, expected = [], {}
    for name in _modelled_forward_convs():
        if name not in known:
            continue
        for case in CASES:
            e = _schema_event(name, case, 100.0 + 20 * len(events), len(events) + 1)
            if e is not None:
                events.append(e)
                expected[(name, case[0])] = _flop_counter(case)[0]
    trace = write_trace(tmp / "backends.json", events)
    r = run_cli("analyze", trace, "--db", tmp / "s.duckdb", "--json")
    assert r.code == 0, r.err
    return r.json(), expected


@pytest.mark.parametrize("name", [
    "aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::cudnn_convolution_relu",
    "aten::cudnn_convolution_add_relu", "aten::miopen_convolution", "aten::miopen_convolution_transpose",
    "aten::miopen_depthwise_convolution", "aten::miopen_convolution_relu", "aten::miopen_convolution_add_relu",
    "aten::_conv_depthwise2d", "aten::conv_depthwise3d", "aten::mkldnn_convolution",
    "aten::_nnpack_spatial_convolution", "aten::convolution_overrideable", "aten::_slow_conv2d_forward",
    "aten::thnn_conv2d", "aten::slow_conv3d", "aten::slow_conv3d_forward", "aten::slow_conv_dilated2d",
    "aten::slow_conv_dilated3d", "aten::slow_conv_transpose2d", "aten::slow_conv_transpose3d",
])
def test_backend_ops_equal_flop_counter(name: str, backend_analysis) -> None:
    doc, expected = backend_analysis
    cases = {c[0]: c for c in CASES}
    checked = [case for (n, case) in expected if n == name]
    assert checked, f"no convolution of the table fits {name}"
    for case_id in checked:
        _, xs, ws, bias, kw, transposed = cases[case_id]
        op = _entry(doc, name, [list(xs), list(ws)])
        assert op["flops"] == expected[(name, case_id)], (name, case_id)
        x, w, b = _tensors(cases[case_id], grad=False)
        y = _call(x, w, b, kw, transposed)
        takes_bias = b is not None and op["input_dims"].count([b.numel()]) == 1
        z = y.numel() if name.endswith("add_relu") else 0
        assert op["bytes"] == 4 * (x.numel() + w.numel() + (b.numel() if takes_bias else 0) + z + y.numel())


def test_string_padding_is_not_guessed(backend_analysis) -> None:
    # _convolution_mode (conv2d(padding="same")) records its padding as an empty string: no cost
    # there; its child aten::convolution records the resolved padding and carries it
    doc, expected = backend_analysis
    modes = [o for o in doc["ops"] if o["name"] == "aten::_convolution_mode"]
    assert modes and all(o["flops"] is None for o in modes)


def test_gpu_kernels_carry_the_convolution_once(tmp_path: Path) -> None:
    """A GPU trace nests conv1d > convolution > _convolution > _conv_depthwise2d (CUDA's
    depthwise kernel for a Mamba-style causal conv, viewed as 2-D) and conv2d > ... >
    cudnn_convolution; kernels belong to the innermost op, so the kernels' FLOPs add up to
    FlopCounterMode's count once, not once per nesting level."""
    mamba = next(c for c in CASES if c[0] == "conv1d depthwise causal (Mamba)")
    as2d = (mamba[0], (mamba[1][0], mamba[1][1], 1, mamba[1][2]), (mamba[2][0], 1, 1, mamba[2][2]),
            mamba[3], dict(groups=16, padding=(0, 3)), False)
    vit = next(c for c in CASES if c[0] == "conv2d ViT patch embed")
    events, corr = [], 0
    for j, (outer, inner, backend) in enumerate(((mamba, as2d, "aten::_conv_depthwise2d"),
                                                 (vit, vit, "aten::cudnn_convolution"))):
        t0, ext = 1000.0 * (j + 1), 10 * (j + 1)
        front = "aten::conv%dd" % (len(outer[1]) - 2)
        for depth, name in enumerate((front, "aten::convolution", "aten::_convolution")):
            events.append(_schema_event(name, outer, t0 + depth, ext + depth))
            events[-1]["dur"] = 100 - 2 * depth
        events.append(_schema_event(backend, inner, t0 + 5, ext + 9))
        events[-1]["dur"] = 80
        for k in range(2):  # two kernels of unequal length: each carries its share
            corr += 1
            events.append(runtime("cudaLaunchKernel", t0 + 10 + 10 * k, 5, corr=corr, ext=ext + 9))
            events.append(kernel(f"conv_kernel_{j}_{k}", t0 + 200 + 30 * k, 10 + 5 * k, corr=corr))
    assert None not in events
    doc = run_cli("analyze", write_trace(tmp_path / "gpu.json", events), "--db", tmp_path / "s.duckdb",
                  "--json").json()
    assert doc["gpu_activity"]
    expected = _flop_counter(mamba)[0] + _flop_counter(vit)[0]
    by_name = {o["name"]: o for o in doc["ops"]}
    assert set(by_name) == {"aten::_conv_depthwise2d", "aten::cudnn_convolution"}  # only the launching ops
    assert by_name["aten::_conv_depthwise2d"]["flops"] == _flop_counter(mamba)[0]
    assert by_name["aten::cudnn_convolution"]["flops"] == _flop_counter(vit)[0]
    assert sum(k["flops"] for k in doc["kernels"]) == pytest.approx(expected, rel=1e-12)
