"""Matching what software reports about a device (name, PCI id, arch, CUs, memory) to a spec entry,
and :class:`SpecDB`, the loaded database that does it."""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from .model import _MEMORY_MATCH_RANGE, _VENDOR_IDS, GpuSpec, Identification, OtherDevice, _norm_pci

# --------------------------------------------------------------------------------------------
# matching
# --------------------------------------------------------------------------------------------

_BRAND_WORDS = {"nvidia", "amd", "ati", "geforce", "radeon", "instinct", "tesla", "quadro", "graphics", "device",
                "gpu", "corporation", "inc"}


# Words that say how a part is packaged or sold, not which part it is ("Instinct MI300X OAM").
# "GRID" is NVIDIA's virtual-GPU brand: "GRID A100" names the A100 family (and stays ambiguous),
# never a whole GPU of its own.
_FILLER_WORDS = {"oam", "accelerator", "module", "grid"}


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def _brandless(text: str) -> str:
    """``_norm`` without vendor, brand and packaging words: "NVIDIA Tesla T4" and "Tesla T4" -> "t4",
    "AMD Instinct MI300X OAM" -> "mi300x". Empty for a name made only of such words."""
    return "".join(t for t in _tokens(text) if t not in _BRAND_WORDS and t not in _FILLER_WORDS)


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", str(text).lower())


def _model_tokens(name: str) -> list[str]:
    """Tokens of a device name that carry a model number (``a100``, ``mi300x``, ``4090``)."""
    return [t for t in _tokens(name) if t not in _BRAND_WORDS and any(c.isdigit() for c in t)]


def _model_words(text: str) -> list[str]:
    """Tokens without vendor, brand and packaging words (``H100 SXM5`` -> ``h100 sxm5``)."""
    return [t for t in _tokens(text) if t not in _BRAND_WORDS and t not in _FILLER_WORDS]


def _is_generic_name(name: str | None) -> bool:
    """True for names that say nothing about the model: empty, "AMD Radeon Graphics", "NVIDIA Graphics Device"."""
    return not name or not _model_tokens(name)


def _token_seq_match(hay: list[str], needle: list[str]) -> bool:
    """``needle`` occurs in ``hay`` as consecutive tokens; the last one may stop before a letter suffix
    (``mi300`` matches ``mi300x`` and ``mi300a``; ``a10`` does not match ``a100``)."""
    n = len(needle)
    if n == 0 or n > len(hay):
        return False
    for i in range(len(hay) - n + 1):
        ok = True
        for j, q in enumerate(needle):
            t = hay[i + j]
            if t == q:
                continue
            if j == n - 1 and t.startswith(q) and t[len(q):].isalpha() and q[-1:].isdigit():
                continue
            ok = False
            break
        if ok:
            return True
    return False


def _vendor_word(text: str | None) -> str | None:
    if not text:
        return None
    t = str(text).strip().lower()
    if t in ("nvidia", "10de", "0x10de") or t.startswith("nvidia"):
        return "nvidia"
    if t in ("amd", "1002", "0x1002", "ati") or t.startswith(("amd", "advanced micro devices")):
        return "amd"
    return t


def _vendor_from_name(name: str | None) -> str | None:
    toks = set(_tokens(name or ""))
    if toks & {"nvidia", "geforce", "tesla", "quadro"}:
        return "nvidia"
    if toks & {"amd", "radeon", "instinct", "ati"}:
        return "amd"
    return None


def _norm_arch_target(text: str | None) -> str | None:
    if not text:
        return None
    t = str(text).strip().lower().split(":")[0]
    m = re.match(r"^gfx([0-9a-f]+)$", t)
    if m:
        return f"gfx{m.group(1)}"
    m = re.match(r"^sm_?(\d+)[a-z]?$", t)
    if m:
        return f"sm_{m.group(1)}"
    return t


def _norm_cc(text: Any) -> str | None:
    if text is None or text == "":
        return None
    # ASCII digits, a few of them: a trace's header may hold "9" * 5000 (int() refuses it) or "²"
    m = re.match(r"^\s*([0-9]{1,9})(?:\.([0-9]{1,9}))?\s*$", str(text))
    if not m:
        return None
    return f"{int(m.group(1))}.{int(m.group(2) or 0)}"


@dataclass(frozen=True)
class _Evidence:
    vendor: str | None
    arch_target: str | None
    compute_capability: str | None
    compute_units: int | None
    memory_bytes: int | None

    def labels(self) -> list[str]:
        out = []
        if self.arch_target:
            out.append("gfx target" if self.arch_target.startswith("gfx") else "arch target")
        elif self.compute_capability:
            out.append("gfx version" if self.vendor == "amd" else "compute capability")
        if self.compute_units is not None:
            out.append("CU count" if self.vendor == "amd" else ("SM count" if self.vendor == "nvidia" else "SM/CU count"))
        if self.memory_bytes is not None:
            out.append("memory")
        return out

    def describe(self) -> str:
        parts = []
        if self.vendor:
            parts.append(self.vendor)
        if self.arch_target:
            parts.append(self.arch_target)
        if self.compute_capability:
            what = "gfx version" if self.vendor == "amd" else "compute capability"
            parts.append(f"{what} {self.compute_capability}")
        if self.compute_units is not None:
            parts.append(f"{self.compute_units} {'CUs' if self.vendor == 'amd' else 'SMs' if self.vendor == 'nvidia' else 'SMs/CUs'}")
        if self.memory_bytes is not None:
            parts.append(f"{self.memory_bytes / 2**30:.1f} GiB")
        return ", ".join(parts) if parts else "no properties"


def _memory_matches(spec: GpuSpec, reported: int) -> bool | None:
    if not spec.memory_bytes or spec.unified_memory:
        return None
    ratio = reported / (spec.memory_bytes / 1e9 * 2**30)
    return _MEMORY_MATCH_RANGE[0] <= ratio <= _MEMORY_MATCH_RANGE[1]


def _mismatches(spec: GpuSpec, ev: _Evidence) -> list[str]:
    out = []
    if ev.vendor and spec.vendor and ev.vendor != spec.vendor:
        out.append(f"vendor {ev.vendor} (entry: {spec.vendor})")
    if ev.arch_target and spec.arch_target and ev.arch_target != _norm_arch_target(spec.arch_target):
        out.append(f"arch target {ev.arch_target} (entry: {spec.arch_target})")
    if ev.compute_capability and spec.compute_capability and ev.compute_capability != _norm_cc(spec.compute_capability):
        out.append(f"compute capability {ev.compute_capability} (entry: {spec.compute_capability})")
    if ev.compute_units is not None and spec.compute_units is not None and ev.compute_units != spec.compute_units:
        out.append(f"{ev.compute_units} {spec.compute_unit_kind or 'SM/CU'}s (entry: {spec.compute_units})")
    if ev.memory_bytes is not None and spec.memory_bytes and _memory_matches(spec, ev.memory_bytes) is False:
        out.append(f"{ev.memory_bytes / 2**30:.1f} GiB of memory (entry: {spec.memory_bytes / 1e9:g} GB)")
    return out


def _alike(specs: list[GpuSpec]) -> bool:
    """True when the entries' bandwidth and fp16/bf16 peaks agree within 1% (MI210 and an MI250 GCD)."""
    def close(values: list[float | None]) -> bool:
        if any(v is None for v in values):
            return len(set(values)) == 1
        nums = [float(v) for v in values if v is not None]
        return max(nums) <= min(nums) * 1.01
    return (close([s.mem_bw_bytes_per_s for s in specs])
            and all(close([s.peak_flops_per_s.get(d) for s in specs]) for d in ("fp16", "bf16")))


_ADD_HINT = "add it with a file in $GPUSCOPE_SPECS (see docs/specs.md)"


class SpecDB:
    """The loaded spec database: built-in entries plus user entries. Use :func:`load_specs`."""

    def __init__(self, specs: Iterable[GpuSpec], sources: Mapping[str, str] | None = None,
                 other_devices: Iterable[OtherDevice] = (), files: tuple[Path, ...] = ()) -> None:
        self._specs: tuple[GpuSpec, ...] = tuple(specs)
        self._by_key = {s.key: s for s in self._specs}
        self.sources: dict[str, str] = dict(sources or {})
        self.other_devices: tuple[OtherDevice, ...] = tuple(other_devices)
        self.files = files
        # normalised strings a person may type (key, aliases, display name, reported names) -> entries
        self._typed: dict[str, list[GpuSpec]] = {}
        # normalised reported names (NVML / amd-smi / torch) -> entries
        self._reported: dict[str, list[GpuSpec]] = {}
        # the same two without vendor and brand words, so that "NVIDIA Tesla T4", "Tesla T4" and "T4"
        # meet, and "AMD Instinct MI300X" meets "Instinct MI300X OAM"
        self._typed_brandless: dict[str, list[GpuSpec]] = {}
        self._reported_brandless: dict[str, list[GpuSpec]] = {}
        def index_under(spec: GpuSpec, texts: set[str] | tuple[str, ...], plain: dict[str, list[GpuSpec]],
                        brandless: dict[str, list[GpuSpec]]) -> None:
            for text in texts:
                for index, norm in ((plain, _norm(text)), (brandless, _brandless(text))):
                    if norm and spec not in index.setdefault(norm, []):
                        index[norm].append(spec)

        for s in self._specs:
            index_under(s, {s.key, s.name, *s.aliases, *s.names}, self._typed, self._typed_brandless)
            index_under(s, s.names, self._reported, self._reported_brandless)

    # -- lookup ---------------------------------------------------------------------------

    def get(self, key: str) -> GpuSpec | None:
        """The entry with this key (case-insensitive), or None."""
        return self._by_key.get(str(key).strip().lower())

    def all(self) -> tuple[GpuSpec, ...]:
        """Every entry, in the data's order."""
        return self._specs

    def keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self._specs)

    def __iter__(self) -> Iterator[GpuSpec]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def citation(self, source_id: str) -> str | None:
        """The citation text of a source id (``"S4"``, ``"user:PATH"``), or None."""
        if source_id.startswith("user:") and source_id not in self.sources:
            return f"the user spec file {source_id[5:]}"
        return self.sources.get(source_id)

    def _other_by_name(self, text: str) -> OtherDevice | None:
        n = _norm(text)
        for o in self.other_devices:
            if any(_norm(x) == n for x in o.names):
                return o
        return None

    def _other_by_pci(self, pci: str) -> OtherDevice | None:
        for o in self.other_devices:
            if pci in o.pci_ids:
                return o
        return None

    def matches(self, text: str) -> tuple[list[GpuSpec], list[OtherDevice], bool]:
        """(entries, other devices, exact) that ``text`` names; exact when a key or name matched whole."""
        n = _norm(text)
        if not n:
            return [], [], False
        exact = self._typed.get(n, [])
        if exact:
            return list(exact), [], True
        other = self._other_by_name(text)
        if other:
            return [], [other], True
        # the same without vendor and brand words ("NVIDIA Tesla T4", "Instinct MI300X OAM")
        b = _brandless(text)
        if b:
            exact = self._typed_brandless.get(b, [])
            if exact:
                return list(exact), [], True
            # no brandless match against other products: "h100" is the family a person means,
            # not the 94GB variant that NVML happens to call "NVIDIA H100"
        q = _model_words(text)
        found: list[GpuSpec] = []
        for s in self._specs:
            if any(_token_seq_match(_model_words(t), q) for t in (s.key, s.name, *s.aliases, *s.names)):
                found.append(s)
        others = [o for o in self.other_devices if any(_token_seq_match(_model_words(t), q) for t in o.names)]
        return found, others, False

    def find(self, text: str) -> GpuSpec:
        """The entry ``text`` names: a key, alias or listed name, case-insensitively and ignoring spaces,
        dashes and underscores (``mi300x``, ``h100-sxm``, ``NVIDIA H100 80GB HBM3``, ``AMD_Instinct_MI300X``).
        A unique partial name (``H100 SXM5``) is accepted too.

        Raises :class:`InputError` for an unknown name, a device the database knows it does not describe,
        or an ambiguous name (``h100``, ``a100``), listing the candidates.
        """
        label = str(text).strip() or repr(text)
        found, others, exact = self.matches(text)
        if len(found) == 1 and not others:
            return found[0]
        if found or others:
            if not found and len(others) == 1 and exact:
                o = others[0]
                nearest = f"; the nearest entry is '{o.nearest}', whose numbers differ" if o.nearest else ""
                raise InputError(label, f"this is the {o.what}, which the spec database does not describe"
                                        f"{nearest}; {_ADD_HINT}")
            # keys a user can pass; a device the database does not describe is no candidate
            cands = [f"{s.key} ({s.name})" for s in found] or [f"{o.names[0]} (not in the database)" for o in others]
            raise InputError(label, f"ambiguous GPU name: it matches {', '.join(cands)}; pass one of the keys")
        raise InputError(label, f"unknown GPU (known: {', '.join(self.keys())}; {_ADD_HINT})")

    # -- identification -------------------------------------------------------------------

    def identify(self, *, name: str | None = None, pci_id: str | None = None, arch_target: str | None = None,
                 compute_units: int | None = None, memory_bytes: int | None = None, vendor: str | None = None,
                 compute_capability: str | None = None, warp_size: int | None = None) -> Identification:
        """Identify a device from what software reports about it.

        Rules, in order: a MIG instance name is never a whole GPU; an exact reported name (NVML, amd-smi,
        torch) or PCI id identifies the entry (``exact=True``), with the CU count deciding between entries
        that share a name (MI250X vs MI250 GCDs) and a note when other properties disagree; names and ids
        the database knows to be other products (H100 94GB, L40, RX 7900 XT ...) give ``spec=None``.
        Otherwise (AMD traces often say "AMD Radeon Graphics" or nothing) the entry is inferred from at
        least two of arch target / compute capability, CU count and memory size, restricted to the model
        family when the name has a model number: one fit gives ``exact=False`` and a note; several or none
        give ``spec=None`` with the candidates. Packages that software sees as several devices (MI250X)
        are never the answer: their per-GCD entries are.
        """
        name = (name or "").strip()
        v = _vendor_word(vendor) or _vendor_from_name(name)
        pci_norm = _norm_pci(pci_id, v) if pci_id else None
        if v is None and pci_norm:
            v = _VENDOR_IDS.get(pci_norm[:4])
        at = _norm_arch_target(arch_target)
        cc = _norm_cc(compute_capability)
        if at and re.match(r"^\d+(\.\d+)?$", at):  # "9.0" given as a target
            cc, at = cc or _norm_cc(at), None
        if v is None and at:
            v = "amd" if at.startswith("gfx") else "nvidia" if at.startswith("sm_") else None
        if v is None and warp_size == 64:
            v = "amd"
        cu = int(compute_units) if isinstance(compute_units, (int, float)) and compute_units > 0 else None
        mem = int(memory_bytes) if isinstance(memory_bytes, (int, float)) and memory_bytes > 0 else None
        ev = _Evidence(v, at, cc, cu, mem)
        devices = [s for s in self._specs if s.visible_as is None]
        notes: list[str] = []

        mig = re.search(r"\s+MIG\s+(\S+)", name)
        if mig:
            base = self.identify(name=name[:mig.start()], pci_id=pci_id, vendor=v)
            keys = (base.spec.key,) if base.spec else base.candidates
            whole = f"'{keys[0]}'" if len(keys) == 1 else "a GPU"
            return Identification(None, "name (MIG instance)", False, keys,
                                  f"'{name}' is a MIG instance ({mig.group(1)}) of {whole}: it has a fraction of "
                                  "that GPU's SMs, memory and bandwidth, so the entry's numbers do not apply")

        if name and not _is_generic_name(name):
            hits = [s for s in self._reported.get(_norm(name), []) if s.visible_as is None]
            if hits:
                return self._decide(hits, ev, "name", f"the name '{name}'", pci_norm)
            other = self._other_by_name(name)
            if other:
                return self._other(other, f"'{name}'", "name")
            # a reported name with a vendor or brand word more or less ("NVIDIA Tesla T4" for
            # "Tesla T4", "AMD Instinct MI300X OAM"): the same model number, so the same part
            hits = [s for s in self._reported_brandless.get(_brandless(name), []) if s.visible_as is None]
            if hits:
                return self._decide(hits, ev, "name", f"the name '{name}'", pci_norm)

        if pci_norm:
            hits = [s for s in devices if pci_norm in s.pci_ids]
            if hits:
                inexact = [s for s in hits if pci_norm in s.pci_ids_inexact]
                if inexact:
                    why = "; ".join(s.pci_id_notes.get(pci_norm, "not unique to this entry") for s in inexact)
                    return Identification(None, "pci id", False, tuple(s.key for s in hits),
                                          f"PCI id {pci_norm} alone does not decide: {why}")
                return self._decide(hits, ev, "pci id", f"PCI id {pci_norm}", None)
            other = self._other_by_pci(pci_norm)
            if other:
                return self._other(other, f"PCI id {pci_norm}", "pci id")
            notes.append(f"PCI id {pci_norm} is not in the database")
        elif pci_id:
            notes.append(f"'{pci_id}' is not a PCI id like 10de:2330")

        family = None
        if name and not _is_generic_name(name):
            family = _model_tokens(name)[0]
            notes.append(f"the name '{name}' is not listed")
        elif name:
            notes.append(f"the name '{name}' is generic")
        else:
            notes.append("no name")
        return self._infer(devices, ev, family, notes)

    def identify_trace_device(self, props: Mapping[str, Any]) -> Identification:
        """Identify a Kineto ``deviceProperties`` entry (``name``, ``totalGlobalMem``, ``computeMajor``,
        ``computeMinor``, ``numSms``, ``warpSize``, maybe ``gcnArchName``). On ROCm ``numSms`` is the CU
        count and ``computeMajor.computeMinor`` is the gfx version (gfx90a: 9.0, gfx942: 9.4)."""
        if not isinstance(props, Mapping):
            return Identification(None, "none", False, (), "no device properties")
        name = props.get("name")
        major, minor = props.get("computeMajor"), props.get("computeMinor")
        cc = f"{major}.{minor if minor is not None else 0}" if isinstance(major, int) else None
        gcn = props.get("gcnArchName")
        vendor = _vendor_from_name(name if isinstance(name, str) else None)
        if vendor is None and gcn:
            vendor = "amd"
        warp = props.get("warpSize") if isinstance(props.get("warpSize"), int) else None
        num = props.get("numSms")
        mem = props.get("totalGlobalMem")
        return self.identify(name=name if isinstance(name, str) else None,
                             arch_target=gcn if isinstance(gcn, str) else None,
                             compute_capability=cc, compute_units=num if isinstance(num, int) else None,
                             memory_bytes=mem if isinstance(mem, int) else None, vendor=vendor, warp_size=warp)

    def _other(self, other: OtherDevice, what: str, via: str) -> Identification:
        cands = (other.nearest,) if other.nearest else ()
        nearest = f"; the nearest entry is '{other.nearest}', whose numbers differ" if other.nearest else ""
        return Identification(None, via, False, cands,
                              f"{what} is the {other.what}, which the spec database does not describe{nearest}; "
                              f"{_ADD_HINT}")

    def _decide(self, hits: list[GpuSpec], ev: _Evidence, via: str, what: str, pci_norm: str | None) -> Identification:
        if len(hits) > 1:
            fit = [s for s in hits if not _mismatches(s, ev)]
            if ev.compute_units is not None and len(fit) == 1:
                return self._confirm(fit[0], ev, f"{via} + CU count", what, pci_norm, exact=True)
            keys = tuple(s.key for s in (fit or hits))
            return Identification(None, via, False, keys,
                                  f"{what} is listed by {', '.join(s.key for s in hits)}; "
                                  + ("the CU count tells them apart and none was given" if ev.compute_units is None
                                     else f"the properties ({ev.describe()}) do not single one out"))
        return self._confirm(hits[0], ev, via, what, pci_norm, exact=True)

    def _confirm(self, spec: GpuSpec, ev: _Evidence, via: str, what: str, pci_norm: str | None,
                 exact: bool) -> Identification:
        problems = _mismatches(spec, ev)
        if pci_norm and pci_norm not in spec.pci_ids and spec.pci_ids:
            problems.append(f"PCI id {pci_norm} (entry: {', '.join(spec.pci_ids)})")
        if problems:
            return Identification(spec, via, False, (spec.key,),
                                  f"{what} says '{spec.key}', but the device reports {'; '.join(problems)}: "
                                  "perhaps a variant the database does not describe")
        return Identification(spec, via, exact, (spec.key,), None)

    def _infer(self, devices: list[GpuSpec], ev: _Evidence, family: str | None, notes: list[str]) -> Identification:
        labels = ev.labels()
        fit = [s for s in devices if not _mismatches(s, ev)]
        if family:
            fam = [s for s in fit if any(family in _tokens(t) or _token_seq_match(_tokens(t), [family])
                                         for t in (s.key, s.name, *s.aliases, *s.names))]
            if not fam and fit:
                notes.append(f"its properties resemble {', '.join(s.key for s in fit)}, but its model number "
                             f"'{family}' does not")
            fit = fam
        prefix = "; ".join(notes)
        if len(labels) < 2:
            cands = tuple(s.key for s in fit) if labels else ()
            return Identification(None, "none", False, cands,
                                  f"{prefix}; too little to go on ({ev.describe()}): identifying by properties "
                                  "needs two of arch target / compute capability, SM or CU count and memory size")
        via = " + ".join(labels)
        if len(fit) == 1:
            s = fit[0]
            unverified = [x for x, known in (("CU count", s.compute_units is not None),
                                             ("memory", bool(s.memory_bytes) and not s.unified_memory)) if not known]
            extra = f" (the entry does not give its {' or '.join(unverified)})" if unverified else ""
            return Identification(s, via, False, (s.key,),
                                  f"{prefix}; inferred from {ev.describe()}{extra}: the only entry that fits, "
                                  "but not confirmed by a name or PCI id")
        if len(fit) > 1:
            same_txt = (" (for a roofline they are alike: memory bandwidth and 16-bit peaks within 1%)"
                        if _alike(fit) else "")
            return Identification(None, via, False, tuple(s.key for s in fit),
                                  f"{prefix}; {ev.describe()} fits {', '.join(s.key for s in fit)}{same_txt}; "
                                  "name the GPU explicitly to choose")
        hint = ""
        if ev.compute_units:
            for s in devices:
                if (s.compute_units and s.compute_units != ev.compute_units and s.compute_units % ev.compute_units == 0
                        and (not ev.vendor or s.vendor == ev.vendor)
                        and (not ev.compute_capability or _norm_cc(s.compute_capability) == ev.compute_capability)):
                    hint = (f"; {ev.compute_units} is 1/{s.compute_units // ev.compute_units} of {s.key}'s "
                            f"{s.compute_units}: a compute partition (CPX/DPX) of it?")
                    break
        return Identification(None, via, False, (),
                              f"{prefix}; no entry fits {ev.describe()}{hint}; {_ADD_HINT}")
