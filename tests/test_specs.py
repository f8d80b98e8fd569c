"""The GPU spec database: data integrity, lookup, user overrides, device identification, `gpuscope specs`."""
from __future__ import annotations

import gzip
import json
import math
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, run_cli, shared_trace
from gpuscope.errors import InputError
from gpuscope.specs import DTYPES, GpuSpec, load_specs, normalize_dtype

REFERENCE = REPO.parent / "shared" / "reference" / "gpu-specs.json"
NUMBER_FIELDS = ("memory_bytes", "mem_bw_bytes_per_s", "compute_units", "boost_clock_mhz", "tensor_clock_mhz",
                 "l2_cache_mb", "last_level_cache_mb", "l2_bw_bytes_per_s", "last_level_cache_bw_bytes_per_s", "tdp_w")
REFERENCE_KEYS = ("a100-sxm", "a100-pcie-40gb", "a100-pcie-80gb", "h100-sxm", "h100-pcie", "h100-nvl", "h200", "b200",
                  "gb200", "l40s", "l4", "rtx4090", "rtx5090", "mi250x", "mi210", "mi300x", "mi300a", "mi325x",
                  "mi350x", "mi355x", "rx7900xtx", "w7900")


pytestmark = pytest.mark.usefixtures("no_user_specs")


def _props(rel: str) -> dict:
    doc = json.load(gzip.open(shared_trace(rel)))
    props = doc["deviceProperties"]
    return props[0] if isinstance(props, list) else next(iter(props.values()))


# -- the data ---------------------------------------------------------------------------------


def test_every_reference_gpu_has_an_entry_with_a_short_key(specdb) -> None:
    for key in REFERENCE_KEYS:
        assert specdb.get(key) is not None, key
    assert len({s.key for s in specdb.all()}) == len(specdb.all())
    for s in specdb.all():
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", s.key), s.key
        assert s.vendor in ("nvidia", "amd")


def test_numbers_agree_with_the_reference_table(specdb) -> None:
    if not REFERENCE.exists():
        pytest.skip("../shared/reference/gpu-specs.json is absent")
    ref = {e["name"]: e for e in json.loads(REFERENCE.read_text())}
    seen = set()
    for s in specdb.all():
        if s.reference_name is None:
            continue
        e = ref[s.reference_name]
        seen.add(s.reference_name)
        assert s.memory_bytes == e["memory_gb"] * 1e9
        assert s.mem_bw_bytes_per_s == pytest.approx(e["mem_bw_tbps"] * 1e12)
        pairs = {"fp64_vector": "fp64_vector_tflops", "fp32": "fp32_vector_tflops", "tf32": "tf32_dense_tflops",
                 "fp16": "fp16_dense_tflops", "bf16": "bf16_dense_tflops", "fp8": "fp8_dense_tflops",
                 "int8": "int8_dense_tops", "fp4": "fp4_dense_tflops"}
        for d, f in pairs.items():
            want = e[f]
            got = s.peak_flops(d)
            assert (got is None) == (want is None), (s.key, d)
            if want is not None:
                assert got == pytest.approx(want * 1e12), (s.key, d)
        matrix = e["fp64_matrix_tflops"]
        assert s.peak_flops("fp64") == pytest.approx((matrix if matrix is not None else e["fp64_vector_tflops"]) * 1e12
                                                     if (matrix or e["fp64_vector_tflops"]) is not None else None)
        assert s.compute_units == e["sm_or_cu_count"]
        assert s.tdp_w == e["tdp_w"]
        assert len([m for m in s.measured if not m.is_cache]) == len(e["measured"])  # cache figures came later
        for pid in e["pci_device_ids"]:
            for dev in re.findall(r"0x([0-9a-f]{4})", pid):
                assert any(p.endswith(dev) for p in s.pci_ids), (s.key, pid)
    assert seen == set(ref), "every GPU of the reference table is in the database"


def test_every_number_has_a_source_and_every_source_is_cited(specdb) -> None:
    for s in specdb.all():
        for f in NUMBER_FIELDS:
            if getattr(s, f) is not None:
                assert s.sources.get(f), (s.key, f)
        for d in DTYPES:
            if s.peak_flops(d) is not None:
                assert s.sources.get("peak_flops_per_s") or s.sources.get(f"peak_flops_per_s.{d}"), (s.key, d)
        assert s.sources.get("names") and s.sources.get("pci_ids"), s.key
        for f, ids in s.sources.items():
            for i in ids:
                assert specdb.citation(i), (s.key, f, i)
            if "GS" in ids:  # derived by gpuscope: the arithmetic must be stated
                assert any(k == f or k.startswith(f + ".") or f.startswith(k) for k in s.derived), (s.key, f)
        for m in s.measured:
            assert m.source and specdb.citation(m.source), (s.key, m.metric)
            assert m.fraction_of_spec is None or 0 < m.fraction_of_spec < 1.2


def test_ridge_is_peak_over_bandwidth(specdb) -> None:
    for s in specdb.all():
        for d in DTYPES:
            peak = s.peak_flops(d)
            if peak is None:
                assert s.ridge_flop_per_byte(d) is None
            else:
                assert s.ridge_flop_per_byte(d) == pytest.approx(peak / s.mem_bw_bytes_per_s)
    # spot values from the reference's ridge table
    assert specdb.get("mi300x").ridge_flop_per_byte("bf16") == pytest.approx(1307.4e12 / 5.3e12)
    assert round(specdb.get("mi300x").ridge_flop_per_byte("bf16"), 1) == 246.7
    assert round(specdb.get("h100-sxm").ridge_flop_per_byte("fp8"), 1) == 590.7
    assert round(specdb.get("a100-sxm").ridge_flop_per_byte("bf16"), 1) == 153.0


def test_dtype_conventions(specdb) -> None:
    h100 = specdb.get("h100-sxm")
    assert h100.peak_flops("fp64") == 66.9e12 and h100.peak_flops("fp64_vector") == 33.5e12  # tensor vs vector
    l40s = specdb.get("l40s")
    assert l40s.peak_flops("fp64") == l40s.peak_flops("fp64_vector") == 1.4e12  # no FP64 tensor rate
    assert specdb.get("a100-sxm").peak_flops("fp8") is None
    assert specdb.get("b200").peak_flops("fp4") == 9000e12
    assert h100.peak_flops("bfloat16") == h100.peak_flops("bf16") == h100.peak_flops("c10::BFloat16")
    with pytest.raises(ValueError):
        h100.peak_flops("fp12")
    assert normalize_dtype("torch.float8_e4m3fn") == "fp8"
    assert normalize_dtype("float") == "fp32" and normalize_dtype("c10::Half") == "fp16"
    assert normalize_dtype("nope") is None


def test_gcd_entries_are_exactly_half_of_their_package(specdb) -> None:
    for pkg_key, gcd_key in (("mi250x", "mi250x-gcd"), ("mi250", "mi250-gcd")):
        pkg, gcd = specdb.get(pkg_key), specdb.get(gcd_key)
        assert pkg.visible_as == gcd_key and pkg.devices_per_package == 2 and gcd.part_of == pkg_key
        assert gcd.memory_bytes * 2 == pkg.memory_bytes
        assert gcd.mem_bw_bytes_per_s * 2 == pytest.approx(pkg.mem_bw_bytes_per_s)
        assert gcd.compute_units * 2 == pkg.compute_units
        for d in DTYPES:
            if pkg.peak_flops(d) is None:
                assert gcd.peak_flops(d) is None
            else:
                assert gcd.peak_flops(d) * 2 == pytest.approx(pkg.peak_flops(d))
        assert gcd.ridge_flop_per_byte("bf16") == pytest.approx(pkg.ridge_flop_per_byte("bf16"))
    assert specdb.get("mi250x-gcd").peak_flops("bf16") == 191.5e12  # S39: 191.5 TF BF16 per MI250X GCD
    assert specdb.get("mi250").peak_flops("fp16") == pytest.approx(362.1e12)  # S17: MI250 FP16 362


def test_names_and_pci_ids_are_well_formed_and_unambiguous(specdb) -> None:
    owners: dict[str, set[str]] = {}
    for s in specdb.all():
        for p in s.pci_ids:
            assert re.fullmatch(r"(10de|1002):[0-9a-f]{4}", p), (s.key, p)
            assert p.startswith("10de" if s.vendor == "nvidia" else "1002")
        for n in s.names:
            owners.setdefault(re.sub(r"[^a-z0-9]", "", n.lower()), set()).add(s.key)
    shared = {n for n, keys in owners.items() if len(keys) > 1}
    # only the MI250X/MI250 strings are shared: by the package entries and their per-GCD entries
    assert shared == {"amdinstinctmi250x", "amdinstinctmi250xmi250"}
    for s in specdb.all():
        assert s.names, s.key
    assert "AMD Instinct MI300X VF" in specdb.get("mi300x").names  # what the TraceLens MI300X trace says
    assert "NVIDIA A100-PG509-200" in specdb.get("a100-sxm-40gb").names  # what the HTA A100 traces say


def test_builtin_load_is_cached() -> None:
    assert load_specs() is load_specs()


# -- find ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,key", [
    ("mi300x", "mi300x"), ("MI300X", "mi300x"), ("h100-sxm", "h100-sxm"), ("H100_SXM", "h100-sxm"),
    ("h100 sxm", "h100-sxm"), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("nvidia h100 80gb hbm3", "h100-sxm"),
    ("AMD Instinct MI300X", "mi300x"), ("AMD_Instinct_MI300X", "mi300x"), ("AMD Instinct MI300X VF", "mi300x"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm"), ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("AMD Radeon Pro W7900", "w7900"), ("AMD Radeon RX 7900 XTX", "rx7900xtx"), ("H100 SXM5", "h100-sxm"),
    ("HGX B200", "b200"), ("gb200", "gb200"), ("b200", "b200"), ("l4", "l4"), ("mi250x-gcd", "mi250x-gcd"),
])
def test_find_by_key_alias_and_reported_name(specdb, text: str, key: str) -> None:
    assert specdb.find(text).key == key


@pytest.mark.parametrize("text,expect", [
    ("h100", ["h100-sxm", "h100-pcie", "h100-nvl"]),
    ("a100", ["a100-sxm", "a100-sxm-40gb", "a100-pcie-40gb", "a100-pcie-80gb"]),
    ("mi300", ["mi300x", "mi300a"]),
    ("AMD Instinct MI250X", ["mi250x", "mi250x-gcd"]),
])
def test_find_ambiguous_lists_candidates(specdb, text: str, expect: list[str]) -> None:
    with pytest.raises(InputError) as ei:
        specdb.find(text)
    assert ei.value.source == text and "ambiguous" in ei.value.message
    for k in expect:
        assert k in ei.value.message


def test_find_unknown_says_how_to_add(specdb) -> None:
    for text in ("tpu-v5", "GRID A100B", "rtx 9999"):
        with pytest.raises(InputError) as ei:
            specdb.find(text)
        assert "unknown GPU" in ei.value.message and "$GPUSCOPE_SPECS" in ei.value.message
        assert "docs/specs.md" in ei.value.message and "mi300x" in ei.value.message
    with pytest.raises(InputError) as ei:  # a product the database knows it does not describe
        specdb.find("NVIDIA H100")
    assert "94GB" in ei.value.message and "h100-sxm" in ei.value.message
    with pytest.raises(InputError):
        specdb.find("   ")


# -- user entries ----------------------------------------------------------------------------


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_user_file_overrides_and_adds(tmp_path: Path) -> None:
    f = _write(tmp_path / "mine.json", {
        "sources": {"MINE": "my STREAM run, 2026-01-01"},
        "gpus": [
            {"key": "mi300x", "mem_bw_tbps": 4.1, "sources": {"mem_bw_bytes_per_s": ["MINE"]}},
            {"key": "h100-sxm", "peak_flops_per_s": {"bf16": 800e12}},
            {"key": "acme-x1", "name": "Acme X1", "vendor": "nvidia", "memory_gb": 96, "mem_bw_tbps": 4,
             "peak_tflops": {"bf16": 1000}, "names": ["ACME X1 96GB"], "compute_units": 100},
        ],
    })
    db = load_specs(f)
    mi = db.get("mi300x")
    assert mi.mem_bw_bytes_per_s == 4.1e12 and mi.peak_flops("bf16") == 1307.4e12  # the rest is built in
    assert mi.sources["mem_bw_bytes_per_s"] == ["MINE"] and db.citation("MINE").startswith("my STREAM")
    assert mi.sources["memory_bytes"] == ["S4", "S16"] and "user:" in mi.origin
    h = db.get("h100-sxm")
    assert h.peak_flops("bf16") == 800e12 and h.peak_flops("fp16") == 989.4e12  # nested mapping merged
    assert h.sources["peak_flops_per_s.bf16"] == [f"user:{f}"]
    new = db.find("acme x1 96gb")
    assert new.key == "acme-x1" and new.memory_bytes == 96 * 10**9 and new.ridge_flop_per_byte("bf16") == 250
    assert db.citation(new.sources["mem_bw_bytes_per_s"][0]).startswith("the user spec file")
    assert len(db) == len(load_specs()) + 1
    # the cached built-in database is untouched
    assert load_specs().get("mi300x").mem_bw_bytes_per_s == 5.3e12


def test_user_file_from_env_and_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _write(tmp_path / "env.json", {"gpus": [{"key": "l4", "tdp_w": 70}]})
    monkeypatch.setenv("GPUSCOPE_SPECS", str(f))
    assert load_specs().get("l4").tdp_w == 70
    monkeypatch.delenv("GPUSCOPE_SPECS")
    xdg = tmp_path / "xdg" / "gpuscope"
    xdg.mkdir(parents=True)
    _write(xdg / "gpus.json", [{"key": "l4", "tdp_w": 71}])  # a bare list of entries is accepted too
    assert load_specs().get("l4").tdp_w == 71
    assert load_specs(f).get("l4").tdp_w == 70  # an explicit path wins


@pytest.mark.parametrize("content,words", [
    ("{not json", "not valid JSON"),
    ('{"gpus": [{"key": "mi300x", "mem_bw": 3}]}', "unknown field"),
    ('{"gpus": [{"name": "no key"}]}', "needs a 'key'"),
    ('{"gpus": [{"key": "new-one", "name": "N"}]}', "needs mem_bw_bytes_per_s"),
    ('{"gpus": [{"key": "mi300x", "peak_flops_per_s": {"fp12": 1}}]}', "unknown dtype"),
    ('{"gpus": [{"key": "mi300x", "mem_bw_bytes_per_s": -1}]}', "must be positive"),
    ('{"gpus": [{"key": "mi300x", "pci_ids": ["nope"]}]}', "not a PCI id"),
    ('{"gpus": [{"key": "Bad Key!", "name": "x"}]}', "must be lowercase"),
    ('{"gpu": []}', "unknown top-level"),
    ('"text"', "JSON object"),
])
def test_broken_user_file_is_an_input_error_naming_the_file(tmp_path: Path, content: str, words: str) -> None:
    f = tmp_path / "bad.json"
    f.write_text(content)
    with pytest.raises(InputError) as ei:
        load_specs(f)
    assert ei.value.source == str(f) and words in ei.value.message
    r = run_cli("specs", "--specs", str(f))
    assert r.code == 2 and r.out == "" and len(r.err.strip().splitlines()) == 1 and str(f) in r.err


def test_missing_user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="no such spec file"):
        load_specs(tmp_path / "absent.json")
    monkeypatch.setenv("GPUSCOPE_SPECS", str(tmp_path / "absent.json"))
    r = run_cli("ceiling", "--gpu", "mi300x", "--params", "7B", "--dtype", "bf16")
    assert r.code == 2 and "absent.json" in r.err and len(r.err.strip().splitlines()) == 1


# -- identification --------------------------------------------------------------------------


@pytest.mark.parametrize("rel,key,exact", [
    ("hta/a100_sxm4_80gb_training_large.json.gz", "a100-sxm", True),
    ("hta/a100_alexnet.json.gz", "a100-sxm-40gb", True),           # "NVIDIA A100-PG509-200" = 0x20b0 (S1)
    ("hta/a100_triton_kernel.json.gz", "a100-sxm-40gb", True),
    ("tracelens/qwen1.5-0.5b-chat/h100.json.gz", "h100-sxm", True),
    ("tracelens/qwen1.5-0.5b-chat/mi300x.json.gz", "mi300x", True),  # "AMD Instinct MI300X VF"
    ("tracelens/b200_eager.json.gz", "b200", True),
    ("tracelens/mi210_gpu_only.json.gz", "mi210", True),
    ("tracelens/vllm_decode_cudagraph/graph_execution.json.gz", "mi300x", False),  # empty name: inferred
])
def test_identify_shared_traces(specdb, rel: str, key: str, exact: bool) -> None:
    ident = specdb.identify_trace_device(_props(rel))
    assert ident.key == key and ident.exact is exact
    assert ident.candidates == (key,)
    if not exact:
        assert ident.note and "inferred" in ident.note and "not confirmed" in ident.note


def test_identify_mi250_gcd_trace_is_ambiguous_with_mi210(specdb) -> None:
    # "AMD Radeon Graphics", gfx 9.0, 104 CUs, 64 GiB: an MI250 GCD and an MI210 report the same
    ident = specdb.identify_trace_device(_props("hta/mi250_rocm6.2_minitoy_train.json.gz"))
    assert ident.spec is None and not ident.exact
    assert set(ident.candidates) == {"mi250-gcd", "mi210"}
    assert "generic" in ident.note and "alike" in ident.note


def test_identify_by_name_cu_count_and_pci_id(specdb) -> None:
    ident = specdb.identify(name="AMD Instinct MI250X / MI250", compute_units=110)
    assert (ident.key, ident.exact, ident.via) == ("mi250x-gcd", True, "name + CU count")
    ident = specdb.identify(name="AMD Instinct MI250X / MI250", compute_units=104)
    assert ident.key == "mi250-gcd" and ident.exact
    ident = specdb.identify(name="AMD Instinct MI250X / MI250")
    assert ident.spec is None and set(ident.candidates) == {"mi250x-gcd", "mi250-gcd"}
    assert specdb.identify(name="AMD Instinct MI250X").key == "mi250x-gcd"  # software sees GCDs, never the package
    assert specdb.identify(name="NVIDIA H100 PCIe", compute_units=114, memory_bytes=85_000_000_000).key == "h100-pcie"
    assert specdb.identify(name="NVIDIA H100 NVL").key == "h100-nvl"
    ident = specdb.identify(pci_id="0x74a1", vendor="AMD")
    assert (ident.key, ident.exact, ident.via) == ("mi300x", True, "pci id")
    assert specdb.identify(pci_id="10DE:2330").key == "h100-sxm"
    ident = specdb.identify(pci_id="1002:744c")  # shared by four RX 7900 models
    assert ident.spec is None and ident.candidates == ("rx7900xtx",) and "revision" in ident.note


def test_identify_never_guesses_silently(specdb) -> None:
    # a listed name whose properties disagree: the entry, but not as a fact
    ident = specdb.identify(name="NVIDIA A100-SXM4-80GB", memory_bytes=42_297_524_224)
    assert ident.key == "a100-sxm" and not ident.exact and "GiB" in ident.note
    # names and ids the database knows to be other products
    for kw in ({"name": "NVIDIA H100"}, {"pci_id": "10de:2339"}):
        ident = specdb.identify(**kw)
        assert ident.spec is None and ident.candidates == ("h100-sxm",) and "94GB" in ident.note
    ident = specdb.identify(name="NVIDIA L40", compute_units=142, memory_bytes=48 * 2**30, compute_capability="8.9")
    assert ident.spec is None and ident.candidates == ("l40s",)
    # a MIG slice is not the whole GPU
    ident = specdb.identify(name="NVIDIA A100-SXM4-80GB MIG 1g.10gb", memory_bytes=10 * 2**30)
    assert ident.spec is None and ident.candidates == ("a100-sxm",) and "MIG" in ident.note
    # unknown model name: inferred within its family only, flagged
    ident = specdb.identify(name="NVIDIA H100 Custom", compute_capability="9.0", compute_units=114, memory_bytes=80 * 2**30)
    assert ident.key == "h100-pcie" and not ident.exact and "not listed" in ident.note
    ident = specdb.identify(name="Tesla P100-SXM2-16GB", compute_capability="6.0", compute_units=56, memory_bytes=16 * 2**30)
    assert ident.spec is None and ident.candidates == ()
    # too little evidence
    ident = specdb.identify(name="AMD Radeon Graphics", memory_bytes=192 * 2**30)
    assert ident.spec is None and "too little" in ident.note
    ident = specdb.identify(name="", compute_capability="9.4", compute_units=304, vendor="amd")
    assert ident.spec is None and set(ident.candidates) == {"mi300x", "mi325x"}
    # a compute partition of an MI300X
    ident = specdb.identify(name="", arch_target="gfx942:sramecc+:xnack-", compute_units=38, memory_bytes=24 * 2**30)
    assert ident.spec is None and "partition" in ident.note
    # with the gfx target, CU count and memory it is inferred
    ident = specdb.identify(name="AMD Radeon Graphics", arch_target="gfx942", compute_units=304, memory_bytes=192 * 2**30)
    assert (ident.key, ident.exact, ident.via) == ("mi300x", False, "gfx target + CU count + memory")


def test_identify_handwritten_trace_props(specdb) -> None:
    props = {"id": 0, "name": "", "totalGlobalMem": 274877906944, "computeMajor": 9, "computeMinor": 4,
             "warpSize": 64, "numSms": 304}
    ident = specdb.identify_trace_device(props)
    assert ident.key == "mi325x" and not ident.exact  # 256 GiB: not an MI300X
    props = {"name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "computeMajor": 9, "computeMinor": 0,
             "numSms": 132, "warpSize": 32}
    assert specdb.identify_trace_device(props).key == "h100-sxm"
    assert specdb.identify_trace_device({}).spec is None
    assert specdb.identify_trace_device({"name": "AMD Radeon Graphics", "gcnArchName": "gfx950", "numSms": 256,
                                     "totalGlobalMem": 288 * 2**30}).candidates == ("mi350x", "mi355x")
    for s in specdb.all():  # packages are never an identification
        ident = specdb.identify(name=s.names[0], compute_units=s.compute_units)
        assert ident.spec is None or ident.spec.visible_as is None


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_specs_table(specdb) -> None:
    r = run_cli("specs")
    assert r.code == 0, r.err
    for s in specdb.all():
        assert re.search(rf"^{re.escape(s.key)}\s", r.out, re.M), s.key
    line = next(ln for ln in r.out.splitlines() if ln.startswith("mi300x "))
    assert "192" in line and "5.30" in line and "1307.4" in line and "2614.9" in line and "246.7" in line and "304 CU" in line


def test_cli_specs_json_list(specdb) -> None:
    r = run_cli("specs", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["schema"] == "gpuscope.specs/1"
    assert [d["key"] for d in doc["gpus"]] == [s.key for s in specdb.all()]
    for d in doc["gpus"]:
        for dt in DTYPES:
            peak = d["peak_flops_per_s"][dt]
            ridge = d["ridge_flop_per_byte"][dt]
            assert (ridge is None) == (peak is None)
            if peak is not None:
                assert ridge == pytest.approx(peak / d["mem_bw_bytes_per_s"], abs=0.01)


def test_cli_specs_one_entry() -> None:
    r = run_cli("specs", "mi300x", "--json")
    assert r.code == 0, r.err
    d = r.json()
    assert d["key"] == "mi300x" and d["memory_bytes"] == 192e9 and d["mem_bw_bytes_per_s"] == 5.3e12
    assert d["ridge_flop_per_byte"]["bf16"] == pytest.approx(246.68, abs=0.01)
    assert d["source_citations"]["S16"].startswith("AMD ROCm documentation")
    assert any(m["metric"] == "hbm_stream_copy" for m in d["measured"])
    r = run_cli("specs", "NVIDIA H100 80GB HBM3")
    assert r.code == 0 and r.out.startswith("NVIDIA H100 SXM5 80GB (h100-sxm)")
    assert "ridge FLOP/B" in r.out and "[S7]" in r.out and "590.7" in r.out


@pytest.mark.parametrize("args", [("specs", "h100"), ("specs", "nope"), ("specs", "a100", "--json")])
def test_cli_specs_bad_gpu_is_exit_2_one_line(args) -> None:
    r = run_cli(*args)
    assert r.code == 2 and r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpuscope specs: {args[1]}: ")


# -- packaging -------------------------------------------------------------------------------


def test_spec_data_is_package_data() -> None:
    from importlib import resources

    data = json.loads(resources.files("gpuscope").joinpath("data/gpus.json").read_text())
    assert data["schema"] == "gpuscope.gpus/1" and len(data["gpus"]) == len(load_specs())
    assert 'gpuscope = ["data/*.json"' in (REPO / "pyproject.toml").read_text().replace("'", '"')


@pytest.mark.slow
def test_spec_data_ships_in_the_wheel(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(dist)], capture_output=True, text=True)
    if p.returncode != 0 and "No module named" in p.stderr:
        pytest.skip(f"cannot build a wheel here: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, p.stderr
    (wheel,) = dist.glob("gpuscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpuscope/data/gpus.json" in names and "gpuscope/analyzers/ceiling.py" in names
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    code = "import gpuscope.specs as s; print(s.__file__); print(s.load_specs().find('mi300x').key)"
    import os

    env = dict(os.environ, PYTHONPATH=str(target))
    env.pop("GPUSCOPE_SPECS", None)
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [str(target / "gpuscope" / "specs" / "__init__.py"), "mi300x"]


def test_spec_type_is_frozen(specdb) -> None:
    s = specdb.get("h100-sxm")
    assert isinstance(s, GpuSpec)
    with pytest.raises(AttributeError):
        s.key = "x"  # type: ignore[misc]
    assert hash(s) == hash(specdb.get("h100-sxm")) and not math.isnan(s.ridge_flop_per_byte("bf16"))


def test_small_things_a_careful_reader_trips_on(specdb) -> None:
    # the TB/s column lines up on the decimal point
    lines = run_cli("specs").out.splitlines()
    header = lines[0]
    col = header.index("TB/s") + len("TB/s")
    dots = {ln[:col].rstrip()[-3] for ln in lines[2:] if ln[:col].rstrip()[-1:].isdigit()}
    assert dots == {"."}
    # an ambiguous name lists only keys one can pass
    r = run_cli("specs", "h100")
    assert "not in the database" not in r.err and "h100-sxm" in r.err
    # the ceiling's note says whose memory, and its realistic line does not speak of "this GPU"
    c = run_cli("ceiling", "--gpu", "mi300x", "--params", "700B", "--dtype", "fp16").out
    assert "does not fit in the 192.0 GB of one mi300x" in c and "one ×" not in c
    assert "on this GPU" not in c and "mi300x (published measurements)" in c


def test_one_device_identity_for_collectors_and_calibrate() -> None:
    """Collectors' devices and calibrated devices are DeviceIdentity; match_spec is the one way to
    an entry, and the collectors' JSON keeps its field order (recordings, devices --json)."""
    from gpuscope.calibrate import CalibrationDevice
    from gpuscope.collectors import DeviceInfo, attach_specs
    from gpuscope.device import DeviceIdentity, match_spec

    d = DeviceInfo(key="gpu0", vendor="nvidia", name="NVIDIA H100 80GB HBM3", pci_device_id="0x2330",
                   memory_total_bytes=85_520_809_984)
    c = CalibrationDevice(backend="rocm", name="AMD Instinct MI300X")
    assert isinstance(d, DeviceIdentity) and isinstance(c, DeviceIdentity) and c.vendor == "amd"
    assert list(d.to_dict()) == ["key", "vendor", "kind", "name", "index", "uuid", "pci_bus_id", "pci_device_id",
                                 "memory_total_bytes", "compute_capability", "num_sms", "warp_size", "parent",
                                 "spec_key", "spec_exact", "source", "supported", "unsupported", "properties",
                                 "lost"]
    ident = match_spec(d.name, pci_id=d.pci_device_id, memory_bytes=d.memory_total_bytes)
    attach_specs([d])
    assert ident.spec is not None and (d.spec_key, d.spec_exact) == (ident.spec.key, ident.exact) == ("h100-sxm", True)
    assert DeviceInfo.from_dict(d.to_dict()) == d
    unknown = DeviceIdentity(vendor="nvidia", name="Mystery GPU")
    assert not unknown.set_spec(match_spec(unknown.name)) and unknown.spec_key is None
