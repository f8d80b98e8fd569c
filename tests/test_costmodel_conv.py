"""Convolutions: FLOPs equal torch.utils.flop_counter.FlopCounterMode for the same calls, read
from a real torch.profiler trace through gpuscope's ingest and analysis; bytes count input,
weight, bias and output once; no Concrete Inputs means no guess, said once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli

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


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in BACKWARD], ids=sorted(BACKWARD))
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
    # with them (the module fixture's trace) there is no such note
    assert not [n for n in analysis["notes"] if "Concrete Inputs" in n]
