"""Child process of bench_ingest.py: Holistic Trace Analysis on one trace directory.

    python bench/_hta_child.py TRACE_DIR

Parses the traces in TRACE_DIR (HTA's own parser), then computes the GPU kernel breakdown and
the temporal breakdown, as a user of HTA would. Prints one JSON document on stdout with the
numbers the benchmark shows next to gpuscope's. Exit 3 when HTA cannot be imported.

Its wall time and peak memory are measured from outside (the whole process), so nothing here
is timed.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: _hta_child.py TRACE_DIR", file=sys.stderr)
        return 2
    trace_dir = sys.argv[1]

    # HTA logs every parse step at INFO and pandas warns about deprecated downcasting; neither
    # belongs in a benchmark's output. logging.disable wins over whatever levels HTA sets up
    # when it is imported.
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")

    try:
        from hta.trace_analysis import TraceAnalysis
    except Exception as exc:  # ImportError, or an incompatible pandas raising at import
        print(f"cannot import hta: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3

    ta = TraceAnalysis(trace_dir=trace_dir)
    kernel_types, kernels = ta.get_gpu_kernel_breakdown(visualize=False)
    temporal = ta.get_temporal_breakdown(visualize=False)

    out = {
        "kernel_type_us": {
            str(row["kernel_type"]): float(row["sum"]) for _, row in kernel_types.iterrows()
        },
        "kernel_rows": int(len(kernels)),
        "temporal": [
            {str(k): (v.item() if hasattr(v, "item") else v) for k, v in rec.items()}
            for rec in temporal.to_dict("records")
        ],
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
