"""Collectives judged against the GPU-to-GPU link (issue 31, points 1-2; design.md §4.2, the
``communication`` key of ``analyze --json``).

For every communication kernel of a run (NCCL / RCCL kernels, PyTorch symmetric memory's
``multimem_*``, vLLM's custom all-reduce) this module works out, from what the trace records,
which collective it ran, its message size ``S`` (nccl-tests' "size"), the size ``n`` of its
group and the algorithm, then:

- **algorithm bandwidth** ``algbw = S / t`` and **bus bandwidth** ``busbw = algbw x f(n)`` with
  nccl-tests' factors (doc/PERFORMANCE.md of github.com/NVIDIA/nccl-tests): all-reduce
  ``2(n-1)/n``; all-gather, reduce-scatter and all-to-all ``(n-1)/n``; broadcast, reduce and
  send/recv ``1``. ``busbw`` is what each GPU's link carries in one direction for a ring
  algorithm, so it compares with the link's bandwidth in one direction.
- **link roof**: the bytes one GPU must move over its links in one direction (``link_bytes``)
  over the bandwidth a GPU of that group has to its peers in one direction (the spec database's
  scale-up link, :meth:`gpuscope.specs.GpuSpec.peer_bytes_per_s`): ``roof_us = link_bytes / B``,
  ``pct_of_roof = roof_us / t``. For ring-like algorithms ``link_bytes = f(n) x S``, so
  ``pct_of_roof = busbw / B``. NVLink SHARP (``multimem`` / NCCL's ``NVLS``) all-reduce reduces
  in the switch: ``link_bytes = S (n+1) / n`` (each GPU's copy of every slice is read once by the
  switch's reduction, ``S``, plus the GPU's own reduced slice it stores, ``S / n``; in: its
  reduced slice plus every rank's multicast store). vLLM's one-shot custom all-reduce reads the
  whole buffer of each peer: ``link_bytes = (n-1) S``.
- **class**: ``communication_bound``, or ``latency_bound`` when the alpha-beta model's latency
  term ``steps x alpha`` is larger than its bandwidth term ``link_bytes / B`` (``alpha`` per
  algorithm step from NCCL's tuning model, :data:`ALPHA_US`; steps per algorithm in
  :func:`latency_steps`). A collective shown faster than its link roof is a ``model_error``
  (percent withheld, never above 100 %).

Pure functions; no printing, no I/O beyond the store queries.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

#: The class of a collective judged against its link (design.md §4.2: "collectives carry
#: ``communication_bound`` or ``latency_bound`` against their link").
COMMUNICATION_BOUND = "communication_bound"

#: The per-step latency (µs) of the alpha-beta model, per link kind: NCCL's own tuning model
#: (src/graph/tuning.cc, ``hwLat``) gives a ring step of its low-latency protocol 0.4-0.6 µs over
#: NVLink and 1.0 µs over PCIe; Infinity Fabric is taken as NVLink (RCCL keeps NCCL's model).
ALPHA_US: dict[str, float] = {"nvlink": 0.6, "infinity-fabric": 0.6, "pcie": 1.0}

#: A percent of link roof above 1 + this is "above the roof" (float noise is not).
_OVER = 1e-9

#: Element sizes of the dtypes Kineto writes in ``Input type``.
_DTYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "half": 2, "bfloat16": 2, "float16": 2,
    "int": 4, "unsigned int": 4, "long": 8, "long int": 8, "long long": 8, "int64_t": 8, "short": 2,
    "signed char": 1, "unsigned char": 1, "char": 1, "bool": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    "c10::float8_e4m3fnuz": 1, "c10::float8_e5m2fnuz": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}

#: Op names (c10d, symmetric memory, vLLM) -> (collective, algorithm or None).
_OP_COLLECTIVES: dict[str, tuple[str, str | None]] = {
    "c10d::allreduce_": ("all_reduce", None), "c10d::allreduce_coalesced_": ("all_reduce", None),
    "c10d::_allgather_base_": ("all_gather", None), "c10d::allgather_": ("all_gather", None),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", None),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", None), "c10d::reduce_scatter_": ("reduce_scatter", None),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", None),
    "c10d::alltoall_base_": ("all_to_all", None), "c10d::alltoall_": ("all_to_all", None),
    "c10d::broadcast_": ("broadcast", None), "c10d::reduce_": ("reduce", None),
    "c10d::send": ("send_recv", None), "c10d::recv_": ("send_recv", None), "c10d::recv_any_source_": ("send_recv", None),
    "symm_mem::multimem_all_reduce_": ("all_reduce", "nvls"),
    "symm_mem::multimem_one_shot_all_reduce": ("all_reduce", "nvls"),
    "symm_mem::multimem_all_gather_out": ("all_gather", "nvls"),
    "symm_mem::one_shot_all_reduce": ("all_reduce", "one_shot"),
    "symm_mem::one_shot_all_reduce_out": ("all_reduce", "one_shot"),
    "symm_mem::two_shot_all_reduce_": ("all_reduce", "two_shot"),
    "vllm::all_reduce": ("all_reduce", None), "_C_custom_ar::all_reduce": ("all_reduce", None),
}
#: The ops whose group is the engine's tensor-parallel group (vLLM's all-reduce and what it calls).
_TP_OPS = ("vllm::", "_C_custom_ar::", "symm_mem::")

#: Kernel-name words -> collective (NCCL/RCCL ``ncclDevKernel_AllGather_RING_LL``, ...).
_KERNEL_COLLECTIVES: tuple[tuple[str, str], ...] = (
    ("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("cross_device_reduce", "all_reduce"),
    ("allgather", "all_gather"), ("all_gather", "all_gather"), ("reducescatter", "reduce_scatter"),
    ("reduce_scatter", "reduce_scatter"), ("alltoall", "all_to_all"), ("all_to_all", "all_to_all"),
    ("sendrecv", "send_recv"), ("broadcast", "broadcast"), ("_reduce_", "reduce"), ("kernel_reduce", "reduce"),
)


def bus_factor(collective: str, n: int) -> float | None:
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): ``busbw = algbw x factor``.
    all-reduce ``2(n-1)/n``; all-gather, reduce-scatter, all-to-all ``(n-1)/n``; broadcast,
    reduce, send/recv ``1``. None for an unknown collective or a group under 1."""
    if n < 1:
        return None
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "send_recv"):
        return 1.0
    return None


def link_factor(collective: str, algorithm: str, n: int) -> float | None:
    """Bytes one GPU moves over its links in one direction, per byte of message ``S``.

    Ring-like algorithms (NCCL ring / tree, vLLM's two-shot): nccl-tests' bus factor.
    ``nvls`` all-reduce (NVLink SHARP, ``multimem``): ``(n+1)/n``, the switch reduces, so each
    GPU sends each slice once and its reduced slice once (about half a ring's ``2(n-1)/n``).
    ``one_shot`` all-reduce (vLLM's custom all-reduce, one stage): each GPU reads every peer's
    whole buffer, ``n - 1``."""
    if n < 2:
        return None
    if collective == "all_reduce" and algorithm == "nvls":
        return (n + 1) / n
    if collective == "all_reduce" and algorithm == "one_shot":
        return float(n - 1)
    return bus_factor(collective, n)


def latency_steps(collective: str, algorithm: str, n: int) -> int:
    """Link steps one collective takes, for the alpha-beta model: a ring all-reduce ``2(n-1)``,
    a ring all-gather / reduce-scatter / all-to-all / broadcast / reduce ``n-1``, send/recv 1,
    NVLS and one-shot all-reduce 2 (a load-reduce and a store; a read and a write), two-shot 2 x 2."""
    if collective == "send_recv" or n < 2:
        return 1
    if algorithm in ("nvls", "one_shot"):
        return 2
    if algorithm == "two_shot":
        return 4
    return 2 * (n - 1) if collective == "all_reduce" else n - 1


@dataclass(frozen=True)
class PeerLink:
    """The GPU-to-GPU link of one device, from the spec database (bandwidths in ONE direction)."""

    #: "NVLink5 x18", "Infinity Fabric x7", "PCIe Gen5 x16 peer-to-peer".
    label: str
    #: nvlink3/4/5, infinity-fabric, pcie.
    kind: str
    #: switch, mesh or pcie.
    topology: str
    links: int | None
    link_bytes_per_s: float | None
    bytes_per_s: float | None
    domain_gpus: int | None
    host_bytes_per_s: float | None

    def bytes_per_s_for(self, n: int) -> float | None:
        """The bandwidth one GPU of a group of ``n`` on one scale-up domain has to its peers, one
        direction (None: unknown, or the group does not fit one domain)."""
        if n < 2:
            return None
        if self.topology == "pcie" or self.kind == "pcie":
            return self.host_bytes_per_s
        if self.domain_gpus and n > self.domain_gpus:
            return None
        if self.topology == "mesh":
            if not self.links or not self.link_bytes_per_s:
                return None
            return min(self.links, n - 1) * self.link_bytes_per_s
        return self.bytes_per_s

    @property
    def alpha_us(self) -> float:
        """Per-step latency of the alpha-beta model for this link (:data:`ALPHA_US`)."""
        return ALPHA_US["pcie" if self.kind == "pcie" else
                        "infinity-fabric" if self.kind == "infinity-fabric" else "nvlink"]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "topology": self.topology, "links": self.links,
                "link_bytes_per_s": self.link_bytes_per_s, "bytes_per_s": self.bytes_per_s,
                "domain_gpus": self.domain_gpus}


def peer_link_of(spec: Any) -> PeerLink | None:
    """The :class:`PeerLink` of a spec entry (None where it gives no scale-up link)."""
    kind = getattr(spec, "scaleup_link", None)
    if not kind:
        return None
    label = spec.scaleup_label() if hasattr(spec, "scaleup_label") else kind
    host = spec.host_copy_bytes_per_s() if hasattr(spec, "host_copy_bytes_per_s") else None
    return PeerLink(label or kind, kind, getattr(spec, "scaleup_topology", None) or ("pcie" if kind == "pcie" else "switch"),
                    getattr(spec, "scaleup_links", None), getattr(spec, "scaleup_link_bytes_per_s", None),
                    getattr(spec, "scaleup_bytes_per_s", None), getattr(spec, "scaleup_domain_gpus", None),
                    float(host) if host else None)


# --------------------------------------------------------------------------------------------
# what one kernel ran
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collective:
    """What the trace says about one collective kernel launch (None: not recorded)."""

    collective: str | None
    algorithm: str
    message_bytes: float | None
    group_size: int | None
    group_size_source: str | None
    dtype: str | None
    #: Which part is missing when the collective cannot be judged.
    missing: str | None = None


def _loads(text: Any) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _numel(dims: Any) -> int | None:
    if not isinstance(dims, list) or not dims or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                         for d in dims):
        return None
    out = 1
    for d in dims:
        out *= d
    return out


def _tensor(dims: Any, types: Any, i: int) -> tuple[int, int, str] | None:
    """(numel, element bytes, dtype) of argument ``i`` of an op, None when not a recorded tensor."""
    if not isinstance(dims, list) or not isinstance(types, list) or i >= len(dims) or i >= len(types):
        return None
    numel = _numel(dims[i])
    size = _DTYPE_BYTES.get(str(types[i]).strip().lower())
    if numel is None or size is None:
        return None
    return numel, size, str(types[i])


def algorithm_of_kernel(name: str) -> str:
    """The algorithm a collective kernel's name shows: ``nvls`` (NCCL NVLS, ``multimem_*``),
    ``one_shot`` / ``two_shot`` (vLLM's ``cross_device_reduce_1stage`` / ``2stage``), else ``ring``
    (NCCL ring and tree move the bus factor's bytes per GPU)."""
    low = name.lower()
    if "nvls" in low or "multimem" in low:
        return "nvls"
    if "1stage" in low or "one_shot" in low:
        return "one_shot"
    if "2stage" in low or "two_shot" in low:
        return "two_shot"
    return "ring"


def collective_of_kernel(name: str) -> str | None:
    """The collective a kernel's name shows (``ncclDevKernel_AllGather_RING_LL`` -> all_gather)."""
    low = re.sub(r"\(.*", "", name.lower())
    for word, coll in _KERNEL_COLLECTIVES:
        if word in low:
            return coll
    return None


#: Element sizes of the dtypes Kineto writes in a collective's ``dtype`` arg (c10's ScalarType
#: names: ``BFloat16``, ``Float``, ``Half``, ``Long``, ...), lower-cased.
_ARG_DTYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "half": 2, "bfloat16": 2, "long": 8, "int": 4, "short": 2, "char": 1, "byte": 1,
    "bool": 1, "complexfloat": 8, "complexdouble": 16, "complexhalf": 4, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "uint16": 2, "uint32": 4, "uint64": 8,
}


def collective_of_arg(name: Any) -> str | None:
    """The collective a ``Collective name`` arg names (``_allgather_base`` -> all_gather,
    ``allreduce_coalesced`` -> all_reduce, ``send`` -> send_recv), None when not one of ours."""
    if not isinstance(name, str):
        return None
    low = re.sub(r"[^a-z]", "", name.lower())
    for word, coll in (("allreduce", "all_reduce"), ("reducescatter", "reduce_scatter"),
                       ("allgather", "all_gather"), ("alltoall", "all_to_all"), ("broadcast", "broadcast"),
                       ("sendrecv", "send_recv"), ("send", "send_recv"), ("recv", "send_recv")):
        if word in low:
            return coll
    return "reduce" if low in ("reduce", "reducebase") else None


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def message_bytes_of_args(collective: str, args: dict[str, Any]) -> tuple[float, str] | None:
    """(nccl-tests' size ``S`` in bytes, dtype) from a collective's args: all-gather its output
    (``Out msg nelems``, the gathered whole), reduce-scatter and all-to-all their input, the
    others their input (output where no input is recorded); None without a count or a known dtype."""
    dtype = args.get("dtype")
    size = _ARG_DTYPE_BYTES.get(str(dtype).strip().lower()) if isinstance(dtype, str) else None
    if size is None:
        size = _DTYPE_BYTES.get(str(dtype).strip().lower()) if isinstance(dtype, str) else None
    inp, out = _count(args.get("in_nelems")), _count(args.get("out_nelems"))
    n = (out if out is not None else None) if collective == "all_gather" else (inp if inp is not None else out)
    if size is None or n is None:
        return None
    return float(n * size), str(dtype)


def pg_sizes(metadata: Any) -> dict[str, int]:
    """Process group name -> its size, from a trace header's ``distributedInfo.pg_config``."""
    info = metadata.get("distributedInfo") if isinstance(metadata, dict) else None
    out: dict[str, int] = {}
    if isinstance(info, dict) and isinstance(info.get("pg_config"), list):
        for pg in info["pg_config"]:
            if isinstance(pg, dict) and pg.get("pg_name") is not None:
                size = _count(pg.get("pg_size"))
                if size is None and isinstance(pg.get("ranks"), list):
                    size = len(pg["ranks"])
                if size:
                    out[str(pg["pg_name"])] = size
    return out


def complete_from_args(c: Collective, args: dict[str, Any] | None,
                       groups: dict[str, int] | None = None) -> Collective:
    """``c`` (:func:`describe`) with what it lacks taken from the collective's own args (the
    kernel's ``comm_args``, else its ``record_param_comms`` op's): the collective from
    ``Collective name``, the size from ``In/Out msg nelems`` and ``dtype``, the group from
    ``Group size``, else the size of its ``Process Group Name`` in the trace's
    ``distributedInfo.pg_config`` (``groups``). What the ops said is kept where they said it."""
    if not args:
        return c
    coll, algo = c.collective, c.algorithm
    if coll is None:
        coll = collective_of_arg(args.get("collective"))
        if coll is None:
            return c
    size, dtype = c.message_bytes, c.dtype
    if size is None:
        got = message_bytes_of_args(coll, args)
        if got is not None:
            size, dtype = got
    n, n_source = c.group_size, c.group_size_source
    if n is None:
        g = _count(args.get("group_size"))
        if g:
            n, n_source = g, "collective args (Group size)"
        elif groups and args.get("pg_name") is not None and str(args["pg_name"]) in groups:
            n, n_source = groups[str(args["pg_name"])], "distributedInfo.pg_config"
    missing = None
    if size is None:
        missing = c.missing if c.message_bytes is None and c.missing else "message size not recorded"
    elif n is None:
        missing = c.missing if c.message_bytes is not None and c.missing else "group size not recorded"
    return Collective(coll, algo, size, n, n_source, dtype, missing)


def describe(kernel: str, chain: list[tuple[str | None, Any, Any, Any]],
             tensor_parallel: int | None = None) -> Collective:
    """What one collective kernel ran, from its name and the ops around its launch.

    ``chain`` is ``[(op name, input_dims, input_types, concrete_inputs), ...]``: the op that
    launched the kernel, then its parent and grandparent (texts as stored, or parsed). The
    collective comes from the c10d / symmetric-memory / vLLM op when one is in the chain, else the
    kernel name; the message size from the op's tensors (``record_param_comms``' first tensor
    otherwise); the group size from ``record_param_comms``' last argument (the group's size, as
    PyTorch records it), an all-gather's / reduce-scatter's output-to-input ratio, or the run's
    tensor-parallel degree for vLLM's and symmetric memory's all-reduce."""
    coll, algo, op_name, op_args = None, None, None, None
    rpc = None
    for name, dims, types, concrete in chain:
        if not name:
            continue
        args = (_loads(dims) if isinstance(dims, str) else dims, _loads(types) if isinstance(types, str) else types,
                _loads(concrete) if isinstance(concrete, str) else concrete)
        if name == "record_param_comms" and rpc is None:
            rpc = args
        if coll is None and name in _OP_COLLECTIVES:
            coll, algo = _OP_COLLECTIVES[name]
            op_name, op_args = name, args
    if coll is None:
        coll = collective_of_kernel(kernel)
    algorithm = algo or algorithm_of_kernel(kernel)
    if coll is None:
        return Collective(None, algorithm, None, None, None, None, "collective not recognised")

    n, n_source = None, None
    if rpc is not None:
        concrete = rpc[2]
        types = rpc[1]
        if isinstance(concrete, list) and isinstance(types, list) and len(concrete) >= 10 and types[-1] == "Scalar":
            try:
                v = int(str(concrete[-1]))
            except ValueError:
                v = 0
            if v >= 1:
                n, n_source = v, "record_param_comms"
    size, dtype = None, None
    if op_args is not None and op_name and op_name.startswith("c10d::"):
        dims, types, _ = op_args
        out, inp = _tensor(dims, types, 0), _tensor(dims, types, 1)
        if coll == "all_gather" and out and inp and inp[0] > 0 and out[0] % inp[0] == 0:
            size, dtype = out[0] * out[1], out[2]
            if n is None:
                n, n_source = out[0] // inp[0], "output/input ratio"
        elif coll == "reduce_scatter" and out and inp and out[0] > 0 and inp[0] % out[0] == 0:
            size, dtype = inp[0] * inp[1], inp[2]
            if n is None:
                n, n_source = inp[0] // out[0], "input/output ratio"
        elif coll == "all_to_all" and inp:
            size, dtype = inp[0] * inp[1], inp[2]
        elif coll in ("all_reduce", "broadcast", "reduce", "send_recv") and out:
            size, dtype = out[0] * out[1], out[2]
    elif op_args is not None:  # vLLM / symmetric memory: the tensor reduced is the first argument
        t = _tensor(op_args[0], op_args[1], 0)
        if t:
            size, dtype = t[0] * t[1], t[2]
    if size is None and rpc is not None:
        t = _tensor(rpc[0], rpc[1], 0)  # the collective's input tensor
        if t:
            size, dtype = t[0] * t[1], t[2]
            if coll == "all_gather":  # the input is one rank's share of the output
                size = size * n if n else None
    if n is None and op_name and op_name.startswith(_TP_OPS) and tensor_parallel:
        n, n_source = int(tensor_parallel), "tensor-parallel degree"
    missing = None
    if size is None:
        missing = "message size not recorded (record_shapes, or a TensorList)"
    elif n is None:
        missing = ("group size not recorded (pass --model so the tensor-parallel degree is inferred)"
                   if op_name and op_name.startswith(_TP_OPS) else "group size not recorded")
    return Collective(coll, algorithm, float(size) if size is not None else None, n, n_source, dtype, missing)


# --------------------------------------------------------------------------------------------
# judging
# --------------------------------------------------------------------------------------------


def judge(collective: str, algorithm: str, message_bytes: float, n: int, count: int, time_us: float,
          link: PeerLink | None) -> dict[str, Any]:
    """Judge ``count`` calls of one collective taking ``time_us`` together against ``link``.

    Returns ``{algbw_bytes_per_s, busbw_bytes_per_s, bus_factor, link_bytes, link_bytes_per_s,
    roof_us, pct_of_roof, bound, model_error, reason}``; ``roof_us`` and ``pct_of_roof`` are
    None when there is no link roof (``reason`` says why) or when the measured time beats it
    (``model_error``: the link or the model is wrong, never shown above 100 %)."""
    factor = bus_factor(collective, n)
    t_s = time_us / 1e6
    algbw = message_bytes * count / t_s if t_s > 0 else None
    busbw = algbw * factor if algbw is not None and factor is not None else None
    out: dict[str, Any] = {"algbw_bytes_per_s": algbw, "busbw_bytes_per_s": busbw, "bus_factor": factor,
                           "link_bytes": None, "link_bytes_per_s": None, "roof_us": None, "pct_of_roof": None,
                           "bound": "unknown", "model_error": False, "reason": None}
    lf = link_factor(collective, algorithm, n)
    if n < 2:
        out["reason"] = "a group of one moves nothing over a link"
        return out
    if link is None:
        out["reason"] = "no link roof: the GPU's scale-up link is not in the spec database"
        return out
    bw = link.bytes_per_s_for(n)
    if bw is None:
        out["reason"] = (f"no link roof: a group of {n} does not fit one {link.label} domain of {link.domain_gpus} GPUs "
                         "(the network link between nodes is not known)" if link.domain_gpus and n > link.domain_gpus
                         else f"no link roof: {link.label} bandwidth not known")
        return out
    if lf is None or time_us <= 0:
        out["reason"] = "no link model for this collective"
        return out
    link_bytes = message_bytes * lf
    roof_one_us = link_bytes / bw * 1e6
    roof_us = roof_one_us * count
    pct = roof_us / time_us
    out.update(link_bytes=link_bytes, link_bytes_per_s=bw)
    if pct > 1 + _OVER:
        out.update(bound="unknown", model_error=True,
                   reason=(f"model_error: {link_bytes / 1e6:.3g} MB per call over {link.label} "
                           f"({bw / 1e9:.4g} GB/s one direction) would take {roof_one_us:.3g} µs, longer than the "
                           f"{time_us / count:.3g} µs measured: the link or the {algorithm} traffic model is wrong"))
        return out
    latency_us = latency_steps(collective, algorithm, n) * link.alpha_us
    bound = "latency_bound" if latency_us > roof_one_us else COMMUNICATION_BOUND
    out.update(roof_us=roof_us, pct_of_roof=pct, bound=bound,
               reason=(f"{algorithm} {collective.replace('_', '-')} of {n}: {link_bytes / 1e6:.3g} MB per GPU and "
                       f"direction over {link.label} ({bw / 1e9:.4g} GB/s)"
                       + (f"; latency-bound: {latency_steps(collective, algorithm, n)} steps x {link.alpha_us:g} µs "
                          f"= {latency_us:.3g} µs > {roof_one_us:.3g} µs of transfer" if bound == "latency_bound" else "")))
    return out


def communication(con: duckdb.DuckDBPyConnection, run_id: int, links: dict[int, PeerLink | None], kept: str = "",
                  tensor_parallel: int | None = None) -> dict[str, Any]:
    """Every communication kernel of ``run_id`` judged against its device's link.

    ``links`` maps a device id to its :class:`PeerLink` (None: not known); ``kept`` is the
    condition that leaves out graph-capture traces (:func:`gpuscope.analyzers.scope.counted_kernels`);
    ``tensor_parallel`` the run's tensor-parallel degree where known (the group of vLLM's
    all-reduce). Returns ``{"entries": [...], "judged_us", "total_us", "unjudged": {(kernel, reason): µs}}``
    (reason ``communication``: a part is missing, the entry's ``reason`` says which; ``model_error``)
    with one entry per (kernel name, device, collective, algorithm, message size, group size, dtype).
    """
    from ..kernel_names import category_sql

    category = category_sql()
    rows = con.execute(
        f"""
        SELECT k.name, k.device_id, o.name, o.input_dims, o.input_types, o.concrete_inputs,
               p.name, p.input_dims, p.input_types, p.concrete_inputs,
               g.name, g.input_dims, g.input_types, g.concrete_inputs,
               count(*), sum(k.dur_ns) / 1e3, k.trace_id, coalesce(k.comm_args, o.comm_args, p.comm_args)
        FROM (SELECT * FROM kernels WHERE run_id = $1{kept} AND {category} = 'communication') k
        LEFT JOIN ops o ON o.run_id = $1 AND o.op_id = k.op_id
        LEFT JOIN ops p ON p.run_id = $1 AND p.op_id = o.parent_op_id
        LEFT JOIN ops g ON g.run_id = $1 AND g.op_id = p.parent_op_id
        GROUP BY ALL ORDER BY ALL
        """,
        [run_id],
    ).fetchall()
    pgs = trace_pg_sizes(con, run_id)
    groups: dict[tuple[Any, ...], list[float]] = defaultdict(lambda: [0, 0.0])
    for r in rows:
        name, dev = r[0] or "", r[1]
        chain = [tuple(r[2:6]), tuple(r[6:10]), tuple(r[10:14])]
        c = describe(name, chain, tensor_parallel)
        args = _loads(r[17])
        if isinstance(args, dict) and (c.missing or r[2] is None):
            # the op above says too little (a TensorList, no group) or there is none (a graph
            # replay, a send/recv): the collective's own args fill in (issue 31)
            c = complete_from_args(c, args, pgs.get(r[16]))
            missing = c.missing if r[2] is not None or not c.missing else \
                f"kernel launched by no recorded op, and its args lack a part ({c.missing})"
        else:
            missing = c.missing if r[2] is not None else "kernel launched by no recorded op (its size and group are unknown)"
        key = (name, dev, c.collective, c.algorithm, c.message_bytes, c.group_size, c.group_size_source, c.dtype,
               missing)
        groups[key][0] += int(r[14])
        groups[key][1] += float(r[15])
    entries: list[dict[str, Any]] = []
    judged_us = total_us = 0.0
    unjudged: dict[tuple[str, str], float] = defaultdict(float)
    for (name, dev, coll, algo, size, n, n_src, dtype, missing), (count, us) in sorted(
            groups.items(), key=lambda kv: (-kv[1][1], str(kv[0]))):
        link = links.get(dev)
        entry: dict[str, Any] = {
            "collective": coll, "algorithm": algo, "kernel": name, "device_id": dev, "count": int(count),
            "kernel_us": us, "mean_us": us / count if count else None, "bytes": size, "group_size": n,
            "group_size_source": n_src, "dtype": dtype, "link": link.label if link else None,
            # the trace never says which node a rank is on: a group that fits one scale-up domain
            # is taken to be on one (a multimem / NVLS kernel shows it is: the switch ran it)
            "confidence": "estimate",
            "assumption": (None if algo == "nvls" else
                           "the group is assumed to sit on one scale-up domain (node) when it fits one"),
        }
        total_us += us
        if coll is None or size is None or n is None or missing:
            entry.update({"algbw_bytes_per_s": None, "busbw_bytes_per_s": None, "bus_factor": None,
                          "link_bytes": None, "link_bytes_per_s": None, "roof_us": None, "pct_of_roof": None,
                          "bound": "unknown", "model_error": False,
                          "reason": f"not judged: {missing or 'collective not recognised'}"})
        else:
            entry.update(judge(coll, algo, size, n, int(count), us, link))
        if entry["roof_us"] is not None:
            judged_us += us
        else:
            unjudged[(name, "model_error" if entry["model_error"] else "communication")] += us
        entries.append(entry)
    return {"entries": entries, "judged_us": judged_us, "total_us": total_us, "unjudged": dict(unjudged)}


def trace_pg_sizes(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[int, dict[str, int]]:
    """Per trace of ``run_id``: process group name -> size, from the trace header's
    ``distributedInfo.pg_config`` kept in ``traces.metadata`` (empty where it has none)."""
    out: dict[int, dict[str, int]] = {}
    for trace_id, meta in con.execute("SELECT trace_id, metadata FROM traces WHERE run_id = ?", [run_id]).fetchall():
        sizes = pg_sizes(_loads(meta))
        if sizes:
            out[int(trace_id)] = sizes
    return out


def communication_block(result: dict[str, Any]) -> dict[str, Any]:
    """The ``communication`` block of ``analyze --json``: per collective name (``all_reduce``,
    ``all_gather`` ... ``unknown``), ``{count, bytes, kernel_us, algbw_bytes_per_s,
    busbw_bytes_per_s, link, link_bytes_per_s, roof_us, pct_of_roof, bound}`` over its judged
    calls (bandwidths over all calls whose size is known), then every entry (:func:`communication`)
    and the model's constants; ``notes`` names the collectives flagged ``model_error``."""
    by: dict[str, dict[str, Any]] = {}
    for e in result["entries"]:
        name = e["collective"] or "unknown"
        b = by.setdefault(name, {"count": 0, "bytes": 0.0, "kernel_us": 0.0, "_sized_us": 0.0, "_bus": 0.0,
                                 "_judged_us": 0.0, "roof_us": 0.0, "links": set(), "link_bw": set(),
                                 "bound_us": defaultdict(float), "unjudged_us": 0.0})
        b["count"] += e["count"]
        b["kernel_us"] += e["kernel_us"]
        if e["bytes"] is not None:
            b["bytes"] += e["bytes"] * e["count"]
            b["_sized_us"] += e["kernel_us"]
            if e["bus_factor"] is not None:
                b["_bus"] += e["bytes"] * e["count"] * e["bus_factor"]
        if e["roof_us"] is not None:
            b["_judged_us"] += e["kernel_us"]
            b["roof_us"] += e["roof_us"]
            b["links"].add(e["link"])
            b["link_bw"].add(e["link_bytes_per_s"])
            b["bound_us"][e["bound"]] += e["kernel_us"]
        else:
            b["unjudged_us"] += e["kernel_us"]
    out: dict[str, Any] = {}
    for name, b in sorted(by.items(), key=lambda kv: -kv[1]["kernel_us"]):
        sized_s = b["_sized_us"] / 1e6
        out[name] = {
            "count": b["count"], "bytes": b["bytes"] if b["_sized_us"] else None, "kernel_us": b["kernel_us"],
            "algbw_bytes_per_s": b["bytes"] / sized_s if sized_s > 0 else None,
            "busbw_bytes_per_s": b["_bus"] / sized_s if sized_s > 0 and b["_bus"] else None,
            "link": sorted(x for x in b["links"] if x)[0] if len(b["links"]) == 1 else None,
            "link_bytes_per_s": next(iter(b["link_bw"])) if len(b["link_bw"]) == 1 else None,
            "roof_us": b["roof_us"] if b["_judged_us"] else None,
            "pct_of_roof": b["roof_us"] / b["_judged_us"] if b["_judged_us"] > 0 else None,
            "bound": max(b["bound_us"].items(), key=lambda kv: kv[1])[0] if b["bound_us"] else "unknown",
            "judged_us": b["_judged_us"], "unjudged_us": b["unjudged_us"],
        }
    errors = sorted({e["kernel"] for e in result["entries"] if e["model_error"]})
    notes = ([f"model_error: {len(errors)} collective kernel(s) measured faster than their link roof (no percent "
              f"shown): {', '.join(errors[:3])}{' ...' if len(errors) > 3 else ''}; the link, the group size or "
              "the traffic model is wrong (docs/roofline.md, \"Collectives\")"] if errors else [])
    return {
        "by_collective": out,
        "notes": notes,
        "entries": result["entries"],
        "judged_us": result["judged_us"],
        "total_us": result["total_us"],
        "model": {"bus_factor": "nccl-tests doc/PERFORMANCE.md: all_reduce 2(n-1)/n; all_gather, reduce_scatter, "
                                "all_to_all (n-1)/n; broadcast, reduce, send_recv 1",
                  "alpha_us_per_step": dict(ALPHA_US),
                  "nvls_all_reduce_link_factor": "(n+1)/n", "one_shot_all_reduce_link_factor": "n-1"},
    }
