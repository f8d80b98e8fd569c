"""`gpuscope ceiling`: decode speed-of-light arithmetic checked by hand against the spec sheet."""
from __future__ import annotations

import string

import pytest

from conftest import run_cli
from gpuscope.analyzers.ceiling import (BYTES_PER_PARAM, PARAMETERS, Claim, DecodeQuery, Decoding, KVCache, Model,
                                        ParameterError, decode_ceiling, kv_bytes_per_token, parse_bytes, parse_count)
from gpuscope.errors import InputError

pytestmark = pytest.mark.usefixtures("no_user_specs")


# -- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text,value", [
    ("70e9", 70e9), ("70B", 70e9), ("70b", 70e9), ("7.5M", 7.5e6), ("1.5T", 1.5e12), ("8k", 8e3), ("405", 405.0),
    ("1,000", 1000.0), ("1_000", 1000.0), (".5B", 0.5e9), ("70 B", 70e9), ("0", 0.0),
])
def test_parse_count(text: str, value: float) -> None:
    assert parse_count(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["70X", "", "B", "-1", "nan", "inf", "1e400", "7O"])
def test_parse_count_rejects(text: str) -> None:
    with pytest.raises(InputError) as ei:
        parse_count(text, "--params")
    assert ei.value.source == "--params"


def test_parse_bytes() -> None:
    assert parse_bytes("140GB") == 140e9
    assert parse_bytes("130GiB") == 130 * 2**30
    assert parse_bytes("140e9") == 140e9 and parse_bytes("140B") == 140e9  # counts: B is billion
    assert parse_bytes("1.5 TB") == 1.5e12
    with pytest.raises(InputError):
        parse_bytes("140 furlongs")


def test_bytes_per_param_table() -> None:
    assert BYTES_PER_PARAM == {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5, "fp4": 0.5}
    assert kv_bytes_per_token(80, 8, 128, 2) == 2 * 80 * 8 * 128 * 2 == 327_680


# -- the arithmetic --------------------------------------------------------------------------


def test_70b_fp16_on_mi300x(specdb) -> None:
    r = decode_ceiling(specdb.get("mi300x"), DecodeQuery(Model(70e9, "fp16"), claim=Claim(314)), db=specdb)
    assert r.bytes_per_step == 140e9 and r.weight_bytes == 140e9 and r.kv_cache_bytes == 0
    assert r.memory_bound_tokens_per_s == pytest.approx(5.3e12 / 140e9)            # 37.857
    assert round(r.ceiling_tokens_per_s, 1) == 37.9
    assert r.aggregate_ceiling_tokens_per_s == r.ceiling_tokens_per_s             # batch 1
    assert r.compute_bound_tokens_per_s == pytest.approx(1307.4e12 / (2 * 70e9))  # 9338.6
    assert r.binding == "memory bandwidth" and r.compute_dtype == "fp16"
    assert r.verdict == "impossible" and r.claim_basis == "per_sequence"
    assert r.claim_ratio == pytest.approx(314 / (5.3e12 / 140e9))
    assert r.fits_in_memory is True
    # measured STREAM on MI300X is 77.2-77.5% of spec (S24)
    real = r.realistic
    assert real["basis"] == "mi300x (published measurements)"
    assert (real["bandwidth_fraction_low"], real["bandwidth_fraction_high"]) == (0.772, 0.775)
    assert real["ceiling_tokens_per_s"] == pytest.approx(5.3e12 * 0.7735 / 140e9)
    ok = decode_ceiling(specdb.get("mi300x"), DecodeQuery(Model(70e9, "fp16"), claim=Claim(30)))
    assert ok.verdict == "possible"


def test_kv_cache_batch_and_aggregate(specdb) -> None:
    # Llama-70B-like: 80 layers, 8 KV heads, head dim 128, fp16 KV; fp8 weights; 8 sequences of 4096 tokens
    r = decode_ceiling(specdb.get("h100-sxm"), DecodeQuery(
        Model(70e9, "fp8"), Decoding(batch=8, context=4096), KVCache(layers=80, kv_heads=8, head_dim=128, dtype="fp16"),
        Claim(400, aggregate=True)))
    kv = 2 * 80 * 8 * 128 * 2
    assert r.kv_bytes_per_token == kv
    assert r.kv_cache_bytes == kv * 4096 * 8
    assert r.bytes_per_step == 70e9 + kv * 4096 * 8
    per_seq = 3.35e12 / (70e9 + kv * 4096 * 8)
    assert r.ceiling_tokens_per_s == pytest.approx(per_seq)                         # 41.49
    assert r.aggregate_ceiling_tokens_per_s == pytest.approx(8 * per_seq)           # 331.9
    assert r.compute_bound_tokens_per_s == pytest.approx(1978.9e12 / (2 * 70e9 * 8))
    assert r.verdict == "impossible" and r.claim_basis == "aggregate"  # 400 > 331.9
    r2 = decode_ceiling(specdb.get("h100-sxm"), DecodeQuery(Model(70e9, "fp8"), Decoding(batch=8, context=4096),
                                                             KVCache(bytes_per_token=kv), Claim(40)))
    assert r2.bytes_per_step == r.bytes_per_step and r2.verdict == "possible"
    # the KV dtype defaults to the weight dtype
    r3 = decode_ceiling(specdb.get("h100-sxm"), DecodeQuery(Model(70e9, "fp8"), Decoding(batch=1, context=1000),
                                                             KVCache(layers=80, kv_heads=8, head_dim=128)))
    assert r3.kv_bytes_per_token == kv / 2


def test_compute_binds_at_large_batch(specdb) -> None:
    r = decode_ceiling(specdb.get("h100-sxm"), DecodeQuery(Model(1e9, "bf16"), Decoding(batch=4096), claim=Claim(150)))
    assert r.memory_bound_tokens_per_s == pytest.approx(3.35e12 / 2e9)            # 1675
    assert r.compute_bound_tokens_per_s == pytest.approx(989.4e12 / (2e9 * 4096))  # 120.8
    assert r.binding == "compute" and r.ceiling_tokens_per_s == r.compute_bound_tokens_per_s
    assert r.verdict == "impossible"  # under the memory bound, over the compute bound


def test_dtype_fallbacks_and_sizes(specdb) -> None:
    r = decode_ceiling(specdb.get("a100-sxm"), DecodeQuery(Model(8e9, "fp8")))  # no FP8 units on Ampere
    assert r.compute_dtype == "fp16" and any("dequantised" in n for n in r.notes)
    assert r.compute_bound_tokens_per_s == pytest.approx(312e12 / 16e9)
    r = decode_ceiling(specdb.get("mi300x"), DecodeQuery(Model(70e9, "int4")))
    assert r.weight_bytes == 35e9 and r.compute_dtype == "fp16"
    r = decode_ceiling(specdb.get("b200"), DecodeQuery(Model(70e9, "fp4")))
    assert r.compute_dtype == "fp4" and r.compute_peak_flops_per_s == 9000e12
    r = decode_ceiling(specdb.get("mi300x"), DecodeQuery(Model(dtype="fp16", model_bytes=140e9)))
    assert r.params == 70e9 and r.compute_bound_tokens_per_s == pytest.approx(1307.4e12 / 140e9)
    r = decode_ceiling(specdb.get("mi300x"), DecodeQuery(Model(model_bytes=140e9)))
    assert r.params is None and r.compute_bound_tokens_per_s is None
    assert r.ceiling_tokens_per_s == pytest.approx(5.3e12 / 140e9)


def test_bandwidth_fraction_gpus_and_capacity(specdb) -> None:
    mi = specdb.get("mi300x")
    r = decode_ceiling(mi, DecodeQuery(Model(70e9, "fp16"), Decoding(bandwidth_fraction=0.8)))
    assert r.ceiling_tokens_per_s == pytest.approx(0.8 * 5.3e12 / 140e9)
    r = decode_ceiling(mi, DecodeQuery(Model(405e9, "fp8"), Decoding(num_gpus=8)))
    assert r.ceiling_tokens_per_s == pytest.approx(8 * 5.3e12 / 405e9) and r.fits_in_memory
    r = decode_ceiling(specdb.get("h100-sxm"), DecodeQuery(Model(70e9, "fp16")))
    assert r.fits_in_memory is False and any("does not fit" in n for n in r.notes)
    # no measured bandwidth for the L40S: the realistic figure uses other NVIDIA GPUs' measurements
    r = decode_ceiling(specdb.get("l40s"), DecodeQuery(Model(8e9, "bf16")), db=specdb)
    assert r.realistic["basis"].startswith("other NVIDIA GPUs")
    assert 0.75 <= r.realistic["bandwidth_fraction_median"] <= 0.9


@pytest.mark.parametrize("query,parameter,message", [
    (DecodeQuery(Model()), "model_size", "pass params N with dtype, or model_bytes"),
    (DecodeQuery(Model(70e9)), "params",
     "needs dtype (fp32, fp16, bf16, fp8, int8, int4 or fp4) to know the bytes per parameter"),
    (DecodeQuery(Model(70e9, "fp12")), "dtype", "unknown dtype 'fp12' (one of fp32, fp16, bf16, fp8, int8, int4, fp4)"),
    (DecodeQuery(Model(70e9, "{fp}")), "dtype", "unknown dtype '{fp}' (one of fp32, fp16, bf16, fp8, int8, int4, fp4)"),
    (DecodeQuery(Model(70e9, "fp16"), Decoding(context=10)), "context",
     "a context needs the KV cache size: pass kv_bytes_per_token, or layers, kv_heads and head_dim (and kv_dtype if "
     "it differs from dtype)"),
    (DecodeQuery(Model(70e9, "fp16"), Decoding(batch=0)), "batch", "must be a whole number >= 1, not 0"),
    (DecodeQuery(Model(70e9, "fp16"), Decoding(bandwidth_fraction=0)), "bandwidth_fraction", "must be in (0, 1], not 0"),
    (DecodeQuery(Model(70e9, "fp16"), kv=KVCache(layers=80)), "layers", "the KV cache size also needs kv_heads and head_dim"),
    (DecodeQuery(Model(70e9, "fp16"), kv=KVCache(5, 80, 8, 128)), "kv_bytes_per_token",
     "give it or layers, kv_heads, head_dim, not both"),
    (DecodeQuery(Model(model_bytes=140e9), kv=KVCache(layers=80, kv_heads=8, head_dim=128)), "kv_dtype",
     "needed with layers/kv_heads/head_dim when dtype is not given"),
    (DecodeQuery(Model(0, "fp16")), "params", "must be positive"),
    (DecodeQuery(Model(70e9, "fp16"), claim=Claim(0)), "claimed_tokens_per_s", "must be positive"),
    (DecodeQuery(Model(70e9, "fp16"), Decoding(compute_dtype="fp4")), "compute_dtype",
     "mi300x has no fp4 peak in the spec database"),
])
def test_bad_arguments(specdb, query: DecodeQuery, parameter: str, message: str) -> None:
    """Errors name the quantity (a key of PARAMETERS), never a command-line flag; a front end
    spells the quantities its own way."""
    with pytest.raises(ParameterError) as ei:
        decode_ceiling(specdb.get("mi300x"), query)
    e = ei.value
    assert e.parameter == parameter and e.parameter in PARAMETERS
    assert (e.source, e.message) == (parameter, message) and "--" not in str(e)
    spelling = {k: f"--{k}" for k in PARAMETERS}
    source, text = e.render(spelling)
    assert source == f"--{parameter}"
    named = {f for _, f, _, _ in string.Formatter().parse(e.problem) if f in PARAMETERS}
    assert all(f"--{k}" in text for k in named) and text.replace("--", "") == message


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_spells_every_quantity_as_its_flag() -> None:
    """The analyzer names quantities; the CLI maps each of them to the flag that gives it, so
    that its error lines name what the user typed."""
    from gpuscope.cli.ceiling import FLAGS

    assert set(FLAGS) == set(PARAMETERS)
    r = run_cli("ceiling", "--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--layers", "80")
    assert r.code == 2 and r.err.strip() == "gpuscope ceiling: --layers: the KV cache size also needs --kv-heads and --head-dim"


def test_cli_text_shows_the_arithmetic() -> None:
    r = run_cli("ceiling", "--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--claimed-tps", "314")
    assert r.code == 0, r.err
    assert "70e9 params × 2 B (fp16) = 140.0 GB" in r.out
    assert "MI300X 5.3 TB/s ⇒ 5.3e12 / 140e9 = 37.9 tokens/s per sequence" in r.out
    assert "memory bandwidth binds" in r.out and "compute bound" in r.out
    assert "314 tokens/s per sequence > 37.9 ⇒ impossible" in r.out and "verdict: IMPOSSIBLE" in r.out
    assert "judged per sequence" in r.out and "speed-of-light" in r.out
    assert "realistic" in r.out and "77.2–77.5% of spec" in r.out


def test_cli_json_contract() -> None:
    r = run_cli("ceiling", "--json", "--gpu", "NVIDIA H100 80GB HBM3", "--params", "8e9", "--dtype", "bf16",
                "--batch", "16", "--context", "2048", "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
                "--claimed-tps", "200")
    assert r.code == 0, r.err
    d = r.json()
    kv = 2 * 32 * 8 * 128 * 2
    step = 16e9 + 16 * 2048 * kv
    assert d["gpu"] == "h100-sxm" and d["bytes_per_step"] == step
    assert d["ceiling_tokens_per_s"] == pytest.approx(3.35e12 / step)
    assert d["aggregate_ceiling_tokens_per_s"] == pytest.approx(16 * 3.35e12 / step)
    assert d["compute_bound_tokens_per_s"] == pytest.approx(989.4e12 / (2 * 8e9 * 16))
    # 3.35e12 / 20.3e9 = 165 tokens/s per sequence: 200 is over it
    assert d["claimed_tokens_per_s"] == 200 and d["verdict"] == "impossible" and d["claim_basis"] == "per_sequence"
    assert d["binding"] == "memory bandwidth" and isinstance(d["explanation"], list)
    r = run_cli("ceiling", "--json", "--gpu", "mi300x", "--model-bytes", "140GB")
    d = r.json()
    assert r.code == 0 and "verdict" not in d and d["bytes_per_step"] == 140e9


@pytest.mark.parametrize("args", [
    ["--gpu", "nope", "--params", "70B", "--dtype", "fp16"],
    ["--gpu", "h100", "--params", "70B", "--dtype", "fp16"],
    ["--gpu", "mi300x", "--params", "70X", "--dtype", "fp16"],
    ["--gpu", "mi300x", "--params", "-70B", "--dtype", "fp16"],
    ["--gpu", "mi300x", "--params=-70B", "--dtype", "fp16"],
    ["--gpu", "mi300x"],
    ["--gpu", "mi300x", "--params", "70B"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp12"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--context", "4096"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--batch", "0"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--batch", "1.5"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--claimed-tps", "-3"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--claimed-tps", "fast"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--bandwidth-fraction", "1.5"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--bandwidth-fraction", "nan"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--layers", "80", "--kv-heads", "8"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--context", "10", "--layers", "-80",
     "--kv-heads", "8", "--head-dim", "128"],
    ["--gpu", "mi300x", "--model-bytes", "lots"],
    ["--gpu", "mi300x", "--params", "nan", "--dtype", "fp16"],
    ["--gpu", "mi300x", "--params", "70B", "--dtype", "fp16", "--gpus", "0"],
    ["--params", "70B", "--dtype", "fp16"],
])
def test_cli_bad_input_is_exit_2_one_line(args: list[str]) -> None:
    r = run_cli("ceiling", *args)
    assert r.code == 2, (args, r.out, r.err)
    assert r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuscope ceiling"), r.err
