"""The ``gpuscope specs`` text (a table of every entry, or one entry in full with its sources)
and the JSON document of one entry with its citations."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..textsafe import visible

if TYPE_CHECKING:
    from ..specs import GpuSpec, SpecDB


def entry_document(spec: GpuSpec, db: SpecDB) -> dict[str, Any]:
    """``specs GPU --json``: the entry, and the citation of every source it names."""
    doc = spec.to_json()
    ids = sorted({i for v in spec.sources.values() for i in v} | {m.source for m in spec.measured if m.source},
                 key=_source_order)
    doc["source_citations"] = {i: db.citation(i) for i in ids}
    return doc


def _source_order(i: str) -> tuple[int, int, str]:
    digits = "".join(c for c in i if c.isdigit())
    return (0 if i.startswith("S") else 1, int(digits) if digits else 0, i)


def _t(x: float | None, scale: float = 1e12, fmt: str = "{:.4g}") -> str:
    return "—" if x is None else fmt.format(x / scale)


def render_table(db: SpecDB) -> str:
    """One line per entry: key, name, memory, bandwidth, 16/8-bit peaks, BF16 ridge, SM/CU."""
    cols = ["key", "name", "mem GB", "TB/s", "BF16 TF/s", "FP16 TF/s", "FP8 TF/s", "BF16 ridge FLOP/B", "SM/CU"]
    rows = []
    for s in db.all():
        cu = f"{s.compute_units} {s.compute_unit_kind or ''}".strip() if s.compute_units else "—"
        ridge = s.ridge_flop_per_byte("bf16")
        # fixed decimals so the column lines up on the decimal point
        rows.append([s.key, s.name, _t(s.memory_bytes, 1e9, "{:g}"), _t(s.mem_bw_bytes_per_s, fmt="{:.2f}"),
                     _t(s.peak_flops("bf16"), fmt="{:g}"), _t(s.peak_flops("fp16"), fmt="{:g}"),
                     _t(s.peak_flops("fp8"), fmt="{:g}"), "—" if ridge is None else f"{ridge:.1f}", cu])
    text = _table(cols, rows, "ll" + "r" * (len(cols) - 2))
    footer = (f"{len(rows)} GPUs. Dense peaks (no sparsity); TF/s = 1e12 FLOP/s. "
              "`gpuscope specs KEY` shows one entry with every dtype and its sources.")
    if getattr(db, "files", ()):
        footer += " User entries from: " + ", ".join(str(f) for f in db.files) + "."
    return text + "\n" + visible(footer, layout=True)


def _table(cols: list[str], rows: list[list[str]], align: str) -> str:
    from .table import one_line

    rows = [[one_line(c) for c in r] for r in rows]  # names of a user's specs file: control characters shown
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(r) for r in rows])


def render_entry(s: GpuSpec, db: SpecDB) -> str:
    """One entry in full."""
    from ..specs import DTYPES

    out = [f"{s.name} ({s.key})"]

    def kv(k: str, v: Any) -> None:
        if v not in (None, "", [], ()):
            out.append(f"  {k:<22} {v}")

    kv("vendor", s.vendor)
    kv("architecture", s.architecture)
    kv("target", " / ".join(x for x in (s.arch_target, f"compute capability {s.compute_capability}"
                                         if s.compute_capability else None) if x))
    kv("form factor", s.form_factor)
    kv("memory", None if s.memory_bytes is None else f"{s.memory_bytes / 1e9:g} GB {s.memory_type or ''}".rstrip())
    kv("memory bandwidth", None if s.mem_bw_bytes_per_s is None else f"{s.mem_bw_bytes_per_s / 1e12:.4g} TB/s")
    if s.host_link == "unified-memory":
        kv("host link", "none: unified memory (host copies stay in device memory)")
    elif label := s.host_link_label():
        kv("host link", label + (f", {s.host_link_bytes_per_s / 1e9:.1f} GB/s per direction"
                                 if s.host_link_bytes_per_s else ""))
    if (link := s.scaleup_label()) and s.scaleup_link != "pcie" and s.scaleup_bytes_per_s:
        kv("GPU-to-GPU link", f"{link}, {s.scaleup_bytes_per_s / 1e9:.4g} GB/s per direction ({s.scaleup_topology}"
           + (f", {s.scaleup_domain_gpus} GPUs a domain)" if s.scaleup_domain_gpus else ")"))
    elif link:
        kv("GPU-to-GPU link", link)
    kv("SM/CU", None if s.compute_units is None else f"{s.compute_units} {s.compute_unit_kind or ''}".rstrip())
    clock = None
    if s.boost_clock_mhz:
        clock = f"{s.boost_clock_mhz:g} MHz" + (f" (tensor peak at {s.tensor_clock_mhz:g} MHz)"
                                                if s.tensor_clock_mhz and s.tensor_clock_mhz != s.boost_clock_mhz else "")
    kv("boost clock", clock)
    cache = None
    if s.l2_cache_mb:
        cache = f"L2 {s.l2_cache_mb:g} MB" + (f", {s.last_level_cache_kind or 'LLC'} {s.last_level_cache_mb:g} MB"
                                               if s.last_level_cache_mb else "")
    kv("cache", cache)
    cache_bw = (("L2", s.l2_bw_bytes_per_s), (s.last_level_cache_kind or "LLC", s.last_level_cache_bw_bytes_per_s))
    kv("cache bandwidth", ", ".join(f"{what} {bw / 1e12:.4g} TB/s" for what, bw in cache_bw if bw) or None)
    kv("TDP", None if s.tdp_w is None else f"{s.tdp_w:g} W")
    if s.visible_as:
        kv("seen by software as", f"{s.devices_per_package} × {s.visible_as}")
    if s.part_of:
        kv("part of", f"{s.part_of} (one of its devices)")
    kv("reported names", "; ".join(s.names))
    kv("aliases", ", ".join(s.aliases))
    kv("PCI ids", ", ".join(s.pci_ids))
    for pid, note in s.pci_id_notes.items():
        kv(f"  {pid}", note)
    out.append("")
    out.append("  dtype         peak TFLOP/s   ridge FLOP/B")
    for d in DTYPES:
        peak = s.peak_flops(d)
        ridge = s.ridge_flop_per_byte(d)
        out.append(f"  {d:<12} {_t(peak, fmt='{:>12.5g}'):>12}   {'—' if ridge is None else f'{ridge:>11.1f}':>12}")
    for k, v in s.peak_flops_per_s_other.items():
        out.append(f"  {k:<12} {v / 1e12:>12.5g}   (not used for the roofline)")
    if s.sparse_figures_as_published:
        kv("sparse (as published)", s.sparse_figures_as_published)
    if s.measured:
        out.append("")
        out.append("  measured (achievable):")
        for m in s.measured:
            frac = f" = {m.fraction_of_spec * 100:.1f}% of spec" if m.fraction_of_spec is not None else ""
            out.append(f"    {m.metric}: {m.value:g} {m.unit}{frac} [{m.source}] {m.method or ''}".rstrip())
    if s.derived:
        out.append("")
        out.append("  derived:")
        out.extend(f"    {k}: {v}" for k, v in s.derived.items())
    for title, items in (("notes", s.notes), ("where sources disagree", s.conflicts)):
        if items:
            out.append("")
            out.append(f"  {title}:")
            out.extend(f"    - {x}" for x in items)
    out.append("")
    out.append("  sources:")
    for fld, ids in s.sources.items():
        out.append(f"    {fld}: {', '.join(ids)}")
    ids = sorted({i for v in s.sources.values() for i in v}, key=_source_order)
    for i in ids:
        cite = db.citation(i)
        if cite:
            out.append(f"    [{i}] {cite}")
    if s.origin != "builtin":
        out.append(f"  origin: {s.origin}")
    # an entry of a user's specs file is somebody's text: its control characters shown
    return "\n".join(visible(line, layout=True) for line in out)
