"""Value helpers shared by the amdsmi and amd-smi CLI collectors: numbers out of "N/A", sentinels
and unit strings, checked by range."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

# NVML's v2 memory query reports the driver's reservation apart from "used"; amdsmi's VRAM
# usage has no such figure.
_NO_RESERVED = "amdsmi reports no driver-reserved memory apart from used (an NVML v2 figure)"
_KIB = 1024
#: Why an AMD GPU has no XID metrics.
_NO_XID = "XID errors are NVIDIA's (NVML events); AMD reports RAS errors instead (not read yet)"
_MIB = 1024 * 1024


# ------------------------------------------------------------------------------------------
# value helpers
# ------------------------------------------------------------------------------------------


def _num(v: Any) -> float | None:
    """A number from an amdsmi value: None for "N/A", strings, sentinels, bools stay ints."""
    if isinstance(v, dict) and "value" in v:
        v = v["value"]
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        if v in (0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF) or v != v:
            return None
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip().split()[0])
        except (ValueError, IndexError):
            return None
    return None


def _nums(v: Any) -> list[float]:
    if not isinstance(v, (list, tuple)):
        return []
    return [x for x in (_num(i) for i in v) if x is not None]


def _watts(v: Any) -> float | None:
    """Power in W from W (the documented unit), checked by range: a board draws 0..3000 W."""
    x = _num(v)
    if x is None or x < 0:
        return None
    return x if x <= 3000 else None


def _power_cap_w(v: Any) -> float | None:
    """A power cap from µW (amdsmi_get_power_cap_info), mW or W, by range."""
    x = _num(v)
    if x is None or x <= 0:
        return None
    if x > 1e5:
        return x / 1e6
    if x > 3000:
        return x / 1e3
    return x


def _mhz(v: Any) -> float | None:
    x = _num(v)
    return x if x is not None and 0 < x < 100_000 else None


def gfx_to_capability(target: str | None) -> str | None:
    """``gfx942`` -> ``9.4``, ``gfx90a`` -> ``9.0``, ``gfx1100`` -> ``11.0`` (as torch reports)."""
    if not target or not target.startswith("gfx") or len(target) < 6:
        return None
    digits = target[3:]
    major, minor = digits[:-2], digits[-2]
    if not major.isdigit():
        return None
    try:
        return f"{int(major)}.{int(minor, 16)}"
    except ValueError:
        return None


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _str(v: Any) -> str | None:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return v if isinstance(v, str) and v not in ("", "N/A") else None
