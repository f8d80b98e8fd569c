"""Serving-engine iteration annotations: the query and KV lengths an attention op worked on.

Fused attention ops of serving engines (vLLM's ``unified_attention``, SGLang's and ATOM's) do not
record how long each sequence's KV cache was: their cost depends on it. The engines can label
each scheduler step with a profiler range that carries exactly those aggregates, and
AMD TraceLens's roofline patches add them (``VLLM_DETAILED``, SGLang's roofline suffix, ATOM's
``ATOM_ENABLE_DETAILED_ANNOTATION``). Per step, over its requests *i*::

    c_sq   = Σ sq_i      c_sk   = Σ sk_i      c_sqsq = Σ sq_i²      c_sqsk = Σ sq_i · sk_i   (context / prefill requests)
    g_sq   ...           g_sk   ...           g_sqsq ...            g_sqsk ...               (generation / decode requests)

where ``sq`` is a request's new query tokens this step and ``sk`` its KV length including them.
The formats read here (one per engine; names from the engines' and TraceLens's sources)::

    execute_64_context_0(sq0sk0sqsq0sqsk0)_generation_64(sq64sk131072sqsq64sqsk131072)   vLLM
    step[DECODE bs=64 g_sq=128 g_sqsq=256 g_sqsk=262144 g_sk=131072]                        SGLang
    decode[bs=32 tok=128 d=32 spec=3 sqsq=512 sqsk=262144 sk=65536]                         ATOM

Labels without the sk sums (vLLM's native ``execute_context_2(6144)_generation_3(3)``, SGLang's
``step[DECODE bs=64]``) say how many tokens ran but not the KV span, so they give nothing here:
the user's ``--context`` is then the only source. One exception: vLLM's
``execute_context_1(888_788544)_generation_0(0)`` (tokens and Σ sq² of a prefill-only step) is
read with each request's KV span taken as its new tokens (no cached prefix), a lower bound.

Pure functions; :func:`op_steps` reads the store through the connection it is given.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

__all__ = ["IterationShape", "parse_iteration", "mean_shape", "decode_shape", "op_steps",
           "ITERATION_NAME_PREFIXES"]

#: What an iteration label starts with (for a cheap SQL pre-filter: ``name LIKE 'execute_%'``...).
ITERATION_NAME_PREFIXES: tuple[str, ...] = ("execute_", "step[", "prefill[", "decode[")

# Counts are bounded so that a hostile label cannot make a number no GPU could hold (2**53:
# still exact as a float).
_MAX = 2 ** 53

_VLLM = re.compile(
    r"execute_(\d+)_context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
    r"_generation_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)")
# vLLM's label with the query-length squares but no KV sums: "execute_context_1(888_788544)_generation_0(0)"
_VLLM_SQSQ = re.compile(r"execute_context_(\d+)\((\d+)_(\d+)\)_generation_(\d+)\((\d+)(?:_(\d+))?\)$")
_SGLANG = re.compile(r"step\[(EXTEND|DECODE|MIXED)\b([^\]]*)\]")
_ATOM = re.compile(r"(prefill|decode)\[([^\]]*(?:\][^\]]*)*)\]")
_KV = re.compile(r"(\w+)=(\d+)")


@dataclass(frozen=True)
class IterationShape:
    """The query/KV aggregates of one engine step (see the module docstring)."""

    c_sq: float = 0.0
    c_sk: float = 0.0
    c_sqsq: float = 0.0
    c_sqsk: float = 0.0
    g_sq: float = 0.0
    g_sk: float = 0.0
    g_sqsq: float = 0.0
    g_sqsk: float = 0.0
    #: where the numbers came from: "vllm", "sglang", "atom", "--context", or "mean of N steps"
    source: str = ""

    @property
    def q_tokens(self) -> float:
        """Query tokens the step ran (prefill and decode together)."""
        return self.c_sq + self.g_sq

    def consistent(self) -> bool:
        """Each sum is at least what its parts imply (sk ≥ sq, sqsq ≥ sq, sqsk ≥ sqsq)."""
        for sq, sk, sqsq, sqsk in ((self.c_sq, self.c_sk, self.c_sqsq, self.c_sqsk),
                                   (self.g_sq, self.g_sk, self.g_sqsq, self.g_sqsk)):
            if min(sq, sk, sqsq, sqsk) < 0 or sk < sq or sqsq < sq or sqsk < sqsq:
                return False
        return self.q_tokens > 0


def _int(text: str) -> int | None:
    v = int(text) if len(text) <= 16 else None
    return v if v is not None and v < _MAX else None


def parse_iteration(name: str) -> IterationShape | None:
    """The aggregates of an engine step label, or None when ``name`` is not one with sk sums."""
    if not isinstance(name, str) or len(name) > 4096:
        return None
    m = _VLLM.match(name)
    if m:
        parsed = [_int(g) for g in m.groups()]
        v = [x for x in parsed if x is not None]
        if len(v) != len(parsed):
            return None
        s = IterationShape(c_sq=float(v[2]), c_sk=float(v[3]), c_sqsq=float(v[4]), c_sqsk=float(v[5]),
                           g_sq=float(v[7]), g_sk=float(v[8]), g_sqsq=float(v[9]), g_sqsk=float(v[10]),
                           source="vllm")
        return s if s.consistent() else None
    m = _VLLM_SQSQ.match(name)
    if m:
        parsed = [_int(g) if g is not None else 0 for g in m.groups()]
        v = [x for x in parsed if x is not None]
        if len(v) != len(parsed) or v[4]:
            # decode tokens ran, and nothing says how long their KV spans were
            return None
        # A prefill-only step: with no prefix-cache hit each request's KV span is its new tokens
        # (sk = sq). A cached prefix would make the work larger, so this is a lower bound.
        s = IterationShape(c_sq=float(v[1]), c_sk=float(v[1]), c_sqsq=float(v[2]), c_sqsk=float(v[2]),
                           source="vllm, no cached prefix assumed")
        return s if s.consistent() else None
    m = _SGLANG.match(name)
    if m:
        found = {k: _int(x) for k, x in _KV.findall(m.group(2))}
        if "c_sqsq" not in found and "g_sqsq" not in found or None in found.values():
            return None
        kv = {k: x for k, x in found.items() if x is not None}
        s = IterationShape(**{f: float(kv.get(f) or 0) for f in (
            "c_sq", "c_sk", "c_sqsq", "c_sqsk", "g_sq", "g_sk", "g_sqsq", "g_sqsk")}, source="sglang")
        return s if s.consistent() else None
    m = _ATOM.match(name)
    if m:
        found = {k: _int(x) for k, x in _KV.findall(m.group(2))}
        if not {"tok", "sk", "sqsq", "sqsk"} <= found.keys() or None in found.values():
            return None
        kv = {k: x for k, x in found.items() if x is not None}
        if m.group(1) == "prefill":
            s = IterationShape(c_sq=float(kv["tok"]), c_sk=float(kv["sk"]), c_sqsq=float(kv["sqsq"]),
                               c_sqsk=float(kv["sqsk"]), source="atom")
        else:
            s = IterationShape(g_sq=float(kv["tok"]), g_sk=float(kv["sk"]), g_sqsq=float(kv["sqsq"]),
                               g_sqsk=float(kv["sqsk"]), source="atom")
        return s if s.consistent() else None
    return None


def mean_shape(shapes: Iterable[tuple[IterationShape, float]]) -> IterationShape | None:
    """The call-weighted mean of the steps an op ran in. Attention FLOPs and bytes are linear in
    the aggregates, so the cost of the mean step is the mean cost of the steps, exactly."""
    items = [(s, float(w)) for s, w in shapes if w > 0]
    total = sum(w for _, w in items)
    if not items or total <= 0:
        return None
    if len(items) == 1:
        return items[0][0]
    fields = ("c_sq", "c_sk", "c_sqsq", "c_sqsk", "g_sq", "g_sk", "g_sqsq", "g_sqsk")
    mean = {f: sum(getattr(s, f) * w for s, w in items) / total for f in fields}
    return IterationShape(**mean, source=f"mean of {len(items)} steps")


def decode_shape(sequences: int, context_tokens: int) -> IterationShape | None:
    """A pure decode step of ``sequences`` sequences, each attending to ``context_tokens`` KV tokens
    (the new one included): what the user's ``--context`` says when the trace does not."""
    if sequences <= 0 or context_tokens <= 0:
        return None
    return IterationShape(g_sq=sequences, g_sk=sequences * context_tokens, g_sqsq=sequences,
                          g_sqsk=sequences * context_tokens, source="--context")


def op_steps(con: "duckdb.DuckDBPyConnection", run_id: int, op_names: Iterable[str],
             kept: str = "") -> dict[tuple[Any, ...], IterationShape]:
    """For every call signature ``(name, input_dims, input_types, concrete_inputs, input_strides)``
    of the ops named, the mean step it ran in: the engine step label (a ``user_annotation``)
    whose time span holds the launch of the call's kernels. A call replayed from a CUDA/HIP graph
    counts once per replay (its kernels' launch is the graph launch). Calls in no labelled step
    are left out; a signature none of whose calls is in a labelled step is absent.
    ``kept`` is the kernels filter of :func:`gpuscope.analyzers.scope.counted_kernels`."""
    names = sorted(set(op_names))
    # most runs hold no engine attention op: skip the scan of every kernel's launch for them
    if not names or not con.execute("SELECT 1 FROM ops WHERE run_id = ? AND list_contains(?, name) LIMIT 1",
                                    [run_id, names]).fetchone():
        return {}
    like = " OR ".join("starts_with(a.name, ?)" for _ in ITERATION_NAME_PREFIXES)
    rows = con.execute(
        f"""
        WITH steps AS (
            SELECT a.name, a.ts_ns, a.ts_ns + coalesce(a.dur_ns, 0) AS end_ns
            FROM annotations a
            WHERE a.run_id = ? AND a.kind = 'user_annotation' AND ({like})
        ), calls AS (
            SELECT DISTINCT k.op_id, k.launch_ts_ns
            FROM kernels k
            WHERE k.run_id = ? AND k.op_id IS NOT NULL AND k.launch_ts_ns IS NOT NULL{kept}
        )
        SELECT o.name, o.input_dims, o.input_types, o.concrete_inputs, o.input_strides, s.name, count(*)
        FROM calls c
        JOIN ops o ON o.run_id = ? AND o.op_id = c.op_id AND list_contains(?, o.name)
        JOIN steps s ON c.launch_ts_ns BETWEEN s.ts_ns AND s.end_ns
        GROUP BY ALL
        ORDER BY ALL
        """,
        [run_id, *ITERATION_NAME_PREFIXES, run_id, run_id, names],
    ).fetchall()
    parsed: dict[str, IterationShape | None] = {}
    by_sig: dict[tuple[Any, ...], list[tuple[IterationShape, float]]] = {}
    for name, dims, types, concrete, strides, label, n in rows:
        if label not in parsed:
            parsed[label] = parse_iteration(label)
        shape = parsed[label]
        if shape is not None:
            by_sig.setdefault((name, dims, types, concrete, strides), []).append((shape, float(n)))
    out: dict[tuple[Any, ...], IterationShape] = {}
    for sig, items in by_sig.items():
        m = mean_shape(items)
        if m is not None:
            out[sig] = m
    return out
