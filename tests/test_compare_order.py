"""`compare` lists matched ops in one order whatever the process: ops with the same difference
come in run A's order (a set's order changes with PYTHONHASHSEED)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO

_SCRIPT = """
import json, sys
from gpuscope.analyzers.compare import compare_docs

def doc(name, ops):
    return {"run": {"id": 1, "name": name}, "devices": [], "roofline_us": {},
            "time_us": {"compute": 1.0, "communication": 0.0, "memory": 0.0, "idle": 0.0},
            "kernels": [], "ops": ops}

def op(name, us):
    return {"name": name, "input_dims": None, "input_types": None, "count": 1, "kernel_us": us,
            "bound": "memory_bound", "pct_of_roof": None}

names = [f"aten::op{i}" for i in range(12)]
a = doc("a", [op(n, 10.0) for n in names])
b = doc("b", [op(n, 12.0) for n in names])  # every op 2 us slower: all tie
print(json.dumps([m["name"] for m in compare_docs(a, b)["matched"]]))
"""


def test_tied_ops_keep_run_as_order_in_every_process() -> None:
    orders = []
    for seed in ("1", "2", "3", "4"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, cwd=REPO,
                             check=True).stdout
        orders.append(json.loads(out))
    assert orders[0] == [f"aten::op{i}" for i in range(12)]
    assert all(o == orders[0] for o in orders)
