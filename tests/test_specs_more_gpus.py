"""Issue 28, points 5 and 6 (data): the GPUs people serve with (V100, T4, A10/A10G, A30, A40), names as
NVML / torch / Kineto / amd-smi report them with or without vendor words, and each GPU's cache
bandwidths (``l2_bw_bytes_per_s``, ``last_level_cache_bw_bytes_per_s``) with sources and validation."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from gpuscope.errors import InputError
from gpuscope.specs import DTYPES, load_specs

pytestmark = pytest.mark.usefixtures("no_user_specs")

NEW_KEYS = ("v100-sxm2-16gb", "v100-sxm2-32gb", "v100-pcie-16gb", "v100-pcie-32gb", "t4", "a10", "a10g", "a30", "a40")

# Device names as software reports them -> entry. NVML / torch.cuda.get_device_name / Kineto
# deviceProperties 'name' for NVIDIA (NVML's own strings: the NV1 source, nvidia-smi listings),
# amd-smi / torch for AMD, plus the vendor-word variants people and older drivers write.
REAL_NAMES = [
    ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),       # NVML, torch, HTA's V100 traces
    ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
    ("NVIDIA Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),  # vendor word added
    ("Tesla T4", "t4"),
    ("NVIDIA Tesla T4", "t4"),
    ("NVIDIA T4", "t4"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA A10G", "a10g"),
    ("A10G", "a10g"),
    ("NVIDIA A30", "a30"),
    ("NVIDIA A40", "a40"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm"),
    ("NVIDIA A100-PG509-200", "a100-sxm-40gb"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA B200", "b200"),
    ("AMD Instinct MI300X", "mi300x"),
    ("AMD Instinct MI300X VF", "mi300x"),
    ("Instinct MI300X OAM", "mi300x"),
    ("AMD Instinct MI210", "mi210"),
    ("AMD Instinct MI325X", "mi325x"),
    ("AMD Instinct MI100", "mi100"),                   # amd-smi / rocm-smi 'Card Series', torch on ROCm
    ("Instinct MI100", "mi100"),
]

AMBIGUOUS = [
    ("V100", ["v100-sxm2-16gb", "v100-sxm2-32gb", "v100-pcie-16gb", "v100-pcie-32gb"]),
    ("Tesla V100", ["v100-sxm2-16gb", "v100-pcie-32gb"]),
    ("v100 sxm2", ["v100-sxm2-16gb", "v100-sxm2-32gb"]),
    ("GRID A100", ["a100-sxm", "a100-pcie-80gb"]),
    ("h100", ["h100-sxm", "h100-pcie", "h100-nvl"]),
    ("mi300", ["mi300x", "mi300a"]),
]


# -- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,key", REAL_NAMES)
def test_real_device_names_resolve(specdb, name: str, key: str) -> None:
    assert specdb.find(name).key == key
    ident = specdb.identify(name=name)
    assert (ident.key, ident.exact, ident.via) == (key, True, "name"), ident.note


@pytest.mark.parametrize("name,expect", AMBIGUOUS)
def test_ambiguous_names_stay_errors_with_candidates(specdb, name: str, expect: list[str]) -> None:
    with pytest.raises(InputError) as ei:
        specdb.find(name)
    assert "ambiguous" in ei.value.message
    for k in expect:
        assert k in ei.value.message


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=st.sampled_from([p for p in REAL_NAMES if not p[0].startswith(("NVIDIA Tesla", "Instinct", "A10G"))]),
       prefix=st.sampled_from(["", "NVIDIA ", "nvidia ", "AMD ", "Tesla ", "NVIDIA Tesla ", "Instinct "]),
       sep=st.sampled_from([" ", "_", "-"]))
def test_vendor_words_never_change_the_answer(specdb, pair: tuple[str, str], prefix: str, sep: str) -> None:
    name, key = pair
    spelled = (prefix + name).replace(" ", sep)
    assert specdb.find(spelled).key == key


def test_vendor_words_do_not_turn_a_family_into_another_product(specdb) -> None:
    # "NVIDIA H100" is what NVML calls the 94GB variant; "h100" typed alone is the family
    with pytest.raises(InputError) as ei:
        specdb.find("h100")
    assert "ambiguous" in ei.value.message
    with pytest.raises(InputError) as ei:
        specdb.find("NVIDIA H100")
    assert "94GB" in ei.value.message
    # a vGPU profile is never a whole GPU, with or without the GRID brand
    assert specdb.identify(name="GRID A100-40C").spec is None
    # a MIG slice of a V100-class name stays a MIG slice
    ident = specdb.identify(name="NVIDIA A100-SXM4-80GB MIG 1g.10gb")
    assert ident.spec is None and "MIG" in ident.note


@pytest.mark.parametrize("props,key,exact", [
    # Kineto deviceProperties as torch writes them (V100 16GB reports ~15.8 GiB, T4 ~14.7-15 GiB)
    ({"name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 16_945_512_448, "computeMajor": 7, "computeMinor": 0,
      "numSms": 80, "warpSize": 32}, "v100-sxm2-16gb", True),
    ({"name": "Tesla V100-SXM2-32GB", "totalGlobalMem": 34_089_730_048, "computeMajor": 7, "computeMinor": 0,
      "numSms": 80, "warpSize": 32}, "v100-sxm2-32gb", True),
    ({"name": "Tesla T4", "totalGlobalMem": 15_843_721_216, "computeMajor": 7, "computeMinor": 5, "numSms": 40,
      "warpSize": 32}, "t4", True),
    ({"name": "NVIDIA A10G", "totalGlobalMem": 23_028 * 2**20, "computeMajor": 8, "computeMinor": 6, "numSms": 80,
      "warpSize": 32}, "a10g", True),  # the entry gives no SM count: nothing to contradict
    ({"name": "NVIDIA A10", "totalGlobalMem": 23_836 * 2**20, "computeMajor": 8, "computeMinor": 6, "numSms": 72,
      "warpSize": 32}, "a10", True),
    # a 16GB V100 name with 32 GB of memory: the entry, but not as a fact
    ({"name": "Tesla V100-SXM2-16GB", "totalGlobalMem": 34_089_730_048, "computeMajor": 7, "computeMinor": 0,
      "numSms": 80}, "v100-sxm2-16gb", False),
    ({"name": "AMD Instinct MI100", "gcnArchName": "gfx908:sramecc+:xnack-", "totalGlobalMem": 34_342_961_152,
      "computeMajor": 9, "computeMinor": 0, "numSms": 120, "warpSize": 64}, "mi100", True),
    # AMD as today: the gfx target, CU count and memory
    ({"name": "", "gcnArchName": "gfx942:sramecc+:xnack-", "totalGlobalMem": 192 * 2**30, "numSms": 304,
      "warpSize": 64}, "mi300x", False),
])
def test_identify_trace_device_properties(specdb, props: dict, key: str, exact: bool) -> None:
    ident = specdb.identify_trace_device(props)
    assert (ident.key, ident.exact) == (key, exact), ident.note


def test_pci_ids_of_the_new_gpus(specdb) -> None:
    for pci, key in (("10de:1db1", "v100-sxm2-16gb"), ("0x1db5", "v100-sxm2-32gb"), ("10de:1db4", "v100-pcie-16gb"),
                     ("10de:1db6", "v100-pcie-32gb"), ("10de:1eb8", "t4"), ("10de:2236", "a10"),
                     ("10de:2237", "a10g"), ("10de:20b7", "a30"), ("10de:2235", "a40")):
        ident = specdb.identify(pci_id=pci, vendor="nvidia")
        assert (ident.key, ident.exact, ident.via) == (key, True, "pci id")


# -- the new entries --------------------------------------------------------------------------


def test_new_entries_are_complete_and_sourced(specdb) -> None:
    for key in NEW_KEYS:
        s = specdb.get(key)
        assert s is not None and s.vendor == "nvidia" and s.names and s.pci_ids, key
        assert s.memory_bytes and s.mem_bw_bytes_per_s and s.compute_capability, key
        assert s.host_link == "pcie" and s.pcie_generation in (3, 4) and s.pcie_lanes == 16, key
        for f in ("memory_bytes", "mem_bw_bytes_per_s", "compute_units", "boost_clock_mhz", "l2_cache_mb",
                  "l2_bw_bytes_per_s", "tdp_w", "host_link_bytes_per_s", "pcie_generation"):
            if getattr(s, f) is not None:
                assert s.sources.get(f), (key, f)
        for d in DTYPES:
            if s.peak_flops(d) is not None:
                assert s.sources.get(f"peak_flops_per_s.{d}") or s.sources.get("peak_flops_per_s"), (key, d)
                ridge = s.ridge_flop_per_byte(d)
                assert 0.1 <= ridge <= 1000, (key, d, ridge)  # a sane roofline: neither inverted nor absurd
        if s.peak_flops("fp16") is not None:  # the 16-bit tensor ridge of a datacenter part: tens to hundreds
            assert 50 <= s.ridge_flop_per_byte("fp16") <= 500, key
        for ids in s.sources.values():
            assert all(specdb.citation(i) for i in ids), (key, ids)


def test_the_dtypes_each_architecture_lacks_are_null(specdb) -> None:
    for key in ("v100-sxm2-16gb", "v100-sxm2-32gb", "v100-pcie-16gb", "v100-pcie-32gb", "t4"):
        s = specdb.get(key)
        assert s.peak_flops("bf16") is None and s.peak_flops("tf32") is None and s.peak_flops("fp8") is None, key
        assert s.peak_flops("fp16") >= 7.9 * s.peak_flops("fp32"), key  # the tensor-core rate, not the vector one
    v = specdb.get("v100-sxm2-16gb")
    assert (v.peak_flops("fp64"), v.peak_flops("fp32"), v.peak_flops("fp16")) == (7.8e12, 15.7e12, 125e12)
    assert v.mem_bw_bytes_per_s == 900e9 and v.memory_bytes == 16e9 and v.compute_units == 80
    assert round(v.ridge_flop_per_byte("fp16"), 1) == 138.9
    p = specdb.get("v100-pcie-32gb")
    assert (p.peak_flops("fp16"), p.tdp_w, p.memory_bytes) == (112e12, 250, 32e9)
    a10 = specdb.get("a10")
    assert (a10.peak_flops("bf16"), a10.peak_flops("tf32"), a10.mem_bw_bytes_per_s) == (125e12, 62.5e12, 600e9)
    assert specdb.get("a30").peak_flops("bf16") == 165e12 and specdb.get("a40").peak_flops("bf16") == 149.7e12
    # the A10G: memory as published, no compute peak copied from the A10
    g = specdb.get("a10g")
    assert g.mem_bw_bytes_per_s == 600e9 and g.memory_bytes == 24e9
    assert all(g.peak_flops(d) is None for d in DTYPES) and g.compute_units is None
    assert any("no datasheet" in n for n in g.notes)
    # CDNA 1: no TF32 / FP8 / FP64 matrix; BF16 at half the FP16 matrix rate; the FP32 matrix rate kept aside
    mi = specdb.get("mi100")
    assert (mi.peak_flops("fp16"), mi.peak_flops("bf16"), mi.peak_flops("fp32")) == (184.6e12, 92.3e12, 23.1e12)
    assert mi.peak_flops("tf32") is None and mi.peak_flops("fp8") is None and mi.peak_flops("fp64") == 11.5e12
    assert mi.peak_flops_per_s_other == {"fp32_matrix": 46.1e12} and mi.arch_target == "gfx908"
    assert specdb.identify(pci_id="0x738c", vendor="amd").key == "mi100"


# -- cache bandwidths -------------------------------------------------------------------------


def test_cache_bandwidths_are_sourced_and_above_device_memory(specdb) -> None:
    seen = 0
    for s in specdb.all():
        for f in ("l2_bw_bytes_per_s", "last_level_cache_bw_bytes_per_s"):
            v = getattr(s, f)
            if v is None:
                continue
            seen += 1
            assert math.isfinite(v) and v > s.mem_bw_bytes_per_s, (s.key, f)
            assert s.sources.get(f), (s.key, f)
            if "GS" in s.sources[f]:
                assert f in s.derived, (s.key, f)
        if s.l2_bw_bytes_per_s and s.last_level_cache_bw_bytes_per_s:
            assert s.last_level_cache_bw_bytes_per_s <= s.l2_bw_bytes_per_s, s.key
        if s.last_level_cache_bw_bytes_per_s:
            assert s.last_level_cache_mb, s.key  # a bandwidth only for a cache the entry has
    assert seen >= 15
    mi = specdb.get("mi300x")
    assert (mi.l2_bw_bytes_per_s, mi.last_level_cache_bw_bytes_per_s) == (34.4e12, 17.2e12)
    assert mi.cache_roofs() == {"l2": 34.4e12, "llc": 17.2e12}
    assert specdb.get("a100-sxm").l2_bw_bytes_per_s == pytest.approx(5120 * 1410e6)
    assert specdb.get("mi250x-gcd").l2_bw_bytes_per_s * 2 == pytest.approx(specdb.get("mi250x").l2_bw_bytes_per_s)
    # unknown stays unknown: nothing published or measured for Blackwell's or the T4's L2
    for key in ("b200", "gb200", "t4", "a10g", "l40s"):
        assert specdb.get(key).l2_bw_bytes_per_s is None and specdb.get(key).cache_roofs() == {}, key
    # measured on the H100 PCIe; only a lower bound for the faster GH100 SKUs, which a roof must
    # not be (it would overstate percent of roof and flag true results): left null, and said so
    pcie = specdb.get("h100-pcie")
    assert pcie.l2_bw_bytes_per_s == 5.5e12 and pcie.sources["l2_bw_bytes_per_s"] == ["CCH100"]
    for key in ("h100-sxm", "h100-nvl", "h200"):
        s = specdb.get(key)
        assert s.l2_bw_bytes_per_s is None and "lower bound" in s.derived["l2_bw_bytes_per_s_unknown"], key


def test_cache_measurements_stay_out_of_the_memory_ceiling(specdb) -> None:
    v = specdb.get("v100-sxm2-16gb")
    assert [m.metric for m in v.cache_bandwidth_measurements()] == ["l2_read"]
    assert all(not m.is_cache for m in v.bandwidth_measurements())
    assert v.bandwidth_measurements() == ()  # the one V100 figure is an L2 one


def test_cli_specs_shows_cache_bandwidths() -> None:
    r = run_cli("specs", "mi300x")
    assert r.code == 0, r.err
    assert "cache bandwidth        L2 34.4 TB/s, Infinity Cache (MALL) 17.2 TB/s" in r.out
    r = run_cli("specs", "Tesla V100-SXM2-16GB")
    assert r.code == 0 and r.out.startswith("NVIDIA Tesla V100 SXM2 16GB (v100-sxm2-16gb)")
    assert "L2 3.14 TB/s" in r.out and "[JIA18]" in r.out and "[A100WP]" in r.out
    r = run_cli("specs", "NVIDIA Tesla T4", "--json")
    d = r.json()
    assert d["key"] == "t4" and d["l2_bw_bytes_per_s"] is None and d["last_level_cache_bw_bytes_per_s"] is None


def test_cli_specs_json_schema_of_the_cache_fields(specdb) -> None:
    doc = run_cli("specs", "--json").json()
    assert len(doc["gpus"]) == len(specdb) == 36
    for g in doc["gpus"]:
        for f in ("l2_bw_bytes_per_s", "last_level_cache_bw_bytes_per_s"):
            assert f in g and (g[f] is None or (isinstance(g[f], (int, float)) and g[f] > g["mem_bw_bytes_per_s"]))
    one = run_cli("specs", "mi300x", "--json").json()
    assert one["l2_bw_bytes_per_s"] == 34.4e12 and one["source_citations"]["CDNA3WP"].startswith("AMD, 'Introducing")
    assert "36 GPUs." in run_cli("specs").out


@pytest.mark.parametrize("ids", [("v100",), ("tesla",), ("a10", "--json")])
def test_cli_specs_ambiguous_or_bare_brand_is_exit_2_one_line(ids) -> None:
    r = run_cli("specs", *ids)
    if ids[0] == "a10":  # "a10" is a key (not "a100", not "a10g")
        assert r.code == 0 and r.json()["key"] == "a10"
        return
    assert r.code == 2 and r.out == "" and len(r.err.strip().splitlines()) == 1


# -- user files: the cache fields are validated like every other number ------------------------


@pytest.mark.parametrize("entry,words", [
    ({"key": "h100-sxm", "l2_bw_bytes_per_s": -1}, "must be positive"),
    ({"key": "h100-sxm", "l2_bw_bytes_per_s": "fast"}, "must be a number"),
    ({"key": "h100-sxm", "last_level_cache_bw_bytes_per_s": float("inf")}, "must be a number"),
    ({"key": "h100-sxm", "l2_bw_bytes_per_s": 5.5e9}, "not above mem_bw_bytes_per_s"),       # GB/s for TB/s
    ({"key": "h100-sxm", "l2_bw_tbps": 3.0}, "not above mem_bw_bytes_per_s"),                # below 3.35 TB/s HBM
    ({"key": "h100-pcie", "mem_bw_tbps": 6}, "not above mem_bw_bytes_per_s"),                 # built-in L2 now below
    ({"key": "a100-sxm", "mem_bw_tbps": 8}, "not above mem_bw_bytes_per_s"),                  # built-in L2 now below
    ({"key": "mi300x", "last_level_cache_bw_tbps": 40}, "cannot outrun it"),                  # LLC above L2
    ({"key": "acme-y", "name": "Acme Y", "mem_bw_tbps": 2, "peak_tflops": {"bf16": 100},
      "l2_bw_tbps": 1}, "not above mem_bw_bytes_per_s"),
])
def test_user_cache_bandwidths_are_validated(tmp_path: Path, entry: dict, words: str) -> None:
    f = tmp_path / "mine.json"
    # allow_nan: a user's file may hold Infinity (Python's json reads it); it must still be refused
    f.write_text(json.dumps({"gpus": [entry]}, allow_nan=True))
    with pytest.raises(InputError) as ei:
        load_specs(f)
    assert ei.value.source == str(f) and words in ei.value.message
    r = run_cli("specs", "--specs", str(f))
    assert r.code == 2 and r.out == "" and len(r.err.strip().splitlines()) == 1 and str(f) in r.err


def test_user_cache_bandwidths_accepted_and_sourced(tmp_path: Path) -> None:
    f = tmp_path / "mine.json"
    f.write_text(json.dumps({"sources": {"MINE": "our L2 sweep, 2026-11"},
                             "gpus": [{"key": "h100-sxm", "l2_bw_tbps": 7.5,
                                       "sources": {"l2_bw_bytes_per_s": ["MINE"]}},
                                      {"key": "a10g", "l2_bw_bytes_per_s": 2.0e12}]}))
    db = load_specs(f)
    h = db.get("h100-sxm")
    assert h.l2_bw_bytes_per_s == 7.5e12 and h.sources["l2_bw_bytes_per_s"] == ["MINE"]
    assert db.get("a10g").sources["l2_bw_bytes_per_s"] == [f"user:{f}"]
    assert load_specs().get("h100-sxm").l2_bw_bytes_per_s is None  # the built-in data is untouched
