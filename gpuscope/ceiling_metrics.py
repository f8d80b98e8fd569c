"""The names of measured ceilings: the metric keys of the ``ceilings`` table, their units, and
the order reports list roof dtypes in. One definition for the store's ceilings table,
``gpuscope calibrate`` and the renderers."""
from __future__ import annotations

#: Roof dtype keys (the spec database's keys), in the order reports list them.
ROOF_DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")

METRIC_MATMUL = "matmul_flops_per_s"
#: Device-memory copy: bytes read plus bytes written per second (the roofline's bandwidth).
METRIC_MEM_BW = "mem_bw_bytes_per_s"
#: Read-only reduction over a large tensor: bytes read per second.
METRIC_MEM_READ = "mem_read_bytes_per_s"
#: L2 copy stream over buffers inside the L2: bytes read plus bytes written per second.
METRIC_L2_BW = "l2_bw_bytes_per_s"
#: L2 read-only stream (a reduction over a buffer inside the L2): bytes read per second.
METRIC_L2_READ = "l2_read_bytes_per_s"
METRICS: tuple[str, ...] = (METRIC_MATMUL, METRIC_MEM_BW, METRIC_MEM_READ, METRIC_L2_BW, METRIC_L2_READ)
UNITS = {METRIC_MATMUL: "FLOP/s", METRIC_MEM_BW: "B/s", METRIC_MEM_READ: "B/s", METRIC_L2_BW: "B/s",
         METRIC_L2_READ: "B/s"}


def dtype_order(dtype: str | None) -> int:
    """Sort key: a roof dtype's place in :data:`ROOF_DTYPES`, unknown dtypes last."""
    return ROOF_DTYPES.index(dtype) if dtype in ROOF_DTYPES else len(ROOF_DTYPES)
