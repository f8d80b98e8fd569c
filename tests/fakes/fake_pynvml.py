"""A fake ``pynvml`` (nvidia-ml-py) driven by a table of recorded values.

The table (JSON, see ``tables/nvml_*.json``) describes each GPU and, per tick, what each NVML
call returns, in NVML's own units (mW, mJ, percent, KB/s, µs timestamps). A value may be an
error name instead (``"NOT_SUPPORTED"``, ``"GPU_IS_LOST"``, ...): the call then raises the
matching ``NVMLError_*`` exactly as nvidia-ml-py does (same class names, same ``.value``).
``"lost": true`` in a tick makes every call on that GPU raise ``NVMLError_GpuIsLost``.

Tick ``k`` is the table's ``base`` merged with ``ticks[k]`` (the last tick holds after the end);
:meth:`FakeNvml.step` moves every GPU to the next tick. The fake records every call in
``calls`` so tests can check what the collector asked for.
"""
from __future__ import annotations

import copy
import json
import threading
import time
import string
from pathlib import Path
from typing import Any

TABLES = Path(__file__).resolve().parent / "tables"

# --- errors, generated the way pynvml generates them ------------------------------------------
ERROR_CODES = {
    "UNINITIALIZED": 1, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5, "NOT_FOUND": 6, "INSUFFICIENT_SIZE": 7, "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10, "LIBRARY_NOT_FOUND": 12, "FUNCTION_NOT_FOUND": 13, "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16, "LIB_RM_VERSION_MISMATCH": 18, "NO_DATA": 21, "GPU_NOT_FOUND": 28,
    "UNKNOWN": 999,
}


class NVMLError(Exception):
    _valClassMapping: dict[int, type] = {}

    def __new__(cls, value: int):  # type: ignore[misc]
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        names = {v: k for k, v in ERROR_CODES.items()}
        return string.capwords(names.get(self.value, "UNKNOWN").replace("_", " "))


_ERROR_CLASSES: dict[str, type] = {}
for _name, _code in ERROR_CODES.items():
    _cls_name = "NVMLError_" + string.capwords(_name, "_").replace("_", "")

    def _gen(code: int):
        def __new__(cls, *args):  # noqa: N807
            return NVMLError.__new__(cls, code)
        return __new__

    _cls = type(_cls_name, (NVMLError,), {"__new__": _gen(_code)})
    NVMLError._valClassMapping[_code] = _cls
    _ERROR_CLASSES[_cls_name] = _cls


def _error_value(v: Any) -> int | None:
    if isinstance(v, str) and v in ERROR_CODES:
        return ERROR_CODES[v]
    return None


def _raise_if_error(v: Any) -> Any:
    code = _error_value(v)
    if code is not None:
        raise NVMLError(code)
    return v


# --- structs -------------------------------------------------------------------------------
class _Obj:
    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    def __repr__(self) -> str:
        return f"<{self.__dict__}>"


class _Value:
    """The ``c_nvmlValue_t`` union: every member readable, as with ctypes."""

    def __init__(self, v: Any) -> None:
        f = float(v)
        i = int(v)
        self.dVal = f
        self.uiVal = self.ulVal = self.ullVal = self.sllVal = self.siVal = self.usVal = i


class _Handle:
    def __init__(self, index: int, mig_slot: int | None = None) -> None:
        self.index = index
        self.mig_slot = mig_slot

    def __repr__(self) -> str:
        return f"<handle {self.index}{'' if self.mig_slot is None else f'/mig{self.mig_slot}'}>"


class _GpmSample:
    def __init__(self) -> None:
        self.tick: int | None = None
        self.index: int | None = None
        self.gi: int | None = None


class _GpmMetric:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = 0
        self.value = 0.0


class c_nvmlGpmMetricsGet_t:  # noqa: N801 - pynvml's name
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: _GpmSample | None = None
        self.sample2: _GpmSample | None = None
        self.metrics = [_GpmMetric() for _ in range(64)]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_table(name: str) -> dict[str, Any]:
    """A table from ``tests/fakes/tables`` by file name."""
    return json.loads((TABLES / name).read_text())


class FakeNvml:
    """An object that looks like the ``pynvml`` module, answering from ``table``."""

    NVML_SUCCESS = 0
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_DEVICE_ARCH_HOPPER = 9
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_VALUE_TYPE_DOUBLE = 0
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    nvmlMemory_v2 = 0x02000028  # sizeof(nvmlMemory_v2_t) | 2 << 24, as nvidia-ml-py defines it
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
    NVMLError = NVMLError
    c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t

    def __init__(self, table: dict[str, Any] | str, epoch_us: int | None = None) -> None:
        if isinstance(table, str):
            table = load_table(table)
        self.table = table
        #: the tables' timestamps (field values, process samples) are µs relative to this
        self.epoch_us = time.time_ns() // 1000 if epoch_us is None else epoch_us
        self.tick = 0
        self.calls: list[str] = []
        self._cache: dict[tuple[int, int, int], dict[str, Any]] = {}
        self.initialised = 0
        #: a driver that stops answering: the table's ``"hang": {"call": NAME, "after_calls": N}``
        #: lets N calls of NAME through, then blocks every later one until ``release`` is set,
        #: as a wedged GPU blocks NVML (``after_calls`` absent: from the first call)
        self.release = threading.Event()
        self.hung_calls = 0
        self._hang_counts: dict[str, int] = {}
        for k, v in _ERROR_CLASSES.items():
            setattr(self, k, v)
        for k, v in ERROR_CODES.items():
            setattr(self, "NVML_ERROR_" + k, v)

    # -- table access ---------------------------------------------------------------------
    def step(self, n: int = 1) -> None:
        """Move every GPU to the next tick of the table."""
        self.tick += n

    def _dev(self, index: int) -> dict[str, Any]:
        return self.table["devices"][index]

    def _now(self, h: _Handle) -> dict[str, Any]:
        dev = self._dev(h.index)
        ticks = dev.get("ticks") or [{}]
        k = min(self.tick, len(ticks) - 1)
        key = (h.index, k, id(ticks))
        t = self._cache.get(key)
        if t is None:  # merged once per (GPU, tick): the fake should cost little next to the collector
            t = self._cache[key] = _merge(dev.get("base", {}), ticks[k])
        if t.get("lost"):
            raise NVMLError(ERROR_CODES["GPU_IS_LOST"])
        if h.mig_slot is not None:
            mig = dev["mig_devices"][str(h.mig_slot)]
            return _merge(mig.get("base", {}), {"_mig": True})
        return t

    def _maybe_hang(self, fn: str) -> None:
        hang = self.table.get("hang")
        if not hang or hang.get("call") != fn:
            return
        n = self._hang_counts[fn] = self._hang_counts.get(fn, 0) + 1
        if n > int(hang.get("after_calls", 0)) and not self.release.is_set():
            self.hung_calls += 1
            self.release.wait()

    def _get(self, h: _Handle, key: str, fn: str) -> Any:
        self.calls.append(fn)
        self._maybe_hang(fn)
        if not self.initialised:
            raise NVMLError(ERROR_CODES["UNINITIALIZED"])
        t = self._now(h)
        if key not in t:
            raise NVMLError(ERROR_CODES["NOT_SUPPORTED"])
        return _raise_if_error(t[key])

    # -- init -------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        self._maybe_hang("nvmlInit")
        err = self.table.get("init_error")
        if err:
            raise NVMLError(ERROR_CODES[err])
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        self.initialised = max(0, self.initialised - 1)

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.table.get("driver_version", "0.0")

    def nvmlDeviceGetCount(self) -> int:
        self.calls.append("nvmlDeviceGetCount")
        return len(self.table.get("devices", []))

    def nvmlDeviceGetHandleByIndex(self, i: int) -> _Handle:
        self.calls.append("nvmlDeviceGetHandleByIndex")
        _raise_if_error(self._dev(i).get("handle_error"))
        return _Handle(i)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:
        self.calls.append("nvmlDeviceGetHandleByUUID")
        if not self.initialised:
            raise NVMLError(ERROR_CODES["UNINITIALIZED"])
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, d in enumerate(self.table.get("devices", [])):
            if d.get("uuid") == text:
                _raise_if_error(d.get("handle_error"))
                return _Handle(i)
        raise NVMLError(ERROR_CODES["NOT_FOUND"])

    # -- static ---------------------------------------------------------------------------
    def nvmlDeviceGetName(self, h: _Handle) -> str:
        if h.mig_slot is not None:
            return self._dev(h.index)["mig_devices"][str(h.mig_slot)]["name"]
        return self._dev(h.index)["name"]

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        if h.mig_slot is not None:
            return self._dev(h.index)["mig_devices"][str(h.mig_slot)]["uuid"]
        return self._dev(h.index)["uuid"]

    def nvmlDeviceGetPciInfo(self, h: _Handle) -> _Obj:
        d = self._dev(h.index)
        return _Obj(busId=d["busId"].encode(), pciDeviceId=int(d["pciDeviceId"], 16))

    def nvmlDeviceGetSerial(self, h: _Handle) -> str:
        """The device's ``serial`` (absent: NotSupported, as on boards without one)."""
        return _raise_if_error(self._dev(h.index).get("serial", "NOT_SUPPORTED"))

    def nvmlDeviceGetVbiosVersion(self, h: _Handle) -> str:
        return _raise_if_error(self._dev(h.index).get("vbios", "NOT_SUPPORTED"))

    def nvmlDeviceGetArchitecture(self, h: _Handle) -> int:
        return self._dev(h.index)["arch"]

    def nvmlDeviceGetCudaComputeCapability(self, h: _Handle) -> tuple[int, int]:
        return tuple(self._dev(h.index)["cc"])  # type: ignore[return-value]

    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:
        return list(_raise_if_error(self._dev(h.index).get("mig_mode", "NOT_SUPPORTED")))

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        return int(self._dev(h.index).get("max_mig", 7))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, j: int) -> _Handle:
        if str(j) not in self._dev(h.index).get("mig_devices", {}):
            raise NVMLError(ERROR_CODES["NOT_FOUND"])
        return _Handle(h.index, j)

    def nvmlDeviceGetGpuInstanceId(self, h: _Handle) -> int:
        return int(self._dev(h.index)["mig_devices"][str(h.mig_slot)]["gpu_instance_id"])

    def nvmlDeviceGetComputeInstanceId(self, h: _Handle) -> int:
        return int(self._dev(h.index)["mig_devices"][str(h.mig_slot)].get("compute_instance_id", 0))

    # -- per tick ---------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> _Obj:
        gpu, mem = self._get(h, "util", "nvmlDeviceGetUtilizationRates")
        return _Obj(gpu=gpu, memory=mem)

    def nvmlDeviceGetMemoryInfo(self, h: _Handle, version: Any = None) -> _Obj:
        """As the driver answers: the table's ``memory`` holds what nvidia-smi shows (``used``
        without ``reserved``). v1 counts the reserved memory as used (used = total - free);
        v2 reports it apart. ``"v2": "FUNCTION_NOT_FOUND"`` in ``memory`` makes a driver without
        the v2 symbol (pynvml then raises NVMLError_FunctionNotFound); ``"v2"``/``"v1"`` name any
        error either query gives on that device (``"UNKNOWN"``: v2 under WSL; ``"NOT_SUPPORTED"``:
        v1 on a unified-memory GB10). A version other than ``nvmlMemory_v2`` (say the bare ``2``)
        gets FUNCTION_NOT_FOUND, as the real driver answers it."""
        m = self._get(h, "memory", "nvmlDeviceGetMemoryInfo")
        reserved = m.get("reserved", 0)
        free = m["total"] - m["used"] - reserved
        if version:
            if version != self.nvmlMemory_v2:
                raise NVMLError(ERROR_CODES["FUNCTION_NOT_FOUND"])
            _raise_if_error(m.get("v2"))
            return _Obj(version=version, total=m["total"], reserved=reserved, used=m["used"], free=free)
        _raise_if_error(m.get("v1"))
        return _Obj(total=m["total"], used=m["total"] - free, free=free)

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:
        return self._get(h, "temp", "nvmlDeviceGetTemperature")

    def nvmlDeviceGetClockInfo(self, h: _Handle, kind: int) -> int:
        return self._get(h, {1: "clock_sm", 2: "clock_mem"}[kind], "nvmlDeviceGetClockInfo")

    def nvmlDeviceGetMaxClockInfo(self, h: _Handle, kind: int) -> int:
        return self._get(h, {1: "max_clock_sm", 2: "max_clock_mem"}[kind], "nvmlDeviceGetMaxClockInfo")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        return self._get(h, "throttle", "nvmlDeviceGetCurrentClocksEventReasons")

    def nvmlDeviceGetFanSpeed(self, h: _Handle) -> int:
        return self._get(h, "fan", "nvmlDeviceGetFanSpeed")

    def nvmlDeviceGetEncoderUtilization(self, h: _Handle) -> list[int]:
        """``[util %, sampling period µs]`` as nvidia-ml-py returns it (the table's ``encoder_util``)."""
        return list(self._get(h, "encoder_util", "nvmlDeviceGetEncoderUtilization"))

    def nvmlDeviceGetDecoderUtilization(self, h: _Handle) -> list[int]:
        return list(self._get(h, "decoder_util", "nvmlDeviceGetDecoderUtilization"))

    def nvmlDeviceGetPcieReplayCounter(self, h: _Handle) -> int:
        return self._get(h, "pcie_replay", "nvmlDeviceGetPcieReplayCounter")

    def nvmlDeviceGetRemappedRows(self, h: _Handle) -> tuple[int, int, int, int]:
        """``(corrected rows, uncorrected rows, pending, failure occurred)`` as nvidia-ml-py
        returns it (the table's ``remapped_rows``: nvidia-smi -q's "Remapped Rows", Yes/No as 1/0)."""
        return tuple(self._get(h, "remapped_rows", "nvmlDeviceGetRemappedRows"))  # type: ignore[return-value]

    def nvmlDeviceGetPowerUsage(self, h: _Handle) -> int:
        return self._get(h, "power_usage", "nvmlDeviceGetPowerUsage")

    def nvmlDeviceGetTotalEnergyConsumption(self, h: _Handle) -> int:
        return self._get(h, "energy", "nvmlDeviceGetTotalEnergyConsumption")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: _Handle) -> int:
        return self._get(h, "power_limit", "nvmlDeviceGetEnforcedPowerLimit")

    def nvmlDeviceGetPcieThroughput(self, h: _Handle, counter: int) -> int:
        return self._get(h, "pcie_throughput", "nvmlDeviceGetPcieThroughput")[counter]

    def nvmlDeviceGetFieldValues(self, h: _Handle, field_ids: list[Any]) -> list[_Obj]:
        self.calls.append("nvmlDeviceGetFieldValues")
        self._maybe_hang("nvmlDeviceGetFieldValues")
        t = self._now(h)
        fields = t.get("fields", {})
        if isinstance(fields, str):  # the whole call fails (e.g. FUNCTION_NOT_FOUND on an old driver)
            _raise_if_error(fields)
        ts_us = self.epoch_us + int(t.get("field_ts_us", 0))
        # what each field costs the driver to read, in µs of wall time (``"field_cost_us"``:
        # {"83": 4000} is the energy field as an H100 on driver 580 answered it)
        cost_us = t.get("field_cost_us") or {}
        if cost_us:
            time.sleep(sum(float(cost_us.get(str(f[0] if isinstance(f, tuple) else f), 0)) for f in field_ids) / 1e6)
        out = []
        for fid in field_ids:
            fid_, scope = fid if isinstance(fid, tuple) else (fid, 0)
            raw = fields.get(f"{fid_}:{scope}", fields.get(str(fid_)) if scope == 0 else None)
            code = _error_value(raw) if raw is not None else ERROR_CODES["NOT_SUPPORTED"]
            if code is not None:
                out.append(_Obj(fieldId=fid_, scopeId=scope, timestamp=0, latencyUsec=0, valueType=3,
                                nvmlReturn=code, value=_Value(0)))
            else:
                vtype = 0 if isinstance(raw, float) else 3
                out.append(_Obj(fieldId=fid_, scopeId=scope, timestamp=ts_us, latencyUsec=5,
                                valueType=vtype, nvmlReturn=0, value=_Value(raw)))
        return out

    # -- XID events: a device's ``"xid_events"`` maps a tick to the XID codes raised at it;
    # ``"xid_register"`` an error name makes registering fail ----------------------------
    nvmlEventTypeXidCriticalError = 0x8

    def nvmlEventSetCreate(self) -> _Obj:
        self.calls.append("nvmlEventSetCreate")
        return _Obj(handles=[], delivered=set())

    def nvmlDeviceRegisterEvents(self, h: _Handle, types: int, es: _Obj) -> None:
        self.calls.append("nvmlDeviceRegisterEvents")
        err = self._dev(h.index).get("xid_register")
        if err:
            _raise_if_error(err)
        es.handles.append(h)

    def nvmlEventSetWait_v2(self, es: _Obj, timeout_ms: int) -> _Obj:
        for h in es.handles:
            for tick, codes in sorted(self._dev(h.index).get("xid_events", {}).items(), key=lambda kv: int(kv[0])):
                for n, code in enumerate(codes):
                    key = (h.index, tick, n)
                    if int(tick) <= self.tick and key not in es.delivered:
                        es.delivered.add(key)
                        return _Obj(device=h, eventType=0x8, eventData=int(code), timestamp=0,
                                    gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
        raise NVMLError(ERROR_CODES["TIMEOUT"])

    def nvmlEventSetFree(self, es: _Obj) -> None:
        self.calls.append("nvmlEventSetFree")

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[_Obj]:
        procs = self._get(h, "processes", "nvmlDeviceGetComputeRunningProcesses")
        return [_Obj(pid=p["pid"], usedGpuMemory=p.get("usedGpuMemory"), gpuInstanceId=0, computeInstanceId=0)
                for p in procs]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: _Handle) -> list[_Obj]:
        return []

    def nvmlDeviceGetProcessUtilization(self, h: _Handle, last_seen_us: int) -> list[_Obj]:
        samples = self._get(h, "process_util", "nvmlDeviceGetProcessUtilization")
        out = [_Obj(**{**s, "timeStamp": self.epoch_us + s["timeStamp"]}) for s in samples
               if self.epoch_us + s["timeStamp"] > last_seen_us]
        if not out:
            raise NVMLError(ERROR_CODES["NOT_FOUND"])
        return out

    # -- GPM --------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h: _Handle) -> _Obj:
        return _Obj(version=1, isSupportedDevice=1 if self._dev(h.index).get("gpm") else 0)

    def nvmlGpmSampleAlloc(self) -> _GpmSample:
        return _GpmSample()

    def nvmlGpmSampleFree(self, s: _GpmSample) -> None:
        pass

    def nvmlGpmSampleGet(self, h: _Handle, s: _GpmSample) -> _GpmSample:
        self.calls.append("nvmlGpmSampleGet")
        self._now(h)
        s.tick, s.index, s.gi = self.tick, h.index, None
        return s

    def nvmlGpmMigSampleGet(self, h: _Handle, gi: int, s: _GpmSample) -> _GpmSample:
        self.calls.append("nvmlGpmMigSampleGet")
        s.tick, s.index, s.gi = self.tick, h.index, gi
        return s

    def nvmlGpmMetricsGet(self, mg: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
        self.calls.append("nvmlGpmMetricsGet")
        s2 = mg.sample2
        assert s2 is not None and mg.sample1 is not None and mg.sample1 is not s2
        dev = self._dev(s2.index)
        if s2.gi is None:
            ticks = dev.get("ticks") or [{}]
            t = _merge(dev.get("base", {}), ticks[min(s2.tick, len(ticks) - 1)])
            gpm = t.get("gpm", {})
        else:
            mig = next(m for m in dev["mig_devices"].values() if m["gpu_instance_id"] == s2.gi)
            gpm = mig.get("gpm", {})
        for i in range(mg.numMetrics):
            m = mg.metrics[i]
            raw = gpm.get(str(m.metricId), "NOT_SUPPORTED")
            code = _error_value(raw)
            m.nvmlReturn, m.value = (code, 0.0) if code is not None else (0, float(raw))
        return mg
