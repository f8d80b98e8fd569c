"""The devices of a run's traces: one row per (trace, device label) seen in the staged kernels
and GPU annotations, named from the trace's ``deviceProperties``, with a vendor, a kind and,
when the properties identify it exactly, the key of its entry in the GPU spec database.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any


if TYPE_CHECKING:  # pragma: no cover
    import duckdb

    from .parse import IngestCounts
    from .stage import TraceInfo


def _device_properties(header: dict[str, Any]) -> dict[int, dict[str, Any]]:
    props = header.get("deviceProperties")
    items: list[Any]
    if isinstance(props, dict):
        # dict form: {"0": {...}} or a single device's properties
        if "name" in props or "id" in props:
            items = [props]
        else:
            items = []
            for k, v in props.items():
                if isinstance(v, dict):
                    v = dict(v)
                    # (ASCII digits only: "²".isdigit() is true, and int() of 5000 digits raises)
                    v.setdefault("id", int(k) if k.isascii() and k.isdigit() and len(k) < 19 else k)
                    items.append(v)
    elif isinstance(props, list):
        items = props
    else:
        items = []
    out: dict[int, dict[str, Any]] = {}
    for n, p in enumerate(items):
        if isinstance(p, dict):
            idx = p.get("id", n)
            if isinstance(idx, int):
                out[idx] = p
    return out


def _vendor(props: dict[str, Any] | None, runtime_hip: int, runtime_cuda: int, accel: str | None) -> tuple[str, str]:
    """(vendor, kind) of a device from its properties and the trace's runtime names."""
    if accel:
        return {"MTIA": "meta", "Intel XPU": "intel", "Gaudi HPU": "intel"}.get(accel, "unknown"), "accelerator"
    name = str((props or {}).get("name") or "")
    lname = name.lower()
    if any(s in lname for s in ("amd", "radeon", "instinct", " mi2", " mi3")):
        return "amd", "gpu"
    if any(s in lname for s in ("nvidia", "tesla", "geforce", "quadro", "rtx", "a100", "h100", "h200", "b200", "l40", "l4")):
        return "nvidia", "gpu"
    if props and props.get("warpSize") == 64:
        return "amd", "gpu"
    if runtime_hip > runtime_cuda:
        return "amd", "gpu"
    if runtime_cuda > 0 or (props and props.get("warpSize") == 32):
        return "nvidia", "gpu"
    return "unknown", "gpu"


def device_rows(
    con: duckdb.DuckDBPyConnection, infos: list[TraceInfo], counts: IngestCounts
) -> list[dict[str, Any]]:
    """One row per device of the staged traces (``device_id`` in order of trace, index, label);
    ``counts`` tell the vendor of a device without properties (its runtime API, its accelerator)."""
    labels = con.execute(
        "SELECT DISTINCT trace_id, dev_label, device_index FROM kernel_stage "
        "UNION SELECT DISTINCT trace_id, dev_label, TRY_CAST(dev_label AS INTEGER) FROM annotation_stage WHERE dev_label IS NOT NULL "
        "ORDER BY 1, 3, 2"
    ).fetchall()
    multi = len(infos) > 1
    ranks = [i.rank for i in infos]
    use_rank = multi and None not in ranks and len(set(ranks)) == len(ranks)
    accel = next(iter(counts.accelerators), None)
    specs = _spec_db() if labels else None
    rows = []
    per_trace: dict[int, list[int | None]] = {}
    for trace_id, _, index in labels:
        per_trace.setdefault(trace_id, []).append(index)
    for device_id, (trace_id, label, index) in enumerate(labels):
        info = infos[trace_id]
        all_props = _device_properties(info.header)
        props = all_props.get(index) if index is not None else None
        indices = per_trace[trace_id]
        if props is None and index is not None and len(all_props) == len(indices):
            # ROCm traces may number kernels by physical GPU (pid/device 2) while
            # deviceProperties lists the visible ones (id 0): match them in order.
            props = all_props[sorted(all_props)[sorted(i for i in indices if i is not None).index(index)]] \
                if None not in indices else None
        vendor, kind = _vendor(props, counts.runtime_hip, counts.runtime_cuda, accel)
        dev = f"gpu{index}" if index is not None else f"device:{label}"
        prefix = (f"rank{info.rank}/" if use_rank else f"trace{trace_id}/") if multi else ""
        cc = None
        if props and _whole(props.get("computeMajor")) is not None:
            cc = f"{_whole(props.get('computeMajor'))}.{_whole(props.get('computeMinor', 0)) or 0}"
        rows.append({
            "device_id": device_id, "key": prefix + dev, "trace_id": trace_id, "label": label,
            "device_index": index, "vendor": vendor, "kind": kind,
            "name": _text((props or {}).get("name")),
            "memory_total_bytes": _whole((props or {}).get("totalGlobalMem")),
            "compute_capability": cc,
            "num_sms": _whole((props or {}).get("numSms"), 1 << 31),
            "warp_size": _whole((props or {}).get("warpSize"), 1 << 31),
            "properties": stored_json(props) if props else None,
            "spec_key": _spec_key(specs, props, kind),
        })
    return rows


def _whole(v: Any, limit: int = 1 << 63) -> int | None:
    """A property that should be a whole number, as one; None for anything else (a string,
    a boolean, NaN, a number out of range): a trace's header is not trusted to have the types
    Kineto writes (bench/fuzz_ingest.py found each of these)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -limit <= v < limit else None
    if isinstance(v, float) and v.is_integer() and -limit <= v < limit:
        return int(v)
    return None


def _text(v: Any) -> str | None:
    """A property that should be text, as text DuckDB takes (a lone surrogate, which JSON can
    write as an escape, replaced); None when empty or not a string."""
    if not isinstance(v, str) or not v:
        return None
    return v.encode("utf-8", "replace").decode("utf-8")


def stored_json(doc: Any) -> str:
    """(:func:`.write.stored_json`, imported late: write imports stage, which imports this module)"""
    from .write import stored_json as dumps

    return dumps(doc)


def _spec_db() -> Any:
    """The GPU spec database, or None when a user spec file does not load: that must not stop
    an ingest (analysis reports the broken file)."""
    try:
        from ..specs import load_specs

        return load_specs()
    except Exception:
        return None


def _spec_key(specs: Any, props: dict[str, Any] | None, kind: str) -> str | None:
    """The spec-database key of a trace device when its properties identify it exactly."""
    if specs is None or not props or kind != "gpu":
        return None
    from ..device import match_trace_device

    try:
        ident = match_trace_device(props, db=specs)
    except (ValueError, TypeError, ArithmeticError):
        # a property the matcher cannot read (a compute capability of 5000 digits as text): a
        # header like that identifies no device exactly, and must not stop the ingest
        return None
    return ident.spec.key if ident.spec is not None and ident.exact else None


def map_devices(con: duckdb.DuckDBPyConnection, devices: list[dict[str, Any]]) -> None:
    """The staging table ``dev_map``: each (trace, device label) of the staged rows to its device id."""
    con.execute(
        "CREATE TEMP TABLE dev_map (trace_id INTEGER, dev_label VARCHAR, device_id INTEGER)"
    )
    if devices:
        con.executemany(
            "INSERT INTO dev_map VALUES (?, ?, ?)",
            [(d["trace_id"], d["label"], d["device_id"]) for d in devices],
        )
