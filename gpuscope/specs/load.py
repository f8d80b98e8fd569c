"""Loading the spec database: the built-in ``gpuscope/data/gpus.json`` and user files that add or
override entries, each entry validated (an error names the file and the entry)."""
from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import read_regular
from .match import SpecDB
from .model import (
    DTYPES,
    HOST_LINKS,
    PCIE_GT_PER_S,
    SCALEUP_LINKS,
    SCALEUP_TOPOLOGIES,
    GpuSpec,
    Identification,
    Measurement,
    OtherDevice,
    _norm_pci,
    pcie_bytes_per_s,
)

#: Environment variable naming a user spec file (several may be joined with ``os.pathsep``).
ENV_VAR = "GPUSCOPE_SPECS"

SCHEMA = "gpuscope.gpus/1"

# --------------------------------------------------------------------------------------------
# parsing and validation
# --------------------------------------------------------------------------------------------

_NUMBER_FIELDS = ("memory_bytes", "mem_bw_bytes_per_s", "compute_units", "boost_clock_mhz", "tensor_clock_mhz",
                  "l2_cache_mb", "last_level_cache_mb", "l2_bw_bytes_per_s", "last_level_cache_bw_bytes_per_s",
                  "tdp_w", "devices_per_package", "pcie_generation", "pcie_lanes", "host_link_bytes_per_s",
                  "scaleup_links", "scaleup_link_bytes_per_s", "scaleup_bytes_per_s", "scaleup_domain_gpus")
#: Cache bandwidths: a cache roof below the device-memory roof it sits in front of is a unit slip
#: (GB/s for TB/s) or a per-slice figure, never a roof an op could be judged against.
_CACHE_BW_FIELDS = ("l2_bw_bytes_per_s", "last_level_cache_bw_bytes_per_s")
_STRING_FIELDS = ("key", "name", "vendor", "architecture", "arch_target", "compute_capability", "form_factor",
                  "memory_type", "compute_unit_kind", "last_level_cache_kind", "visible_as", "part_of",
                  "sparse_figures_as_published", "reference_name", "host_link",
                  "scaleup_link", "scaleup_topology")
_LIST_FIELDS = ("names", "aliases", "pci_ids", "pci_ids_inexact", "pci_subsystem_ids", "notes", "conflicts")
_DICT_FIELDS = ("peak_flops_per_s", "peak_flops_per_s_other", "sources", "derived", "pci_id_notes")
_OTHER_FIELDS = ("measured", "unified_memory")
# Unit-suffixed spellings a person may prefer in a user file; converted on load.
_CONVENIENCE = {"memory_gb": ("memory_bytes", 1e9), "mem_bw_tbps": ("mem_bw_bytes_per_s", 1e12),
                "mem_bw_gbps": ("mem_bw_bytes_per_s", 1e9), "peak_tflops": ("peak_flops_per_s", 1e12),
                "host_link_gbps": ("host_link_bytes_per_s", 1e9), "l2_bw_tbps": ("l2_bw_bytes_per_s", 1e12),
                "last_level_cache_bw_tbps": ("last_level_cache_bw_bytes_per_s", 1e12)}
_KNOWN_FIELDS = set(_NUMBER_FIELDS + _STRING_FIELDS + _LIST_FIELDS + _DICT_FIELDS + _OTHER_FIELDS) | set(_CONVENIENCE)
_INT_FIELDS = ("memory_bytes", "compute_units", "devices_per_package", "pcie_generation", "pcie_lanes",
               "scaleup_links", "scaleup_domain_gpus")
# Fields that state a fact and so need a source; a user file that sets one without saying where it comes
# from gets "user:PATH" as its source.
_SOURCED_FIELDS = set(_NUMBER_FIELDS) | {"peak_flops_per_s", "peak_flops_per_s_other", "pci_ids", "measured"}
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._+-]*$")


class _Bad(Exception):
    pass


def _check_number(value: Any, what: str, *, allow_zero: bool = False) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Bad(f"{what} must be a number or null, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise _Bad(f"{what} must be positive, not {value!r}")
    return value


def _apply_convenience(raw: dict[str, Any], where: str) -> dict[str, Any]:
    out = dict(raw)
    for alias, (target, scale) in _CONVENIENCE.items():
        if alias not in out:
            continue
        if target in raw:
            raise _Bad(f"{where}: give {target} or {alias}, not both")
        value = out.pop(alias)
        if target == "peak_flops_per_s":
            if not isinstance(value, dict):
                raise _Bad(f"{where}: {alias} must be an object of dtype -> TFLOP/s")
            out[target] = {k: (None if v is None else _scaled(v, scale, f"{where}: {alias}.{k}"))
                           for k, v in value.items()}
        else:
            out[target] = _scaled(value, scale, f"{where}: {alias}")
    return out


def _scaled(value: Any, scale: float, what: str) -> float | None:
    v = _check_number(value, what)
    return None if v is None else float(round(v * scale))


def _validate_entry(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """Check the fields of one (possibly partial) entry and normalise them; raises _Bad."""
    unknown = sorted(set(raw) - _KNOWN_FIELDS)
    if unknown:
        raise _Bad(f"{where}: unknown field(s) {', '.join(unknown)} (see docs/specs.md for the format)")
    raw = _apply_convenience(raw, where)
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if k in _NUMBER_FIELDS:
            v = _check_number(v, f"{where}: {k}")
            if v is not None and k in _INT_FIELDS:
                if float(v) != int(v):
                    raise _Bad(f"{where}: {k} must be a whole number, not {v!r}")
                v = int(v)
        elif k in _STRING_FIELDS:
            if v is not None and not isinstance(v, str):
                raise _Bad(f"{where}: {k} must be a string or null")
        elif k in _LIST_FIELDS:
            if isinstance(v, str):
                v = [v]
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise _Bad(f"{where}: {k} must be a list of strings")
            if k in ("pci_ids", "pci_ids_inexact"):
                ids = []
                for x in v:
                    p = _norm_pci(x)
                    if p is None:
                        raise _Bad(f"{where}: {k}: {x!r} is not a PCI id like '10de:2330'")
                    ids.append(p)
                v = ids
        elif k == "peak_flops_per_s":
            if not isinstance(v, dict):
                raise _Bad(f"{where}: peak_flops_per_s must be an object of dtype -> FLOP/s")
            bad = [d for d in v if d not in DTYPES]
            if bad:
                raise _Bad(f"{where}: peak_flops_per_s: unknown dtype(s) {', '.join(bad)} (known: {', '.join(DTYPES)})")
            v = {d: _check_number(x, f"{where}: peak_flops_per_s.{d}") for d, x in v.items()}
        elif k == "peak_flops_per_s_other":
            if not isinstance(v, dict):
                raise _Bad(f"{where}: {k} must be an object")
            v = {d: _check_number(x, f"{where}: {k}.{d}") for d, x in v.items()}
        elif k == "sources":
            if not isinstance(v, dict) or not all(isinstance(s, (list, str)) for s in v.values()):
                raise _Bad(f"{where}: sources must map a field to a list of source ids")
            v = {f: ([s] if isinstance(s, str) else list(s)) for f, s in v.items()}
        elif k in ("derived", "pci_id_notes"):
            if not isinstance(v, dict) or not all(isinstance(s, str) for s in v.values()):
                raise _Bad(f"{where}: {k} must map strings to strings")
            if k == "pci_id_notes":
                v = {(_norm_pci(p) or p): s for p, s in v.items()}
        elif k == "measured":
            if not isinstance(v, list) or not all(isinstance(m, dict) for m in v):
                raise _Bad(f"{where}: measured must be a list of objects")
            for m in v:
                if not isinstance(m.get("metric"), str) or not isinstance(m.get("unit"), str):
                    raise _Bad(f"{where}: each measured figure needs 'metric' and 'unit'")
                _check_number(m.get("value"), f"{where}: measured {m.get('metric')} value")
                if m.get("value") is None:
                    raise _Bad(f"{where}: measured {m.get('metric')} has no value")
                _check_number(m.get("fraction_of_spec"), f"{where}: measured {m.get('metric')} fraction_of_spec")
        elif k == "unified_memory":
            if not isinstance(v, bool):
                raise _Bad(f"{where}: unified_memory must be true or false")
        if k == "host_link" and v is not None and v not in HOST_LINKS:
            raise _Bad(f"{where}: host_link must be one of {', '.join(HOST_LINKS)}, not {v!r}")
        if k == "scaleup_link" and v is not None and v not in SCALEUP_LINKS:
            raise _Bad(f"{where}: scaleup_link must be one of {', '.join(SCALEUP_LINKS)}, not {v!r}")
        if k == "scaleup_topology" and v is not None and v not in SCALEUP_TOPOLOGIES:
            raise _Bad(f"{where}: scaleup_topology must be one of {', '.join(SCALEUP_TOPOLOGIES)}, not {v!r}")
        if k == "pcie_generation" and v is not None and v not in PCIE_GT_PER_S:
            raise _Bad(f"{where}: pcie_generation must be one of {', '.join(map(str, PCIE_GT_PER_S))}, not {v!r}")
        out[k] = v
    if "vendor" in out and out["vendor"] is not None:
        out["vendor"] = out["vendor"].lower()
    if "key" in out:
        out["key"] = str(out["key"]).strip().lower()
        if not _KEY_RE.match(out["key"]):
            raise _Bad(f"{where}: key {out['key']!r} must be lowercase letters, digits, '.', '_', '+' or '-'")
    return out


def _check_cache_bandwidths(d: Mapping[str, Any]) -> str | None:
    """Why the (merged) entry's cache bandwidths cannot be roofs, or None when they can."""
    mem = d.get("mem_bw_bytes_per_s")
    for f in _CACHE_BW_FIELDS:
        v = d.get(f)
        if v is None or mem is None:
            continue
        if v <= mem:
            return (f"{f} {v:.4g} B/s is not above mem_bw_bytes_per_s {mem:.4g} B/s: a cache roof below the "
                    "device-memory roof is a unit slip (GB/s vs TB/s?) or a per-slice figure")
    l2, llc = d.get("l2_bw_bytes_per_s"), d.get("last_level_cache_bw_bytes_per_s")
    if l2 is not None and llc is not None and llc > l2:
        return (f"last_level_cache_bw_bytes_per_s {llc:.4g} B/s is above l2_bw_bytes_per_s {l2:.4g} B/s: "
                "the last-level cache sits behind the L2 and cannot outrun it")
    return None


def _check_scaleup(d: Mapping[str, Any]) -> str | None:
    """Why the (merged) entry's scale-up link figures disagree, or None when they agree: the
    links together must be the link count times one link (a per-direction figure given for
    one, a bidirectional one for the other is the usual slip), and a mesh needs both."""
    links, one, total = d.get("scaleup_links"), d.get("scaleup_link_bytes_per_s"), d.get("scaleup_bytes_per_s")
    if links and one and total and abs(links * one - total) > 0.01 * total:
        return (f"scaleup_bytes_per_s {total:.4g} B/s is not scaleup_links {links} x scaleup_link_bytes_per_s "
                f"{one:.4g} B/s (all figures are one direction)")
    if d.get("scaleup_topology") == "mesh" and not (links and one):
        return "a mesh scale-up link needs scaleup_links and scaleup_link_bytes_per_s"
    return None


def _spec_from_dict(d: dict[str, Any], origin: str) -> GpuSpec:
    peaks = {dt: d.get("peak_flops_per_s", {}).get(dt) for dt in DTYPES}
    d = _with_pcie_bandwidth(d)
    measured = tuple(Measurement(metric=m["metric"], value=m["value"], unit=m["unit"],
                                 fraction_of_spec=m.get("fraction_of_spec"), method=m.get("method"),
                                 source=m.get("source")) for m in d.get("measured", []))
    return GpuSpec(
        key=d["key"], name=d["name"], vendor=d.get("vendor") or "unknown", architecture=d.get("architecture"),
        arch_target=(d.get("arch_target") or None), memory_bytes=d.get("memory_bytes"),
        mem_bw_bytes_per_s=d.get("mem_bw_bytes_per_s"), peak_flops_per_s=peaks,
        compute_units=d.get("compute_units"), compute_unit_kind=d.get("compute_unit_kind"),
        names=tuple(d.get("names", ())), pci_ids=tuple(d.get("pci_ids", ())),
        sources={k: list(v) for k, v in d.get("sources", {}).items()},
        compute_capability=d.get("compute_capability"), form_factor=d.get("form_factor"),
        memory_type=d.get("memory_type"), boost_clock_mhz=d.get("boost_clock_mhz"),
        tensor_clock_mhz=d.get("tensor_clock_mhz"), l2_cache_mb=d.get("l2_cache_mb"),
        last_level_cache_mb=d.get("last_level_cache_mb"), last_level_cache_kind=d.get("last_level_cache_kind"),
        l2_bw_bytes_per_s=d.get("l2_bw_bytes_per_s"),
        last_level_cache_bw_bytes_per_s=d.get("last_level_cache_bw_bytes_per_s"),
        tdp_w=d.get("tdp_w"), aliases=tuple(d.get("aliases", ())),
        pci_ids_inexact=tuple(d.get("pci_ids_inexact", ())), pci_id_notes=dict(d.get("pci_id_notes", {})),
        pci_subsystem_ids=tuple(d.get("pci_subsystem_ids", ())),
        peak_flops_per_s_other=dict(d.get("peak_flops_per_s_other", {})),
        devices_per_package=int(d.get("devices_per_package") or 1), visible_as=d.get("visible_as"),
        part_of=d.get("part_of"), unified_memory=bool(d.get("unified_memory", False)),
        host_link=d.get("host_link"), pcie_generation=d.get("pcie_generation"), pcie_lanes=d.get("pcie_lanes"),
        host_link_bytes_per_s=d.get("host_link_bytes_per_s"),
        scaleup_link=d.get("scaleup_link"), scaleup_links=d.get("scaleup_links"),
        scaleup_link_bytes_per_s=d.get("scaleup_link_bytes_per_s"), scaleup_bytes_per_s=d.get("scaleup_bytes_per_s"),
        scaleup_topology=d.get("scaleup_topology"), scaleup_domain_gpus=d.get("scaleup_domain_gpus"),
        derived=dict(d.get("derived", {})), measured=measured,
        sparse_figures_as_published=d.get("sparse_figures_as_published"),
        notes=tuple(d.get("notes", ())), conflicts=tuple(d.get("conflicts", ())),
        reference_name=d.get("reference_name"), origin=origin,
    )


def _with_pcie_bandwidth(d: dict[str, Any]) -> dict[str, Any]:
    """An entry that gives its PCIe generation and width but no host-link bandwidth (a user
    entry, say) gets the bandwidth derived from them, with the arithmetic in ``derived``."""
    gen, lanes = d.get("pcie_generation"), d.get("pcie_lanes")
    if d.get("host_link_bytes_per_s") is not None or not gen or not lanes or d.get("host_link") not in (None, "pcie"):
        return d
    d = dict(d)
    d["host_link"] = "pcie"
    d["host_link_bytes_per_s"] = float(round(pcie_bytes_per_s(gen, lanes)))
    rate, payload = PCIE_GT_PER_S[gen]
    d["derived"] = {**d.get("derived", {}), "host_link_bytes_per_s":
                    f"PCIe {gen}.0 x{lanes}, one direction: {rate:g} GT/s x {lanes} lanes x {payload:.4g} payload / 8 bits"}
    sources = dict(d.get("sources", {}))
    sources.setdefault("host_link_bytes_per_s", ["GS"])
    d["sources"] = sources
    return d


def _parse_doc(doc: Any, where: str) -> tuple[list[dict[str, Any]], dict[str, str], list[OtherDevice]]:
    """Entries (validated dicts), the sources table and the other-devices list of a spec file."""
    if isinstance(doc, list):
        doc = {"gpus": doc}
    if not isinstance(doc, dict):
        raise _Bad("the file must hold a JSON object with a 'gpus' list (or a list of entries)")
    extra = sorted(set(doc) - {"schema", "about", "dtypes", "sources", "gpus", "other_devices"})
    if extra:
        raise _Bad(f"unknown top-level field(s) {', '.join(extra)} (expected 'gpus', 'sources')")
    gpus = doc.get("gpus", [])
    if isinstance(gpus, dict):
        items = []
        for k, v in gpus.items():
            if not isinstance(v, dict):
                raise _Bad(f"gpus.{k} must be an object")
            items.append({"key": k, **v})
        gpus = items
    if not isinstance(gpus, list):
        raise _Bad("'gpus' must be a list of entries")
    entries = []
    for n, raw in enumerate(gpus):
        if not isinstance(raw, dict):
            raise _Bad(f"gpus[{n}] must be an object")
        label = f"gpus[{n}]" + (f" ({raw['key']})" if isinstance(raw.get("key"), str) else "")
        if not isinstance(raw.get("key"), str) or not raw["key"].strip():
            raise _Bad(f"{label}: every entry needs a 'key'")
        entries.append(_validate_entry(raw, label))
    sources = doc.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise _Bad("'sources' must map source ids to citation strings")
    others = []
    for o in doc.get("other_devices", []) or []:
        if not isinstance(o, dict) or not isinstance(o.get("what"), str):
            raise _Bad("each of 'other_devices' needs at least 'what'")
        others.append(OtherDevice(names=tuple(o.get("names", ())),
                                  pci_ids=tuple(p for p in (_norm_pci(x) for x in o.get("pci_ids", ())) if p),
                                  what=o["what"], nearest=o.get("nearest"), sources=tuple(o.get("sources", ()))))
    return entries, dict(sources), others


@functools.lru_cache(maxsize=1)
def _builtin_doc() -> tuple[tuple[dict[str, Any], ...], dict[str, str], tuple[OtherDevice, ...]]:
    text = resources.files("gpuscope").joinpath("data/gpus.json").read_text(encoding="utf-8")
    entries, sources, others = _parse_doc(json.loads(text), "gpuscope/data/gpus.json")
    for e in entries:
        why = _check_cache_bandwidths(e) or _check_scaleup(e)
        if why:  # pragma: no cover - the shipped data is tested
            raise ValueError(f"gpuscope/data/gpus.json: {e['key']}: {why}")
    return tuple(entries), sources, tuple(others)


@functools.lru_cache(maxsize=1)
def _builtin_db() -> SpecDB:
    entries, sources, others = _builtin_doc()
    return SpecDB([_spec_from_dict(e, "builtin") for e in entries], sources, others)


def default_user_specs_path() -> Path:
    """``$XDG_CONFIG_HOME/gpuscope/gpus.json`` (``~/.config/gpuscope/gpus.json`` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "gpuscope" / "gpus.json"


def _user_files(path: str | Path | None) -> list[Path]:
    if path is not None:
        return [Path(path).expanduser()]
    env = os.environ.get(ENV_VAR)
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]
    default = default_user_specs_path()
    return [default] if default.is_file() else []


#: A user's spec file holds a few GPUs (the built-in database of 36 GPUs with sources is ~140 KB).
MAX_SPEC_FILE_BYTES = 16 * 2**20


def load_specs(path: str | Path | None = None) -> SpecDB:
    """The spec database: the built-in entries, then user entries that add or override them.

    User entries come from ``path``, else the file(s) named by ``$GPUSCOPE_SPECS`` (several joined with
    ``os.pathsep``), else ``$XDG_CONFIG_HOME/gpuscope/gpus.json`` (``~/.config/...``) when it exists.
    Entries merge by key: a user entry with an existing key may give only some fields (nested mappings
    such as ``peak_flops_per_s`` merge too); a new key needs at least ``name``, ``mem_bw_bytes_per_s`` and
    one ``peak_flops_per_s`` value. A missing or broken user file raises :class:`InputError` naming it.
    The built-in data is parsed once per process.
    """
    files = _user_files(path)
    if not files:
        return _builtin_db()
    entries, sources, others = _builtin_doc()
    merged: dict[str, dict[str, Any]] = {e["key"]: json.loads(json.dumps(e)) for e in entries}
    origins = {k: "builtin" for k in merged}
    all_sources = dict(sources)
    all_others = list(others)
    for f in files:
        label = str(f)
        try:
            # never a FIFO or a device (a hang, or /dev/zero read for ever), never more than
            # a spec file can hold
            text = read_regular(f, "spec file", MAX_SPEC_FILE_BYTES).decode("utf-8")
        except OSError as exc:
            raise InputError(label, f"cannot read the spec file: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise InputError(label, f"cannot read the spec file: {exc}") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(label, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        except RecursionError:
            raise InputError(label, "not valid JSON: nested too deeply") from None
        try:
            user_entries, user_sources, user_others = _parse_doc(doc, label)
        except _Bad as exc:
            raise InputError(label, str(exc)) from None
        all_sources.update(user_sources)
        all_others.extend(user_others)
        tag = f"user:{label}"
        for ue in user_entries:
            key = ue["key"]
            srcs = dict(ue.get("sources", {}))
            for fld in ue:
                if fld not in _SOURCED_FIELDS or fld in srcs:
                    continue
                if fld == "peak_flops_per_s":
                    for dt in ue[fld]:
                        srcs.setdefault(f"peak_flops_per_s.{dt}", [tag])
                else:
                    srcs.setdefault(fld, [tag])
            if key in merged:
                base = merged[key]
                if ({"pcie_generation", "pcie_lanes"} & set(ue)) and "host_link_bytes_per_s" not in ue:
                    # a new generation or width (a card in a narrower slot): derive the bandwidth again
                    base.pop("host_link_bytes_per_s", None)
                    base.get("derived", {}).pop("host_link_bytes_per_s", None)
                    base.get("sources", {}).pop("host_link_bytes_per_s", None)
                for fld, v in ue.items():
                    if fld == "sources":
                        continue
                    if fld in _DICT_FIELDS and isinstance(base.get(fld), dict):
                        base[fld] = {**base[fld], **v}
                    else:
                        base[fld] = v
                base["sources"] = {**base.get("sources", {}), **srcs}
                origins[key] = origins[key] + f"+{tag}" if not origins[key].endswith(tag) else origins[key]
            else:
                missing = [m for m in ("name", "mem_bw_bytes_per_s") if ue.get(m) is None]
                if not any(v for v in (ue.get("peak_flops_per_s") or {}).values()):
                    missing.append("peak_flops_per_s")
                if missing:
                    raise InputError(label, f"new GPU '{key}' needs {', '.join(missing)} "
                                            f"(or override an existing key; see docs/specs.md)")
                ue["sources"] = srcs
                merged[key] = ue
                origins[key] = tag
    for key, d in merged.items():
        if origins[key] == "builtin":
            continue
        why = _check_cache_bandwidths(d) or _check_scaleup(d)
        if why:
            where = next((str(f) for f in reversed(files) if f"user:{f}" in origins[key]), str(files[-1]))
            raise InputError(where, f"gpu '{key}': {why}")
    specs = []
    for key, d in merged.items():
        try:
            specs.append(_spec_from_dict(d, origins[key]))
        except (KeyError, TypeError, ValueError) as exc:  # pragma: no cover - validated above
            raise InputError(str(files[-1]), f"entry '{key}': {exc}") from None
    return SpecDB(specs, all_sources, all_others, files=tuple(files))


def identify_trace_device(props: Mapping[str, Any], db: SpecDB | None = None) -> Identification:
    """Identify a Kineto ``deviceProperties`` entry against ``db`` (default: :func:`load_specs`)."""
    return (db or load_specs()).identify_trace_device(props)


def link_bytes_per_s(spec_key: str | None) -> float | None:
    """The GPU-GPU link bandwidth the link utilization tracks divide by: every scale-up link of
    the GPU together, bytes/s in ONE direction (the NVLink / XGMI byte counters are summed over
    every link, one direction each), from the spec database (``scaleup_bytes_per_s``, else
    links x per-link). None where the entry does not say, for a PCIe-only card (its peer traffic
    is not on these counters) or for an unknown ``spec_key``."""
    if not spec_key:
        return None
    try:
        spec = load_specs().get(spec_key)
    except Exception:  # an entry that no longer exists: no track rather than a failed export
        return None
    if spec is None or spec.scaleup_link in (None, "pcie"):
        return None
    if spec.scaleup_bytes_per_s:
        return float(spec.scaleup_bytes_per_s)
    if spec.scaleup_links and spec.scaleup_link_bytes_per_s:
        return float(spec.scaleup_links * spec.scaleup_link_bytes_per_s)
    return None
