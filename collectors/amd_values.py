"""Value helpers shared by the amdsmi and amd-smi CLI collectors: numbers out of "N/A", sentinels
and unit strings, checked by range."""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

# NVML's v2 memory query reports the driver's reservation apart from "used"; amdsmi's VRAM
# usage has no such figure.
NO_RESERVED_REASON = "amdsmi reports no driver-reserved memory apart from used (an NVML v2 figure)"
KIB = 1024
#: Why an AMD GPU has no XID metrics.
NO_XID_REASON = "XID errors are NVIDIA's (NVML events); AMD reports RAS errors instead (not read yet)"
MIB = 1024 * 1024
#: Why an AMD GPU has no encoder / decoder utilization: its VCN engine encodes and decodes in
#: one (amdsmi's vcn_activity), with no split into the two NVML reports.
NO_VIDEO_SPLIT_REASON = "AMD's VCN engine encodes and decodes in one (vcn_activity): no encoder / decoder split"
#: Why an AMD GPU has no remapped-row metrics: row remapping is NVIDIA's (Ampere and newer).
NO_ROW_REMAP_REASON = "row remapping is NVIDIA's; AMD retires bad pages instead (amdsmi bad page info, not read)"


# ------------------------------------------------------------------------------------------
# value helpers
# ------------------------------------------------------------------------------------------

#: "not available" values amdsmi puts in unsigned fields (it maps most of them to "N/A" itself,
#: not all: a value equal to one of these is never a reading)
_SENTINELS = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})
#: no amdsmi field is wider than 64 bits, so a larger integer is garbage (and float() of one past
#: ~1.8e308 raises OverflowError instead of giving a number)
_MAX_ABS_INT = 2**64
#: the largest memory size or byte count taken as real: 1 PiB, far above any GPU's memory, far
#: below the 2**63 that the store's BIGINT columns hold
MAX_BYTES = 2**50
#: the largest energy counter taken as real, in J: a 3 kW board running for ten years is 1e12 J;
#: amdsmi's 64-bit accumulator at its 15.259 µJ tick tops out at 2.8e14 J
MAX_ENERGY_J = 1e15
#: the largest link throughput taken as real, in bytes/s (PCIe 6 x16 moves 1.3e11, an MI300X's
#: XGMI links together about 1e12)
MAX_BYTES_PER_S = 1e13


def as_number(v: Any) -> float | None:
    """A finite number from an amdsmi / amd-smi value, or None: for "N/A" and other strings that
    are no number, the sentinels, NaN and infinities (JSON's ``NaN`` / ``Infinity`` literals
    included), integers wider than 64 bits, booleans (a flag is not a reading: ``True`` must not
    become 1 W or 1 %), lists and other objects. ``{"value": x}`` is read as ``x``, one level deep."""
    if isinstance(v, dict) and "value" in v:
        v = v["value"]
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return float(v) if v not in _SENTINELS and -_MAX_ABS_INT < v < _MAX_ABS_INT else None
    if isinstance(v, float):
        return v if math.isfinite(v) and v not in _SENTINELS else None
    if isinstance(v, str):
        try:
            x = float(v.strip().split()[0])  # "550 W" -> 550; "inf" and "nan" parse, and are dropped below
        except (ValueError, IndexError):
            return None
        return x if math.isfinite(x) and x not in _SENTINELS else None
    return None


def is_absent(v: Any) -> bool:
    """Whether ``v`` is amdsmi's way of saying "no value": missing, ``"N/A"``, empty, a sentinel,
    or a list of only those. A value that is none of these and still gives no number is garbage
    (a negative power, NaN, an object with other keys), which the collectors report."""
    if v is None or (isinstance(v, str) and v.strip() in ("", "N/A")):
        return True
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v in _SENTINELS
    if isinstance(v, (list, tuple)):
        return all(is_absent(x) for x in v)
    return False


def shown(v: Any) -> str:
    """A vendor value as it may appear in a reason: its repr, cut short."""
    text = repr(v)
    return text if len(text) <= 60 else text[:59] + "…"


def as_bytes(v: Any) -> int | None:
    """A byte count (memory used, a size): a whole number in 0..MAX_BYTES, else None."""
    x = as_number(v)
    return int(x) if x is not None and 0 <= x <= MAX_BYTES else None


def as_count(v: Any) -> int | None:
    """An event counter (ECC errors) or a bit mask: a whole number in 0..2**63 (a BIGINT), else
    None; a fraction is garbage, not a count."""
    x = as_number(v)
    return int(x) if x is not None and 0 <= x < 2**63 and x == int(x) else None


def as_energy_j(v: Any) -> float | None:
    """An energy counter in J: 0..MAX_ENERGY_J, else None."""
    x = as_number(v)
    return x if x is not None and 0 <= x <= MAX_ENERGY_J else None


def as_bytes_per_s(v: Any) -> float | None:
    """A throughput in bytes/s: 0..MAX_BYTES_PER_S, else None."""
    x = as_number(v)
    return x if x is not None and 0 <= x <= MAX_BYTES_PER_S else None


def as_numbers(v: Any) -> list[float]:
    if not isinstance(v, (list, tuple)):
        return []
    return [x for x in (as_number(i) for i in v) if x is not None]


def as_watts(v: Any) -> float | None:
    """Power in W from W (the documented unit), checked by range: a board draws 0..3000 W."""
    x = as_number(v)
    if x is None or x < 0:
        return None
    return x if x <= 3000 else None


def as_power_cap_w(v: Any) -> float | None:
    """A power cap from µW (amdsmi_get_power_cap_info), mW or W, by range."""
    x = as_number(v)
    if x is None or x <= 0:
        return None
    if x > 1e5:
        x /= 1e6
    elif x > 3000:
        x /= 1e3
    # a cap that is still above what any board draws after the scaling is garbage (2**63 µW)
    return x if x <= 3000 else None


def as_mhz(v: Any) -> float | None:
    x = as_number(v)
    return x if x is not None and 0 < x < 100_000 else None


#: a PCI device id: ``0x74a1`` (amd-smi prints it in hex, with or without 0x)
_PCI_DEVICE_ID = re.compile(r"^(?:0x)?[0-9a-f]{1,4}$")
#: a PCI bus id, ``0000:0c:00.0``
_PCI_BUS_ID = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def as_pci_device_id(v: Any) -> str | None:
    """``0x74a1`` from amdsmi's int or amd-smi's hex string; None for anything that is not one."""
    if isinstance(v, int) and not isinstance(v, bool):
        return f"0x{v:04x}" if 0 <= v < 0xFFFF else None
    text = (as_str(v) or "").lower()
    return text if _PCI_DEVICE_ID.match(text) else None


def as_pci_bus_id(v: Any) -> str | None:
    """A PCI bus id (``0000:0c:00.0``), None for anything else: the spec and calibration lookups
    match devices by it."""
    text = as_str(v)
    return text if text and _PCI_BUS_ID.match(text) else None


def gfx_to_capability(target: str | None) -> str | None:
    """``gfx942`` -> ``9.4``, ``gfx90a`` -> ``9.0``, ``gfx1100`` -> ``11.0`` (as torch reports)."""
    if not target or not target.isascii() or not target.startswith("gfx") or len(target) < 6:
        return None
    digits = target[3:]
    major, minor = digits[:-2], digits[-2]
    if not major.isdigit():
        return None
    try:
        return f"{int(major)}.{int(minor, 16)}"
    except ValueError:
        return None


def try_or_none(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


#: a name, bus id or partition mode longer than this is garbage, not a name
_MAX_STR = 256


def as_str(v: Any) -> str | None:
    """A vendor string (a name, a bus id, a partition mode), or None for "N/A", "", and strings
    that cannot be one: with control characters (random bytes) or longer than 256 characters."""
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if not isinstance(v, str):
        return None
    v = v.strip()
    if v in ("", "N/A") or len(v) > _MAX_STR or not v.isprintable():
        return None
    return v
