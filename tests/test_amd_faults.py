"""The AMD collectors against a vendor that misbehaves (issue 20, reliability): an ``amd-smi``
that prints garbage, an ``amd-smi`` that hangs, and an ``amdsmi`` library that returns "N/A",
sentinels, negative or NaN numbers where numbers belong.

The garbage is made from the recorded real ``amd-smi`` outputs (``amdsmi_cli_real_outputs.json``:
truncated, mixed with random bytes, a value swapped for garbage, a shape swapped) with a fixed
seed, so a failing case is the same on every run. The recorded outputs hold only usage, power and
a timestamp, so values are also swapped in the project's two hand-made CLI tables (shapes of the
documentation, plausible values, not recorded: ``tests/fakes/tables/README.md``) for the other
sections. The library cases change one value of the (hand-made) MI300X table that the fake
``amdsmi`` answers from.
"""
from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.fake_amdsmi import TABLES, FakeAmdSmi
from gpuscope.collectors import AmdCollector, CollectorUnavailable
from gpuscope.collectors import amd_smi_cli
from gpuscope.collectors.amd_smi_cli import AmdSmiCliCollector, AmdSmiRunner
from gpuscope.metrics import GPU_METRIC_NAMES

REAL: dict[str, dict[str, Any]] = json.loads((TABLES / "amdsmi_cli_real_outputs.json").read_text())["outputs"]

#: recorded `amd-smi metric --json` outputs that open (with the warnings some print around the JSON)
METRIC_OUTPUTS = ("w7700_usage", "w7700_usage_group_warning", "apu_all_na_watch", "mi300x_dpx_usage_rocm702",
                  "mi300x_dpx_usage_after_permission_banner", "power_rocm61_changelog")
#: recorded `amd-smi static --json` outputs
STATIC_OUTPUTS = ("rx7800xt_static_rocm7_py314", "granite_ridge_static_asic")
#: lines the real tool prints instead of (or around) its JSON
WARNING_ONLY = ("WARNING: User is missing the following required groups: render, video. "
                "Please add user to these groups.",
                "'CTRL' + 'C' to stop watching output:")


# -- what a value may be ----------------------------------------------------------------------------


def _plausible(metric: str, v: Any) -> str | None:
    """Why ``v`` cannot be a value of ``metric`` (None when it can): None or a finite number in
    the range of its unit."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"{type(v).__name__}"
    if not math.isfinite(v):
        return "not finite"
    if metric.endswith("_bytes_per_s"):
        ok = 0 <= v <= 1e13  # no PCIe or XGMI link moves 10 TB/s
    elif metric.endswith("_bytes"):
        ok = isinstance(v, int) and 0 <= v <= 2**50  # 1 PiB: no GPU has that much memory
    elif metric.endswith("_w"):
        ok = 0 <= v <= 3000
    elif metric == "energy_j":
        ok = 0 <= v <= 1e15
    elif metric.endswith("_c"):
        ok = -50 <= v <= 150
    elif metric.endswith("_mhz"):
        ok = 0 < v < 100_000
    elif metric in ("ecc_corrected_errors", "ecc_uncorrected_errors", "xid_errors", "last_xid", "throttle_reasons",
                    "pcie_replays", "remapped_rows_corrected", "remapped_rows_uncorrected", "row_remap_pending",
                    "row_remap_failed"):
        ok = isinstance(v, int) and 0 <= v < 2**63  # a BIGINT column
    else:  # the ratios
        ok = 0 <= v <= 1
    return None if ok else "out of range"


def _check_device(d: Any) -> None:
    """A device's facts are None or what such a fact can be."""
    assert d.num_sms is None or (isinstance(d.num_sms, int) and 0 < d.num_sms < 0xFFFF), d.num_sms
    assert d.memory_total_bytes is None or 0 < d.memory_total_bytes <= 2**50, d.memory_total_bytes
    assert d.pci_bus_id is None or re.fullmatch(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", d.pci_bus_id)
    assert d.pci_device_id is None or re.fullmatch(r"(0x)?[0-9a-f]{1,4}", d.pci_device_id), d.pci_device_id
    for text in (d.name, d.uuid, d.compute_capability):
        assert text is None or (text.isprintable() and 0 < len(text) <= 256), text


def _check_rows(rows: list[Any]) -> None:
    for r in rows:
        for metric, v in r.values.items():
            assert metric in GPU_METRIC_NAMES, metric
            why = _plausible(metric, v)
            assert why is None, f"{r.device}/{metric} = {v!r}: {why}"
        assert isinstance(r.ts_ns, int) and r.ts_ns > 0


# -- garbage made from the recorded outputs ---------------------------------------------------------

#: values that are never a reading of anything: each must come out as None (or leave the metric
#: as it was, when the collector does not read the field it replaced)
GARBAGE: tuple[Any, ...] = (
    "N/A", "", "garbage", "0x1F?", [], {}, [1, 2, 3], {"value": "N/A", "unit": "W"}, {"value": 5, "unit": "furlongs"},
    {"value": [], "unit": "%"}, {"unit": "W"}, {"val": 7}, [[[{"value": {}}]]], None, True, False,
    1e308, -1e308, 10**30, 10**400, -(10**30), -1e6, -1, 0xFFFF, 0xFFFFFFFF, 2**64 - 1,
    float("nan"), float("inf"), float("-inf"), {"value": float("nan"), "unit": "W"},
    {"value": float("inf"), "unit": "MHz"}, {"value": -5, "unit": "MB"}, {"value": 2**64 - 1, "unit": "MB"},
    "x" * 5000,
)
#: what each fact of `amd-smi static` is swapped for: a number of every kind of wrong, strings a
#: name cannot be (a terminal escape, 5000 characters), the wrong containers
STATIC_GARBAGE: tuple[Any, ...] = (-1, -1e6, 0, 1e308, 10**400, float("inf"), float("nan"), True, "N/A", "\x1b[2J",
                                   "x" * 5000, {}, [], {"value": -5, "unit": "MB"})
#: of these, the ones a plausible reading could equal (a temperature of -1 °C): range-checked only
_MAYBE_PLAUSIBLE = (-1,)


def _split(stdout: str) -> tuple[str, Any, str]:
    """(text before the JSON document, the document, text after it) of a recorded output: the
    document is the first line opening with ``[`` or ``{`` from which JSON parses."""
    text = stdout.strip()
    pos = 0
    for line in text.splitlines(keepends=True):
        if line[:1] in ("[", "{"):
            try:
                doc, end = json.JSONDecoder().raw_decode(text, pos)
            except ValueError:
                pass
            else:
                return text[:pos].strip(), doc, text[end:].strip()
        pos += len(line)
    raise ValueError("no JSON document in the recorded output")


def _paths(node: Any, here: tuple = ()) -> Iterator[tuple]:
    yield here
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*here, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*here, i))


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return copy.deepcopy(value)
    out = copy.deepcopy(doc)
    node = out
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = copy.deepcopy(value)
    return out


def _dumps(doc: Any) -> str:
    # amd-smi indents its JSON by 4; NaN / Infinity come out as the literals Python's json reads
    return json.dumps(doc, indent=4, allow_nan=True)


#: the keys of `amd-smi metric --json` that the collector reads (the sections and fields on the
#: way to a value)
READ_KEYS = frozenset({
    "gpu_data", "gpu", "timestamp", "value", "unit", "usage", "gfx_activity", "umc_activity", "power", "socket_power",
    "average_socket_power", "current_socket_power", "energy", "total_energy_consumption", "temperature", "hotspot",
    "edge", "mem", "clock", "gfx_0", "mem_0", "clk", "mem_usage", "used_vram", "total_vram", "ecc",
    "total_correctable_count", "total_uncorrectable_count", "pcie", "bandwidth",
})


#: the keys of `amd-smi static --json` that the collector reads
STATIC_READ_KEYS = frozenset({"gpu_data", "gpu", "asic", "market_name", "device_id", "num_compute_units",
                              "target_graphics_version", "bus", "bdf", "vram", "size", "value", "unit", "partition",
                              "compute_partition", "memory_partition"})


def _documents() -> dict[str, tuple[str, Any, str]]:
    """The documents whose values get swapped: the recorded outputs, which hold only usage, power and
    a timestamp, and the project's two hand-made tables (``tests/fakes/tables/README.md``: shapes of
    the docs, plausible values, not recorded) for the sections no recorded output has (energy,
    temperatures, clocks, memory, ECC, PCIe)."""
    docs = {name: _split(REAL[name]["stdout"]) for name in METRIC_OUTPUTS}
    for table in ("amdsmi_cli_list.json", "amdsmi_cli_gpu_data.json"):
        docs[table] = ("", json.loads((TABLES / table).read_text())["metric"][0], "")
    return docs


class Case:
    def __init__(self, name: str, metric: str, static: str | None = None, base: str | None = None,
                 path: tuple | None = None, value: Any = None, whole: bool = False, unavailable: bool = False,
                 gpus: list[str] | None = None) -> None:
        self.name, self.metric, self.static = name, metric, static
        #: the document it was made from, and the value put at ``path`` in it
        self.base, self.path, self.value = base, path, value
        #: it opens with the whole document's readings or not at all (a cut output is never read
        #: from a fragment of it taken for a GPU; garbage around a document leaves it as it was)
        self.whole = whole
        #: there is no GPU in it: open() must say so
        self.unavailable = unavailable
        #: the devices it must open with
        self.gpus = gpus

    def __repr__(self) -> str:
        return self.name


def _garbage_cases() -> list[Case]:
    rng = random.Random(20)  # issue 20
    cases: list[Case] = []
    static = REAL["rx7800xt_static_rocm7_py314"]["stdout"]
    # 1. truncated anywhere (a killed or crashed amd-smi), and at the edges
    for name in METRIC_OUTPUTS:
        out = REAL[name]["stdout"]
        cuts = sorted({0, 1, 2, len(out) - 2, len(out) - 3, *(rng.randrange(len(out)) for _ in range(14))})
        cases += [Case(f"truncated {name}[:{n}]", out[:n], static, base=name, whole=True) for n in cuts]
    for table in ("amdsmi_cli_list.json", "amdsmi_cli_gpu_data.json"):
        # two and three GPUs: a cut output must not pass for its first GPU alone
        out = _dumps(DOCUMENTS[table][1])
        cuts = sorted({rng.randrange(len(out)) for _ in range(10)})
        cases += [Case(f"truncated {table}[:{n}]", out[:n], static, base=table, whole=True) for n in cuts]
    for name in STATIC_OUTPUTS:
        out = REAL[name]["stdout"]
        cases += [Case(f"static truncated {name}[:{n}]", REAL["w7700_usage"]["stdout"], out[:n])
                  for n in sorted({rng.randrange(len(out)) for _ in range(8)})]
    # 2. random bytes: alone, and dropped into a real output
    for i in range(16):
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300))).decode("latin-1")
        cases.append(Case(f"random bytes #{i}", junk, static))
    for i in range(24):
        name = METRIC_OUTPUTS[i % len(METRIC_OUTPUTS)]
        out = REAL[name]["stdout"]
        at = rng.randrange(len(out))
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))).decode("latin-1")
        cases.append(Case(f"random bytes into {name} at {at} #{i}", out[:at] + junk + out[at:], static))
    # 3. one value (or a whole section) of a document swapped for garbage: every value the
    # collector reads (twice, with different garbage), and some it does not read
    for name, (before, doc, after) in DOCUMENTS.items():
        paths = list(_paths(doc))
        read = [p for p in paths if all(k in READ_KEYS for k in p if isinstance(k, str))]
        unread = [p for p in paths if p not in read]
        for j, path in enumerate(read + read + rng.sample(unread, min(len(unread), 6))):
            # the values read go through every kind of garbage in turn, each path twice
            value = GARBAGE[(len(cases) + j) % len(GARBAGE)] if j < 2 * len(read) else rng.choice(GARBAGE)
            text = "\n".join(p for p in (before, _dumps(_replace(doc, path, value)), after) if p)
            cases.append(Case(f"{name}{list(path)} = {value!r:.30} #{len(cases)}", text, static, base=name, path=path,
                              value=value))
    for name in STATIC_OUTPUTS:
        before, doc, after = _split(REAL[name]["stdout"])
        paths = [p for p in _paths(doc) if all(k in STATIC_READ_KEYS for k in p if isinstance(k, str))]
        for path, value in ((p, v) for p in paths for v in STATIC_GARBAGE):
            cases.append(Case(f"static {name}{list(path)} = {value!r:.30} #{len(cases)}", REAL["w7700_usage"]["stdout"],
                              _dumps(_replace(doc, path, value))))
    # 4. the wrong shape altogether, nothing, only warnings, deep nesting
    gpu = _split(REAL["w7700_usage"]["stdout"])[1][0]
    shapes: list[tuple[str, str]] = [  # no GPU in any of these: unavailable
        ("empty", ""), ("blank lines", "\n \n\t\n"), ("null", "null"), ("number", "42"), ("string", '"N/A"'),
        ("empty list", "[]"), ("empty object", "{}"), ("list of lists", "[[], [1, 2]]"),
        ("list of strings", '["N/A", ""]'), ("gpu_data N/A", '{"gpu_data": "N/A"}'),
        ("gpu_data numbers", '{"gpu_data": [1, 2]}'),
        ("gpu_data of lists", '{"gpu_data": [[{"gpu": 0}]]}'), ("error object", '{"error": "Unable to get devices"}'),
        ("unit object", '{"value": 0, "unit": "%"}'), ("deep nesting", "[" * 100_000 + "]" * 100_000),
        ("deep nesting, unclosed", "{\"a\": " * 50_000), ("NaN alone", "NaN"),
        ("Infinity list", "[Infinity, -Infinity]"),
        *((f"only warning {i}", w) for i, w in enumerate(WARNING_ONLY)),
        ("only the permission banner", REAL["mi300x_dpx_usage_after_permission_banner"]["stdout"].split("\n{")[0]),
    ]
    cases += [Case(f"shape: {n}", text, static, unavailable=True) for n, text in shapes]
    odd_gpu = [  # the recorded GPU with an odd index or shape: it is gpu0
        ("gpu index string", [{**gpu, "gpu": "0"}]), ("gpu index bool", [{**gpu, "gpu": True}]),
        ("gpu index huge", [{**gpu, "gpu": 10**30}]), ("gpu index negative", [{**gpu, "gpu": -1}]),
        ("same gpu twice", [gpu, gpu]), ("usage as list", [{**gpu, "usage": [gpu["usage"]]}]),
    ]
    cases += [Case(f"shape: {n}", _dumps(doc), static, gpus=["gpu0"]) for n, doc in odd_gpu]
    # 5. a document followed (or preceded) by garbage: the document is read, the rest are notes
    tails = ["}}}]]", "garbage", "\x00\x01\x02", None, "[1, 2", "Traceback (most recent call last):\n  File x",
             "\n".join(f"ERROR: line {i}" for i in range(200)), "\x1b[31mred\x1b[0m"]
    for i in range(16):
        name = METRIC_OUTPUTS[i % len(METRIC_OUTPUTS)]
        out = REAL[name]["stdout"]
        tail = tails[i % len(tails)] or out  # None: the same document again
        cases.append(Case(f"{name} then garbage #{i}", out + ("\n" if i % 3 else "") + tail, static, base=name,
                          whole=True))
    for i, head in enumerate(["{{{", "[oops", "}\n]", "\x00"]):
        cases.append(Case(f"garbage then w7700 #{i}", head + "\n" + REAL["w7700_usage"]["stdout"], static,
                          base="w7700_usage", whole=True))
    # 6. good metric, static that is garbage in shape
    for n, text in shapes[:12]:
        cases.append(Case(f"static shape: {n}", REAL["w7700_usage"]["stdout"], text, gpus=["gpu0"]))
    return cases


DOCUMENTS = _documents()
CASES = _garbage_cases()


def _runner(metric: str, static: str | None) -> Callable[[Any], str]:
    def run(args: Any) -> str:
        if args[0] == "metric":
            return metric
        if static is None:
            raise RuntimeError("amd-smi static --json exited 2: unknown command")
        return static
    return run


def _baseline(name: str) -> dict[str, dict[str, Any]]:
    before, doc, after = DOCUMENTS[name]
    c = AmdSmiCliCollector(_runner("\n".join(p for p in (before, _dumps(doc), after) if p), None), threaded=False)
    c.open()
    rows = {r.device: dict(r.values) for r in c.sample()}
    c.close()
    return rows


BASELINES = {name: _baseline(name) for name in DOCUMENTS}


def _inside_an_entry(path: tuple) -> bool:
    """Whether ``path`` is a value inside one GPU's entry (not the document, the list, an entry
    or its ``gpu`` index)."""
    depth = 2 if path[:1] == ("gpu_data",) else 1
    return len(path) > depth and path[depth] != "gpu"


def _one_printable_line(text: str) -> bool:
    return bool(text) and text.isprintable() and len(text) <= 400


def run_case(case: Case) -> tuple[list[Any] | None, str | None, list[Any]]:
    """(devices or None, the reason it is unavailable or None, rows of two samples)."""
    c = AmdSmiCliCollector(_runner(case.metric, case.static), threaded=False)
    try:
        devices = c.open()
    except CollectorUnavailable as exc:
        return None, exc.reason, []
    try:
        rows = c.sample() + c.sample()
    finally:
        c.close()
    # what amd-smi printed around its JSON ends up in notes and reasons: bounded, one line each
    assert len(c.notes) <= amd_smi_cli.MAX_NOTES
    for text in [*c.notes, *(d.reason for d in c.take_degradations())]:
        assert _one_printable_line(text), repr(text)
    return devices, None, rows


def test_garbage_cases_are_many_and_of_every_kind() -> None:
    assert len(CASES) >= 300
    assert len({c.name for c in CASES}) == len(CASES)
    assert len({(c.metric, c.static) for c in CASES}) >= 0.9 * len(CASES)  # not the same output over and over
    # what the cases are compared with: the readings of the documents as they were
    assert BASELINES["w7700_usage"]["gpu0"]["gpu_util"] == 0.42
    assert BASELINES["power_rocm61_changelog"]["gpu0"]["power_w"] == 10.0
    full = BASELINES["amdsmi_cli_list.json"]["gpu0"]
    assert sum(v is not None for v in full.values()) >= 12 and full["energy_j"] == 1_234_567.5


@pytest.mark.parametrize("chunk", range(6))
def test_amd_smi_printing_garbage(chunk: int) -> None:
    """Each case: open() gives devices or CollectorUnavailable with one printable line; sample()
    never raises; every value is None or plausible for its unit; a value swapped for garbage
    makes no metric take a number it did not have, and costs no GPU; a cut output never opens
    from a fragment; notes and reasons stay one printable line each. Every failing case is
    listed, not only the first."""
    failures = []
    for case in CASES[chunk::6]:
        try:
            devices, reason, rows = run_case(case)
            if case.unavailable:
                assert devices is None, f"opened {[d.key for d in devices]}"
            if case.gpus is not None:
                assert devices is not None and [d.key for d in devices] == case.gpus, reason
            if case.whole and devices is not None:
                assert {r.device: r.values for r in rows[:len(devices)]} == BASELINES[case.base]
            if case.path is not None and _inside_an_entry(case.path):
                # one garbage value inside a GPU's entry costs that value, not the GPU
                assert devices is not None, f"unavailable: {reason}"
                assert sorted(d.key for d in devices) == sorted(BASELINES[case.base])
            if devices is None:
                assert _one_printable_line(reason), f"reason {reason!r}"
                continue
            assert devices and all(d.key == f"gpu{d.index}" and d.index >= 0 for d in devices)
            for d in devices:
                _check_device(d)
            _check_rows(rows)
            if case.path is not None and case.value not in _MAYBE_PLAUSIBLE:
                # one value swapped for garbage: no metric may take a number it did not have
                base = BASELINES[case.base]
                for r in rows:
                    for metric, v in r.values.items():
                        if v is not None and r.device in base:
                            was = base[r.device].get(metric)
                            assert v == was, f"{r.device}/{metric} = {v!r}, was {was!r}"
        except Exception as exc:  # noqa: BLE001 - collect every failing case, then report them all
            failures.append(f"{case.name}: {type(exc).__name__}: {exc}"[:300])
    assert not failures, f"{len(failures)} cases:\n" + "\n".join(failures)


def test_invalid_utf8_from_a_real_amd_smi_is_read(tmp_path: Path) -> None:
    # a byte that is not UTF-8 (a latin-1 name, line noise) before the recorded document: the
    # process's output must still be read, not fail as a whole on decoding
    out = tmp_path / "metric.out"
    out.write_bytes(b"\xff\xfe noise \xe9\n" + REAL["w7700_usage"]["stdout"].encode())
    exe = _script(tmp_path, f'cat "{out}"\n')
    c = AmdSmiCliCollector(AmdSmiRunner(exe), threaded=False)
    (dev,) = c.open()
    (row,) = c.sample()
    assert row.values["gpu_util"] == 0.42  # the recorded reading
    assert dev.properties["notes"] == ["\ufffd\ufffd noise \ufffd"]  # the bytes that are no UTF-8, replaced
    c.close()


# -- amd-smi hanging ----------------------------------------------------------------------------


class BlockingAmdSmi:
    """A runner answering with recorded outputs, whose calls block while ``blocked`` is set, until
    ``release`` is (or 5 s pass: then a broken timeout fails the test instead of hanging it)."""

    def __init__(self, metric: str = REAL["w7700_usage"]["stdout"], static: str | None = None) -> None:
        self.outputs = {"metric": metric, "static": static or REAL["rx7800xt_static_rocm7_py314"]["stdout"]}
        self.blocked: set[str] = set()  # the commands that hang
        self.release = threading.Event()
        self.hanging = threading.Event()  # set when a call has started to hang
        self.calls = 0

    def __call__(self, args: Any) -> str:
        self.calls += 1
        if args[0] in self.blocked:
            self.hanging.set()
            self.release.wait(5)
        return self.outputs[args[0]]


def _wait_for(what: Callable[[], Any], limit_s: float = 5.0) -> Any:
    """Poll ``what`` until it gives something true (a bound against hanging, not a timing assert)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.01)
    raise AssertionError(f"nothing within {limit_s} s")


def test_a_hang_at_open_is_given_up_after_the_open_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amd_smi_cli, "OPEN_TIMEOUT_S", 0.2)
    amd_smi = BlockingAmdSmi()
    amd_smi.blocked.add("metric")
    try:
        with pytest.raises(CollectorUnavailable) as e:
            AmdSmiCliCollector(amd_smi, threaded=False).open()
        assert e.value.reason == "amd-smi metric --json did not answer within 0.2 s (hung?)"
    finally:
        amd_smi.release.set()


def test_a_hang_of_static_at_open_keeps_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amd_smi_cli, "OPEN_TIMEOUT_S", 0.2)
    amd_smi = BlockingAmdSmi()
    amd_smi.blocked.add("static")
    try:
        c = AmdSmiCliCollector(amd_smi, threaded=False)
        (dev,) = c.open()  # metric answered: the GPU is there, without its name
        assert dev.key == "gpu0" and dev.name is None and "gpu_util" in dev.supported
        said = [d.reason for d in c.take_degradations() if d.metric is None]
        assert any(r.startswith("amd-smi static --json did not answer within") and "names" in r for r in said), said
        amd_smi.release.set()  # the hung call ends: the next reading starts after it, not beside it
        (row,) = c.sample()
        assert row.values["gpu_util"] == 0.42
        c.close()
    finally:
        amd_smi.release.set()


def _hang_reasons(c: AmdSmiCliCollector, seen: list[str]) -> list[str]:
    seen += [d.reason for d in c.take_degradations() if "did not answer" in d.reason]
    return seen


def test_a_hang_while_sampling_is_said_once_and_rows_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amd_smi_cli, "READ_TIMEOUT_S", 0.1)
    amd_smi = BlockingAmdSmi()
    c = AmdSmiCliCollector(amd_smi, threaded=True, min_period_s=0.01)
    try:
        devices = c.open()
        assert _wait_for(c.sample)[0].values["gpu_util"] == 0.42
        amd_smi.blocked.add("metric")
        said: list[str] = []
        _wait_for(lambda: _hang_reasons(c, said))
        assert said == ["amd-smi metric --json did not answer within 0.1 s (hung?): no readings "
                        "until it answers again"]
        time.sleep(0.3)  # three more timeouts' worth of the same hang: not said again
        assert _hang_reasons(c, said) == said[:1]
        c.sample()  # a reading that arrived before the hang, if any
        assert c.sample() == []  # no new reading, no made-up row
        assert c.devices == devices and not any(d.lost for d in devices)  # the GPU is kept
        amd_smi.blocked.clear()
        amd_smi.release.set()
        rows = _wait_for(c.sample)  # amd-smi answers again: rows again
        assert rows[0].device == "gpu0" and rows[0].values["gpu_util"] == 0.42
        assert _hang_reasons(c, said) == said[:1]
    finally:
        amd_smi.release.set()
        c.close()


def test_close_returns_while_amd_smi_hangs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amd_smi_cli, "READ_TIMEOUT_S", 60.0)  # far longer than close may take
    amd_smi = BlockingAmdSmi()
    c = AmdSmiCliCollector(amd_smi, threaded=True, min_period_s=0.01)
    try:
        c.open()
        amd_smi.blocked.add("metric")
        _wait_for(amd_smi.hanging.is_set)
        closer = threading.Thread(target=c.close, daemon=True)
        closer.start()
        closer.join(3.0)  # the hung call would hold it 5 s (then 60): a bound, not a timing
        assert not closer.is_alive(), "close() waited on the hung amd-smi"
    finally:
        amd_smi.release.set()


# -- a real amd-smi process that hangs --------------------------------------------------------------


def _script(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "amd-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return str(exe)


def _hanging_amd_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``amd-smi`` on PATH that prints the recorded W7700 output, or, while the file ``hang``
    exists, sleeps in a child process (whose pid it writes to ``sleep.pid``) and prints nothing."""
    (tmp_path / "metric.out").write_text(REAL["w7700_usage"]["stdout"])
    (tmp_path / "static.out").write_text(REAL["rx7800xt_static_rocm7_py314"]["stdout"])
    _script(tmp_path, f'cd "{tmp_path}"\n'
                      'if [ -e hang ]; then sleep 30 & echo $! > sleep.pid; wait; fi\n'
                      'cat "$1.out"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    return tmp_path


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting for its parent counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="amd-smi and /proc: Linux")
def test_a_real_amd_smi_hanging_at_open_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _hanging_amd_smi(tmp_path, monkeypatch)
    (d / "hang").touch()
    monkeypatch.setattr(amd_smi_cli, "OPEN_TIMEOUT_S", 0.5)
    c = AmdSmiCliCollector(threaded=False)  # finds the fake amd-smi on PATH
    with pytest.raises(CollectorUnavailable) as e:
        c.open()
    assert e.value.reason == "amd-smi metric --json did not answer within 0.5 s (hung?)"
    # the whole process group went, the sleeping child of the script too
    sleeper = int(_wait_for(lambda: (d / "sleep.pid").exists() and (d / "sleep.pid").read_text().strip()))
    _wait_for(lambda: _gone(sleeper))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="amd-smi and /proc: Linux")
def test_a_real_amd_smi_hanging_while_sampling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _hanging_amd_smi(tmp_path, monkeypatch)
    monkeypatch.setattr(amd_smi_cli, "READ_TIMEOUT_S", 0.3)
    c = AmdSmiCliCollector(threaded=True, min_period_s=0.02)
    try:
        (dev,) = c.open()
        assert dev.name == "AMD Radeon RX 7800 XT"  # the static output was read at open
        assert _wait_for(c.sample)[0].values["gpu_util"] == 0.42
        (d / "hang").touch()
        said: list[str] = []
        _wait_for(lambda: _hang_reasons(c, said))
        assert said == ["amd-smi metric --json did not answer within 0.3 s (hung?): no readings "
                        "until it answers again"]
        sleeper = int((d / "sleep.pid").read_text())
        _wait_for(lambda: _gone(sleeper))  # killed with its amd-smi at the timeout
        (d / "hang").unlink()
        c.sample()
        assert _wait_for(c.sample)[0].values["gpu_util"] == 0.42  # answering again: rows again
        assert _hang_reasons(c, said) == said[:1]
    finally:
        c.close()


# -- the amdsmi library answering with what is no reading --------------------------------------------

NAN, INF = float("nan"), float("inf")
#: (what, the values of gpu0's table to change, the metrics they feed, the garbage values); a value
#: marked NA is amdsmi's own "not available" ("N/A", a sentinel maximum), the rest are garbage
NA = object()
API_CASES: list[tuple[str, str, tuple[str, ...], tuple[str, ...], list[Any]]] = [
    ("gfx activity", "gpu_metrics", ("average_gfx_activity",), ("gpu_util",),
     [(NA, "N/A"), (NA, 0xFFFF), {"busy": 75}, -5, NAN, INF, 150, True, "75%?"]),
    ("socket power", "gpu_metrics", ("average_socket_power", "current_socket_power"), ("power_w", "power_instant_w"),
     [(NA, 0xFFFF), (NA, 0xFFFFFFFF), -1, 1e9, NAN, {"value": "N/A"}, {"watts": 550}]),
    ("energy accumulator", "gpu_metrics", ("energy_accumulator",), ("energy_j",),
     [(NA, 2**64 - 1), -1000, NAN, INF, 10**30, "lots"]),
    ("hotspot temperature", "gpu_metrics", ("temperature_hotspot",), ("temp_c",),
     [(NA, 0xFFFF), -300, 10**6, NAN, "hot"]),
    ("memory temperature", "gpu_metrics", ("temperature_mem",), ("mem_temp_c",), [(NA, 0xFFFF), -100, INF]),
    ("gfx clocks", "gpu_metrics", ("current_gfxclks",), ("sm_clock_mhz",),
     [(NA, "N/A"), (NA, [0xFFFF] * 8), [-5, -5], {"xcc0": 2100}, [NAN, INF]]),
    ("memory clock", "gpu_metrics", ("current_uclk",), ("mem_clock_mhz",), [(NA, 0xFFFFFFFF), -1, 1e9]),
    ("throttle status", "gpu_metrics", ("indep_throttle_status", "throttle_status"), ("throttle_reasons",),
     [(NA, 2**64 - 1), -1, NAN, 2**63 + 1, 1.5]),
    ("PCIe bandwidth", "gpu_metrics", ("pcie_bandwidth_inst",), ("pcie_bytes_per_s",),
     [(NA, 0xFFFF), -1, 1e30, "fast"]),
    ("VRAM in use", "vram_used", (), ("mem_used_bytes",), [(NA, 2**64 - 1), (NA, "N/A"), -1, 1e30, NAN, {"used": 1}]),
    ("ECC counts", "ecc", ("correctable_count", "uncorrectable_count"),
     ("ecc_corrected_errors", "ecc_uncorrected_errors"),
     [(NA, 2**64 - 1), -1, NAN, 1.5, "many"]),
]
#: read once at open (static facts): garbage there can only show at open
STATIC_CASES: list[tuple[str, str, str, list[Any]]] = [
    ("VRAM size", "vram_total", "mem_total_bytes", [(NA, 2**64 - 1), (NA, "N/A"), -1, INF, 10**30]),
    ("power cap", "power_cap", "power_limit_w", [(NA, 2**64 - 1), (NA, 0xFFFFFFFF), 2**63, -1, NAN, "N/A W"]),
]


def _api_params() -> list[Any]:
    out = []
    for what, where, fields, metrics, values in API_CASES:
        for value in values:
            na, value = (True, value[1]) if isinstance(value, tuple) and value[0] is NA else (False, value)
            for when in ("open", "later"):
                out.append(pytest.param(where, fields, metrics, value, na, when, id=f"{what}={value!r:.20}@{when}"))
    return out


def _mi300x(gpu0: Callable[[dict[str, Any]], None]) -> FakeAmdSmi:
    table = json.loads((TABLES / "amdsmi_mi300x.json").read_text())
    gpu0(table["devices"][0])
    return FakeAmdSmi(table)


def _values_of(where: str, fields: tuple[str, ...], value: Any) -> dict[str, Any]:
    """What changes in a tick of gpu0's table: one or more fields of a call's answer, or the answer."""
    if where == "gpu_metrics":
        return {"gpu_metrics": {f: value for f in fields}}
    if where == "ecc":
        return {"ecc": {**{"correctable_count": 3, "uncorrectable_count": 0, "deferred_count": 0},
                        **{f: value for f in fields}}}
    return {where: value}


@pytest.fixture(autouse=True)
def _read_slow_metrics_every_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    # the power cap and ECC counts are read once a second; here each sample() reads them
    monkeypatch.setattr("gpuscope.collectors.amd_smi_api.SLOW_READ_INTERVAL_S", 0.0)


def _open_api(fake: FakeAmdSmi) -> tuple[AmdCollector, dict[str, Any]]:
    c = AmdCollector(amdsmi=fake, use_cli=False, process_interval_s=0.0)
    c.set_pids({4242})
    return c, {d.key: d for d in c.open()}


@pytest.mark.parametrize("where, fields, metrics, value, na, when", _api_params())
def test_amdsmi_values_that_are_no_reading(where: str, fields: tuple[str, ...], metrics: tuple[str, ...], value: Any,
                                           na: bool, when: str) -> None:
    change = _values_of(where, fields, value)

    def gpu0(dev: dict[str, Any]) -> None:
        if when == "open":  # from the first reading on, the probe included
            for k, v in change.items():
                dev["base"][k] = {**dev["base"][k], **v} if isinstance(v, dict) and k == "gpu_metrics" else v
            dev["ticks"] = [{}]
        else:  # a good first reading (the probe), then this
            dev["ticks"] = [{}, change]

    fake = _mi300x(gpu0)
    c, devs = _open_api(fake)
    if when == "later":
        first = {s.device: s for s in c.sample()}["gpu0"]
        assert all(first.values.get(m) is not None for m in metrics)  # supported and read before
        c.take_degradations()
        fake.step()
    rows = c.sample()  # never raises
    _check_rows(rows)
    row = {s.device: s for s in rows}["gpu0"]
    for m in metrics:
        assert row.values.get(m) is None, f"{m} = {row.values.get(m)!r} from {value!r}"
    said = {d.metric: d.reason for d in c.take_degradations() if d.device == "gpu0"}
    for m in metrics:
        if when == "open":
            reason = devs["gpu0"].unsupported[m]  # said at open, as the reason it is missing
            assert m not in devs["gpu0"].supported
        else:
            reason = said[m]  # said while sampling, once
        if na:
            assert "amdsmi gave" not in reason, reason
        else:
            assert reason.startswith("amdsmi gave") and "not a plausible reading" in reason, reason
    if when == "later":
        fake.step(-1)  # the same again: not said again
        c.sample()
        fake.step()
        c.sample()
        assert not [d for d in c.take_degradations() if d.device == "gpu0" and d.metric in metrics]
    c.close()


@pytest.mark.parametrize("what, key, metric, value", [
    pytest.param(what, key, metric, value, id=f"{what}={value!r:.20}")
    for what, key, metric, values in STATIC_CASES
    for value in (v[1] if isinstance(v, tuple) else v for v in values)])
def test_amdsmi_static_facts_that_are_no_value(what: str, key: str, metric: str, value: Any) -> None:
    fake = _mi300x(lambda dev: dev.__setitem__(key, value))
    c, devs = _open_api(fake)
    _check_device(devs["gpu0"])
    assert metric not in devs["gpu0"].supported and devs["gpu0"].unsupported[metric]
    if metric == "mem_total_bytes":
        assert devs["gpu0"].memory_total_bytes is None
    rows = c.sample()
    _check_rows(rows)
    assert {s.device: s for s in rows}["gpu0"].values.get(metric) is None
    c.close()


@pytest.mark.parametrize("change", [
    pytest.param({"gpu_metrics": "N/A"}, id="gpu_metrics N/A"),
    pytest.param({"gpu_metrics": []}, id="gpu_metrics a list"),
    pytest.param({"gpu_metrics": {"firmware_timestamp": INF}}, id="firmware timestamp inf"),
    pytest.param({"gpu_metrics": {"firmware_timestamp": NAN}}, id="firmware timestamp NaN"),
    # 100 ms after the first reading (firmware clock, 10 ns ticks), as the table's own second tick
    pytest.param({"gpu_metrics": {"xgmi_write_data_acc": [2**63] * 7 + ["N/A"], "firmware_timestamp": 5010000000}},
                 id="xgmi counter jumps"),
    pytest.param({"gpu_metrics": {"xgmi_read_data_acc": [-1] * 8, "firmware_timestamp": 5010000000}},
                 id="xgmi counter negative"),
    pytest.param({"processes": "N/A"}, id="process list N/A"),
    pytest.param({"processes": [{"pid": 4242, "mem": -5, "memory_usage": {"vram_mem": INF},
                                 "engine_usage": {"gfx": NAN}, "name": 5}]}, id="process garbage"),
    pytest.param({"processes": [{"pid": True, "mem": 10**30}]}, id="process pid a bool"),
])
def test_amdsmi_calls_answering_garbage_while_sampling(change: dict[str, Any]) -> None:
    def gpu0(dev: dict[str, Any]) -> None:
        dev["ticks"] = [{}, change]

    fake = _mi300x(gpu0)
    c, devs = _open_api(fake)
    c.sample()
    fake.step()
    rows = c.sample()  # never raises; whatever it gives is None or plausible
    _check_rows(rows)
    gpu0_row = {s.device: s for s in rows}["gpu0"]
    if isinstance(change.get("gpu_metrics"), (str, list)):
        assert gpu0_row.values.get("gpu_util") is None
        assert any("not a table of metrics" in d.reason for d in c.take_degradations() if d.device == "gpu0")
    else:  # one bad value costs that value: the rest of the reading is there
        assert gpu0_row.values["gpu_util"] == 0.75 and gpu0_row.values["mem_used_bytes"] == 4 * 1024**3
        assert abs(gpu0_row.ts_ns - time.time_ns()) < 60e9
    for p in gpu0_row.processes:
        assert p.gpu_mem_bytes is None or 0 <= p.gpu_mem_bytes <= 2**50
        assert p.gpu_util is None or 0 <= p.gpu_util <= 1
    c.close()


@pytest.mark.parametrize("asic", [
    pytest.param("N/A", id="N/A"),
    pytest.param([], id="a list"),
    pytest.param({"market_name": 5, "num_compute_units": -38, "device_id": -1, "target_graphics_version": ["gfx942"],
                  "asic_serial": {}}, id="wrong types"),
    pytest.param({"market_name": "\x1b[2J", "num_compute_units": INF, "device_id": "0x74A1\n",
                  "target_graphics_version": "gfx９４２"}, id="control characters and odd digits"),
])
def test_amdsmi_asic_info_garbage_still_opens(asic: Any) -> None:
    fake = _mi300x(lambda dev: dev.update({"asic": asic, "bdf": "not a bus id", "energy_resolution": NAN}))
    c, devs = _open_api(fake)  # opens: the facts are missing, the metrics are not
    d = devs["gpu0"]
    _check_device(d)
    assert d.name is None and d.num_sms is None and d.compute_capability is None and d.pci_bus_id is None
    assert d.pci_device_id in (None, "0x74a1")
    row = {s.device: s for s in c.sample()}["gpu0"]
    _check_rows([row])
    assert row.values["gpu_util"] == 0.75  # the table's reading
    assert row.values["energy_j"] == pytest.approx(1_000_000_000 * 15.259e-6)  # the usual resolution
    c.close()
