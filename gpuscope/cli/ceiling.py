"""`gpuscope ceiling`: decode speed-of-light for a model size on a GPU, and a verdict on a claimed tokens/s."""
from __future__ import annotations

import argparse
from typing import Callable, TypeVar

_T = TypeVar("_T")

HELP = "decode speed-of-light for a model on a GPU; judges a claimed tokens/s"
DESCRIPTION = (
    "The most decode tokens/s a GPU can deliver: each step reads the weights once plus the KV cache of every "
    "sequence, so tokens/s per sequence <= memory bandwidth / bytes per step (and <= peak FLOP/s / (2 x params "
    "x batch)). Example: gpuscope ceiling --gpu mi300x --params 70B --dtype fp16 --claimed-tps 314, or from a "
    "Hugging Face config: gpuscope ceiling --gpu h100-sxm --model config.json --batch 32 --context 4096. "
    "Counts accept 70e9, 70B, 7.5M, 1.5T. Arithmetic and sources: docs/specs.md."
)
NEEDS_DB = False
REPORTS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments to its sub-parser."""
    parser.add_argument("--gpu", required=True, help="spec key or any listed name (mi300x, h100-sxm, 'NVIDIA H100 80GB HBM3')")
    size = parser.add_argument_group("model size (--model, or --params with --dtype, or --model-bytes)")
    size.add_argument("--model", metavar="CONFIG.json",
                      help="a Hugging Face config.json: weight bytes per step (for MoE the experts the batch is "
                           "expected to touch), layers, KV heads and head dim from it, in its quantization's bits")
    size.add_argument("--params", metavar="N", help="parameter count: 70e9, 70B, 7.5M, 1.5T")
    size.add_argument("--dtype", help="weight dtype: fp32, fp16, bf16, fp8, int8, int4, fp4 (bytes per parameter)")
    size.add_argument("--model-bytes", metavar="BYTES", help="weight bytes instead of params x dtype: 140e9, 140GB, 130GiB")
    run = parser.add_argument_group("decoding")
    run.add_argument("--batch", default="1", metavar="N", help="sequences decoded together (default 1)")
    run.add_argument("--context", default="0", metavar="TOKENS",
                     help="tokens in each sequence's KV cache (default 0; k = 1000, write 8192 for 8Ki)")
    run.add_argument("--gpus", default="1", metavar="N",
                     help="GPUs sharing the model with tensor parallelism (default 1; communication ignored)")
    kv = parser.add_argument_group("KV cache (needed with --context)")
    kv.add_argument("--kv-bytes-per-token", metavar="BYTES", help="KV-cache bytes per token, all layers")
    kv.add_argument("--layers", metavar="N", help="transformer layers")
    kv.add_argument("--kv-heads", metavar="N", help="KV heads per layer (GQA groups)")
    kv.add_argument("--head-dim", metavar="N", help="dimension of one head")
    kv.add_argument("--kv-dtype", help="KV-cache dtype (default: --dtype)")
    roof = parser.add_argument_group("roof and claim")
    roof.add_argument("--bandwidth-fraction", default="1.0", metavar="F",
                      help="fraction of spec bandwidth to assume (default 1.0; measured HBM is typically 0.75-0.9)")
    roof.add_argument("--compute-dtype", help="dtype of the matmul peak for the compute bound (default: from --dtype)")
    roof.add_argument("--claimed-tps", metavar="TOKENS_PER_S", help="a claimed decode speed to judge")
    roof.add_argument("--claim-aggregate", action="store_true",
                      help="the claim is the total over the batch (default: per sequence)")
    parser.add_argument("--specs", metavar="FILE", help="extra/overriding GPU spec entries (default: $GPUSCOPE_SPECS)")


#: The flag that gives each quantity of :data:`gpuscope.analyzers.ceiling.PARAMETERS`.
FLAGS = {
    "model_size": "model size", "params": "--params", "dtype": "--dtype", "model_bytes": "--model-bytes",
    "batch": "--batch", "context": "--context", "num_gpus": "--gpus", "bandwidth_fraction": "--bandwidth-fraction",
    "compute_dtype": "--compute-dtype", "kv_bytes_per_token": "--kv-bytes-per-token", "layers": "--layers",
    "kv_heads": "--kv-heads", "head_dim": "--head-dim", "kv_dtype": "--kv-dtype",
    "claimed_tokens_per_s": "--claimed-tps", "claim_aggregate": "--claim-aggregate",
}


def _optional(text: str | None, what: str, parse: Callable[[str, str], _T]) -> _T | None:
    """``parse(text, what)``, or None where the flag was not given."""
    return None if text is None else parse(text, what)


def _int(text: str, what: str) -> int:
    from ..analyzers.ceiling import parse_count
    from ..errors import InputError

    v = parse_count(text, what)
    if v != int(v):
        raise InputError(what, f"'{text}' is not a whole number")
    return int(v)


def _float(text: str, what: str) -> float:
    from ..errors import InputError

    try:
        v = float(text)
    except ValueError:
        raise InputError(what, f"'{text}' is not a number") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise InputError(what, f"'{text}' is not a finite number")
    return v


def run(args: argparse.Namespace) -> int:
    """Run the command; returns the exit code."""
    from ..analyzers.ceiling import (Claim, DecodeQuery, Decoding, KVCache, Model, decode_ceiling,
                                     parse_bytes, parse_count)
    from ..errors import InputError
    from .common import load_model, print_json
    from ..render.ceiling import render_ceiling
    from ..specs import load_specs

    model = None
    if args.model:
        # the config says the size, the dtype and the KV cache's shape: a flag saying them too is refused
        for flag, value in (("--params", args.params), ("--dtype", args.dtype), ("--model-bytes", args.model_bytes),
                            ("--kv-bytes-per-token", args.kv_bytes_per_token), ("--layers", args.layers),
                            ("--kv-heads", args.kv_heads), ("--head-dim", args.head_dim)):
            if value is not None:
                raise InputError(flag, "comes from --model; give one or the other")
        model = load_model(args.model)
    db = load_specs(args.specs)
    spec = db.find(args.gpu)
    opt = _optional
    # each flag parsed in the order of the flags' checks, so that the first bad flag is the one named
    params = opt(args.params, "--params", parse_count)
    model_bytes = opt(args.model_bytes, "--model-bytes", parse_bytes)
    batch, context = _int(args.batch, "--batch"), _int(args.context, "--context")
    kv_bytes = opt(args.kv_bytes_per_token, "--kv-bytes-per-token", parse_bytes)
    layers, kv_heads = opt(args.layers, "--layers", _int), opt(args.kv_heads, "--kv-heads", _int)
    head_dim = opt(args.head_dim, "--head-dim", _int)
    bandwidth_fraction = _float(args.bandwidth_fraction, "--bandwidth-fraction")
    num_gpus = _int(args.gpus, "--gpus")
    claimed = opt(args.claimed_tps, "--claimed-tps", parse_count)
    if model is not None:
        from ..analyzers.gap import model_ceiling

        try:
            result, weights = model_ceiling(spec, model[0], Decoding(batch, context, num_gpus, bandwidth_fraction,
                                                                     args.compute_dtype),
                                            kv_dtype=args.kv_dtype, db=db,
                                            claim=None if claimed is None else Claim(claimed, args.claim_aggregate))
        except InputError as exc:
            if exc.source != "model config":
                raise
            raise InputError(model[1], exc.message) from None  # name the file, not "model config"
        if args.json:
            doc = result.to_json()
            doc["model"] = {"source": model[1], **weights.to_json()}
            print_json(doc)
        else:
            from ..analyzers.modelspec import describe
            from ..textsafe import visible

            print(f"model {visible(describe(model[0]))} ({model[1]})")
            print(render_ceiling(result))
        return 0
    query = DecodeQuery(Model(params, args.dtype, model_bytes),
                        Decoding(batch, context, num_gpus, bandwidth_fraction, args.compute_dtype),
                        KVCache(kv_bytes, layers, kv_heads, head_dim, args.kv_dtype),
                        None if claimed is None else Claim(claimed, args.claim_aggregate))
    # a ParameterError names quantities; the CLI spells them with FLAGS (cli/__init__._as_flags)
    result = decode_ceiling(spec, query, db=db)
    if args.json:
        print_json(result.to_json())
    else:
        print(render_ceiling(result))
    return 0
